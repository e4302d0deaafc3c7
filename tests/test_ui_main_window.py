"""The real window over the real services and the real starter model, driven like a user."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QListWidget, QPushButton
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from app.settings import Settings, save_settings
from tests.ui_fixtures import GuiSession, GuiSessions
from ui.main import run_gui
from ui.main_window import MainWindow
from ui.transcript import MessageRow

pytestmark = pytest.mark.gui

# The starter model runs on the CPU of a busy CI machine: loading and the first token can be slow.
FIRST_TOKEN_TIMEOUT_MS = 120_000
REPLY_TIMEOUT_MS = 180_000
# The longest the GUI thread may go without running a 10 ms timer while a reply streams.
MAX_EVENT_LOOP_GAP_S = 0.5
LONG_PROMPT = "Write a long story about a lighthouse keeper and a storm. Use at least 600 words."


@pytest.fixture
def gui(qtbot: QtBot) -> Iterator[GuiSessions]:
    with GuiSessions(qtbot) as sessions:
        yield sessions


@pytest.fixture
def home(hermetic_home: Path) -> HearthPaths:
    return HearthPaths(hermetic_home)


@pytest.fixture
def model_home(home: HearthPaths, starter_model: Path) -> HearthPaths:
    """A home where start-up registers the starter model (it ships as a Python package)."""
    return home


def _click(button: QPushButton) -> None:
    assert button.isEnabled(), button.objectName()
    QTest.mouseClick(button, Qt.MouseButton.LeftButton)


def _click_conversation(qtbot: QtBot, window: MainWindow, title: str) -> None:
    conversations = window.findChild(QListWidget, "conversationList")
    assert conversations is not None
    matches = conversations.findItems(title, Qt.MatchFlag.MatchExactly)
    assert matches, f"{title!r} not in the sidebar"
    rect = conversations.visualItemRect(matches[0])
    QTest.mouseClick(conversations.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(rect.center()))
    qtbot.waitUntil(lambda: window.current_conversation_id is not None)


def _titles(window: MainWindow) -> list[str]:
    conversations = window.conversationList
    return [conversations.item(i).text() for i in range(conversations.count())]


def _rows(window: MainWindow, role: str) -> list[MessageRow]:
    return [row for row in window.transcript.rows() if row.role == role]


class _Ticker:
    """A 10 ms timer on the GUI thread; gaps between its ticks are time the event loop was blocked."""

    def __init__(self) -> None:
        self.ticks: list[float] = []
        self._timer = QTimer()
        self._timer.setInterval(10)
        self._timer.timeout.connect(lambda: self.ticks.append(time.monotonic()))
        self._timer.start()

    def stop(self) -> None:
        self._timer.stop()

    def max_gap_between(self, start: float, end: float) -> float:
        inside = [start, *(t for t in self.ticks if start <= t <= end), end]
        return max(b - a for a, b in itertools.pairwise(inside))


@pytest.mark.model
def test_stream_stop_and_find_it_again_after_a_restart(
    qtbot: QtBot, gui: GuiSessions, model_home: HearthPaths
) -> None:
    first = gui.open(model_home)
    window = first.window
    assert window.modelPicker.count() >= 1
    assert window.statusBackend.text().startswith(("CPU", "CUDA", "GPU", "Loading"))

    ticker = _Ticker()
    QTest.keyClicks(window.composer, LONG_PROMPT)
    _click(window.sendButton)
    assert window.composer.toPlainText() == ""
    qtbot.waitUntil(lambda: window.stopButton.isEnabled(), timeout=5000)
    assert not window.sendButton.isEnabled()

    # Tokens show up in the transcript while the reply is still running.
    qtbot.waitUntil(
        lambda: any(row.body.toPlainText().strip() for row in _rows(window, "assistant")),
        timeout=FIRST_TOKEN_TIMEOUT_MS,
    )
    streaming_from = time.monotonic()
    (reply,) = _rows(window, "assistant")
    assert reply.status == "streaming"
    assert [row.body.toPlainText() for row in _rows(window, "user")] == [LONG_PROMPT]
    _click(window.stopButton)

    qtbot.waitUntil(lambda: reply.status == "stopped", timeout=REPLY_TIMEOUT_MS)
    streaming_until = time.monotonic()
    ticker.stop()
    assert reply.badge.text() == "Stopped"
    partial = reply.text
    assert partial.strip()
    assert reply.body.toPlainText().strip()
    assert "TTFT" in reply.stats_label.text()
    assert window.statusStats.text().startswith("Last reply: TTFT")
    assert "tok/s" in window.statusStats.text()
    qtbot.waitUntil(lambda: window.sendButton.isEnabled() and not window.stopButton.isEnabled())
    gap = ticker.max_gap_between(streaming_from, streaming_until)
    assert gap < MAX_EVENT_LOOP_GAP_S, f"the event loop stalled for {gap:.3f} s while streaming"

    # The new conversation is in the sidebar, auto-titled from the prompt and selected.
    qtbot.waitUntil(lambda: len(_titles(window)) == 1)
    conversation_id = window.current_conversation_id
    assert conversation_id is not None
    title = _titles(window)[0]
    assert LONG_PROMPT.startswith(title.rstrip("…"))
    assert window.conversationList.currentItem() is not None

    first.close()
    second = gui.open(model_home)
    window = second.window
    assert _titles(window) == [title]
    _click_conversation(qtbot, window, title)
    qtbot.waitUntil(lambda: len(window.transcript.rows()) == 2)
    (user,) = _rows(window, "user")
    (reply,) = _rows(window, "assistant")
    assert user.text == LONG_PROMPT
    assert reply.text == partial
    assert reply.status == "stopped"
    assert reply.badge.text() == "Stopped"


@pytest.mark.model
def test_enter_sends_a_follow_up_into_the_same_conversation(
    qtbot: QtBot, gui: GuiSessions, model_home: HearthPaths
) -> None:
    save_settings(model_home.settings_path, Settings(max_tokens=24))
    window = gui.open(model_home).window

    for prompt in ("Say hello.", "Now say goodbye."):
        window.composer.setFocus()
        QTest.keyClicks(window.composer, prompt)
        QTest.keyClick(window.composer, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: window.stopButton.isEnabled(), timeout=5000)
        qtbot.waitUntil(lambda: not window.stopButton.isEnabled(), timeout=REPLY_TIMEOUT_MS)

    qtbot.waitUntil(lambda: len(_titles(window)) == 1)
    assert [row.text for row in _rows(window, "user")] == ["Say hello.", "Now say goodbye."]
    replies = _rows(window, "assistant")
    assert len(replies) == 2
    assert all(row.status in ("complete", "stopped") for row in replies), [r.status for r in replies]


@pytest.mark.model
def test_a_model_that_cannot_load_is_reported_and_the_prompt_kept(
    qtbot: QtBot, gui: GuiSessions, model_home: HearthPaths, starter_model: Path, tmp_path: Path
) -> None:
    # A copy with one extra byte: a different SHA-256, so the library keeps its own file for it.
    variant = tmp_path / "vanishing.gguf"
    variant.write_bytes(starter_model.read_bytes() + b"\0")
    session = gui.open(model_home)
    broken = Path(session.services.library.import_file(variant, name="vanishing-model").path)
    assert broken.is_relative_to(model_home.models_dir), "never delete a file the test does not own"
    broken.unlink()
    session.close()
    window = gui.open(model_home).window
    window.modelPicker.setCurrentIndex(window.modelPicker.findData("vanishing-model"))

    QTest.keyClicks(window.composer, "Are you there?")
    _click(window.sendButton)

    qtbot.waitUntil(lambda: "missing" in window.statusBar().currentMessage(), timeout=REPLY_TIMEOUT_MS)
    qtbot.waitUntil(lambda: window.sendButton.isEnabled())
    assert window.composer.toPlainText() == "Are you there?"


@pytest.mark.model
def test_switching_away_and_back_mid_reply_keeps_the_live_text(
    qtbot: QtBot, gui: GuiSessions, model_home: HearthPaths
) -> None:
    session = gui.open(model_home)
    window = session.window
    _seed_conversation(qtbot, session, "Other chat")
    _click(window.newChatButton)
    QTest.keyClicks(window.composer, LONG_PROMPT)
    _click(window.sendButton)
    qtbot.waitUntil(
        lambda: any(row.text for row in _rows(window, "assistant")), timeout=FIRST_TOKEN_TIMEOUT_MS
    )
    streaming_id = window.current_conversation_id
    assert streaming_id is not None
    qtbot.waitUntil(lambda: len(_titles(window)) == 2)
    title = window.conversationList.currentItem().text()

    _click_conversation(qtbot, window, "Other chat")
    qtbot.waitUntil(lambda: [row.text for row in _rows(window, "user")] == ["Where should we go?"])
    _click_conversation(qtbot, window, title)
    assert window.current_conversation_id == streaming_id
    qtbot.waitUntil(lambda: len(window.transcript.rows()) == 2)
    (reply,) = _rows(window, "assistant")
    seen = reply.text
    assert seen
    assert reply.status == "streaming"
    _click(window.stopButton)
    qtbot.waitUntil(lambda: reply.status == "stopped", timeout=REPLY_TIMEOUT_MS)

    assert reply.text.startswith(seen)
    (stored,) = [m for m in session.services.store.list_messages(streaming_id) if m.role == "assistant"]
    assert stored.content == reply.text
    assert [row.text for row in _rows(window, "user")] == [LONG_PROMPT]


def _seed_conversation(qtbot: QtBot, session: GuiSession, title: str) -> int:
    # Test set-up, not GUI code: writing through the store directly is fine here.
    store = session.services.store
    conversation = store.create_conversation(title)
    store.add_message(conversation.id, "user", "Where should we go?")
    store.add_message(conversation.id, "assistant", "Somewhere **warm**.")
    session.window.refresh_conversations()
    qtbot.waitUntil(lambda: title in _titles(session.window))
    return conversation.id


def test_rename_and_delete_through_the_sidebar(qtbot: QtBot, gui: GuiSessions, home: HearthPaths) -> None:
    session = gui.open(home)
    window, answers = session.window, session.answers
    keep_id = _seed_conversation(qtbot, session, "Keep me")
    trip_id = _seed_conversation(qtbot, session, "Trip plans")
    assert not window.renameButton.isEnabled()

    _click_conversation(qtbot, window, "Trip plans")
    qtbot.waitUntil(lambda: len(window.transcript.rows()) == 2)
    assert window.current_conversation_id == trip_id
    assert _rows(window, "assistant")[0].body.toPlainText() == "Somewhere warm."

    answers.text = "  Summer trip  "
    _click(window.renameButton)
    assert answers.prompts == ["Trip plans"]
    qtbot.waitUntil(lambda: "Summer trip" in _titles(window))
    assert session.services.store.get_conversation(trip_id).title == "Summer trip"
    assert window.conversationList.currentItem().text() == "Summer trip"

    answers.text = None  # the user cancels the rename
    _click(window.renameButton)
    qtbot.wait(200)
    assert "Summer trip" in _titles(window)

    answers.confirm = False
    _click(window.deleteButton)
    assert answers.confirmations == ["Delete “Summer trip” and all its messages? This cannot be undone."]
    qtbot.wait(200)
    assert sorted(_titles(window)) == ["Keep me", "Summer trip"]

    answers.confirm = True
    _click(window.deleteButton)
    qtbot.waitUntil(lambda: _titles(window) == ["Keep me"])
    assert [c.id for c in session.services.store.list_conversations()] == [keep_id]
    assert window.current_conversation_id is None
    assert window.transcript.rows() == []


def test_new_chat_clears_the_view(qtbot: QtBot, gui: GuiSessions, home: HearthPaths) -> None:
    session = gui.open(home)
    window = session.window
    _seed_conversation(qtbot, session, "Old chat")
    _click_conversation(qtbot, window, "Old chat")
    qtbot.waitUntil(lambda: len(window.transcript.rows()) == 2)

    _click(window.newChatButton)

    assert window.current_conversation_id is None
    assert window.transcript.rows() == []
    assert window.conversationList.currentItem() is None
    assert not window.deleteButton.isEnabled()


def test_smoke_test_entry_point(home: HearthPaths, qapp: QApplication) -> None:
    style = qapp.styleSheet()
    try:
        assert run_gui(home, smoke_test=True) == 0
    finally:
        qapp.setStyleSheet(style)
    assert qapp.applicationName() == "Hearth"
    assert not qapp.windowIcon().isNull()
