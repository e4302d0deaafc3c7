"""ORM tables. Only app.storage.db, app.conversations.store and app.library.installed see these; everyone
else gets plain dataclasses, and the enums of the columns' values (MessageStatus).

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
    MetaData,
    Text,
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

ROLES = ("system", "user", "assistant")
# Full-text search (revision 0003): FTS5 virtual tables, their shadow tables and the view they index. They
# are kept in step by triggers, not by the ORM, so schema comparisons leave them out.
SEARCH_INDEX_TABLES = ("messages_fts", "conversations_fts")


class MessageStatus(enum.StrEnum):
    """A message's `status` column. Every message but a reply still being written is final."""

    STREAMING = "streaming"
    COMPLETE = "complete"
    STOPPED = "stopped"  # by the user
    ERROR = "error"
    # Cut off: the runner died, or Hearth stopped before the reply finished.
    INTERRUPTED = "interrupted"


MESSAGE_STATUSES = tuple(MessageStatus)


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
        CheckConstraint("length(sha256) = 64 AND sha256 NOT GLOB '*[^0-9a-f]*'", name="sha256_hex"),
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
