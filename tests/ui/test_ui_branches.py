"""Regenerate, edit, flip between versions, delete, and the context budget, with the real starter model."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from app.settings import Settings, save_settings
from tests.helpers.ui_fixtures import GuiSession, GuiSessions, click, click_message_action, rows
from ui.main_window import MainWindow

pytestmark = [pytest.mark.gui, pytest.mark.model]

REPLY_TIMEOUT_MS = 180_000


@pytest.fixture
def model_home(hermetic_home: Path, starter_model: Path) -> HearthPaths:
    home = HearthPaths(hermetic_home)
    save_settings(home.settings_path, Settings(max_tokens=12, temperature=0.0))
    return home


def _idle(qtbot: QtBot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: window.stopButton.isEnabled(), timeout=10_000)
    qtbot.waitUntil(
        lambda: window.sendButton.isEnabled() and not window.stopButton.isEnabled(), timeout=REPLY_TIMEOUT_MS
    )


def _shown(window: MainWindow) -> list[tuple[str, str, str]]:
    return [(row.role, row.text, row.sibling_text) for row in rows(window)]


def _settled(qtbot: QtBot, window: MainWindow, expected: list[tuple[str, str]]) -> None:
    """Wait until the transcript shows these (role, sibling label) rows and the store agrees."""
    qtbot.waitUntil(lambda: [(r, s) for r, _t, s in _shown(window)] == expected, timeout=5000)
    qtbot.waitUntil(lambda: {m.id for m in window.current_messages()} == {r.message_id for r in rows(window)})


def test_regenerate_edit_and_flip_between_versions(
    qtbot: QtBot, gui: GuiSessions, model_home: HearthPaths
) -> None:
    session = gui.open(model_home)
    window, store = session.window, session.services.store

    QTest.keyClicks(window.composer, "Name a fruit.")
    QTest.keyClick(window.composer, Qt.Key.Key_Return)
    _idle(qtbot, window)
    _settled(qtbot, window, [("user", ""), ("assistant", "")])
    first_reply = rows(window, "assistant")[0].message_id
    conversation_id = window.current_conversation_id
    assert conversation_id is not None

    # Regenerate: a second answer, the first kept as an alternative.
    click_message_action(window, first_reply, "regenerate")
    _idle(qtbot, window)
    _settled(qtbot, window, [("user", ""), ("assistant", "2/2")])
    second_reply = rows(window, "assistant")[0].message_id
    assert second_reply != first_reply

    click_message_action(window, second_reply, "previous")
    qtbot.waitUntil(lambda: rows(window, "assistant")[0].message_id == first_reply, timeout=5000)
    assert rows(window, "assistant")[0].sibling_text == "1/2"
    assert [m.id for m in store.list_messages(conversation_id)][-1] == first_reply
    click_message_action(window, first_reply, "next")
    qtbot.waitUntil(lambda: rows(window, "assistant")[0].message_id == second_reply, timeout=5000)

    # Edit the prompt: a new branch; the old prompt and its replies stay one click away.
    question = rows(window, "user")[0].message_id
    click_message_action(window, question, "edit")
    assert window.editBanner.isVisible()
    assert window.composer.toPlainText() == "Name a fruit."
    window.composer.selectAll()
    QTest.keyClicks(window.composer, "Name a vegetable.")
    QTest.keyClick(window.composer, Qt.Key.Key_Return)
    assert not window.editBanner.isVisible()
    _idle(qtbot, window)
    _settled(qtbot, window, [("user", "2/2"), ("assistant", "")])
    assert rows(window, "user")[0].text == "Name a vegetable."
    edited = rows(window, "user")[0].message_id

    click_message_action(window, edited, "previous")
    qtbot.waitUntil(
        lambda: [row.message_id for row in rows(window)] == [question, second_reply], timeout=5000
    )
    assert _shown(window)[0][1:] == ("Name a fruit.", "1/2")
    assert _shown(window)[1][2] == "2/2"

    # Delete the shown reply: it asks first, and the other version takes its place.
    session.answers.confirm = False
    click_message_action(window, second_reply, "delete")
    assert len(session.answers.confirmations) == 1
    assert second_reply in [row.message_id for row in rows(window)]
    session.answers.confirm = True
    click_message_action(window, second_reply, "delete")
    qtbot.waitUntil(lambda: [row.message_id for row in rows(window)] == [question, first_reply], timeout=5000)
    assert second_reply not in {m.id for m in store.list_all_messages(conversation_id)}


def test_cancelling_an_edit_restores_the_composer(
    qtbot: QtBot, gui: GuiSessions, model_home: HearthPaths
) -> None:
    session: GuiSession = gui.open(model_home)
    window = session.window
    QTest.keyClicks(window.composer, "Hello there.")
    QTest.keyClick(window.composer, Qt.Key.Key_Return)
    _idle(qtbot, window)
    question = rows(window, "user")[0].message_id
    qtbot.waitUntil(lambda: question in {m.id for m in window.current_messages()})

    click_message_action(window, question, "edit")
    assert window.editing_message_id == question
    QTest.keyClick(window.composer, Qt.Key.Key_Escape)
    assert window.editing_message_id is None
    assert not window.editBanner.isVisible()
    assert window.composer.toPlainText() == ""


def _long_history(session: GuiSession, turns: int) -> int:
    store = session.services.store
    conversation = store.create_conversation("Long talk")
    for i in range(turns):
        store.add_message(conversation.id, "user", f"Question {i}: " + "tell me about lighthouses " * 12)
        store.add_message(conversation.id, "assistant", f"Answer {i}: " + "lighthouses guide ships " * 12)
    session.window.refresh_conversations()
    return conversation.id


def test_the_context_meter_and_a_policy_that_leaves_turns_out(
    qtbot: QtBot, gui: GuiSessions, model_home: HearthPaths
) -> None:
    save_settings(model_home.settings_path, Settings(max_tokens=8, temperature=0.0, context_length=512))
    session = gui.open(model_home)
    window, store = session.window, session.services.store
    conversation_id = _long_history(session, 8)
    window.open_conversation(conversation_id)
    meter = window.contextMeter

    qtbot.waitUntil(lambda: meter.usage is not None and meter.usage.would_drop_messages > 0, timeout=60_000)
    assert meter.level == "full"
    assert "/ 512 tokens" in meter.tokens.text()
    assert "oldest message(s) will be left out" in meter.warning.text()
    assert meter.policy.text().startswith("When full: leave out the oldest turns")

    QTest.keyClicks(window.composer, "And one more thing?")
    click(window.sendButton)
    _idle(qtbot, window)
    reply = rows(window, "assistant")[-1]
    assert reply.note_text.startswith("Context: ")
    assert "left out to fit the 512-token context" in reply.note_text
    stored = store.get_message(reply.message_id)
    assert stored.context_note is not None and stored.context_note in reply.note_text

    # Refuse instead: nothing is cut and nothing is sent; the prompt comes back to the composer.
    window.settingsButton.setChecked(True)
    combo = window.settingsPanel.overflowPolicy
    combo.setCurrentIndex(combo.findData("refuse"))
    combo.activated.emit(combo.currentIndex())
    assert session.services.settings.overflow_policy == "refuse"
    qtbot.waitUntil(lambda: meter.policy.text() == "When full: refuse to send")
    before = len(store.list_all_messages(conversation_id))
    QTest.keyClicks(window.composer, "Still there?")
    click(window.sendButton)
    qtbot.waitUntil(lambda: window.composer.toPlainText() == "Still there?", timeout=60_000)
    assert "context" in window.statusBar().currentMessage().lower()
    assert len(store.list_all_messages(conversation_id)) == before
    qtbot.waitUntil(lambda: meter.warning.text().startswith("Too long"), timeout=60_000)
