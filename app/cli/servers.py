"""`hearth servers`: the OpenAI-compatible servers to chat through, and their API keys."""

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
from app.remote.registry import DEFAULT_SERVER_CONTEXT, parse_context_tokens

if TYPE_CHECKING:
    from app.remote.registry import ServerRegistry


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    servers = sub.add_parser(
        "servers",
        parents=[common],
        help="OpenAI-compatible servers to chat through (vLLM, TGI, llama.cpp, Ollama)",
    )
    servers_sub = servers.add_subparsers(dest="servers_command", metavar="ACTION", required=True)
    servers_add = servers_sub.add_parser(
        "add",
        parents=[common],
        help="add a server (or replace the one of that name); its models are NAME/MODEL",
    )
    servers_add.add_argument("name", metavar="NAME")
    servers_add.add_argument("url", metavar="URL", help="the API address, e.g. http://gpu-box:8000/v1")
    servers_add.add_argument(
        "--api-key-from-stdin",
        action="store_true",
        help="read the server's API key from standard input; it is kept in the system keyring",
    )
    servers_add.add_argument(
        "--ca-bundle",
        metavar="PATH",
        help="trust the CAs in this PEM file (for an internal server's certificate)",
    )
    # Checked by the registry, not argparse: a bad value is a one-line error (exit 3) like a bad address.
    context_help = (
        "plan its models for N tokens of prompt and reply (default: auto, what the server reports, else "
        f"{DEFAULT_SERVER_CONTEXT:,})"
    )
    servers_add.add_argument("--context", metavar="N", help=context_help)
    servers_edit = servers_sub.add_parser(
        "edit", parents=[common], help="change a server's settings, keeping its address and key"
    )
    servers_edit.add_argument("name", metavar="NAME")
    servers_edit.add_argument("--context", metavar="N", required=True, help=context_help)
    servers_list = servers_sub.add_parser(
        "list", parents=[common], help="the servers added, and whether a key is stored"
    )
    servers_list.add_argument("--json", action="store_true")
    servers_models = servers_sub.add_parser("models", parents=[common], help="ask a server for its models")
    servers_models.add_argument("name", metavar="NAME")
    servers_models.add_argument("--json", action="store_true")
    servers_remove = servers_sub.add_parser(
        "remove", parents=[common], help="remove a server and its stored key"
    )
    servers_remove.add_argument("name", metavar="NAME")


def run(paths: HearthPaths, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.remote.registry import ServerRegistry

    registry = ServerRegistry(paths.home)
    action = args.servers_command
    if action == "add":
        return _cmd_add(registry, args, out, err)
    if action == "edit":
        return _cmd_edit(registry, args, out)
    if action == "remove":
        return _cmd_remove(registry, args, out)
    if action == "models":
        return _cmd_models(registry, args, out)
    return _cmd_list(registry, args, out)


def _read_api_key(name: str, err: TextIO) -> str:
    if sys.stdin is not None and sys.stdin.isatty():
        return getpass.getpass(f"API key for {name} (input hidden): ", stream=err)
    key = sys.stdin.readline() if sys.stdin is not None else ""
    if not key.strip():
        raise HearthError("No API key was given: pipe it on standard input.")
    return key


def _cmd_add(registry: ServerRegistry, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.remote.openai_client import is_loopback

    # Checked before the key is asked for, so a typo does not cost the user a paste.
    context = parse_context_tokens(args.context) if args.context is not None else None
    bundle = Path(args.ca_bundle) if args.ca_bundle else None
    registry.check(args.name, args.url, bundle, context)
    key = _read_api_key(args.name, err) if args.api_key_from_stdin else None
    server, stored = registry.add(args.name, args.url, api_key=key, ca_bundle=bundle, context_tokens=context)
    out.write(f"Added {server.name}: {server.url}; its models are {server.name}/MODEL.\n")
    if key is not None and server.url.startswith("http:") and not is_loopback(server.url):
        err.write("note: the address is not https: the API key and the chats travel unencrypted.\n")
    if stored is not None and not stored.persisted:
        raise HearthError(f"the API key was not saved: {stored.reason}")
    return EXIT_OK


def _cmd_edit(registry: ServerRegistry, args: argparse.Namespace, out: TextIO) -> int:
    server = registry.set_context_tokens(args.name, parse_context_tokens(args.context))
    if server.context_tokens is None:
        out.write(
            f"{server.name}'s models are planned for the context it reports, else "
            f"{DEFAULT_SERVER_CONTEXT:,} tokens.\n"
        )
    else:
        out.write(f"{server.name}'s models are planned for {server.context_tokens:,} tokens.\n")
    return EXIT_OK


def _cmd_remove(registry: ServerRegistry, args: argparse.Namespace, out: TextIO) -> int:
    removed, deleted = registry.remove(args.name)
    if not deleted.persisted:
        raise HearthError(f"removed {removed.name}, but not its API key: {deleted.reason}")
    out.write(f"Removed {removed.name} and its API key.\n")
    return EXIT_OK


def _cmd_models(registry: ServerRegistry, args: argparse.Namespace, out: TextIO) -> int:
    server = registry.get(args.name)
    models = registry.client(server).list_models()
    if args.json:
        print_json(
            {
                "server": server.name,
                "url": server.url,
                "models": [
                    {
                        "id": m.id,
                        "name": f"{server.name}/{m.id}",
                        "owned_by": m.owned_by,
                        # What the model is planned for, and where that comes from.
                        "context_tokens": (planned := registry.context_for(server, m.id)).tokens,
                        "context_source": planned.source.value,
                    }
                    for m in models
                ],
            },
            out,
        )
    else:
        for m in models:
            out.write(f"{server.name}/{m.id}\n")
    return EXIT_OK


def _cmd_list(registry: ServerRegistry, args: argparse.Namespace, out: TextIO) -> int:
    rows: list[dict[str, Any]] = []
    for server in registry.servers():
        status = registry.key_status(server.name)
        where = ("keyring" if status.persisted else "memory") if status.present else None
        rows.append(
            {
                "name": server.name,
                "url": server.url,
                "ca_bundle": server.ca_bundle,
                "context_tokens": server.context_tokens,
                "api_key": {"stored": status.present, "where": where, "backend": status.backend},
                "problem": status.reason or None,
            }
        )
    if args.json:
        print_json({"servers": rows}, out)
        return EXIT_OK
    if not rows:
        out.write("No servers; add one with `hearth servers add NAME URL`.\n")
    for row in rows:
        key = f"key in the {row['api_key']['where']}" if row["api_key"]["stored"] else "no key"
        bundle = f"\tCA bundle {row['ca_bundle']}" if row["ca_bundle"] else ""
        context = f"\tcontext {row['context_tokens']:,}" if row["context_tokens"] else ""
        out.write(f"{row['name']}\t{row['url']}\t{key}{bundle}{context}\n")
        if row["problem"]:
            out.write(f"  keyring: {row['problem']}\n")
    return EXIT_OK
