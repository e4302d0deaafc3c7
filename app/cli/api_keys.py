"""`hearth api-keys`: the keys programs use with the local API (the window's server and `hearth serve`)."""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, TextIO

from app.cli.arguments import Subcommands
from app.cli.errors import EXIT_OK
from app.cli.output import print_json
from app.errors import HearthError
from app.paths import HearthPaths

if TYPE_CHECKING:
    from app.local_api.api_keys import ApiKeys


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    keys = sub.add_parser(
        "api-keys",
        parents=[common],
        help="the keys programs use with the local API (hearth serve, and the window's)",
    )
    keys_sub = keys.add_subparsers(dest="api_keys_command", metavar="ACTION", required=True)
    create = keys_sub.add_parser(
        "create",
        parents=[common],
        help="make a key and print it (the only time it is shown); it is kept in the system keyring",
    )
    create.add_argument("name", metavar="NAME", help="letters, digits, dots, dashes and underscores")
    listing = keys_sub.add_parser(
        "list",
        parents=[common],
        help="the keys: when each was made and last used (never the keys themselves)",
    )
    listing.add_argument("--json", action="store_true")
    revoke = keys_sub.add_parser(
        "revoke", parents=[common], help="remove a key: running servers refuse it from their next request"
    )
    revoke.add_argument("name", metavar="NAME")


def run(paths: HearthPaths, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.local_api.api_keys import ApiKeys

    keys = ApiKeys(paths.home)
    action = args.api_keys_command
    if action == "create":
        # A key this process kept only in its memory would end with it: a working keyring is required.
        created = keys.create(args.name, session_ok=False)
        # Alone on stdout, so that a script can take it: KEY=$(hearth api-keys create ci).
        out.write(f"{created.secret}\n")
        err.write(
            f"Made the API key {created.info.name} ({created.info.prefix}…): it is shown only now, and kept "
            "in the system keyring. Servers running now accept it too.\n"
        )
        return EXIT_OK
    if action == "revoke":
        revoked, deleted = keys.revoke(args.name)
        if not deleted.persisted:
            raise HearthError(
                f"revoked {revoked.name}: no server accepts it any more, but its secret is still in the "
                f"system keyring: {deleted.reason}"
            )
        out.write(f"Revoked {revoked.name}: no server accepts it any more.\n")
        return EXIT_OK
    return _cmd_list(keys, args, out)


def _cmd_list(keys: ApiKeys, args: argparse.Namespace, out: TextIO) -> int:
    from app.local_api.api_keys import iso_time

    listed = keys.list_keys()
    if args.json:
        rows = [
            {
                "name": key.name,
                "prefix": key.prefix,
                "created_at": iso_time(key.created_at),
                "last_used_at": None if key.last_used_at is None else iso_time(key.last_used_at),
            }
            for key in listed
        ]
        print_json({"keys": rows}, out)
        return EXIT_OK
    if not listed:
        out.write("No API keys; make one with `hearth api-keys create NAME`.\n")
        return EXIT_OK
    out.write("NAME\tKEY\tCREATED\tLAST USED\n")
    for key in listed:
        used = _local_time(key.last_used_at) if key.last_used_at is not None else "never"
        out.write(f"{key.name}\t{key.prefix}…\t{_local_time(key.created_at)}\t{used}\n")
    return EXIT_OK


def _local_time(timestamp: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(timestamp))
