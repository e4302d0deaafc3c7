"""Reasoning kept apart from the answer, and replies from OpenAI-compatible servers.

Revision ID: 0004
Revises: 0003

Written by hand and frozen once landed: later schema changes go in new revisions, never here.

The message search index gains a `reasoning` column, so a word the model only thought is found too (and
the hit says so). FTS5 cannot add a column to a table, so the view, the index and its three triggers are
dropped and created again, and the index is rebuilt from the messages; the rule of 0003 stays: a reply is
indexed once it stops streaming.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

_DROP_MESSAGE_SEARCH = (
    "DROP TRIGGER messages_fts_delete",
    "DROP TRIGGER messages_fts_update",
    "DROP TRIGGER messages_fts_insert",
    "DROP TABLE messages_fts",
    "DROP VIEW searchable_messages",
)

_MESSAGE_SEARCH = (
    "CREATE VIEW searchable_messages AS SELECT id, content, reasoning FROM messages "
    "WHERE status != 'streaming'",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, reasoning, content='searchable_messages', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN new.status != 'streaming' BEGIN
        INSERT INTO messages_fts(rowid, content, reasoning) VALUES (new.id, new.content, new.reasoning);
    END""",
    # One trigger, two statements in this order: the old terms must leave before the new ones arrive.
    """CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, reasoning, status ON messages
    WHEN old.status != 'streaming' OR new.status != 'streaming' BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content, reasoning)
            SELECT 'delete', old.id, old.content, old.reasoning WHERE old.status != 'streaming';
        INSERT INTO messages_fts(rowid, content, reasoning)
            SELECT new.id, new.content, new.reasoning WHERE new.status != 'streaming';
    END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.status != 'streaming' BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content, reasoning)
            VALUES ('delete', old.id, old.content, old.reasoning);
    END""",
    "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
)

# The message search of 0003, for the downgrade.
_MESSAGE_SEARCH_0003 = (
    "CREATE VIEW searchable_messages AS SELECT id, content FROM messages WHERE status != 'streaming'",
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='searchable_messages', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN new.status != 'streaming' BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END""",
    """CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, status ON messages
    WHEN old.status != 'streaming' OR new.status != 'streaming' BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content)
            SELECT 'delete', old.id, old.content WHERE old.status != 'streaming';
        INSERT INTO messages_fts(rowid, content) SELECT new.id, new.content WHERE new.status != 'streaming';
    END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.status != 'streaming' BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    END""",
    "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
)


def upgrade() -> None:
    # Nullable columns are added in place: no rebuild of `messages`, so the count triggers of 0003 stay.
    with op.batch_alter_table("messages") as batch:
        # What a reasoning model thought before answering; never sent back to the model in later turns.
        batch.add_column(sa.Column("reasoning", sa.Text(), nullable=True))
        batch.add_column(sa.Column("reasoning_seconds", sa.Float(), nullable=True))
        # Set when the reply came from an OpenAI-compatible server instead of a local GGUF file.
        batch.add_column(sa.Column("server_name", sa.Text(), nullable=True))
        batch.add_column(sa.Column("server_url", sa.Text(), nullable=True))
    for statement in (*_DROP_MESSAGE_SEARCH, *_MESSAGE_SEARCH):
        op.execute(statement)


def downgrade() -> None:
    # The view and triggers name `reasoning`: they go first, or SQLite refuses to drop the column.
    for statement in (*_DROP_MESSAGE_SEARCH, *_MESSAGE_SEARCH_0003):
        op.execute(statement)
    # Native DROP COLUMN (SQLite 3.35+): a batch rebuild would break the search view and triggers of 0003.
    for column in ("server_url", "server_name", "reasoning_seconds", "reasoning"):
        op.execute(f"ALTER TABLE messages DROP COLUMN {column}")
