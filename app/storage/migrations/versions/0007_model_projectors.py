"""Vision models: the multimodal projector (`mmproj*.gguf`) an installed model is loaded with.

Revision ID: 0007
Revises: 0006

Written by hand and frozen once landed: later schema changes go in new revisions, never here.

One JSON column like `parts_json`, not a table: a model has at most one projector, and the projector is
never used, listed or removed apart from its model.
"""

from __future__ import annotations

import sqlite3

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Nullable: every model installed before is a text-only model. SQLite adds nullable columns in place.
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("projector_json", sa.Text(), nullable=True))


def downgrade() -> None:
    if sqlite3.sqlite_version_info >= (3, 35, 0):
        # SQLite drops the column in place and gives the table back its schema text exactly as it was.
        op.execute("ALTER TABLE models DROP COLUMN projector_json")
        return
    # Older SQLite cannot drop a column: the table is rebuilt, and its ids must still never be reused.
    with op.batch_alter_table("models", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("projector_json")
