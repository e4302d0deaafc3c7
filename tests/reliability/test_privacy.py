"""A normal offline session (start, load the model, chat, search, export) makes no network connection, in
the window's process or in the model runner it starts."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from app.settings import Settings, save_settings
from tests.reliability.conftest import RecordFault
from tests.ui_fixtures import GuiSessions

pytestmark = [pytest.mark.gui, pytest.mark.model]

AUDIT_SITE = Path(__file__).resolve().parent / "audit_site"
REPLY_TIMEOUT_MS = 120_000
_NETWORK_EVENTS = frozenset({"socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto"})


class Recorder:
    """sys.addaudithook cannot be removed, so one hook stays for the process and records only while asked."""

    installed: Recorder | None = None

    def __init__(self) -> None:
        self.active = False
        self.events: list[str] = []

    @classmethod
    def get(cls) -> Recorder:
        if cls.installed is None:
            cls.installed = Recorder()
            sys.addaudithook(cls.installed._hook)
        return cls.installed

    def _hook(self, event: str, args: tuple[object, ...]) -> None:
        if not self.active or event not in _NETWORK_EVENTS:
            return
        if event in ("socket.connect", "socket.sendto"):
            family = getattr(args[0], "family", None)
            name = socket.AddressFamily(family).name if family is not None else "?"
            self.events.append(f"{os.getpid()} {event} {name} {args[1]!r}")
        else:
            self.events.append(f"{os.getpid()} {event} {args[:2]!r}")

    @contextlib.contextmanager
    def recording(self) -> Iterator[list[str]]:
        self.events = []
        self.active = True
        try:
            yield self.events
        finally:
            self.active = False


def outgoing(lines: list[str]) -> list[str]:
    """Everything except local IPC over Unix sockets."""
    return [line for line in lines if "hook installed" not in line and " AF_UNIX " not in line]


@pytest.fixture
def audited_children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every Python process started from here on (the runner) records its sockets to this file."""
    log = tmp_path / "child-sockets.log"
    monkeypatch.setenv("HEARTH_TEST_AUDIT_LOG", str(log))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [str(AUDIT_SITE), os.environ.get("PYTHONPATH")]))
    )
    return log


def test_an_offline_session_makes_no_connection(
    qtbot: QtBot,
    gui: GuiSessions,
    hermetic_home: Path,
    starter_model: Path,
    tmp_path: Path,
    audited_children: Path,
    fault: RecordFault,
) -> None:
    paths = HearthPaths(hermetic_home).ensure()
    save_settings(paths.settings_path, Settings(max_tokens=16, temperature=0.0))
    recorder = Recorder.get()

    # The recorder must be able to see a connection: one to a closed local port, before the session.
    with recorder.recording() as control, socket.socket() as probe:
        probe.settimeout(1)
        probe.connect_ex(("127.0.0.1", 9))
    assert any("socket.connect AF_INET ('127.0.0.1', 9)" in line for line in control)

    with recorder.recording() as events:
        session = gui.open(paths)
        window = session.window
        qtbot.waitUntil(lambda: window.sendButton.isEnabled(), timeout=REPLY_TIMEOUT_MS)
        window.composer.setFocus()
        QTest.keyClicks(window.composer, "Name a river.")
        QTest.keyClick(window.composer, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: window.stopButton.isEnabled(), timeout=10_000)
        qtbot.waitUntil(
            lambda: window.sendButton.isEnabled() and not window.stopButton.isEnabled(),
            timeout=REPLY_TIMEOUT_MS,
        )
        window.open_search()
        QTest.keyClicks(window.searchPanel.query, "river")
        qtbot.waitUntil(lambda: bool(window.searchPanel.hits), timeout=10_000)
        session.answers.save_path = tmp_path / "exported.md"
        window.export_current("md")
        qtbot.waitUntil(lambda: (tmp_path / "exported.md").exists(), timeout=10_000)
        runner_pid = session.services.chat.engine.client.pid
        session.close()

    child = audited_children.read_text(encoding="utf-8").splitlines()
    # The runner really ran under the recording hook.
    assert any(line.startswith(f"{runner_pid} hook installed") for line in child), child
    assert "river" in (tmp_path / "exported.md").read_text(encoding="utf-8").lower()
    assert outgoing(events) == []
    assert outgoing(child) == []
    fault(
        "Privacy",
        "connections during an offline session (start, load, chat, search, export)",
        trials=1,
        outcome="none, in the app or the model runner",
    )
