"""The frozen app finds the starter model inside its bundle (packaging/hearth.spec puts it in models/)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.library.installed import STARTER_FILENAME, STARTER_NAME, STARTER_SHA256, STARTER_SOURCE, ModelLibrary
from app.storage.db import Database


@pytest.fixture
def library(tmp_path: Path) -> Iterator[ModelLibrary]:
    db = Database.open(tmp_path / "home" / "hearth.sqlite3", tmp_path / "home" / "backups")
    yield ModelLibrary(db, tmp_path / "home" / "models")
    db.dispose()


def _freeze(monkeypatch: pytest.MonkeyPatch, bundle: Path) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(bundle), raising=False)


def test_frozen_app_registers_the_bundled_starter_model(
    library: ModelLibrary, starter_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bundle = tmp_path / "bundle"
    (bundle / "models").mkdir(parents=True)
    bundled = bundle / "models" / STARTER_FILENAME
    bundled.symlink_to(starter_model)
    _freeze(monkeypatch, bundle)

    model = library.register_starter()

    assert model is not None
    assert (model.name, model.sha256, model.source) == (STARTER_NAME, STARTER_SHA256, STARTER_SOURCE)
    assert library.register_starter() == model


def test_frozen_app_built_without_the_starter_model_has_none(
    library: ModelLibrary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _freeze(monkeypatch, tmp_path / "bundle-without-models")

    assert library.register_starter() is None
    assert library.list_models() == []
