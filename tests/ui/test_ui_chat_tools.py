"""The tool servers a chat may call, as the window keeps them: chosen in the Tools menu for the open chat,
stored with it, offered again after a restart; and the Tools dialog adding a server with the secrets it
needs (kept in the keyring, never in mcp.json), importing another app's servers, and removing one."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest
from PySide6.QtGui import QAction
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from app.tools.config import KEYRING_VALUE, ToolServerRegistry
from tests.helpers.mcp_tool_server import stdio_transport
from tests.helpers.ui_fixtures import GuiSessions, click, click_conversation, titles
from ui.main_window import MainWindow

WAIT_MS = 30_000


def menu_entries(window: MainWindow) -> dict[str, bool]:
    """What the Tools menu offers as it opens, with whether each is ticked."""
    picker = window.chatArea.toolsPicker
    picker.fill_menu()
    return {a.text(): a.isChecked() for a in picker.menu_.actions() if a.isCheckable()}


def tick(window: MainWindow, label: str) -> None:
    picker = window.chatArea.toolsPicker
    picker.fill_menu()
    [action] = [a for a in picker.menu_.actions() if a.text() == label]
    action.trigger()


def test_each_chat_keeps_the_tool_servers_chosen_for_it_across_a_restart(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path
) -> None:
    registry = ToolServerRegistry(hermetic_home)
    registry.add("maths", stdio_transport())
    registry.add("files", stdio_transport())
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    store = session.services.store
    sums, notes = store.create_conversation("Sums").id, store.create_conversation("Notes").id
    window = session.window
    window.refresh_conversations()
    qtbot.waitUntil(lambda: {"Sums", "Notes"} <= set(titles(window)), timeout=WAIT_MS)
    click_conversation(qtbot, window, "Sums")
    tick(window, "maths")
    picker = window.chatArea.toolsPicker
    assert picker.text() == "Tools (1)"
    qtbot.waitUntil(lambda: store.get_conversation(sums).tools == ("maths",), timeout=WAIT_MS)

    click_conversation(qtbot, window, "Notes")
    qtbot.waitUntil(lambda: window.current_conversation_id == notes, timeout=WAIT_MS)
    assert picker.text() == "Tools" and menu_entries(window) == {"files": False, "maths": False}
    click_conversation(qtbot, window, "Sums")
    qtbot.waitUntil(lambda: picker.text() == "Tools (1)", timeout=WAIT_MS)
    assert menu_entries(window) == {"files": False, "maths": True}
    session.close()

    # A new window on the same home, as after a restart; meanwhile the server was removed by hand.
    registry.remove("maths")
    reopened = gui.open(HearthPaths(hermetic_home), preload_model=False)
    again, store = reopened.window, reopened.services.store
    qtbot.waitUntil(lambda: "Sums" in titles(again), timeout=WAIT_MS)
    click_conversation(qtbot, again, "Sums")
    qtbot.waitUntil(lambda: again.chatArea.toolsPicker.text() == "Tools (1)", timeout=WAIT_MS)
    # Still ticked, so it can be unticked; the chat then offers no tools, and remembers that.
    assert menu_entries(again) == {"files": False, "maths (removed)": True}
    tick(again, "maths (removed)")
    assert again.chatArea.toolsPicker.text() == "Tools"
    qtbot.waitUntil(lambda: store.get_conversation(sums).tools == (), timeout=WAIT_MS)


def test_a_server_added_in_the_dialog_gets_its_secret_from_the_keyring_not_the_file(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path
) -> None:
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    session.window.menus.toolsAction.trigger()
    dialog = session.window.open_tools()
    dialog.secretNameEdit.setText("SERVICE_TOKEN")
    dialog.secretValueEdit.setText("s3cret-value")
    assert dialog.secretValueEdit.displayText() != "s3cret-value"  # typed hidden
    click(dialog.addSecretButton)
    assert dialog.secretValueEdit.text() == "" and "SERVICE_TOKEN" in dialog.secretsLabel.text()
    assert "s3cret-value" not in dialog.secretsLabel.text()
    dialog.nameEdit.setText("maths")
    dialog.targetEdit.setText(f"{shlex.quote(sys.executable)} -m tests.helpers.mcp_tool_server")
    click(dialog.addButton)
    qtbot.waitUntil(lambda: dialog.statusLabel.text() == "Added maths.", timeout=WAIT_MS)
    assert not dialog.secretsLabel.text().count("SERVICE_TOKEN")  # the next server starts with none

    written = (hermetic_home / "mcp.json").read_text()
    assert "s3cret-value" not in written
    assert json.loads(written)["mcpServers"]["maths"]["env"] == {"SERVICE_TOKEN": KEYRING_VALUE}
    # The server's own process sees it.
    host = session.services.chat.tool_host
    assert host is not None
    outcome = host.call("maths", "environment", json.dumps({"name": "SERVICE_TOKEN"}))
    assert outcome.text == "s3cret-value"

    # A bad name for a variable is said, and nothing is kept.
    dialog.secretNameEdit.setText("TWO WORDS")
    dialog.secretValueEdit.setText("x")
    click(dialog.addSecretButton)
    assert "NAME=VALUE" in dialog.statusLabel.text()
    assert "No environment variables" in dialog.secretsLabel.text()


def test_servers_are_imported_from_another_app_and_a_removal_is_confirmed(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where LM Studio keeps its servers, in the test's user home (Claude Desktop's and Cursor's are absent).
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    lmstudio = Path.home() / ".lmstudio" / "mcp.json"
    lmstudio.parent.mkdir(parents=True)
    transport = stdio_transport()
    lmstudio.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "maths": {"command": transport.command, "args": list(transport.args)},
                    "web": {"url": "http://127.0.0.1:9/sse", "transport": "sse"},
                }
            }
        )
    )
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    answers = session.answers
    dialog = session.window.open_tools()
    dialog.fill_import_menu()
    actions = {a.objectName(): a for a in dialog.importMenu.actions() if isinstance(a, QAction)}
    assert actions["import_lmstudio"].isEnabled() and not actions["import_claude"].isEnabled()
    assert not actions["import_cursor"].isEnabled()
    actions["import_lmstudio"].trigger()
    qtbot.waitUntil(lambda: dialog.statusLabel.text().startswith("Imported maths."), timeout=WAIT_MS)
    assert "Skipped web:" in dialog.statusLabel.text()
    assert [s.name for s in ToolServerRegistry(hermetic_home).servers()] == ["maths"]

    # Importing again keeps the server Hearth has, and says so.
    actions["import_lmstudio"].trigger()
    qtbot.waitUntil(lambda: "No servers were imported" in dialog.statusLabel.text(), timeout=WAIT_MS)
    # Any file, chosen in a file dialog: one that is not JSON is said.
    answers.open_path = tmp_path / "notes.txt"
    answers.open_path.write_text("not json")
    actions["import_file"].trigger()
    qtbot.waitUntil(lambda: "is not a JSON file" in dialog.statusLabel.text(), timeout=WAIT_MS)

    def select_first() -> None:
        item = dialog.serverTree.topLevelItem(0)
        assert item is not None
        item.setSelected(True)

    select_first()
    answers.confirm = False
    click(dialog.removeButton)
    assert "Remove the tool server “maths”" in answers.confirmations[-1]
    assert [s.name for s in ToolServerRegistry(hermetic_home).servers()] == ["maths"]
    answers.confirm = True
    select_first()
    click(dialog.removeButton)
    qtbot.waitUntil(lambda: dialog.statusLabel.text() == "Removed maths.", timeout=WAIT_MS)
    assert dialog.serverTree.topLevelItemCount() == 0
    assert ToolServerRegistry(hermetic_home).servers() == []
