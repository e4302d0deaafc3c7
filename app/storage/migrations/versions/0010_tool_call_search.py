"""Tool calls in the full-text search: a call's tool name and arguments are found like a message's words.

Revision ID: 0010
Revises: 0009

Written by hand and frozen once landed: later schema changes go in new revisions, never here.

An index of its own over the `tool_call` parts, not a column of `messages_fts`: a reply's calls are parts
stored after the reply's text, so the message triggers of 0004 would index the reply before its calls exist,
and a part's own triggers always know the exact text to take out again. The index reads the parts through a
view of the calls only: attachments and sources are not words the user wrote or the model said.
"""

from __future__ import annotations

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None

_TOOL_CALL_SEARCH = (
    "CREATE VIEW searchable_tool_calls AS SELECT id, name, text FROM message_parts WHERE kind = 'tool_call'",
    "CREATE VIRTUAL TABLE tool_calls_fts USING fts5(name, text, content='searchable_tool_calls', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')",
    """CREATE TRIGGER tool_calls_fts_insert AFTER INSERT ON message_parts WHEN new.kind = 'tool_call' BEGIN
        INSERT INTO tool_calls_fts(rowid, name, text) VALUES (new.id, new.name, new.text);
    END""",
    # Old terms out before new ones in, as for messages (0004).
    """CREATE TRIGGER tool_calls_fts_update AFTER UPDATE OF kind, name, text ON message_parts
    WHEN old.kind = 'tool_call' OR new.kind = 'tool_call' BEGIN
        INSERT INTO tool_calls_fts(tool_calls_fts, rowid, name, text)
            SELECT 'delete', old.id, old.name, old.text WHERE old.kind = 'tool_call';
        INSERT INTO tool_calls_fts(rowid, name, text)
            SELECT new.id, new.name, new.text WHERE new.kind = 'tool_call';
    END""",
    """CREATE TRIGGER tool_calls_fts_delete AFTER DELETE ON message_parts WHEN old.kind = 'tool_call' BEGIN
        INSERT INTO tool_calls_fts(tool_calls_fts, rowid, name, text)
            VALUES ('delete', old.id, old.name, old.text);
    END""",
    "INSERT INTO tool_calls_fts(tool_calls_fts) VALUES ('rebuild')",
)


def upgrade() -> None:
    for statement in _TOOL_CALL_SEARCH:
        op.execute(statement)


def downgrade() -> None:
    for statement in (
        "DROP TRIGGER tool_calls_fts_delete",
        "DROP TRIGGER tool_calls_fts_update",
        "DROP TRIGGER tool_calls_fts_insert",
        "DROP TABLE tool_calls_fts",
        "DROP VIEW searchable_tool_calls",
    ):
        op.execute(statement)
