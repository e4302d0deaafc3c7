"""`hearth conversations`: list, show, search, export and import the stored conversations."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any, TextIO

from app.cli.arguments import Subcommands, _positive_int
from app.cli.errors import EXIT_OK
from app.cli.output import print_json
from app.conversations.store import (
    EXPORT_FORMATS,
    HIT_END,
    HIT_START,
    Conversation,
    Message,
    SearchHit,
    message_record,
)
from app.core import Core
from app.errors import HearthError


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    conv = sub.add_parser("conversations", parents=[common], help="stored conversations")
    conv_sub = conv.add_subparsers(dest="conversations_command", metavar="ACTION", required=True)
    conv_list = conv_sub.add_parser("list", parents=[common])
    conv_list.add_argument("--json", action="store_true")
    conv_show = conv_sub.add_parser("show", parents=[common])
    conv_show.add_argument("id", type=int, metavar="ID")
    conv_show.add_argument("--json", action="store_true")
    conv_export = conv_sub.add_parser(
        "export", parents=[common], help="one conversation to stdout or a file, or all of them into a folder"
    )
    conv_export.add_argument("id", type=int, metavar="ID", nargs="?")
    conv_export.add_argument(
        "--all", action="store_true", help="every conversation, one file each, into --output"
    )
    conv_export.add_argument("--format", choices=EXPORT_FORMATS, required=True)
    conv_export.add_argument(
        "--output", metavar="PATH", help="the file to write (default: stdout); with --all, the folder"
    )
    conv_search = conv_sub.add_parser(
        "search", parents=[common], help="full-text search over titles and messages"
    )
    conv_search.add_argument("query", metavar="QUERY")
    conv_search.add_argument("--limit", type=_positive_int, default=50, metavar="N")
    conv_search.add_argument("--json", action="store_true")
    conv_import = conv_sub.add_parser(
        "import", parents=[common], help="import a Hearth JSON export or ChatGPT's conversations.json"
    )
    conv_import.add_argument("file", metavar="FILE")
    conv_import.add_argument("--json", action="store_true")


def run(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    action = args.conversations_command
    if action == "list":
        return _cmd_list(core, args, out)
    if action == "show":
        return _cmd_show(core, args, out)
    if action == "search":
        return _cmd_search(core, args, out)
    if action == "import":
        return _cmd_import(core, args, out)
    return _cmd_export(core, args, out)


def _cmd_list(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    conversations = core.store.list_conversations()
    if args.json:
        print_json({"conversations": [_conversation_json(c) for c in conversations]}, out)
    else:
        for c in conversations:
            pinned = "\tpinned" if c.pinned else ""
            out.write(f"{c.id}\t{c.updated_at}\t{c.message_count} messages\t{c.title}{pinned}\n")
    return EXIT_OK


def _cmd_show(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    conversation = core.store.get_conversation(args.id)
    messages = core.store.list_messages(args.id)
    if args.json:
        print_json(
            {**_conversation_json(conversation), "messages": [_message_json(m) for m in messages]}, out
        )
    else:
        out.write(f"# {conversation.title}\n\n")
        for m in messages:
            badge = "" if m.status == "complete" else f" [{m.status}]"
            if m.reasoning:
                out.write(f"{m.role} (thinking): {m.reasoning}\n\n")
            out.write(f"{m.role}{badge}: {m.content}\n\n")
    return EXIT_OK


def _message_json(m: Message) -> dict[str, Any]:
    return {**message_record(m), "sibling_index": m.sibling_index, "sibling_count": m.sibling_count}


def _conversation_json(c: Conversation) -> dict[str, Any]:
    return {
        "id": c.id,
        "title": c.title,
        "system_prompt": c.system_prompt,
        "model_name": c.model_name,
        "message_count": c.message_count,
        "pinned": c.pinned,
        "settings": c.settings,
        "collections": list(c.collections),
        "tools": list(c.tools),
        "created_at": c.created_at,
        "updated_at": c.updated_at,
    }


def _hit_json(hit: SearchHit) -> dict[str, Any]:
    """The snippet as plain text, with the [start, end) character ranges of the words that matched."""
    plain: list[str] = []
    matches: list[list[int]] = []
    length = 0
    for i, piece in enumerate(hit.snippet.split(HIT_START)):
        matched, _, rest = piece.partition(HIT_END) if i else ("", "", piece)
        if matched:
            matches.append([length, length + len(matched)])
        plain += [matched, rest]
        length += len(matched) + len(rest)
    return {
        "conversation_id": hit.conversation_id,
        "message_id": hit.message_id,
        "title": hit.title,
        "role": hit.role,
        "in_reasoning": hit.in_reasoning,
        "in_tool_call": hit.in_tool_call,
        "snippet": "".join(plain),
        "matches": matches,
        "rank": hit.rank,
    }


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _cmd_search(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    hits = core.store.search(args.query, limit=args.limit)
    if args.json:
        print_json({"query": args.query, "hits": [_hit_json(h) for h in hits]}, out)
        return EXIT_OK
    if not hits:
        out.write(f"No conversations match {args.query!r}.\n")
    for hit in hits:
        # One line per hit, so the output stays greppable: newlines inside a snippet become spaces.
        snippet = " ".join(hit.snippet.replace(HIT_START, "«").replace(HIT_END, "»").split())
        if hit.in_reasoning:
            snippet = f"(thinking) {snippet}"
        elif hit.in_tool_call:
            snippet = f"(tool call) {snippet}"
        where = (
            f"{hit.conversation_id}\t{hit.message_id}"
            if hit.message_id is not None
            else f"{hit.conversation_id}\t-"
        )
        out.write(f"{where}\t{hit.title}\t{snippet}\n")
    return EXIT_OK


def _cmd_export(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    store = core.store
    if args.all == (args.id is not None):
        raise HearthError("Name one conversation ID to export, or --all (with --output DIR).")
    if args.all:
        if not args.output:
            raise HearthError("--all writes one file per conversation: give the folder with --output DIR.")
        folder = Path(args.output)
        if folder.exists() and not folder.is_dir():
            raise HearthError(f"{folder} is a file; --all needs a folder to write into.")
        report = store.export_all(folder, args.format)
        written = report.written
        for conversation_id, title, _why in report.unreadable:
            out.write(f"Could not read conversation {conversation_id} ({title}): it is damaged\n")
        out.write(f"Exported {_count(len(written), 'conversation')} to {folder}\n")
        for path in written:
            out.write(f"{path}\n")
        return EXIT_OK
    text = (
        store.export_markdown(args.id)
        if args.format == "md"
        else json.dumps(store.export_json(args.id), indent=2, ensure_ascii=False) + "\n"
    )
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise HearthError(f"Could not write {args.output}: {exc.strerror or exc}") from exc
    else:
        out.write(text)
    return EXIT_OK


def _cmd_import(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    report = core.store.import_file(Path(args.file))
    if args.json:
        print_json(dataclasses.asdict(report), out)
        return EXIT_OK
    source = "ChatGPT's conversations.json" if report.source == "chatgpt" else "a Hearth export"
    out.write(
        f"Imported {_count(report.conversations, 'conversation')} "
        f"({_count(report.messages, 'message')}) from {source}.\n"
    )
    if report.skipped:
        out.write(f"Left out {_count(report.skipped, 'system, tool, hidden or empty message')}.\n")
    if report.skipped_conversations:
        out.write(
            f"Left out {_count(report.skipped_conversations, 'conversation')} with no messages to import.\n"
        )
    for conversation_id in report.conversation_ids:
        conversation = core.store.get_conversation(conversation_id)
        out.write(f"{conversation.id}\t{conversation.message_count} messages\t{conversation.title}\n")
    return EXIT_OK
