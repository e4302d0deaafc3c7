"""Servers in the window: "Add server…" in the model picker, chatting with a server's model, its provenance,
and servers that cannot be reached; against llama-cpp-python's server and the fault server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.paths import resolve_home
from app.servers import SERVERS_FILE, ServerRegistry
from tests.openai_peer import LlamaPeer, make_certificates, serve_faults
from tests.ui_fixtures import GuiSessions, click, rows
from ui.main_window import ADD_SERVER, MainWindow
from ui.provenance import ProvenanceDialog
from ui.server_dialog import ServerDialog

pytestmark = pytest.mark.gui

REPLY_TIMEOUT_MS = 60_000


def pick(window: MainWindow, data: str) -> None:
    """Choose an entry of the model picker as a user's click does (activated, not just current)."""
    picker = window.modelPicker
    index = picker.findData(data)
    assert index >= 0, f"{data!r} is not in the picker"
    picker.setCurrentIndex(index)
    picker.activated.emit(index)


def picker_texts(window: MainWindow) -> list[str]:
    return [window.modelPicker.itemText(i) for i in range(window.modelPicker.count())]


def open_dialog(qtbot: QtBot, window: MainWindow) -> ServerDialog:
    pick(window, ADD_SERVER)
    dialog = window.serverDialog
    assert dialog is not None
    qtbot.waitExposed(dialog)
    return dialog


def fill(dialog: ServerDialog, name: str, url: str, key: str = "") -> None:
    for edit, text in ((dialog.nameEdit, name), (dialog.urlEdit, url), (dialog.keyEdit, key)):
        edit.clear()
        QTest.keyClicks(edit, text)


def test_add_a_server_from_the_picker_and_chat_with_its_model(
    gui: GuiSessions, qtbot: QtBot, llama_peer: LlamaPeer, hermetic_home: Path
) -> None:
    session = gui.open(resolve_home(), preload_model=False)
    window = session.window
    assert picker_texts(window)[-1] == "Add server…"

    dialog = open_dialog(qtbot, window)
    fill(dialog, "peer", llama_peer.url, llama_peer.api_key)
    click(dialog.saveButton)
    model = f"peer/{llama_peer.model_id}"
    qtbot.waitUntil(lambda: model in picker_texts(window), timeout=REPLY_TIMEOUT_MS)
    assert llama_peer.api_key not in (hermetic_home / SERVERS_FILE).read_text()
    assert session.services.servers.api_key("peer") == llama_peer.api_key

    pick(window, model)
    assert session.services.settings.default_model == model
    QTest.keyClicks(window.composer, "Say hi.")
    click(window.sendButton)
    qtbot.waitUntil(
        lambda: any(r.status == "complete" for r in rows(window, "assistant")), timeout=REPLY_TIMEOUT_MS
    )
    assert window.statusBackend.text() == "Remote · peer"
    qtbot.waitUntil(lambda: any(m.server_name for m in window.current_messages()))
    reply = next(m for m in window.current_messages() if m.role == "assistant")
    assert (reply.model_name, reply.server_name, reply.server_url) == (model, "peer", llama_peer.url)
    info = dict(ProvenanceDialog(reply, None).rows)
    assert info["Server"] == f"peer ({llama_peer.url})"
    assert "Model file" not in info and "Time to first token" in info


def test_a_refused_connection_is_shown_in_the_dialog_and_saves_nothing(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path, tmp_path: Path
) -> None:
    session = gui.open(resolve_home(), preload_model=False)
    window = session.window
    certificates = make_certificates(tmp_path)
    with serve_faults(api_key="sk-right-0000000000", certificates=certificates) as server:
        dialog = open_dialog(qtbot, window)
        fill(dialog, "internal", server.url, "sk-wrong-1111111111")
        click(dialog.saveButton)
        qtbot.waitUntil(lambda: bool(dialog.statusLabel.text()) and not dialog.busy, timeout=REPLY_TIMEOUT_MS)
        qtbot.waitUntil(
            lambda: "could not be verified" in dialog.statusLabel.text(), timeout=REPLY_TIMEOUT_MS
        )
        assert dialog.isVisible()
        assert not (hermetic_home / SERVERS_FILE).exists()

        session.answers.open_path = certificates.ca
        click(dialog.chooseCaButton)
        assert dialog.caEdit.text() == str(certificates.ca)
        click(dialog.saveButton)
        qtbot.waitUntil(
            lambda: "refused the API key (401" in dialog.statusLabel.text(), timeout=REPLY_TIMEOUT_MS
        )
        assert "sk-wrong" not in dialog.statusLabel.text()
        assert not (hermetic_home / SERVERS_FILE).exists()

        fill(dialog, "internal", server.url, "sk-right-0000000000")
        click(dialog.saveButton)
        qtbot.waitUntil(lambda: "internal/echo" in picker_texts(window), timeout=REPLY_TIMEOUT_MS)
        saved = json.loads((hermetic_home / SERVERS_FILE).read_text())["servers"]
        assert saved == [{"name": "internal", "url": server.url, "ca_bundle": str(certificates.ca)}]


def test_a_server_that_cannot_be_reached_is_listed_as_such(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path
) -> None:
    with serve_faults() as server:
        url = server.url
    ServerRegistry(hermetic_home).add("gone", url)
    session = gui.open(resolve_home(), preload_model=False)
    window = session.window
    qtbot.waitUntil(lambda: "gone: not reachable" in picker_texts(window), timeout=REPLY_TIMEOUT_MS)
    index = picker_texts(window).index("gone: not reachable")
    tooltip = window.modelPicker.itemData(index, Qt.ItemDataRole.ToolTipRole)
    assert "Could not connect to gone" in tooltip
    assert window.modelPicker.itemData(index) is None
