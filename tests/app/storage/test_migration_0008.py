"""Migration 0008 (tool messages) on a database written at 0007: `messages` is rebuilt to take role
`tool`, and everything that hangs off it (parts, search, counts, the ids already used) comes through."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from app.storage.db import Database
from tests.app.storage.test_migration_0005 import SHA, T0, database_at_0004, migrate, raw


def database_at_0007(path: Path) -> None:
    database_at_0004(path)
    migrate(path, "0007")
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(
            "INSERT INTO files (sha256, size_bytes, mime_type, created_at) VALUES (?, 5, 'text/plain', ?)",
            (SHA, T0),
        )
        conn.execute(
            "INSERT INTO message_parts (message_id, position, kind, file_sha256, name) "
            "VALUES (1, 0, 'attachment', ?, 'notes.txt')",
            (SHA,),
        )
    # A message deleted at the end: its id must not be handed out again.
    add_message(path, "assistant", "gone soon", conversation=2, parent=3, message_id=9)
    raw_write(path, "DELETE FROM messages WHERE id = 9")


def add_message(
    path: Path,
    role: str,
    content: str,
    *,
    conversation: int = 1,
    parent: int = 2,
    message_id: int | None = None,
) -> None:
    raw_write(
        path,
        "INSERT INTO messages (id, conversation_id, parent_id, role, content, status, created_at, "
        "updated_at) VALUES (?, ?, ?, ?, ?, 'complete', ?, ?)",
        (message_id, conversation, parent, role, content, T0, T0),
    )


def raw_write(path: Path, sql: str, params: tuple[object, ...] = ()) -> None:
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(sql, params)


def schema(path: Path) -> list[tuple[object, ...]]:
    return raw(path, "SELECT type, name, sql FROM sqlite_master ORDER BY type, name")


def test_0008_takes_tool_messages_and_keeps_everything_else(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0007(path)
    before = schema(path)
    # To 0008 only: later revisions change other tables.
    migrate(path, "0008")
    assert raw(path, "SELECT version_num FROM alembic_version") == [("0008",)]
    assert raw(path, "PRAGMA integrity_check") == [("ok",)]
    # Only the one constraint changed; indexes, triggers and the search view are all back.
    after = schema(path)
    assert [(t, n) for t, n, _ in after] == [(t, n) for t, n, _ in before]
    changed = [(n, s) for (t, n, s), (_, _, old) in zip(after, before, strict=True) if s != old]
    assert [n for n, _ in changed] == ["messages"]
    assert "CHECK (role IN ('system', 'user', 'assistant', 'tool'))" in str(changed[0][1])
    assert raw(path, "SELECT id, role, content FROM messages ORDER BY id") == [
        (1, "user", "what about lighthouses"),
        (2, "assistant", "lighthouses guide ships"),
        (3, "user", "hello"),
    ]
    assert raw(path, "SELECT message_id, name FROM message_parts") == [(1, "notes.txt")]
    assert raw(path, "SELECT message_count FROM conversations ORDER BY id") == [(2,), (1,)]

    add_message(path, "tool", "the tide is at 14:02")
    # Ids keep counting from the highest ever used (9), the count trigger and the search index work.
    assert raw(path, "SELECT id FROM messages WHERE role = 'tool'") == [(10,)]
    assert raw(path, "SELECT message_count FROM conversations WHERE id = 1") == [(3,)]
    assert raw(path, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'tide'") == [(10,)]
    with pytest.raises(sqlite3.IntegrityError, match="ck_messages_role"):
        add_message(path, "robot", "")


def test_0008_downgrades_tool_messages_to_replies_and_back(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0007(path)
    before = schema(path)
    Database.open(path, tmp_path / "backups").dispose()
    add_message(path, "tool", "the tide is at 14:02")
    migrate(path, "0007", down=True)
    assert schema(path) == before, "the schema text is exactly what 0007 wrote"
    assert raw(path, "SELECT id, role FROM messages WHERE id = 10") == [(10, "assistant")]
    assert raw(path, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'tide'") == [(10,)]
    assert raw(path, "PRAGMA integrity_check") == [("ok",)]
    migrate(path, "head")
    assert raw(path, "SELECT count(*) FROM messages") == [(4,)]
