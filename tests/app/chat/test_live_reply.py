"""The reply being written, as the window holds it: its text, its reasoning and its one thinking clock."""

from __future__ import annotations

from app.chat.live_reply import LiveReply, ReplyChange


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_clock_runs_from_the_first_thought_to_the_first_word_of_the_answer() -> None:
    clock = FakeClock()
    reply = LiveReply(clock=clock)
    assert reply.thought_seconds() is None and not reply.thinking
    clock.now = 101.0
    reply.append_reasoning("Two and two")
    clock.now = 103.5
    reply.append_reasoning(" make four.")
    assert reply.thinking and reply.thought_seconds() == 2.5
    clock.now = 104.0
    reply.append_answer("It is 4.")
    clock.now = 200.0
    reply.finish()
    assert not reply.thinking and reply.thought_seconds() == 3.0
    assert (reply.reasoning, reply.answer) == ("Two and two make four.", "It is 4.")


def test_a_reply_cut_off_mid_thought_stops_its_clock_once() -> None:
    clock = FakeClock()
    reply = LiveReply(clock=clock)
    reply.append_reasoning("Hmm")
    clock.now = 107.0
    reply.finish()
    clock.now = 150.0
    reply.finish()
    assert reply.thought_seconds() == 7.0


def test_an_answer_that_was_thinking_moves_and_its_clock_runs_from_the_first_text() -> None:
    clock = FakeClock()
    reply = LiveReply(clock=clock)
    changes: list[ReplyChange] = []
    reply.changed.connect(changes.append)
    reply.append_answer("Hmm, two")
    clock.now = 102.0
    reply.append_answer(" plus two.")
    clock.now = 105.0
    reply.answer_was_reasoning()
    assert (reply.reasoning, reply.answer) == ("Hmm, two plus two.", "")
    assert reply.thinking and reply.thought_seconds() == 5.0
    clock.now = 106.0
    reply.append_answer("Four.")
    assert reply.thought_seconds(500.0) == 6.0
    assert changes == [ReplyChange.ANSWER, ReplyChange.ANSWER, ReplyChange.MOVED, ReplyChange.ANSWER]


def test_a_reply_read_back_part_way_keeps_counting_from_where_it_was() -> None:
    clock = FakeClock()
    thinking = LiveReply("", "Let me see", thought_seconds=4.0, clock=clock)
    assert thinking.thinking and thinking.thought_seconds() == 4.0
    clock.now = 101.0
    assert thinking.thought_seconds() == 5.0

    answered = LiveReply("Four.", "Let me see", thought_seconds=4.0, clock=clock)
    clock.now = 160.0
    assert not answered.thinking and answered.thought_seconds() == 4.0


def test_a_reader_takes_only_the_pieces_it_has_not_seen() -> None:
    reply = LiveReply("Once")
    taken = len(reply.answer_pieces)
    reply.append_answer(" upon")
    reply.append_answer(" a time")
    assert "".join(reply.answer_pieces[taken:]) == " upon a time"
    assert reply.answer == "Once upon a time"
