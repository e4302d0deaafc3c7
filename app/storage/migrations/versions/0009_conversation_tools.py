"""The tool servers (MCP) each conversation lets the model call, kept with the conversation.

Revision ID: 0009
Revises: 0008

Written by hand and frozen once landed: later schema changes go in new revisions, never here.

A JSON array of server names, not a join table like the collections' (0006): tool servers live in mcp.json,
not in this database, so there is nothing to refer to. A server removed from mcp.json stays named here and is
skipped when the chat is next sent (the chat says so), and is used again if a server of that name comes back.
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    columns = {column["name"] for column in sa.inspect(op.get_bind()).get_columns("conversations")}
    if "tool_servers_json" in columns:
        return  # left, emptied, by a downgrade on an SQLite too old to drop it (below)
    # Nullable: every chat before this used no tools. SQLite adds nullable columns in place.
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("tool_servers_json", sa.Text(), nullable=True))


def downgrade() -> None:
    if sqlite3.sqlite_version_info >= (3, 35, 0):
        op.execute("ALTER TABLE conversations DROP COLUMN tool_servers_json")
        return
    # An older SQLite cannot drop a column, and rebuilding `conversations` would mean rebuilding every
    # table and trigger that refers to it: the nullable column stays, emptied, unread by the older code.
    op.execute("UPDATE conversations SET tool_servers_json = NULL")
