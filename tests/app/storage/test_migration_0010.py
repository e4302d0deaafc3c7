"""Migration 0010 (tool calls in the search) on a database written at 0009 that already holds a call."""

from __future__ import annotations

from pathlib import Path

from app.conversations.store import ConversationStore
from app.storage.db import Database
from tests.app.storage.test_migration_0005 import migrate, raw
from tests.app.storage.test_migration_0008 import add_message, raw_write
from tests.app.storage.test_migration_0009 import database_at_0008


def database_at_0009(path: Path) -> None:
    database_at_0008(path)
    migrate(path, "0009")
    add_message(path, "assistant", "Let me look it up.", message_id=20)
    raw_write(
        path,
        "INSERT INTO message_parts (message_id, position, kind, name, text, call_id) "
        "VALUES (20, 0, 'tool_call', 'get_weather', '{\"city\": \"Reykjavik\"}', 'c4ll0aaaa')",
    )


def test_0010_finds_the_calls_stored_before_it(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0009(path)
    db = Database.open(path, tmp_path / "backups")
    try:
        [hit] = ConversationStore(db).search("reykjavik")
        assert (hit.message_id, hit.in_tool_call) == (20, True)
    finally:
        db.dispose()
    # Attachments are parts too, but not words anyone wrote: only the call is indexed.
    assert raw(path, "SELECT rowid FROM tool_calls_fts") == raw(
        path, "SELECT id FROM message_parts WHERE kind = 'tool_call'"
    )


def test_0010_downgrades_to_0009_and_back(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0009(path)
    before = raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name")
    Database.open(path, tmp_path / "backups").dispose()
    migrate(path, "0009", down=True)
    assert raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name") == before
    migrate(path, "head")
    assert raw(path, "SELECT count(*) FROM tool_calls_fts WHERE tool_calls_fts MATCH 'reykjavik'") == [(1,)]
