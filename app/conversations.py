"""Conversations and their messages, handed out as frozen dataclasses (never ORM objects)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Select, func, select, update
from sqlalchemy.orm import Session

from app.db import Database
from app.errors import ConversationNotFound, HearthError
from app.models_orm import MESSAGE_STATUSES, ROLES, ConversationRow, MessageRow

DEFAULT_TITLE = "New chat"
AUTO_TITLE_CHARS = 60
EXPORT_FORMAT = "hearth.conversation"
EXPORT_VERSION = 1
FINAL_STATUSES = tuple(s for s in MESSAGE_STATUSES if s != "streaming")
INTERRUPTED_ERROR = "The reply was cut off because Hearth or its model runner stopped before it finished."


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    system_prompt: str | None
    created_at: datetime
    updated_at: datetime
    model_name: str | None
    message_count: int


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: str
    content: str
    status: str
    error: str | None
    model_name: str | None
    model_sha256: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    ttft_ms: float | None
    tokens_per_second: float | None
    sampling: dict[str, Any] | None
    seed: int | None
    created_at: datetime
    updated_at: datetime


def _now() -> datetime:
    return datetime.now(UTC)


def _conversation(row: ConversationRow, message_count: int) -> Conversation:
    return Conversation(
        id=row.id,
        title=row.title,
        system_prompt=row.system_prompt,
        created_at=row.created_at,
        updated_at=row.updated_at,
        model_name=row.model_name,
        message_count=message_count,
    )


def _message(row: MessageRow) -> Message:
    return Message(
        id=row.id,
        conversation_id=row.conversation_id,
        role=row.role,
        content=row.content,
        status=row.status,
        error=row.error,
        model_name=row.model_name,
        model_sha256=row.model_sha256,
        prompt_tokens=row.prompt_tokens,
        completion_tokens=row.completion_tokens,
        ttft_ms=row.ttft_ms,
        tokens_per_second=row.tokens_per_second,
        sampling=json.loads(row.sampling_json) if row.sampling_json is not None else None,
        seed=row.seed,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _not_found(conversation_id: int) -> ConversationNotFound:
    return ConversationNotFound(f"There is no conversation {conversation_id}; it may have been deleted.")


def _one_line_title(text: str) -> str:
    title = " ".join(text.split())
    if len(title) <= AUTO_TITLE_CHARS:
        return title
    cut = title[:AUTO_TITLE_CHARS]
    # Prefer ending on a word boundary unless that throws away most of the title.
    space = cut.rfind(" ")
    if space >= AUTO_TITLE_CHARS // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


class ConversationStore:
    """Every method runs in its own short transaction and may be called from any thread."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def create_conversation(
        self, title: str = DEFAULT_TITLE, system_prompt: str | None = None
    ) -> Conversation:
        now = _now()
        row = ConversationRow(
            title=self._clean_title(title), system_prompt=system_prompt, created_at=now, updated_at=now
        )
        with self._db.session() as session:
            session.add(row)
            session.flush()
            return _conversation(row, 0)

    def list_conversations(self) -> list[Conversation]:
        """Most recently updated first, with message counts, in one query."""
        with self._db.read_session() as session:
            rows = session.execute(
                self._with_counts().order_by(ConversationRow.updated_at.desc(), ConversationRow.id.desc())
            ).all()
            return [_conversation(row, count) for row, count in rows]

    def get_conversation(self, conversation_id: int) -> Conversation:
        with self._db.read_session() as session:
            return self._get(session, conversation_id)

    def rename_conversation(self, conversation_id: int, title: str) -> Conversation:
        with self._db.session() as session:
            row = self._row(session, conversation_id)
            row.title = self._clean_title(title)
            row.updated_at = _now()
            session.flush()
            return self._get(session, conversation_id)

    def set_conversation_model(self, conversation_id: int, model_name: str | None) -> None:
        with self._db.session() as session:
            row = self._row(session, conversation_id)
            row.model_name = model_name
            row.updated_at = _now()

    def auto_title(self, conversation_id: int, first_prompt: str) -> Conversation:
        """Title the conversation after its first prompt, unless the user already named it."""
        title = _one_line_title(first_prompt)
        with self._db.session() as session:
            row = self._row(session, conversation_id)
            if row.title == DEFAULT_TITLE and title:
                row.title = title
                row.updated_at = _now()
                session.flush()
            return self._get(session, conversation_id)

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete the conversation and its messages so that none of their text stays on disk.

        secure_delete zeroes the freed space in the database file; the checkpoint then folds the WAL
        (which still holds the old pages) into the file and truncates it.
        """
        with self._db.session() as session:
            session.delete(self._row(session, conversation_id))
        self._db.checkpoint()

    def list_messages(self, conversation_id: int) -> list[Message]:
        with self._db.read_session() as session:
            self._row(session, conversation_id)
            return self._messages(session, conversation_id)

    def add_message(
        self, conversation_id: int, role: str, content: str, *, status: str = "complete"
    ) -> Message:
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        if status not in MESSAGE_STATUSES:
            raise ValueError(f"status must be one of {MESSAGE_STATUSES}, not {status!r}")
        return self._insert_message(
            MessageRow(conversation_id=conversation_id, role=role, content=content, status=status)
        )

    def start_assistant_message(
        self,
        conversation_id: int,
        *,
        model_name: str,
        model_sha256: str,
        sampling: Mapping[str, Any],
        seed: int | None,
    ) -> Message:
        """The reply's row exists from before the first token, so a crash mid-reply keeps what came."""
        return self._insert_message(
            MessageRow(
                conversation_id=conversation_id,
                role="assistant",
                content="",
                status="streaming",
                model_name=model_name,
                model_sha256=model_sha256,
                sampling_json=json.dumps(dict(sampling), sort_keys=True),
                seed=seed,
            )
        )

    def flush_streaming_text(self, message_id: int, content: str) -> bool:
        """Save the reply so far. False when the message is no longer streaming (or was deleted)."""
        now = _now()
        with self._db.session() as session:
            conversation_id = session.scalar(
                select(MessageRow.conversation_id).where(
                    MessageRow.id == message_id, MessageRow.status == "streaming"
                )
            )
            if conversation_id is None:
                return False
            session.execute(
                update(MessageRow).where(MessageRow.id == message_id).values(content=content, updated_at=now)
            )
            self._touch(session, conversation_id, now)
            return True

    def finish_message(
        self,
        message_id: int,
        *,
        content: str,
        status: str,
        error: str | None = None,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        ttft_ms: float | None = None,
        tokens_per_second: float | None = None,
        seed: int | None = None,
    ) -> bool:
        """Store the reply's final text and outcome. False when it was not streaming (or was deleted).

        `seed` is the seed the runner actually used; None keeps the one recorded at the start.
        """
        if status not in FINAL_STATUSES:
            raise ValueError(f"status must be one of {FINAL_STATUSES}, not {status!r}")
        now = _now()
        with self._db.session() as session:
            row = session.get(MessageRow, message_id)
            if row is None or row.status != "streaming":
                return False
            row.content = content
            row.status = status
            row.error = error
            row.prompt_tokens = prompt_tokens
            row.completion_tokens = completion_tokens
            row.ttft_ms = ttft_ms
            row.tokens_per_second = tokens_per_second
            if seed is not None:
                row.seed = seed
            row.updated_at = now
            self._touch(session, row.conversation_id, now)
            return True

    def mark_interrupted_streaming(self) -> int:
        """At start-up: replies still marked streaming were cut off by a crash. Returns how many."""
        now = _now()
        streaming = MessageRow.status == "streaming"
        with self._db.session() as session:
            conversation_ids = session.scalars(select(MessageRow.conversation_id).where(streaming)).all()
            session.execute(
                update(MessageRow)
                .where(streaming)
                .values(
                    status="interrupted",
                    error=func.coalesce(MessageRow.error, INTERRUPTED_ERROR),
                    updated_at=now,
                )
            )
            for conversation_id in set(conversation_ids):
                self._touch(session, conversation_id, now)
            return len(conversation_ids)

    def export_json(self, conversation_id: int) -> dict[str, Any]:
        """A JSON-ready dict, stable across releases of the same `version`:

        {"format": "hearth.conversation", "version": 1,
         "conversation": {"id", "title", "system_prompt", "created_at", "updated_at", "model_name"},
         "messages": [{"id", "role", "content", "status", "error", "model_name", "model_sha256",
                       "prompt_tokens", "completion_tokens", "ttft_ms", "tokens_per_second",
                       "sampling", "seed", "created_at", "updated_at"}, ...]}

        Times are ISO-8601 strings in UTC; messages are in conversation order.
        """
        conversation, messages = self._snapshot(conversation_id)
        return {
            "format": EXPORT_FORMAT,
            "version": EXPORT_VERSION,
            "conversation": {
                "id": conversation.id,
                "title": conversation.title,
                "system_prompt": conversation.system_prompt,
                "created_at": conversation.created_at.isoformat(),
                "updated_at": conversation.updated_at.isoformat(),
                "model_name": conversation.model_name,
            },
            "messages": [
                {
                    "id": m.id,
                    "role": m.role,
                    "content": m.content,
                    "status": m.status,
                    "error": m.error,
                    "model_name": m.model_name,
                    "model_sha256": m.model_sha256,
                    "prompt_tokens": m.prompt_tokens,
                    "completion_tokens": m.completion_tokens,
                    "ttft_ms": m.ttft_ms,
                    "tokens_per_second": m.tokens_per_second,
                    "sampling": m.sampling,
                    "seed": m.seed,
                    "created_at": m.created_at.isoformat(),
                    "updated_at": m.updated_at.isoformat(),
                }
                for m in messages
            ],
        }

    def export_markdown(self, conversation_id: int) -> str:
        conversation, messages = self._snapshot(conversation_id)
        lines = [
            f"# {conversation.title}",
            "",
            f"*Exported from Hearth · started {conversation.created_at:%Y-%m-%d %H:%M} UTC · "
            f"{len(messages)} messages*",
            "",
        ]
        if conversation.system_prompt:
            lines += ["## System prompt", "", conversation.system_prompt, ""]
        for m in messages:
            heading = m.role.capitalize()
            if m.role == "assistant" and m.model_name:
                heading += f" ({m.model_name})"
            lines += [f"## {heading}", "", m.content, ""]
            if m.status != "complete":
                note = f"*[{m.status}]*" if not m.error else f"*[{m.status}: {m.error}]*"
                lines += [note, ""]
        return "\n".join(lines).rstrip("\n") + "\n"

    @staticmethod
    def _clean_title(title: str) -> str:
        cleaned = " ".join(title.split())
        if not cleaned:
            raise HearthError("A conversation needs a title.")
        return cleaned

    @staticmethod
    def _with_counts() -> Select[ConversationRow, int]:
        return (
            select(ConversationRow, func.count(MessageRow.id))
            .outerjoin(MessageRow, MessageRow.conversation_id == ConversationRow.id)
            .group_by(ConversationRow.id)
        )

    @staticmethod
    def _row(session: Session, conversation_id: int) -> ConversationRow:
        row = session.get(ConversationRow, conversation_id)
        if row is None:
            raise _not_found(conversation_id)
        return row

    def _get(self, session: Session, conversation_id: int) -> Conversation:
        found = session.execute(self._with_counts().where(ConversationRow.id == conversation_id)).first()
        if found is None:
            raise _not_found(conversation_id)
        return _conversation(found[0], found[1])

    @staticmethod
    def _touch(session: Session, conversation_id: int, now: datetime) -> None:
        session.execute(
            update(ConversationRow).where(ConversationRow.id == conversation_id).values(updated_at=now)
        )

    def _insert_message(self, row: MessageRow) -> Message:
        now = _now()
        row.created_at = row.updated_at = now
        with self._db.session() as session:
            self._row(session, row.conversation_id).updated_at = now
            session.add(row)
            session.flush()
            return _message(row)

    def _snapshot(self, conversation_id: int) -> tuple[Conversation, list[Message]]:
        with self._db.read_session() as session:
            return self._get(session, conversation_id), self._messages(session, conversation_id)

    @staticmethod
    def _messages(session: Session, conversation_id: int) -> list[Message]:
        rows = session.scalars(
            select(MessageRow).where(MessageRow.conversation_id == conversation_id).order_by(MessageRow.id)
        )
        return [_message(row) for row in rows]
