"""Small file-system helpers shared by everything that writes files atomically."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_directory(directory: Path) -> None:
    """Make a rename into `directory` durable. Windows cannot open a directory to fsync it (NTFS journals the
    rename itself), so this is POSIX only."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
