"""Migration 0011 (per-model load settings) on a database written at 0010 that holds a model."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from app.library.installed import ModelLibrary
from app.library.load_settings import ModelLoadSettings
from app.storage.db import Database
from tests.app.storage.test_migration_0005 import HEAD, SHA, T0, migrate, raw


def database_at_0010(path: Path) -> None:
    migrate(path, "0010")
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO models (name, path, sha256, size_bytes, source, added_at) VALUES (?, ?, ?, ?, ?, ?)",
            ("old-model", "/models/old.gguf", SHA, 42, "import:/x/old.gguf", T0),
        )


def test_0011_loads_every_model_as_before(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0010(path)
    db = Database.open(path, tmp_path / "backups")
    try:
        [model] = ModelLibrary(db, tmp_path / "models").list_models()
        assert (model.name, model.load_settings) == ("old-model", ModelLoadSettings())
    finally:
        db.dispose()
    assert raw(path, "SELECT version_num FROM alembic_version") == [(HEAD,)]
    assert raw(path, "SELECT load_settings_json FROM models") == [(None,)]


def test_0011_downgrades_to_0010_and_back(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0010(path)
    before = raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name")
    Database.open(path, tmp_path / "backups").dispose()
    migrate(path, "0010", down=True)
    assert raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name") == before
    assert raw(path, "SELECT name, size_bytes FROM models") == [("old-model", 42)]
    migrate(path, "head")
    assert raw(path, "SELECT load_settings_json FROM models") == [(None,)]
