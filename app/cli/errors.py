"""Exit codes, and the one place where an expected failure becomes a line on stderr and an exit code."""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from app.errors import HearthError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2  # argparse's own, for a command line it cannot parse
EXIT_USER_ERROR = 3
EXIT_INTERRUPTED = 130


def report(err: TextIO, message: str) -> None:
    """A line about Hearth itself, told apart from a reply's or a file's text on stderr by its prefix."""
    err.write(f"hearth: {message}\n")


def run_reporting_errors(command: Callable[[], int], err: TextIO) -> int:
    """`command`'s exit code; a `HearthError` (the user can fix it: exit 3) or Ctrl+C (130) as one line on
    stderr. Anything else is a bug and propagates, with its traceback, to the crash handlers."""
    try:
        return command()
    except HearthError as exc:
        report(err, str(exc))
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        report(err, "interrupted")
        return EXIT_INTERRUPTED
