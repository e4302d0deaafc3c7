"""`hearth backup` and `hearth restore`: a verified copy of the conversation database, and putting one
back."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from app.cli.arguments import Subcommands
from app.cli.errors import EXIT_OK
from app.paths import HearthPaths


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    backup = sub.add_parser(
        "backup", parents=[common], help="write a verified copy of the conversation database"
    )
    backup.add_argument(
        "path", nargs="?", metavar="PATH", help="a new file, or a folder (default: the backups folder)"
    )
    restore = sub.add_parser(
        "restore",
        parents=[common],
        help="replace the conversation database with a backup (the current one is backed up first)",
    )
    restore.add_argument("path", metavar="PATH", help="the backup file")


def run(paths: HearthPaths, args: argparse.Namespace, out: TextIO) -> int:
    from app.storage.backup import create_backup, restore_backup

    if args.command == "backup":
        written = create_backup(paths, Path(args.path) if args.path else None)
        out.write(f"{written}\n")
        return EXIT_OK
    result = restore_backup(paths, Path(args.path))
    kept = "moved aside (it is damaged)" if result.previous_damaged else "backed up"
    out.write(f"Restored {paths.db_path} from {result.restored_from}\n")
    if result.previous is not None:
        out.write(f"The database it replaced was {kept}: {result.previous}\n")
    return EXIT_OK
