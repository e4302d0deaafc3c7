"""Migration 0005 (message parts, stored files, collections, document chunks and their index) on a populated
database written at 0004."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

import app.storage.db as db_module
from app.conversations.store import ConversationStore
from app.documents.index import ChunkIndex, ChunkInput
from app.storage.db import Database

HEAD = ScriptDirectory.from_config(db_module._alembic_config()).get_current_head()
T0 = "2025-01-01T00:00:00.000000+00:00"
SHA = "ab" * 32
NEW_TABLES = {
    "files",
    "message_parts",
    "collections",
    "collection_roots",
    "collection_files",
    "document_chunks",
    "document_chunks_fts",
    "document_texts",
}


def raw(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql, params).fetchall()


def tables(path: Path) -> set[str]:
    return {str(row[0]) for row in raw(path, "SELECT name FROM sqlite_master WHERE type = 'table'")}


def migrate(path: Path, revision: str, *, down: bool = False) -> None:
    engine = create_engine(f"sqlite:///{path}")
    config = db_module._alembic_config()
    try:
        with engine.begin() as conn:
            config.attributes["connection"] = conn
            (command.downgrade if down else command.upgrade)(config, revision)
    finally:
        engine.dispose()


def database_at_0004(path: Path) -> None:
    """Two conversations with a few finished messages, searchable, as Hearth left them at 0004."""
    migrate(path, "0004")
    with closing(sqlite3.connect(path)) as conn, conn:
        for c in (1, 2):
            conn.execute(
                "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?, ?, ?, ?)",
                (c, f"Chat {c}", T0, T0),
            )
        conn.executemany(
            "INSERT INTO messages (id, conversation_id, parent_id, role, content, status, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, 'complete', ?, ?)",
            [
                (1, 1, None, "user", "what about lighthouses", T0, T0),
                (2, 1, 1, "assistant", "lighthouses guide ships", T0, T0),
                (3, 2, None, "user", "hello", T0, T0),
            ],
        )
        conn.execute("UPDATE conversations SET current_leaf_id = 2 WHERE id = 1")
        conn.execute("UPDATE conversations SET current_leaf_id = 3 WHERE id = 2")


def test_0005_adds_the_content_tables_and_keeps_every_conversation(tmp_path: Path) -> None:
    path, backups = tmp_path / "hearth.sqlite3", tmp_path / "backups"
    database_at_0004(path)
    assert not NEW_TABLES & tables(path)

    database = Database.open(path, backups)
    try:
        [backup] = list(backups.iterdir())
        assert raw(backup, "SELECT version_num FROM alembic_version") == [("0004",)]
        assert raw(path, "SELECT version_num FROM alembic_version") == [(HEAD,)]
        assert tables(path) >= NEW_TABLES
        store = ConversationStore(database)
        assert [m.content for m in store.list_messages(1)] == [
            "what about lighthouses",
            "lighthouses guide ships",
        ]
        assert len(store.search("lighthouses")) == 2
        assert store.get_conversation(1).message_count == 2

        # The passage index works on the migrated file.
        index = ChunkIndex(database)
        index.add_chunks(SHA, [ChunkInput("lighthouses and harbours", "page 1", 0)], None, None)
        assert [hit.text for hit in index.search("harbours", None, scope={SHA})] == [
            "lighthouses and harbours"
        ]
        assert raw(path, "PRAGMA foreign_key_check") == []
        assert database.quick_check() == "ok"
    finally:
        database.dispose()


def test_message_parts_go_with_their_message_and_keep_their_file(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0004(path)
    database = Database.open(path, tmp_path / "backups")
    try:
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute(
                "INSERT INTO files (sha256, size_bytes, mime_type, created_at) "
                "VALUES (?, 10, 'application/pdf', ?)",
                (SHA, T0),
            )
            conn.execute(
                "INSERT INTO message_parts (message_id, position, kind, file_sha256, name, mime_type, "
                "meta_json) VALUES (1, 0, 'attachment', ?, 'guide.pdf', 'application/pdf', '{\"pages\": 3}')",
                (SHA,),
            )
            conn.execute(
                "INSERT INTO message_parts (message_id, position, kind, text, meta_json) "
                "VALUES (2, 0, 'source', 'lighthouses guide', '{\"location\": \"page 2\"}')"
            )
        assert raw(path, "SELECT is_error FROM message_parts ORDER BY id") == [(0,), (0,)]
        ConversationStore(database).delete_conversation(1)
        assert raw(path, "SELECT count(*) FROM message_parts") == [(0,)]
        # The file stays until whoever stores files sees that nothing uses it.
        assert raw(path, "SELECT sha256 FROM files") == [(SHA,)]
    finally:
        database.dispose()


FILE = "INSERT INTO files (sha256, size_bytes, mime_type, created_at) VALUES "
PART = "INSERT INTO message_parts (message_id, position, kind"
CHUNK = "INSERT INTO document_chunks (content_sha256, ordinal, location, text"
NONSENSE = (
    # A part of a message that does not exist, naming a file that is not stored, two in one place.
    f"{PART}) VALUES (99, 0, 'source')",
    f"{PART}, file_sha256) VALUES (1, 0, 'attachment', '{SHA}')",
    f"{PART}) VALUES (1, 0, 'source'), (1, 0, 'source')",
    f"{PART}) VALUES (1, 0, 'picture')",
    f"{FILE} ('{SHA.upper()}', 1, 'x', '{T0}')",
    f"{FILE} ('{SHA}', -1, 'x', '{T0}')",
    f"INSERT INTO collections (name, created_at, updated_at) VALUES ('docs', '{T0}', '{T0}')",
    "INSERT INTO collection_roots (collection_id, path) VALUES (42, '/x')",
    "INSERT INTO collection_files (collection_id, path, size_bytes, mtime_ns, status) "
    "VALUES (42, '/x', 1, 1, 'pending')",
    "INSERT INTO collection_files (collection_id, path, size_bytes, mtime_ns, status) "
    "VALUES (1, '/x', 1, 1, 'gone')",
    # A vector without the model it came from; one content with two passages in one place.
    f"{CHUNK}, embedding) VALUES ('{SHA}', 0, '', '', x'00')",
    f"{CHUNK}) VALUES ('{SHA}', 0, '', ''), ('{SHA}', 0, '', '')",
)


@pytest.mark.parametrize("statement", NONSENSE)
def test_the_schema_refuses_rows_that_make_no_sense(tmp_path: Path, statement: str) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0004(path)
    Database.open(path, tmp_path / "backups").dispose()
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(
            f"INSERT INTO collections (id, name, created_at, updated_at) VALUES (1, 'docs', '{T0}', '{T0}')"
        )
        with pytest.raises(sqlite3.IntegrityError):
            conn.execute(statement)


def test_a_collection_takes_its_roots_and_files_with_it(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    Database.open(path, tmp_path / "backups").dispose()
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute(
            f"INSERT INTO collections (id, name, created_at, updated_at) VALUES (1, 'docs', '{T0}', '{T0}')"
        )
        conn.execute("INSERT INTO collection_roots (collection_id, path) VALUES (1, '/docs')")
        conn.execute(
            "INSERT INTO collection_files (collection_id, path, size_bytes, mtime_ns, status) "
            "VALUES (1, '/docs/a.pdf', 1, 1, 'pending')"
        )
        conn.execute("DELETE FROM collections")
    assert raw(path, "SELECT count(*) FROM collection_roots") == [(0,)]
    assert raw(path, "SELECT count(*) FROM collection_files") == [(0,)]


def test_0005_downgrades_to_0004_and_back(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    database_at_0004(path)
    before = raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name")
    Database.open(path, tmp_path / "backups").dispose()
    migrate(path, "0004", down=True)
    # Nothing of 0005 is left, the FTS5 shadow tables included, and the rest is as it was.
    assert raw(path, "SELECT name, sql FROM sqlite_master ORDER BY name") == before
    assert raw(path, "SELECT count(*) FROM messages") == [(3,)]
    migrate(path, "head")
    assert raw(path, "SELECT version_num FROM alembic_version") == [(HEAD,)]
    assert tables(path) >= NEW_TABLES
