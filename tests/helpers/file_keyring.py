"""A keyring backend in a JSON file, so that two processes in a test share one keyring as they would the
system's. Tests only: it keeps secrets in plain text. The file is named by HEARTH_TEST_KEYRING_FILE; a child
process selects it with PYTHON_KEYRING_BACKEND=tests.helpers.file_keyring.FileKeyring."""

from __future__ import annotations

import json
import os
from pathlib import Path

from filelock import FileLock
from keyring.backend import KeyringBackend

ENV = "HEARTH_TEST_KEYRING_FILE"


class _OnlyWhenNamed:
    """The backend's priority: keyring looks at every backend class when it picks one, and this one must be
    chosen only by name, in a process given its file."""

    def __get__(self, instance: object, owner: type | None = None) -> float:
        if ENV not in os.environ:
            raise RuntimeError(f"{ENV} is not set")
        return 1.0


class FileKeyring(KeyringBackend):
    priority = _OnlyWhenNamed()

    def __init__(self, path: Path | None = None) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.path = path if path is not None else Path(os.environ[ENV])
        self._lock = FileLock(str(self.path) + ".lock")

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        assert isinstance(data, dict)
        return {str(k): str(v) for k, v in data.items()}

    def _save(self, entries: dict[str, str]) -> None:
        self.path.write_text(json.dumps(entries), encoding="utf-8")

    def get_password(self, service: str, username: str) -> str | None:
        with self._lock:
            return self._load().get(f"{service}\n{username}")

    def set_password(self, service: str, username: str, password: str) -> None:
        with self._lock:
            entries = self._load()
            entries[f"{service}\n{username}"] = password
            self._save(entries)

    def delete_password(self, service: str, username: str) -> None:
        with self._lock:
            entries = self._load()
            entries.pop(f"{service}\n{username}", None)
            self._save(entries)

    def entries(self) -> dict[str, str]:
        with self._lock:
            return self._load()
