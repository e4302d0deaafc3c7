"""The model files among what the user dropped on the window: GGUF files, and the GGUF models in dropped
folders (walked like the folders the scan searches). Projectors and parts 2..N of split models are not
models of their own: importing a model brings its projector and its other parts with it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from app.library.installed import SPLIT_NAME
from app.model_scan.walk import gguf_files
from inference.projector import is_projector_filename


def is_model_drop(path: Path) -> bool:
    """Whether a dropped path is for the library (a GGUF file or a folder), not a file to attach."""
    return path.is_dir() or path.name.lower().endswith(".gguf")


def dropped_models(paths: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """Blocking (walks folders): the model files to import, in order, each once; and notes on what could not
    be read."""
    found: list[Path] = []
    notes: list[str] = []
    for path in paths:
        if path.is_dir():
            walk = gguf_files(path)
            found += walk.files
            notes += walk.notes
        else:
            found.append(path)
    models = [path for path in dict.fromkeys(found) if _is_model(path)]
    return models, notes


def _is_model(path: Path) -> bool:
    if is_projector_filename(path.name):
        return False
    split = SPLIT_NAME.match(path.name)
    return split is None or int(split.group("index")) == 1
