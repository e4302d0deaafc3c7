"""The context meter with files in the tray before Send, and editing a prompt that has files, with the real
starter model and its tokenizer."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from app.settings import Settings, save_settings
from tests.helpers.ui_fixtures import GuiSessions, click, click_message_action, rows
from ui.main_window import MainWindow

pytestmark = [pytest.mark.gui, pytest.mark.model]

REPLY_TIMEOUT_MS = 180_000
MEASURE_TIMEOUT_MS = 60_000
READ_TIMEOUT_MS = 30_000
QUESTION = "What is the keeper's name?"


@pytest.fixture
def home(hermetic_home: Path, starter_model: Path) -> HearthPaths:
    home = HearthPaths(hermetic_home)
    save_settings(home.settings_path, Settings(max_tokens=8, temperature=0.0))
    return home


def _note(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _lighthouse(tmp_path: Path) -> Path:
    return _note(
        tmp_path, "lighthouse.txt", "The lighthouse keeper's name is Maren. She rings the bell at dusk.\n"
    )


def _attach(qtbot: QtBot, window: MainWindow, *paths: Path) -> None:
    tray = window.chatArea.attachments
    tray.attach_paths(list(paths))
    qtbot.waitUntil(lambda: not tray.reading, timeout=READ_TIMEOUT_MS)


def _chips(window: MainWindow) -> list[str]:
    return [chip.attachment.name for chip in window.chatArea.attachments.chips]


def _idle(qtbot: QtBot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: window.stopButton.isEnabled(), timeout=10_000)
    qtbot.waitUntil(
        lambda: window.sendButton.isEnabled() and not window.stopButton.isEnabled(), timeout=REPLY_TIMEOUT_MS
    )


def test_a_file_in_the_tray_is_on_the_meter_before_send_as_the_turn_then_uses_it(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, tmp_path: Path
) -> None:
    session = gui.open(home)
    window = session.window
    meter = window.contextMeter
    QTest.keyClicks(window.composer, QUESTION)
    qtbot.waitUntil(lambda: meter.usage is not None, timeout=MEASURE_TIMEOUT_MS)
    assert meter.usage is not None and meter.usage.document_tokens == 0
    assert not meter.documents.isVisible()

    _attach(qtbot, window, _lighthouse(tmp_path))
    qtbot.waitUntil(
        lambda: meter.usage is not None and meter.usage.document_tokens > 0, timeout=MEASURE_TIMEOUT_MS
    )
    usage = meter.usage
    assert usage is not None and usage.searched == ()
    assert meter.documents.text() == f"Documents: {usage.document_tokens:,} tokens"
    assert meter.tokens.text() == f"{usage.used_tokens:,} / {usage.context_tokens:,} tokens"
    assert f"Documents take {usage.document_tokens:,} of these tokens." in meter.tokens.toolTip()

    click(window.sendButton)
    _idle(qtbot, window)
    conversation_id = window.current_conversation_id
    assert conversation_id is not None
    (_prompt, reply) = session.services.store.list_messages(conversation_id)
    assert reply.status == "complete" and reply.prompt_tokens == usage.used_tokens


def test_a_file_too_long_to_go_whole_shows_as_searched(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, tmp_path: Path
) -> None:
    save_settings(home.settings_path, Settings(max_tokens=8, temperature=0.0, context_length=1024))
    window = gui.open(home).window
    meter = window.contextMeter
    filler = "The harbour master logs every ship that enters, with its cargo and its crew. " * 6
    report = _note(tmp_path, "harbour.txt", "\n\n".join(f"Section {n}. {filler}" for n in range(24)))
    QTest.keyClicks(window.composer, "Who logs the ships?")
    _attach(qtbot, window, report, _lighthouse(tmp_path))

    qtbot.waitUntil(
        lambda: meter.usage is not None and bool(meter.usage.searched), timeout=MEASURE_TIMEOUT_MS
    )
    usage = meter.usage
    assert usage is not None and usage.searched == ("harbour.txt",)
    assert meter.documents.isVisible()
    assert (
        meter.documents.text()
        == f"Documents: up to {usage.document_tokens:,} tokens · 1 file(s) searched, not sent whole"
    )
    tooltip = meter.documents.toolTip()
    assert "Too long to send whole, so searched when you send: harbour.txt." in tooltip
    assert f"up to {usage.passage_tokens:,} tokens" in tooltip
    # The passages fill what the context leaves, by design: the bar is full, but nothing is wrong.
    assert meter.bar.fraction > 0.9 and usage.fits
    assert meter.level == "ok" and not meter.warning.isVisible()


def test_editing_a_prompt_keeps_its_files_and_lets_the_user_change_them(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, tmp_path: Path
) -> None:
    session = gui.open(home)
    window, store = session.window, session.services.store
    _attach(qtbot, window, _lighthouse(tmp_path))
    QTest.keyClicks(window.composer, QUESTION)
    click(window.sendButton)
    _idle(qtbot, window)
    question = rows(window, "user")[0].message_id
    qtbot.waitUntil(lambda: question in {m.id for m in window.current_messages()})

    # A file attached for the next message waits while the edited one's are shown.
    packing = _note(tmp_path, "packing.md", "# Packing\n\nRope, lantern, a warm coat.\n")
    _attach(qtbot, window, packing)
    click_message_action(window, question, "edit")
    assert window.editBanner.isVisible() and window.composer.toPlainText() == QUESTION
    assert _chips(window) == ["lighthouse.txt"]
    QTest.keyClick(window.composer, Qt.Key.Key_Escape)
    assert _chips(window) == ["packing.md"]

    click_message_action(window, question, "edit")
    assert _chips(window) == ["lighthouse.txt"]
    tide = _note(tmp_path, "tide.txt", "High tide is at 06:40 and 19:05 today.\n")
    _attach(qtbot, window, tide)
    QTest.mouseClick(window.chatArea.attachments.chips[0].removeButton, Qt.MouseButton.LeftButton)
    assert _chips(window) == ["tide.txt"]
    window.composer.selectAll()
    QTest.keyClicks(window.composer, "When is high tide?")
    QTest.keyClick(window.composer, Qt.Key.Key_Return)
    assert _chips(window) == ["packing.md"]
    _idle(qtbot, window)

    conversation_id = window.current_conversation_id
    assert conversation_id is not None
    qtbot.waitUntil(lambda: rows(window, "user")[0].message_id != question, timeout=5000)
    edited = store.get_message(rows(window, "user")[0].message_id)
    assert edited.content == "When is high tide?" and edited.sibling_count == 2
    assert [(p.name, p.meta["mode"]) for p in edited.attachments] == [("tide.txt", "whole")]
    assert [f.name for f in rows(window, "user")[0].entry.files] == ["tide.txt"]
    # The first version keeps its own file.
    assert [p.name for p in store.get_message(question).attachments] == ["lighthouse.txt"]
