"""Tools for a model on an OpenAI-compatible server (tests.helpers.openai_peer's "tools" model, which
streams two calls in pieces as OpenAI and vLLM do), run on a real MCP server; the results go back as `tool`
messages and the reply after them is stored like any."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest

from app.chat.engine import ChatEngine
from app.core import Core
from app.remote.registry import ServerRegistry
from app.storage.orm import MessageStatus
from app.tools.chat import Approval, ToolSet
from app.tools.host import ToolHost
from tests.app.chat.test_tool_turns import QUICK, Answers
from tests.helpers.openai_peer import FaultServer, serve_faults


@pytest.fixture
def lab(core: Core) -> Iterator[FaultServer]:
    with serve_faults() as server:
        ServerRegistry(core.paths.home).add("lab", server.url)
        yield server


def test_a_servers_model_calls_tools_and_answers_after_the_results(
    core: Core, lab: FaultServer, tool_host: ToolHost, make_engine: Callable[..., ChatEngine]
) -> None:
    engine = make_engine(servers=ServerRegistry(core.paths.home))
    answers = Answers(Approval.ALLOW_IN_CHAT)
    result = engine.run_turn(
        "Add", "lab/tools", sampling=QUICK, callbacks=answers, tools=ToolSet.open(tool_host, ["maths"])
    )
    assert (result.status, result.text) == (MessageStatus.COMPLETE, "Results: 42, 2")
    assert len(answers.asked) == 1, "allowed for the chat: the second call was not asked about"
    path = core.store.list_messages(result.conversation_id)
    assert [m.role for m in path] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [(c.call_id, c.text) for c in path[1].tool_calls] == [
        ("call_one", '{"a": 2, "b": 40}'),
        ("call_two", '{"a": 1, "b": 1}'),
    ]
    assert path[4].server_name == "lab"
    # The server was offered the tools in OpenAI's shape, then sent the calls and their results.
    chats = [r.body for r in lab.requests if r.path.endswith("/chat/completions") and r.body is not None]
    first, second = chats
    assert first["tools"][0]["function"]["name"] == "add"
    assert first["tools"][0]["function"]["parameters"]["required"] == ["a", "b"]
    calling, one, two = second["messages"][-3:]
    assert calling["role"] == "assistant" and [c["id"] for c in calling["tool_calls"]] == [
        "call_one",
        "call_two",
    ]
    assert json.loads(calling["tool_calls"][0]["function"]["arguments"]) == {"a": 2, "b": 40}
    assert (one["role"], one["tool_call_id"], one["content"]) == ("tool", "call_one", "42")
    assert (two["tool_call_id"], two["content"]) == ("call_two", "2")
