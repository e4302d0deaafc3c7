"""The `hearth` command. Expected failures print one line on stderr and exit 3; usage errors exit 2."""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from app.core import Core
from app.engine import ChatEngine, TurnCallbacks
from app.errors import HearthError
from app.paths import HearthPaths, resolve_home

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_USER_ERROR = 3
EXIT_INTERRUPTED = 130


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--home",
        metavar="DIR",
        default=argparse.SUPPRESS,
        help="data directory (default: $HEARTH_HOME or the platform's data directory)",
    )
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS)
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="hearth", description="Chat with local language models, privately.", parents=[common]
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    chat = sub.add_parser("chat", parents=[common], help="send one message and stream the reply to stdout")
    chat.add_argument("--model", required=True, help="installed model name (see `hearth models list`)")
    chat.add_argument("--conversation", type=int, metavar="ID", help="continue this conversation")
    chat.add_argument("--system", metavar="TEXT", help="system prompt")
    chat.add_argument("--temperature", type=float)
    chat.add_argument("--seed", type=int)
    chat.add_argument("--max-tokens", type=int)
    chat.add_argument("prompt", metavar="PROMPT")

    models = sub.add_parser("models", parents=[common], help="the installed model library")
    models_sub = models.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    models_list = models_sub.add_parser("list", parents=[common], help="list installed models")
    models_list.add_argument("--json", action="store_true")
    models_import = models_sub.add_parser(
        "import", parents=[common], help="validate, hash and add a GGUF file"
    )
    models_import.add_argument("path", metavar="PATH")
    models_import.add_argument("--name")

    conv = sub.add_parser("conversations", parents=[common], help="stored conversations")
    conv_sub = conv.add_subparsers(dest="conversations_command", metavar="ACTION", required=True)
    conv_list = conv_sub.add_parser("list", parents=[common])
    conv_list.add_argument("--json", action="store_true")
    conv_show = conv_sub.add_parser("show", parents=[common])
    conv_show.add_argument("id", type=int, metavar="ID")
    conv_show.add_argument("--json", action="store_true")
    conv_export = conv_sub.add_parser("export", parents=[common])
    conv_export.add_argument("id", type=int, metavar="ID")
    conv_export.add_argument("--format", choices=("md", "json"), required=True)
    conv_export.add_argument("--output", metavar="FILE", help="write here instead of stdout")

    doctor = sub.add_parser(
        "doctor", parents=[common], help="report backend, GPUs, memory, keyring, database"
    )
    doctor.add_argument("--json", action="store_true")

    gui = sub.add_parser("gui", parents=[common], help="open the window (the default)")
    gui.add_argument("--smoke-test", action="store_true", help="start everything, open the window, quit")
    return parser


def _print_json(data: object, out: TextIO) -> None:
    json.dump(data, out, indent=2, ensure_ascii=False, default=str)
    out.write("\n")


def _model_json(model: Any) -> dict[str, Any]:
    return {
        "name": model.name,
        "path": model.path,
        "sha256": model.sha256,
        "size_bytes": model.size_bytes,
        "source": model.source,
        "architecture": model.architecture,
        "quantization": model.quantization,
        "context_length": model.context_length,
        "n_layers": model.n_layers,
        "last_load_error": model.last_load_error,
    }


def cmd_models(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    if args.models_command == "import":
        model = core.library.import_file(Path(args.path), name=args.name)
        out.write(f"Imported {model.name} ({model.quantization or '?'}, sha256 {model.sha256})\n")
        return EXIT_OK
    models = core.library.list_models()
    if args.json:
        _print_json({"models": [_model_json(m) for m in models]}, out)
        return EXIT_OK
    if not models:
        out.write("No models installed. Import one with `hearth models import PATH`.\n")
    for m in models:
        size = f"{m.size_bytes / 1024 / 1024:.0f} MiB"
        out.write(f"{m.name}\t{m.quantization or '?'}\t{size}\t{m.sha256[:12]}\n")
    return EXIT_OK


def _message_json(m: Any) -> dict[str, Any]:
    return {
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
        "created_at": m.created_at,
    }


def _conversation_json(c: Any) -> dict[str, Any]:
    return {
        "id": c.id,
        "title": c.title,
        "system_prompt": c.system_prompt,
        "model_name": c.model_name,
        "message_count": c.message_count,
        "created_at": c.created_at,
        "updated_at": c.updated_at,
    }


def cmd_conversations(core: Core, args: argparse.Namespace, out: TextIO) -> int:
    store = core.store
    action = args.conversations_command
    if action == "list":
        conversations = store.list_conversations()
        if args.json:
            _print_json({"conversations": [_conversation_json(c) for c in conversations]}, out)
        else:
            for c in conversations:
                out.write(f"{c.id}\t{c.updated_at}\t{c.message_count} messages\t{c.title}\n")
        return EXIT_OK
    if action == "show":
        conversation = store.get_conversation(args.id)
        messages = store.list_messages(args.id)
        if args.json:
            _print_json(
                {**_conversation_json(conversation), "messages": [_message_json(m) for m in messages]}, out
            )
        else:
            out.write(f"# {conversation.title}\n\n")
            for m in messages:
                badge = "" if m.status == "complete" else f" [{m.status}]"
                out.write(f"{m.role}{badge}: {m.content}\n\n")
        return EXIT_OK
    text = (
        store.export_markdown(args.id)
        if args.format == "md"
        else json.dumps(store.export_json(args.id), indent=2, ensure_ascii=False, default=str) + "\n"
    )
    if args.output:
        try:
            Path(args.output).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise HearthError(f"Could not write {args.output}: {exc.strerror or exc}") from exc
    else:
        out.write(text)
    return EXIT_OK


class _StreamToStdout(TurnCallbacks):
    def __init__(self, out: TextIO, err: TextIO) -> None:
        self._out, self._err = out, err

    def started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        self._err.write(f"conversation {conversation_id}\n")
        self._err.flush()

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        self._out.write(text)
        self._out.flush()


def cmd_chat(core: Core, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    engine = ChatEngine(core.store, core.library, core.settings, runner_log=core.paths.runner_log_file)
    defaults = engine.default_sampling()
    overrides = {
        "temperature": args.temperature,
        "seed": args.seed,
        "max_tokens": args.max_tokens,
    }
    sampling = dataclasses.replace(defaults, **{k: v for k, v in overrides.items() if v is not None})
    restore = _cancel_on_interrupt(engine.cancel)
    try:
        result = engine.run_turn(
            args.prompt,
            args.model,
            conversation_id=args.conversation,
            system_prompt=args.system,
            sampling=sampling,
            callbacks=_StreamToStdout(out, err),
        )
    finally:
        restore()
        engine.close()
    out.write("\n")
    out.flush()
    if result.status == "complete":
        return EXIT_OK
    if result.status == "stopped":
        err.write("stopped; the partial reply was saved\n")
        return EXIT_INTERRUPTED
    err.write(f"hearth: the reply failed ({result.status}): {result.error}; the partial reply was saved\n")
    return EXIT_FAILED


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


def cmd_doctor(paths: HearthPaths, args: argparse.Namespace, out: TextIO) -> int:
    from app.doctor import collect_report, format_report

    report = collect_report(paths)
    if args.json:
        _print_json(report, out)
    else:
        out.write(format_report(report))
    return EXIT_OK if report["database"]["ok"] else EXIT_USER_ERROR


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    gui: Callable[[HearthPaths, bool], int] | None = None,
) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    parser = build_parser()
    args = parser.parse_args(argv)
    paths = resolve_home(getattr(args, "home", None))
    from app.logging_setup import configure_logging

    paths.ensure()
    configure_logging(paths, verbose=getattr(args, "verbose", False))
    try:
        if args.command in (None, "gui"):
            if gui is None:
                parser.error("the GUI is not available in this entry point")
            return gui(paths, bool(getattr(args, "smoke_test", False)))
        if args.command == "doctor":
            return cmd_doctor(paths, args, out)
        core = Core.open(paths)
        try:
            if args.command == "chat":
                return cmd_chat(core, args, out, err)
            if args.command == "models":
                return cmd_models(core, args, out)
            return cmd_conversations(core, args, out)
        finally:
            core.close()
    except HearthError as exc:
        err.write(f"hearth: {exc}\n")
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        err.write("hearth: interrupted\n")
        return EXIT_INTERRUPTED
