"""A reasoning model's thinking, told apart from its answer while the reply streams.

DeepSeek-R1 and its distills, QwQ, Qwen3 and others write what they think between two markers
(`<think>` … `</think>`) before they answer. Hearth shows that part in a collapsible "Thinking" section,
stores it apart from the answer and never sends it back to the model in later turns (DeepSeek's guidance
for R1). Deltas arrive in arbitrary pieces, so a marker can be split across tokens; the parser holds back
only the text that could still turn out to be part of one (and reasoning's trailing whitespace, which a
closing marker would make trailing), so the answer streams without delay.

Where the reasoning starts and ends:
- An opening marker counts only at the start of the reply (after whitespace); later it is answer text.
- Templates that pre-fill the opening marker (R1's ends the prompt with `<think>\\n`) start the reply
  inside the reasoning; a prompt that ends with a closed block (Qwen3 with thinking off) starts with the
  answer.
- The first closing marker ends the reasoning; markers inside it do not nest (an opening marker there is
  text). A closing marker with no opening one means the model started thinking without saying so (R1
  GGUFs with the template from before DeepSeek added the pre-fill, or a server that pre-fills it but
  streams the raw text): what came before it was reasoning after all, even though it was first given out
  as answer text. Only for models whose template names the markers, and for servers: an ordinary model
  that writes "</think>" in an answer (explaining R1's format, say) keeps its answer.
- A reply cut off mid-thought keeps its reasoning and has an empty (or partial) answer.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class ReasoningMarkers:
    open: str
    close: str


DEFAULT_MARKERS = ReasoningMarkers("<think>", "</think>")
# Pairs that chat templates name, to pre-fill the opening marker or to strip reasoning from earlier turns.
KNOWN_MARKERS = (
    DEFAULT_MARKERS,  # DeepSeek-R1 and its distills, QwQ, Qwen3, Phi-4-reasoning
    ReasoningMarkers("<thinking>", "</thinking>"),
    ReasoningMarkers("<|begin_of_thought|>", "<|end_of_thought|>"),  # Sky-T1, OpenThinker
    ReasoningMarkers("◁think▷", "◁/think▷"),  # Kimi-VL-Thinking
    ReasoningMarkers("[THINK]", "[/THINK]"),  # Magistral
    ReasoningMarkers("<|START_THINKING|>", "<|END_THINKING|>"),  # Command A Reasoning
)


def markers_for_template(template: str | None) -> ReasoningMarkers | None:
    """The pair a chat template declares, or None when it names none.

    Only the closing marker is looked for: R1's first template named only `</think>`, to cut the
    reasoning out of earlier replies.
    """
    if template:
        for markers in KNOWN_MARKERS:
            if markers.close in template:
                return markers
    return None


@dataclass(frozen=True)
class Split:
    """What one piece of the reply turned out to be."""

    reasoning: str = ""
    answer: str = ""
    # The text given out as answer until now was reasoning after all (a closing marker came with no
    # opening one): it moves to the reasoning, in front of `reasoning`.
    answer_was_reasoning: bool = False


class _State(enum.Enum):
    START = "start"  # only whitespace so far: an opening marker may still come
    REASONING = "reasoning"
    UNOPENED = "unopened"  # answer text with no marker seen: a closing marker would make it reasoning
    ANSWER = "answer"


def _partial_marker(text: str, marker: str) -> int:
    """The length of the longest end of `text` that is the start of `marker` (0 when none is)."""
    for length in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-length:]):
            return length
    return 0


class ReasoningParser:
    """Fed the reply's text deltas in order; each `feed` says which part went where.

    Work per delta is bounded by the delta and the marker length, never by the reply length.
    """

    def __init__(self, markers: ReasoningMarkers = DEFAULT_MARKERS, *, lone_close: bool = True) -> None:
        """`lone_close`: a closing marker with no opening one ends a reasoning the model never announced."""
        self.markers = markers
        self._lone_close = lone_close
        self._state = _State.START
        self._held = ""
        self._answered = False  # answer text has been given out (after leading whitespace)
        self._thought = False  # reasoning text has been given out

    @property
    def in_reasoning(self) -> bool:
        return self._state is _State.REASONING

    def after_prompt(self, prompt_end: str) -> None:
        """Tell the parser how the rendered prompt ends, before the first delta.

        A template that pre-fills the opening marker has already started the reasoning for the model; one
        that pre-fills a closed, empty block has switched it off.
        """
        tail = prompt_end.rstrip()
        if tail.endswith(self.markers.open):
            self._state = _State.REASONING
        elif tail.endswith(self.markers.close):
            self._state = _State.ANSWER

    def feed(self, text: str) -> Split:
        text = self._held + text
        self._held = ""
        reasoning: list[str] = []
        answer: list[str] = []
        moved = False
        while text:
            if self._state is _State.START:
                text = text.lstrip()
                if text.startswith(self.markers.open):
                    self._state = _State.REASONING
                    text = text[len(self.markers.open) :]
                elif self._lone_close and text.startswith(self.markers.close):
                    # A closing marker before anything else: an empty reasoning, then the answer.
                    self._state = _State.ANSWER
                    text = text[len(self.markers.close) :]
                elif self.markers.open.startswith(text) or (
                    self._lone_close and self.markers.close.startswith(text)
                ):
                    self._held = text
                    text = ""
                elif text:
                    self._state = _State.UNOPENED if self._lone_close else _State.ANSWER
            elif self._state is _State.ANSWER:
                answer.append(text)
                text = ""
            else:
                end = text.find(self.markers.close)
                if end < 0:
                    # The end of the text may be the start of the closing marker, and whitespace before
                    # it would be trailing whitespace of the reasoning: both wait for the next delta.
                    partial = _partial_marker(text, self.markers.close)
                    body = text[: len(text) - partial]
                    kept = body.rstrip()
                    self._held = text[len(kept) :]
                    (reasoning if self._state is _State.REASONING else answer).append(kept)
                    text = ""
                    continue
                before, text = text[:end].rstrip(), text[end + len(self.markers.close) :]
                if self._state is _State.UNOPENED:
                    moved = self._answered
                    reasoning += answer
                    answer = []
                    # The reasoning goes on from the moved text: its leading whitespace is no longer leading.
                    self._thought = self._thought or moved
                    self._answered = False
                reasoning.append(before)
                self._state = _State.ANSWER
        return self._split(reasoning, answer, moved)

    def finish(self) -> Split:
        """The end of the reply: whatever was held back goes where it was headed."""
        held, self._held = self._held, ""
        if self._state is _State.REASONING:
            return self._split([held.rstrip()], [], False)
        return self._split([], [held], False)

    def _split(self, reasoning: list[str], answer: list[str], moved: bool) -> Split:
        reasoning_text = "".join(reasoning)
        if not self._thought:
            # Whitespace after the opening marker (R1 writes "<think>\n") is not part of the reasoning.
            reasoning_text = reasoning_text.lstrip()
        answer_text = "".join(answer)
        if not self._answered:
            # Nor is whitespace after the closing marker (R1 writes "</think>\n\n") part of the answer.
            answer_text = answer_text.lstrip()
        self._thought = self._thought or bool(reasoning_text)
        self._answered = self._answered or bool(answer_text)
        return Split(reasoning_text, answer_text, moved)


class ThinkingClock:
    """How long a reply thought: from its first reasoning (or, when what came first turns out afterwards to
    have been reasoning, from its first text) until the thinking ended, or until now while it goes on.

    The caller says what time it is (monotonic seconds): the engine's reply and the window's live reply keep
    time the same way, and tests need no real clock."""

    def __init__(self) -> None:
        self.first_text_at: float | None = None
        self.since: float | None = None
        self.until: float | None = None

    @property
    def running(self) -> bool:
        return self.since is not None and self.until is None

    def text(self, now: float) -> None:
        if self.first_text_at is None:
            self.first_text_at = now

    def thinking(self, now: float) -> None:
        self.text(now)
        if self.since is None:
            self.since = now

    def stop(self, now: float) -> None:
        if self.running:
            self.until = now

    def was_thinking(self, now: float) -> None:
        """Everything so far was reasoning: the clock runs from the first text, and goes on."""
        self.since = self.first_text_at if self.first_text_at is not None else now
        self.until = None

    def seconds(self, now: float) -> float | None:
        if self.since is None:
            return None
        return max(0.0, (self.until if self.until is not None else now) - self.since)


class ReplyText:
    """A streaming reply as its answer and its reasoning, and how long the thinking took.

    The thinking time runs from the first reasoning text (or, when it turns out afterwards to have been
    reasoning, the first answer text) to the closing marker, or to the end of a reply cut off mid-thought.
    """

    def __init__(
        self,
        markers: ReasoningMarkers = DEFAULT_MARKERS,
        clock: Callable[[], float] = time.monotonic,
        *,
        lone_close: bool = True,
    ) -> None:
        self.parser = ReasoningParser(markers, lone_close=lone_close)
        self._clock = clock
        self._answer: list[str] = []
        self._reasoning: list[str] = []
        self._thinking = ThinkingClock()

    def feed(self, text: str) -> Split:
        return self._apply(self.parser.feed(text))

    def finish(self) -> Split:
        split = self._apply(self.parser.finish())
        self._thinking.stop(self._clock())
        return split

    @property
    def answer(self) -> str:
        return "".join(self._answer)

    @property
    def reasoning(self) -> str | None:
        """None for a reply with no reasoning (an empty `<think></think>` included)."""
        return "".join(self._reasoning) or None

    @property
    def reasoning_seconds(self) -> float | None:
        if not self._reasoning:
            return None
        return self._thinking.seconds(self._clock())

    def _apply(self, split: Split) -> Split:
        now = self._clock()
        if split.answer or split.reasoning:
            self._thinking.text(now)
        if split.answer_was_reasoning:
            self._reasoning = self._answer + self._reasoning
            self._answer = []
            self._thinking.was_thinking(now)
        if split.reasoning:
            self._reasoning.append(split.reasoning)
            self._thinking.thinking(now)
        if not self.parser.in_reasoning:
            self._thinking.stop(now)
        if split.answer:
            self._answer.append(split.answer)
        return split
