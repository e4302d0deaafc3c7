"""Conversations and messages as the store hands them out, and the row-level reads the store, search and
export share: plain SQL turned into frozen dataclasses, and the shape of a conversation's message tree."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.errors import ConversationNotFound, HearthError, MessageNotFound
from app.storage.orm import MessageStatus

# Reads that can return thousands of rows are plain SQL and plain tuples: SQLAlchemy's per-row processing
# cost more than SQLite itself for a 5,000-message transcript or a 10,000-conversation list (bar P5).
MESSAGE_COLUMNS = (
    "id, conversation_id, role, content, status, error, model_name, model_sha256, prompt_tokens, "
    "completion_tokens, ttft_ms, tokens_per_second, sampling_json, seed, created_at, updated_at, parent_id, "
    "template, quantization, context_note, server_name, server_url, reasoning, reasoning_seconds"
)
SELECT_MESSAGES = f"SELECT {MESSAGE_COLUMNS} FROM messages"
# The collections a conversation answers from come along as one JSON array (names, in the user's order),
# so the list of 10,000 conversations stays one query.
SELECT_CONVERSATIONS = (
    "SELECT id, title, system_prompt, created_at, updated_at, model_name, message_count, pinned, trashed_at, "
    "settings_json, current_leaf_id, (SELECT json_group_array(name) FROM (SELECT c.name AS name "
    "FROM conversation_collections cc JOIN collections c ON c.id = cc.collection_id "
    "WHERE cc.conversation_id = conversations.id ORDER BY cc.position)), tool_servers_json FROM conversations"
)


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    system_prompt: str | None
    created_at: datetime
    updated_at: datetime
    model_name: str | None
    message_count: int  # every message in the tree, all branches
    pinned: bool = False
    trashed_at: datetime | None = None
    settings: dict[str, Any] | None = None  # app.settings.GENERATION_KEYS chosen for this conversation
    current_leaf_id: int | None = None
    collections: tuple[str, ...] = ()  # the collections it answers from, in the order they were chosen
    tools: tuple[str, ...] = ()  # the MCP servers whose tools the model may call in it


@dataclass(frozen=True)
class MessagePart:
    """What a message holds besides its text (app.storage.orm.MessagePartRow): an attached file (`kind`
    "attachment", with `file_sha256`), a passage a reply was given ("source"), a call a reply made
    ("tool_call": the tool's `name`, its arguments' JSON as `text`, `call_id`) or, on a tool message, the
    result it holds ("tool_result": `call_id`, `is_error`)."""

    kind: str
    name: str | None
    file_sha256: str | None
    mime_type: str | None
    size_bytes: int | None  # of the stored file
    meta: dict[str, Any]
    text: str | None
    call_id: str | None = None
    is_error: bool = False

    @property
    def is_attachment(self) -> bool:
        return self.kind == "attachment"


@dataclass(frozen=True)
class Message:
    id: int
    conversation_id: int
    role: str
    content: str
    status: MessageStatus
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
    parent_id: int | None = None
    sibling_index: int = 1  # 1-based position among the messages with the same parent, oldest first
    sibling_count: int = 1
    template: str | None = None  # chat template that produced a reply: "gguf" or "fallback:<format>"
    quantization: str | None = None
    context_note: str | None = None  # what the overflow policy left out of this reply's prompt
    server_name: str | None = None  # a reply from an OpenAI-compatible server: which one, and its address
    server_url: str | None = None
    # What a reasoning model thought before answering: shown apart, never sent back to the model.
    reasoning: str | None = None
    reasoning_seconds: float | None = None
    parts: tuple[MessagePart, ...] = ()

    @property
    def attachments(self) -> tuple[MessagePart, ...]:
        return tuple(part for part in self.parts if part.kind == "attachment")

    @property
    def sources(self) -> tuple[MessagePart, ...]:
        return tuple(part for part in self.parts if part.kind == "source")

    @property
    def tool_calls(self) -> tuple[MessagePart, ...]:
        return tuple(part for part in self.parts if part.kind == "tool_call")

    @property
    def tool_result(self) -> MessagePart | None:
        """A tool message's result: which call it answers, from which tool, and whether it failed."""
        return next((part for part in self.parts if part.kind == "tool_result"), None)


def _json_or_none(text_value: str | None) -> dict[str, Any] | None:
    return cast(dict[str, Any], json.loads(text_value)) if text_value is not None else None


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def conversation_from_row(row: Sequence[Any]) -> Conversation:
    """From a row of SELECT_CONVERSATIONS."""
    (id_, title, system_prompt, created, updated, model_name, count, pinned, trashed, settings, leaf,
     collections, tools) = row  # fmt: skip
    return Conversation(
        id_,
        title,
        system_prompt,
        datetime.fromisoformat(created),
        datetime.fromisoformat(updated),
        model_name,
        count,
        bool(pinned),
        _time(trashed),
        _json_or_none(settings),
        leaf,
        tuple(json.loads(collections)) if collections else (),
        tuple(json.loads(tools)) if tools else (),
    )


def message_from_row(
    row: Sequence[Any], position: tuple[int, int], parts: tuple[MessagePart, ...] = ()
) -> Message:
    """From a row of SELECT_MESSAGES, and its place among its siblings."""
    (id_, conversation_id, role, content, status, error, model_name, sha256, prompt_tokens, completion_tokens,
     ttft_ms, tokens_per_second, sampling, seed, created, updated, parent_id, template, quantization,
     context_note, server_name, server_url, reasoning, reasoning_seconds) = row  # fmt: skip
    return Message(
        id_,
        conversation_id,
        role,
        content,
        MessageStatus(status),
        error,
        model_name,
        sha256,
        prompt_tokens,
        completion_tokens,
        ttft_ms,
        tokens_per_second,
        _json_or_none(sampling),
        seed,
        datetime.fromisoformat(created),
        datetime.fromisoformat(updated),
        parent_id,
        position[0],
        position[1],
        template,
        quantization,
        context_note,
        server_name,
        server_url,
        reasoning,
        reasoning_seconds,
        parts,
    )


def not_found(conversation_id: int) -> ConversationNotFound:
    return ConversationNotFound(f"There is no conversation {conversation_id}; it may have been deleted.")


def message_not_found(message_id: int) -> MessageNotFound:
    return MessageNotFound(f"There is no message {message_id}; it may have been deleted.")


def ids_json(ids: Iterable[int]) -> str:
    # One bound JSON array instead of one parameter per id: a path can be longer than SQLite's limit.
    return json.dumps(list(ids))


class MessageTree:
    """The shape of one conversation (ids and parents only), read from an index without the text."""

    def __init__(self, pairs: Iterable[tuple[int, int | None]]) -> None:
        self.parent: dict[int, int | None] = {}
        self.children: dict[int | None, list[int]] = {}
        for message_id, parent_id in sorted(pairs):
            self.parent[message_id] = parent_id
            self.children.setdefault(parent_id, []).append(message_id)

    @classmethod
    def load(cls, session: Session, conversation_id: int) -> MessageTree:
        # No ORDER BY: sorting here lets SQLite answer from the (conversation_id, parent_id) index alone.
        rows = session.execute(
            text("SELECT id, parent_id FROM messages WHERE conversation_id = :c"), {"c": conversation_id}
        )
        return cls((message_id, parent_id) for message_id, parent_id in rows)

    def path_to(self, message_id: int | None) -> list[int]:
        path: list[int] = []
        while message_id is not None:
            path.append(message_id)
            message_id = self.parent[message_id]
        path.reverse()
        return path

    def subtree(self, message_id: int) -> list[int]:
        found, stack = [], [message_id]
        while stack:
            current = stack.pop()
            found.append(current)
            stack.extend(self.children.get(current, ()))
        return found

    def latest_leaf(self, message_id: int | None) -> int | None:
        """The most recently created leaf at or below the message (or in the whole tree, for None)."""
        tops = [message_id] if message_id is not None else self.children.get(None, [])
        leaves = [m for top in tops for m in self.subtree(top) if m not in self.children]
        return max(leaves, default=message_id)

    def position(self, message_id: int) -> tuple[int, int]:
        siblings = self.children[self.parent[message_id]]
        return siblings.index(message_id) + 1, len(siblings)

    def leaf_or_latest(self, stored: int | None) -> int | None:
        return stored if stored is not None and stored in self.parent else self.latest_leaf(None)


def get_conversation(session: Session, conversation_id: int) -> Conversation:
    row = session.execute(text(f"{SELECT_CONVERSATIONS} WHERE id = :id"), {"id": conversation_id}).first()
    if row is None:
        raise not_found(conversation_id)
    return conversation_from_row(row)


def live_conversations(session: Session) -> list[Conversation]:
    """Pinned first, then the most recently updated; conversations in the trash are left out."""
    rows = session.execute(
        text(
            f"{SELECT_CONVERSATIONS} WHERE trashed_at IS NULL ORDER BY pinned DESC, updated_at DESC, id DESC"
        )
    )
    return [conversation_from_row(row) for row in rows]


def messages_by_id(session: Session, tree: MessageTree, ids: Sequence[int]) -> list[Message]:
    if not ids:
        return []
    rows = session.execute(
        text(f"{SELECT_MESSAGES} WHERE id IN (SELECT value FROM json_each(:ids))"),
        {"ids": ids_json(ids)},
    )
    by_id = {row[0]: row for row in rows}
    parts = parts_of(session, "m.id IN (SELECT value FROM json_each(:ids))", {"ids": ids_json(ids)})
    return [
        message_from_row(by_id[message_id], tree.position(message_id), parts.get(message_id, ()))
        for message_id in ids
    ]


def parts_of(session: Session, which: str, params: dict[str, Any]) -> dict[int, tuple[MessagePart, ...]]:
    """The parts of the messages `which` selects (a condition on messages `m`), by message id, in order."""
    rows = session.execute(
        text(
            "SELECT p.message_id, p.kind, p.name, p.file_sha256, p.mime_type, f.size_bytes, p.meta_json, "
            "p.text, p.call_id, p.is_error "
            "FROM message_parts p JOIN messages m ON m.id = p.message_id "
            "LEFT JOIN files f ON f.sha256 = p.file_sha256 "
            f"WHERE {which} ORDER BY p.message_id, p.position"
        ),
        params,
    )
    found: dict[int, list[MessagePart]] = {}
    for message_id, kind, name, sha, mime, size, meta, body, call_id, is_error in rows:
        part = MessagePart(
            kind, name, sha, mime, size, json.loads(meta) if meta else {}, body, call_id, bool(is_error)
        )
        found.setdefault(message_id, []).append(part)
    return {message_id: tuple(parts) for message_id, parts in found.items()}


def conversation_messages(session: Session, conversation_id: int) -> list[Message]:
    """Every message of every branch with its parts, oldest first (a parent before its children)."""
    rows = session.execute(
        text(f"{SELECT_MESSAGES} WHERE conversation_id = :c ORDER BY id"), {"c": conversation_id}
    ).all()
    tree = MessageTree((row.id, row.parent_id) for row in rows)
    parts = parts_of(session, "m.conversation_id = :c", {"c": conversation_id})
    return [message_from_row(row, tree.position(row.id), parts.get(row.id, ())) for row in rows]


def clean_title(title: str) -> str:
    cleaned = " ".join(title.split())
    if not cleaned:
        raise HearthError("A conversation needs a title.")
    return cleaned
