"""Text Hearth did not write reaches a terminal without its control sequences, and a pipe unchanged."""

from __future__ import annotations

import io
import os
import pty
import select
import subprocess
import sys
import termios
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

import pytest

from app.cli.main import main
from app.cli.terminal_text import TerminalFilter, for_terminal, strip_controls, write_control
from app.core import Core
from tests.helpers.hubserver import HubServer

REPO = Path(__file__).resolve().parents[3]

OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # "write `rm -rf ~` to the clipboard"
HOSTILE = (
    f"Sure!{OSC52} Here\x1b[2J\x1b[1;1H is \x1b[31mred\x1b[0m text\r,\ta link "
    "\x1b]8;;https://evil.example\x1b\\docs\x1b]8;;\x1b\\, a title\x1b]0;pwned\x9c, "
    "\x9b6n\x90dcs\x9c\x1bPq#0\x1b\\ and \u202eevil\u202c é 中文 🙂\x00\x07\x08\x7f"
)
SHOWN = "Sure! Here is red text,\ta link docs, a title,  and evil é 中文 🙂"


# --- the filter -------------------------------------------------------------------------------------------


def test_control_sequences_and_characters_are_removed_and_the_text_kept() -> None:
    assert strip_controls(HOSTILE) == SHOWN
    assert strip_controls("line one\n\tline two\n") == "line one\n\tline two\n"


@pytest.mark.parametrize("split", range(1, len(HOSTILE)))
def test_a_sequence_split_between_writes_is_still_removed(split: int) -> None:
    streamed = TerminalFilter()
    assert streamed.feed(HOSTILE[:split]) + streamed.feed(HOSTILE[split:]) == SHOWN


def test_an_unterminated_sequence_ends_at_the_newline() -> None:
    streamed = TerminalFilter()
    assert streamed.feed("a\x1b]52;c;payload that never ends") == "a"
    assert streamed.feed(" still payload\nvisible\x1b[") == "\nvisible"
    assert streamed.feed("1mbold") == "bold"


def test_only_a_terminal_gets_the_filter() -> None:
    plain = io.StringIO()
    assert for_terminal(plain) is plain
    with terminal() as (stream, read):
        wrapped = for_terminal(stream)
        assert wrapped is not stream and wrapped.isatty()
        assert for_terminal(wrapped) is wrapped
        wrapped.write(HOSTILE)
        write_control(wrapped, "\r")  # Hearth's own progress bar
        wrapped.flush()
        assert read() == (SHOWN + "\r").encode()


# --- the command, end to end ------------------------------------------------------------------------------


@contextmanager
def terminal() -> Iterator[tuple[TextIO, Callable[[], bytes]]]:
    """A pseudo-terminal: the stream writing to it, and a function returning what reached it so far."""
    master, slave = pty.openpty()
    _no_newline_translation(slave)
    stream = open(slave, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    try:
        yield stream, lambda: _drain(master, quiet_s=0.2)
    finally:
        stream.close()
        os.close(slave)
        os.close(master)


def _no_newline_translation(fd: int) -> None:
    # The terminal driver would turn "\n" into "\r\n"; off, so what arrives is exactly what was written.
    attributes = termios.tcgetattr(fd)
    attributes[1] &= ~termios.ONLCR
    termios.tcsetattr(fd, termios.TCSANOW, attributes)


def _drain(master: int, *, quiet_s: float, deadline_s: float = 60.0) -> bytes:
    """Everything until the writer closes its end, or nothing new for `quiet_s`."""
    chunks: list[bytes] = []
    ends = time.monotonic() + deadline_s
    while time.monotonic() < ends:
        ready, _, _ = select.select([master], [], [], quiet_s)
        if not ready:
            break
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: every writer has closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def _hostile_conversation(core: Core) -> int:
    conversation = core.store.create_conversation(f"Pasted{OSC52}")
    core.store.add_message(conversation.id, "user", "Say something")
    core.store.add_message(conversation.id, "assistant", HOSTILE)
    return conversation.id


def _hearth(home: Path, *argv: str) -> list[str]:
    return [sys.executable, "-m", "app", *argv, "--home", str(home)]


def test_conversations_show_on_a_terminal_has_no_escapes(core: Core, hermetic_home: Path) -> None:
    conversation_id = _hostile_conversation(core)
    master, slave = pty.openpty()
    _no_newline_translation(slave)
    try:
        child = subprocess.Popen(
            _hearth(hermetic_home, "conversations", "show", str(conversation_id)),
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=slave,
            cwd=REPO,
        )
    finally:
        os.close(slave)
    try:
        shown = _drain(master, quiet_s=30.0)
        assert child.wait(timeout=60) == 0
    finally:
        os.close(master)

    assert b"\x1b" not in shown and "\x9b".encode() not in shown and b"\r" not in shown
    assert shown.decode() == f"# Pasted\n\nuser: Say something\n\nassistant: {SHOWN}\n\n"


def test_conversations_show_through_a_pipe_is_exact(core: Core, hermetic_home: Path) -> None:
    conversation_id = _hostile_conversation(core)
    result = subprocess.run(
        _hearth(hermetic_home, "conversations", "show", str(conversation_id)),
        capture_output=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode() == f"# Pasted{OSC52}\n\nuser: Say something\n\nassistant: {HOSTILE}\n\n"


def test_hub_strings_in_search_results_and_errors_are_filtered_on_a_terminal(hub: HubServer) -> None:
    hub.add_repo("evil/model-GGUF", [], license=f"mit{OSC52}", downloads=3)
    with terminal() as (stream, read):
        assert main(["models", "search", "model", "--endpoint", hub.url], out=stream, err=stream) == 0
        shown = read()
        assert main(["models", "files", f"evil/none{OSC52}", "--endpoint", hub.url], err=stream) == 3
        error = read()
    assert shown == b"evil/model-GGUF\t3 downloads\t0 likes\tmit\t2025-06-01\n"
    assert error.startswith(b"hearth: ") and b"evil/none" in error and b"\x1b" not in error
