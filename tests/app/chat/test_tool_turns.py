"""A chat with tools, through the real engine, store, runner and a real MCP server (tests.helpers.
mcp_tool_server): the model's call is taken out of its text, asked about, run, stored as a tool message,
and the model answers after it. Where the model's words matter (which call it makes) they come from a
script (ScriptedTools), as in test_reasoning_storage; the runner still loads the model and counts every
prompt, tools and results included, with the model's own template."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from app.chat.engine import ChatEngine, TurnCallbacks
from app.chat.runner_queue import Job
from app.core import Core
from app.errors import HearthError
from app.settings import SettingsStore
from app.storage.orm import MessageStatus
from app.tools.chat import Approval, ToolRequest, ToolSet
from app.tools.host import ToolHost
from inference.protocol import (
    ChatMessage,
    Failed,
    Finished,
    GenerateRequest,
    GenerationStats,
    PromptReady,
    SamplingParams,
    StopReason,
    TokenDelta,
    ToolCallRecord,
)
from tests.conftest import starter_model_file
from tests.helpers.model_files import with_chat_template

Event = PromptReady | TokenDelta | Finished | Failed
STATS = GenerationStats(10, 0, 5, 0.1, 20.0, StopReason.END_OF_TURN, 1)
QUICK = SamplingParams(temperature=0.0, max_tokens=8)
# Hermes-style calls (tool_call_format: HERMES), short enough to take the starter model's template's place.
TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t.function|tojson }}\n{% endfor %}<|im_end|>\n"
    "{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function|tojson }}</tool_call>{% endfor %}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class ScriptedTools(ChatEngine):
    """The real engine and runner; each reply's tokens come from the next script, and each request is kept."""

    scripts: list[list[str]]
    requests: list[GenerateRequest]

    def _generate(self, request: GenerateRequest, job: Job) -> Iterator[Event]:
        self.requests.append(request)
        deltas = self.scripts.pop(0)
        yield PromptReady(request.request_id, self.count_for(request), "")
        for text in deltas:
            yield TokenDelta(request.request_id, text, 1)
        yield Finished(request.request_id, STATS)

    def count_for(self, request: GenerateRequest) -> int:
        return self.client.count_tokens(request.messages, request.tools).n_tokens


class Answers(TurnCallbacks):
    def __init__(self, *answers: Approval) -> None:
        self.answers = list(answers)
        self.asked: list[ToolRequest] = []
        self.results: list[tuple[str, bool]] = []

    def approve_tool(self, request: ToolRequest) -> Approval:
        self.asked.append(request)
        return self.answers.pop(0)

    def tool_result(self, tool_message_id: int, call: ToolCallRecord, text: str, is_error: bool) -> None:
        self.results.append((text, is_error))


@pytest.fixture
def tools_model(core: Core, tmp_path: Path) -> str:
    starter = starter_model_file()
    assert starter is not None
    model = with_chat_template(starter, tmp_path / "SmolTools.gguf", TOOLS_TEMPLATE)
    return core.library.import_file(model, name="SmolTools").name


@pytest.fixture
def engine(core: Core) -> Iterator[Callable[..., ScriptedTools]]:
    made: list[ScriptedTools] = []

    def make(*scripts: list[str], **settings: Any) -> ScriptedTools:
        chat = ScriptedTools(
            core.store,
            core.library,
            SettingsStore(dataclasses.replace(core.settings, **settings)),
            runner_log=core.paths.runner_log_file,
        )
        chat.scripts, chat.requests = list(scripts), []
        made.append(chat)
        return chat

    yield make
    for chat in made:
        chat.close()


ADD_CALL = ["I will add them. <tool_", 'call>{"name": "add", "arguments": {"a": 2,', ' "b": 40}}</tool_call>']


@pytest.mark.model
def test_an_allowed_call_runs_is_stored_and_the_model_answers_after_it(
    core: Core, tools_model: str, tool_host: ToolHost, engine: Callable[..., ScriptedTools]
) -> None:
    chat = engine(ADD_CALL, ["2 + 40 = 42."])
    answers = Answers(Approval.ALLOW_ONCE)
    result = chat.run_turn(
        "What is 2 + 40?",
        tools_model,
        sampling=QUICK,
        callbacks=answers,
        tools=ToolSet.open(tool_host, ["maths"]),
    )
    assert (result.status, result.text) == (MessageStatus.COMPLETE, "2 + 40 = 42.")
    [asked] = answers.asked
    assert (asked.server, asked.tool, asked.arguments) == ("maths", "add", '{"a": 2, "b": 40}')
    assert answers.results == [("42", False)]
    path = core.store.list_messages(result.conversation_id)
    assert [m.role for m in path] == ["user", "assistant", "tool", "assistant"]
    calling, tool, answer = path[1], path[2], path[3]
    assert calling.content == "I will add them. ", "the call is taken out of the shown text"
    [call] = calling.tool_calls
    assert (call.name, call.text) == ("add", '{"a": 2, "b": 40}')
    assert tool.content == "42" and tool.tool_result is not None and tool.tool_result.call_id == call.call_id
    assert answer.id == result.assistant_message_id and answer.parent_id == tool.id
    # Both requests offered the tools; the second carried the call and its result to the template.
    first, second = chat.requests
    assert [t.name for t in first.tools] == [t.name for t in second.tools] and "add" in [
        t.name for t in first.tools
    ]
    assistant, result_message = second.messages[-2], second.messages[-1]
    assert assistant.tool_calls == (ToolCallRecord(call.call_id or "", "add", '{"a": 2, "b": 40}'),)
    assert (result_message.role, result_message.content, result_message.tool_call_id) == (
        "tool",
        "42",
        call.call_id,
    )
    # Counted by the runner with the tools in the prompt: their descriptions take room.
    plain = dataclasses.replace(first, tools=())
    assert chat.count_for(first) > chat.count_for(plain)


@pytest.mark.model
def test_a_denied_call_is_not_run_and_the_model_is_told(
    core: Core, tools_model: str, tool_host: ToolHost, engine: Callable[..., ScriptedTools]
) -> None:
    chat = engine(ADD_CALL, ["I may not use the tool."])
    result = chat.run_turn(
        "What is 2 + 40?", tools_model, sampling=QUICK, tools=ToolSet.open(tool_host, ["maths"])
    )
    assert result.status is MessageStatus.COMPLETE
    tool = core.store.list_messages(result.conversation_id)[2]
    assert tool.content == "The user did not allow this call; it was not run."
    assert tool.tool_result is not None and tool.tool_result.is_error
    assert chat.requests[1].messages[-1].content == tool.content


@pytest.mark.model
def test_a_tool_allowed_for_the_chat_is_not_asked_about_again(
    core: Core, tools_model: str, tool_host: ToolHost, engine: Callable[..., ScriptedTools]
) -> None:
    chat = engine(ADD_CALL, ["42."], ADD_CALL, ["42 again."])
    answers = Answers(Approval.ALLOW_IN_CHAT)
    tools = ToolSet.open(tool_host, ["maths"])
    first = chat.run_turn("2 + 40?", tools_model, sampling=QUICK, callbacks=answers, tools=tools)
    chat.run_turn(
        "Again?",
        tools_model,
        conversation_id=first.conversation_id,
        sampling=QUICK,
        callbacks=answers,
        tools=tools,
    )
    assert len(answers.asked) == 1 and answers.results == [("42", False), ("42", False)]


@pytest.mark.model
def test_rounds_end_at_the_setting_with_a_reply_offered_no_tools(
    core: Core, tools_model: str, tool_host: ToolHost, engine: Callable[..., ScriptedTools]
) -> None:
    chat = engine(ADD_CALL, ADD_CALL, ["Done."], tool_rounds=2)
    answers = Answers(Approval.ALLOW_IN_CHAT)
    result = chat.run_turn(
        "Add twice", tools_model, sampling=QUICK, callbacks=answers, tools=ToolSet.open(tool_host, ["maths"])
    )
    assert result.text == "Done."
    assert [bool(r.tools) for r in chat.requests] == [True, True, False]
    roles = [m.role for m in core.store.list_messages(result.conversation_id)]
    assert roles == ["user", "assistant", "tool", "assistant", "tool", "assistant"]


@pytest.mark.model
def test_an_unknown_tool_or_an_unreadable_call_is_an_error_for_the_model_and_runs_nothing(
    core: Core, tools_model: str, tool_host: ToolHost, engine: Callable[..., ScriptedTools]
) -> None:
    chat = engine(
        ['<tool_call>{"name": "divide", "arguments": {}}</tool_call><tool_call>{"name": "add", "argu'],
        ["Sorry."],
    )
    answers = Answers()
    result = chat.run_turn(
        "Divide", tools_model, sampling=QUICK, callbacks=answers, tools=ToolSet.open(tool_host, ["maths"])
    )
    assert answers.asked == [], "nothing could be asked about"
    unknown, unreadable = core.store.list_messages(result.conversation_id)[2:4]
    assert unknown.content.startswith("There is no tool named “divide”; the tools are: add, ")
    assert unreadable.content.startswith("Your tool call could not be read (")
    assert all(m.tool_result is not None and m.tool_result.is_error for m in (unknown, unreadable))


@pytest.mark.model
def test_a_model_whose_template_takes_no_tools_says_so_and_stores_nothing(
    core: Core, tool_host: ToolHost, engine: Callable[..., ScriptedTools]
) -> None:
    chat = engine()
    (starter,) = [m.name for m in core.library.list_models()]
    with pytest.raises(HearthError, match=r"cannot use tools: its chat template takes none"):
        chat.run_turn("2 + 40?", starter, sampling=QUICK, tools=ToolSet.open(tool_host, ["maths"]))
    assert core.store.list_conversations() == []


@pytest.mark.model
def test_the_real_model_is_offered_the_tools_and_replies(
    core: Core, tools_model: str, tool_host: ToolHost
) -> None:
    """No script: the runner renders the tools into the prompt, generates with control tokens spelled,
    and the reply is stored (what a 135M model says is not the point)."""
    chat = ChatEngine(core.store, core.library, core.settings_store, runner_log=core.paths.runner_log_file)
    try:
        result = chat.run_turn(
            "What is 2 + 40?",
            tools_model,
            sampling=QUICK,
            callbacks=TurnCallbacks(),  # denies every call
            tools=ToolSet.open(tool_host, ["maths"]),
        )
    finally:
        chat.close()
    assert result.status is MessageStatus.COMPLETE and result.stats is not None
    assert result.stats.prompt_tokens is not None and result.stats.prompt_tokens > 100, "the tools are in it"


@pytest.mark.model
def test_a_result_too_long_for_the_context_ends_the_turn_with_what_is_stored(
    core: Core, tools_model: str, tool_host: ToolHost, engine: Callable[..., ScriptedTools]
) -> None:
    long_call = ['<tool_call>{"name": "long_text", "arguments": {"chars": 50000}}</tool_call>']
    chat = engine(long_call, ["never asked for"], overflow_policy="refuse", context_length=2048)
    result = chat.run_turn(
        "Write a lot",
        tools_model,
        sampling=QUICK,
        callbacks=Answers(Approval.ALLOW_ONCE),
        tools=ToolSet.open(tool_host, ["maths"]),
    )
    assert result.status is MessageStatus.COMPLETE and len(chat.requests) == 1
    roles = [m.role for m in core.store.list_messages(result.conversation_id)]
    assert roles == ["user", "assistant", "tool"], "the prompt and the result stay; no reply is started"


@pytest.mark.model
def test_a_reply_asked_for_again_and_an_edited_prompt_may_call_the_tools_too(
    core: Core, tools_model: str, tool_host: ToolHost, engine: Callable[..., ScriptedTools]
) -> None:
    chat = engine(["Forty-two."], ADD_CALL, ["It is 42."], ADD_CALL, ["Still 42."])
    first = chat.run_turn("What is 2 + 40?", tools_model, sampling=QUICK)
    answers = Answers(Approval.ALLOW_ONCE, Approval.ALLOW_ONCE)
    again = chat.regenerate(
        first.assistant_message_id,
        tools_model,
        sampling=QUICK,
        callbacks=answers,
        tools=ToolSet.open(tool_host, ["maths"]),
    )
    assert (again.status, again.text) == (MessageStatus.COMPLETE, "It is 42.")
    path = core.store.list_messages(first.conversation_id)
    assert [m.role for m in path] == ["user", "assistant", "tool", "assistant"]
    assert path[1].sibling_count == 2, "the first reply stays beside the new one"

    edited = chat.edit(
        first.user_message_id,
        "And 2 + 40?",
        tools_model,
        sampling=QUICK,
        callbacks=answers,
        tools=ToolSet.open(tool_host, ["maths"]),
    )
    assert edited.text == "Still 42." and answers.results == [("42", False), ("42", False)]
    roles = [m.role for m in core.store.list_messages(first.conversation_id)]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert all(request.tools for request in chat.requests[1:3]) and not chat.requests[0].tools


@pytest.mark.model
def test_a_chosen_server_that_is_gone_is_said_with_the_reply_and_the_others_still_serve(
    core: Core, tools_model: str, tool_host: ToolHost, engine: Callable[..., ScriptedTools]
) -> None:
    chat = engine(ADD_CALL, ["42."])
    notes: list[str] = []

    class Noted(Answers):
        def context_note(self, assistant_message_id: int, note: str) -> None:
            notes.append(note)

    # A chat keeps the servers it chose; "files" was removed from mcp.json since.
    tools = ToolSet.open(tool_host, ["maths", "files"])
    result = chat.run_turn(
        "2 + 40?", tools_model, sampling=QUICK, callbacks=Noted(Approval.ALLOW_ONCE), tools=tools
    )
    assert result.text == "42."
    [note] = notes
    assert "There is no tool server named “files”" in note
    first_reply = next(m for m in core.store.list_messages(result.conversation_id) if m.role == "assistant")
    assert first_reply.context_note == note
    # Only gone servers: nothing to offer, and the turn never starts.
    with pytest.raises(HearthError, match="no tool server named “files”"):
        ToolSet.open(tool_host, ["files"])


@pytest.mark.model
def test_the_context_meter_counts_the_tools_of_running_servers_without_starting_any(
    core: Core, tools_model: str, tool_host: ToolHost, engine: Callable[..., ScriptedTools]
) -> None:
    chat = engine()
    # Nothing runs yet: the meter starts no server while the user types, and counts no tools.
    assert ToolSet.running(tool_host, ["maths"]).specs == ()
    assert not tool_host.status("maths").running
    without = chat.measure_context(None, "What is 2 + 40?", tools_model)
    assert without.tool_tokens == 0

    opened = ToolSet.open(tool_host, ["maths"])  # as a turn does
    running = ToolSet.running(tool_host, ["maths", "gone"])
    assert running.specs == opened.specs
    usage = chat.measure_context(None, "What is 2 + 40?", tools_model, tools=running.specs)
    # Counted by the model's own template and tokenizer, as the turn's prompt is.
    counted = chat.client.count_tokens((ChatMessage("user", "What is 2 + 40?"),), running.specs).n_tokens
    assert usage.used_tokens == counted
    assert usage.tool_tokens == usage.used_tokens - without.used_tokens > 50
