"""The local API server from the window: the switch, the port, the keys, the busy indicator, the queue."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import keyring
import openai
import pytest
from keyring.backends.fail import Keyring as FailKeyring
from openai.types.chat import ChatCompletionMessageParam
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QCheckBox, QTreeWidgetItem
from pytestqt.qtbot import QtBot

from app.chat.runner_queue import Job
from app.local_api.api_keys import ApiKeys
from app.paths import HearthPaths, bundled_embedding_model
from app.settings import Settings, load_settings, save_settings
from tests.conftest import MemoryKeyring
from tests.helpers.ui_fixtures import GuiSession, GuiSessions, click
from ui.local_server_panel import LocalServerDialog, LocalServerPanel

pytestmark = pytest.mark.gui

TIMEOUT_MS = 120_000
STORY: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Write a very long story about a lighthouse keeper."}
]


def embedding_models() -> list[str]:
    """What /v1/models lists beside the chat model: the bundled embedding model, by its file's stem."""
    model = bundled_embedding_model()
    return [model.stem] if model is not None else []


def toggle(switch: QCheckBox) -> None:
    assert switch.isEnabled()
    QTest.mouseClick(switch, Qt.MouseButton.LeftButton, pos=QPoint(8, switch.height() // 2))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture
def home(hermetic_home: Path) -> HearthPaths:
    return HearthPaths(hermetic_home)


def open_panel(qtbot: QtBot, session: GuiSession) -> LocalServerPanel:
    session.window.localServerAction.trigger()
    dialog = session.window.findChild(LocalServerDialog)
    assert dialog is not None and dialog.isVisible()
    panel = dialog.panel
    qtbot.waitUntil(lambda: session.services.local_server.listing is not None, timeout=TIMEOUT_MS)
    return panel


def new_key(session: GuiSession, name: str = "test") -> str:
    """A key made through the service, as the panel's Create key… does."""
    created, _listing = session.services.local_server.create_key(name).result(timeout=TIMEOUT_MS / 1000)
    return created.secret


def create_in_panel(qtbot: QtBot, session: GuiSession, panel: LocalServerPanel, name: str) -> str:
    shown = panel.newKeyEdit.text()  # a key made before, if it is still on screen
    session.answers.text = name
    click(panel.createKeyButton)
    qtbot.waitUntil(
        lambda: panel.newKeyBox.isVisible() and panel.newKeyEdit.text() not in ("", shown), timeout=TIMEOUT_MS
    )
    return panel.newKeyEdit.text()


def item(panel: LocalServerPanel, row: int) -> QTreeWidgetItem:
    found = panel.keyList.topLevelItem(row)
    assert found is not None
    return found


def rows(panel: LocalServerPanel) -> list[list[str]]:
    count = panel.keyList.topLevelItemCount()
    return [[item(panel, row).text(column) for column in range(4)] for row in range(count)]


def shown_running(panel: LocalServerPanel) -> bool:
    return panel.statusLabel.text().startswith("On:")


def api(session: GuiSession, key: str) -> openai.OpenAI:
    url = session.services.local_server.state.url
    assert url is not None
    return openai.OpenAI(base_url=url, api_key=key, max_retries=0, timeout=120)


def refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


@pytest.mark.model
def test_switch_serves_the_model_shows_busy_and_a_revoked_key_is_locked_out(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, starter_model: Path
) -> None:
    port = free_port()
    save_settings(home.settings_path, Settings(local_server_port=port))
    session = gui.open(home)
    engine = session.services.chat.engine
    qtbot.waitUntil(lambda: engine.loaded_model_name is not None, timeout=TIMEOUT_MS)
    indicator = session.window.localServerIndicator
    panel = open_panel(qtbot, session)
    assert not panel.switch.isChecked() and indicator.isHidden() and refused(port)
    assert panel.urlLabel.text() == f"http://127.0.0.1:{port}/v1"

    toggle(panel.switch)
    assert not panel.portSpin.isEnabled()  # not while it starts either
    # The service's state is set on its thread; the widgets hear of it through a queued signal.
    qtbot.waitUntil(lambda: shown_running(panel) and indicator.isVisible(), timeout=TIMEOUT_MS)
    assert session.services.local_server.state.running
    assert panel.switch.isChecked() and not indicator.busy
    assert session.services.settings.local_server_enabled

    key = create_in_panel(qtbot, session, panel, "editor")
    click(panel.copyKeyButton)
    assert QGuiApplication.clipboard().text() == key and key.startswith("hearth-")
    with api(session, key) as client:
        name = engine.loaded_model_name
        assert name is not None and [m.id for m in client.models.list()] == [name, *embedding_models()]
        stream = client.chat.completions.create(model=name, messages=STORY, max_tokens=2000, stream=True)
        next(iter(stream))
        # The indicator and the panel hear of the request through separate signals.
        qtbot.waitUntil(lambda: indicator.busy and "1" in panel.statusLabel.text(), timeout=TIMEOUT_MS)
        assert indicator.font().bold() and "1" in indicator.text()
        stream.close()
        qtbot.waitUntil(lambda: not indicator.busy, timeout=TIMEOUT_MS)

    other = create_in_panel(qtbot, session, panel, "other")
    qtbot.waitUntil(lambda: len(rows(panel)) == 2, timeout=TIMEOUT_MS)
    panel.keyList.setCurrentItem(item(panel, 0))  # "editor"
    click(panel.revokeKeyButton)
    qtbot.waitUntil(lambda: len(rows(panel)) == 1, timeout=TIMEOUT_MS)
    with api(session, key) as client, pytest.raises(openai.AuthenticationError):
        client.models.list()
    with api(session, other) as client:
        assert [m.id for m in client.models.list()]

    toggle(panel.switch)
    qtbot.waitUntil(lambda: indicator.isHidden() and panel.statusLabel.text() == "Off.", timeout=TIMEOUT_MS)
    assert not session.services.local_server.state.running
    assert refused(port) and panel.portSpin.isEnabled() and not panel.switch.isChecked()
    assert not session.services.settings.local_server_enabled


def test_a_port_in_use_turns_the_switch_back_off_with_the_reason(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths
) -> None:
    session = gui.open(home, preload_model=False)
    panel = open_panel(qtbot, session)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        panel.portSpin.setValue(taken.getsockname()[1])
        toggle(panel.switch)
        qtbot.waitUntil(lambda: "already in use" in panel.statusLabel.text(), timeout=TIMEOUT_MS)
    assert not panel.switch.isChecked() and panel.portSpin.isEnabled()
    assert not session.services.settings.local_server_enabled
    indicator = session.window.localServerIndicator
    assert indicator.isVisible() and "already in use" in indicator.toolTip()


def test_a_server_left_on_starts_with_the_window_and_stops_with_it(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths
) -> None:
    port = free_port()
    save_settings(home.settings_path, Settings(local_server_enabled=True, local_server_port=port))
    session = gui.open(home, preload_model=False)
    server = session.services.local_server
    qtbot.waitUntil(lambda: session.window.localServerIndicator.isVisible(), timeout=TIMEOUT_MS)
    assert server.state.running
    with api(session, new_key(session)) as client:
        # Nothing is loaded in this window, so only the embedding model (which needs no loading) is listed.
        assert [m.id for m in client.models.list()] == embedding_models()
    session.close()
    assert refused(port)


@pytest.mark.model
def test_a_reply_waits_while_a_load_holds_the_runner_and_stop_while_waiting_gives_the_prompt_back(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, starter_model: Path
) -> None:
    save_settings(home.settings_path, Settings(max_tokens=8, temperature=0.0))
    session = gui.open(home)
    window, services = session.window, session.services
    engine = services.chat.engine
    qtbot.waitUntil(lambda: engine.loaded_model_name is not None, timeout=TIMEOUT_MS)
    # What a model switch from the library does: it has the runner alone (nothing here is a stand-in but
    # the load's length, which this hold stretches for as long as the test needs).
    loading, held = threading.Event(), threading.Event()

    def load() -> None:
        with engine._queue.turn(Job()):
            held.set()
            loading.wait(60)

    # The context meter's counts go first, on the same worker as the turn: done before the runner is held.
    meter = window.contextMeter
    qtbot.waitUntil(lambda: meter.usage is not None, timeout=TIMEOUT_MS)
    assert meter.usage is not None
    empty = meter.usage.used_tokens
    QTest.keyClicks(window.composer, "Say hello.")
    qtbot.waitUntil(lambda: meter.usage is not None and meter.usage.used_tokens > empty, timeout=TIMEOUT_MS)
    loader = threading.Thread(target=load)
    loader.start()
    try:
        assert held.wait(10)
        click(window.sendButton)
        qtbot.waitUntil(lambda: engine.waiting_jobs == 1, timeout=TIMEOUT_MS)
        click(window.stopButton)  # leaves the line: nothing was sent, the prompt comes back
        qtbot.waitUntil(lambda: window.composer.toPlainText() == "Say hello.", timeout=TIMEOUT_MS)
        assert services.store.list_conversations() == []
        assert engine.waiting_jobs == 0

        QTest.keyClick(window.composer, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: engine.waiting_jobs == 1, timeout=TIMEOUT_MS)
    finally:
        loading.set()  # the load is done: the waiting reply goes
        loader.join(10)
    qtbot.waitUntil(lambda: window.sendButton.isEnabled(), timeout=TIMEOUT_MS)
    (conversation,) = services.store.list_conversations()
    reply = services.store.list_messages(conversation.id)[-1]
    assert reply.role == "assistant" and reply.status == "complete" and reply.content


@pytest.mark.model
def test_the_window_answers_beside_an_api_request_and_the_panel_sets_how_many_replies_at_once(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, starter_model: Path
) -> None:
    save_settings(
        home.settings_path,
        Settings(local_server_enabled=True, local_server_port=free_port(), max_tokens=8, temperature=0.0),
    )
    session = gui.open(home)
    window, services = session.window, session.services
    engine = services.chat.engine
    qtbot.waitUntil(lambda: engine.loaded_model_name is not None, timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: services.local_server.state.running, timeout=TIMEOUT_MS)
    with api(session, new_key(session)) as client:
        name = engine.loaded_model_name
        assert name is not None
        stream = client.chat.completions.create(model=name, messages=STORY, max_tokens=2000, stream=True)
        next(iter(stream))  # the API request is being written

        QTest.keyClicks(window.composer, "Say hello.")
        click(window.sendButton)
        # Written beside it, not after it: the window's reply ends while the API's goes on.
        qtbot.waitUntil(lambda: window.sendButton.isEnabled(), timeout=TIMEOUT_MS)
        assert engine.waiting_jobs == 0
        (conversation,) = services.store.list_conversations()
        reply = services.store.list_messages(conversation.id)[-1]
        assert reply.role == "assistant" and reply.status == "complete" and reply.content
        assert next(iter(stream)).choices  # still streaming
        stream.close()

    panel = open_panel(qtbot, session)
    assert panel.parallelSpin.value() == 4
    panel.parallelSpin.setValue(2)
    assert services.settings.parallel_slots == 2
    qtbot.waitUntil(lambda: load_settings(home.settings_path).parallel_slots == 2, timeout=TIMEOUT_MS)


class RecordingKeyring(MemoryKeyring):
    """Notes the thread of every keyring call: none may be the GUI thread's."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[int] = set()

    def get_password(self, service: str, username: str) -> str | None:
        self.threads.add(threading.get_ident())
        return super().get_password(service, username)

    def set_password(self, service: str, username: str, password: str) -> None:
        self.threads.add(threading.get_ident())
        super().set_password(service, username, password)

    def delete_password(self, service: str, username: str) -> None:
        self.threads.add(threading.get_ident())
        super().delete_password(service, username)


def test_keys_are_made_shown_once_to_copy_listed_with_last_use_and_revoked_after_asking(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths
) -> None:
    recording = RecordingKeyring()
    keyring.set_keyring(recording)
    save_settings(home.settings_path, Settings(local_server_port=free_port()))
    session = gui.open(home, preload_model=False)
    panel = open_panel(qtbot, session)
    assert rows(panel) == [] and panel.noKeysLabel.isVisible() and not panel.newKeyBox.isVisible()
    assert panel.createKeyButton.isEnabled() and not panel.revokeKeyButton.isEnabled()
    toggle(panel.switch)
    qtbot.waitUntil(lambda: shown_running(panel), timeout=TIMEOUT_MS)

    key = create_in_panel(qtbot, session, panel, "editor")
    assert key.startswith("hearth-") and "“editor”" in panel.newKeyCaption.text()
    assert "not shown again" in panel.newKeyCaption.text()
    assert panel.keyNote.text() == "The key is kept in the system keyring."
    click(panel.copyKeyButton)
    assert QGuiApplication.clipboard().text() == key and panel.keyNote.text() == "The key was copied."
    qtbot.waitUntil(lambda: len(rows(panel)) == 1, timeout=TIMEOUT_MS)
    ((name, prefix, created, used),) = rows(panel)
    assert (name, prefix, used) == ("editor", key[:12] + "…", "Never") and created
    assert not panel.noKeysLabel.isVisible()

    # A taken name is refused with the reason, and nothing changes.
    session.answers.text = "Editor"
    click(panel.createKeyButton)
    qtbot.waitUntil(lambda: "already an API key" in panel.keyNote.text(), timeout=TIMEOUT_MS)
    assert len(rows(panel)) == 1 and panel.createKeyButton.isEnabled()

    with api(session, key) as client:
        client.models.list()  # accepted: no AuthenticationError
    session.services.local_server.load_keys()
    qtbot.waitUntil(lambda: rows(panel)[0][3] != "Never", timeout=TIMEOUT_MS)

    click(panel.doneKeyButton)
    assert not panel.newKeyBox.isVisible() and panel.newKeyEdit.text() == ""

    panel.keyList.setCurrentItem(item(panel, 0))
    session.answers.confirm = False
    click(panel.revokeKeyButton)
    assert "“editor”" in session.answers.confirmations[-1] and len(rows(panel)) == 1
    with api(session, key) as client:
        client.models.list()  # still accepted: the user said no
    session.answers.confirm = True
    click(panel.revokeKeyButton)
    qtbot.waitUntil(lambda: panel.keyNote.text().startswith("Revoked “editor”"), timeout=TIMEOUT_MS)
    assert rows(panel) == [] and panel.noKeysLabel.isVisible()
    with api(session, key) as client, pytest.raises(openai.AuthenticationError):
        client.models.list()
    assert recording.threads and threading.get_ident() not in recording.threads


def test_without_a_keyring_a_new_key_works_for_the_session_and_the_panel_says_it_will_not_last(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths
) -> None:
    keyring.set_keyring(FailKeyring())  # type: ignore[no-untyped-call]
    save_settings(home.settings_path, Settings(local_server_port=free_port()))
    session = gui.open(home, preload_model=False)
    panel = open_panel(qtbot, session)
    toggle(panel.switch)
    qtbot.waitUntil(lambda: shown_running(panel), timeout=TIMEOUT_MS)
    key = create_in_panel(qtbot, session, panel, "script")
    assert panel.keyNote.text().startswith("Session only:")
    assert "stops working when Hearth closes" in panel.keyNote.text()
    qtbot.waitUntil(lambda: len(rows(panel)) == 1, timeout=TIMEOUT_MS)
    assert rows(panel)[0][0] == "script (this session only)"
    with api(session, key) as client:
        client.models.list()
    session.close()
    assert ApiKeys(home.home).list_keys() == []  # nothing of it outlives the session
