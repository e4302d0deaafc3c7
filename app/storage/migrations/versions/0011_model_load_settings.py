"""Per-model load settings: KV cache type, flash attention, GPU layers and split, threads, mlock, context.

Revision ID: 0011
Revises: 0010

Written by hand and frozen once landed: later schema changes go in new revisions, never here.

One JSON column like `projector_json`, not a column per setting: the settings are read and written only as a
whole (app.library.load_settings), and a setting added later needs no new revision.
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Nullable: every model installed before loads as it did, with automatic settings.
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("load_settings_json", sa.Text(), nullable=True))


def downgrade() -> None:
    if sqlite3.sqlite_version_info >= (3, 35, 0):
        # SQLite drops the column in place and gives the table back its schema text exactly as it was.
        op.execute("ALTER TABLE models DROP COLUMN load_settings_json")
        return
    # Older SQLite cannot drop a column: the table is rebuilt, and its ids must still never be reused.
    with op.batch_alter_table("models", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("load_settings_json")
