"""A conversation in which the model called tools, as the window shows it: each call under the reply that
made it, each result as a row of its own, their text in code blocks (data, never Markdown)."""

from __future__ import annotations

from pathlib import Path

from pytestqt.qtbot import QtBot

from app.conversations.store import PartInput, ReplyProvenance
from app.paths import HearthPaths
from app.storage.orm import MessageStatus
from tests.helpers.ui_fixtures import GuiSessions, click_conversation, rows, titles

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
    calling, returned, refused = (row.entry.content for row in rows(window)[1:4])
    assert calling == 'Let me add.\n\nCalled `add`:\n\n```json\n{"a": 2, "b": 40}\n```'
    assert returned == f"`add` returned:\n\n````\n{result}\n````"
    assert refused.startswith("`add` failed:")
