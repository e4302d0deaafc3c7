"""The folders the user added for `hearth models scan` to look in: `model-folders.json` in the Hearth home.

{"schema_version": 1, "folders": ["/absolute/path", ...]}
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Final

from app.errors import HearthError
from app.settings import read_section, write_text_atomically

FOLDERS_FILE: Final = "model-folders.json"
SCHEMA_VERSION: Final = 1


def folders_path(home: Path) -> Path:
    return Path(home) / FOLDERS_FILE


def list_folders(home: Path) -> list[Path]:
    """In the order they were added. Never fails: a damaged file is set aside and logged."""
    entries = read_section(folders_path(home), "folders", list, "model folders")
    return [Path(entry) for entry in entries or [] if isinstance(entry, str) and entry]


def add_folder(home: Path, folder: Path) -> Path:
    """Add a folder (as its absolute, resolved path); HearthError when it is not a folder. Adding one that
    is listed already changes nothing."""
    resolved = Path(folder).expanduser().resolve()
    if not resolved.is_dir():
        raise HearthError(f"{folder} is not a folder.")
    folders = list_folders(home)
    if resolved not in folders:
        _write(home, [*folders, resolved])
    return resolved


def remove_folder(home: Path, folder: Path) -> Path:
    """Stop scanning a folder (given as listed, or as any path to it); its files are not touched."""
    folders = list_folders(home)
    given = Path(folder).expanduser()
    wanted = {given, given.absolute(), given.resolve()}
    kept = [f for f in folders if f not in wanted]
    if len(kept) == len(folders):
        listed = ", ".join(str(f) for f in folders) or "none"
        raise HearthError(f"{folder} is not one of the model folders. They are: {listed}.")
    _write(home, kept)
    return next(f for f in folders if f in wanted)


def _write(home: Path, folders: list[Path]) -> None:
    path = folders_path(home)
    data = {"schema_version": SCHEMA_VERSION, "folders": [str(f) for f in folders]}
    try:
        write_text_atomically(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise HearthError(f"Could not save the model folders in {path}: {exc.strerror or exc}.") from exc
