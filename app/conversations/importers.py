"""Reading conversation files from elsewhere: Hearth's own JSON export and ChatGPT's `conversations.json`.

Everything is parsed and checked before the store writes anything, so a file that is wrong anywhere is
refused whole with a message that says where (ConversationStore.import_file then writes it in one
transaction). The result is a neutral tree of messages keyed by the ids the file used.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeGuard

from app.errors import HearthError
from app.settings import clean_generation_settings
from app.storage.orm import MESSAGE_STATUSES, ROLES, MessageStatus

HEARTH_FORMAT = "hearth.conversation"
# 3: attachments and sources on messages, and the attached files themselves ("files"); written only for a
# conversation that has attachments, so every other export stays readable by older Hearths.
# 4: tool calls on replies and tool messages (role "tool"); written only for a conversation that has them.
HEARTH_VERSION = 4
# An attached file carried in an export is decoded whole: bound what one file may make us hold.
MAX_IMPORTED_FILE_BYTES = 200 * 1024 * 1024
IMPORTED_TITLE = "Imported chat"
# What stands in for parts of a ChatGPT message that are not text (the files themselves are not in
# conversations.json).
IMAGE_PLACEHOLDER = "[image not imported]"
AUDIO_PLACEHOLDER = "[audio not imported]"
ATTACHMENT_PLACEHOLDER = "[attachment not imported]"

# ChatGPT content types whose parts are what the user saw; the rest are tool calls, tool output, browsing
# traces, reasoning summaries and the user's hidden custom instructions.
_CHATGPT_TEXT_TYPES = frozenset({"text", "multimodal_text"})


@dataclass(frozen=True)
class ImportedMessage:
    key: str  # the message's id in the file
    parent_key: str | None
    role: str
    content: str
    created_at: datetime
    status: MessageStatus = MessageStatus.COMPLETE
    updated_at: datetime | None = None
    error: str | None = None
    model_name: str | None = None
    model_sha256: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_ms: float | None = None
    tokens_per_second: float | None = None
    sampling: dict[str, Any] | None = None
    seed: int | None = None
    template: str | None = None
    quantization: str | None = None
    context_note: str | None = None
    server_name: str | None = None
    server_url: str | None = None
    reasoning: str | None = None
    reasoning_seconds: float | None = None
    parts: tuple[ImportedPart, ...] = ()


@dataclass(frozen=True)
class ImportedPart:
    kind: str  # app.storage.orm.PART_KINDS
    name: str | None
    file_sha256: str | None
    mime_type: str | None
    meta: dict[str, Any]
    text: str | None
    call_id: str | None = None
    is_error: bool = False


@dataclass(frozen=True)
class ImportedConversation:
    title: str
    created_at: datetime
    updated_at: datetime
    messages: tuple[ImportedMessage, ...]  # every parent before its children
    current_key: str | None  # the leaf of the branch that was showing
    system_prompt: str | None = None
    model_name: str | None = None
    pinned: bool = False
    settings: dict[str, Any] | None = None
    skipped: int = 0  # its messages that were left out (system, tool, hidden, empty)
    files: tuple[tuple[str, str, bytes], ...] = ()  # (sha256, mime type, bytes) of the attachments


@dataclass(frozen=True)
class ParsedImport:
    source: str  # "hearth" or "chatgpt"
    conversations: tuple[ImportedConversation, ...]
    skipped_conversations: int = 0  # conversations with nothing to import
    skipped_messages: int = 0  # in every conversation of the file, imported or not


def parse_file(path: Path) -> ParsedImport:
    """Raises HearthError, naming the file and the place in it, for anything that cannot be imported."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise HearthError(f"Could not read {path}: {exc.strerror or exc}.") from exc
    try:
        data = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise HearthError(
            f"{path.name} is not UTF-8 text (byte {exc.start}), so it is not a JSON export."
        ) from exc
    except json.JSONDecodeError as exc:
        raise HearthError(
            f"{path.name} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})."
        ) from exc
    except RecursionError as exc:
        raise HearthError(f"{path.name} is nested too deeply to be a conversation export.") from exc
    return parse_data(data, path.name)


def parse_data(data: object, name: str) -> ParsedImport:
    if isinstance(data, dict) and data.get("format") == HEARTH_FORMAT:
        return ParsedImport("hearth", (_hearth(data, _Where(name)),))
    if isinstance(data, dict) and "mapping" in data:
        data = [data]  # one conversation taken out of conversations.json
    if isinstance(data, list) and all(isinstance(c, dict) and "mapping" in c for c in data):
        return _chatgpt(data, name)
    raise HearthError(
        f'{name} is neither a Hearth conversation export (an object with "format": "{HEARTH_FORMAT}") '
        'nor ChatGPT\'s conversations.json (a list of conversations, each with a "mapping").'
    )


class _Where:
    """Where in the file a problem is, for error messages."""

    def __init__(self, name: str, *parts: str) -> None:
        self.name = name
        self.parts = parts

    def __truediv__(self, part: str) -> _Where:
        return _Where(self.name, *self.parts, part)

    def error(self, problem: str) -> HearthError:
        place = ", ".join(self.parts)
        return HearthError(f"{self.name}: {place + ': ' if place else ''}{problem}. Nothing was imported.")


# Hearth's own export -------------------------------------------------------------------------------------


def _hearth(data: Mapping[str, Any], where: _Where) -> ImportedConversation:
    version = data.get("version")
    if not _is_int(version) or version < 1:
        raise where.error(f'"version" should be a number from 1 to {HEARTH_VERSION}, not {_shown(version)}')
    if version > HEARTH_VERSION:
        raise where.error(
            f"it was written by a newer Hearth (format version {version}; this one reads up to "
            f"{HEARTH_VERSION}). Update Hearth to import it"
        )
    conversation = data.get("conversation")
    messages = data.get("messages")
    if not isinstance(conversation, dict):
        raise where.error('"conversation" should be an object')
    if not isinstance(messages, list):
        raise where.error('"messages" should be a list')
    head = where / "conversation"
    title = _text(conversation, "title", head, required=True)
    now = datetime.now(UTC)
    created = _iso(conversation.get("created_at"), head / "created_at", default=now)
    settings = conversation.get("settings")
    if settings is not None:
        if not isinstance(settings, dict):
            raise head.error('"settings" should be an object or null')
        try:
            settings = clean_generation_settings(settings) or None
        except HearthError as exc:
            raise head.error(str(exc).rstrip(".")) from exc
    parsed: list[ImportedMessage] = []
    seen: set[str] = set()
    previous: str | None = None
    for index, item in enumerate(messages):
        at = where / f"message {index + 1}"
        message = _hearth_message(item, at, version, previous, seen)
        parsed.append(message)
        seen.add(message.key)
        previous = message.key
    files = _hearth_files(data.get("files"), where / "files") if version >= 3 else ()
    carried = {sha for sha, _, _ in files}
    for message, index in zip(parsed, range(len(parsed)), strict=True):
        for part in message.parts:
            if part.kind == "attachment" and part.file_sha256 not in carried:
                raise (where / f"message {index + 1}").error(
                    f'attachment {_shown(part.name)} has no file in "files"'
                )
    current = conversation.get("current_leaf_id")
    current_key = previous
    if version >= 2 and current is not None:
        current_key = str(current)
        if current_key not in seen:
            raise head.error(f"current_leaf_id {_shown(current)} is not one of its messages")
    return ImportedConversation(
        title=title or IMPORTED_TITLE,
        created_at=created,
        updated_at=_iso(conversation.get("updated_at"), head / "updated_at", default=created),
        messages=tuple(parsed),
        current_key=current_key,
        system_prompt=_text(conversation, "system_prompt", head),
        model_name=_text(conversation, "model_name", head),
        pinned=conversation.get("pinned") is True,
        settings=settings,
        files=files,
    )


def _hearth_files(raw: object, at: _Where) -> tuple[tuple[str, str, bytes], ...]:
    """The attached files an export carries, each checked against the digest it is named by."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise at.error("should be an object of files by their SHA-256")
    files: list[tuple[str, str, bytes]] = []
    for sha, item in raw.items():
        here = at / f"file {sha[:12]}"
        if not isinstance(item, dict) or not isinstance(item.get("data"), str):
            raise here.error('should be an object with the file\'s base64 "data"')
        encoded = item["data"]
        if len(encoded) > MAX_IMPORTED_FILE_BYTES * 4 // 3 + 4:
            raise here.error(
                f"is larger than the {MAX_IMPORTED_FILE_BYTES // (1024 * 1024)} MB an attachment may be"
            )
        try:
            data = base64.b64decode(encoded, validate=True)
        except binascii.Error as exc:
            raise here.error("is not valid base64") from exc
        if hashlib.sha256(data).hexdigest() != sha:
            raise here.error("does not match its SHA-256 (the file was changed or damaged)")
        mime = item.get("mime_type")
        files.append((sha, mime if isinstance(mime, str) else "application/octet-stream", data))
    return tuple(files)


def _hearth_parts(item: Mapping[str, Any], at: _Where) -> tuple[ImportedPart, ...]:
    parts: list[ImportedPart] = []
    for key, kind in (("attachments", "attachment"), ("sources", "source")):
        listed = item.get(key)
        if listed is None:
            continue
        if not isinstance(listed, list) or not all(isinstance(p, dict) for p in listed):
            raise at.error(f'"{key}" should be a list of objects')
        for entry in listed:
            sha = entry.get("sha256")
            if sha is not None and not (isinstance(sha, str) and len(sha) == 64):
                raise at.error(f'"{key}": "sha256" should be a SHA-256, not {_shown(sha)}')
            if kind == "attachment":
                meta = {k: entry.get(k) for k in ("kind", "pages", "mode") if entry.get(k) is not None}
                parts.append(
                    ImportedPart(
                        kind, _text(entry, "name", at), sha, _text(entry, "mime_type", at), meta, None
                    )
                )
            else:
                meta = {
                    k: entry.get(k) for k in ("location", "score", "collection") if entry.get(k) is not None
                }
                meta["content_sha256"] = sha
                parts.append(
                    ImportedPart(kind, _text(entry, "name", at), None, None, meta, _text(entry, "text", at))
                )
    calls = item.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            raise at.error('"tool_calls" should be a list of objects')
        for call in calls:
            name, call_id = _text(call, "name", at), _text(call, "id", at)
            parts.append(
                ImportedPart("tool_call", name, None, None, {}, _text(call, "arguments", at), call_id)
            )
    if item.get("role") == "tool":
        is_error = item.get("is_error", False)
        if not isinstance(is_error, bool):
            raise at.error(f'"is_error" should be true or false, not {_shown(is_error)}')
        parts.append(
            ImportedPart(
                "tool_result",
                _text(item, "tool_name", at),
                None,
                None,
                {},
                None,
                _text(item, "tool_call_id", at, required=True),
                is_error,
            )
        )
    return tuple(parts)


def _hearth_message(
    item: object, at: _Where, version: int, previous: str | None, seen: set[str]
) -> ImportedMessage:
    if not isinstance(item, dict):
        raise at.error("should be an object")
    raw_id = item.get("id")
    if not _is_int(raw_id):
        raise at.error(f'"id" should be an integer, not {_shown(raw_id)}')
    key = str(raw_id)
    if key in seen:
        raise at.error(f"id {raw_id} is used twice")
    if version >= 2:
        raw_parent = item.get("parent_id")
        if raw_parent is not None and not _is_int(raw_parent):
            raise at.error(f'"parent_id" should be an integer or null, not {_shown(raw_parent)}')
        parent = None if raw_parent is None else str(raw_parent)
        if parent is not None and parent not in seen:
            raise at.error(f"parent_id {raw_parent} is not an earlier message of this conversation")
    else:
        parent = previous  # version 1 was a plain list
    role = item.get("role")
    roles = ROLES if version >= 4 else tuple(r for r in ROLES if r != "tool")  # tool messages came in 4
    if role not in roles:
        raise at.error(f'"role" should be one of {", ".join(roles)}, not {_shown(role)}')
    status = item.get("status", MessageStatus.COMPLETE)
    if status not in MESSAGE_STATUSES:
        raise at.error(f'"status" should be one of {", ".join(MESSAGE_STATUSES)}, not {_shown(status)}')
    content = item.get("content")
    if not isinstance(content, str):
        raise at.error(f'"content" should be a string, not {_shown(content)}')
    sampling = item.get("sampling")
    if sampling is not None and not isinstance(sampling, dict):
        raise at.error('"sampling" should be an object or null')
    created = _iso(item.get("created_at"), at / "created_at", default=datetime.now(UTC))
    return ImportedMessage(
        key=key,
        parent_key=parent,
        role=role,
        content=content,
        # Nothing is streaming into an imported reply; one cut off in the other database stays marked so.
        status=MessageStatus.INTERRUPTED if status == MessageStatus.STREAMING else MessageStatus(status),
        created_at=created,
        updated_at=_iso(item.get("updated_at"), at / "updated_at", default=created),
        error=_text(item, "error", at),
        model_name=_text(item, "model_name", at),
        model_sha256=_text(item, "model_sha256", at),
        prompt_tokens=_int_or_none(item, "prompt_tokens", at),
        completion_tokens=_int_or_none(item, "completion_tokens", at),
        ttft_ms=_number_or_none(item, "ttft_ms", at),
        tokens_per_second=_number_or_none(item, "tokens_per_second", at),
        sampling=sampling,
        seed=_int_or_none(item, "seed", at),
        template=_text(item, "template", at),
        quantization=_text(item, "quantization", at),
        context_note=_text(item, "context_note", at),
        server_name=_text(item, "server_name", at),
        server_url=_text(item, "server_url", at),
        # Optional additions to version 2: older exports simply have none.
        reasoning=_text(item, "reasoning", at),
        reasoning_seconds=_number_or_none(item, "reasoning_seconds", at),
        parts=_hearth_parts(item, at) if version >= 3 else (),
    )


# ChatGPT's conversations.json ----------------------------------------------------------------------------


def _chatgpt(data: Sequence[Mapping[str, Any]], name: str) -> ParsedImport:
    conversations: list[ImportedConversation] = []
    empty = 0
    skipped = 0
    for index, item in enumerate(data):
        title = item.get("title")
        label = f"conversation {index + 1}" + (f" ({title!r})" if isinstance(title, str) and title else "")
        conversation = _chatgpt_conversation(item, _Where(name, label))
        skipped += conversation.skipped
        if conversation.messages:
            conversations.append(conversation)
        else:
            empty += 1
    return ParsedImport(
        "chatgpt", tuple(conversations), skipped_conversations=empty, skipped_messages=skipped
    )


def _chatgpt_conversation(item: Mapping[str, Any], where: _Where) -> ImportedConversation:
    mapping = item.get("mapping")
    if not isinstance(mapping, dict):
        raise where.error('"mapping" should be an object of message nodes')
    title = item.get("title")
    if title is not None and not isinstance(title, str):
        raise where.error(f'"title" should be a string, not {_shown(title)}')
    created = _epoch(item.get("create_time"), where / "create_time", default=datetime.now(UTC))
    updated = _epoch(item.get("update_time"), where / "update_time", default=created)

    parents: dict[str, str | None] = {}
    for key, node in mapping.items():
        at = where / f"node {key!r}"
        if not isinstance(node, dict):
            raise at.error("should be an object")
        parent = node.get("parent")
        if parent is not None and not isinstance(parent, str):
            raise at.error(f'"parent" should be a node id or null, not {_shown(parent)}')
        if parent is not None and parent not in mapping:
            raise at.error(f"its parent {parent!r} is not in the mapping")
        parents[key] = parent

    # Nodes that are not imported are spliced out: their children hang from the nearest imported ancestor.
    # `anchor` maps every node to itself if imported, else to that ancestor (None at the root).
    anchor: dict[str, str | None] = {}
    messages: list[ImportedMessage] = []
    skipped = 0
    for key in _parents_first(mapping, parents, where):
        parent = parents[key]
        above = None if parent is None else anchor[parent]
        node = mapping[key]
        message = _chatgpt_message(node, key, above, where / f"node {key!r}", created)
        if message is None:
            anchor[key] = above
            skipped += node.get("message") is not None
        else:
            anchor[key] = key
            messages.append(message)
    current = item.get("current_node")
    current_key: str | None = None
    if current is not None:
        if not isinstance(current, str) or current not in mapping:
            raise where.error(f'"current_node" {_shown(current)} is not in the mapping')
        current_key = anchor[current]
    return ImportedConversation(
        title=" ".join(title.split()) if title and title.strip() else IMPORTED_TITLE,
        created_at=created,
        updated_at=updated,
        messages=tuple(messages),
        current_key=current_key,
        skipped=skipped,
    )


def _parents_first(
    mapping: Mapping[str, Mapping[str, Any]], parents: Mapping[str, str | None], where: _Where
) -> list[str]:
    """Depth first from the roots, older siblings first, so each branch's messages get consecutive ids."""
    position = {key: i for i, key in enumerate(mapping)}

    def age(key: str) -> tuple[float, int]:
        message = mapping[key].get("message")
        created = message.get("create_time") if isinstance(message, dict) else None
        return (created if _is_number(created) else -math.inf, position[key])

    children: dict[str | None, list[str]] = {}
    for key, parent in parents.items():
        children.setdefault(parent, []).append(key)
    order: list[str] = []
    # Iterative: a long chat is a chain thousands of nodes deep.
    stack = sorted(children.get(None, []), key=age, reverse=True)
    while stack:
        key = stack.pop()
        order.append(key)
        stack.extend(sorted(children.get(key, []), key=age, reverse=True))
    if len(order) != len(parents):
        stranded = sorted(set(parents) - set(order), key=position.__getitem__)
        raise where.error(f"nodes {', '.join(map(repr, stranded[:3]))} form a loop of parents")
    return order


def _chatgpt_message(
    node: Mapping[str, Any], key: str, parent_key: str | None, at: _Where, default_time: datetime
) -> ImportedMessage | None:
    """The message to import, or None for a node the user did not see as a chat message."""
    message = node.get("message")
    if message is None:
        return None
    if not isinstance(message, dict):
        raise at.error('"message" should be an object or null')
    author = message.get("author")
    role = author.get("role") if isinstance(author, dict) else None
    if not isinstance(role, str):
        raise at.error('"message.author.role" should be a string')
    content = message.get("content")
    if not isinstance(content, dict) or not isinstance(content.get("content_type"), str):
        raise at.error('"message.content" should be an object with a "content_type"')
    metadata = message.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    if (
        role not in ("user", "assistant")
        or metadata.get("is_visually_hidden_from_conversation") is True
        # Messages addressed to a tool (code interpreter, browsing) are calls, not replies.
        or message.get("recipient", "all") not in (None, "all")
        or content["content_type"] not in _CHATGPT_TEXT_TYPES
    ):
        return None
    parts = content.get("parts")
    if not isinstance(parts, list):
        raise at.error('"message.content.parts" should be a list')
    text = "\n\n".join(_chatgpt_part(part, at) for part in parts if part)
    if not text.strip():
        return None
    model = metadata.get("model_slug")
    return ImportedMessage(
        key=key,
        parent_key=parent_key,
        role=role,
        content=text,
        created_at=_epoch(message.get("create_time"), at / "create_time", default=default_time),
        model_name=model if role == "assistant" and isinstance(model, str) else None,
    )


def _chatgpt_part(part: object, at: _Where) -> str:
    if isinstance(part, str):
        return part
    if isinstance(part, dict):
        kind = part.get("content_type")
        if kind == "image_asset_pointer":
            return IMAGE_PLACEHOLDER
        if kind == "audio_asset_pointer":
            return AUDIO_PLACEHOLDER
        text = part.get("text")  # audio transcriptions, for one
        return text if isinstance(text, str) and text else ATTACHMENT_PLACEHOLDER
    raise at.error(f"a part of the message is {_shown(part)}, not text or an object")


# Values ---------------------------------------------------------------------------------------------------


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _shown(value: object) -> str:
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value if len(value) <= 40 else value[:40] + "…", ensure_ascii=False)
    return f"a{'n' if type(value).__name__[0] in 'aeiou' else ''} {_json_type(value)}"


def _json_type(value: object) -> str:
    return (
        "object" if isinstance(value, dict) else "list" if isinstance(value, list) else type(value).__name__
    )


def _text(item: Mapping[str, Any], key: str, at: _Where, *, required: bool = False) -> str | None:
    value = item.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise at.error(f'"{key}" should be a string, not {_shown(value)}')
    return value


def _int_or_none(item: Mapping[str, Any], key: str, at: _Where) -> int | None:
    value = item.get(key)
    if value is not None and not _is_int(value):
        raise at.error(f'"{key}" should be an integer or null, not {_shown(value)}')
    return value


def _number_or_none(item: Mapping[str, Any], key: str, at: _Where) -> float | None:
    value = item.get(key)
    if value is None:
        return None
    if not _is_number(value):
        raise at.error(f'"{key}" should be a number or null, not {_shown(value)}')
    return float(value)


def _iso(value: object, at: _Where, *, default: datetime) -> datetime:
    if value is None:
        return default
    if not isinstance(value, str):
        raise at.error(f"should be an ISO-8601 time, not {_shown(value)}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise at.error(f"{_shown(value)} is not an ISO-8601 time") from exc
    # Hearth writes UTC with an offset; a time without one is taken as UTC rather than local time.
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


def _epoch(value: object, at: _Where, *, default: datetime) -> datetime:
    if value is None:
        return default
    if not _is_number(value):
        raise at.error(f"should be seconds since 1970, not {_shown(value)}")
    try:
        return datetime.fromtimestamp(float(value), UTC)
    except (OverflowError, OSError, ValueError) as exc:
        raise at.error(f"{_shown(value)} is not a usable time") from exc
