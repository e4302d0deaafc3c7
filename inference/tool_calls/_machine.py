"""What every format's streaming parser shares: a buffer of undecided text, held marker prefixes, and
a scan of a call's body that knows where JSON strings are."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence

from inference.tool_calls._json import CallError
from inference.tool_calls.events import Event, MalformedToolCall, TextDelta, ToolCall, ToolCallEvent


def find_first(text: str, markers: Sequence[str], start: int = 0) -> tuple[int, str] | None:
    """The earliest marker in `text` at or after `start` (the longest where two start together)."""
    best: tuple[int, str] | None = None
    for marker in markers:
        i = text.find(marker, start)
        if i >= 0 and (best is None or i < best[0] or (i == best[0] and len(marker) > len(best[1]))):
            best = (i, marker)
    return best


def held_length(text: str, markers: Sequence[str]) -> int:
    """How many characters at the end of `text` could be the start of a marker still being streamed."""
    held = 0
    for marker in markers:
        for k in range(min(len(marker) - 1, len(text)), held, -1):
            if text.endswith(marker[:k]):
                held = k
                break
    return held


class BodyScanner:
    """Finds the end of a call's body as its text grows, resuming where it stopped.

    The end is an end marker outside JSON strings (so `"</tool_call>"` inside an argument is data), or,
    with `json_end`, the close of the top-level JSON value. Strings are tracked from the body's start,
    which is JSON or, for DeepSeek R1, a name line without quotes.
    """

    def __init__(self, ends: Sequence[str] = (), *, json_end: bool = False) -> None:
        self._ends = tuple(ends)
        self._firsts = frozenset(end[0] for end in self._ends)
        self._json_end = json_end
        self._pos = 0
        self._depth = 0
        self._in_string = False
        self._escaped = False

    def scan(self, text: str, final: bool) -> tuple[int, int] | None:
        """(end of the body, end of its end marker) once known, else None (more text is needed; at
        `final` there is none, so the body runs to the end of `text`)."""
        i = self._pos
        while i < len(text):
            c = text[i]
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif c == "\\":
                    self._escaped = True
                elif c == '"':
                    self._in_string = False
            elif c == '"':
                self._in_string = True
            elif c in "{[":
                self._depth += 1
            elif c in "}]":
                self._depth -= 1
                if self._json_end and self._depth == 0:
                    return i + 1, i + 1
            elif c in self._firsts:
                for end in self._ends:
                    if text.startswith(end, i):
                        return i, i + len(end)
                if not final and any(end.startswith(text[i:]) for end in self._ends):
                    self._pos = i
                    return None
            i += 1
        self._pos = i
        return None


class Machine(abc.ABC):
    """A format's streaming parser: `step` consumes what can be decided from `buf` and says whether it
    changed state (so the loop runs again); `final` means no more text will come."""

    def __init__(self) -> None:
        self.buf = ""
        self._events: list[Event] = []

    def feed(self, delta: str) -> list[Event]:
        self.buf += delta
        while self.step(final=False):
            pass
        return self._take()

    def finish(self) -> list[Event]:
        while self.step(final=True):
            pass
        if self.buf:
            self.text(self.buf)
            self.buf = ""
        return self._take()

    @abc.abstractmethod
    def step(self, final: bool) -> bool: ...

    def text(self, text: str) -> None:
        if not text:
            return
        if self._events and isinstance(last := self._events[-1], TextDelta):
            self._events[-1] = TextDelta(last.text + text)
        else:
            self._events.append(TextDelta(text))

    def call(self, call: ToolCall) -> None:
        self._events.append(ToolCallEvent(call))

    def malformed(self, raw_text: str, reason: str) -> None:
        self._events.append(MalformedToolCall(raw_text, reason))

    def call_or_malformed(
        self, raw_text: str, read: Callable[[], ToolCall], cut_off: str | None = None
    ) -> None:
        """Reports read()'s call, or `raw_text` as malformed; `cut_off` names the end marker that never
        came, for the reason."""
        try:
            self.call(read())
        except CallError as e:
            self.malformed(raw_text, f"{e} (the reply ended before {cut_off})" if cut_off else str(e))

    def text_until(self, markers: Sequence[str], final: bool) -> str | None:
        """Releases text up to the first of `markers` and returns it, `buf` then starting after it; or
        releases all text that cannot begin a marker and returns None."""
        found = find_first(self.buf, markers)
        if found is not None:
            i, marker = found
            self.text(self.buf[:i])
            self.buf = self.buf[i + len(marker) :]
            return marker
        keep = 0 if final else held_length(self.buf, markers)
        self.text(self.buf[: len(self.buf) - keep])
        self.buf = self.buf[len(self.buf) - keep :]
        return None

    def _take(self) -> list[Event]:
        events, self._events = self._events, []
        return events
