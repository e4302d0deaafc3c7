"""Branching conversations, pins, trash, per-conversation settings, reply provenance, full-text search.

Revision ID: 0003
Revises: 0002

Written by hand and frozen: later schema changes go in new revisions, never here.

The search index and the message counts are kept in step by triggers on `messages` and `conversations`.
A later revision that rebuilds either table (a batch "recreate") must drop the triggers and the view first
(SQLite refuses to rename the new table into place while they name it, and a table's own triggers go with
the old table) and create them again afterwards; tests/app/storage/test_db.py's REBUILD_PARENT shows how.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None

# A reply is indexed once it stops streaming: re-indexing the whole reply on every 300 ms flush would
# rewrite the index thousands of times for one long answer and leave every partial version behind in it.
_SEARCH_SCHEMA = (
    "CREATE VIEW searchable_messages AS SELECT id, content FROM messages WHERE status != 'streaming'",
    # External content: the text lives only in `messages`; the index holds terms and positions.
    # remove_diacritics 2: "cafe" finds "café".
    "CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='searchable_messages', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    "CREATE VIRTUAL TABLE conversations_fts USING fts5(title, content='conversations', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    """CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN new.status != 'streaming' BEGIN
        INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
    END""",
    # One trigger, two statements in this order: the old terms must leave before the new ones arrive, and
    # SQLite does not promise an order between separate triggers.
    """CREATE TRIGGER messages_fts_update AFTER UPDATE OF content, status ON messages
    WHEN old.status != 'streaming' OR new.status != 'streaming' BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content)
            SELECT 'delete', old.id, old.content WHERE old.status != 'streaming';
        INSERT INTO messages_fts(rowid, content) SELECT new.id, new.content WHERE new.status != 'streaming';
    END""",
    """CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.status != 'streaming' BEGIN
        INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    END""",
    """CREATE TRIGGER conversations_fts_insert AFTER INSERT ON conversations BEGIN
        INSERT INTO conversations_fts(rowid, title) VALUES (new.id, new.title);
    END""",
    """CREATE TRIGGER conversations_fts_update AFTER UPDATE OF title ON conversations BEGIN
        INSERT INTO conversations_fts(conversations_fts, rowid, title) VALUES ('delete', old.id, old.title);
        INSERT INTO conversations_fts(rowid, title) VALUES (new.id, new.title);
    END""",
    """CREATE TRIGGER conversations_fts_delete AFTER DELETE ON conversations BEGIN
        INSERT INTO conversations_fts(conversations_fts, rowid, title) VALUES ('delete', old.id, old.title);
    END""",
    # The conversation list shows counts for thousands of conversations; counting a million messages on
    # every refresh would not fit its 50 ms budget.
    """CREATE TRIGGER messages_count_insert AFTER INSERT ON messages BEGIN
        UPDATE conversations SET message_count = message_count + 1 WHERE id = new.conversation_id;
    END""",
    """CREATE TRIGGER messages_count_delete AFTER DELETE ON messages BEGIN
        UPDATE conversations SET message_count = message_count - 1 WHERE id = old.conversation_id;
    END""",
    "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
    "INSERT INTO conversations_fts(conversations_fts) VALUES ('rebuild')",
)

_DROP_SEARCH_SCHEMA = (
    "DROP TRIGGER messages_count_delete",
    "DROP TRIGGER messages_count_insert",
    "DROP TRIGGER conversations_fts_delete",
    "DROP TRIGGER conversations_fts_update",
    "DROP TRIGGER conversations_fts_insert",
    "DROP TRIGGER messages_fts_delete",
    "DROP TRIGGER messages_fts_update",
    "DROP TRIGGER messages_fts_insert",
    "DROP TABLE conversations_fts",
    "DROP TABLE messages_fts",
    "DROP VIEW searchable_messages",
)


def _keep_autoincrement_counter(table: str) -> Callable[[], None]:
    """The rebuilt table's counter starts from its highest remaining id; put back the old one, which also
    counts ids deleted from the end, so they are never handed out again."""
    bind = op.get_bind()
    used = bind.exec_driver_sql("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)).scalar()

    def restore() -> None:
        if used is None:
            return
        bind.exec_driver_sql("DELETE FROM sqlite_sequence WHERE name = ?", (table,))
        bind.exec_driver_sql("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (table, used))

    return restore


def upgrade() -> None:
    restore_counter = _keep_autoincrement_counter("messages")
    # A rebuild (not ALTER TABLE ADD COLUMN) because SQLite cannot add a foreign key to an existing table.
    # Reflection does not see AUTOINCREMENT, so it is restated: ids of deleted messages are never reused.
    with op.batch_alter_table(
        "messages", recreate="always", table_kwargs={"sqlite_autoincrement": True}
    ) as batch:
        batch.add_column(sa.Column("parent_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("template", sa.Text(), nullable=True))
        batch.add_column(sa.Column("quantization", sa.Text(), nullable=True))
        batch.add_column(sa.Column("context_note", sa.Text(), nullable=True))
        # No ON DELETE action: a subtree is deleted in one statement (foreign keys are checked at its end),
        # and a cascade would recurse once per message, past SQLite's trigger depth for long chats.
        batch.create_foreign_key(op.f("fk_messages_parent_id_messages"), "messages", ["parent_id"], ["id"])
        # Finding children (branch switches, sibling counts) and the foreign-key check on every delete.
        batch.create_index(op.f("ix_messages_parent_id"), ["parent_id"])
        # The tree of a conversation without reading its rows (a long reply spills into overflow pages).
        # It also serves every lookup by conversation, so the index on conversation_id alone goes.
        batch.drop_index(op.f("ix_messages_conversation_id"))
        batch.create_index(op.f("ix_messages_conversation_id_parent_id"), ["conversation_id", "parent_id"])
    restore_counter()

    # Until now a conversation was a list: each message follows the one before it.
    op.execute(
        "UPDATE messages SET parent_id = (SELECT max(p.id) FROM messages AS p "
        "WHERE p.conversation_id = messages.conversation_id AND p.id < messages.id)"
    )

    # Plain ALTER TABLE ADD COLUMN in place (literal defaults only: an expression would force a rebuild).
    with op.batch_alter_table("conversations") as batch:
        # No foreign key: conversations and messages would refer to each other, and deleting a conversation
        # deletes its messages anyway. The store keeps it pointing at one of the conversation's messages.
        batch.add_column(sa.Column("current_leaf_id", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("pinned", sa.Boolean(), server_default="0", nullable=False))
        batch.add_column(sa.Column("trashed_at", sa.Text(), nullable=True))
        batch.add_column(sa.Column("settings_json", sa.Text(), nullable=True))
        batch.add_column(sa.Column("message_count", sa.Integer(), server_default="0", nullable=False))
    op.execute(
        "UPDATE conversations SET "
        "current_leaf_id = (SELECT max(id) FROM messages WHERE conversation_id = conversations.id), "
        "message_count = (SELECT count(*) FROM messages WHERE conversation_id = conversations.id)"
    )

    for statement in _SEARCH_SCHEMA:
        op.execute(statement)


def downgrade() -> None:
    for statement in _DROP_SEARCH_SCHEMA:
        op.execute(statement)
    restore_conversations_counter = _keep_autoincrement_counter("conversations")
    with op.batch_alter_table("conversations", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("message_count")
        batch.drop_column("settings_json")
        batch.drop_column("trashed_at")
        batch.drop_column("pinned")
        batch.drop_column("current_leaf_id")
    restore_conversations_counter()
    restore_messages_counter = _keep_autoincrement_counter("messages")
    with op.batch_alter_table(
        "messages", recreate="always", table_kwargs={"sqlite_autoincrement": True}
    ) as batch:
        batch.drop_index(op.f("ix_messages_conversation_id_parent_id"))
        batch.create_index(op.f("ix_messages_conversation_id"), ["conversation_id"])
        batch.drop_index(op.f("ix_messages_parent_id"))
        batch.drop_constraint(op.f("fk_messages_parent_id_messages"), type_="foreignkey")
        batch.drop_column("context_note")
        batch.drop_column("quantization")
        batch.drop_column("template")
        batch.drop_column("parent_id")
    restore_messages_counter()
