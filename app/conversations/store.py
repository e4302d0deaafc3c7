"""Conversations and their messages, handed out as frozen dataclasses (never ORM objects).

A conversation's messages form a tree: each message names the one it follows (`parent_id`). Regenerating a
reply adds a sibling of the old reply; editing a prompt adds a sibling of the old prompt. The transcript the
user sees is the path from the root to the conversation's current leaf, so earlier branches stay and can be
returned to.
"""

from __future__ import annotations

import enum
import json
import logging
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal, cast

from sqlalchemy import Row, Table, delete, func, insert, select, text, update
from sqlalchemy.orm import Session

from app.conversations.importers import (
    HEARTH_FORMAT,
    HEARTH_VERSION,
    ImportedConversation,
    ParsedImport,
    parse_file,
)
from app.errors import ConversationNotFound, DatabaseError, HearthError, MessageNotFound
from app.settings import clean_generation_settings, write_text_atomically
from app.storage.db import Database
from app.storage.orm import MESSAGE_STATUSES, ROLES, ConversationRow, MessageRow

log = logging.getLogger("hearth.conversations")

DEFAULT_TITLE = "New chat"
AUTO_TITLE_CHARS = 60
EXPORT_FORMAT = HEARTH_FORMAT
EXPORT_VERSION = HEARTH_VERSION
EXPORT_FORMATS = ("md", "json")
FINAL_STATUSES = tuple(s for s in MESSAGE_STATUSES if s != "streaming")
INTERRUPTED_ERROR = "The reply was cut off because Hearth or its model runner stopped before it finished."
# Search snippets mark each hit with these; the GUI turns them into highlighting, the CLI into «».
HIT_START = "\x02"
HIT_END = "\x03"
SNIPPET_TOKENS = 16
# Ranking costs about a microsecond per match: a word found in 100,000 messages would take 100 ms to rank.
# Beyond this many matches only the newest ones are ranked (all of them still count as found).
RANKED_MATCHES = 20_000
# A shorter last word matches too many words as a prefix to be worth the time while the user types.
PREFIX_MIN_CHARS = 3

_CONVERSATIONS = cast(Table, ConversationRow.__table__)
_MESSAGES = cast(Table, MessageRow.__table__)
# Reads that can return thousands of rows are plain SQL and plain tuples: SQLAlchemy's per-row processing
# cost more than SQLite itself for a 5,000-message transcript or a 10,000-conversation list (bar P5).
_MESSAGE_COLUMNS = (
    "id, conversation_id, role, content, status, error, model_name, model_sha256, prompt_tokens, "
    "completion_tokens, ttft_ms, tokens_per_second, sampling_json, seed, created_at, updated_at, parent_id, "
    "template, quantization, context_note, server_name, server_url, reasoning, reasoning_seconds"
)
_SELECT_MESSAGES = f"SELECT {_MESSAGE_COLUMNS} FROM messages"
_SELECT_CONVERSATIONS = (
    "SELECT id, title, system_prompt, created_at, updated_at, model_name, message_count, pinned, trashed_at, "
    "settings_json, current_leaf_id FROM conversations"
)
_WORD = re.compile(r"\w")


class _Position(enum.Enum):
    CURRENT_LEAF = "current leaf"


# Where a new message goes when no parent is named: under the message the user is looking at.
CURRENT_LEAF: Final = _Position.CURRENT_LEAF
ParentChoice = int | None | Literal[_Position.CURRENT_LEAF]


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


@dataclass(frozen=True)
class SearchHit:
    conversation_id: int
    message_id: int | None  # None when the conversation's title matched
    title: str
    snippet: str  # the matching text with each hit between HIT_START and HIT_END
    rank: float  # bm25: lower is better; comparable only among hits of the same kind
    role: str | None = None  # the matching message's role
    in_reasoning: bool = False  # the snippet is from the reply's reasoning (its answer did not match)


@dataclass(frozen=True)
class ImportReport:
    conversations: int
    messages: int
    skipped: int  # messages in the file that were left out (system, tool, hidden or empty)
    conversation_ids: tuple[int, ...] = ()
    source: str = ""  # "hearth" or "chatgpt"
    skipped_conversations: int = 0  # conversations with nothing to import


def _now() -> datetime:
    return datetime.now(UTC)


def _json_or_none(text_value: str | None) -> dict[str, Any] | None:
    return cast(dict[str, Any], json.loads(text_value)) if text_value is not None else None


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value is not None else None


def _conversation(row: Sequence[Any]) -> Conversation:
    """From a row of _SELECT_CONVERSATIONS."""
    (id_, title, system_prompt, created, updated, model_name, count, pinned, trashed, settings, leaf) = row
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
    )


def _message(row: Sequence[Any], position: tuple[int, int]) -> Message:
    """From a row of _SELECT_MESSAGES, and its place among its siblings."""
    (id_, conversation_id, role, content, status, error, model_name, sha256, prompt_tokens, completion_tokens,
     ttft_ms, tokens_per_second, sampling, seed, created, updated, parent_id, template, quantization,
     context_note, server_name, server_url, reasoning, reasoning_seconds) = row  # fmt: skip
    return Message(
        id_,
        conversation_id,
        role,
        content,
        status,
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
    )


def _not_found(conversation_id: int) -> ConversationNotFound:
    return ConversationNotFound(f"There is no conversation {conversation_id}; it may have been deleted.")


def _message_not_found(message_id: int) -> MessageNotFound:
    return MessageNotFound(f"There is no message {message_id}; it may have been deleted.")


def _thinking_quote(reasoning: str, seconds: float | None) -> list[str]:
    """A reply's reasoning as a quoted "Thinking" part, so it reads apart from the answer below it."""
    heading = "> **Thinking**" + (f" ({seconds:.0f} s)" if seconds is not None else "")
    return [heading, ">", *(f"> {line}" if line else ">" for line in reasoning.splitlines())]


def _one_line_title(text_value: str) -> str:
    title = " ".join(text_value.split())
    if len(title) <= AUTO_TITLE_CHARS:
        return title
    cut = title[:AUTO_TITLE_CHARS]
    # Prefer ending on a word boundary unless that throws away most of the title.
    space = cut.rfind(" ")
    if space >= AUTO_TITLE_CHARS // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def match_expression(query: str) -> str | None:
    """The FTS5 query for what the user typed: every word must occur, the last one also as a prefix.

    Each whitespace-separated piece is quoted, so FTS5 operators and stray quotes or brackets are plain
    text and can never be a syntax error. None when there is nothing to search for.
    """
    pieces = [piece for piece in query.split() if _WORD.search(piece)]
    if not pieces:
        return None
    quoted = ['"' + piece.replace('"', '""') + '"' for piece in pieces]
    # Search as you type: the word being typed matches the words it starts.
    last = pieces[-1]
    if _WORD.match(last[-1]) and len(last) >= PREFIX_MIN_CHARS:
        quoted[-1] += "*"
    return " ".join(quoted)


def _ids_json(ids: Iterable[int]) -> str:
    # One bound JSON array instead of one parameter per id: a path can be longer than SQLite's limit.
    return json.dumps(list(ids))


class _Tree:
    """The shape of one conversation (ids and parents only), read from an index without the text."""

    def __init__(self, pairs: Iterable[tuple[int, int | None]]) -> None:
        self.parent: dict[int, int | None] = {}
        self.children: dict[int | None, list[int]] = {}
        for message_id, parent_id in sorted(pairs):
            self.parent[message_id] = parent_id
            self.children.setdefault(parent_id, []).append(message_id)

    @classmethod
    def load(cls, session: Session, conversation_id: int) -> _Tree:
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


def message_record(m: Message) -> dict[str, Any]:
    """A message as JSON: the shape of exports and of `hearth conversations show --json`."""
    return {
        "id": m.id,
        "parent_id": m.parent_id,
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
        "template": m.template,
        "quantization": m.quantization,
        "context_note": m.context_note,
        "server_name": m.server_name,
        "server_url": m.server_url,
        "reasoning": m.reasoning,
        "reasoning_seconds": m.reasoning_seconds,
        "created_at": m.created_at.isoformat(),
        "updated_at": m.updated_at.isoformat(),
    }


@dataclass(frozen=True)
class ExportReport:
    written: list[Path]
    # (conversation id, title, why) for each conversation whose text could not be read.
    unreadable: list[tuple[int, str, str]]


class ConversationStore:
    """Every method runs in its own short transaction and may be called from any thread."""

    def __init__(self, db: Database) -> None:
        self._db = db

    # Conversations ---------------------------------------------------------------------------------------

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
            return self._get(session, row.id)

    def list_conversations(self) -> list[Conversation]:
        """Pinned first, then the most recently updated; conversations in the trash are left out."""
        with self._db.read_session() as session:
            rows = session.execute(
                text(
                    f"{_SELECT_CONVERSATIONS} WHERE trashed_at IS NULL "
                    "ORDER BY pinned DESC, updated_at DESC, id DESC"
                )
            )
            return [_conversation(row) for row in rows]

    def list_trashed(self) -> list[Conversation]:
        """Conversations in the trash, most recently trashed first."""
        with self._db.read_session() as session:
            rows = session.execute(
                text(
                    f"{_SELECT_CONVERSATIONS} WHERE trashed_at IS NOT NULL ORDER BY trashed_at DESC, id DESC"
                )
            )
            return [_conversation(row) for row in rows]

    def get_conversation(self, conversation_id: int) -> Conversation:
        """Also finds a conversation in the trash (its window may still be showing it)."""
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

    def set_pinned(self, conversation_id: int, pinned: bool) -> Conversation:
        with self._db.session() as session:
            self._row(session, conversation_id).pinned = pinned
            session.flush()
            return self._get(session, conversation_id)

    def set_conversation_settings(
        self, conversation_id: int, system_prompt: str | None, settings: Mapping[str, object]
    ) -> Conversation:
        """Replace the conversation's system prompt and generation settings (app.settings.GENERATION_KEYS).

        An empty mapping means "use the model's defaults and the global settings". Raises HearthError
        naming the first bad setting; nothing is changed then.
        """
        cleaned = clean_generation_settings(settings)
        with self._db.session() as session:
            row = self._row(session, conversation_id)
            row.system_prompt = system_prompt if system_prompt and system_prompt.strip() else None
            row.settings_json = json.dumps(cleaned, sort_keys=True) if cleaned else None
            session.flush()
            return self._get(session, conversation_id)

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

    def trash_conversation(self, conversation_id: int) -> None:
        """Hide the conversation (undo with restore_conversation); purge_trashed deletes it for good."""
        with self._db.session() as session:
            self._row(session, conversation_id).trashed_at = _now()

    def restore_conversation(self, conversation_id: int) -> Conversation:
        with self._db.session() as session:
            self._row(session, conversation_id).trashed_at = None
            session.flush()
            return self._get(session, conversation_id)

    def purge_trashed(self) -> int:
        """Delete every conversation in the trash as delete_conversation does; returns how many."""
        with self._db.session() as session:
            trashed = session.scalars(
                select(ConversationRow.id).where(ConversationRow.trashed_at.is_not(None))
            ).all()
            if trashed:
                session.execute(delete(ConversationRow).where(ConversationRow.id.in_(trashed)))
                self._compact_search_index(session)
        if trashed:
            self._db.checkpoint()
        return len(trashed)

    def delete_conversation(self, conversation_id: int) -> None:
        """Delete the conversation and its messages so that none of their text stays on disk.

        secure_delete zeroes the freed space in the database file; compacting the search index removes
        the words it still held; the checkpoint then folds the WAL (which still holds the old pages) into
        the file and truncates it.
        """
        with self._db.session() as session:
            session.delete(self._row(session, conversation_id))
            session.flush()
            self._compact_search_index(session)
        self._db.checkpoint()

    # Messages --------------------------------------------------------------------------------------------

    def list_messages(self, conversation_id: int) -> list[Message]:
        """The visible transcript: the path from the root to the current leaf."""
        with self._db.read_session() as session:
            row = self._row(session, conversation_id)
            tree = _Tree.load(session, conversation_id)
            return self._messages(session, tree, tree.path_to(tree.leaf_or_latest(row.current_leaf_id)))

    def list_all_messages(self, conversation_id: int) -> list[Message]:
        """Every message of every branch, oldest first (a parent always comes before its children)."""
        with self._db.read_session() as session:
            self._row(session, conversation_id)
            rows = self._conversation_messages(session, conversation_id)
            tree = _Tree((row.id, row.parent_id) for row in rows)
            return [_message(row, tree.position(row.id)) for row in rows]

    def get_message(self, message_id: int) -> Message:
        with self._db.read_session() as session:
            return self._one_message(session, message_id)

    def path_to(self, message_id: int) -> list[Message]:
        """The messages from the root down to this one, inclusive."""
        with self._db.read_session() as session:
            row = self._message_row(session, message_id)
            tree = _Tree.load(session, row.conversation_id)
            return self._messages(session, tree, tree.path_to(message_id))

    def siblings(self, message_id: int) -> list[Message]:
        """The messages with the same parent (alternatives to each other), oldest first."""
        with self._db.read_session() as session:
            row = self._message_row(session, message_id)
            tree = _Tree.load(session, row.conversation_id)
            return self._messages(session, tree, tree.children[row.parent_id])

    def switch_to(self, message_id: int) -> list[Message]:
        """Show the branch through this message, down to the most recent reply below it.

        Returns the new visible path. Does not reorder the conversation list: nothing was written.
        """
        with self._db.session() as session:
            row = self._message_row(session, message_id)
            tree = _Tree.load(session, row.conversation_id)
            leaf = tree.latest_leaf(message_id)
            session.execute(
                update(ConversationRow)
                .where(ConversationRow.id == row.conversation_id)
                .values(current_leaf_id=leaf)
            )
            return self._messages(session, tree, tree.path_to(leaf))

    def delete_message(self, message_id: int) -> list[Message]:
        """Delete a message and everything below it, leaving none of their text on disk.

        If the transcript was showing the deleted branch, it moves to a remaining alternative (the
        previous sibling, else the next), or to the parent when there is none. Returns the new path.
        """
        with self._db.session() as session:
            row = self._message_row(session, message_id)
            conversation = self._row(session, row.conversation_id)
            tree = _Tree.load(session, row.conversation_id)
            doomed = tree.subtree(message_id)
            leaf = tree.leaf_or_latest(conversation.current_leaf_id)
            if leaf is None or leaf in doomed:
                siblings = [s for s in tree.children[row.parent_id] if s != message_id]
                before = [s for s in siblings if s < message_id]
                replacement = before[-1] if before else (siblings[0] if siblings else None)
                leaf = tree.latest_leaf(replacement) if replacement is not None else row.parent_id
            # One statement: the parent links inside the subtree are checked once, at its end.
            session.execute(
                text("DELETE FROM messages WHERE id IN (SELECT value FROM json_each(:ids))"),
                {"ids": _ids_json(doomed)},
            )
            conversation.current_leaf_id = leaf
            conversation.updated_at = _now()
            session.flush()
            self._compact_search_index(session)
            remaining = _Tree.load(session, row.conversation_id)
            path = self._messages(session, remaining, remaining.path_to(leaf))
        self._db.checkpoint()
        return path

    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        *,
        status: str = "complete",
        parent_id: ParentChoice = CURRENT_LEAF,
    ) -> Message:
        """Add a message after `parent_id` (default: the current leaf; None: a new root) and show it."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, not {role!r}")
        if status not in MESSAGE_STATUSES:
            raise ValueError(f"status must be one of {MESSAGE_STATUSES}, not {status!r}")
        return self._insert_message(
            MessageRow(conversation_id=conversation_id, role=role, content=content, status=status), parent_id
        )

    def start_assistant_message(
        self,
        conversation_id: int,
        *,
        model_name: str,
        model_sha256: str | None,
        sampling: Mapping[str, Any],
        seed: int | None,
        parent_id: ParentChoice = CURRENT_LEAF,
        template: str | None = None,
        quantization: str | None = None,
        context_note: str | None = None,
        server_name: str | None = None,
        server_url: str | None = None,
    ) -> Message:
        """The reply's row exists from before the first token, so a crash mid-reply keeps what came.

        A reply from a server has no model file (`model_sha256` None) and names the server instead."""
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
                template=template,
                quantization=quantization,
                context_note=context_note,
                server_name=server_name,
                server_url=server_url,
            ),
            parent_id,
        )

    def flush_streaming_text(self, message_id: int, content: str, *, reasoning: str | None = None) -> bool:
        """Save the reply (answer and reasoning) so far. False when the message is no longer streaming (or
        was deleted)."""
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
                update(MessageRow)
                .where(MessageRow.id == message_id)
                .values(content=content, reasoning=reasoning, updated_at=now)
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
        reasoning: str | None = None,
        reasoning_seconds: float | None = None,
        context_note: str | None = None,
    ) -> bool:
        """Store the reply's final text and outcome. False when it was not streaming (or was deleted).

        `seed` is the seed the runner actually used and `context_note` what the context cost the reply; None
        keeps the one recorded at the start.
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
            row.reasoning = reasoning
            row.reasoning_seconds = reasoning_seconds
            if seed is not None:
                row.seed = seed
            if context_note is not None:
                row.context_note = context_note
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

    # Search ----------------------------------------------------------------------------------------------

    def search(self, query: str, limit: int = 50) -> list[SearchHit]:
        """Conversations whose title matches come first, then messages, each best match first.

        Every word must occur (the last one may also be the start of a word). Conversations in the trash
        and replies still streaming are not searched. For words in more than RANKED_MATCHES messages,
        the best of the newest RANKED_MATCHES are returned.
        """
        match = match_expression(query)
        if match is None or limit < 1:
            return []
        with self._db.read_session() as session:
            titles = session.execute(
                text(
                    "SELECT c.id, c.title, highlight(conversations_fts, 0, :start, :end) AS snippet, f.rank "
                    "FROM conversations_fts AS f JOIN conversations AS c ON c.id = f.rowid "
                    "WHERE conversations_fts MATCH :match AND c.trashed_at IS NULL "
                    "ORDER BY f.rank LIMIT :limit"
                ),
                {"match": match, "start": HIT_START, "end": HIT_END, "limit": max(1, limit // 5)},
            ).all()
            hits = [SearchHit(row.id, None, row.title, row.snippet, row.rank) for row in titles]
            # Ids grow with time: the oldest of the newest RANKED_MATCHES matches (when there are more).
            oldest_ranked = session.execute(
                text(
                    "SELECT rowid FROM messages_fts WHERE messages_fts MATCH :match "
                    "ORDER BY rowid DESC LIMIT 1 OFFSET :offset"
                ),
                {"match": match, "offset": RANKED_MATCHES - 1},
            ).scalar()
            wanted = limit - len(hits)
            fetch = wanted
            while True:
                found = self._message_hits(session, match, oldest_ranked or 0, fetch)
                shown = [hit for hit in found if hit is not None]
                # Trashed conversations are few and short-lived: asking again for more is rare.
                if len(shown) >= wanted or len(found) < fetch:
                    return hits + shown[:wanted]
                fetch *= 4

    @staticmethod
    def _message_hits(session: Session, match: str, oldest: int, limit: int) -> list[SearchHit | None]:
        """The best `limit` message hits, None for those in the trash.

        The FTS table is queried alone: FTS5 then sorts by rank itself and computes snippets only for the
        rows returned. Joined to other tables, SQLite would make a snippet for every match before sorting
        (100 ms for a word in 100,000 messages).
        """
        # A snippet per column: the answer's when it matched, else the reasoning's (FTS5's own choice of
        # column would not say which one it took).
        ranked = session.execute(
            text(
                "SELECT rowid AS id, rank, snippet(messages_fts, 0, :start, :end, '…', :tokens) AS snippet, "
                "snippet(messages_fts, 1, :start, :end, '…', :tokens) AS reasoning_snippet "
                "FROM messages_fts WHERE messages_fts MATCH :match AND rowid >= :oldest "
                "ORDER BY rank LIMIT :limit"
            ),
            {
                "match": match,
                "oldest": oldest,
                "limit": limit,
                "start": HIT_START,
                "end": HIT_END,
                "tokens": SNIPPET_TOKENS,
            },
        ).all()
        where = session.execute(
            text(
                "SELECT m.id, m.conversation_id, m.role, c.title, c.trashed_at IS NOT NULL AS trashed "
                "FROM messages AS m JOIN conversations AS c ON c.id = m.conversation_id "
                "WHERE m.id IN (SELECT value FROM json_each(:ids))"
            ),
            {"ids": _ids_json(row.id for row in ranked)},
        )
        found = {row.id: row for row in where}
        hits: list[SearchHit | None] = []
        for row in ranked:
            in_reasoning = HIT_START not in row.snippet and HIT_START in (row.reasoning_snippet or "")
            hits.append(
                None
                if found[row.id].trashed
                else SearchHit(
                    found[row.id].conversation_id,
                    row.id,
                    found[row.id].title,
                    row.reasoning_snippet if in_reasoning else row.snippet,
                    row.rank,
                    found[row.id].role,
                    in_reasoning,
                )
            )
        return hits

    # Export and import -----------------------------------------------------------------------------------

    def export_json(self, conversation_id: int) -> dict[str, Any]:
        """A JSON-ready dict, stable across releases of the same `version` (README: "JSON output")."""
        with self._db.read_session() as session:
            conversation = self._get(session, conversation_id)
            rows = self._conversation_messages(session, conversation_id)
        messages = [_message(row, (1, 1)) for row in rows]
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
                "pinned": conversation.pinned,
                "settings": conversation.settings,
                "current_leaf_id": _Tree((m.id, m.parent_id) for m in messages).leaf_or_latest(
                    conversation.current_leaf_id
                ),
            },
            "messages": [message_record(m) for m in messages],
        }

    def export_markdown(self, conversation_id: int) -> str:
        """The visible branch as Markdown (other branches are counted, not shown)."""
        with self._db.read_session() as session:
            conversation = self._get(session, conversation_id)
            tree = _Tree.load(session, conversation_id)
            messages = self._messages(
                session, tree, tree.path_to(tree.leaf_or_latest(conversation.current_leaf_id))
            )
        lines = [
            f"# {conversation.title}",
            "",
            f"*Exported from Hearth · started {conversation.created_at:%Y-%m-%d %H:%M} UTC · "
            f"{len(messages)} messages*",
            "",
        ]
        hidden = conversation.message_count - len(messages)
        if hidden > 0:
            lines += [f"*The current branch is shown; {hidden} messages on other branches are not.*", ""]
        if conversation.system_prompt:
            lines += ["## System prompt", "", conversation.system_prompt, ""]
        for m in messages:
            heading = m.role.capitalize()
            if m.role == "assistant" and m.model_name:
                heading += f" ({m.model_name})"
            lines += [f"## {heading}", ""]
            if m.context_note:
                lines += [f"*[{m.context_note}]*", ""]
            if m.reasoning:
                lines += [*_thinking_quote(m.reasoning, m.reasoning_seconds), ""]
            lines += [m.content, ""]
            if m.status != "complete":
                note = f"*[{m.status}]*" if not m.error else f"*[{m.status}: {m.error}]*"
                lines += [note, ""]
        return "\n".join(lines).rstrip("\n") + "\n"

    def export_all(self, directory: Path, fmt: str) -> ExportReport:
        """One file per conversation (not those in the trash), named `<id>-<title>.md|json`.

        A conversation whose text cannot be read (a damaged page) is skipped and reported, so the others
        still get out: this is also how a damaged database is salvaged. Never writes to the database.
        """
        if fmt not in EXPORT_FORMATS:
            raise ValueError(f"fmt must be one of {EXPORT_FORMATS}, not {fmt!r}")
        directory = Path(directory)
        report = ExportReport([], [])
        for conversation in self.list_conversations():
            try:
                if fmt == "md":
                    content = self.export_markdown(conversation.id)
                else:
                    exported = self.export_json(conversation.id)
                    content = json.dumps(exported, indent=2, ensure_ascii=False) + "\n"
            except DatabaseError as exc:
                log.warning("conversation %d could not be read: %s", conversation.id, exc)
                report.unreadable.append((conversation.id, conversation.title, str(exc)))
                continue
            target = directory / export_filename(conversation, fmt)
            try:
                write_text_atomically(target, content)
            except OSError as exc:
                raise HearthError(
                    f"Could not write {target}: {exc.strerror or exc}. {len(report.written)} of the "
                    "conversations were exported before it."
                ) from exc
            report.written.append(target)
        return report

    def import_file(self, path: Path) -> ImportReport:
        """Import a Hearth JSON export or ChatGPT's conversations.json, all of it or (on any error) nothing.

        Raises HearthError naming the place in the file that could not be imported.
        """
        parsed = parse_file(Path(path))
        ids = self._write_import(parsed)
        return ImportReport(
            conversations=len(ids),
            messages=sum(len(c.messages) for c in parsed.conversations),
            skipped=parsed.skipped_messages,
            conversation_ids=tuple(ids),
            source=parsed.source,
            skipped_conversations=parsed.skipped_conversations,
        )

    def _write_import(self, parsed: ParsedImport) -> list[int]:
        with self._db.session() as session:
            # The ids are handed out here, inside the write lock, so the whole file goes in with a few
            # multi-row statements; AUTOINCREMENT's counter moves past them as usual.
            next_conversation = self._next_id(session, "conversations")
            next_message = self._next_id(session, "messages")
            conversation_rows: list[dict[str, Any]] = []
            message_rows: list[dict[str, Any]] = []
            for conversation in parsed.conversations:
                ids = {m.key: next_message + i for i, m in enumerate(conversation.messages)}
                next_message += len(ids)
                message_rows += self._imported_messages(conversation, next_conversation, ids)
                conversation_rows.append(
                    {
                        "id": next_conversation,
                        "title": self._clean_title(conversation.title),
                        "system_prompt": conversation.system_prompt,
                        "created_at": conversation.created_at,
                        "updated_at": conversation.updated_at,
                        "model_name": conversation.model_name,
                        "current_leaf_id": self._imported_leaf(conversation, ids),
                        "pinned": conversation.pinned,
                        "trashed_at": None,
                        "settings_json": json.dumps(conversation.settings, sort_keys=True)
                        if conversation.settings
                        else None,
                    }
                )
                next_conversation += 1
            if conversation_rows:
                session.execute(insert(_CONVERSATIONS), conversation_rows)
            if message_rows:
                session.execute(insert(_MESSAGES), message_rows)
            return [row["id"] for row in conversation_rows]

    @staticmethod
    def _imported_leaf(conversation: ImportedConversation, ids: Mapping[str, int]) -> int | None:
        if conversation.current_key is not None:
            return ids[conversation.current_key]
        tree = _Tree(
            (ids[m.key], ids[m.parent_key] if m.parent_key is not None else None)
            for m in conversation.messages
        )
        return tree.latest_leaf(None)

    @staticmethod
    def _imported_messages(
        conversation: ImportedConversation, conversation_id: int, ids: Mapping[str, int]
    ) -> list[dict[str, Any]]:
        return [
            {
                "id": ids[m.key],
                "conversation_id": conversation_id,
                "parent_id": ids[m.parent_key] if m.parent_key is not None else None,
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
                "sampling_json": json.dumps(m.sampling, sort_keys=True) if m.sampling is not None else None,
                "seed": m.seed,
                "template": m.template,
                "quantization": m.quantization,
                "context_note": m.context_note,
                "server_name": m.server_name,
                "server_url": m.server_url,
                "reasoning": m.reasoning,
                "reasoning_seconds": m.reasoning_seconds,
                "created_at": m.created_at,
                "updated_at": m.updated_at or m.created_at,
            }
            for m in conversation.messages
        ]

    # Helpers ---------------------------------------------------------------------------------------------

    @staticmethod
    def _clean_title(title: str) -> str:
        cleaned = " ".join(title.split())
        if not cleaned:
            raise HearthError("A conversation needs a title.")
        return cleaned

    @staticmethod
    def _row(session: Session, conversation_id: int) -> ConversationRow:
        row = session.get(ConversationRow, conversation_id)
        if row is None:
            raise _not_found(conversation_id)
        return row

    @staticmethod
    def _message_row(session: Session, message_id: int) -> MessageRow:
        row = session.get(MessageRow, message_id)
        if row is None:
            raise _message_not_found(message_id)
        return row

    @staticmethod
    def _get(session: Session, conversation_id: int) -> Conversation:
        row = session.execute(
            text(f"{_SELECT_CONVERSATIONS} WHERE id = :id"), {"id": conversation_id}
        ).first()
        if row is None:
            raise _not_found(conversation_id)
        return _conversation(row)

    @staticmethod
    def _messages(session: Session, tree: _Tree, ids: Sequence[int]) -> list[Message]:
        if not ids:
            return []
        rows = session.execute(
            text(f"{_SELECT_MESSAGES} WHERE id IN (SELECT value FROM json_each(:ids))"),
            {"ids": _ids_json(ids)},
        )
        by_id = {row[0]: row for row in rows}
        return [_message(by_id[message_id], tree.position(message_id)) for message_id in ids]

    @staticmethod
    def _conversation_messages(session: Session, conversation_id: int) -> Sequence[Row[Any]]:
        return session.execute(
            text(f"{_SELECT_MESSAGES} WHERE conversation_id = :c ORDER BY id"), {"c": conversation_id}
        ).all()

    def _one_message(self, session: Session, message_id: int) -> Message:
        row = session.execute(text(f"{_SELECT_MESSAGES} WHERE id = :id"), {"id": message_id}).first()
        if row is None:
            raise _message_not_found(message_id)
        return _message(row, self._position(session, row.conversation_id, row.parent_id, message_id))

    @staticmethod
    def _position(
        session: Session, conversation_id: int, parent_id: int | None, message_id: int
    ) -> tuple[int, int]:
        same_parent = (
            MessageRow.parent_id == parent_id
            if parent_id is not None
            else (MessageRow.conversation_id == conversation_id) & MessageRow.parent_id.is_(None)
        )
        siblings = session.scalars(select(MessageRow.id).where(same_parent).order_by(MessageRow.id)).all()
        return siblings.index(message_id) + 1, len(siblings)

    @staticmethod
    def _touch(session: Session, conversation_id: int, now: datetime) -> None:
        session.execute(
            update(ConversationRow).where(ConversationRow.id == conversation_id).values(updated_at=now)
        )

    @staticmethod
    def _next_id(session: Session, table: str) -> int:
        used = session.execute(
            text("SELECT seq FROM sqlite_sequence WHERE name = :table"), {"table": table}
        ).scalar()
        return int(used or 0) + 1

    @staticmethod
    def _compact_search_index(session: Session) -> None:
        """Rewrite the search index without the entries of deleted text.

        FTS5 deletes by adding tombstones; the words themselves stay in older index segments until those
        are merged. Merging everything ("optimize") drops them, and secure_delete zeroes the freed pages.
        (SQLite 3.42's FTS5 secure-delete option would do this per row, but a database that ever used it
        cannot be written by older SQLite builds, which some Linux systems still ship.)
        """
        session.execute(text("INSERT INTO conversations_fts(conversations_fts) VALUES ('optimize')"))
        session.execute(text("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')"))

    def _insert_message(self, row: MessageRow, parent: ParentChoice) -> Message:
        now = _now()
        row.created_at = row.updated_at = now
        with self._db.session() as session:
            conversation = self._row(session, row.conversation_id)
            if parent is CURRENT_LEAF:
                row.parent_id = self._current_leaf(session, conversation)
            elif parent is not None:
                owner = session.scalar(select(MessageRow.conversation_id).where(MessageRow.id == parent))
                if owner != row.conversation_id:
                    raise _message_not_found(parent)
                row.parent_id = parent
            conversation.updated_at = now
            session.add(row)
            session.flush()
            conversation.current_leaf_id = row.id
            session.flush()
            return self._one_message(session, row.id)

    @staticmethod
    def _current_leaf(session: Session, conversation: ConversationRow) -> int | None:
        leaf = conversation.current_leaf_id
        if leaf is not None:
            owner = session.scalar(select(MessageRow.conversation_id).where(MessageRow.id == leaf))
            if owner == conversation.id:
                return leaf
        return _Tree.load(session, conversation.id).latest_leaf(None)


def export_filename(conversation: Conversation, fmt: str) -> str:
    """`<id>-<title words>.<fmt>`: safe on every file system, unique through the id, readable in a listing."""
    words = re.findall(r"\w+", unicodedata.normalize("NFKC", conversation.title))
    slug = "-".join(words)[:60].strip("-_") or "chat"
    return f"{conversation.id:05d}-{slug}.{fmt}"
