"""The collapsible "Thinking" section: streaming into it, its clock, expanding and collapsing it by
clicking, the setting that chooses how it starts, and a reasoning model's reply in the real window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QImage
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

import ui.markdown
import ui.message_row
from app.core import Core
from app.paths import HearthPaths
from app.settings import Settings, load_settings, save_settings
from tests.app.chat.test_reasoning_storage import THINKING_TEMPLATE
from tests.helpers.model_files import with_chat_template
from tests.helpers.ui_fixtures import GuiSessions, click, click_in_transcript, rows, settle_transcript
from ui.markdown import RenderStyle, Segment
from ui.message_row import TranscriptEntry
from ui.transcript import Transcript

pytestmark = pytest.mark.gui

REPLY_TIMEOUT_MS = 180_000
REASONING = "The user asks for a sum.\n\nTwo and two make four, so the answer is four."


@pytest.fixture
def transcript(qtbot: QtBot) -> Transcript:
    view = Transcript()
    qtbot.addWidget(view)
    view.resize(700, 500)
    view.show()
    qtbot.waitExposed(view)
    return view


@pytest.fixture
def plain_renders(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every plain-text document the transcript creates (the reasoning is one)."""
    seen: list[str] = []
    real = ui.markdown.render_plain

    def counting(text: str, style: RenderStyle, *, monospace: bool = False) -> Segment:
        seen.append(text)
        return real(text, style, monospace=monospace)

    monkeypatch.setattr(ui.message_row, "render_plain", counting)
    yield seen


class _PaintCounter(QObject):
    def __init__(self, transcript: Transcript) -> None:
        super().__init__(transcript)
        self.count = 0
        transcript.viewport().installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            self.count += 1
        return False


class _ThinkingPaints(QObject):
    """The Thinking label of every live-thinking reply, at each repaint of the transcript; and whether
    any of them had its reasoning rendered (it must not be, collapsed)."""

    def __init__(self, transcript: Transcript) -> None:
        super().__init__(transcript)
        self.transcript = transcript
        self.labels: list[str] = []
        self.rendered = False
        transcript.viewport().installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Paint:
            for row in self.transcript.rows():
                if row.thinking_live:
                    self.labels.append(row.thinking_label(0.0))
                    self.rendered = self.rendered or row.expanded or row.thinking is not None
        return False


def _label(transcript: Transcript, message_id: int) -> QImage:
    rect = transcript.thinking_rect(message_id)
    return transcript.viewport().grab(rect).toImage()


def _streaming(transcript: Transcript) -> None:
    transcript.add_entry(TranscriptEntry(1, "user", "2+2?"))
    transcript.add_entry(TranscriptEntry(2, "assistant", "", status="streaming"))


def test_reasoning_streams_into_a_collapsed_section_whose_clock_runs_until_the_answer(
    qtbot: QtBot, transcript: Transcript, plain_renders: list[str]
) -> None:
    _streaming(transcript)
    for piece in ("The user asks", " for a sum.", "\n\nTwo and two make four, so the answer is four."):
        transcript.append_reasoning(2, piece)
    settle_transcript(qtbot)
    row = transcript.row(2)
    assert row is not None and row.has_thinking and row.thinking_live
    assert row.reasoning_text == REASONING
    # Collapsed: the reasoning is not even rendered while it streams.
    assert row.thinking is None and REASONING not in plain_renders
    assert row.rendered_text() == ""

    # The label is repainted on its own while the model thinks (nothing else happens meanwhile), so its
    # seconds count up; each repaint draws the time of the moment.
    transcript.thinking_rect(2)
    painted = _PaintCounter(transcript)
    qtbot.waitUntil(lambda: painted.count >= 3, timeout=3000)
    first = _label(transcript, 2)
    qtbot.waitUntil(lambda: _label(transcript, 2) != first, timeout=3000)

    transcript.append_delta(2, "It is **4**.")
    settle_transcript(qtbot)
    assert not row.thinking_live
    assert row.rendered_text() == "It is 4."
    label = row.thinking_label(0.0)
    assert label.startswith("▸ Thought for ") and label.endswith(" s")
    transcript.finish(2, "complete")
    settle_transcript(qtbot)
    assert transcript.entries()[-1].reasoning == REASONING
    assert transcript.entries()[-1].content == "It is **4**."


def test_clicking_the_label_expands_and_collapses_the_reasoning(qtbot: QtBot, transcript: Transcript) -> None:
    transcript.set_entries(
        [
            TranscriptEntry(1, "user", "2+2?"),
            TranscriptEntry(2, "assistant", "It is 4.", reasoning=REASONING, reasoning_seconds=12.4),
        ]
    )
    settle_transcript(qtbot)
    row = transcript.row(2)
    assert row is not None
    assert row.thinking_label(0.0) == "▸ Thought for 12 s"
    collapsed = row.height

    click_in_transcript(transcript, transcript.thinking_rect(2).center())
    assert row.expanded and row.thinking is not None
    assert row.thinking.plain_text() == REASONING
    assert row.height > collapsed
    assert row.thinking_label(0.0) == "▾ Thought for 12 s"
    # The answer is still there, below the reasoning.
    assert row.rendered_text() == "It is 4."
    point = transcript.text_point(2, "It is 4.")
    assert point.y() > transcript.thinking_rect(2).bottom() + row.thinking.height / 2

    click_in_transcript(transcript, transcript.thinking_rect(2).center())
    assert not row.expanded and row.thinking is None
    assert row.height == collapsed


def test_expanded_reasoning_grows_by_appends_while_it_streams(
    qtbot: QtBot, transcript: Transcript, plain_renders: list[str]
) -> None:
    transcript.set_thinking_display("expanded")
    _streaming(transcript)
    row = transcript.row(2)
    assert row is not None
    heights = []
    for i in range(40):
        transcript.append_reasoning(2, f"Step {i}: still reasoning about the problem.\n")
        if i % 10 == 9:
            settle_transcript(qtbot)
            heights.append(row.height)
    assert row.thinking is not None
    assert row.thinking.plain_text().count("Step") == 40
    # Rendered once; every later flush appended to the same document.
    assert len([text for text in plain_renders if "Step" in text]) == 1
    assert heights == sorted(heights) and heights[0] < heights[-1]


def test_an_answer_that_turns_out_to_be_thinking_moves_into_the_section(
    qtbot: QtBot, transcript: Transcript
) -> None:
    _streaming(transcript)
    transcript.append_delta(2, "Hmm, two plus two.")
    settle_transcript(qtbot)
    row = transcript.row(2)
    assert row is not None and row.rendered_text() == "Hmm, two plus two." and not row.has_thinking

    # The model closed a thinking block it never opened: what it wrote so far was thinking.
    transcript.answer_was_reasoning(2)
    transcript.append_delta(2, "Four.")
    settle_transcript(qtbot)
    assert row.reasoning_text == "Hmm, two plus two."
    assert row.rendered_text() == "Four."
    assert row.has_thinking and not row.expanded
    transcript.finish(2, "complete")
    settle_transcript(qtbot)
    assert row.thinking_label(0.0).startswith("▸ Thought for ")


def test_the_display_setting_hides_or_expands_every_section(qtbot: QtBot, transcript: Transcript) -> None:
    transcript.set_entries(
        [
            TranscriptEntry(1, "assistant", "A.", reasoning="first thought"),
            TranscriptEntry(2, "assistant", "B.", reasoning="second thought"),
            TranscriptEntry(3, "assistant", "C."),
        ]
    )
    settle_transcript(qtbot)
    transcript.set_thinking_display("hidden")
    settle_transcript(qtbot)
    assert [row.has_thinking for row in transcript.rows()] == [False, False, False]
    with pytest.raises(KeyError):
        transcript.thinking_rect(1)
    transcript.set_thinking_display("expanded")
    settle_transcript(qtbot)
    transcript.thinking_rect(1)  # measured and scrolled into view
    transcript.thinking_rect(2)
    assert [row.expanded for row in transcript.rows()[:2]] == [True, True]
    assert [row.thinking.plain_text() if row.thinking else None for row in transcript.rows()] == [
        "first thought",
        "second thought",
        None,
    ]
    with pytest.raises(ValueError):
        transcript.set_thinking_display("sideways")


# -- the real window -------------------------------------------------------------------------------------


def test_a_search_hit_in_the_thinking_opens_the_reply_with_its_section_expanded(
    qtbot: QtBot, gui: GuiSessions, hermetic_home: Path
) -> None:
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    window = session.window
    store = session.services.store
    conversation = store.create_conversation("Sums")
    store.add_message(conversation.id, "user", "2+2?")
    reply = store.start_assistant_message(
        conversation.id, model_name="m", model_sha256="0" * 64, sampling={}, seed=None
    )
    store.finish_message(reply.id, content="Four.", status="complete", reasoning="Count on my fingers.")
    window.refresh_conversations()
    qtbot.waitUntil(lambda: window.conversationList.count() == 1)

    window.activateWindow()
    QTest.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.searchPanel.query.hasFocus())
    QTest.keyClicks(window.searchPanel.query, "fingers")
    qtbot.waitUntil(lambda: len(window.searchPanel.hits) == 1, timeout=3000)
    assert window.searchPanel.hits[0].in_reasoning
    QTest.keyClick(window.searchPanel.query, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.transcript.row(reply.id) is not None, timeout=3000)
    row = window.transcript.row(reply.id)
    assert row is not None and row.expanded
    qtbot.waitUntil(lambda: row.thinking is not None)
    assert row.thinking is not None and row.thinking.plain_text() == "Count on my fingers."


@pytest.fixture
def thinker_home(hermetic_home: Path, starter_model: Path, tmp_path: Path) -> HearthPaths:
    """A home with a model whose template pre-fills <think>, chosen as the default, with short replies."""
    paths = HearthPaths(hermetic_home)
    core = Core.open(paths)
    try:
        model = with_chat_template(starter_model, tmp_path / "thinker.gguf", THINKING_TEMPLATE)
        core.library.import_file(model, name="thinker")
    finally:
        core.close()
    save_settings(paths.settings_path, Settings(max_tokens=120, temperature=0.0, default_model="thinker"))
    return paths


@pytest.mark.model
def test_a_reasoning_model_thinks_in_a_collapsed_section_of_the_real_window(
    qtbot: QtBot, gui: GuiSessions, thinker_home: HearthPaths
) -> None:
    session = gui.open(thinker_home)
    window = session.window
    window.modelPicker.setCurrentIndex(window.modelPicker.findData("thinker"))
    # What the user saw while the model thought, caught at every repaint: on a fast CPU a short reply
    # can stream and finish between two polls, so polling for the live state would race the model.
    seen_while_thinking = _ThinkingPaints(window.transcript)
    # A reply long enough to stream over many flush ticks.
    QTest.keyClicks(window.composer, "Write a long poem about the sea.")
    click(window.sendButton)
    qtbot.waitUntil(lambda: bool(rows(window, "assistant")), timeout=REPLY_TIMEOUT_MS)
    qtbot.waitUntil(
        lambda: window.sendButton.isEnabled() and not window.stopButton.isEnabled(), timeout=REPLY_TIMEOUT_MS
    )
    assert seen_while_thinking.labels, "the reply was never painted while the model was thinking"
    assert all(label.startswith("▸ Thinking… ") for label in seen_while_thinking.labels)
    assert not seen_while_thinking.rendered, "collapsed reasoning was rendered while it streamed"
    (reply,) = rows(window, "assistant")
    stored = session.services.store.get_message(reply.message_id)
    assert stored.reasoning and stored.content == ""
    qtbot.waitUntil(lambda: reply.entry.reasoning_seconds == stored.reasoning_seconds)
    assert reply.reasoning_text == stored.reasoning
    assert reply.thinking_label(0.0).startswith("▸ Thought for ")

    click_in_transcript(window.transcript, window.transcript.thinking_rect(reply.message_id).center())
    assert reply.thinking is not None and reply.thinking.plain_text() == stored.reasoning

    # The setting, for every chat: hidden from now on, and still after a restart.
    picker = window.settingsPanel.thinkingDisplay
    picker.setCurrentIndex(picker.findData("hidden"))
    picker.activated.emit(picker.currentIndex())
    assert not reply.has_thinking
    qtbot.waitUntil(lambda: load_settings(thinker_home.settings_path).show_thinking == "hidden")
    session.close()
    reopened = gui.open(thinker_home).window
    assert reopened.transcript.thinking_display == "hidden"
    assert reopened.settingsPanel.thinkingDisplay.currentData() == "hidden"
