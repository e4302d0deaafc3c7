"""Streaming into the transcript stays cheap and does not fight the user's scrolling."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from ui.transcript import FLUSH_INTERVAL_MS, MessageRow, ReplyStats, Transcript, TranscriptEntry

pytestmark = pytest.mark.gui

LONG = "\n\n".join(f"Paragraph {i}: " + "words " * 40 for i in range(6))


@pytest.fixture
def renders(monkeypatch: pytest.MonkeyPatch) -> Counter[int]:
    """How often each message row (by message id) re-rendered its body."""
    counts: Counter[int] = Counter()
    real: Callable[[MessageRow], None] = MessageRow.render_body

    def counting(self: MessageRow) -> None:
        counts[self.message_id] += 1
        real(self)

    monkeypatch.setattr(MessageRow, "render_body", counting)
    return counts


@pytest.fixture
def transcript(qtbot: QtBot) -> Transcript:
    view = Transcript()
    qtbot.addWidget(view)
    view.resize(600, 400)
    view.show()
    qtbot.waitExposed(view)
    return view


def _history(count: int) -> list[TranscriptEntry]:
    return [
        TranscriptEntry(i, "user" if i % 2 else "assistant", f"Message {i}\n\n{LONG}")
        for i in range(1, count)
    ]


def _settle(qtbot: QtBot) -> None:
    qtbot.wait(FLUSH_INTERVAL_MS * 2)
    QApplication.processEvents()


def test_a_burst_of_deltas_renders_once(qtbot: QtBot, transcript: Transcript, renders: Counter[int]) -> None:
    transcript.set_entries(_history(5))
    transcript.add_entry(TranscriptEntry(99, "assistant", "", status="streaming"))
    renders.clear()

    for i in range(500):
        transcript.append_delta(99, f"tok{i} ")
    assert renders[99] == 0, "rendered per token instead of on the flush tick"
    qtbot.waitUntil(lambda: renders[99] == 1, timeout=1000)
    _settle(qtbot)

    assert renders == Counter({99: 1}), "rows that did not change were re-rendered"
    row = transcript.row(99)
    assert row is not None
    assert row.body.toPlainText().startswith("tok0 tok1 ")
    assert row.body.toPlainText().rstrip().endswith("tok499")


def test_steady_stream_is_coalesced_and_only_the_streaming_row_renders(
    qtbot: QtBot, transcript: Transcript, renders: Counter[int]
) -> None:
    transcript.set_entries(_history(7))
    transcript.add_entry(TranscriptEntry(99, "assistant", "", status="streaming"))
    renders.clear()

    deltas = 120
    for i in range(deltas):
        transcript.append_delta(99, f"word{i} ")
        qtbot.wait(3)  # a fast model: far more deltas than flush ticks
    transcript.finish(99, "complete", ReplyStats(0.12, 85.3, 120))
    _settle(qtbot)

    assert set(renders) == {99}
    assert 1 <= renders[99] <= deltas // 4, renders
    row = transcript.row(99)
    assert row is not None
    assert row.text == "".join(f"word{i} " for i in range(deltas))
    assert row.body.toPlainText().rstrip().endswith(f"word{deltas - 1}")
    assert row.stats_label.text() == "TTFT 0.12 s · 85.3 tok/s · 120 tokens"
    assert not row.badge.isVisible()


def test_finish_renders_pending_text_immediately(transcript: Transcript, renders: Counter[int]) -> None:
    transcript.add_entry(TranscriptEntry(5, "assistant", "", status="streaming"))
    transcript.append_delta(5, "partial answer")
    transcript.finish(5, "stopped")

    row = transcript.row(5)
    assert row is not None
    assert row.body.toPlainText() == "partial answer"
    assert row.badge.text() == "Stopped"
    assert row.status == "stopped"


def test_auto_scroll_follows_only_when_already_at_the_bottom(qtbot: QtBot, transcript: Transcript) -> None:
    transcript.set_entries(_history(9))
    transcript.add_entry(TranscriptEntry(99, "assistant", "", status="streaming"))
    bar = transcript.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0 and bar.value() == bar.maximum(), timeout=2000)

    # At the bottom: the view follows the growing reply.
    before = bar.maximum()
    for _ in range(3):
        transcript.append_delta(99, LONG + "\n\n")
        _settle(qtbot)
    qtbot.waitUntil(lambda: bar.maximum() > before and bar.value() == bar.maximum(), timeout=2000)

    # Scrolled up to read: the view stays put while the reply keeps growing.
    bar.setValue(bar.maximum() // 3)
    reading = bar.value()
    grown = bar.maximum()
    for _ in range(3):
        transcript.append_delta(99, LONG + "\n\n")
        _settle(qtbot)
    qtbot.waitUntil(lambda: bar.maximum() > grown, timeout=2000)
    _settle(qtbot)
    assert bar.value() == reading

    # Back at the bottom: following resumes.
    bar.setValue(bar.maximum())
    transcript.append_delta(99, LONG)
    _settle(qtbot)
    qtbot.waitUntil(lambda: bar.value() == bar.maximum(), timeout=2000)


def test_wheel_over_a_message_is_left_to_the_transcript(qtbot: QtBot, transcript: Transcript) -> None:
    transcript.set_entries(_history(9))
    bar = transcript.verticalScrollBar()
    qtbot.waitUntil(lambda: bar.maximum() > 0, timeout=2000)
    target = transcript.rows()[-1].body.viewport()
    local = QPointF(target.rect().center())
    event = QWheelEvent(
        local,
        QPointF(target.mapToGlobal(local.toPoint())),
        QPoint(0, 0),
        QPoint(0, -120),
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
        Qt.ScrollPhase.NoScrollPhase,
        False,
    )
    QApplication.sendEvent(target, event)

    # The body fits its text exactly, so it has nothing to scroll and leaves a real (spontaneous)
    # wheel event to propagate to the transcript.
    assert not event.isAccepted()


def test_statuses_and_errors_are_shown_as_plain_text(transcript: Transcript) -> None:
    transcript.set_entries(
        [
            TranscriptEntry(1, "user", "**not bold** <b>raw</b>"),
            TranscriptEntry(2, "assistant", "half", status="interrupted"),
            TranscriptEntry(3, "assistant", "", status="error", error="<img src='file:///etc/passwd'>"),
        ]
    )

    user, interrupted, failed = (transcript.row(i) for i in (1, 2, 3))
    assert user is not None and interrupted is not None and failed is not None
    assert user.body.toPlainText() == "**not bold** <b>raw</b>"
    assert interrupted.badge.text().startswith("Interrupted")
    assert failed.badge.text() == "Error: <img src='file:///etc/passwd'>"
    assert failed.badge.textFormat() == Qt.TextFormat.PlainText


def test_cjk_streams_intact(qtbot: QtBot, transcript: Transcript) -> None:
    transcript.add_entry(TranscriptEntry(1, "assistant", "", status="streaming"))
    for piece in ["炉", "端で", "温か", "い茶を", "。한국", "어"]:
        transcript.append_delta(1, piece)
    transcript.finish(1, "complete")

    row = transcript.row(1)
    assert row is not None
    assert row.body.toPlainText() == "炉端で温かい茶を。한국어"
