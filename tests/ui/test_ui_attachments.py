"""Attachments in the window: chips above the composer, files read off the GUI thread, a bad file's error,
sending them with a message (the real starter model), and a reply's Sources block and passage dialog."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, Qt, QUrl
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from app.settings import Settings, save_settings
from tests.helpers.document_files import pdf_bytes, write
from tests.helpers.ui_fixtures import GuiSessions, click, rows
from ui.main_window import MainWindow

pytestmark = pytest.mark.gui

REPLY_TIMEOUT_MS = 180_000
READ_TIMEOUT_MS = 30_000


@pytest.fixture
def home(hermetic_home: Path) -> HearthPaths:
    return HearthPaths(hermetic_home)


def _status_text(window: MainWindow) -> str:
    return window.statusBar().currentMessage()


def _chip_texts(window: MainWindow) -> list[str]:
    return [chip.label.text() for chip in window.chatArea.attachments.chips]


def _wait_read(qtbot: QtBot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: not window.chatArea.attachments.reading, timeout=READ_TIMEOUT_MS)


def test_an_attached_pdf_shows_as_a_chip_and_send_waits_while_it_is_read(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, tmp_path: Path
) -> None:
    window = gui.open(home, preload_model=False).window
    tray = window.chatArea.attachments
    report = write(tmp_path / "report.pdf", pdf_bytes([["Harbour lights"], ["Tide tables"], ["Storms"]]))

    tray.attach_paths([report])
    # Read on a worker: the window answers at once, and Send says why it waits.
    assert tray.reading
    assert not window.sendButton.isEnabled()
    assert "attached files" in window.sendButton.toolTip()
    _wait_read(qtbot, window)

    (text,) = _chip_texts(window)
    assert text.startswith("report.pdf · PDF · ") and text.endswith("3 pages"), text
    assert window.sendButton.toolTip() == ""

    # The × takes it off the message.
    click_remove = tray.chips[0].removeButton
    QTest.mouseClick(click_remove, Qt.MouseButton.LeftButton)
    assert tray.attachments() == ()


def test_an_empty_file_is_reported_and_not_attached(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, tmp_path: Path
) -> None:
    window = gui.open(home, preload_model=False).window
    empty = write(tmp_path / "empty.txt", b"")

    window.chatArea.attachments.attach_paths([empty])
    _wait_read(qtbot, window)

    assert _chip_texts(window) == []
    assert "empty.txt" in _status_text(window) and "empty" in _status_text(window).lower()


def test_a_file_pasted_into_the_composer_is_attached_not_typed(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, tmp_path: Path
) -> None:
    window = gui.open(home, preload_model=False).window
    notes = tmp_path / "notes.md"
    notes.write_text("# Packing list\n\nRope, lantern, a warm coat.\n", encoding="utf-8")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(notes))])
    QGuiApplication.clipboard().setMimeData(mime)

    window.composer.setFocus()
    window.composer.paste()
    _wait_read(qtbot, window)

    assert window.composer.toPlainText() == ""
    (text,) = _chip_texts(window)
    assert text.startswith("notes.md · Markdown · "), text


@pytest.mark.model
def test_a_message_sent_with_a_file_stores_it_and_shows_its_chip(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, starter_model: Path, tmp_path: Path
) -> None:
    save_settings(home.settings_path, Settings(max_tokens=8, temperature=0.0))
    session = gui.open(home)
    window = session.window
    notes = tmp_path / "lighthouse.txt"
    notes.write_text("The lighthouse keeper's name is Maren. She rings the bell at dusk.\n", encoding="utf-8")
    window.chatArea.attachments.attach_paths([notes])
    _wait_read(qtbot, window)

    window.composer.setPlainText("What is the keeper's name?")
    click(window.sendButton)
    # The chips go with the message.
    assert _chip_texts(window) == []
    qtbot.waitUntil(lambda: window.stopButton.isEnabled(), timeout=5000)
    qtbot.waitUntil(
        lambda: window.sendButton.isEnabled() and not window.stopButton.isEnabled(), timeout=REPLY_TIMEOUT_MS
    )

    conversation_id = window.current_conversation_id
    assert conversation_id is not None
    (prompt, _reply) = session.services.store.list_messages(conversation_id)
    (part,) = prompt.attachments
    assert (part.name, part.mime_type, part.meta["kind"], part.meta["mode"]) == (
        "lighthouse.txt",
        "text/plain",
        "text",
        "whole",
    )
    assert part.size_bytes == notes.stat().st_size
    (user_row,) = rows(window, "user")
    assert user_row.text == "What is the keeper's name?"
