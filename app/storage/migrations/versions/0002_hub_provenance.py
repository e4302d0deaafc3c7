"""Hub provenance for installed models: repo, pinned commit, file name and the parts of split GGUFs.

Revision ID: 0002
Revises: 0001

Written by hand and frozen: later schema changes go in new revisions, never here.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Nullable: imported and starter models have no repo. SQLite adds nullable columns in place.
    with op.batch_alter_table("models") as batch:
        batch.add_column(sa.Column("repo_id", sa.Text(), nullable=True))
        batch.add_column(sa.Column("revision", sa.Text(), nullable=True))
        batch.add_column(sa.Column("filename", sa.Text(), nullable=True))
        batch.add_column(sa.Column("parts_json", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("models") as batch:
        batch.drop_column("parts_json")
        batch.drop_column("filename")
        batch.drop_column("revision")
        batch.drop_column("repo_id")
