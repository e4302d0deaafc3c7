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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.orm import Session

from app.attachments.files import FileStore
from app.conversations import exchange, records, search
from app.conversations.exchange import (
    EXPORT_FORMATS,
    ExportReport,
    ImportReport,
    export_filename,
    message_record,
)
from app.conversations.records import Conversation, Message
from app.conversations.search import HIT_END, HIT_START, SearchHit, match_expression
from app.settings import clean_generation_settings
from app.storage.db import Database
from app.storage.orm import (
    MESSAGE_STATUSES,
    ROLES,
    CollectionRow,
    ConversationCollectionRow,
    ConversationRow,
    MessagePartRow,
    MessageRow,
    MessageStatus,
)

# The package's face: what callers import from here, wherever it is defined.
__all__ = [
    "AUTO_TITLE_CHARS",
    "CURRENT_LEAF",
    "DEFAULT_TITLE",
    "EXPORT_FORMATS",
    "FINAL_STATUSES",
    "HIT_END",
    "HIT_START",
    "INTERRUPTED_ERROR",
    "Conversation",
    "ConversationStore",
    "ExportReport",
    "ImportReport",
    "Message",
    "ParentChoice",
    "PartInput",
    "ReplyProvenance",
    "SearchHit",
    "TurnStart",
    "export_filename",
    "match_expression",
    "message_record",
]

log = logging.getLogger("hearth.conversations")

DEFAULT_TITLE = "New chat"
AUTO_TITLE_CHARS = 60
FINAL_STATUSES = tuple(s for s in MessageStatus if s is not MessageStatus.STREAMING)
INTERRUPTED_ERROR = "The reply was cut off because Hearth or its model runner stopped before it finished."


class _Position(enum.Enum):
    CURRENT_LEAF = "current leaf"


# Where a new message goes when no parent is named: under the message the user is looking at.
CURRENT_LEAF: Final = _Position.CURRENT_LEAF
ParentChoice = int | None | Literal[_Position.CURRENT_LEAF]


def _now() -> datetime:
    return datetime.now(UTC)


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


@dataclass(frozen=True)
class ReplyProvenance:
    """What a reply is made with, recorded on its row before the first token. A reply from a server has no
    model file (`model_sha256` None) and names the server instead."""

    model_name: str
    model_sha256: str | None
    sampling: Mapping[str, Any]
    seed: int | None
    template: str | None = None
    quantization: str | None = None
    context_note: str | None = None
    server_name: str | None = None
    server_url: str | None = None

    def row(self, conversation_id: int) -> MessageRow:
        return MessageRow(
            conversation_id=conversation_id,
            role="assistant",
            content="",
            status=MessageStatus.STREAMING,
            model_name=self.model_name,
            model_sha256=self.model_sha256,
            sampling_json=json.dumps(dict(self.sampling), sort_keys=True),
            seed=self.seed,
            template=self.template,
            quantization=self.quantization,
            context_note=self.context_note,
            server_name=self.server_name,
            server_url=self.server_url,
        )


@dataclass(frozen=True)
class PartInput:
    """A part to store with a message: an attachment (its file already stored, `file_sha256` in `files`),
    a source passage of a reply, a call a reply made or a tool's result (see MessagePart)."""

    kind: str  # app.storage.orm.PART_KINDS
    name: str | None
    file_sha256: str | None = None
    mime_type: str | None = None
    meta: Mapping[str, Any] | None = None
    text: str | None = None
    call_id: str | None = None
    is_error: bool = False

    def row(self, message_id: int, position: int) -> MessagePartRow:
        return MessagePartRow(
            message_id=message_id,
            position=position,
            kind=self.kind,
            name=self.name,
            file_sha256=self.file_sha256,
            mime_type=self.mime_type,
            meta_json=json.dumps(dict(self.meta), ensure_ascii=False, sort_keys=True) if self.meta else None,
            text=self.text,
            call_id=self.call_id,
            is_error=self.is_error,
        )


@dataclass(frozen=True)
class TurnStart:
    conversation_id: int
    prompt_id: int  # the user's new message, or the message answered again
    reply: Message


class ConversationStore:
    """Every method runs in its own short transaction and may be called from any thread."""

    def __init__(
        self, db: Database, *, files: FileStore | None = None, on_release: Callable[[], None] | None = None
    ) -> None:
        """`files`: where attached files are stored, for exports and imports to carry them, and whose pins a
        prompt that now holds its files lets go of (the same store as the documents'). `on_release`
        runs after messages were deleted, to delete what only they held (stored files, their text and
        passages: app.documents, which this package does not import)."""
        self._db = db
        self._files = files
        self._on_release = on_release

    # Conversations ---------------------------------------------------------------------------------------

    def create_conversation(
        self, title: str = DEFAULT_TITLE, system_prompt: str | None = None
    ) -> Conversation:
        now = _now()
        row = ConversationRow(
            title=records.clean_title(title), system_prompt=system_prompt, created_at=now, updated_at=now
        )
        with self._db.session() as session:
            session.add(row)
            session.flush()
            return records.get_conversation(session, row.id)

    def list_conversations(self) -> list[Conversation]:
        """Pinned first, then the most recently updated; conversations in the trash are left out."""
        with self._db.read_session() as session:
            return records.live_conversations(session)

    def list_trashed(self) -> list[Conversation]:
        """Conversations in the trash, most recently trashed first."""
        with self._db.read_session() as session:
            rows = session.execute(
                text(
                    f"{records.SELECT_CONVERSATIONS} WHERE trashed_at IS NOT NULL "
                    "ORDER BY trashed_at DESC, id DESC"
                )
            )
            return [records.conversation_from_row(row) for row in rows]

    def get_conversation(self, conversation_id: int) -> Conversation:
        """Also finds a conversation in the trash (its window may still be showing it)."""
        with self._db.read_session() as session:
            return records.get_conversation(session, conversation_id)

    def rename_conversation(self, conversation_id: int, title: str) -> Conversation:
        with self._db.session() as session:
            row = self._row(session, conversation_id)
            row.title = records.clean_title(title)
            row.updated_at = _now()
            session.flush()
            return records.get_conversation(session, conversation_id)

    def set_conversation_model(self, conversation_id: int, model_name: str | None) -> None:
        with self._db.session() as session:
            row = self._row(session, conversation_id)
            row.model_name = model_name
            row.updated_at = _now()

    def set_pinned(self, conversation_id: int, pinned: bool) -> Conversation:
        with self._db.session() as session:
            self._row(session, conversation_id).pinned = pinned
            session.flush()
            return records.get_conversation(session, conversation_id)

    def set_conversation_collections(self, conversation_id: int, names: Sequence[str]) -> Conversation:
        """The conversation answers from these collections from now on, in this order (none: from no
        collection). Names of collections that no longer exist are left out: a removal may race the choice."""
        with self._db.session() as session:
            self._row(session, conversation_id)
            known = select(CollectionRow.name, CollectionRow.id).where(CollectionRow.name.in_(names))
            ids = {name: collection_id for name, collection_id in session.execute(known)}
            session.execute(
                delete(ConversationCollectionRow).where(
                    ConversationCollectionRow.conversation_id == conversation_id
                )
            )
            chosen = [name for name in dict.fromkeys(names) if name in ids]
            session.add_all(
                ConversationCollectionRow(
                    conversation_id=conversation_id, collection_id=ids[name], position=i
                )
                for i, name in enumerate(chosen)
            )
            session.flush()
            return records.get_conversation(session, conversation_id)

    def set_conversation_tools(self, conversation_id: int, servers: Sequence[str]) -> Conversation:
        """The model may call the tools of these MCP servers (mcp.json names) in the conversation from now on
        (none: no tools)."""
        chosen = list(dict.fromkeys(servers))
        with self._db.session() as session:
            row = self._row(session, conversation_id)
            row.tool_servers_json = json.dumps(chosen) if chosen else None
            session.flush()
            return records.get_conversation(session, conversation_id)

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
            return records.get_conversation(session, conversation_id)

    def auto_title(self, conversation_id: int, first_prompt: str) -> Conversation:
        """Title the conversation after its first prompt, unless the user already named it."""
        with self._db.session() as session:
            self._auto_title(self._row(session, conversation_id), first_prompt, _now())
            session.flush()
            return records.get_conversation(session, conversation_id)

    @staticmethod
    def _auto_title(row: ConversationRow, first_prompt: str, now: datetime) -> None:
        title = _one_line_title(first_prompt)
        if row.title == DEFAULT_TITLE and title:
            row.title = title
            row.updated_at = now

    def trash_conversation(self, conversation_id: int) -> None:
        """Hide the conversation (undo with restore_conversation); purge_trashed deletes it for good."""
        with self._db.session() as session:
            self._row(session, conversation_id).trashed_at = _now()

    def restore_conversation(self, conversation_id: int) -> Conversation:
        with self._db.session() as session:
            self._row(session, conversation_id).trashed_at = None
            session.flush()
            return records.get_conversation(session, conversation_id)

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
            self._released()
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
        self._released()

    # Messages --------------------------------------------------------------------------------------------

    def list_messages(self, conversation_id: int) -> list[Message]:
        """The visible transcript: the path from the root to the current leaf."""
        with self._db.read_session() as session:
            row = self._row(session, conversation_id)
            tree = records.MessageTree.load(session, conversation_id)
            return records.messages_by_id(
                session, tree, tree.path_to(tree.leaf_or_latest(row.current_leaf_id))
            )

    def list_all_messages(self, conversation_id: int) -> list[Message]:
        """Every message of every branch, oldest first (a parent always comes before its children)."""
        with self._db.read_session() as session:
            self._row(session, conversation_id)
            return records.conversation_messages(session, conversation_id)

    def get_message(self, message_id: int) -> Message:
        with self._db.read_session() as session:
            return self._one_message(session, message_id)

    def path_to(self, message_id: int) -> list[Message]:
        """The messages from the root down to this one, inclusive."""
        with self._db.read_session() as session:
            row = self._message_row(session, message_id)
            tree = records.MessageTree.load(session, row.conversation_id)
            return records.messages_by_id(session, tree, tree.path_to(message_id))

    def siblings(self, message_id: int) -> list[Message]:
        """The messages with the same parent (alternatives to each other), oldest first."""
        with self._db.read_session() as session:
            row = self._message_row(session, message_id)
            tree = records.MessageTree.load(session, row.conversation_id)
            return records.messages_by_id(session, tree, tree.children[row.parent_id])

    def switch_to(self, message_id: int) -> list[Message]:
        """Show the branch through this message, down to the most recent reply below it.

        Returns the new visible path. Does not reorder the conversation list: nothing was written.
        """
        with self._db.session() as session:
            row = self._message_row(session, message_id)
            tree = records.MessageTree.load(session, row.conversation_id)
            leaf = tree.latest_leaf(message_id)
            session.execute(
                update(ConversationRow)
                .where(ConversationRow.id == row.conversation_id)
                .values(current_leaf_id=leaf)
            )
            return records.messages_by_id(session, tree, tree.path_to(leaf))

    def delete_message(self, message_id: int) -> list[Message]:
        """Delete a message and everything below it, leaving none of their text on disk.

        If the transcript was showing the deleted branch, it moves to a remaining alternative (the
        previous sibling, else the next), or to the parent when there is none. Returns the new path.
        """
        with self._db.session() as session:
            row = self._message_row(session, message_id)
            conversation = self._row(session, row.conversation_id)
            tree = records.MessageTree.load(session, row.conversation_id)
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
                {"ids": records.ids_json(doomed)},
            )
            conversation.current_leaf_id = leaf
            conversation.updated_at = _now()
            session.flush()
            self._compact_search_index(session)
            remaining = records.MessageTree.load(session, row.conversation_id)
            path = records.messages_by_id(session, remaining, remaining.path_to(leaf))
        self._db.checkpoint()
        self._released()
        return path

    def _released(self) -> None:
        if self._on_release is not None:
            self._on_release()

    def add_message(
        self,
        conversation_id: int,
        role: str,
        content: str,
        *,
        status: str = MessageStatus.COMPLETE,
        parent_id: ParentChoice = CURRENT_LEAF,
    ) -> Message:
        """Add a message after `parent_id` (default: the current leaf; None: a new root) and show it."""
        if role == "tool":
            raise ValueError("a tool message answers a call: add it with add_tool_result, not by role")
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
        """The reply's row exists from before the first token, so a crash mid-reply keeps what came."""
        provenance = ReplyProvenance(
            model_name,
            model_sha256,
            sampling,
            seed,
            template=template,
            quantization=quantization,
            context_note=context_note,
            server_name=server_name,
            server_url=server_url,
        )
        return self._insert_message(provenance.row(conversation_id), parent_id)

    def begin_turn(
        self,
        conversation_id: int | None,
        *,
        prompt: str | None,
        after: int | None,
        system_prompt: str | None,
        reply: ReplyProvenance,
        prompt_parts: Sequence[PartInput] = (),
        reply_parts: Sequence[PartInput] = (),
    ) -> TurnStart:
        """Everything a turn writes before its first token, in one transaction: the conversation (when
        `conversation_id` is None), the user's prompt after `after` (None: answer `after` again), the
        title from the first prompt, the model, and the reply's streaming row, with the prompt's attachments
        and the sources the reply is given. A failure leaves nothing."""
        if prompt is None and prompt_parts:
            raise ValueError("attachments come with a new prompt")
        now = _now()
        with self._db.session() as session:
            if conversation_id is None:
                conversation = ConversationRow(
                    title=DEFAULT_TITLE, system_prompt=system_prompt, created_at=now, updated_at=now
                )
                session.add(conversation)
                session.flush()
            else:
                conversation = self._row(session, conversation_id)
            if prompt is not None:
                prompt_row = MessageRow(
                    conversation_id=conversation.id,
                    role="user",
                    content=prompt,
                    status=MessageStatus.COMPLETE,
                )
                prompt_id = self._insert_in(session, conversation, prompt_row, after, now)
                session.add_all(part.row(prompt_id, n) for n, part in enumerate(prompt_parts))
                self._auto_title(conversation, prompt, now)
            else:
                if after is None:
                    raise ValueError("answering again needs the message to answer")
                prompt_id = after
            conversation.model_name = reply.model_name
            reply_id = self._insert_in(session, conversation, reply.row(conversation.id), prompt_id, now)
            session.add_all(part.row(reply_id, n) for n, part in enumerate(reply_parts))
            session.flush()
            started = TurnStart(conversation.id, prompt_id, self._one_message(session, reply_id))
        if self._files is not None:
            # The prompt holds its files now: they no longer wait in the composer (DocumentLibrary.attach).
            self._files.unpin(part.file_sha256 for part in prompt_parts if part.file_sha256)
        return started

    def flush_streaming_text(self, message_id: int, content: str, *, reasoning: str | None = None) -> bool:
        """Save the reply (answer and reasoning) so far. False when the message is no longer streaming (or
        was deleted)."""
        now = _now()
        with self._db.session() as session:
            conversation_id = session.scalar(
                select(MessageRow.conversation_id).where(
                    MessageRow.id == message_id, MessageRow.status == MessageStatus.STREAMING
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
        tool_calls: Sequence[PartInput] = (),
    ) -> bool:
        """Store the reply's final text and outcome. False when it was not streaming (or was deleted).

        `seed` is the seed the runner actually used and `context_note` what the context cost the reply; None
        keeps the one recorded at the start. `tool_calls`: the calls the reply made, after its other parts.
        """
        if status not in FINAL_STATUSES:
            raise ValueError(f"status must be one of {FINAL_STATUSES}, not {status!r}")
        now = _now()
        with self._db.session() as session:
            row = session.get(MessageRow, message_id)
            if row is None or row.status != MessageStatus.STREAMING:
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
            if tool_calls:
                first = session.scalar(
                    select(func.count())
                    .select_from(MessagePartRow)
                    .where(MessagePartRow.message_id == row.id)
                )
                session.add_all(part.row(row.id, (first or 0) + n) for n, part in enumerate(tool_calls))
            row.updated_at = now
            self._touch(session, row.conversation_id, now)
            return True

    def add_tool_result(
        self, after: int, *, call_id: str, tool_name: str, text: str, is_error: bool = False
    ) -> Message:
        """A tool's result as a message of its own (role `tool`) after `after`: the reply that made the
        call, or the result before it when the reply made several. It is shown, searched and exported like
        any message."""
        now = _now()
        with self._db.session() as session:
            parent = self._message_row(session, after)
            conversation = self._row(session, parent.conversation_id)
            row = MessageRow(
                conversation_id=conversation.id, role="tool", content=text, status=MessageStatus.COMPLETE
            )
            message_id = self._insert_in(session, conversation, row, after, now)
            part = PartInput("tool_result", tool_name, call_id=call_id, is_error=is_error)
            session.add(part.row(message_id, 0))
            session.flush()
            return self._one_message(session, message_id)

    def mark_interrupted_streaming(self) -> int:
        """At start-up: replies still marked streaming were cut off by a crash. Returns how many."""
        now = _now()
        streaming = MessageRow.status == MessageStatus.STREAMING
        with self._db.session() as session:
            conversation_ids = session.scalars(select(MessageRow.conversation_id).where(streaming)).all()
            session.execute(
                update(MessageRow)
                .where(streaming)
                .values(
                    status=MessageStatus.INTERRUPTED,
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
        return search.search(self._db, query, limit)

    # Export and import -----------------------------------------------------------------------------------

    def export_json(self, conversation_id: int) -> dict[str, Any]:
        """A JSON-ready dict, stable across releases of the same `version` (README: "JSON output")."""
        return exchange.export_json(self._db, conversation_id, self._files)

    def export_markdown(self, conversation_id: int) -> str:
        """The visible branch as Markdown (other branches are counted, not shown)."""
        return exchange.export_markdown(self._db, conversation_id)

    def export_all(self, directory: Path, fmt: str) -> ExportReport:
        """One file per conversation (not those in the trash), named `<id>-<title>.md|json`.

        A conversation whose text cannot be read (a damaged page) is skipped and reported, so the others
        still get out: this is also how a damaged database is salvaged. Never writes to the database.
        """
        return exchange.export_all(self._db, directory, fmt, self._files)

    def import_file(self, path: Path) -> ImportReport:
        """Import a Hearth JSON export or ChatGPT's conversations.json, all of it or (on any error) nothing.

        Raises HearthError naming the place in the file that could not be imported.
        """
        return exchange.import_file(self._db, path, self._files)

    # Helpers ---------------------------------------------------------------------------------------------

    @staticmethod
    def _row(session: Session, conversation_id: int) -> ConversationRow:
        row = session.get(ConversationRow, conversation_id)
        if row is None:
            raise records.not_found(conversation_id)
        return row

    @staticmethod
    def _message_row(session: Session, message_id: int) -> MessageRow:
        row = session.get(MessageRow, message_id)
        if row is None:
            raise records.message_not_found(message_id)
        return row

    def _one_message(self, session: Session, message_id: int) -> Message:
        row = session.execute(text(f"{records.SELECT_MESSAGES} WHERE id = :id"), {"id": message_id}).first()
        if row is None:
            raise records.message_not_found(message_id)
        parts = records.parts_of(session, "m.id = :id", {"id": message_id})
        return records.message_from_row(
            row,
            self._position(session, row.conversation_id, row.parent_id, message_id),
            parts.get(message_id, ()),
        )

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
    def _compact_search_index(session: Session) -> None:
        """Rewrite the search index without the entries of deleted text.

        FTS5 deletes by adding tombstones; the words themselves stay in older index segments until those
        are merged. Merging everything ("optimize") drops them, and secure_delete zeroes the freed pages.
        (SQLite 3.42's FTS5 secure-delete option would do this per row, but a database that ever used it
        cannot be written by older SQLite builds, which some Linux systems still ship.)
        """
        session.execute(text("INSERT INTO conversations_fts(conversations_fts) VALUES ('optimize')"))
        session.execute(text("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')"))
        session.execute(text("INSERT INTO tool_calls_fts(tool_calls_fts) VALUES ('optimize')"))

    def _insert_message(self, row: MessageRow, parent: ParentChoice) -> Message:
        with self._db.session() as session:
            conversation = self._row(session, row.conversation_id)
            return self._one_message(session, self._insert_in(session, conversation, row, parent, _now()))

    def _insert_in(
        self,
        session: Session,
        conversation: ConversationRow,
        row: MessageRow,
        parent: ParentChoice,
        now: datetime,
    ) -> int:
        row.created_at = row.updated_at = now
        if parent is CURRENT_LEAF:
            row.parent_id = self._current_leaf(session, conversation)
        elif parent is not None:
            owner = session.scalar(select(MessageRow.conversation_id).where(MessageRow.id == parent))
            if owner != row.conversation_id:
                raise records.message_not_found(parent)
            row.parent_id = parent
        conversation.updated_at = now
        session.add(row)
        session.flush()
        conversation.current_leaf_id = row.id
        session.flush()
        return row.id

    @staticmethod
    def _current_leaf(session: Session, conversation: ConversationRow) -> int | None:
        leaf = conversation.current_leaf_id
        if leaf is not None:
            owner = session.scalar(select(MessageRow.conversation_id).where(MessageRow.id == leaf))
            if owner == conversation.id:
                return leaf
        return records.MessageTree.load(session, conversation.id).latest_leaf(None)
