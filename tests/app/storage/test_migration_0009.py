"""Migration 0009 (the tool servers a conversation may call) on a database written at 0008."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from app.conversations.store import ConversationStore
from app.storage.db import Database
from tests.app.storage.test_migration_0005 import HEAD, migrate, raw
from tests.app.storage.test_migration_0008 import database_at_0007


def database_at_0008(path: Path) -> None:
    database_at_0007(path)
    migrate(path, "0008")


def test_0009_keeps_every_conversation_without_tools(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0008(path)
    before = raw(path, "SELECT id, title, message_count FROM conversations ORDER BY id")
    db = Database.open(path, tmp_path / "backups")
    try:
        store = ConversationStore(db)
        conversations = store.list_conversations()
        assert sorted((c.id, c.title, c.message_count) for c in conversations) == before
        assert {c.tools for c in conversations} == {()}
        # And the new column takes a choice, read back in the list and one by one.
        first = conversations[0].id
        assert store.set_conversation_tools(first, ["maths", "files", "maths"]).tools == ("maths", "files")
        assert {c.id: c.tools for c in store.list_conversations()}[first] == ("maths", "files")
        assert store.set_conversation_tools(first, []).tools == ()
    finally:
        db.dispose()
    assert raw(path, "SELECT version_num FROM alembic_version") == [(HEAD,)]
    assert {tools for (tools,) in raw(path, "SELECT tool_servers_json FROM conversations")} == {None}


def test_0009_downgrades_to_0008_and_back(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0008(path)
    before = raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name")
    db = Database.open(path, tmp_path / "backups")
    try:
        ConversationStore(db).set_conversation_tools(1, ["maths"])
    finally:
        db.dispose()
    migrate(path, "0008", down=True)
    assert raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name") == before
    migrate(path, "head")
    assert raw(path, "SELECT tool_servers_json FROM conversations WHERE id = 1") == [(None,)]


def test_0009_downgrade_on_an_sqlite_that_cannot_drop_columns_leaves_the_column_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0008(path)
    db = Database.open(path, tmp_path / "backups")
    try:
        ConversationStore(db).set_conversation_tools(1, ["maths"])
    finally:
        db.dispose()
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 34, 1))
    migrate(path, "0008", down=True)
    assert raw(path, "SELECT version_num FROM alembic_version") == [("0008",)]
    assert "tool_servers_json" in {row[1] for row in raw(path, "PRAGMA table_info(conversations)")}
    # Back up again: the column that stayed is not added twice, and the choice made before is gone (the
    # older code in between could not have kept it up to date).
    monkeypatch.undo()
    migrate(path, "head")
    assert raw(path, "SELECT version_num FROM alembic_version") == [(HEAD,)]
    assert raw(path, "SELECT tool_servers_json FROM conversations WHERE id = 1") == [(None,)]
