"""Finding GGUF files under a folder another app (or the user) keeps models in: bounded and never stuck.

Folder links are followed (people link a models folder onto another disk) but every folder is entered
once, by device and inode, so a link loop ends; the depth and the number of folders are capped, so a
folder such as the home directory added by mistake ends too. A folder that cannot be read is noted and
skipped.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

MAX_DEPTH: Final = 12
MAX_FOLDERS: Final = 20_000


@dataclass
class Walk:
    """What one walk found: GGUF files (links included, as the path they were found at) and notes on what
    it could not read or where it stopped."""

    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def gguf_files(root: Path, *, max_depth: int = MAX_DEPTH, max_folders: int = MAX_FOLDERS) -> Walk:
    walk = Walk()
    seen: set[tuple[int, int]] = set()
    pending: list[tuple[Path, int]] = [(root, 0)]
    while pending:
        folder, depth = pending.pop()
        try:
            info = folder.stat()
        except OSError as exc:
            walk.notes.append(f"cannot read {folder}: {exc.strerror or exc}")
            continue
        if (info.st_dev, info.st_ino) in seen:
            continue
        seen.add((info.st_dev, info.st_ino))
        if len(seen) > max_folders:
            walk.notes.append(f"stopped after {max_folders} folders under {root}")
            break
        try:
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda e: e.name)
        except OSError as exc:
            walk.notes.append(f"cannot read {folder}: {exc.strerror or exc}")
            continue
        for entry in listed:
            path = Path(entry.path)
            try:
                mode = path.stat().st_mode
            except OSError:
                # A dangling link: what it named was moved or deleted; nothing to list.
                continue
            if stat.S_ISDIR(mode):
                if depth + 1 > max_depth:
                    walk.notes.append(f"did not look deeper than {max_depth} folders into {path}")
                elif not entry.name.startswith("."):
                    pending.append((path, depth + 1))
            elif stat.S_ISREG(mode) and entry.name.lower().endswith(".gguf"):
                walk.files.append(path)
    walk.files.sort()
    return walk
