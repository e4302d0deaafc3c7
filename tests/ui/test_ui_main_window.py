"""The real window over the real services and the real starter model, driven like a user."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from app.settings import Settings, save_settings
from tests.helpers.ui_fixtures import (
    GuiSessions,
    Ticker,
    click,
    click_conversation,
    click_message_action,
    rows,
    seed_conversation,
    titles,
)
from ui.main import run_gui
from ui.main_window import MainWindow
from ui.provenance import ProvenanceDialog

pytestmark = pytest.mark.gui

# The starter model runs on the CPU of a busy CI machine: loading and the first token can be slow.
FIRST_TOKEN_TIMEOUT_MS = 120_000
REPLY_TIMEOUT_MS = 180_000
# The longest the GUI thread may go without running a 10 ms timer while a reply streams.
MAX_EVENT_LOOP_GAP_S = 0.5
LONG_PROMPT = "Write a long story about a lighthouse keeper and a storm. Use at least 600 words."


@pytest.fixture
def home(hermetic_home: Path) -> HearthPaths:
    return HearthPaths(hermetic_home)


@pytest.fixture
def model_home(home: HearthPaths, starter_model: Path) -> HearthPaths:
    """A home where start-up registers the starter model (it ships as a Python package)."""
    return home


@pytest.fixture
def short_replies(model_home: HearthPaths) -> HearthPaths:
    save_settings(model_home.settings_path, Settings(max_tokens=16, temperature=0.0))
    return model_home


def _wait_idle(qtbot: QtBot, window: MainWindow) -> None:
    qtbot.waitUntil(
        lambda: window.sendButton.isEnabled() and not window.stopButton.isEnabled(), timeout=REPLY_TIMEOUT_MS
    )


def _status(window: MainWindow, message_id: int) -> str:
    row = window.transcript.row(message_id)
    return row.status if row is not None else "gone"


@pytest.mark.model
def test_stream_stop_and_find_it_again_after_a_restart(
    qtbot: QtBot, gui: GuiSessions, model_home: HearthPaths
) -> None:
    first = gui.open(model_home)
    window = first.window
    assert window.modelPicker.count() >= 1
    assert window.statusBackend.text().startswith(("CPU", "CUDA", "GPU", "Loading"))

    ticker = Ticker()
    QTest.keyClicks(window.composer, LONG_PROMPT)
    click(window.sendButton)
    assert window.composer.toPlainText() == ""
    qtbot.waitUntil(lambda: window.stopButton.isEnabled(), timeout=5000)
    assert not window.sendButton.isEnabled()

    # Tokens show up in the transcript while the reply is still running.
    qtbot.waitUntil(
        lambda: any(row.rendered_text().strip() for row in rows(window, "assistant")),
        timeout=FIRST_TOKEN_TIMEOUT_MS,
    )
    streaming_from = time.monotonic()
    (reply,) = rows(window, "assistant")
    assert reply.status == "streaming"
    assert reply.badge_text == "Writing…"
    assert [row.text for row in rows(window, "user")] == [LONG_PROMPT]
    # Esc stops, wherever the focus is.
    window.composer.setFocus()
    QTest.keyClick(window.composer, Qt.Key.Key_Escape)

    reply_id = reply.message_id
    qtbot.waitUntil(lambda: _status(window, reply_id) == "stopped", timeout=REPLY_TIMEOUT_MS)
    streaming_until = time.monotonic()
    ticker.stop()
    (reply,) = rows(window, "assistant")
    assert reply.badge_text == "Stopped"
    partial = reply.text
    assert partial.strip()
    assert "TTFT" in reply.stats_text and "tok/s" in reply.stats_text and "tokens out" in reply.stats_text
    assert window.statusStats.text().startswith("Last reply: TTFT")
    # Which of llama.cpp's CPU kernels answered, and why: in the backend label's tooltip.
    assert (
        "CPU kernels: " in window.statusBackend.toolTip()
        and "best for this CPU" in window.statusBackend.toolTip()
    )
    _wait_idle(qtbot, window)
    gap = ticker.max_gap_between(streaming_from, streaming_until)
    assert gap < MAX_EVENT_LOOP_GAP_S, f"the event loop stalled for {gap:.3f} s while streaming"

    # The new conversation is in the sidebar, auto-titled from the prompt and selected.
    qtbot.waitUntil(lambda: len(titles(window)) == 1)
    conversation_id = window.current_conversation_id
    assert conversation_id is not None
    title = titles(window)[0]
    assert LONG_PROMPT.startswith(title.rstrip("…"))
    assert window.conversationList.currentItem() is not None

    first.close()
    second = gui.open(model_home)
    window = second.window
    assert titles(window) == [title]
    click_conversation(qtbot, window, title)
    qtbot.waitUntil(lambda: len(window.transcript.rows()) == 2)
    (user,) = rows(window, "user")
    (reply,) = rows(window, "assistant")
    assert user.text == LONG_PROMPT
    assert reply.text == partial
    assert reply.status == "stopped"
    assert reply.badge_text == "Stopped"


@pytest.mark.model
def test_enter_sends_a_follow_up_and_replies_show_provenance(
    qtbot: QtBot, gui: GuiSessions, short_replies: HearthPaths
) -> None:
    window = gui.open(short_replies).window

    for prompt in ("Say hello.", "Now say goodbye."):
        window.composer.setFocus()
        QTest.keyClicks(window.composer, prompt)
        QTest.keyClick(window.composer, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: window.stopButton.isEnabled(), timeout=5000)
        _wait_idle(qtbot, window)

    qtbot.waitUntil(lambda: len(titles(window)) == 1)
    assert [row.text for row in rows(window, "user")] == ["Say hello.", "Now say goodbye."]
    replies = rows(window, "assistant")
    assert len(replies) == 2
    assert all(row.status in ("complete", "stopped") for row in replies), [r.status for r in replies]
    assert all("tokens in" in row.stats_text for row in replies)

    # Info shows what produced the reply: enough to reproduce it.
    last = replies[-1].message_id
    qtbot.waitUntil(lambda: last in {m.id for m in window.current_messages()})
    click_message_action(window, last, "info")
    qtbot.waitUntil(lambda: window.findChild(ProvenanceDialog) is not None)
    dialog = window.findChild(ProvenanceDialog)
    assert isinstance(dialog, ProvenanceDialog)
    shown = dict(dialog.rows)
    assert shown["Model"] == window.modelPicker.currentText()
    assert shown["Model file"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert shown["Quantization"] == "Q4_1"
    assert shown["SHA-256"].endswith("…") and len(shown["SHA-256"]) == 13
    assert shown["Chat template"] == "from the model file (GGUF)"
    assert "temperature = 0.0" in shown["Sampling"] and "max_tokens = 16" in shown["Sampling"]
    assert shown["Seed"].isdigit()
    dialog.copy()
    copied = QApplication.clipboard().text()
    assert "SHA-256: " in copied and "…" not in copied.split("SHA-256: ")[1].splitlines()[0]
    dialog.close()


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
    click(window.sendButton)

    qtbot.waitUntil(lambda: "missing" in window.statusBar().currentMessage(), timeout=REPLY_TIMEOUT_MS)
    qtbot.waitUntil(lambda: window.sendButton.isEnabled())
    assert window.composer.toPlainText() == "Are you there?"


@pytest.mark.model
def test_switching_away_and_back_mid_reply_keeps_the_live_text(
    qtbot: QtBot, gui: GuiSessions, model_home: HearthPaths
) -> None:
    session = gui.open(model_home)
    window = session.window
    seed_conversation(qtbot, session, "Other chat")
    click(window.newChatButton)
    QTest.keyClicks(window.composer, LONG_PROMPT)
    click(window.sendButton)
    qtbot.waitUntil(
        lambda: any(row.text for row in rows(window, "assistant")), timeout=FIRST_TOKEN_TIMEOUT_MS
    )
    streaming_id = window.current_conversation_id
    assert streaming_id is not None
    qtbot.waitUntil(lambda: len(titles(window)) == 2)
    title = window.conversationList.currentItem().text()

    click_conversation(qtbot, window, "Other chat")
    qtbot.waitUntil(lambda: [row.text for row in rows(window, "user")] == ["Where should we go?"])
    click_conversation(qtbot, window, title)
    assert window.current_conversation_id == streaming_id
    qtbot.waitUntil(lambda: len(window.transcript.rows()) == 2)
    (reply,) = rows(window, "assistant")
    seen = reply.text
    assert seen
    assert reply.status == "streaming"
    click(window.stopButton)
    qtbot.waitUntil(lambda: rows(window, "assistant")[0].status == "stopped", timeout=REPLY_TIMEOUT_MS)

    (reply,) = rows(window, "assistant")
    assert reply.text.startswith(seen)
    (stored,) = [m for m in session.services.store.list_messages(streaming_id) if m.role == "assistant"]
    assert stored.content == reply.text
    assert [row.text for row in rows(window, "user")] == [LONG_PROMPT]


def test_smoke_test_entry_point(home: HearthPaths, qapp: QApplication) -> None:
    assert run_gui(home, smoke_test=True) == 0
    assert qapp.applicationName() == "Hearth"
    assert not qapp.windowIcon().isNull()
