"""The `hearth` command: parse, dispatch to the noun's module, exit. Expected failures print one line on
stderr and exit 3 (`errors.py`); usage errors exit 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from app.cli import api_keys, backup, chat, conversations, docs, doctor, models, serve, servers, tokens, tools
from app.cli.arguments import common_options
from app.cli.errors import report, run_reporting_errors
from app.cli.output import terminal_streams
from app.core import Core
from app.paths import HearthPaths, resolve_home


def build_parser() -> argparse.ArgumentParser:
    common = common_options()
    parser = argparse.ArgumentParser(
        prog="hearth", description="Chat with local language models, privately.", parents=[common]
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # In the order `hearth --help` lists them.
    for noun in (chat, models, docs, tokens, servers, tools, conversations, backup, doctor, serve, api_keys):
        noun.add_parser(sub, common)
    gui = sub.add_parser("gui", parents=[common], help="open the window (the default)")
    gui.add_argument("--smoke-test", action="store_true", help="start everything, open the window, quit")
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    out: TextIO | None = None,
    err: TextIO | None = None,
    gui: Callable[[HearthPaths, bool], int] | None = None,
    crash_handlers: bool = False,
) -> int:
    """`crash_handlers`: record uncaught exceptions and native crashes in logs/ (process-wide hooks, so only
    for the process's own entry point, never for a caller such as a test that runs main in-process)."""
    out, err = terminal_streams(out, err)
    parser = build_parser()
    hearth_args, server_command = tools.split_server_command(list(sys.argv[1:] if argv is None else argv))
    args = parser.parse_args(hearth_args)
    if server_command is not None:
        args.server_command = server_command
    paths = resolve_home(getattr(args, "home", None))
    from app.logging_setup import configure_logging, install_crash_handlers

    paths.ensure()
    configure_logging(paths, verbose=getattr(args, "verbose", False))
    if crash_handlers:
        install_crash_handlers(paths)

    def command() -> int:
        if args.command in (None, "gui"):
            if gui is None:
                parser.error("the GUI is not available in this entry point")
            return gui(paths, bool(getattr(args, "smoke_test", False)))
        return _run(paths, args, out, err)

    return run_reporting_errors(command, err)


def _run(paths: HearthPaths, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if args.command == "doctor":
        return doctor.run(paths, args, out)
    if args.command == "token":
        return tokens.run(args, out, err)
    if args.command == "servers":
        return servers.run(paths, args, out, err)
    if args.command == "api-keys":
        return api_keys.run(paths, args, out, err)
    if args.command == "tools":
        return tools.run(paths, args, out, err)
    if args.command in ("backup", "restore"):
        return backup.run(paths, args, out, err)
    # Reading and exporting conversations works on a damaged database too (opened read-only).
    readable = args.command == "conversations" and args.conversations_command != "import"
    core = Core.open(paths, allow_damaged=readable)
    if core.damaged:
        report(err, f"opened read-only: {core.damaged}")
    try:
        if args.command == "chat":
            return chat.run(core, args, out, err)
        if args.command == "serve":
            serve.run(core, args, err)
        if args.command == "models":
            return models.run(core, args, out, err)
        if args.command == "docs":
            return docs.run(core, args, out, err)
        return conversations.run(core, args, out)
    finally:
        core.close()
