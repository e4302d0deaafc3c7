"""Conversations in and out of files: Hearth's JSON and Markdown exports, and imports of Hearth JSON and
ChatGPT's conversations.json (parsed and checked by app.conversations.importers before anything is
written)."""

from __future__ import annotations

import base64
import json
import logging
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from sqlalchemy import Table, insert, text
from sqlalchemy.orm import Session

from app.attachments.files import FileStore
from app.conversations.importers import (
    HEARTH_FORMAT,
    HEARTH_VERSION,
    ImportedConversation,
    ParsedImport,
    parse_file,
)
from app.conversations.records import (
    Conversation,
    Message,
    MessagePart,
    MessageTree,
    clean_title,
    conversation_messages,
    get_conversation,
    live_conversations,
    messages_by_id,
)
from app.errors import DatabaseError, HearthError
from app.settings import write_text_atomically
from app.storage.db import Database
from app.storage.orm import ConversationRow, MessagePartRow, MessageRow, MessageStatus
from app.storage.stored_files import record_file

log = logging.getLogger("hearth.conversations")

EXPORT_FORMAT = HEARTH_FORMAT
EXPORT_VERSION = HEARTH_VERSION
EXPORT_FORMATS = ("md", "json")

_CONVERSATIONS = cast(Table, ConversationRow.__table__)
_MESSAGES = cast(Table, MessageRow.__table__)
_PARTS = cast(Table, MessagePartRow.__table__)


@dataclass(frozen=True)
class ImportReport:
    conversations: int
    messages: int
    skipped: int  # messages in the file that were left out (system, tool, hidden or empty)
    conversation_ids: tuple[int, ...] = ()
    source: str = ""  # "hearth" or "chatgpt"
    skipped_conversations: int = 0  # conversations with nothing to import


def _thinking_quote(reasoning: str, seconds: float | None) -> list[str]:
    """A reply's reasoning as a quoted "Thinking" part, so it reads apart from the answer below it."""
    heading = "> **Thinking**" + (f" ({seconds:.0f} s)" if seconds is not None else "")
    return [heading, ">", *(f"> {line}" if line else ">" for line in reasoning.splitlines())]


# The message fields an export writes and an import reads back as they are (ids, sampling and times are
# translated on the way).
CARRIED_FIELDS = (
    "role",
    "content",
    "status",
    "error",
    "model_name",
    "model_sha256",
    "prompt_tokens",
    "completion_tokens",
    "ttft_ms",
    "tokens_per_second",
    "seed",
    "template",
    "quantization",
    "context_note",
    "server_name",
    "server_url",
    "reasoning",
    "reasoning_seconds",
)


def message_record(m: Message) -> dict[str, Any]:
    """A message as JSON: the shape of exports and of `hearth conversations show --json`."""
    return {
        "id": m.id,
        "parent_id": m.parent_id,
        **{name: getattr(m, name) for name in CARRIED_FIELDS},
        "sampling": m.sampling,
        "created_at": m.created_at.isoformat(),
        "updated_at": m.updated_at.isoformat(),
        **({"attachments": [_attachment_record(p) for p in m.attachments]} if m.attachments else {}),
        **({"sources": [_source_record(p) for p in m.sources]} if m.sources else {}),
        **({"tool_calls": [_call_record(p) for p in m.tool_calls]} if m.tool_calls else {}),
        **_result_record(m.tool_result),
    }


def _call_record(part: MessagePart) -> dict[str, Any]:
    # OpenAI's names; the arguments as the model wrote them (a string), since a refused call may hold
    # arguments that are not JSON.
    return {"id": part.call_id, "name": part.name, "arguments": part.text}


def _result_record(part: MessagePart | None) -> dict[str, Any]:
    if part is None:
        return {}
    return {"tool_call_id": part.call_id, "tool_name": part.name, "is_error": part.is_error}


def _attachment_record(part: MessagePart) -> dict[str, Any]:
    return {
        "name": part.name,
        "kind": part.meta.get("kind"),
        "mime_type": part.mime_type,
        "size": part.size_bytes,
        "sha256": part.file_sha256,
        "pages": part.meta.get("pages"),
        "mode": part.meta.get("mode"),
    }


def _source_record(part: MessagePart) -> dict[str, Any]:
    return {
        "name": part.name,
        "location": part.meta.get("location"),
        "text": part.text,
        "score": part.meta.get("score"),
        "collection": part.meta.get("collection"),
        "sha256": part.file_sha256 or part.meta.get("content_sha256"),
    }


@dataclass(frozen=True)
class ExportReport:
    written: list[Path]
    # (conversation id, title, why) for each conversation whose text could not be read.
    unreadable: list[tuple[int, str, str]]


def export_json(db: Database, conversation_id: int, files: FileStore | None = None) -> dict[str, Any]:
    """A JSON-ready dict, stable across releases of the same `version` (README: "JSON output"). With
    `files`, the attached files travel in it (base64), so an import elsewhere has them."""
    with db.read_session() as session:
        conversation = get_conversation(session, conversation_id)
        messages = conversation_messages(session, conversation_id)
    attached = {p.file_sha256: p for m in messages for p in m.attachments if p.file_sha256}
    carried: dict[str, Any] = {}
    if attached and files is not None:
        for sha, part in sorted(attached.items()):
            try:
                data = files.path(sha).read_bytes()
            except FileNotFoundError:
                continue
            carried[sha] = {
                "mime_type": part.mime_type,
                "size": len(data),
                "data": base64.b64encode(data).decode(),
            }
    used_tools = any(m.tool_calls or m.role == "tool" for m in messages)
    return {
        "format": EXPORT_FORMAT,
        # Older readers would drop attachments or tool calls without a word: only a conversation that has
        # them says the version that carries them.
        "version": EXPORT_VERSION if used_tools else 3 if attached else 2,
        **({"files": carried} if attached else {}),
        "conversation": {
            "id": conversation.id,
            "title": conversation.title,
            "system_prompt": conversation.system_prompt,
            "created_at": conversation.created_at.isoformat(),
            "updated_at": conversation.updated_at.isoformat(),
            "model_name": conversation.model_name,
            "pinned": conversation.pinned,
            "settings": conversation.settings,
            "current_leaf_id": MessageTree((m.id, m.parent_id) for m in messages).leaf_or_latest(
                conversation.current_leaf_id
            ),
        },
        "messages": [message_record(m) for m in messages],
    }


def export_markdown(db: Database, conversation_id: int) -> str:
    """The visible branch as Markdown (other branches are counted, not shown)."""
    with db.read_session() as session:
        conversation = get_conversation(session, conversation_id)
        tree = MessageTree.load(session, conversation_id)
        messages = messages_by_id(
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
        if m.status != MessageStatus.COMPLETE:
            note = f"*[{m.status}]*" if not m.error else f"*[{m.status}: {m.error}]*"
            lines += [note, ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def export_all(db: Database, directory: Path, fmt: str, files: FileStore | None = None) -> ExportReport:
    """One file per conversation (not those in the trash), named `<id>-<title>.md|json`.

    A conversation whose text cannot be read (a damaged page) is skipped and reported, so the others
    still get out: this is also how a damaged database is salvaged. Never writes to the database.
    """
    if fmt not in EXPORT_FORMATS:
        raise ValueError(f"fmt must be one of {EXPORT_FORMATS}, not {fmt!r}")
    directory = Path(directory)
    report = ExportReport([], [])
    with db.read_session() as session:
        conversations = live_conversations(session)
    for conversation in conversations:
        try:
            if fmt == "md":
                content = export_markdown(db, conversation.id)
            else:
                exported = export_json(db, conversation.id, files)
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


def import_file(db: Database, path: Path, files: FileStore | None = None) -> ImportReport:
    """Import a Hearth JSON export or ChatGPT's conversations.json, all of it or (on any error) nothing.

    Raises HearthError naming the place in the file that could not be imported.
    """
    parsed = parse_file(Path(path))
    carried = [f for c in parsed.conversations for f in c.files]
    if carried and files is None:
        raise HearthError(
            f"{Path(path).name} carries attached files, which cannot be kept here. Nothing was imported."
        )
    # Bytes first: a failure after this leaves only unreferenced files, which the next start deletes. Pinned
    # until the conversations hold them, so a conversation deleted meanwhile cannot release them (a file
    # also waiting in the composer stays pinned for it).
    waiting = files.pinned() if files is not None else frozenset()
    for sha, _mime, data in carried:
        assert files is not None
        files.put_bytes(data, sha, pin=True)
    try:
        ids = _write_import(db, parsed)
    finally:
        if files is not None:
            files.unpin({sha for sha, _mime, _data in carried} - waiting)
    return ImportReport(
        conversations=len(ids),
        messages=sum(len(c.messages) for c in parsed.conversations),
        skipped=parsed.skipped_messages,
        conversation_ids=tuple(ids),
        source=parsed.source,
        skipped_conversations=parsed.skipped_conversations,
    )


def _write_import(db: Database, parsed: ParsedImport) -> list[int]:
    with db.session() as session:
        # The ids are handed out here, inside the write lock, so the whole file goes in with a few
        # multi-row statements; AUTOINCREMENT's counter moves past them as usual.
        next_conversation = _next_id(session, "conversations")
        next_message = _next_id(session, "messages")
        conversation_rows: list[dict[str, Any]] = []
        message_rows: list[dict[str, Any]] = []
        part_rows: list[dict[str, Any]] = []
        for conversation in parsed.conversations:
            ids = {m.key: next_message + i for i, m in enumerate(conversation.messages)}
            next_message += len(ids)
            message_rows += _imported_messages(conversation, next_conversation, ids)
            part_rows += [
                {
                    "message_id": ids[m.key],
                    "position": position,
                    "kind": part.kind,
                    "name": part.name,
                    "file_sha256": part.file_sha256,
                    "mime_type": part.mime_type,
                    "meta_json": json.dumps(part.meta, ensure_ascii=False, sort_keys=True)
                    if part.meta
                    else None,
                    "text": part.text,
                    "call_id": part.call_id,
                    "is_error": part.is_error,
                }
                for m in conversation.messages
                for position, part in enumerate(m.parts)
            ]
            conversation_rows.append(
                {
                    "id": next_conversation,
                    "title": clean_title(conversation.title),
                    "system_prompt": conversation.system_prompt,
                    "created_at": conversation.created_at,
                    "updated_at": conversation.updated_at,
                    "model_name": conversation.model_name,
                    "current_leaf_id": _imported_leaf(conversation, ids),
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
        for sha, mime, data in {f[0]: f for c in parsed.conversations for f in c.files}.values():
            record_file(session, sha, len(data), mime)
        if part_rows:
            session.execute(insert(_PARTS), part_rows)
        return [row["id"] for row in conversation_rows]


def _imported_leaf(conversation: ImportedConversation, ids: Mapping[str, int]) -> int | None:
    if conversation.current_key is not None:
        return ids[conversation.current_key]
    tree = MessageTree(
        (ids[m.key], ids[m.parent_key] if m.parent_key is not None else None) for m in conversation.messages
    )
    return tree.latest_leaf(None)


def _imported_messages(
    conversation: ImportedConversation, conversation_id: int, ids: Mapping[str, int]
) -> list[dict[str, Any]]:
    return [
        {
            "id": ids[m.key],
            "conversation_id": conversation_id,
            "parent_id": ids[m.parent_key] if m.parent_key is not None else None,
            **{name: getattr(m, name) for name in CARRIED_FIELDS},
            "sampling_json": json.dumps(m.sampling, sort_keys=True) if m.sampling is not None else None,
            "created_at": m.created_at,
            "updated_at": m.updated_at or m.created_at,
        }
        for m in conversation.messages
    ]


def _next_id(session: Session, table: str) -> int:
    used = session.execute(
        text("SELECT seq FROM sqlite_sequence WHERE name = :table"), {"table": table}
    ).scalar()
    return int(used or 0) + 1


def export_filename(conversation: Conversation, fmt: str) -> str:
    """`<id>-<title words>.<fmt>`: safe on every file system, unique through the id, readable in a listing."""
    words = re.findall(r"\w+", unicodedata.normalize("NFKC", conversation.title))
    slug = "-".join(words)[:60].strip("-_") or "chat"
    return f"{conversation.id:05d}-{slug}.{fmt}"
