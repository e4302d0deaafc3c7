"""Tools through the local API, with the official `openai` client: the loaded model's template is given
them, its calls come back as OpenAI `tool_calls` (whole and streamed), and the results a client sends
back reach the model as tool messages. Nothing is run by Hearth: the client runs its own tools. The model's
words come from a script (tests.app.chat.test_tool_turns.ScriptedTools); the runner counts every prompt."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam

from app.core import Core
from app.local_api.server import LocalServer
from app.settings import SettingsStore
from tests.app.chat.test_tool_turns import ADD_CALL, TOOLS_TEMPLATE, ScriptedTools
from tests.conftest import starter_model_file
from tests.helpers.model_files import with_chat_template

KEY = "hearth-test-key-tools"
ADD: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two whole numbers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}
QUESTION: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What is 2 + 40?"}]


@pytest.fixture
def scripted(core: Core, tmp_path: Path) -> Iterator[ScriptedTools]:
    starter = starter_model_file()
    assert starter is not None
    model = with_chat_template(starter, tmp_path / "SmolTools.gguf", TOOLS_TEMPLATE)
    name = core.library.import_file(model, name="SmolTools").name
    chat = ScriptedTools(
        core.store,
        core.library,
        SettingsStore(dataclasses.replace(core.settings)),
        runner_log=core.paths.runner_log_file,
    )
    chat.scripts, chat.requests = [], []
    chat.prepare(name)
    yield chat
    chat.close()


@pytest.fixture
def client(scripted: ScriptedTools) -> Iterator[openai.OpenAI]:
    server = LocalServer(scripted, KEY, port=0)
    server.start()
    try:
        with openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=120) as api:
            yield api
    finally:
        server.stop()


@pytest.mark.model
def test_a_call_comes_back_as_tool_calls_and_its_result_goes_to_the_model(
    scripted: ScriptedTools, client: openai.OpenAI
) -> None:
    scripted.scripts = [ADD_CALL, ["2 + 40 = 42."]]
    response = client.chat.completions.create(model="SmolTools", messages=QUESTION, tools=[ADD])
    choice = response.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "I will add them. "
    [call] = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "add"
    assert json.loads(call.function.arguments) == {"a": 2, "b": 40}
    assert [t.name for t in scripted.requests[0].tools] == ["add"]

    answered = client.chat.completions.create(
        model="SmolTools",
        messages=[
            *QUESTION,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": "add", "arguments": call.function.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "42"},
        ],
        tools=[ADD],
    )
    assert answered.choices[0].message.content == "2 + 40 = 42."
    assert answered.choices[0].finish_reason == "stop"
    calling, result = scripted.requests[1].messages[-2:]
    assert [(c.id, c.name) for c in calling.tool_calls] == [(call.id, "add")]
    assert (result.role, result.tool_call_id, result.content) == ("tool", call.id, "42")


@pytest.mark.model
def test_a_streamed_call_arrives_in_a_tool_calls_delta(
    scripted: ScriptedTools, client: openai.OpenAI
) -> None:
    scripted.scripts = [ADD_CALL]
    stream = client.chat.completions.create(model="SmolTools", messages=QUESTION, tools=[ADD], stream=True)
    chunks = [c for c in stream if c.choices]
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    calls = [tc for c in chunks for tc in c.choices[0].delta.tool_calls or []]
    assert text == "I will add them. "
    assert [(tc.index, tc.function.name if tc.function else None) for tc in calls] == [(0, "add")]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.model
def test_tool_choice_none_offers_no_tools_and_a_model_without_them_is_400(
    scripted: ScriptedTools, client: openai.OpenAI, core: Core
) -> None:
    scripted.scripts = [["Plain."]]
    plain = client.chat.completions.create(
        model="SmolTools", messages=QUESTION, tools=[ADD], tool_choice="none"
    )
    assert plain.choices[0].message.content == "Plain." and scripted.requests[0].tools == ()
    (starter,) = [m.name for m in core.library.list_models() if m.name != "SmolTools"]
    scripted.prepare(starter)
    with pytest.raises(
        openai.BadRequestError, match="cannot use tools: its chat template takes none"
    ) as caught:
        client.chat.completions.create(model=starter, messages=QUESTION, tools=[ADD])
    assert caught.value.body is not None and caught.value.body["param"] == "tools"  # type: ignore[index]
