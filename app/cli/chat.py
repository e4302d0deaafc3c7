"""`hearth chat`: one message, the reply streamed to stdout."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from app.chat.documents import TurnDocuments, local_image_refusal
from app.chat.engine import TurnCallbacks
from app.cli.arguments import Subcommands
from app.cli.engine import chat_engine
from app.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, report
from app.core import Core
from app.documents.library import DocumentLibrary
from app.errors import HearthError
from app.images.prepare import is_image_file, prepare_image
from app.tools.chat import Approval, ToolRequest, ToolSet
from inference.protocol import ToolCallRecord

if TYPE_CHECKING:
    from app.tools.host import ToolHost


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    chat = sub.add_parser("chat", parents=[common], help="send one message and stream the reply to stdout")
    chat.add_argument(
        "--model",
        required=True,
        help="installed model name (see `hearth models list`), or SERVER/MODEL for a model on a server",
    )
    chat.add_argument("--conversation", type=int, metavar="ID", help="continue this conversation")
    chat.add_argument("--system", metavar="TEXT", help="system prompt")
    chat.add_argument("--temperature", type=float)
    chat.add_argument("--seed", type=int)
    chat.add_argument("--max-tokens", type=int)
    thinking = chat.add_mutually_exclusive_group()
    thinking.add_argument(
        "--show-thinking",
        action="store_const",
        dest="thinking",
        const="stdout",
        default="stderr",
        help="print a reasoning model's thinking on stdout before its answer (default: on stderr)",
    )
    thinking.add_argument(
        "--hide-thinking", action="store_const", dest="thinking", const="hidden", help="do not print it"
    )
    chat.add_argument(
        "--attach",
        metavar="PATH",
        type=Path,
        action="append",
        default=[],
        help="attach a file (PDF, DOCX, XLSX, CSV, PPTX, HTML, Markdown, text, code, EPUB) or an image (PNG, "
        "JPEG, WebP, GIF, BMP: for a model that can see, installed with its projector or on a server); "
        "repeatable",
    )
    chat.add_argument(
        "--docs", metavar="NAME", action="append", default=[], help="answer from this collection; repeatable"
    )
    chat.add_argument(
        "--pdf-pages-as-images",
        action="store_true",
        default=None,
        help="for a model that can see: also send attached PDFs' first pages as pictures (default: the "
        "pdf_pages_as_images setting)",
    )
    chat.add_argument(
        "--tools",
        metavar="NAME[,NAME…]|all",
        help="let the model call the tools of these MCP servers (`hearth tools list`), or of all that are on",
    )
    chat.add_argument(
        "--approve-tools",
        action="store_true",
        help="run every tool call without asking (otherwise each is asked about on the terminal, and denied "
        "when there is none)",
    )
    chat.add_argument("prompt", metavar="PROMPT")


class StreamToStdout(TurnCallbacks):
    """The answer on stdout; a reasoning model's thinking framed as Ollama's CLI does, on stderr (`thinking`
    "stderr"), before the answer on stdout ("stdout"), or not at all ("hidden")."""

    def __init__(self, out: TextIO, err: TextIO, thinking: str = "stderr") -> None:
        self._out, self._err = out, err
        self._thinking = {"stderr": err, "stdout": out}.get(thinking)
        self._thinking_open = False

    def started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        self._err.write(f"conversation {conversation_id}\n")
        self._err.flush()

    def context_note(self, assistant_message_id: int, note: str) -> None:
        self._err.write(f"note: {note}\n")
        self._err.flush()

    def reasoning_delta(self, assistant_message_id: int, text: str) -> None:
        sink = self._thinking
        if sink is None:
            return
        if not self._thinking_open:
            sink.write("Thinking…\n")
            self._thinking_open = True
        sink.write(text)
        sink.flush()

    def answer_was_reasoning(self, assistant_message_id: int) -> None:
        # Printed text cannot be taken back; the stored reply has it in the right place.
        self._err.write(
            "\nnote: the model did not mark where its thinking began; the text printed so far was its "
            "thinking, not its answer\n"
        )
        self._err.flush()

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        if text:
            self.end_thinking()
        self._out.write(text)
        self._out.flush()

    def end_thinking(self) -> None:
        if self._thinking is not None and self._thinking_open:
            self._thinking.write("\n…done thinking.\n\n")
            self._thinking.flush()
            self._thinking_open = False


class ToolsOnTheTerminal(StreamToStdout):
    """Each tool call shown on stderr and asked about there: allowed by `--approve-tools`, by the user at a
    terminal, or denied (the model is told) when there is no terminal to ask at."""

    def __init__(self, out: TextIO, err: TextIO, thinking: str, *, approve_all: bool) -> None:
        super().__init__(out, err, thinking)
        self._approve_all = approve_all

    def approve_tool(self, request: ToolRequest) -> Approval:
        self.end_thinking()
        self._err.write(f"\ntool call: {request.server} › {request.tool}\n{request.arguments_shown()}\n")
        if self._approve_all:
            return Approval.ALLOW_ONCE
        if sys.stdin is None or not sys.stdin.isatty():
            self._err.write("denied: no terminal to ask at (--approve-tools allows calls without asking)\n")
            self._err.flush()
            return Approval.DENY
        self._err.write("Allow? [y] once, [a] always in this chat, [N] no: ")
        self._err.flush()
        answer = sys.stdin.readline().strip().casefold()
        return {"y": Approval.ALLOW_ONCE, "yes": Approval.ALLOW_ONCE, "a": Approval.ALLOW_IN_CHAT}.get(
            answer, Approval.DENY
        )

    def tool_result(self, tool_message_id: int, call: ToolCallRecord, text: str, is_error: bool) -> None:
        first = text.strip().splitlines()[0] if text.strip() else ""
        shown = first if len(first) <= 200 else first[:199] + "…"
        self._err.write(f"{'tool error' if is_error else 'result'}: {shown}\n")
        self._err.flush()


def run(core: Core, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    # Images for a text-only installed model are refused before any file is stored.
    _refuse_images(core, args.model, args.attach)
    documents = core.documents()
    try:
        # Every file is checked and stored before anything is sent: a bad one is an error and no turn.
        attached = tuple(documents.attach(path) for path in args.attach)
        for name in args.docs:
            documents.collections.get(name)
        turn = TurnDocuments(attached, tuple(args.docs), pdf_pages=args.pdf_pages_as_images)
        return _chat(core, args, out, err, documents, turn)
    finally:
        documents.close()


def _refuse_images(core: Core, model: str, paths: Sequence[Path]) -> None:
    """For an installed text-only model, an attached image is checked as an image (a corrupt one or a
    decompression bomb is named as such), then refused with the reason before any file is stored. A vision
    model or a server's model is given them (the documents store checks them the same way)."""
    from app.remote.registry import ServerRegistry

    if ServerRegistry(core.paths.home).resolve(model) is not None:
        return
    images = []
    for path in paths:
        if is_image_file(path):
            prepare_image(path.read_bytes(), path.name)
            images.append(path.name)
    refusal = local_image_refusal(core.library, model, images) if images else None
    if refusal is not None:
        raise HearthError(refusal)


def _chat(
    core: Core,
    args: argparse.Namespace,
    out: TextIO,
    err: TextIO,
    documents: DocumentLibrary,
    turn_documents: TurnDocuments,
) -> int:
    from app.remote.registry import ServerRegistry

    engine = chat_engine(core, servers=ServerRegistry(core.paths.home), documents=documents)
    # The options given win over the conversation's settings, which win over the model's and the global ones.
    defaults = engine.sampling_for(args.conversation, args.model)
    overrides = {
        "temperature": args.temperature,
        "seed": args.seed,
        "max_tokens": args.max_tokens,
    }
    sampling = dataclasses.replace(defaults, **{k: v for k, v in overrides.items() if v is not None})
    host = _tool_host(core) if args.tools else None
    restore = _cancel_on_interrupt(engine.cancel)
    stream = ToolsOnTheTerminal(out, err, args.thinking, approve_all=args.approve_tools)
    try:
        # A server that could not be used is said with the reply's note (context_note).
        tools = ToolSet.open(host, _server_names(args.tools)) if host is not None else None
        result = engine.run_turn(
            args.prompt,
            args.model,
            conversation_id=args.conversation,
            system_prompt=args.system,
            sampling=sampling,
            callbacks=stream,
            documents=turn_documents,
            tools=tools,
        )
    finally:
        restore()
        engine.close()
        if host is not None:
            host.close()
    stream.end_thinking()  # a reply cut off mid-thought
    out.write("\n")
    out.flush()
    if result.status == "complete":
        return EXIT_OK
    if result.status == "stopped":
        err.write("stopped; the partial reply was saved\n")
        return EXIT_INTERRUPTED
    report(err, f"the reply failed ({result.status}): {result.error}; the partial reply was saved")
    return EXIT_FAILED


def _tool_host(core: Core) -> ToolHost:
    from app.tools.config import ToolServerRegistry
    from app.tools.host import ToolHost

    timeout = core.settings.tool_timeout_s
    return ToolHost(ToolServerRegistry(core.paths.home), log_dir=core.paths.logs_dir, call_timeout_s=timeout)


def _server_names(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    if not names:
        raise HearthError("--tools needs the names of tool servers, or all.")
    return names


def _cancel_on_interrupt(cancel: Callable[[], None]) -> Callable[[], None]:
    """Ctrl+C stops generation like the Stop button: the partial reply is kept as `stopped`."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(_signum: int, _frame: FrameType | None) -> None:
        cancel()

    previous = signal.signal(signal.SIGINT, handler)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)

    return restore
