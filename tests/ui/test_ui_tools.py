"""A conversation in which the model called tools, as the window shows it: each call a card under the reply
that made it, each result a card in a row of its own, their text in code blocks (data, never Markdown)."""

from __future__ import annotations

import json
import shlex
import sys
import threading
from pathlib import Path

import pytest
from PySide6.QtWidgets import QTreeWidgetItem
from pytestqt.qtbot import QtBot

from app.conversations.store import ConversationStore, Message, PartInput, ReplyProvenance
from app.paths import HearthPaths
from app.remote.registry import ServerRegistry
from app.storage.orm import MessageStatus
from app.tools.config import ToolServerRegistry
from tests.helpers.mcp_tool_server import stdio_transport
from tests.helpers.openai_peer import FaultServer
from tests.helpers.ui_fixtures import GuiSessions, click, click_conversation, pick, rows, titles
from ui.main_window import MainWindow
from ui.tool_widgets import ToolApprovalCard
from ui.tools_panel import ToolsDialog

WAIT_MS = 30_000


def test_calls_and_results_show_in_the_transcript(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path
) -> None:
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    store = session.services.store
    provenance = ReplyProvenance("SmolTools", "ab" * 32, {}, 1)
    turn = store.begin_turn(None, prompt="What is 2 + 40?", after=None, system_prompt=None, reply=provenance)
    call = PartInput("tool_call", "add", text='{"a": 2, "b": 40}', call_id="c4ll0aaaa")
    store.finish_message(
        turn.reply.id, content="Let me add.", status=MessageStatus.COMPLETE, tool_calls=[call]
    )
    # A result with backticks of its own and Markdown that must stay text.
    result = "**42** ``` not a fence"
    tool = store.add_tool_result(turn.reply.id, call_id="c4ll0aaaa", tool_name="add", text=result)
    failed = store.add_tool_result(tool.id, call_id="c4ll0bbbb", tool_name="add", text="no", is_error=True)
    answer = store.begin_turn(
        turn.conversation_id, prompt=None, after=failed.id, system_prompt=None, reply=provenance
    )
    store.finish_message(answer.reply.id, content="It is 42.", status=MessageStatus.COMPLETE)
    window = session.window
    window.refresh_conversations()
    qtbot.waitUntil(lambda: "What is 2 + 40?" in titles(window), timeout=WAIT_MS)
    click_conversation(qtbot, window, "What is 2 + 40?")
    qtbot.waitUntil(lambda: len(rows(window)) == 5, timeout=WAIT_MS)
    assert [row.role for row in rows(window)] == ["user", "assistant", "tool", "tool", "assistant"]
    calling, returned, refused = rows(window)[1:4]
    assert calling.text == "Let me add." and returned.text == "" and refused.text == ""
    assert [(card.kind, card.tool, card.text) for card in calling.cards] == [
        ("call", "add", '{\n  "a": 2,\n  "b": 40\n}')
    ]
    assert [(card.kind, card.text, card.failed) for card in returned.cards] == [("result", result, False)]
    assert [(card.text, card.failed) for card in refused.cards] == [("no", True)]
    # Copied, each is its heading and its text in a code block.
    assert calling.copy_text == 'Let me add.\n\nCalled `add`\n\n```json\n{\n  "a": 2,\n  "b": 40\n}\n```'
    assert returned.copy_text == f"`add` returned\n\n````\n{result}\n````"
    assert refused.copy_text == "`add` failed\n\n```\nno\n```"


def test_a_call_is_asked_about_in_the_window_and_the_reply_follows_its_results(
    gui: GuiSessions, qtbot: QtBot, fault_server: FaultServer, hermetic_home: Path
) -> None:
    """A server's model (the test server's "tools" model makes two calls of the first tool offered) with a
    real MCP server: the user turns the server on in the Tools menu, allows the first call for the chat,
    and the second runs without asking."""
    ServerRegistry(hermetic_home).add("lab", fault_server.url)
    registry = ToolServerRegistry(hermetic_home)
    registry.add("maths", stdio_transport())
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    window = session.window
    qtbot.waitUntil(lambda: window.modelPicker.findData("lab/tools") >= 0, timeout=WAIT_MS)
    pick(window, "lab/tools")
    picker = window.chatArea.toolsPicker
    picker.fill_menu()
    [maths] = [a for a in picker.menu_.actions() if a.text() == "maths"]
    maths.trigger()
    assert picker.text() == "Tools (1)"

    window.composer.setPlainText("Add them")
    click(window.sendButton)
    card = window.chatArea.toolApproval
    qtbot.waitUntil(card.isVisible, timeout=WAIT_MS)
    assert card.question.text() == "The model wants to run add on maths. Allow it?"
    assert json.loads(card.arguments.toPlainText()) == {"a": 2, "b": 40}
    click(card.allowInChatButton)
    qtbot.waitUntil(
        lambda: (
            [r.role for r in rows(window)] == ["user", "assistant", "tool", "tool", "assistant"]
            and rows(window)[-1].status == "complete"
        ),
        timeout=WAIT_MS,
    )
    assert not card.isVisible()
    assert rows(window)[-1].entry.content == "Results: 42, 2"
    assert rows(window)[2].copy_text == "`add` returned\n\n```\n42\n```"


def ask_with_maths(qtbot: QtBot, window: MainWindow) -> ToolApprovalCard:
    """The test server's "tools" model, with the maths server turned on for the chat, asked to add: its
    first call waits for the user's answer on the card returned."""
    qtbot.waitUntil(lambda: window.modelPicker.findData("lab/tools") >= 0, timeout=WAIT_MS)
    pick(window, "lab/tools")
    window.chatArea.toolsPicker.fill_menu()
    next(a for a in window.chatArea.toolsPicker.menu_.actions() if a.text() == "maths").trigger()
    window.composer.setPlainText("Add them")
    click(window.sendButton)
    card = window.chatArea.toolApproval
    qtbot.waitUntil(card.isVisible, timeout=WAIT_MS)
    return card


def test_a_reply_after_tool_results_ends_complete_though_the_branch_read_as_it_began_comes_late(
    gui: GuiSessions,
    qtbot: QtBot,
    fault_server: FaultServer,
    hermetic_home: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The branch is read again as the model answers the results; a slow read taken while that reply was
    being written can arrive after the reply ended. The window still ends on the stored conversation."""
    ServerRegistry(hermetic_home).add("lab", fault_server.url)
    ToolServerRegistry(hermetic_home).add("maths", stdio_transport())
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    window = session.window
    ended = threading.Event()
    window.session.reply_finished.connect(lambda _finished: ended.set())
    held = threading.Event()
    read = ConversationStore.list_messages

    def read_slowly(store: ConversationStore, conversation_id: int) -> list[Message]:
        messages = read(store, conversation_id)
        after_results = len(messages) > 1 and messages[-2].role == "tool"
        written = messages[-1].status == MessageStatus.STREAMING if messages else False
        if after_results and written and not held.is_set():
            # Handed back only once the window has heard that this reply ended.
            held.set()
            ended.wait(WAIT_MS / 1000)
        return messages

    monkeypatch.setattr(ConversationStore, "list_messages", read_slowly)
    card = ask_with_maths(qtbot, window)
    click(card.allowInChatButton)
    qtbot.waitUntil(lambda: ended.is_set() and not session.services.chat.busy, timeout=WAIT_MS)
    assert held.is_set(), "no read was taken while the reply after the results was being written"
    roles = ["user", "assistant", "tool", "tool", "assistant"]
    qtbot.waitUntil(
        lambda: [(r.role, r.status) for r in rows(window)] == [(role, "complete") for role in roles],
        timeout=WAIT_MS,
    )
    assert rows(window)[-1].entry.content == "Results: 42, 2"
    assert not rows(window)[-1].streaming


def test_stop_while_a_call_waits_denies_it_and_ends_the_chat(
    gui: GuiSessions, qtbot: QtBot, fault_server: FaultServer, hermetic_home: Path
) -> None:
    ServerRegistry(hermetic_home).add("lab", fault_server.url)
    ToolServerRegistry(hermetic_home).add("maths", stdio_transport())
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    window = session.window
    card = ask_with_maths(qtbot, window)
    click(window.chatArea.stopButton)
    qtbot.waitUntil(lambda: not card.isVisible() and not session.services.chat.busy, timeout=WAIT_MS)
    # The stored turn is read back once the reply ends.
    qtbot.waitUntil(lambda: any(r.role == "tool" for r in rows(window)), timeout=WAIT_MS)
    tools = [r for r in rows(window) if r.role == "tool"]
    [refusal] = tools[0].cards
    assert refusal.failed and "The user did not allow this call" in refusal.text


def first_server(dialog: ToolsDialog) -> QTreeWidgetItem:
    item = dialog.serverTree.topLevelItem(0)
    assert item is not None, "no server listed"
    return item


def test_tool_servers_are_added_checked_turned_off_and_removed_in_the_tools_dialog(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path
) -> None:
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    window = session.window
    window.menus.toolsAction.trigger()
    dialog = window.open_tools()
    assert dialog.isVisible() and dialog.serverTree.topLevelItemCount() == 0

    dialog.nameEdit.setText("maths")
    dialog.targetEdit.setText(f"{shlex.quote(sys.executable)} -m tests.helpers.mcp_tool_server")
    click(dialog.addButton)
    # Added (the keyring is asked off the GUI thread), then started and asked for its tools.
    qtbot.waitUntil(lambda: dialog.serverTree.topLevelItemCount() == 1, timeout=WAIT_MS)
    assert json.loads((hermetic_home / "mcp.json").read_text())["mcpServers"]["maths"]["args"] == [
        "-m",
        "tests.helpers.mcp_tool_server",
    ]
    qtbot.waitUntil(lambda: first_server(dialog).text(1) == "6 tools", timeout=WAIT_MS)
    item = first_server(dialog)
    tools = {child.text(0): child.text(2) for child in map(item.child, range(item.childCount())) if child}
    assert tools["add"] == "Add two whole numbers."

    item.setSelected(True)
    assert dialog.toggleButton.text() == "Turn off"
    click(dialog.toggleButton)
    qtbot.waitUntil(lambda: first_server(dialog).text(1) == "Off", timeout=WAIT_MS)
    assert json.loads((hermetic_home / "mcp.json").read_text())["mcpServers"]["maths"]["disabled"] is True
    # The Tools menu offers only servers that are on.
    picker = window.chatArea.toolsPicker
    picker.fill_menu()
    assert [a.text() for a in picker.menu_.actions() if a.text()] == [
        "No tool servers yet",
        "Manage tool servers…",
    ]

    first_server(dialog).setSelected(True)
    click(dialog.removeButton)
    qtbot.waitUntil(lambda: dialog.serverTree.topLevelItemCount() == 0, timeout=WAIT_MS)
    assert json.loads((hermetic_home / "mcp.json").read_text())["mcpServers"] == {}

    dialog.nameEdit.setText("bad name")
    dialog.targetEdit.setText("uvx thing")
    click(dialog.addButton)
    qtbot.waitUntil(lambda: "cannot name a tool server" in dialog.statusLabel.text(), timeout=WAIT_MS)
