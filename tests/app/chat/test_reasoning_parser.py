"""The reasoning parser on scripted token streams: markers split anywhere, pre-filled, missing, nested,
unclosed, or absent."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import pytest

from app.chat.reasoning import (
    DEFAULT_MARKERS,
    KNOWN_MARKERS,
    ReasoningMarkers,
    ReasoningParser,
    ReplyText,
    Split,
    markers_for_template,
)


class Screen:
    """What a reader of the callbacks would show: the answer and reasoning as they stream in."""

    def __init__(self) -> None:
        self.answer = ""
        self.reasoning = ""
        self.moves = 0
        self.answer_shown_while_unclosed: list[str] = []

    def apply(self, split: Split) -> None:
        if split.answer_was_reasoning:
            self.moves += 1
            self.reasoning = self.answer + self.reasoning
            self.answer = ""
        self.reasoning += split.reasoning
        self.answer += split.answer


def stream(
    pieces: Iterable[str], markers: ReasoningMarkers = DEFAULT_MARKERS, prompt_end: str = ""
) -> Screen:
    parser = ReasoningParser(markers)
    parser.after_prompt(prompt_end)
    screen = Screen()
    for piece in pieces:
        screen.apply(parser.feed(piece))
    screen.apply(parser.finish())
    return screen


def every_split(text: str, cuts: int) -> Iterable[list[str]]:
    """`text` cut at every combination of `cuts` positions (empty pieces included)."""
    for positions in itertools.combinations_with_replacement(range(len(text) + 1), cuts):
        bounds = [0, *positions, len(text)]
        yield [text[a:b] for a, b in itertools.pairwise(bounds)]


R1_REPLY = "<think>\nThe user wants 2+2.\n\nThat is 4.\n</think>\n\nThe answer is **4**."


@pytest.mark.parametrize("cuts", [1, 2])
def test_markers_split_at_every_boundary_give_the_same_reasoning_and_answer(cuts: int) -> None:
    for pieces in every_split(R1_REPLY, cuts):
        screen = stream(pieces)
        assert (screen.reasoning, screen.answer, screen.moves) == (
            "The user wants 2+2.\n\nThat is 4.",
            "The answer is **4**.",
            0,
        ), pieces


def test_token_by_token_stream_never_shows_marker_text() -> None:
    parser = ReasoningParser()
    shown = Screen()
    for char in R1_REPLY:
        shown.apply(parser.feed(char))
        assert "<" not in shown.reasoning and "</" not in shown.answer
        assert not shown.answer or shown.reasoning == "The user wants 2+2.\n\nThat is 4."
    shown.apply(parser.finish())
    assert shown.answer == "The answer is **4**."


def test_a_reply_without_markers_streams_as_answer_holding_back_only_a_possible_marker() -> None:
    parser = ReasoningParser()
    assert parser.feed("The answer") == Split(answer="The answer")
    # A "<" could start "</think>", and the space before it would then end the reasoning: both wait.
    assert parser.feed(" is <") == Split(answer=" is")
    assert parser.feed("b>4</b>") == Split(answer=" <b>4</b>")
    assert parser.finish() == Split()
    for pieces in every_split("Use <b>bold</b>, not <think>: it means 2 < 3.", 2):
        screen = stream(pieces)
        assert (screen.answer, screen.reasoning) == ("Use <b>bold</b>, not <think>: it means 2 < 3.", "")


def test_an_opening_marker_counts_only_at_the_start_of_the_reply() -> None:
    screen = stream(["Sure. ", "<think>not a thought</think>", " Done."])
    # The closing marker still ends a reasoning that was never opened (see the next test), so only the
    # opening marker after the answer began is plain text.
    assert screen.reasoning == "Sure. <think>not a thought"
    assert screen.answer == "Done."
    leading = stream(["\n\n  ", "<thi", "nk>deep</think>", "\n\nshallow"])
    assert (leading.reasoning, leading.answer) == ("deep", "shallow")


@pytest.mark.parametrize("cuts", [1, 2])
def test_a_closing_marker_without_an_opening_one_turns_what_came_before_into_reasoning(cuts: int) -> None:
    text = "Okay, 2+2 is 4, so I say 4.\n</think>\n\n4"
    for pieces in every_split(text, cuts):
        screen = stream(pieces)
        assert (screen.reasoning, screen.answer) == ("Okay, 2+2 is 4, so I say 4.", "4"), pieces
        # The move is announced only when answer text had already been given out.
        assert screen.moves <= 1


def test_the_move_keeps_the_words_on_both_sides_of_the_delta_boundary_apart() -> None:
    parser = ReasoningParser()
    screen = Screen()
    for piece in ["I think", " it is", " four</think>", " Four."]:
        screen.apply(parser.feed(piece))
    screen.apply(parser.finish())
    assert (screen.reasoning, screen.answer, screen.moves) == ("I think it is four", "Four.", 1)


def test_a_template_that_prefills_the_opening_marker_starts_the_reply_in_reasoning() -> None:
    prompt_end = "<｜User｜>What is 2+2?<｜Assistant｜><think>\n"
    for pieces in every_split("Simple sum.\n</think>\n\nIt is 4.", 2):
        screen = stream(pieces, prompt_end=prompt_end)
        assert (screen.reasoning, screen.answer, screen.moves) == ("Simple sum.", "It is 4.", 0)


def test_a_prompt_ending_in_a_closed_empty_block_starts_with_the_answer() -> None:
    # Qwen3 with thinking switched off pre-fills an empty block; a later "</think>" is answer text.
    screen = stream(["Hi", " </think> there"], prompt_end="<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert (screen.reasoning, screen.answer) == ("", "Hi </think> there")


def test_a_reply_cut_off_mid_thought_keeps_its_reasoning_and_has_no_answer() -> None:
    assert (s := stream(["<think>\nStill work", "ing on it\n\n"])).reasoning == "Still working on it"
    assert s.answer == ""
    # Cut off inside the closing marker: the model's text is kept as it wrote it.
    partial = stream(["<think>Almost there\n</thi"])
    assert (partial.reasoning, partial.answer) == ("Almost there\n</thi", "")
    prefilled = stream(["Cut"], prompt_end="<think>\n")
    assert (prefilled.reasoning, prefilled.answer) == ("Cut", "")


def test_nested_markers_do_not_nest_the_first_closing_marker_ends_the_reasoning() -> None:
    for pieces in every_split("<think>outer <think>inner</think> rest</think> end", 1):
        screen = stream(pieces)
        assert (screen.reasoning, screen.answer) == ("outer <think>inner", "rest</think> end"), pieces


def test_empty_and_lone_markers() -> None:
    assert (s := stream(["<think>\n\n</think>\n\nHi"])).reasoning == "" and s.answer == "Hi"
    assert (s := stream(["</think>Hi"])).reasoning == "" and s.answer == "Hi"
    assert (s := stream(["<think>"])).reasoning == "" and s.answer == ""
    assert (s := stream(["<thi"])).answer == "<thi"
    assert stream([]).answer == ""


@pytest.mark.parametrize("markers", KNOWN_MARKERS, ids=lambda m: m.open)
def test_every_known_marker_pair_works_split_anywhere(markers: ReasoningMarkers) -> None:
    text = f"{markers.open}\nHmm: {DEFAULT_MARKERS.open} is just text here.\n{markers.close}\n\nDone."
    expected_reasoning = f"Hmm: {DEFAULT_MARKERS.open} is just text here."
    for pieces in every_split(text, 1):
        screen = stream(pieces, markers)
        assert (screen.reasoning, screen.answer) == (expected_reasoning, "Done."), pieces


R1_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'assistant' %}{% set content = "
    "message['content'] %}{% if '</think>' in content %}{% set content = content.split('</think>')[-1] %}"
    "{% endif %}{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}"
)


def test_markers_come_from_the_chat_template() -> None:
    assert markers_for_template(R1_TEMPLATE) == DEFAULT_MARKERS
    assert markers_for_template("{{ '<|begin_of_thought|>' }} … {{ '<|end_of_thought|>' }}") == (
        ReasoningMarkers("<|begin_of_thought|>", "<|end_of_thought|>")
    )
    assert markers_for_template("x ◁/think▷ y") == ReasoningMarkers("◁think▷", "◁/think▷")
    assert markers_for_template("[THINK]…[/THINK]") == ReasoningMarkers("[THINK]", "[/THINK]")
    assert markers_for_template("{{ messages }}") is None
    assert markers_for_template(None) is None


def test_without_lone_closing_markers_only_an_announced_reasoning_counts() -> None:
    """For a model whose template names no markers: "</think>" in its answer is just text."""

    def plain(pieces: list[str]) -> Screen:
        parser = ReasoningParser(lone_close=False)
        screen = Screen()
        for piece in pieces:
            screen.apply(parser.feed(piece))
        screen.apply(parser.finish())
        return screen

    for pieces in every_split("R1 ends its thinking with </think> and then answers.", 2):
        screen = plain(pieces)
        assert (screen.reasoning, screen.answer, screen.moves) == (
            "",
            "R1 ends its thinking with </think> and then answers.",
            0,
        )
    # Nothing is held back: the answer streams exactly as it comes.
    parser = ReasoningParser(lone_close=False)
    assert parser.feed("Hello \n<") == Split(answer="Hello \n<")
    for pieces in every_split(R1_REPLY, 1):
        announced = plain(pieces)
        assert (announced.reasoning, announced.answer) == (
            "The user wants 2+2.\n\nThat is 4.",
            "The answer is **4**.",
        )


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _timed(pieces: Sequence[tuple[float, str]], prompt_end: str = "") -> ReplyText:
    clock = FakeClock()
    reply = ReplyText(clock=clock)
    reply.parser.after_prompt(prompt_end)
    for at, piece in pieces:
        clock.now = at
        reply.feed(piece)
    clock.now = 999.0
    reply.finish()
    return reply


def test_thinking_time_runs_from_the_first_thought_to_the_closing_marker() -> None:
    reply = _timed([(101.0, "<think>a"), (103.0, "b"), (104.5, "c</think>"), (106.0, "answer")])
    assert (reply.reasoning, reply.answer, reply.reasoning_seconds) == ("abc", "answer", 3.5)


def test_thinking_time_of_a_reply_cut_off_mid_thought_runs_to_the_end() -> None:
    reply = _timed([(101.0, "think"), (102.0, "ing")], prompt_end="<think>\n")
    assert (reply.reasoning, reply.answer, reply.reasoning_seconds) == ("thinking", "", 898.0)


def test_thinking_time_of_unannounced_reasoning_starts_with_the_first_text() -> None:
    reply = _timed([(101.0, "first"), (102.0, " second"), (105.0, "</think>answer")])
    assert (reply.reasoning, reply.answer, reply.reasoning_seconds) == ("first second", "answer", 4.0)


def test_no_reasoning_means_none() -> None:
    reply = _timed([(101.0, "<think>\n</think>"), (102.0, "just this")])
    assert (reply.reasoning, reply.answer, reply.reasoning_seconds) == (None, "just this", None)
    plain = _timed([(101.0, "hello")])
    assert (plain.reasoning, plain.answer, plain.reasoning_seconds) == (None, "hello", None)
