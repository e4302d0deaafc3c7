"""The conversation list, search, export/import and the keyboard, driven through the real window."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.errors import ConversationNotFound
from app.paths import HearthPaths
from tests.helpers.ui_fixtures import (
    GuiSession,
    GuiSessions,
    click,
    click_conversation,
    click_message_action,
    rows,
    seed_conversation,
    titles,
)
from ui.search_panel import snippet_html
from ui.sidebar import PINNED_ROLE

pytestmark = pytest.mark.gui


@pytest.fixture
def home(hermetic_home: Path) -> HearthPaths:
    return HearthPaths(hermetic_home)


@pytest.fixture
def session(gui: GuiSessions, home: HearthPaths) -> GuiSession:
    # No model loading: these tests are about conversations, not replies.
    return gui.open(home, preload_model=False)


def _branched(session: GuiSession, title: str) -> tuple[int, int, int]:
    """A conversation whose first reply has an older alternative: (conversation, old reply, new reply)."""
    store = session.services.store
    conversation = store.create_conversation(title)
    question = store.add_message(conversation.id, "user", "Name a colour for a kitchen.")
    old = store.add_message(
        conversation.id, "assistant", "Terracotta, like warm clay.", parent_id=question.id
    )
    new = store.add_message(
        conversation.id, "assistant", "Sage green, calm and fresh.", parent_id=question.id
    )
    return conversation.id, old.id, new.id


def test_rename_pin_and_delete_with_undo(qtbot: QtBot, session: GuiSession) -> None:
    window, answers, store = session.window, session.answers, session.services.store
    keep_id = seed_conversation(qtbot, session, "Keep me")
    trip_id = seed_conversation(qtbot, session, "Trip plans")
    assert not window.renameButton.isEnabled()

    click_conversation(qtbot, window, "Trip plans")
    qtbot.waitUntil(lambda: len(window.transcript.rows()) == 2)
    assert window.current_conversation_id == trip_id
    assert rows(window, "assistant")[0].rendered_text() == "Somewhere warm."

    answers.text = "  Summer trip  "
    click(window.renameButton)
    assert answers.prompts == ["Trip plans"]
    qtbot.waitUntil(lambda: "Summer trip" in titles(window))
    assert store.get_conversation(trip_id).title == "Summer trip"

    answers.text = None  # the user cancels the rename
    click(window.renameButton)
    qtbot.wait(100)
    assert "Summer trip" in titles(window)

    # Pinned chats come first and show it.
    click_conversation(qtbot, window, "Keep me")
    assert window.pinButton.text() == "Pin"
    click(window.pinButton)
    qtbot.waitUntil(lambda: titles(window) == ["Keep me", "Summer trip"])
    assert window.conversationList.item(0).data(PINNED_ROLE) is True
    assert not window.conversationList.item(0).icon().isNull()
    assert window.pinButton.text() == "Unpin"

    # Delete asks nothing: it can be undone.
    click_conversation(qtbot, window, "Summer trip")
    click(window.deleteButton)
    qtbot.waitUntil(lambda: titles(window) == ["Keep me"])
    assert answers.confirmations == []
    assert window.undoBar.isVisible()
    assert "Summer trip" in window.undoBar.label.text()
    assert window.current_conversation_id is None
    assert window.transcript.rows() == []
    click(window.undoBar.undoButton)
    qtbot.waitUntil(lambda: sorted(titles(window)) == ["Keep me", "Summer trip"])
    assert window.current_conversation_id == trip_id
    assert not window.undoBar.isVisible()

    # Left alone, the delete becomes final when the bar expires.
    window.undoBar.timeout_ms = 150
    click(window.deleteButton)
    qtbot.waitUntil(lambda: titles(window) == ["Keep me"])
    qtbot.waitUntil(lambda: not window.undoBar.isVisible(), timeout=3000)
    qtbot.waitUntil(lambda: not store.list_trashed(), timeout=3000)
    with pytest.raises(ConversationNotFound):
        store.get_conversation(trip_id)
    assert [c.id for c in store.list_conversations()] == [keep_id]


def test_a_delete_still_undoable_at_exit_is_final(qtbot: QtBot, gui: GuiSessions, home: HearthPaths) -> None:
    first = gui.open(home, preload_model=False)
    seed_conversation(qtbot, first, "Scratch")
    click_conversation(qtbot, first.window, "Scratch")
    click(first.window.deleteButton)
    qtbot.waitUntil(lambda: first.window.undoBar.isVisible())
    first.close()

    second = gui.open(home, preload_model=False)
    assert titles(second.window) == []
    assert second.services.store.list_trashed() == []


def test_search_jumps_to_a_message_on_another_branch(qtbot: QtBot, session: GuiSession) -> None:
    window = session.window
    seed_conversation(qtbot, session, "Unrelated", ("Hello", "Hi there"))
    conversation_id, old_id, new_id = _branched(session, "Kitchen")
    window.refresh_conversations()
    qtbot.waitUntil(lambda: "Kitchen" in titles(window))

    window.activateWindow()
    QTest.keyClick(window, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    assert window.searchPanel.isVisible()
    assert not window.conversationList.isVisible()
    qtbot.waitUntil(lambda: window.searchPanel.query.hasFocus())
    QTest.keyClicks(window.searchPanel.query, "terracotta")
    qtbot.waitUntil(lambda: len(window.searchPanel.hits) == 1, timeout=3000)
    (hit,) = window.searchPanel.hits
    assert (hit.conversation_id, hit.message_id) == (conversation_id, old_id)
    assert window.searchPanel.status.text() == "1 result(s)"
    highlighted = snippet_html(hit.snippet, "#ff0")
    assert '<span style="background-color:#ff0; font-weight:600;">Terracotta</span>' in highlighted

    QTest.keyClick(window.searchPanel.query, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.current_conversation_id == conversation_id)
    qtbot.waitUntil(lambda: old_id in [row.message_id for row in window.transcript.rows()], timeout=3000)
    assert new_id not in [row.message_id for row in window.transcript.rows()]
    assert old_id in window.transcript.visible_message_ids()
    old = window.transcript.row(old_id)
    assert old is not None and old.sibling_text == "1/2"
    assert window.conversationList.currentItem().text() == "Kitchen"
    # The switch is remembered: the store now shows the branch the hit was on.
    assert [m.id for m in session.services.store.list_messages(conversation_id)][-1] == old_id

    QTest.keyClick(window, Qt.Key.Key_Escape)
    assert not window.searchPanel.isVisible()
    assert window.conversationList.isVisible()


def test_hostile_snippets_are_escaped() -> None:
    assert snippet_html("<img src=x>\x02hit\x03\x03 & <b>", "#ff0") == (
        '&lt;img src=x&gt;<span style="background-color:#ff0; font-weight:600;">hit</span> &amp; &lt;b&gt;'
    )


def test_export_then_import_round_trips_the_whole_tree(
    qtbot: QtBot, session: GuiSession, tmp_path: Path
) -> None:
    window, answers, store = session.window, session.answers, session.services.store
    conversation_id, _old, _new = _branched(session, "Kitchen")
    window.refresh_conversations()
    qtbot.waitUntil(lambda: "Kitchen" in titles(window))
    click_conversation(qtbot, window, "Kitchen")

    answers.save_path = tmp_path / "kitchen.json"
    window.exportJsonAction.trigger()
    qtbot.waitUntil(answers.save_path.exists, timeout=3000)
    assert answers.file_dialogs[-1].endswith("Kitchen.json")
    exported = json.loads(answers.save_path.read_text(encoding="utf-8"))
    assert len(exported["messages"]) == 3

    answers.save_path = tmp_path / "kitchen.md"
    window.exportMarkdownAction.trigger()
    qtbot.waitUntil(answers.save_path.exists, timeout=3000)
    assert "Sage green" in answers.save_path.read_text(encoding="utf-8")

    answers.folder = tmp_path / "all"
    answers.folder.mkdir()
    window.exportAllMarkdownAction.trigger()
    qtbot.waitUntil(lambda: len(list((tmp_path / "all").glob("*.md"))) == 1, timeout=3000)

    answers.open_path = tmp_path / "kitchen.json"
    window.importAction.trigger()
    qtbot.waitUntil(lambda: titles(window).count("Kitchen") == 2, timeout=3000)
    qtbot.waitUntil(lambda: "Imported 1 chat(s)" in window.statusBar().currentMessage())
    imported_id = window.current_conversation_id
    assert imported_id is not None and imported_id != conversation_id
    original = store.list_all_messages(conversation_id)
    copy = store.list_all_messages(imported_id)
    assert [(m.role, m.content, m.sibling_index) for m in copy] == [
        (m.role, m.content, m.sibling_index) for m in original
    ]
    qtbot.waitUntil(lambda: [row.text for row in rows(window)][-1:] == ["Sage green, calm and fresh."])


CHATGPT_SAMPLE = Path(__file__).parents[1] / "data" / "chatgpt_conversations.json"


def test_a_chatgpt_export_imports_with_its_branches(qtbot: QtBot, session: GuiSession) -> None:
    window, answers = session.window, session.answers
    answers.open_path = CHATGPT_SAMPLE
    window.importAction.trigger()
    qtbot.waitUntil(lambda: len(titles(window)) == 3, timeout=5000)
    assert "Sourdough starter smells like acetone" in titles(window)
    assert window.statusBar().currentMessage() == (
        "Imported 3 chat(s) from the ChatGPT export · 7 message(s) left out (system, tool or empty)"
    )
    # The first imported chat opens, on the branch ChatGPT was showing.
    qtbot.waitUntil(lambda: len(rows(window)) == 4, timeout=5000)
    assert [(row.role, row.sibling_text) for row in rows(window)] == [
        ("user", ""),
        ("assistant", "2/2"),
        ("user", "2/2"),
        ("assistant", ""),
    ]
    edited = rows(window)[2]
    assert window.conversationList.currentItem().text() == "Sourdough starter smells like acetone"
    click_message_action(window, edited.message_id, "previous")
    qtbot.waitUntil(lambda: rows(window)[2].text == "How often should I feed it? 🍞", timeout=5000)
    assert rows(window)[3].text.startswith("Twice a day at room temperature. 一日两次")


def test_a_malformed_import_is_refused_and_nothing_is_added(
    qtbot: QtBot, session: GuiSession, tmp_path: Path
) -> None:
    window, answers = session.window, session.answers
    bad = tmp_path / "conversations.json"
    bad.write_text('[{"title": "half", "mapping": {"a": {"message": 5}}}]', encoding="utf-8")
    answers.open_path = bad
    window.importAction.trigger()
    qtbot.waitUntil(lambda: "Nothing was imported" in window.statusBar().currentMessage(), timeout=3000)
    assert titles(window) == []
    assert session.services.store.list_conversations() == []


def test_keyboard_new_chat_search_and_settings(qtbot: QtBot, session: GuiSession) -> None:
    window = session.window
    seed_conversation(qtbot, session, "Old chat")
    click_conversation(qtbot, window, "Old chat")
    qtbot.waitUntil(lambda: len(window.transcript.rows()) == 2)
    window.activateWindow()

    QTest.keyClick(window, Qt.Key.Key_N, Qt.KeyboardModifier.ControlModifier)
    assert window.current_conversation_id is None
    assert window.transcript.rows() == []
    assert window.conversationList.currentItem() is None
    assert not window.deleteButton.isEnabled()
    assert window.composer.hasFocus()

    QTest.keyClick(window, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    assert window.settingsPanel.isVisible()
    QTest.keyClick(window, Qt.Key.Key_Comma, Qt.KeyboardModifier.ControlModifier)
    assert not window.settingsPanel.isVisible()

    # Shift+Enter is a new line, Enter would send (there is no model here, so it says so).
    window.composer.setFocus()
    QTest.keyClicks(window.composer, "line one")
    QTest.keyClick(window.composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
    QTest.keyClicks(window.composer, "line two")
    assert window.composer.toPlainText() == "line one\nline two"
