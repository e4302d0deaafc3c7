"""Migration 0003 (message trees, pins, trash, settings, provenance, search) on a populated database."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine, event

import app.storage.db as db_module
from app.conversations.store import ConversationStore
from app.errors import DatabaseError
from app.storage.db import Database

HEAD = ScriptDirectory.from_config(db_module._alembic_config()).get_current_head()
T0 = "2025-01-01T00:00:00.000000+00:00"
CONVERSATIONS = 40
MESSAGES = 4000
WORDS = ("river", "mountain", "bread", "garden", "lantern", "harbour", "violin", "comet", "meadow", "anchor")


def raw(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql, params).fetchall()


def database_at_0002(path: Path) -> dict[int, list[int]]:
    """Schema 0002 holding thousands of messages whose conversations interleave (as in real use, where the
    user switches between chats), some deleted from the middle and the end, and one reply cut off mid-stream.

    Returns each conversation's remaining message ids, in order.
    """
    engine = create_engine(f"sqlite:///{path}")
    config = db_module._alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0002")
    engine.dispose()
    rng = random.Random(3)
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?, ?, ?, ?)",
            [(c, f"Chat {c} about {WORDS[c % len(WORDS)]}", T0, T0) for c in range(1, CONVERSATIONS + 1)],
        )
        rows = []
        for i in range(1, MESSAGES + 1):
            conversation = rng.randint(1, CONVERSATIONS)
            role = "user" if i % 2 else "assistant"
            rows.append(
                (i, conversation, role, f"message {i} mentions {rng.choice(WORDS)}", "complete", T0, T0)
            )
        conn.executemany(
            "INSERT INTO messages (id, conversation_id, role, content, status, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.execute("DELETE FROM messages WHERE id % 97 = 0")
        conn.execute(
            "INSERT INTO messages (id, conversation_id, role, content, status, created_at, updated_at) "
            f"VALUES ({MESSAGES + 1}, 1, 'assistant', 'half a reply about zeppelins', 'streaming', ?, ?)",
            (T0, T0),
        )
        # Messages at the end are gone too: their ids must still never be handed out again.
        conn.execute(f"DELETE FROM messages WHERE id BETWEEN {MESSAGES - 5} AND {MESSAGES}")
    chains: dict[int, list[int]] = {}
    for message_id, conversation_id in raw(path, "SELECT id, conversation_id FROM messages ORDER BY id"):
        assert isinstance(message_id, int) and isinstance(conversation_id, int)
        chains.setdefault(conversation_id, []).append(message_id)
    return chains


def test_0003_turns_every_conversation_into_a_chain_and_indexes_it(tmp_path: Path) -> None:
    path, backups = tmp_path / "hearth.sqlite3", tmp_path / "backups"
    chains = database_at_0002(path)
    total = sum(len(ids) for ids in chains.values())
    assert total > 3000

    database = Database.open(path, backups)
    try:
        [backup] = list(backups.iterdir())
        # Named after the revision the database is migrated to: the head, whatever came after 0003.
        assert backup.name.endswith(f"-pre-{HEAD}.sqlite3")
        assert raw(backup, "SELECT version_num FROM alembic_version") == [("0002",)]
        assert raw(backup, "SELECT count(*) FROM messages") == [(total,)]
        assert raw(path, "SELECT version_num FROM alembic_version") == [(HEAD,)]

        store = ConversationStore(database)
        for conversation_id, ids in chains.items():
            conversation = store.get_conversation(conversation_id)
            assert conversation.message_count == len(ids)
            assert conversation.current_leaf_id == ids[-1]
            assert (conversation.pinned, conversation.trashed_at, conversation.settings) == (
                False,
                None,
                None,
            )
            path_ids = [m.id for m in store.list_messages(conversation_id)]
            assert path_ids == ids
            parents = [m.parent_id for m in store.list_messages(conversation_id)]
            assert parents == [None, *ids[:-1]]
        assert len(store.list_conversations()) == CONVERSATIONS

        # Every finished message and every title is searchable; the reply cut off mid-stream is not yet.
        hits = store.search("harbour", limit=10_000)
        expected = raw(path, "SELECT count(*) FROM messages WHERE content LIKE '%harbour%'")[0][0]
        assert len([h for h in hits if h.message_id is not None]) == expected
        assert sorted(h.title for h in hits if h.message_id is None) == sorted(
            c.title for c in store.list_conversations() if "harbour" in c.title
        )
        assert store.search("zeppelins") == []
        assert store.mark_interrupted_streaming() == 1
        assert [h.snippet for h in store.search("zeppelins")] == ["half a reply about \x02zeppelins\x03"]

        with closing(sqlite3.connect(path)) as conn:
            conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
            conn.execute("INSERT INTO conversations_fts(conversations_fts) VALUES ('integrity-check')")
        assert raw(path, "PRAGMA foreign_key_check") == []
        assert database.quick_check() == "ok"

        # New messages continue the chain, with ids past every one ever used.
        store.delete_message(MESSAGES + 1)
        added = store.add_message(1, "user", "after the migration")
        assert added.id > MESSAGES + 1
        assert added.parent_id == chains[1][-2]
    finally:
        database.dispose()


def test_0003_downgrades_to_0002_and_back(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    chains = database_at_0002(path)
    Database.open(path, tmp_path / "backups").dispose()
    engine = create_engine(f"sqlite:///{path}")
    config = db_module._alembic_config()
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.downgrade(config, "0002")
        columns = {row[1] for row in raw(path, "PRAGMA table_info(messages)")}
        assert "parent_id" not in columns
        assert raw(path, "SELECT name FROM sqlite_master WHERE name LIKE '%fts%'") == []
        assert raw(path, "SELECT count(*) FROM messages") == [(sum(len(ids) for ids in chains.values()),)]
        assert raw(path, "SELECT seq FROM sqlite_sequence WHERE name = 'messages'") == [(MESSAGES + 1,)]
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            command.upgrade(config, "head")
    finally:
        engine.dispose()
    assert raw(path, "SELECT version_num FROM alembic_version") == [(HEAD,)]


def test_a_disk_that_fills_up_during_0003_leaves_the_database_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, backups = tmp_path / "hearth.sqlite3", tmp_path / "backups"
    chains = database_at_0002(path)
    before = raw(path, "SELECT id, conversation_id, content FROM messages ORDER BY id")
    create_engine_for_migration = db_module._create_engine

    def full_disk(*args: Any, **kwargs: Any) -> Engine:
        engine = create_engine_for_migration(*args, **kwargs)

        def cap(dbapi_connection: sqlite3.Connection, _record: object) -> None:
            # Room for a few more pages only: rebuilding the messages table needs far more.
            pages = dbapi_connection.execute("PRAGMA page_count").fetchone()[0]
            dbapi_connection.execute(f"PRAGMA max_page_count={pages + 8}")

        event.listen(engine, "connect", cap)
        return engine

    monkeypatch.setattr(db_module, "_create_engine", full_disk)
    with pytest.raises(DatabaseError, match="disk is full") as caught:
        Database.open(path, backups)
    [backup] = list(backups.iterdir())
    assert str(backup) in str(caught.value)
    assert raw(path, "SELECT version_num FROM alembic_version") == [("0002",)]
    assert raw(path, "SELECT id, conversation_id, content FROM messages ORDER BY id") == before
    assert raw(path, "PRAGMA integrity_check") == [("ok",)]

    monkeypatch.undo()
    database = Database.open(path, backups)
    try:
        assert [m.id for m in ConversationStore(database).list_messages(1)] == chains[1]
    finally:
        database.dispose()
