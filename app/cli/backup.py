"""`hearth backup` and `hearth restore`: verified backups of the conversation database and its attached files,
listing and checking them, and putting one back."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TextIO

from app.cli.arguments import Subcommands
from app.cli.errors import EXIT_OK
from app.cli.output import print_json
from app.paths import HearthPaths

# How many files a note names before it only counts the rest.
NAMED_FILES = 5


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    backup = sub.add_parser(
        "backup",
        parents=[common],
        help="write a verified backup of the conversation database and its attached files",
    )
    action = backup.add_mutually_exclusive_group()
    action.add_argument(
        "path",
        nargs="?",
        metavar="PATH",
        help="a folder to put the backup in, or the new backup folder's name (default: the backups folder)",
    )
    action.add_argument("--list", action="store_true", help="the backups in the backups folder, newest first")
    action.add_argument(
        "--verify", metavar="BACKUP", help="check a backup: its database and every attached file it holds"
    )
    backup.add_argument("--json", action="store_true", help="with --list: as JSON")
    restore = sub.add_parser(
        "restore",
        parents=[common],
        help="replace the conversation database with a backup (the current one is backed up first)",
    )
    restore.add_argument(
        "path", metavar="PATH", help="the backup (a backup folder, or an older .sqlite3 file)"
    )


def run(paths: HearthPaths, args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from app.storage.backup import create_backup, list_backups, restore_backup, verify_backup

    if args.command == "restore":
        result = restore_backup(paths, Path(args.path))
        kept = "moved aside (it is damaged)" if result.previous_damaged else "backed up"
        out.write(f"Restored {paths.db_path} from {result.restored_from}\n")
        if result.files_put_back:
            out.write(f"Put back {result.files_put_back} attached file(s) the store did not have\n")
        if result.previous is not None:
            out.write(f"The database it replaced was {kept}: {result.previous}\n")
        if result.files_missing:
            err.write(
                f"{len(result.files_missing)} attached file(s) are in neither the backup nor the store; "
                f"their messages show them as no longer stored: {_named(result.files_missing)}\n"
            )
        return EXIT_OK
    if args.list:
        backups = list_backups(paths)
        if args.json:
            print_json(
                [
                    {
                        "path": str(b.path),
                        "created_at": b.created.isoformat(),
                        "size_bytes": b.size_bytes,
                        "attached_files": b.files,
                    }
                    for b in backups
                ],
                out,
            )
            return EXIT_OK
        for b in backups:
            carried = "database only" if b.files is None else f"{b.files} attached file(s)"
            when = f"{b.created.astimezone():%Y-%m-%d %H:%M}"
            out.write(f"{when}  {_megabytes(b.size_bytes):>10}  {carried}  {b.path}\n")
        return EXIT_OK
    if args.verify:
        verified = verify_backup(Path(args.verify))
        folder = verified.path.is_dir()
        held = f"{len(verified.carried)} attached file(s) verified" if folder else "database only"
        out.write(f"{verified.path}: intact, schema {verified.revision}, {held}\n")
        _note_lost(folder, [f.label for f in verified.lost], err)
        return EXIT_OK
    written = create_backup(paths, Path(args.path) if args.path else None)
    out.write(f"{written.path}\n")
    _note_lost(True, [f.label for f in written.lost], err)
    return EXIT_OK


def _note_lost(folder: bool, lost: list[str], err: TextIO) -> None:
    if folder and lost:
        err.write(
            f"{len(lost)} attached file(s) were already missing from the store (or no longer matched what "
            f"was attached) when the backup was taken, and are not in it: {_named(lost)}\n"
        )


def _named(labels: tuple[str, ...] | list[str]) -> str:
    shown = ", ".join(labels[:NAMED_FILES])
    return shown if len(labels) <= NAMED_FILES else f"{shown} and {len(labels) - NAMED_FILES} more"


def _megabytes(n: int) -> str:
    return f"{n / 1_000_000:,.1f} MB"
