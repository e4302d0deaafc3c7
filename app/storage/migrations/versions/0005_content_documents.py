"""The content model: message parts, stored files, document collections and their passage index.

Revision ID: 0005
Revises: 0004

Written by hand and frozen once landed: later schema changes go in new revisions, never here.

Messages keep their text in `messages.content` (search, templates and every reader rely on it); what
else a message holds (attachments, the sources a reply was given, tool calls and results) is an ordered
row in `message_parts`. Attached files are stored once by content (`files`). Collections index files in
place (`collection_roots`, `collection_files`); passages are stored once per content (`document_chunks`)
and searched by `document_chunks_fts`, whose terms app.documents.segment derives in Python (CJK text
segmented into bigrams), so app.documents.index keeps it in step, not triggers.

Only new tables: nothing existing is rebuilt, so the triggers and views of 0003 and 0004 stay as they are.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

_SHA256_HEX = "length({column}) = 64 AND {column} NOT GLOB '*[^0-9a-f]*'"

# External content: the text lives only in `document_chunks`; the index holds terms and positions.
# remove_diacritics 2, as for messages: "cafe" finds "café".
_CREATE_FTS = (
    "CREATE VIRTUAL TABLE document_chunks_fts USING fts5(terms, content='document_chunks', "
    "content_rowid='id', tokenize='unicode61 remove_diacritics 2')"
)


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("sha256", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("mime_type", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.CheckConstraint(_SHA256_HEX.format(column="sha256"), name=op.f("ck_files_sha256_hex")),
        sa.CheckConstraint("size_bytes >= 0", name=op.f("ck_files_size_bytes")),
        sa.PrimaryKeyConstraint("sha256", name=op.f("pk_files")),
    )

    op.create_table(
        "message_parts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("message_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("file_sha256", sa.Text(), nullable=True),
        sa.Column("name", sa.Text(), nullable=True),
        sa.Column("mime_type", sa.Text(), nullable=True),
        sa.Column("meta_json", sa.Text(), nullable=True),
        sa.Column("text", sa.Text(), nullable=True),
        sa.Column("call_id", sa.Text(), nullable=True),
        sa.Column("is_error", sa.Boolean(), server_default="0", nullable=False),
        sa.CheckConstraint(
            "kind IN ('attachment', 'source', 'tool_call', 'tool_result')", name=op.f("ck_message_parts_kind")
        ),
        # Deleting a conversation or a branch deletes the messages' parts in the same statement.
        sa.ForeignKeyConstraint(
            ["message_id"],
            ["messages.id"],
            name=op.f("fk_message_parts_message_id_messages"),
            ondelete="CASCADE",
        ),
        # No ON DELETE: a file is deleted only once nothing refers to it.
        sa.ForeignKeyConstraint(
            ["file_sha256"], ["files.sha256"], name=op.f("fk_message_parts_file_sha256_files")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_message_parts")),
        # The order within a message; also the index that finds a message's parts (and the cascade uses).
        sa.UniqueConstraint("message_id", "position", name=op.f("uq_message_parts_message_id_position")),
        sqlite_autoincrement=True,
    )
    # Whether a stored file is still used, and the foreign-key check when one is deleted.
    op.create_index(op.f("ix_message_parts_file_sha256"), "message_parts", ["file_sha256"])

    op.create_table(
        "collections",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Text(), nullable=False),
        sa.Column("updated_at", sa.Text(), nullable=False),
        sa.Column("embedding_model", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_collections")),
        sa.UniqueConstraint("name", name=op.f("uq_collections_name")),
        sqlite_autoincrement=True,
    )

    op.create_table(
        "collection_roots",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("collection_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["collection_id"],
            ["collections.id"],
            name=op.f("fk_collection_roots_collection_id_collections"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_collection_roots")),
        sa.UniqueConstraint("collection_id", "path", name=op.f("uq_collection_roots_collection_id_path")),
        sqlite_autoincrement=True,
    )

    op.create_table(
        "collection_files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("collection_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.Integer(), nullable=False),
        sa.Column("mtime_ns", sa.Integer(), nullable=False),
        sa.Column("content_sha256", sa.Text(), nullable=True),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("indexed_at", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "status IN ('pending', 'indexed', 'changed', 'failed', 'missing')",
            name=op.f("ck_collection_files_status"),
        ),
        sa.ForeignKeyConstraint(
            ["collection_id"],
            ["collections.id"],
            name=op.f("fk_collection_files_collection_id_collections"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_collection_files")),
        sa.UniqueConstraint("collection_id", "path", name=op.f("uq_collection_files_collection_id_path")),
        sqlite_autoincrement=True,
    )
    # Whether any collection still holds a content whose passages are stored.
    op.create_index(op.f("ix_collection_files_content_sha256"), "collection_files", ["content_sha256"])

    op.create_table(
        "document_chunks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("content_sha256", sa.Text(), nullable=False),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("location", sa.Text(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("embedding", sa.LargeBinary(), nullable=True),
        sa.Column("embedding_model", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "(embedding IS NULL) = (embedding_model IS NULL)", name=op.f("ck_document_chunks_embedding_model")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_document_chunks")),
        # Also the index that finds a content's passages.
        sa.UniqueConstraint(
            "content_sha256", "ordinal", name=op.f("uq_document_chunks_content_sha256_ordinal")
        ),
        # Ids are never reused, so a chunk id held by a search cache can only ever mean that chunk.
        sqlite_autoincrement=True,
    )
    op.execute(_CREATE_FTS)

    # An attachment's extracted text, once per content: sending a message or reading an earlier turn back
    # into the prompt never extracts the file again.
    op.create_table(
        "document_texts",
        sa.Column("content_sha256", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("mime_type", sa.Text(), nullable=False),
        sa.Column("title", sa.Text(), nullable=True),
        sa.Column("pages", sa.Integer(), nullable=True),
        sa.Column("chars", sa.Integer(), nullable=False),
        sa.Column("sections_json", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("content_sha256", name=op.f("pk_document_texts")),
    )


def downgrade() -> None:
    op.drop_table("document_texts")
    op.execute("DROP TABLE document_chunks_fts")
    op.drop_table("document_chunks")
    op.drop_index(op.f("ix_collection_files_content_sha256"), table_name="collection_files")
    op.drop_table("collection_files")
    op.drop_table("collection_roots")
    op.drop_table("collections")
    op.drop_index(op.f("ix_message_parts_file_sha256"), table_name="message_parts")
    op.drop_table("message_parts")
    op.drop_table("files")
