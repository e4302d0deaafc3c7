"""Start the GUI: the QApplication, the services and the main window."""

from __future__ import annotations

import logging
import sys

from PySide6.QtCore import QDeadlineTimer, QEventLoop, Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from app.errors import HearthError
from app.paths import HearthPaths
from app.qt.gui_gc import GuiThreadGarbageCollector
from app.qt.services import AppServices
from app.qt.single_instance import SingleInstance
from ui.assets import app_icon
from ui.i18n import Translations
from ui.main_window import MainWindow

log = logging.getLogger("hearth.ui")

SMOKE_TIMEOUT_MS = 30_000


class _Once:
    """Shutdown runs from aboutToQuit (the session may end before exec() returns) and on every way out."""

    def __init__(self, services: AppServices) -> None:
        self._services: AppServices | None = services

    def __call__(self) -> None:
        services, self._services = self._services, None
        if services is not None:
            services.shutdown()


def create_application(argv: list[str] | None = None) -> QApplication:
    """The QApplication with Hearth's names and icon; reuses one that already exists.

    Colours and styles belong to each window (ui.theme), which follows the system or the user's choice.
    """
    existing = QApplication.instance()
    if existing is None:
        app = QApplication(sys.argv if argv is None else argv)
    else:
        assert isinstance(existing, QApplication), "a non-GUI Qt application is already running"
        app = existing
    app.setApplicationName("Hearth")
    app.setOrganizationName("Hearth")
    app.setApplicationDisplayName("Hearth")
    app.setWindowIcon(app_icon())
    return app


def _report_startup_failure(message: str) -> None:
    box = QMessageBox(QMessageBox.Icon.Critical, "Hearth could not start", "")
    # Plain text: the message may quote paths or database errors.
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setText(message)
    box.exec()


def _smoke_check(window: MainWindow) -> int:
    deadline = QDeadlineTimer(SMOKE_TIMEOUT_MS)
    # An event loop object, not QApplication.processEvents: in PySide6 6.12.0 every call of a static
    # void method drops a reference to None, and a long enough loop of them aborts the interpreter.
    loop = QEventLoop()
    while not window.initial_load_done and not deadline.hasExpired():
        loop.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
    if not window.isVisible():
        log.error("smoke test: the main window is not visible")
        return 1
    if not window.initial_load_done:
        log.error("smoke test: conversations and models did not load within %d ms", SMOKE_TIMEOUT_MS)
        return 1
    log.info("smoke test passed")
    return 0


def _bring_forward(window: MainWindow) -> None:
    window.showNormal()
    window.raise_()
    window.activateWindow()


def _could_not_start(exc: HearthError, *, smoke_test: bool) -> int:
    log.error("could not start: %s", exc)
    if not smoke_test:
        _report_startup_failure(str(exc))
    return 1


def run_gui(paths: HearthPaths, *, smoke_test: bool = False, argv: list[str] | None = None) -> int:
    app = create_application(argv)
    try:
        instance = SingleInstance.claim(paths)
    except HearthError as exc:
        return _could_not_start(exc, smoke_test=smoke_test)
    if instance is None:
        # The window already open for this data directory was asked to come to the front.
        return 0
    collector = GuiThreadGarbageCollector(app)
    try:
        return _run_window(app, paths, instance, smoke_test=smoke_test)
    finally:
        collector.stop()
        instance.release()


def _run_window(app: QApplication, paths: HearthPaths, instance: SingleInstance, *, smoke_test: bool) -> int:
    try:
        services = AppServices.start(paths)
    except HearthError as exc:
        return _could_not_start(exc, smoke_test=smoke_test)

    shutdown = _Once(services)
    app.aboutToQuit.connect(shutdown)
    translations = Translations()
    translations.install(services.settings.language)
    # A smoke run proves the app starts; loading a model is the CLI's and the tests' job.
    window = MainWindow(services, translations=translations, preload_model=not smoke_test)
    instance.activated.connect(lambda: _bring_forward(window))
    try:
        window.show()
        return _smoke_check(window) if smoke_test else app.exec()
    finally:
        window.close()
        window.deleteLater()
        shutdown()
        translations.remove()
        app.aboutToQuit.disconnect(shutdown)
