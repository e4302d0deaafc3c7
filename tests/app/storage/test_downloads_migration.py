"""Migration 0002 (Hub provenance columns) on a populated database written at 0001."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

import app.storage.db as db_module
from app.conversations.store import ConversationStore
from app.library.installed import ModelLibrary
from app.storage.db import Database


def raw(path: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


def database_at_0001(path: Path) -> None:
    """What Hearth 0.1 left behind: schema 0001 with conversations, messages and installed models."""
    engine = create_engine(f"sqlite:///{path}")
    config = db_module._alembic_config()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0001")
    engine.dispose()
    t = "'2025-01-01T00:00:00.000000+00:00'"
    with closing(sqlite3.connect(path)) as db, db:
        db.execute(f"INSERT INTO conversations VALUES (1, 'Kept', NULL, {t}, {t}, 'old-model')")
        db.execute(
            "INSERT INTO messages (conversation_id, role, content, status, created_at, updated_at) "
            f"VALUES (1, 'user', 'hello', 'complete', {t}, {t})"
        )
        db.execute(
            "INSERT INTO models (name, path, sha256, size_bytes, source, added_at) VALUES "
            f"('old-model', '/models/old.gguf', '{'ab' * 32}', 42, 'import:/x/old.gguf', "
            "'2025-01-01T00:00:00.000000+00:00')"
        )


def head_revision() -> str:
    head = ScriptDirectory.from_config(db_module._alembic_config()).get_current_head()
    assert head is not None
    return head


def test_0002_adds_provenance_and_keeps_every_row(tmp_path: Path) -> None:
    path, backups = tmp_path / "hearth.sqlite3", tmp_path / "backups"
    database_at_0001(path)

    database = Database.open(path, backups)
    try:
        assert raw(path, "SELECT version_num FROM alembic_version") == [(head_revision(),)]
        [backup] = list(backups.iterdir())
        assert raw(backup, "SELECT version_num FROM alembic_version") == [("0001",)]
        assert raw(backup, "SELECT count(*) FROM models") == [(1,)]
        assert raw(path, "SELECT count(*) FROM messages") == [(1,)]
        [model] = ModelLibrary(database, tmp_path / "models").list_models()
        assert (model.name, model.size_bytes, model.source) == ("old-model", 42, "import:/x/old.gguf")
        assert (model.repo_id, model.revision, model.filename, model.parts) == (None, None, None, ())
        assert ConversationStore(database).get_conversation(1).model_name == "old-model"
        assert database.quick_check() == "ok"
    finally:
        database.dispose()


def test_0002_upgrades_and_downgrades_on_its_own(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0001(path)
    engine = create_engine(f"sqlite:///{path}")
    config = db_module._alembic_config()

    def columns() -> set[object]:
        return {row[1] for row in raw(path, "PRAGMA table_info(models)")}

    provenance = {"repo_id", "revision", "filename", "parts_json"}
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.upgrade(config, "0002")
    assert provenance <= columns()
    with engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, "0001")
    engine.dispose()
    assert not provenance & columns()
    assert raw(path, "SELECT name, size_bytes FROM models") == [("old-model", 42)]
