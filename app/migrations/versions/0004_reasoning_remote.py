"""Reasoning kept apart from the answer, and replies from OpenAI-compatible servers.

Revision ID: 0004
Revises: 0003

Written by hand and frozen once landed: later schema changes go in new revisions, never here.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Nullable columns are added in place: no rebuild, so the search triggers of 0003 stay as they are.
    with op.batch_alter_table("messages") as batch:
        # What a reasoning model thought before answering; never sent back to the model in later turns.
        batch.add_column(sa.Column("reasoning", sa.Text(), nullable=True))
        batch.add_column(sa.Column("reasoning_seconds", sa.Float(), nullable=True))
        # Set when the reply came from an OpenAI-compatible server instead of a local GGUF file.
        batch.add_column(sa.Column("server_name", sa.Text(), nullable=True))
        batch.add_column(sa.Column("server_url", sa.Text(), nullable=True))


def downgrade() -> None:
    # Native DROP COLUMN (SQLite 3.35+): a batch rebuild would break the search view and triggers of 0003.
    for column in ("server_url", "server_name", "reasoning_seconds", "reasoning"):
        op.execute(f"ALTER TABLE messages DROP COLUMN {column}")
