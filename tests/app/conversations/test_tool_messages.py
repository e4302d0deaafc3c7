"""Tool calls and their results in the conversation tree: a reply's calls are parts of it, each result a
message of its own (role `tool`) after it; they are searched, exported (format version 4) and imported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import text

from app.conversations.store import ConversationStore, PartInput, ReplyProvenance
from app.storage.orm import MessageStatus

PROVENANCE = ReplyProvenance("SmolLM2", "ab" * 32, {"temperature": 0.0}, 1)


def a_turn_with_a_tool(store: ConversationStore) -> tuple[int, list[int]]:
    """A question, a reply that calls two tools, their results, and the answer after them."""
    turn = store.begin_turn(
        None, prompt="Weather in Paris and Lyon?", after=None, system_prompt=None, reply=PROVENANCE
    )
    calls = [
        PartInput("tool_call", "get_weather", text='{"city": "Paris"}', call_id="c4ll0aaaa"),
        PartInput("tool_call", "get_weather", text='{"city": "Lyon"}', call_id="c4ll0bbbb"),
    ]
    assert store.finish_message(
        turn.reply.id, content="Let me look.", status=MessageStatus.COMPLETE, tool_calls=calls
    )
    paris = store.add_tool_result(
        turn.reply.id, call_id="c4ll0aaaa", tool_name="get_weather", text="18 °C, drizzle"
    )
    lyon = store.add_tool_result(
        paris.id, call_id="c4ll0bbbb", tool_name="get_weather", text="no station", is_error=True
    )
    answer = store.begin_turn(
        turn.conversation_id, prompt=None, after=lyon.id, system_prompt=None, reply=PROVENANCE
    )
    store.finish_message(
        answer.reply.id, content="Paris: 18 °C. Lyon: unknown.", status=MessageStatus.COMPLETE
    )
    return turn.conversation_id, [turn.prompt_id, turn.reply.id, paris.id, lyon.id, answer.reply.id]


def test_calls_and_results_are_nodes_and_parts_of_the_tree(store: ConversationStore) -> None:
    conversation, ids = a_turn_with_a_tool(store)
    path = store.list_messages(conversation)
    assert [m.id for m in path] == ids
    assert [m.role for m in path] == ["user", "assistant", "tool", "tool", "assistant"]
    reply, paris, lyon = path[1], path[2], path[3]
    assert [(c.name, c.text, c.call_id) for c in reply.tool_calls] == [
        ("get_weather", '{"city": "Paris"}', "c4ll0aaaa"),
        ("get_weather", '{"city": "Lyon"}', "c4ll0bbbb"),
    ]
    assert paris.tool_result is not None and lyon.tool_result is not None
    assert (paris.content, paris.tool_result.call_id, paris.tool_result.is_error) == (
        "18 °C, drizzle",
        "c4ll0aaaa",
        False,
    )
    assert (lyon.tool_result.name, lyon.tool_result.is_error) == ("get_weather", True)
    [hit] = [h for h in store.search("drizzle") if h.message_id is not None]
    assert (hit.message_id, hit.role) == (paris.id, "tool")
    with pytest.raises(ValueError, match="add_tool_result"):
        store.add_message(conversation, "tool", "made up")


def test_an_export_carries_the_calls_and_results_and_imports_as_it_was(
    store: ConversationStore, tmp_path: Path
) -> None:
    conversation, _ = a_turn_with_a_tool(store)
    exported = store.export_json(conversation)
    assert exported["version"] == 4
    messages = exported["messages"]
    assert messages[1]["tool_calls"] == [
        {"id": "c4ll0aaaa", "name": "get_weather", "arguments": '{"city": "Paris"}'},
        {"id": "c4ll0bbbb", "name": "get_weather", "arguments": '{"city": "Lyon"}'},
    ]
    assert {k: messages[3][k] for k in ("role", "content", "tool_call_id", "tool_name", "is_error")} == {
        "role": "tool",
        "content": "no station",
        "tool_call_id": "c4ll0bbbb",
        "tool_name": "get_weather",
        "is_error": True,
    }
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(exported), encoding="utf-8")
    [imported] = store.import_file(path).conversation_ids
    again = store.export_json(imported)
    assert _without_ids(again["messages"]) == _without_ids(messages)


def _without_ids(messages: list[dict[str, object]]) -> list[dict[str, object]]:
    kept = ("id", "parent_id", "created_at", "updated_at")
    return [{k: v for k, v in m.items() if k not in kept} for m in messages]


def fts_intact(store: ConversationStore, table: str) -> None:
    """FTS5's own check that the index holds exactly what its content says (a wrong 'delete' fails it)."""
    with store._db.session() as session:
        session.execute(text(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)"))


def test_a_call_is_found_by_its_tool_and_arguments_and_leaves_the_index_with_its_reply(
    store: ConversationStore,
) -> None:
    conversation, ids = a_turn_with_a_tool(store)
    reply_id = ids[1]
    # Only the call's arguments hold both words.
    hits = store.search("city lyon")
    assert [(h.message_id, h.role, h.in_tool_call) for h in hits] == [(reply_id, "assistant", True)]
    assert "\x02Lyon\x03" in hits[0].snippet and "get_weather" in hits[0].snippet
    # One hit per reply, however many of its calls match.
    assert [h.message_id for h in store.search("get_weather") if h.in_tool_call] == [reply_id]
    fts_intact(store, "tool_calls_fts")

    store.trash_conversation(conversation)
    assert store.search("get_weather") == []
    store.restore_conversation(conversation)
    store.delete_message(reply_id)
    assert store.search("get_weather") == []
    fts_intact(store, "tool_calls_fts")
    with store._db.read_session() as session:
        assert session.execute(text("SELECT count(*) FROM tool_calls_fts")).scalar() == 0
