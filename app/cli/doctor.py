"""`hearth doctor`: what Hearth found on this machine (backend, GPUs, memory, keyring, database)."""

from __future__ import annotations

import argparse
from typing import TextIO

from app.cli.arguments import Subcommands
from app.cli.errors import EXIT_OK, EXIT_USER_ERROR
from app.cli.output import print_json
from app.paths import HearthPaths


def add_parser(sub: Subcommands, common: argparse.ArgumentParser) -> None:
    doctor = sub.add_parser(
        "doctor", parents=[common], help="report backend, GPUs, memory, keyring, database"
    )
    doctor.add_argument("--json", action="store_true")


def run(paths: HearthPaths, args: argparse.Namespace, out: TextIO) -> int:
    from app.doctor import collect_report, format_report

    report = collect_report(paths)
    if args.json:
        print_json(report, out)
    else:
        out.write(format_report(report))
    return EXIT_OK if report["database"]["ok"] else EXIT_USER_ERROR
