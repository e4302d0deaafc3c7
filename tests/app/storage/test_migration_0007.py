"""Migration 0007 (the projector a vision model is loaded with) on a database written at 0006."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from app.library.installed import ModelLibrary
from app.storage.db import Database
from tests.app.storage.test_migration_0005 import HEAD, SHA, T0, migrate, raw


def database_at_0006(path: Path) -> None:
    migrate(path, "0006")
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO models (name, path, sha256, size_bytes, source, added_at) VALUES (?, ?, ?, ?, ?, ?)",
            ("old-model", "/models/old.gguf", SHA, 42, "import:/x/old.gguf", T0),
        )


def constraints(path: Path) -> tuple[bool, list[str]]:
    """Whether ids are never reused (AUTOINCREMENT), and the table's named constraints."""
    [(sql,)] = raw(path, "SELECT sql FROM sqlite_master WHERE name = 'models'")
    lines = [line.strip().rstrip(",") for line in str(sql).splitlines()]
    return "AUTOINCREMENT" in str(sql), sorted(line for line in lines if line.startswith("CONSTRAINT"))


def test_0007_keeps_every_model_as_a_text_model(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0006(path)
    db = Database.open(path, tmp_path / "backups")
    try:
        [model] = ModelLibrary(db, tmp_path / "models").list_models()
        assert (model.name, model.projector, model.vision) == ("old-model", None, False)
    finally:
        db.dispose()
    assert raw(path, "SELECT version_num FROM alembic_version") == [(HEAD,)]
    assert raw(path, "SELECT projector_json FROM models") == [(None,)]


def test_0007_downgrades_to_0006_and_back(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0006(path)
    before = raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name")
    Database.open(path, tmp_path / "backups").dispose()
    migrate(path, "0006", down=True)
    assert raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name") == before
    assert raw(path, "SELECT name, size_bytes FROM models") == [("old-model", 42)]
    migrate(path, "head")
    assert raw(path, "SELECT projector_json FROM models") == [(None,)]


def test_0007_downgrades_on_an_sqlite_that_cannot_drop_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before 3.35 the table is rebuilt: its text is written anew, but the columns, the constraints and ids
    that are never reused (AUTOINCREMENT) are as they were."""
    path = tmp_path / "hearth.sqlite3"
    database_at_0006(path)
    before = (raw(path, "PRAGMA table_info(models)"), constraints(path))
    Database.open(path, tmp_path / "backups").dispose()
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    migrate(path, "0006", down=True)
    assert (raw(path, "PRAGMA table_info(models)"), constraints(path)) == before
