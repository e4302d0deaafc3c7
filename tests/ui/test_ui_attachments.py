"""Attachments in the window: chips above the composer, files read off the GUI thread, a bad file's error,
sending them with a message (the real starter model), and a reply's Sources block and passage dialog."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, QRect, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.conversations.store import PartInput, ReplyProvenance
from app.paths import HearthPaths
from app.qt.services import AppServices
from app.settings import Settings, save_settings
from tests.helpers.document_files import pdf_bytes, write
from tests.helpers.ui_fixtures import GuiSessions, click, click_conversation, rows, titles
from ui.attachments import PassageDialog
from ui.chat_area import entry_for
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
    (chip,) = user_row.entry.files
    assert chip.label.startswith("lighthouse.txt · Text · ") and chip.sha256 == part.file_sha256
    # Read back from the database, the row shows the same chip; a click opens a copy under the file's name.
    assert entry_for(prompt).files == (chip,)
    _click(window, window.transcript.documents_rect(prompt.id, "file"))
    qtbot.waitUntil(lambda: bool(session.answers.opened))
    (opened,) = session.answers.opened
    copy = Path(QUrl(opened).toLocalFile())
    assert copy.name == "lighthouse.txt" and copy.read_bytes() == notes.read_bytes()
    assert copy.is_relative_to(home.home)


def _click(window: MainWindow, rect: QRect) -> None:
    viewport = window.transcript.viewport()
    QTest.mouseMove(viewport, rect.center())
    QTest.mouseClick(viewport, Qt.MouseButton.LeftButton, pos=rect.center())


def test_a_reply_with_sources_lists_them_and_a_click_shows_the_passage(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, tmp_path: Path
) -> None:
    session = gui.open(home, preload_model=False)
    window, services = session.window, session.services
    manual = tmp_path / "manual.md"
    manual.write_text("# Care\n\nOil the lamp weekly and trim the wick.\n", encoding="utf-8")
    stored = services.documents.attach(manual)
    passage = "Oil the lamp weekly and trim the wick."
    turn = services.store.begin_turn(
        None,
        prompt="How do I look after the lamp?",
        after=None,
        system_prompt=None,
        reply=ReplyProvenance("starter", None, {}, None),
        prompt_parts=[
            PartInput("attachment", "manual.md", stored.sha256, stored.mime_type, {"kind": stored.kind})
        ],
        reply_parts=[
            PartInput(
                "source",
                "manual.md",
                stored.sha256,
                meta={"location": "Care", "score": 0.9, "collection": None, "content_sha256": stored.sha256},
                text=passage,
            ),
            PartInput(
                "source",
                "handbook.pdf",
                None,
                meta={
                    "location": "page 4",
                    "score": 0.5,
                    "collection": "keepers",
                    "content_sha256": "0" * 64,
                },
                text="Ring the bell at dusk.",
            ),
        ],
    )
    services.store.finish_message(turn.reply.id, content="Oil it weekly.", status="complete")
    window.refresh_conversations()
    qtbot.waitUntil(lambda: bool(titles(window)))
    click_conversation(qtbot, window, titles(window)[0])
    qtbot.waitUntil(lambda: window.transcript.row(turn.reply.id) is not None)
    reply = window.transcript.row(turn.reply.id)
    assert reply is not None and len(reply.entry.sources) == 2

    # Collapsed: one line saying how many; a click lists them.
    sources = window.transcript.documents_rect(turn.reply.id, "sources")
    collapsed = reply.height
    _click(window, sources)
    assert reply.sources_expanded and reply.height > collapsed
    assert "manual.md — Care — Oil the lamp" in reply.entry.sources[0].line
    # Painted with the row (a failure while painting fails the test through pytest-qt).
    assert window.transcript.viewport().grab().save(str(tmp_path / "sources.png"))

    _click(window, window.transcript.documents_rect(turn.reply.id, "source", 0))
    qtbot.waitUntil(lambda: window.findChild(PassageDialog) is not None)
    dialog = window.findChild(PassageDialog)
    assert isinstance(dialog, PassageDialog)
    assert dialog.fileLabel.text() == "manual.md — Care"
    assert dialog.passage.toPlainText() == passage
    click(dialog.openButton)
    qtbot.waitUntil(lambda: bool(session.answers.opened))
    assert Path(QUrl(session.answers.opened[0]).toLocalFile()).name == "manual.md"
    dialog.close()

    # A collection's file is not stored with the chat: its passage shows, the file button says why not.
    _click(window, window.transcript.documents_rect(turn.reply.id, "source", 1))
    qtbot.waitUntil(
        lambda: any(
            d.isVisible() and "handbook" in d.fileLabel.text() for d in window.findChildren(PassageDialog)
        )
    )
    (other,) = [d for d in window.findChildren(PassageDialog) if "handbook" in d.fileLabel.text()]
    assert other.fileLabel.text() == "handbook.pdf — page 4" and not other.openButton.isEnabled()
    other.close()

    # The copies made for opening are gone at the next start.
    session.close()
    opened = home.home / "opened"
    assert any(opened.rglob("manual.md"))
    gui.open(home, preload_model=False)
    qtbot.waitUntil(lambda: not opened.exists())


def test_files_dropped_on_the_transcript_are_attached(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, tmp_path: Path
) -> None:
    window = gui.open(home, preload_model=False).window
    table = tmp_path / "tides.csv"
    table.write_text("day,high\nMonday,06:10\nTuesday,06:55\n", encoding="utf-8")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(table))])
    viewport = window.transcript.viewport()
    at = QPointF(viewport.rect().center())
    copy = Qt.DropAction.CopyAction
    no_buttons, no_keys = Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier

    enter = QDragEnterEvent(at.toPoint(), copy, mime, no_buttons, no_keys)
    QApplication.sendEvent(viewport, enter)
    assert enter.isAccepted()
    drop = QDropEvent(at, copy, mime, no_buttons, no_keys)
    QApplication.sendEvent(viewport, drop)
    _wait_read(qtbot, window)

    (text,) = _chip_texts(window)
    assert text.startswith("tides.csv · CSV · "), text


def _chat_holding_a_file(services: AppServices, path: Path) -> tuple[int, str]:
    """An earlier chat whose prompt holds `path`, as a sent message stores it."""
    stored = services.documents.attach(path)
    turn = services.store.begin_turn(
        None,
        prompt="An earlier question",
        after=None,
        system_prompt=None,
        reply=ReplyProvenance("starter", None, {}, None),
        prompt_parts=[
            PartInput("attachment", path.name, stored.sha256, stored.mime_type, {"kind": stored.kind})
        ],
    )
    services.store.finish_message(turn.reply.id, content="An earlier answer.", status="complete")
    return turn.conversation_id, stored.sha256


@pytest.mark.model
def test_a_file_waiting_in_the_composer_survives_another_chat_being_deleted(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, starter_model: Path, tmp_path: Path
) -> None:
    save_settings(home.settings_path, Settings(max_tokens=8, temperature=0.0))
    session = gui.open(home)
    window, services = session.window, session.services
    _old_chat, old_sha = _chat_holding_a_file(services, write(tmp_path / "old.txt", b"Last year's rota.\n"))
    window.refresh_conversations()
    qtbot.waitUntil(lambda: titles(window) == ["An earlier question"])
    notes = write(tmp_path / "lighthouse.txt", b"The lighthouse keeper's name is Maren.\n")
    window.chatArea.attachments.attach_paths([notes])
    _wait_read(qtbot, window)
    (waiting,) = window.chatArea.attachments.attachments()

    # The other chat goes for good (its undo bar expires) while the file waits to be sent.
    window.undoBar.timeout_ms = 150
    click_conversation(qtbot, window, "An earlier question")
    click(window.deleteButton)
    qtbot.waitUntil(lambda: not services.documents.files.has(old_sha), timeout=5000)
    assert services.documents.files.has(waiting.sha256)

    window.composer.setPlainText("What is the keeper's name?")
    click(window.sendButton)
    qtbot.waitUntil(lambda: window.stopButton.isEnabled(), timeout=5000)
    qtbot.waitUntil(
        lambda: window.sendButton.isEnabled() and not window.stopButton.isEnabled(), timeout=REPLY_TIMEOUT_MS
    )
    assert "attach it again" not in _status_text(window)
    conversation_id = window.current_conversation_id
    assert conversation_id is not None
    (prompt, reply) = services.store.list_messages(conversation_id)
    assert [p.file_sha256 for p in prompt.attachments] == [waiting.sha256]
    assert reply.status == "complete" and reply.content

    # Sent, the file is the message's: it goes with that chat, like any other.
    services.store.delete_conversation(conversation_id)
    assert not services.documents.files.has(waiting.sha256)


def test_a_file_taken_off_the_message_goes_when_a_chat_is_deleted(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, tmp_path: Path
) -> None:
    session = gui.open(home, preload_model=False)
    window, services = session.window, session.services
    tray = window.chatArea.attachments
    tray.attach_paths(
        [write(tmp_path / "wrong.txt", b"Not this one.\n"), write(tmp_path / "right.txt", b"This.\n")]
    )
    _wait_read(qtbot, window)
    qtbot.waitUntil(lambda: len(tray.chips) == 2)
    (wrong,) = [chip for chip in tray.chips if chip.attachment.name == "wrong.txt"]
    (right,) = [chip.attachment for chip in tray.chips if chip.attachment.name == "right.txt"]
    QTest.mouseClick(wrong.removeButton, Qt.MouseButton.LeftButton)

    services.store.delete_conversation(services.store.create_conversation("Scratch").id)
    assert not services.documents.files.has(wrong.attachment.sha256)
    assert services.documents.files.has(right.sha256) and tray.attachments() == (right,)
