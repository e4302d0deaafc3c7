"""Test-only: one offline session in the real window, in a process of its own, for tests/reliability/
test_privacy.py to run under strace in a network namespace.

`python -m tests.reliability.offline_session RESULT EXPORT` first tries one connection to 127.0.0.1:9 (the
probe: it shows that the trace sees connections), then opens the window on $HEARTH_HOME, waits for the
model, sends a message, waits for the reply, searches for it and exports the conversation to EXPORT as
Markdown, and closes. RESULT gets, as JSON, the model runner's pid and the reply as shown and as stored.
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication

from app.paths import resolve_home
from app.qt.services import AppServices
from tests.helpers.ui_fixtures import DialogAnswers, rows
from ui.main_window import MainWindow

PROBE = ("127.0.0.1", 9)
TIMEOUT_S = 120.0


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit(f"offline session: timed out waiting for {what}")
        QApplication.processEvents()
        time.sleep(0.01)


def main(result: Path, export: Path) -> None:
    with socket.socket() as probe:
        probe.settimeout(1)
        probe.connect_ex(PROBE)

    application = QApplication([])
    services = AppServices.start(resolve_home().ensure())
    answers = DialogAnswers(save_path=export)
    window = MainWindow(
        services,
        confirm=answers.confirm_action,
        ask=answers.ask_text,
        ask_save=answers.ask_save,
        ask_open=answers.ask_open,
        ask_folder=answers.ask_folder,
        ask_choice=answers.ask_choice,
        confirm_open=answers.confirm_open,
        open_url=answers.open_url,
    )
    try:
        window.show()
        wait_until(lambda: window.initial_load_done and window.sendButton.isEnabled(), "the model")
        window.composer.setFocus()
        QTest.keyClicks(window.composer, "Name a river.")
        QTest.keyClick(window.composer, Qt.Key.Key_Return)
        wait_until(lambda: window.stopButton.isEnabled(), "the reply to start")
        wait_until(lambda: window.sendButton.isEnabled() and not window.stopButton.isEnabled(), "the reply")
        window.open_search()
        QTest.keyClicks(window.searchPanel.query, "river")
        wait_until(lambda: bool(window.searchPanel.hits), "search hits")
        window.export_current("md")
        wait_until(export.exists, "the export")
        shown = rows(window, "assistant")[-1]
        stored = services.store.get_message(shown.entry.message_id).content
        runner_pid = services.chat.engine.client.pid
    finally:
        window.close()
        QApplication.processEvents()
        services.shutdown()
    summary = {"runner_pid": runner_pid, "shown": shown.text, "stored": stored}
    result.write_text(json.dumps(summary), encoding="utf-8")
    del application


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
