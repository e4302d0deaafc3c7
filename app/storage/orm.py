"""ORM tables. Only app.storage.db, app.conversations.store, app.library.installed and app.documents see
these; everyone else gets plain dataclasses, and the enums of the columns' values (MessageStatus).

The schema itself is created by the hand-written Alembic revisions in app/storage/migrations; these models
must match them (tests/app/storage/test_db.py compares the two).
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

# Named constraints let batch migrations (SQLite table rebuilds) find and alter them later.
NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

ROLES = ("system", "user", "assistant", "tool")  # "tool": revision 0008
# Full-text search: FTS5 virtual tables, their shadow tables and the views they index. They are kept in
# step by triggers (revisions 0003 and 0010) or by app.documents.index (revision 0005), not by the ORM, so
# schema comparisons leave them out.
SEARCH_INDEX_TABLES = ("messages_fts", "conversations_fts", "document_chunks_fts", "tool_calls_fts")


class MessageStatus(enum.StrEnum):
    """A message's `status` column. Every message but a reply still being written is final."""

    STREAMING = "streaming"
    COMPLETE = "complete"
    STOPPED = "stopped"  # by the user
    ERROR = "error"
    # Cut off: the runner died, or Hearth stopped before the reply finished.
    INTERRUPTED = "interrupted"


MESSAGE_STATUSES = tuple(MessageStatus)
# Revision 0005: what a message holds besides its text, and how far a collection's file has got.
PART_KINDS = ("attachment", "source", "tool_call", "tool_result")
COLLECTION_FILE_STATUSES = ("pending", "indexed", "changed", "failed", "missing")
SHA256_HEX = "length({column}) = 64 AND {column} NOT GLOB '*[^0-9a-f]*'"


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes stored as fixed-width ISO-8601 text, so text order is time order."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> str | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are ambiguous; pass an aware (UTC) datetime")
        return value.astimezone(UTC).isoformat(timespec="microseconds")

    def process_result_value(self, value: str | None, dialect: Dialect) -> datetime | None:
        return None if value is None else datetime.fromisoformat(value)


def _quoted(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class ConversationRow(Base):
    __tablename__ = "conversations"
    # AUTOINCREMENT: a deleted conversation's id is never handed out again, so a late write from a
    # request that outlived its conversation cannot land in a newer one.
    __table_args__ = (
        Index("ix_conversations_updated_at", "updated_at"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    title: Mapped[str] = mapped_column(Text)
    system_prompt: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    model_name: Mapped[str | None] = mapped_column(Text)
    # Revision 0003. The visible transcript is the path from the root to this message (no foreign key: the
    # two tables would refer to each other; the store keeps it pointing into this conversation).
    current_leaf_id: Mapped[int | None] = mapped_column(Integer)
    pinned: Mapped[bool] = mapped_column(Boolean, server_default="0")
    trashed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)  # in the trash, undo possible
    settings_json: Mapped[str | None] = mapped_column(Text)  # sampling and context length for this chat
    # Revision 0009: a JSON array of the MCP servers (mcp.json names) whose tools the model may call here.
    tool_servers_json: Mapped[str | None] = mapped_column(Text)
    # Kept by triggers on messages (the whole tree, every branch).
    message_count: Mapped[int] = mapped_column(Integer, server_default="0")


class MessageRow(Base):
    __tablename__ = "messages"
    __table_args__ = (
        Index("ix_messages_conversation_id_parent_id", "conversation_id", "parent_id"),
        CheckConstraint(f"role IN ({_quoted(ROLES)})", name="role"),
        CheckConstraint(f"status IN ({_quoted(MESSAGE_STATUSES)})", name="status"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    conversation_id: Mapped[int] = mapped_column(Integer, ForeignKey("conversations.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(Text)
    content: Mapped[str] = mapped_column(Text, server_default="")
    status: Mapped[str] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    model_name: Mapped[str | None] = mapped_column(Text)
    model_sha256: Mapped[str | None] = mapped_column(Text)
    prompt_tokens: Mapped[int | None] = mapped_column(Integer)
    completion_tokens: Mapped[int | None] = mapped_column(Integer)
    ttft_ms: Mapped[float | None] = mapped_column(Float)
    tokens_per_second: Mapped[float | None] = mapped_column(Float)
    sampling_json: Mapped[str | None] = mapped_column(Text)
    seed: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Revision 0003. The message this one follows (None at the root): conversations are trees, and a
    # regenerated reply or an edited prompt is a sibling of the original.
    parent_id: Mapped[int | None] = mapped_column(Integer, ForeignKey("messages.id"), index=True)
    template: Mapped[str | None] = mapped_column(Text)  # chat template used: "gguf" or "fallback:<format>"
    quantization: Mapped[str | None] = mapped_column(Text)
    context_note: Mapped[str | None] = mapped_column(Text)  # what the overflow policy left out, if anything
    # Revision 0004.
    reasoning: Mapped[str | None] = mapped_column(Text)  # the model's thinking, kept apart from `content`
    reasoning_seconds: Mapped[float | None] = mapped_column(Float)
    server_name: Mapped[str | None] = mapped_column(Text)  # set for replies from an OpenAI-compatible server
    server_url: Mapped[str | None] = mapped_column(Text)


class ModelRow(Base):
    __tablename__ = "models"
    __table_args__ = (
        CheckConstraint(SHA256_HEX.format(column="sha256"), name="sha256_hex"),
        CheckConstraint("size_bytes >= 0", name="size_bytes"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    path: Mapped[str] = mapped_column(Text)
    sha256: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(Integer)
    source: Mapped[str] = mapped_column(Text)
    architecture: Mapped[str | None] = mapped_column(Text)
    quantization: Mapped[str | None] = mapped_column(Text)
    context_length: Mapped[int | None] = mapped_column(Integer)
    n_layers: Mapped[int | None] = mapped_column(Integer)
    added_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_load_error: Mapped[str | None] = mapped_column(Text)
    last_loaded_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Hub provenance (revision 0002); None for imported and starter models.
    repo_id: Mapped[str | None] = mapped_column(Text)
    revision: Mapped[str | None] = mapped_column(Text)  # the commit sha the file was pinned to
    filename: Mapped[str | None] = mapped_column(Text)  # path inside the repo (the first part if split)
    parts_json: Mapped[str | None] = mapped_column(Text)  # split GGUFs: every part's name, size, SHA-256
    # Vision models (revision 0007): the multimodal projector's name, path, size and SHA-256.
    projector_json: Mapped[str | None] = mapped_column(Text)
    # How to load it (revision 0011): app.library.load_settings.ModelLoadSettings as JSON; None: automatic.
    load_settings_json: Mapped[str | None] = mapped_column(Text)


class FilesRow(Base):
    """An attached file, stored once by content at <home>/attachments/<first two hex digits>/<sha256>.

    The row and the bytes go (secure delete) when no message part and no collection file refers to it.
    """

    __tablename__ = "files"
    __table_args__ = (
        CheckConstraint(SHA256_HEX.format(column="sha256"), name="sha256_hex"),
        CheckConstraint("size_bytes >= 0", name="size_bytes"),
    )

    sha256: Mapped[str] = mapped_column(Text, primary_key=True)
    size_bytes: Mapped[int] = mapped_column(Integer)
    mime_type: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)


class MessagePartRow(Base):
    """What a message holds besides its text (`messages.content`), in order: attachments, the sources a
    reply was given, tool calls and their results."""

    __tablename__ = "message_parts"
    __table_args__ = (
        # Also the index for a message's parts and for the cascade when messages are deleted.
        UniqueConstraint("message_id", "position"),
        Index("ix_message_parts_file_sha256", "file_sha256"),
        CheckConstraint(f"kind IN ({_quoted(PART_KINDS)})", name="kind"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    message_id: Mapped[int] = mapped_column(Integer, ForeignKey("messages.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(Text)
    file_sha256: Mapped[str | None] = mapped_column(Text, ForeignKey("files.sha256"))
    name: Mapped[str | None] = mapped_column(Text)  # an attachment's display name, a tool's name
    mime_type: Mapped[str | None] = mapped_column(Text)
    meta_json: Mapped[str | None] = mapped_column(Text)
    text: Mapped[str | None] = mapped_column(Text)  # a source's snippet, a tool call's arguments or result
    call_id: Mapped[str | None] = mapped_column(Text)
    is_error: Mapped[bool] = mapped_column(Boolean, server_default="0")


class CollectionRow(Base):
    __tablename__ = "collections"
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime)
    embedding_model: Mapped[str | None] = mapped_column(Text)  # SHA-256 of the model the vectors came from


class CollectionRootRow(Base):
    """A file or folder (recursive) the user added to a collection, as an absolute path."""

    __tablename__ = "collection_roots"
    __table_args__ = (UniqueConstraint("collection_id", "path"), {"sqlite_autoincrement": True})

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    collection_id: Mapped[int] = mapped_column(Integer, ForeignKey("collections.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(Text)


class CollectionFileRow(Base):
    """A file found under a collection's roots. Indexed where it is, never copied."""

    __tablename__ = "collection_files"
    __table_args__ = (
        UniqueConstraint("collection_id", "path"),
        # Whether a passage's content is still used by any collection.
        Index("ix_collection_files_content_sha256", "content_sha256"),
        CheckConstraint(f"status IN ({_quoted(COLLECTION_FILE_STATUSES)})", name="status"),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    collection_id: Mapped[int] = mapped_column(Integer, ForeignKey("collections.id", ondelete="CASCADE"))
    path: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(Integer)
    mtime_ns: Mapped[int] = mapped_column(Integer)
    content_sha256: Mapped[str | None] = mapped_column(Text)  # of the bytes last indexed
    status: Mapped[str] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    indexed_at: Mapped[datetime | None] = mapped_column(UTCDateTime)


class ConversationCollectionRow(Base):
    """Revision 0006: a collection a conversation answers from, in the order the user chose them."""

    __tablename__ = "conversation_collections"
    __table_args__ = (Index("ix_conversation_collections_collection_id", "collection_id"),)

    conversation_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    collection_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("collections.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer)


class DocumentChunkRow(Base):
    """A passage of a file's text. Chunked once per content, shared by every attachment and collection
    holding the same bytes; `document_chunks_fts` indexes it (kept in step by app.documents.index)."""

    __tablename__ = "document_chunks"
    __table_args__ = (
        UniqueConstraint("content_sha256", "ordinal"),
        CheckConstraint("(embedding IS NULL) = (embedding_model IS NULL)", name="embedding_model"),
        # Ids are never reused: a chunk id seen in a search cache can only ever mean that chunk.
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    content_sha256: Mapped[str] = mapped_column(Text)
    ordinal: Mapped[int] = mapped_column(Integer)
    location: Mapped[str] = mapped_column(Text)  # "page 3", "Installation > Linux", "slide 2"
    text: Mapped[str] = mapped_column(Text)
    embedding: Mapped[bytes | None] = mapped_column(LargeBinary)  # float16 little-endian, L2-normalised
    embedding_model: Mapped[str | None] = mapped_column(Text)


class DocumentTextRow(Base):
    """An attachment's extracted text, once per content, as (text, location) sections in reading order."""

    __tablename__ = "document_texts"

    content_sha256: Mapped[str] = mapped_column(Text, primary_key=True)
    kind: Mapped[str] = mapped_column(Text)  # app.documents.model.DocumentKind
    mime_type: Mapped[str] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(Text)
    pages: Mapped[int | None] = mapped_column(Integer)
    chars: Mapped[int] = mapped_column(Integer)
    sections_json: Mapped[str] = mapped_column(Text)
