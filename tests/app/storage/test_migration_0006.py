"""Migration 0006 (the collections each conversation answers from) on a database written at 0005."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from app.conversations.store import ConversationStore
from app.storage.db import Database
from tests.app.storage.test_migration_0005 import HEAD, T0, migrate, raw, tables


def database_at_0005(path: Path) -> None:
    """Two conversations and two collections, as Hearth left them at 0005."""
    migrate(path, "0005")
    with closing(sqlite3.connect(path)) as conn, conn:
        for c in (1, 2):
            conn.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?, ?, ?, ?)",
                (c, f"Chat {c}", T0, T0),
            )
            conn.execute(
                "INSERT INTO collections (id, name, created_at, updated_at) VALUES (?, ?, ?, ?)",
                (c, f"notes {c}", T0, T0),
            )


def test_0006_adds_the_table_and_every_conversation_starts_answering_from_nothing(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0005(path)
    db = Database.open(path, tmp_path / "backups")
    try:
        store = ConversationStore(db)
        assert [c.collections for c in store.list_conversations()] == [(), ()]
        assert store.set_conversation_collections(1, ["notes 2", "notes 1"]).collections == (
            "notes 2",
            "notes 1",
        )
    finally:
        db.dispose()
    assert raw(path, "SELECT version_num FROM alembic_version") == [(HEAD,)]
    assert raw(path, "SELECT conversation_id, collection_id, position FROM conversation_collections") == [
        (1, 2, 0),
        (1, 1, 1),
    ]
    # Cascades both ways, with foreign keys on as Hearth opens the database.
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("DELETE FROM collections WHERE id = 2")
        assert conn.execute("SELECT collection_id FROM conversation_collections").fetchall() == [(1,)]
        conn.execute("DELETE FROM conversations WHERE id = 1")
        assert conn.execute("SELECT count(*) FROM conversation_collections").fetchall() == [(0,)]


def test_0006_downgrades_to_0005_and_back(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0005(path)
    before = raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name")
    Database.open(path, tmp_path / "backups").dispose()
    migrate(path, "0005", down=True)
    assert raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name") == before
    migrate(path, "head")
    assert "conversation_collections" in tables(path)
