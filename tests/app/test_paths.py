"""Where the bundled embedding model is found: an override, the venv, the frozen bundle."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.errors import HearthError
from app.paths import EMBEDDING_MODEL_ENV, bundled_embedding_model


def _model(directory: Path, name: str = "multilingual-e5-small-q4_0.gguf") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(b"GGUF")
    return path


def test_the_override_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mine = _model(tmp_path / "mine", "bge-m3.gguf")
    _model(tmp_path / "venv" / "share" / "hearth" / "models")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(mine))
    assert bundled_embedding_model() == mine.resolve()


def test_an_override_naming_no_file_is_an_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(EMBEDDING_MODEL_ENV, str(tmp_path / "gone.gguf"))
    with pytest.raises(
        HearthError, match=r"^HEARTH_EMBEDDING_MODEL names .*gone\.gguf, which is not a file$"
    ):
        bundled_embedding_model()


def test_the_venvs_model_then_the_frozen_bundles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(EMBEDDING_MODEL_ENV, raising=False)
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    assert bundled_embedding_model() is None

    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path / "bundle"), raising=False)
    frozen = _model(tmp_path / "bundle" / "models")
    assert bundled_embedding_model() == frozen

    built = _model(tmp_path / "venv" / "share" / "hearth" / "models")
    assert bundled_embedding_model() == built
