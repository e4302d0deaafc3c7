"""Text from models, conversations and the Hub, made safe to show on a terminal.

A terminal obeys what it is sent: an OSC 52 sequence writes the clipboard, others retitle the window, make
links that say one thing and open another, redraw lines already shown, or (on some terminals) answer back
on the keyboard. Text Hearth did not write itself (a model's reply, an imported conversation, a repository
name) reaches the terminal with every control sequence and control character taken out, newline and tab
excepted, and with the bidirectional overrides that can make text read differently from what it is.

Only a terminal gets this: through a pipe or into a file (scripts, `--json`) the text is written unchanged.
"""

from __future__ import annotations

import io
from typing import TextIO, cast

_ESC = "\x1b"
_BEL = "\x07"
_CSI_C1 = "\x9b"
_ST_C1 = "\x9c"
# DCS, SOS, OSC, PM and APC (C1 forms): strings that run until ST or, for OSC, BEL.
_STRING_C1 = frozenset("\x90\x98\x9d\x9e\x9f")
# The same after ESC: DCS "P", SOS "X", OSC "]", PM "^", APC "_".
_STRING_AFTER_ESC = frozenset("PX]^_")
# CAN and SUB cancel a sequence in progress (ECMA-48).
_CANCEL = frozenset("\x18\x1a")
# Embeddings, overrides and isolates: LRE RLE PDF LRO RLO, LRI RLI FSI PDI ("Trojan Source").
_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

_GROUND, _ESCAPE, _CSI, _STRING, _STRING_ESCAPE = range(5)


def _is_control(char: str) -> bool:
    code = ord(char)
    return code < 0x20 or 0x7F <= code <= 0x9F


def _executed_inside(char: str) -> bool:
    """C0 controls that a terminal acts on in the middle of a sequence and then carries on with it."""
    return char < "\x20" and char not in (_ESC, "\x18", "\x1a")


class TerminalFilter:
    """Removes control sequences from text that arrives in pieces (a sequence may be split between them).

    A sequence never reaches past a newline here: text after an unterminated one is shown from the next
    line on, rather than swallowed the way a terminal would swallow it.
    """

    def __init__(self) -> None:
        self._state = _GROUND

    def feed(self, text: str) -> str:
        kept: list[str] = []
        state = self._state
        for char in text:
            if char == "\n":
                kept.append(char)
                state = _GROUND
                continue
            if state == _STRING_ESCAPE:
                if char == "\\":
                    state = _GROUND  # ESC \ is ST, the end of the string
                    continue
                state = _ESCAPE  # any other ESC ends the string and begins a sequence of its own
            if state == _STRING:
                if char in (_BEL, _ST_C1) or char in _CANCEL:
                    state = _GROUND
                elif char == _ESC:
                    state = _STRING_ESCAPE
                continue
            if state == _ESCAPE:
                if char == "[":
                    state = _CSI
                    continue
                if char in _STRING_AFTER_ESC:
                    state = _STRING
                    continue
                if "\x30" <= char <= "\x7e":
                    state = _GROUND  # the final character: ESC c, ESC 7, ESC ( B
                    continue
                if "\x20" <= char <= "\x2f" or _executed_inside(char):
                    continue
                state = _GROUND  # not a sequence after all: the character is read afresh below
            elif state == _CSI:
                if "\x40" <= char <= "\x7e":
                    state = _GROUND
                    continue
                if "\x20" <= char <= "\x3f" or _executed_inside(char):
                    continue
                state = _GROUND
            if char == _ESC:
                state = _ESCAPE
            elif char == _CSI_C1:
                state = _CSI
            elif char in _STRING_C1:
                state = _STRING
            elif char == "\t" or not (_is_control(char) or char in _BIDI_CONTROLS):
                kept.append(char)
        self._state = state
        return "".join(kept)


def strip_controls(text: str) -> str:
    """`text` as it is safe to show on a terminal (a sequence left open at the end is dropped)."""
    return TerminalFilter().feed(text)


class _TerminalStream(io.TextIOBase):
    """Writes through a TerminalFilter to the terminal stream it wraps; everything else is the stream's."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.raw_stream = stream
        self._filter = TerminalFilter()

    def write(self, text: str) -> int:
        self.raw_stream.write(self._filter.feed(text))
        return len(text)

    def flush(self) -> None:
        # Also called when this wrapper is collected, which may be after the terminal stream was closed.
        if not self.raw_stream.closed:
            self.raw_stream.flush()

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.raw_stream.fileno()

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.raw_stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self.raw_stream.errors


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, OSError, ValueError):  # closed, or a stream that cannot tell
        return False


def for_terminal(stream: TextIO) -> TextIO:
    """`stream` itself, or when it is a terminal, a stream that strips control sequences from what it writes.

    (cast: io.TextIOBase provides everything TextIO declares, but typeshed does not say it is one.)
    """
    if isinstance(stream, _TerminalStream) or not _is_terminal(stream):
        return stream
    return cast(TextIO, _TerminalStream(stream))


def write_control(stream: TextIO, text: str) -> None:
    """Writes Hearth's own control characters (a progress bar's carriage return) past the filter."""
    raw = stream.raw_stream if isinstance(stream, _TerminalStream) else stream
    raw.write(text)
