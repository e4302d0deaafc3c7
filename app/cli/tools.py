"""`hearth tools`: the MCP servers whose tools chats may use, kept in `mcp.json` (app.tools.config)."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from app.cli.arguments import Subcommands
from app.cli.errors import EXIT_OK
from app.cli.output import print_json
from app.errors import HearthError
from app.paths import HearthPaths

if TYPE_CHECKING:
    from app.tools.config import ToolServer, ToolServerRegistry
    from app.tools.host import ToolHost

# How long `tools list` waits for each server to start and list its tools.
LIST_TIMEOUT_S = 20.0


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    tools = sub.add_parser("tools", parents=[common], help="MCP servers whose tools chats may use")
    tools_sub = tools.add_subparsers(dest="tools_command", metavar="ACTION", required=True)
    add = tools_sub.add_parser(
        "add",
        parents=[common],
        help="add a server (or replace the one of that name): `add NAME -- COMMAND [ARGS…]` starts a "
        "program, `add NAME --url URL` reaches a running one",
        description="Secrets given with --env or --header are kept in the system keyring, not in "
        "mcp.json. Give NAME without =VALUE to type the value (hidden) or pipe it on standard input.",
    )
    add.add_argument("name", metavar="NAME")
    add.add_argument("--url", help="a Streamable HTTP server's address, e.g. https://example.org/mcp")
    add.add_argument(
        "--header", action="append", default=[], metavar="NAME[=VALUE]", help="an HTTP header (repeatable)"
    )
    add.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="an environment variable (repeatable)",
    )
    add.add_argument("--cwd", metavar="DIR", help="the folder the command starts in")
    add.add_argument("--disabled", action="store_true", help="add it turned off")
    # `-- COMMAND [ARGS…]` is split off before parsing (split_server_command): argparse's subparsers would
    # take the command's own options for Hearth's.
    add.set_defaults(server_command=[])
    listing = tools_sub.add_parser(
        "list", parents=[common], help="the servers, their state and their tools (starts each one to ask)"
    )
    listing.add_argument("--json", action="store_true")
    listing.add_argument("--no-connect", action="store_true", help="only what mcp.json says: start no server")
    remove = tools_sub.add_parser("remove", parents=[common], help="remove a server and its secrets")
    remove.add_argument("name", metavar="NAME")
    for verb, what in (("enable", "turn a server on"), ("disable", "turn a server off (kept in mcp.json)")):
        toggle = tools_sub.add_parser(verb, parents=[common], help=what)
        toggle.add_argument("name", metavar="NAME")
    imported = tools_sub.add_parser(
        "import",
        parents=[common],
        help="add the servers LM Studio, Claude Desktop or Cursor has (or those of an mcp.json file)",
    )
    imported.add_argument("source", metavar="lmstudio|claude|cursor|PATH")
    imported.add_argument(
        "--replace", action="store_true", help="replace servers Hearth has of the same name"
    )


def split_server_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """`hearth tools add NAME [OPTIONS] -- COMMAND [ARGS…]`: the arguments Hearth parses, and the server's
    command (None for any other command line, whose `--` is argparse's to handle)."""
    if "--" not in argv or "tools" not in argv:
        return argv, None
    noun, dashes = argv.index("tools"), argv.index("--")
    if argv[noun + 1 : noun + 2] != ["add"] or dashes < noun:
        return argv, None
    return argv[:dashes], argv[dashes + 1 :]


def run(paths: HearthPaths, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.tools.config import ToolServerRegistry

    registry = ToolServerRegistry(paths.home)
    action = args.tools_command
    if action == "add":
        return _cmd_add(registry, args, out, err)
    if action == "remove":
        removed = registry.remove(args.name)
        out.write(f"Removed {removed.name} and its secrets.\n")
        return EXIT_OK
    if action in ("enable", "disable"):
        changed = registry.set_enabled(args.name, action == "enable")
        out.write(f"{changed.name} is {'on' if changed.enabled else 'off'}.\n")
        return EXIT_OK
    if action == "import":
        return _cmd_import(registry, args, out, err)
    return _cmd_list(paths, registry, args, out)


def _cmd_add(registry: ToolServerRegistry, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.tools.config import HttpTransport, StdioTransport, parse_pairs

    command = list(args.server_command)
    if args.url and command:
        raise HearthError("Give either --url or -- COMMAND, not both.")
    if not args.url and not command:
        raise HearthError("Give the server's command after --, or its address with --url.")
    if args.url and args.env:
        raise HearthError("--env is for a server Hearth starts; a server at a URL takes --header.")
    if command and args.header:
        raise HearthError("--header is for a server at a URL; a server Hearth starts takes --env.")
    pairs = args.header or args.env
    what = "header" if args.url else "environment variable"
    typed = parse_pairs((p if "=" in p else f"{p}=" for p in pairs), what)
    asked = {p.strip() for p in pairs if "=" not in p}
    secrets = {key: (_read_secret(key, err) if key in asked else value) for key, value in typed.items()}
    transport: StdioTransport | HttpTransport = (
        HttpTransport(args.url)
        if args.url
        else StdioTransport(
            command[0], tuple(command[1:]), str(Path(args.cwd).resolve()) if args.cwd else None
        )
    )
    server, stored = registry.add(args.name, transport, secrets, enabled=not args.disabled)
    where = server.transport.url if isinstance(server.transport, HttpTransport) else " ".join(command)
    out.write(f"Added {server.name}: {where}{'' if server.enabled else ' (off)'}.\n")
    refused = [r for r in stored if not r.persisted]
    if refused:
        raise HearthError(f"its secrets are kept for this session only: {refused[0].reason}")
    return EXIT_OK


def _read_secret(key: str, err: TextIO) -> str:
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass(f"{key} (input hidden): ", stream=err)
    value = sys.stdin.readline().rstrip("\r\n") if sys.stdin is not None else ""
    if not value:
        raise HearthError(f"No value was given for {key}: pipe it on standard input, or give {key}=VALUE.")
    return value


def _cmd_import(registry: ToolServerRegistry, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.tools.config import other_apps_files

    known = other_apps_files()
    path = known.get(args.source.casefold(), Path(args.source).expanduser())
    result = registry.import_file(path, replace=args.replace)
    for name in result.added:
        out.write(f"Added {name}.\n")
    for name, why in result.skipped:
        err.write(f"skipped {name}: {why}\n")
    if not result.added:
        out.write(f"No servers were added from {path}.\n")
    refused = [r for r in result.secrets if not r.persisted]
    if refused:
        raise HearthError(f"their secrets are kept for this session only: {refused[0].reason}")
    return EXIT_OK


def _cmd_list(paths: HearthPaths, registry: ToolServerRegistry, args: argparse.Namespace, out: TextIO) -> int:
    from app.tools.host import ToolHost

    servers = registry.servers()
    host = ToolHost(
        registry, log_dir=paths.logs_dir, start_timeout_s=LIST_TIMEOUT_S, call_timeout_s=LIST_TIMEOUT_S
    )
    try:
        rows = [_row(server, None if args.no_connect else host) for server in servers]
    finally:
        host.close()
    if args.json:
        print_json({"servers": rows}, out)
        return EXIT_OK
    if not rows:
        out.write(
            "No tool servers; add one with `hearth tools add NAME -- COMMAND` or `hearth tools import`.\n"
        )
    for row in rows:
        where = row["url"] or " ".join([row["command"], *row["args"]])
        out.write(f"{row['name']}\t{row['state']}\t{where}\n")
        if row["error"]:
            out.write(f"  error: {row['error']}\n")
        for tool in row["tools"]:
            first_line = tool["description"].strip().splitlines()[0] if tool["description"].strip() else ""
            out.write(f"  {tool['name']}\t{first_line}\n")
    return EXIT_OK


def _row(server: ToolServer, host: ToolHost | None) -> dict[str, Any]:
    from app.tools.config import HttpTransport
    from app.tools.host import ToolServerError

    transport = server.transport
    row: dict[str, Any] = {
        "name": server.name,
        "transport": server.kind,
        "command": None if isinstance(transport, HttpTransport) else transport.command,
        "args": [] if isinstance(transport, HttpTransport) else list(transport.args),
        "url": transport.url if isinstance(transport, HttpTransport) else None,
        "enabled": server.enabled,
        "secrets": list(server.secret_names),  # names only: the values stay in the keyring
        "state": "off" if not server.enabled else "not started",
        "error": None,
        "tools": [],
    }
    if host is None or not server.enabled:
        return row
    try:
        tools = host.tools(server.name)
    except ToolServerError as exc:
        row.update(state="failed", error=str(exc))
        return row
    row["state"] = "running"
    row["tools"] = [
        {"name": t.name, "description": t.description, "input_schema": dict(t.input_schema)} for t in tools
    ]
    return row
