"""The reply being written, as the window holds it while it streams.

Held once: the chat session keeps it, and the transcript row that shows it reads the text and the thinking
clock from here and only keeps track of how much of it is on screen.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Sequence

from app.chat.reasoning import ThinkingClock
from app.events import Event


class ReplyChange(enum.Enum):
    ANSWER = "answer"
    REASONING = "reasoning"
    # The answer so far was thinking after all (the model closed a thinking block it never opened): it
    # moved in front of the reasoning and the answer starts over.
    MOVED = "moved"


class LiveReply:
    """The answer and the reasoning as they arrive, and how long the model has thought.

    Kept in the pieces they arrived in, so a reader that remembers how many it has taken reads only the
    new ones, however long the reply grows.
    """

    def __init__(
        self,
        answer: str = "",
        reasoning: str = "",
        *,
        thought_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`answer`, `reasoning` and `thought_seconds`: a reply read back part-way (after the thinking
        ended if there is an answer already), whose clock carries on from there."""
        self._clock = clock
        self._answer = [answer] if answer else []
        self._reasoning = [reasoning] if reasoning else []
        self._thinking = ThinkingClock()
        if reasoning:
            now = clock()
            self._thinking.thinking(now - (thought_seconds or 0.0))
            if answer:
                self._thinking.stop(now)
        self.changed: Event[ReplyChange] = Event()

    @property
    def answer(self) -> str:
        return "".join(self._answer)

    @property
    def reasoning(self) -> str:
        return "".join(self._reasoning)

    @property
    def answer_pieces(self) -> Sequence[str]:
        return self._answer

    @property
    def reasoning_pieces(self) -> Sequence[str]:
        return self._reasoning

    @property
    def thinking(self) -> bool:
        """The model is thinking right now: the clock runs."""
        return self._thinking.running

    def thought_seconds(self, now: float | None = None) -> float | None:
        """How long it has thought (until now while it still thinks); None before any reasoning."""
        return self._thinking.seconds(self._clock() if now is None else now)

    def append_answer(self, text: str) -> None:
        now = self._clock()
        self._thinking.text(now)
        # The answer has begun: the thinking is over.
        self._thinking.stop(now)
        self._answer.append(text)
        self.changed.emit(ReplyChange.ANSWER)

    def append_reasoning(self, text: str) -> None:
        self._thinking.thinking(self._clock())
        self._reasoning.append(text)
        self.changed.emit(ReplyChange.REASONING)

    def answer_was_reasoning(self) -> None:
        moved = self.answer
        self._answer = []
        if moved:
            self._reasoning = [moved, *self._reasoning]
        self._thinking.was_thinking(self._clock())
        self.changed.emit(ReplyChange.MOVED)

    def finish(self) -> None:
        """The reply is over: a clock still running (cut off mid-thought) stops. Calling it again changes
        nothing."""
        self._thinking.stop(self._clock())
