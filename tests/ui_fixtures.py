"""GUI fixtures: the real window over the real services, with the dialogs answered by the test."""

from __future__ import annotations

from dataclasses import dataclass, field

from PySide6.QtCore import QUrl
from PySide6.QtWidgets import QApplication, QWidget
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from app.services import AppServices
from ui.main_window import MainWindow

LOAD_TIMEOUT_MS = 20_000


@dataclass
class DialogAnswers:
    """Stands in for the dialogs; records every question so tests can check it was asked."""

    confirm: bool = True
    text: str | None = None
    confirmations: list[str] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    opened: list[str] = field(default_factory=list)

    def confirm_action(self, parent: QWidget, title: str, text: str, action: str) -> bool:
        self.confirmations.append(text)
        return self.confirm

    def ask_text(self, parent: QWidget, title: str, label: str, initial: str) -> str | None:
        self.prompts.append(initial)
        return self.text

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

    def open(self, paths: HearthPaths) -> GuiSession:
        services = AppServices.start(paths)
        answers = DialogAnswers()
        try:
            window = MainWindow(
                services,
                confirm=answers.confirm_action,
                ask=answers.ask_text,
                confirm_open=answers.confirm_open,
                open_url=answers.open_url,
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
