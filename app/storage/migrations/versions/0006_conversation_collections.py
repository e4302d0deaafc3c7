"""The collections each conversation answers from, kept with the conversation.

Revision ID: 0006
Revises: 0005

Written by hand and frozen once landed: later schema changes go in new revisions, never here.

A join table, not a column of names: removing a collection or a conversation removes its rows by cascade,
so a chat never points at a collection that no longer exists, and renaming a collection needs no update
here. `position` keeps the order the user chose them in.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "conversation_collections",
        sa.Column("conversation_id", sa.Integer(), nullable=False),
        sa.Column("collection_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_conversation_collections_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["collection_id"],
            ["collections.id"],
            name=op.f("fk_conversation_collections_collection_id_collections"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", "collection_id", name=op.f("pk_conversation_collections")),
    )
    # The cascade from a removed collection looks its rows up by collection.
    op.create_index(
        "ix_conversation_collections_collection_id", "conversation_collections", ["collection_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_conversation_collections_collection_id", table_name="conversation_collections")
    op.drop_table("conversation_collections")
