"""Servers in the window: "Add server…" and "Manage servers…" in the model picker, chatting with a server's
model, its provenance, servers that cannot be reached, slow or come back; removing a server, changing its key
and CA bundle. Against llama-cpp-python's server and the fault server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import keyring
import pytest
from keyring.backends.fail import Keyring as FailKeyring
from PySide6 import QtGui
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QTextDocument
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLineEdit
from pytestqt.qtbot import QtBot

import app.remote.openai_client as openai_client_module
from app.documents.chunking import estimate_tokens
from app.paths import resolve_home
from app.remote.registry import SERVERS_FILE, ServerRegistry
from app.settings import Settings, save_settings
from tests.helpers.openai_peer import FAULT_MODELS, FaultServer, LlamaPeer, make_certificates, serve_faults
from tests.helpers.ui_fixtures import GuiSessions, Ticker, click, pick, rows
from ui.main_window import MainWindow
from ui.model_bar import ADD_SERVER, MANAGE_SERVERS
from ui.provenance import ProvenanceDialog
from ui.server_dialog import ServerDialog
from ui.servers_panel import CA, CONTEXT, KEY, NAME, STATE, ServersDialog

pytestmark = pytest.mark.gui

REPLY_TIMEOUT_MS = 60_000
WAIT_MS = 20_000
MAX_EVENT_LOOP_GAP_S = 1.0
RIGHT_KEY = "sk-right-0000000000"
WRONG_KEY = "sk-wrong-1111111111"


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


def open_manager(qtbot: QtBot, window: MainWindow) -> ServersDialog:
    assert picker_texts(window)[-1] == "Manage servers…"
    pick(window, MANAGE_SERVERS)
    dialog = window.serversDialog
    assert dialog is not None
    qtbot.waitExposed(dialog)
    return dialog


def listed(dialog: ServersDialog) -> dict[str, list[str]]:
    """The server list as shown: name → the texts of its row."""
    view = dialog.serverList
    shown = {}
    for row in range(view.topLevelItemCount()):
        item = view.topLevelItem(row)
        assert item is not None
        shown[item.text(NAME)] = [item.text(column) for column in range(view.columnCount())]
    return shown


def select(dialog: ServersDialog, name: str) -> None:
    view = dialog.serverList
    (item,) = view.findItems(name, Qt.MatchFlag.MatchExactly, NAME)
    point = QPoint(view.visualItemRect(item).center())
    QTest.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=point)
    chosen = dialog.selected()
    assert chosen is not None and chosen.server.name == name


def stored_key(name: str) -> str | None:
    return keyring.get_keyring().get_password("Hearth", f"server-api-key:{name}")


def saved_servers(home: Path) -> list[dict[str, object]]:
    servers: list[dict[str, object]] = json.loads((home / SERVERS_FILE).read_text())["servers"]
    return servers


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


# -- Manage servers… ---------------------------------------------------------------------------------


def test_remove_a_server_and_its_key_while_its_chats_keep_their_provenance(
    gui: GuiSessions, qtbot: QtBot, llama_peer: LlamaPeer, hermetic_home: Path
) -> None:
    registry = ServerRegistry(hermetic_home)
    registry.add("peer", llama_peer.url, api_key=llama_peer.api_key)
    with serve_faults() as stopped:
        registry.add("gone", stopped.url)
    session = gui.open(resolve_home(), preload_model=False)
    window = session.window
    model = f"peer/{llama_peer.model_id}"
    qtbot.waitUntil(lambda: model in picker_texts(window), timeout=WAIT_MS)
    # Test set-up: a reply the server wrote earlier.
    store = session.services.store
    earlier = store.create_conversation("Earlier")
    store.add_message(earlier.id, "user", "Hi")
    reply = store.start_assistant_message(
        earlier.id,
        model_name=model,
        model_sha256=None,
        sampling={"temperature": 0.2},
        seed=None,
        server_name="peer",
        server_url=llama_peer.url,
    )
    store.finish_message(reply.id, content="Hello", status="complete")

    dialog = open_manager(qtbot, window)
    qtbot.waitUntil(lambda: listed(dialog).get("gone", [""] * 5)[STATE] == "Not reachable", timeout=WAIT_MS)
    assert listed(dialog)["peer"][1:] == [llama_peer.url, "1", "Keyring", "System", "8,192"]
    select(dialog, "gone")
    assert "Could not connect to gone" in dialog.detailLabel.text()
    assert not dialog.removeKeyButton.isEnabled() and not dialog.systemCaButton.isEnabled()

    # Cancelled: nothing happens.
    select(dialog, "peer")
    session.answers.confirm = False
    click(dialog.removeButton)
    assert "Remove the server “peer” and its API key?" in session.answers.confirmations[-1]
    assert set(listed(dialog)) == {"gone", "peer"} and dialog.removeButton.isEnabled()

    session.answers.confirm = True
    click(dialog.removeButton)
    qtbot.waitUntil(lambda: dialog.statusLabel.text() == "Removed peer and its API key.", timeout=WAIT_MS)
    assert set(listed(dialog)) == {"gone"}
    assert model not in picker_texts(window) and "gone: not reachable" in picker_texts(window)
    assert [s["name"] for s in saved_servers(hermetic_home)] == ["gone"]
    assert stored_key("peer") is None
    (_, kept) = store.list_messages(earlier.id)
    assert (kept.model_name, kept.server_name, kept.server_url) == (model, "peer", llama_peer.url)
    assert dict(ProvenanceDialog(kept, None).rows)["Server"] == f"peer ({llama_peer.url})"

    select(dialog, "gone")
    click(dialog.removeButton)
    qtbot.waitUntil(lambda: not listed(dialog) and dialog.emptyLabel.isVisible(), timeout=WAIT_MS)
    assert "Manage servers…" not in picker_texts(window) and picker_texts(window)[-1] == "Add server…"
    assert saved_servers(hermetic_home) == []


def test_a_changed_key_is_used_by_the_next_request_and_a_removed_one_is_gone(
    gui: GuiSessions, qtbot: QtBot, fault_server: FaultServer, hermetic_home: Path
) -> None:
    fault_server.api_key = RIGHT_KEY
    ServerRegistry(hermetic_home).add("lab", fault_server.url, api_key=WRONG_KEY)
    session = gui.open(resolve_home(), preload_model=False)
    window = session.window
    qtbot.waitUntil(lambda: "lab: API key refused" in picker_texts(window), timeout=WAIT_MS)
    assert fault_server.requests[-1].headers["authorization"] == f"Bearer {WRONG_KEY}"

    dialog = open_manager(qtbot, window)
    select(dialog, "lab")
    assert "refused the API key (401" in dialog.detailLabel.text()
    assert listed(dialog)["lab"][STATE] == "API key refused"
    assert "in the system keyring" in dialog.detailLabel.text()
    click(dialog.changeKeyButton)
    key_dialog = dialog.keyDialog
    assert key_dialog is not None
    qtbot.waitExposed(key_dialog)
    assert key_dialog.keyEdit.echoMode() == QLineEdit.EchoMode.Password
    assert not key_dialog.saveButton.isEnabled()
    QTest.keyClicks(key_dialog.keyEdit, "has a space")
    click(key_dialog.saveButton)
    assert "does not look like an API key" in key_dialog.noteLabel.text() and key_dialog.isVisible()
    key_dialog.keyEdit.clear()
    QTest.keyClicks(key_dialog.keyEdit, RIGHT_KEY)
    click(key_dialog.saveButton)
    qtbot.waitUntil(
        lambda: [f"lab/{m}" in picker_texts(window) for m in FAULT_MODELS] == [True] * len(FAULT_MODELS)
    )
    assert dialog.statusLabel.text() == "Saved the new API key for lab in the system keyring."
    assert listed(dialog)["lab"][STATE] == str(len(FAULT_MODELS)) and dialog.detailLabel.text().startswith(
        "The API key is kept"
    )
    assert stored_key("lab") == RIGHT_KEY
    assert RIGHT_KEY not in (hermetic_home / SERVERS_FILE).read_text()

    # The next chat request sends it.
    pick(window, "lab/echo")
    QTest.keyClicks(window.composer, "Hi")
    click(window.sendButton)
    qtbot.waitUntil(lambda: any(r.status == "complete" for r in rows(window, "assistant")), timeout=WAIT_MS)
    sent = [r for r in fault_server.requests if r.path == "/v1/chat/completions"]
    assert [r.headers["authorization"] for r in sent] == [f"Bearer {RIGHT_KEY}"]

    select(dialog, "lab")
    click(dialog.removeKeyButton)
    assert "Remove the API key for “lab”" in session.answers.confirmations[-1]
    qtbot.waitUntil(lambda: "lab: API key refused" in picker_texts(window), timeout=WAIT_MS)
    assert dialog.statusLabel.text() == "Removed the API key for lab."
    assert listed(dialog)["lab"][KEY] == "None" and not dialog.removeKeyButton.isEnabled()
    assert stored_key("lab") is None
    assert "authorization" not in {h.lower() for h in fault_server.requests[-1].headers}


def test_a_key_the_keyring_cannot_take_is_used_for_this_session_and_says_so(
    gui: GuiSessions, qtbot: QtBot, fault_server: FaultServer, hermetic_home: Path
) -> None:
    fault_server.api_key = RIGHT_KEY
    ServerRegistry(hermetic_home).add("lab", fault_server.url)
    keyring.set_keyring(FailKeyring())  # type: ignore[no-untyped-call]
    session = gui.open(resolve_home(), preload_model=False)
    window = session.window
    qtbot.waitUntil(lambda: "lab: API key refused" in picker_texts(window), timeout=WAIT_MS)
    window.serversAction.trigger()
    dialog = window.serversDialog
    assert dialog is not None
    qtbot.waitExposed(dialog)
    select(dialog, "lab")
    assert listed(dialog)["lab"][KEY] == "Unknown"
    assert "No system keyring is available" in dialog.detailLabel.text()
    click(dialog.changeKeyButton)
    assert dialog.keyDialog is not None
    QTest.keyClicks(dialog.keyDialog.keyEdit, RIGHT_KEY)
    click(dialog.keyDialog.saveButton)
    qtbot.waitUntil(lambda: "lab/echo" in picker_texts(window), timeout=WAIT_MS)
    assert dialog.statusLabel.text().startswith(
        "Using the new API key for lab for this session only: No system"
    )
    assert listed(dialog)["lab"][KEY] == "This session only"
    assert "the API key is kept for this session only" in dialog.detailLabel.text()
    assert RIGHT_KEY not in (hermetic_home / SERVERS_FILE).read_text()


def test_change_a_servers_ca_bundle_and_go_back_to_the_systems(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path, tmp_path: Path
) -> None:
    certificates = make_certificates(tmp_path)
    with serve_faults(certificates=certificates) as server:
        ServerRegistry(hermetic_home).add("internal", server.url)
        session = gui.open(resolve_home(), preload_model=False)
        window = session.window
        qtbot.waitUntil(lambda: "internal: certificate not trusted" in picker_texts(window), timeout=WAIT_MS)
        dialog = open_manager(qtbot, window)
        select(dialog, "internal")
        assert "could not be verified" in dialog.detailLabel.text()
        assert listed(dialog)["internal"][STATE] == "Certificate not trusted"

        session.answers.open_path = None
        click(dialog.changeCaButton)
        assert session.answers.file_dialogs[-1] == "CA bundle for internal"
        assert listed(dialog)["internal"][CA] == "System"

        session.answers.open_path = certificates.ca
        click(dialog.changeCaButton)
        qtbot.waitUntil(lambda: "internal/echo" in picker_texts(window), timeout=WAIT_MS)
        assert listed(dialog)["internal"][CA] == "ca.pem"
        assert saved_servers(hermetic_home)[0]["ca_bundle"] == str(certificates.ca)
        assert dialog.statusLabel.text() == f"internal is checked against the CAs in {certificates.ca}."

        click(dialog.systemCaButton)
        qtbot.waitUntil(lambda: "internal: certificate not trusted" in picker_texts(window), timeout=WAIT_MS)
        assert saved_servers(hermetic_home)[0]["ca_bundle"] is None
        assert "could not be verified" in dialog.detailLabel.text()

    click(dialog.addButton)
    assert window.serverDialog is not None
    qtbot.waitExposed(window.serverDialog)


def test_a_server_that_comes_up_is_listed_when_the_picker_is_opened_again(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path
) -> None:
    with serve_faults() as first:
        port = first.port
    ServerRegistry(hermetic_home).add("later", first.url)
    session = gui.open(resolve_home(), preload_model=False)
    window = session.window
    qtbot.waitUntil(lambda: "later: not reachable" in picker_texts(window), timeout=WAIT_MS)

    with serve_faults(port=port) as server:
        window.modelPicker.showPopup()
        qtbot.waitUntil(lambda: "later/echo" in picker_texts(window), timeout=WAIT_MS)
        window.modelPicker.hidePopup()
        # One listing (with TGI's /info asked for the context, which its model list does not give).
        assert [r.path for r in server.requests] == ["/v1/models", "/info"]
        # Listed fine: opening the picker again asks nothing (a listing would show as Checking… at once).
        window.modelPicker.showPopup()
        window.modelPicker.hidePopup()
        dialog = open_manager(qtbot, window)
        assert listed(dialog)["later"][STATE] == str(len(FAULT_MODELS))

    # Refresh models: it is down again, and the picker says so.
    click(dialog.refreshButton)
    qtbot.waitUntil(lambda: "later: not reachable" in picker_texts(window), timeout=WAIT_MS)
    assert "later/echo" not in picker_texts(window)
    qtbot.waitUntil(lambda: listed(dialog)["later"][STATE] == "Not reachable", timeout=WAIT_MS)


def test_a_slow_server_holds_up_neither_the_window_nor_the_other_servers(
    gui: GuiSessions, qtbot: QtBot, fault_server: FaultServer, hermetic_home: Path
) -> None:
    with serve_faults(hold_models=True) as slow:
        registry = ServerRegistry(hermetic_home)
        registry.add("a-slow", slow.url)
        registry.add("quick", fault_server.url)
        session = gui.open(resolve_home(), preload_model=False)
        window = session.window
        ticker = Ticker()
        started = time.monotonic()
        qtbot.waitUntil(lambda: "quick/echo" in picker_texts(window), timeout=WAIT_MS)
        dialog = open_manager(qtbot, window)
        assert listed(dialog)["a-slow"][STATE] == "Checking…"
        assert listed(dialog)["quick"][STATE] == str(len(FAULT_MODELS))

        # The user's changes do not wait for the slow listing either.
        select(dialog, "quick")
        click(dialog.removeButton)
        qtbot.waitUntil(lambda: "quick/echo" not in picker_texts(window), timeout=WAIT_MS)
        assert set(listed(dialog)) == {"a-slow"} and listed(dialog)["a-slow"][STATE] == "Checking…"
        # Refresh while it is still being asked: no second request piles up.
        with qtbot.waitSignal(session.services.servers_service.changed, timeout=WAIT_MS):
            click(dialog.refreshButton)
        ended = time.monotonic()
        ticker.stop()
        assert [r.path for r in slow.requests] == ["/v1/models"]
        assert listed(dialog)["a-slow"][STATE] == "Checking…"

        slow.release.set()
        qtbot.waitUntil(lambda: "a-slow/echo" in picker_texts(window), timeout=WAIT_MS)
        assert listed(dialog)["a-slow"][STATE] == str(len(FAULT_MODELS))
    gap = ticker.max_gap_between(started, ended)
    assert gap < MAX_EVENT_LOOP_GAP_S, f"the event loop stalled for {gap:.3f} s"


def test_closing_does_not_wait_for_a_server_that_never_answers_the_model_list(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Left to its timeout, the listing would keep the closing window waiting for minutes.
    monkeypatch.setattr(openai_client_module, "LIST_TIMEOUT_S", 600.0)
    with serve_faults(hold_models=True) as silent:
        ServerRegistry(hermetic_home).add("silent", silent.url)
        session = gui.open(resolve_home(), preload_model=False)
        qtbot.waitUntil(lambda: len(silent.requests) == 1, timeout=WAIT_MS)
        closed = threading.Event()
        service = session.services.servers_service

        def close() -> None:
            service.shutdown()
            closed.set()

        closer = threading.Thread(target=close)
        closer.start()
        try:
            assert closed.wait(WAIT_MS / 1000), "closing waited for the server to answer"
        finally:
            silent.release.set()
            closer.join()


def test_a_server_removed_elsewhere_meanwhile_is_one_clear_message(
    gui: GuiSessions, qtbot: QtBot, fault_server: FaultServer, hermetic_home: Path
) -> None:
    ServerRegistry(hermetic_home).add("lab", fault_server.url)
    session = gui.open(resolve_home(), preload_model=False)
    window = session.window
    qtbot.waitUntil(lambda: "lab/echo" in picker_texts(window), timeout=WAIT_MS)
    dialog = open_manager(qtbot, window)
    select(dialog, "lab")
    # Another Hearth, or `hearth servers remove`, got there first.
    ServerRegistry(hermetic_home).remove("lab")
    click(dialog.removeButton)
    qtbot.waitUntil(lambda: "no server named “lab”" in dialog.statusLabel.text(), timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not listed(dialog) and "lab/echo" not in picker_texts(window), timeout=WAIT_MS)
    assert "Manage servers…" not in picker_texts(window)


# -- text from servers and users is shown as written ----------------------------------------------------

HOSTILE_ERROR = (
    '<b>bold</b> <img src="https://attacker.invalid/pixel.png"> <a href="https://x.invalid">here</a>'
)


class _HostileModels(BaseHTTPRequestHandler):
    """A server whose model list fails with markup in its OpenAI-style error message."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        body = json.dumps({"error": {"message": HOSTILE_ERROR, "type": "server_error"}}).encode()
        self.send_response(500)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def serve_hostile_errors() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _HostileModels)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="hostile-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def shown_tooltip(text: str) -> QTextDocument:
    """A tooltip as QToolTip's label renders it: as HTML whenever Qt guesses it is."""
    document = QTextDocument()
    if QtGui.Qt.mightBeRichText(text):
        document.setHtml(text)
    else:
        document.setPlainText(text)
    return document


def test_markup_in_a_servers_error_and_a_bundles_path_is_shown_literally(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path, tmp_path: Path
) -> None:
    # A real CA bundle (it is loaded even for http) under a file name that is markup.
    bundle = tmp_path / "<img src=x>.pem"
    bundle.write_bytes(make_certificates(tmp_path).ca.read_bytes())
    with serve_hostile_errors() as url:
        ServerRegistry(hermetic_home).add("lab", url, ca_bundle=bundle)
        session = gui.open(resolve_home(), preload_model=False)
        window = session.window
        qtbot.waitUntil(lambda: "lab: cannot list its models" in picker_texts(window), timeout=WAIT_MS)
        index = picker_texts(window).index("lab: cannot list its models")
        picker_tip = window.modelPicker.itemData(index, Qt.ItemDataRole.ToolTipRole)
        assert HOSTILE_ERROR in shown_tooltip(picker_tip).toPlainText()
        dialog = open_manager(qtbot, window)
        select(dialog, "lab")
        (item,) = dialog.serverList.findItems("lab", Qt.MatchFlag.MatchExactly, NAME)

        error = shown_tooltip(item.toolTip(STATE)).toPlainText()
        assert HOSTILE_ERROR in error, "every tag shows as typed: nothing bold, fetched or linked"
        assert error.startswith("lab failed with a server error (500: ")
        assert shown_tooltip(item.toolTip(CA)).toPlainText() == str(bundle)
        assert dialog.detailLabel.textFormat() == Qt.TextFormat.PlainText
        assert HOSTILE_ERROR in dialog.detailLabel.text()


# -- the context of a server's models ------------------------------------------------------------------


def test_a_context_typed_in_add_server_is_checked_and_saved(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path
) -> None:
    session = gui.open(resolve_home(), preload_model=False)
    window = session.window
    with serve_faults() as server:
        dialog = open_dialog(qtbot, window)
        fill(dialog, "lab", server.url)
        QTest.keyClicks(dialog.contextEdit, "lots")
        click(dialog.saveButton)
        assert dialog.statusLabel.text().startswith("“lots” is not a context length")
        assert not dialog.busy and not (hermetic_home / SERVERS_FILE).exists()

        dialog.contextEdit.clear()
        QTest.keyClicks(dialog.contextEdit, "16384")
        click(dialog.saveButton)
        qtbot.waitUntil(lambda: "lab/echo" in picker_texts(window), timeout=REPLY_TIMEOUT_MS)
        assert saved_servers(hermetic_home) == [
            {"name": "lab", "url": server.url, "ca_bundle": None, "context_tokens": 16384}
        ]


def test_the_meter_estimates_a_servers_model_against_the_context_it_reports_or_the_one_set(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path
) -> None:
    with serve_faults(max_model_len={"echo": 4096}) as server:
        ServerRegistry(hermetic_home).add("lab", server.url)
        home = resolve_home()
        save_settings(home.settings_path, Settings(default_model="lab/echo"))
        session = gui.open(home)
        window = session.window
        meter = window.contextMeter
        qtbot.waitUntil(lambda: "lab/echo" in picker_texts(window), timeout=WAIT_MS)
        pick(window, "lab/echo")
        draft = "How far does the light reach?"
        QTest.keyClicks(window.composer, draft)

        def shown(context: int) -> bool:
            usage = meter.usage
            return usage is not None and usage.estimated and usage.context_tokens == context

        qtbot.waitUntil(lambda: shown(4096), timeout=WAIT_MS)
        assert meter.tokens.text() == f"≈ {estimate_tokens(draft)} / 4,096 tokens (estimate)"
        explained = shown_tooltip(meter.tokens.toolTip()).toPlainText()
        assert "The 4,096-token context is what the server reports for this model." in explained
        assert (
            "Estimated at about four characters a token: the server's own tokenizer is not here." in explained
        )

        dialog = open_manager(qtbot, window)
        select(dialog, "lab")
        assert listed(dialog)["lab"][CONTEXT] == "4,096"
        click(dialog.changeContextButton)
        asked = dialog.contextDialog
        assert asked is not None and asked.contextEdit.text() == ""
        QTest.keyClicks(asked.contextEdit, "0")
        click(asked.saveButton)
        assert "cannot be a server's context length" in asked.noteLabel.text() and asked.isVisible()
        asked.contextEdit.clear()
        QTest.keyClicks(asked.contextEdit, "32,768")
        click(asked.saveButton)
        qtbot.waitUntil(lambda: listed(dialog)["lab"][CONTEXT] == "32,768", timeout=WAIT_MS)
        assert dialog.statusLabel.text() == "lab's models are planned for 32,768 tokens."
        assert saved_servers(hermetic_home)[0]["context_tokens"] == 32768
        qtbot.waitUntil(lambda: shown(32768), timeout=WAIT_MS)
        explained = shown_tooltip(meter.tokens.toolTip()).toPlainText()
        assert "The 32,768-token context is this server's setting." in explained
