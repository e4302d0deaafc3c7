"""GUI fixtures: the real window over the real services, with the dialogs answered by the test."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QPoint, Qt, QTimer, QUrl
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QPushButton, QWidget
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from app.qt.services import AppServices
from ui.main_window import MainWindow
from ui.message_row import MessageRow
from ui.row_view import FLUSH_INTERVAL_MS
from ui.transcript import Transcript

LOAD_TIMEOUT_MS = 20_000


@dataclass
class DialogAnswers:
    """Stands in for the dialogs; records every question so tests can check it was asked."""

    confirm: bool = True
    text: str | None = None
    # What the file dialogs answer (None: the user cancels).
    save_path: Path | None = None
    open_path: Path | None = None
    # What "choose files" answers (empty: the user cancels).
    open_paths: list[Path] = field(default_factory=list)
    folder: Path | None = None
    # What a list question answers: the index of the item chosen (None: the user cancels).
    choice: int | None = None
    choices: list[list[str]] = field(default_factory=list)
    confirmations: list[str] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    opened: list[str] = field(default_factory=list)
    file_dialogs: list[str] = field(default_factory=list)

    def confirm_action(self, parent: QWidget, title: str, text: str, action: str) -> bool:
        self.confirmations.append(text)
        return self.confirm

    def ask_text(self, parent: QWidget, title: str, label: str, initial: str) -> str | None:
        self.prompts.append(initial)
        return self.text

    def ask_save(self, parent: QWidget, title: str, suggested: str, name_filter: str) -> Path | None:
        self.file_dialogs.append(suggested)
        return self.save_path

    def ask_open(self, parent: QWidget, title: str, name_filter: str) -> Path | None:
        self.file_dialogs.append(title)
        return self.open_path

    def ask_open_many(self, parent: QWidget, title: str) -> list[Path]:
        self.file_dialogs.append(title)
        return list(self.open_paths)

    def ask_folder(self, parent: QWidget, title: str) -> Path | None:
        self.file_dialogs.append(title)
        return self.folder

    def ask_choice(self, parent: QWidget, title: str, label: str, items: list[str]) -> int | None:
        self.choices.append(items)
        return self.choice

    def confirm_open(self, parent: QWidget, url: QUrl) -> bool:
        return False

    def open_url(self, url: QUrl) -> bool:
        self.opened.append(url.toString())
        return True


@dataclass
class GuiSession:
    services: AppServices
    window: MainWindow
    answers: DialogAnswers
    closed: bool = False

    def close(self) -> None:
        """Close like a user quitting: the window goes, then the services shut down."""
        if self.closed:
            return
        self.closed = True
        self.window.close()
        QApplication.processEvents()
        self.services.shutdown()
        self.window.deleteLater()
        QApplication.processEvents()


class GuiSessions:
    """Opens real windows over real services and closes every one of them on exit.

    Used through a fixture in each GUI test module (`with GuiSessions(qtbot) as gui: yield gui`).
    """

    def __init__(self, qtbot: QtBot) -> None:
        self._qtbot = qtbot
        self._sessions: list[GuiSession] = []

    def open(self, paths: HearthPaths, *, preload_model: bool = True) -> GuiSession:
        services = AppServices.start(paths)
        answers = DialogAnswers()
        try:
            window = MainWindow(
                services,
                confirm=answers.confirm_action,
                ask=answers.ask_text,
                ask_save=answers.ask_save,
                ask_open=answers.ask_open,
                ask_folder=answers.ask_folder,
                ask_choice=answers.ask_choice,
                ask_open_many=answers.ask_open_many,
                confirm_open=answers.confirm_open,
                open_url=answers.open_url,
                preload_model=preload_model,
            )
        except BaseException:
            services.shutdown()
            raise
        session = GuiSession(services, window, answers)
        self._sessions.append(session)
        window.show()
        self._qtbot.waitExposed(window)
        self._qtbot.waitUntil(lambda: window.initial_load_done, timeout=LOAD_TIMEOUT_MS)
        return session

    def __enter__(self) -> GuiSessions:
        return self

    def __exit__(self, *exc_info: object) -> None:
        for session in self._sessions:
            session.close()


# -- driving the window like a user ------------------------------------------------------------------


def click(button: QPushButton) -> None:
    assert button.isEnabled(), button.objectName()
    QTest.mouseClick(button, Qt.MouseButton.LeftButton)


def titles(window: MainWindow) -> list[str]:
    conversations = window.conversationList
    return [conversations.item(i).text() for i in range(conversations.count())]


def click_conversation(qtbot: QtBot, window: MainWindow, title: str) -> None:
    conversations = window.conversationList
    matches = conversations.findItems(title, Qt.MatchFlag.MatchExactly)
    assert matches, f"{title!r} not in the sidebar"
    rect = conversations.visualItemRect(matches[0])
    QTest.mouseClick(conversations.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(rect.center()))
    qtbot.waitUntil(lambda: window.current_conversation_id is not None)


def rows(window: MainWindow, role: str | None = None) -> list[MessageRow]:
    return [row for row in window.transcript.rows() if role is None or row.role == role]


def pick(window: MainWindow, data: str) -> None:
    """Choose an entry of the model picker as a user's click does (activated, not just current)."""
    picker = window.modelPicker
    index = picker.findData(data)
    assert index >= 0, f"{data!r} is not in the picker"
    picker.setCurrentIndex(index)
    picker.activated.emit(index)


def click_message_action(window: MainWindow, message_id: int, action: str) -> None:
    """Click a message's action button where the transcript paints it."""
    transcript = window.transcript
    point = transcript.action_rect(message_id, action).center()
    QTest.mouseMove(transcript.viewport(), point)
    QTest.mouseClick(transcript.viewport(), Qt.MouseButton.LeftButton, pos=point)


def seed_conversation(
    qtbot: QtBot,
    session: GuiSession,
    title: str,
    exchange: tuple[str, str] = ("Where should we go?", "Somewhere **warm**."),
) -> int:
    """Test set-up, not GUI code: writing through the store directly is fine here."""
    store = session.services.store
    conversation = store.create_conversation(title)
    store.add_message(conversation.id, "user", exchange[0])
    store.add_message(conversation.id, "assistant", exchange[1])
    session.window.refresh_conversations()
    qtbot.waitUntil(lambda: title in titles(session.window))
    return conversation.id


class Ticker:
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


def settle_transcript(qtbot: QtBot) -> None:
    """Long enough for the transcript's next flush, and everything it posted."""
    qtbot.wait(FLUSH_INTERVAL_MS * 2)
    QApplication.processEvents()


def click_in_transcript(transcript: Transcript, point: QPoint) -> None:
    """Hover, then click: the transcript shows what is under the pointer as a user would see it."""
    QTest.mouseMove(transcript.viewport(), point)
    QTest.mouseClick(transcript.viewport(), Qt.MouseButton.LeftButton, pos=point)
