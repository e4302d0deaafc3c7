"""Models other apps already downloaded (Ollama, LM Studio, the Hugging Face cache, GPT4All, Jan) and
folders the user added: found, checked and added to the library where they lie. No Qt.

`scan_models` lists them (fast: headers only, no hashing); `add_found` registers the chosen ones in place
(hashing each once); `folders` keeps the user's own folders.
"""

from app.model_scan.add import Added, add_found, source_for
from app.model_scan.candidates import APPS
from app.model_scan.folders import add_folder, list_folders, remove_folder
from app.model_scan.scan import FoundModel, ScanResult, Searched, scan_models

__all__ = [
    "APPS",
    "Added",
    "FoundModel",
    "ScanResult",
    "Searched",
    "add_folder",
    "add_found",
    "list_folders",
    "remove_folder",
    "scan_models",
    "source_for",
]
