"""Every file Hearth writes lives under one home directory resolved here."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from app.errors import HearthError
from app.fsutil import make_private_dir, tighten

HOME_ENV = "HEARTH_HOME"


@dataclass(frozen=True)
class HearthPaths:
    home: Path

    @property
    def db_path(self) -> Path:
        return self.home / "hearth.sqlite3"

    @property
    def models_dir(self) -> Path:
        return self.home / "models"

    @property
    def logs_dir(self) -> Path:
        return self.home / "logs"

    @property
    def log_file(self) -> Path:
        return self.logs_dir / "hearth.log"

    @property
    def runner_log_file(self) -> Path:
        return self.logs_dir / "runner.log"

    @property
    def cpu_kernels_file(self) -> Path:
        """Safer CPU kernels chosen after a crash here (inference.ggml_backends.CpuKernelMemory)."""
        return self.home / "cpu-kernels.json"

    @property
    def settings_path(self) -> Path:
        return self.home / "settings.json"

    @property
    def attachments_dir(self) -> Path:
        """Attached files by content (app.attachments.files.FileStore)."""
        return self.home / "attachments"

    @property
    def backups_dir(self) -> Path:
        return self.home / "backups"

    @property
    def instance_lock(self) -> Path:
        """Held by the running window (app.qt.single_instance); `hearth restore` refuses while it is."""
        return self.home / "hearth.lock"

    def ensure(self) -> HearthPaths:
        """Create the home owner-only (0700; files in it are created 0600), and tighten a home an older
        Hearth created readable to every local user: its folders and the files directly in them. Model files
        are not walked (there can be thousands); the models folder's own mode already hides them."""
        for directory in (self.home, self.models_dir, self.logs_dir):
            make_private_dir(directory)
        tighten(self.backups_dir)
        for directory in (self.home, self.logs_dir, self.backups_dir):
            if directory.is_dir():
                for entry in directory.iterdir():
                    if entry.is_file():
                        tighten(entry)
        return self


def resolve_home(cli_home: str | os.PathLike[str] | None = None) -> HearthPaths:
    """`--home` wins over HEARTH_HOME, which wins over the platform's data directory."""
    if cli_home:
        raw = Path(cli_home)
    elif os.environ.get(HOME_ENV):
        raw = Path(os.environ[HOME_ENV])
    else:
        raw = Path(platformdirs.user_data_dir("Hearth", appauthor=False))
    return HearthPaths(raw.expanduser().resolve())


EMBEDDING_MODEL_ENV = "HEARTH_EMBEDDING_MODEL"
# What packaging/embedding_model.py builds (its type suffix may change with the build).
EMBEDDING_MODEL_PATTERN = "multilingual-e5-small-*.gguf"


def bundled_embedding_model() -> Path | None:
    """The embedding model Hearth ships, None when this installation has none.

    HEARTH_EMBEDDING_MODEL names another file (a missing one is an error, not a fall-back); then the file
    scripts/bootstrap.sh builds into the virtual environment (sys.prefix/share/hearth/models); then the
    frozen bundle's `models/` folder, where the starter model is too (app/library/installed.py).
    """
    override = os.environ.get(EMBEDDING_MODEL_ENV)
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise HearthError(f"{EMBEDDING_MODEL_ENV} names {path}, which is not a file")
        return path.resolve()
    places = [Path(sys.prefix) / "share" / "hearth" / "models"]
    frozen_dir = getattr(sys, "_MEIPASS", None) if getattr(sys, "frozen", False) else None
    if frozen_dir is not None:
        places.append(Path(frozen_dir) / "models")
    for place in places:
        found = sorted(place.glob(EMBEDDING_MODEL_PATTERN))
        if found:
            return found[-1]
    return None
