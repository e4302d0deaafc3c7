"""Each test's home holds only the app folders it lays out."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.app.model_scan.layouts import isolate_app_folders


@pytest.fixture(autouse=True)
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolate_app_folders(monkeypatch, tmp_path / "user-home")
