"""Images in the window, driven like a user: a screenshot pasted into the composer goes to a server's model as
a picture (a real local OpenAI-compatible server records what it was sent); for the installed text-only
model the attach button says why it takes no images and an image is refused before anything is stored."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pytest
from PIL import Image
from PySide6.QtCore import QMimeData, Qt
from PySide6.QtGui import QColor, QGuiApplication, QImage
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths, resolve_home
from app.remote.registry import ServerRegistry
from tests.helpers.openai_peer import FaultServer
from tests.helpers.ui_fixtures import GuiSessions, click, pick, rows
from ui.main_window import MainWindow

pytestmark = pytest.mark.gui

WAIT_MS = 30_000


def paste_screenshot(window: MainWindow, width: int, height: int) -> None:
    image = QImage(width, height, QImage.Format.Format_RGB32)
    image.fill(QColor("teal"))
    mime = QMimeData()
    mime.setImageData(image)
    QGuiApplication.clipboard().setMimeData(mime)
    window.composer.setFocus()
    window.composer.paste()


def stored_files() -> list[Path]:
    return sorted(p for p in resolve_home().attachments_dir.rglob("*") if p.is_file())


def test_a_pasted_screenshot_goes_to_a_servers_model_as_a_picture(
    gui: GuiSessions, qtbot: QtBot, fault_server: FaultServer, hermetic_home: Path
) -> None:
    ServerRegistry(hermetic_home).add("lab", fault_server.url)
    session = gui.open(resolve_home(), preload_model=False)
    window = session.window
    qtbot.waitUntil(lambda: window.modelPicker.findData("lab/echo") >= 0, timeout=WAIT_MS)
    pick(window, "lab/echo")
    assert "Images:" not in window.chatArea.attachments.attachButton.toolTip()

    paste_screenshot(window, 300, 200)
    tray = window.chatArea.attachments
    qtbot.waitUntil(lambda: len(tray.chips) == 1 and not tray.reading, timeout=WAIT_MS)
    assert window.composer.toPlainText() == ""
    label = tray.chips[0].label.text()
    assert label.startswith("Pasted image ") and ".png · Image · " in label, label

    window.composer.setPlainText("What colour is this?")
    click(window.sendButton)
    qtbot.waitUntil(lambda: any(r.status == "complete" for r in rows(window, "assistant")), timeout=WAIT_MS)
    [request] = [r for r in fault_server.requests if r.path.endswith("/chat/completions")]
    assert request.body is not None
    [user] = request.body["messages"]
    text, picture = user["content"]
    assert text == {"type": "text", "text": "What colour is this?"}
    header, _, payload = picture["image_url"]["url"].partition(",")
    assert header == "data:image/png;base64"
    seen = Image.open(io.BytesIO(base64.b64decode(payload)))
    assert seen.size == (300, 200) and seen.getpixel((10, 10)) == (0, 128, 128)
    conversation_id = window.current_conversation_id
    assert conversation_id is not None
    prompt, _reply = session.services.store.list_messages(conversation_id)
    [part] = prompt.attachments
    assert part.meta["kind"] == "image" and part.mime_type == "image/png"

    # In the transcript the picture shows as a thumbnail, made off the GUI thread, over its name.
    (user_row,) = rows(window, "user")
    (chip,) = user_row.entry.files
    sha256 = part.file_sha256
    assert chip.image and sha256 is not None and chip.sha256 == sha256
    qtbot.waitUntil(lambda: window.chatArea.thumbnails.image(sha256) is not None, timeout=WAIT_MS)
    transcript = window.transcript
    rect = transcript.documents_rect(prompt.id, "file", 0)
    assert rect.height() > 90, rect
    transcript.viewport().repaint()
    shot = transcript.viewport().grab().toImage()
    ratio = shot.devicePixelRatio()
    centre = shot.pixelColor(int(rect.center().x() * ratio), int((rect.top() + 40) * ratio))
    assert (centre.red(), centre.green(), centre.blue()) == (0, 128, 128), centre.name()


@pytest.mark.model
def test_the_installed_text_only_model_says_why_it_takes_no_images_and_stores_none(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path, tmp_path: Path
) -> None:
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    window = session.window
    tray = window.chatArea.attachments
    qtbot.waitUntil(lambda: window.modelPicker.currentIndex() >= 0, timeout=WAIT_MS)
    tip = tray.attachButton.toolTip()
    assert "Images:" in tip and "can&#x27;t see images: it is a text-only model" in tip, tip

    photo = tmp_path / "harbour.jpg"
    Image.new("RGB", (64, 48), "navy").save(photo)
    tray.attach_paths([photo])
    qtbot.waitUntil(lambda: not tray.reading, timeout=WAIT_MS)
    assert tray.chips == []
    status = window.statusBar().currentMessage()
    assert "can't see images: it is a text-only model" in status, status
    paste_screenshot(window, 40, 30)
    qtbot.waitUntil(lambda: not tray.reading, timeout=WAIT_MS)
    assert tray.chips == [] and stored_files() == []


def test_pdf_pages_as_pictures_is_a_setting_for_every_chat(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path
) -> None:
    home = HearthPaths(hermetic_home)
    session = gui.open(home, preload_model=False)
    box = session.window.settingsPanel.pdfPages
    assert not box.isChecked() and "first 8 pages" in box.toolTip()
    QTest.mouseClick(box, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: session.services.settings.pdf_pages_as_images, timeout=WAIT_MS)
    session.close()
    again = gui.open(home, preload_model=False)
    assert again.window.settingsPanel.pdfPages.isChecked()
