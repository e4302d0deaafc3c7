"""Tool messages: a tool's result is a message of its own (role `tool`) in the conversation tree, after the
assistant message whose tool call it answers, as OpenAI's API and every chat template have it.

Revision ID: 0008
Revises: 0007

Written by hand and frozen once landed: later schema changes go in new revisions, never here.

SQLite cannot change a CHECK constraint in place, so `messages` is rebuilt the way SQLite documents
(lang_altertable.html, "Making Other Kinds Of Table Schema Changes"): the triggers and the view that name
it set aside, a new table from the old one's own schema text with the one constraint changed, the rows
copied, the old table dropped and the new one renamed, then its indexes, triggers and view put back and
the ids that were used kept from being used again. Foreign keys are off while migrations run
(app.storage.db), so message_parts and conversations keep their rows; the check at the end proves it.
"""

from __future__ import annotations

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None

_BEFORE = "CONSTRAINT ck_messages_role CHECK (role IN ('system', 'user', 'assistant'))"
_AFTER = "CONSTRAINT ck_messages_role CHECK (role IN ('system', 'user', 'assistant', 'tool'))"


def upgrade() -> None:
    _rebuild_messages(_BEFORE, _AFTER)


def downgrade() -> None:
    # A Hearth before 0008 has no tool messages: it is given each result as a reply it can show, still
    # under the call it answers, with its tool_result part, so nothing is lost.
    op.execute("UPDATE messages SET role = 'assistant' WHERE role = 'tool'")
    _rebuild_messages(_AFTER, _BEFORE)


def _rebuild_messages(old_constraint: str, new_constraint: str) -> None:
    bind = op.get_bind()
    [(table_sql,)] = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'messages'"
    ).fetchall()
    if old_constraint not in table_sql:
        raise RuntimeError(f"messages does not have the constraint this revision changes: {old_constraint}")
    # Every trigger and view, not only those on messages: some on other tables write to it or read it.
    dependents = bind.exec_driver_sql(
        "SELECT type, name, sql FROM sqlite_master WHERE type IN ('trigger', 'view') AND sql IS NOT NULL "
        "ORDER BY type DESC, name"
    ).fetchall()
    indexes = bind.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'messages' AND sql IS NOT NULL"
    ).fetchall()
    used = bind.exec_driver_sql("SELECT seq FROM sqlite_sequence WHERE name = 'messages'").fetchall()
    for kind, name, _sql in dependents:
        op.execute(f'DROP {kind.upper()} "{name}"')
    new_sql = table_sql.replace(old_constraint, new_constraint).replace(
        'CREATE TABLE "messages"', 'CREATE TABLE "messages_0008"', 1
    )
    op.execute(new_sql)
    op.execute("INSERT INTO messages_0008 SELECT * FROM messages")
    op.execute("DROP TABLE messages")
    op.execute("ALTER TABLE messages_0008 RENAME TO messages")
    for (index_sql,) in indexes:
        op.execute(index_sql)
    for _kind, _name, sql in reversed(dependents):
        op.execute(sql)
    if used:
        # The copy leaves the counter at the highest id still there; ids of deleted messages stay unused.
        bind.exec_driver_sql("DELETE FROM sqlite_sequence WHERE name = 'messages'")
        bind.exec_driver_sql("INSERT INTO sqlite_sequence (name, seq) VALUES ('messages', ?)", (used[0][0],))
    problems = bind.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if problems:
        raise RuntimeError(f"rebuilding messages broke foreign keys: {problems[:5]}")
