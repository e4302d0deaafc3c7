"""The local API server from the window: the switch, the port, the key, the busy indicator, the queue."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QCheckBox
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from app.settings import Settings, save_settings
from tests.helpers.ui_fixtures import GuiSession, GuiSessions, click
from ui.local_server_panel import LocalServerDialog, LocalServerPanel

pytestmark = pytest.mark.gui

TIMEOUT_MS = 120_000
STORY: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Write a very long story about a lighthouse keeper."}
]


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
    qtbot.waitUntil(lambda: panel.keyEdit.text() != "", timeout=TIMEOUT_MS)
    return panel


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
def test_switch_serves_the_model_shows_busy_and_a_new_key_locks_the_old_one_out(
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
    assert panel.keyEdit.echoMode() == panel.keyEdit.EchoMode.Password
    assert panel.urlLabel.text() == f"http://127.0.0.1:{port}/v1"

    toggle(panel.switch)
    assert not panel.portSpin.isEnabled()  # not while it starts either
    # The service's state is set on its thread; the widgets hear of it through a queued signal.
    qtbot.waitUntil(lambda: shown_running(panel) and indicator.isVisible(), timeout=TIMEOUT_MS)
    assert session.services.local_server.state.running
    assert panel.switch.isChecked() and not indicator.busy
    assert session.services.settings.local_server_enabled

    click(panel.copyKeyButton)
    key = QGuiApplication.clipboard().text()
    assert key == panel.keyEdit.text() and key.startswith("hearth-")
    with api(session, key) as client:
        name = engine.loaded_model_name
        assert name is not None and [m.id for m in client.models.list()] == [name]
        stream = client.chat.completions.create(model=name, messages=STORY, max_tokens=2000, stream=True)
        next(iter(stream))
        # The indicator and the panel hear of the request through separate signals.
        qtbot.waitUntil(lambda: indicator.busy and "1" in panel.statusLabel.text(), timeout=TIMEOUT_MS)
        assert indicator.font().bold() and "1" in indicator.text()
        stream.close()
        qtbot.waitUntil(lambda: not indicator.busy, timeout=TIMEOUT_MS)

    click(panel.newKeyButton)
    qtbot.waitUntil(lambda: panel.keyEdit.text() != key, timeout=TIMEOUT_MS)
    with api(session, key) as client, pytest.raises(openai.AuthenticationError):
        client.models.list()
    with api(session, panel.keyEdit.text()) as client:
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
    assert server.key is not None and server.key.value is not None
    with api(session, server.key.value) as client:
        # Nothing is loaded in this window, so nothing is listed.
        assert list(client.models.list()) == []
    session.close()
    assert refused(port)


@pytest.fixture
def serving_home(home: HearthPaths, starter_model: Path) -> Iterator[HearthPaths]:
    save_settings(
        home.settings_path,
        Settings(local_server_enabled=True, local_server_port=free_port(), max_tokens=8, temperature=0.0),
    )
    yield home


@pytest.mark.model
def test_a_reply_waits_for_an_api_request_and_stop_while_waiting_gives_the_prompt_back(
    qtbot: QtBot, gui: GuiSessions, serving_home: HearthPaths
) -> None:
    session = gui.open(serving_home)
    window, services = session.window, session.services
    engine = services.chat.engine
    qtbot.waitUntil(
        lambda: engine.loaded_model_name is not None and services.local_server.key is not None,
        timeout=TIMEOUT_MS,
    )
    qtbot.waitUntil(lambda: services.local_server.state.running, timeout=TIMEOUT_MS)
    key = services.local_server.key
    assert key is not None and key.value is not None
    with api(session, key.value) as client:
        name = engine.loaded_model_name
        assert name is not None
        stream = client.chat.completions.create(model=name, messages=STORY, max_tokens=2000, stream=True)
        next(iter(stream))  # the API request has the runner

        QTest.keyClicks(window.composer, "Say hello.")
        click(window.sendButton)
        qtbot.waitUntil(lambda: engine.waiting_jobs == 1, timeout=TIMEOUT_MS)
        click(window.stopButton)  # leaves the line: nothing was sent, the prompt comes back
        qtbot.waitUntil(lambda: window.composer.toPlainText() == "Say hello.", timeout=TIMEOUT_MS)
        assert services.store.list_conversations() == []
        assert engine.waiting_jobs == 0

        QTest.keyClick(window.composer, Qt.Key.Key_Return)
        qtbot.waitUntil(lambda: engine.waiting_jobs == 1, timeout=TIMEOUT_MS)
        stream.close()  # the API client hangs up: the runner goes to the waiting reply
    qtbot.waitUntil(lambda: window.sendButton.isEnabled(), timeout=TIMEOUT_MS)
    (conversation,) = services.store.list_conversations()
    reply = services.store.list_messages(conversation.id)[-1]
    assert reply.role == "assistant" and reply.status == "complete" and reply.content
