"""How commands write: the standard streams made safe for a terminal, and JSON for scripts."""

from __future__ import annotations

import json
import sys
from typing import TextIO

from app.cli.terminal_text import for_terminal


def terminal_streams(out: TextIO | None, err: TextIO | None) -> tuple[TextIO, TextIO]:
    """`out` and `err` (default: stdout and stderr) for every command to write to."""
    # Replies, conversations and Hub strings are not Hearth's text: on a terminal their control sequences
    # would be obeyed (OSC 52 writes the clipboard). Pipes and files still get every character.
    return for_terminal(out or sys.stdout), for_terminal(err or sys.stderr)


def print_json(data: object, out: TextIO) -> None:
    json.dump(data, out, indent=2, ensure_ascii=False, default=str)
    out.write("\n")
