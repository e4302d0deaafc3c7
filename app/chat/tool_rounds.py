"""The calls a local model makes in its reply, taken out of its streamed text, and what each call's answer
is: the tool's result, or the sentence the model is told instead (denied, unknown tool, unreadable call)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from app.remote.openai_client import ChatStream
from app.tools.chat import Approval, ToolRequest, ToolSet, local_call_id
from app.tools.host import ToolOutcome
from inference.protocol import Failed, Finished, PromptReady, TokenDelta, ToolCallRecord
from inference.tool_calls import Event as ParsedEvent
from inference.tool_calls import MalformedToolCall, TextDelta, ToolCallEvent, ToolCallParser

RunnerEvent = PromptReady | TokenDelta | Finished | Failed
# The name a call the model wrote but that could not be read is stored and shown under.
UNREADABLE_CALL = "unreadable_tool_call"


@dataclass(frozen=True)
class ModelCall:
    record: ToolCallRecord
    problem: str | None = None  # why it cannot run (the model wrote it so that it cannot be read)


def split_tool_calls(
    events: Iterator[RunnerEvent], parser: ToolCallParser, calls: list[ModelCall]
) -> Iterator[RunnerEvent]:
    """The runner's events with the model's tool calls taken out of the text and appended to `calls` as
    they are read; the text around them passes on, so the reply shows and stores only what is prose."""

    def prose(found: list[ParsedEvent]) -> str:
        texts: list[str] = []
        for event in found:
            if isinstance(event, TextDelta):
                texts.append(event.text)
            elif isinstance(event, ToolCallEvent):
                call = event.call
                calls.append(ModelCall(ToolCallRecord(local_call_id(call.id), call.name, call.arguments)))
            elif isinstance(event, MalformedToolCall):
                record = ToolCallRecord(local_call_id(), UNREADABLE_CALL, event.raw_text)
                calls.append(ModelCall(record, event.reason))
        return "".join(texts)

    for event in events:
        if isinstance(event, TokenDelta):
            yield dataclasses.replace(event, text=prose(parser.feed(event.text)))
        elif isinstance(event, Finished | Failed):
            rest = prose(parser.finish())
            if rest:
                yield TokenDelta(event.request_id, rest, 0)
            yield event
        else:
            yield event


def calls_at_the_end(stream: ChatStream, calls: list[ModelCall]) -> Iterator[TokenDelta | Finished | Failed]:
    """A server's events, with the calls it streamed apart from the text (complete once the stream ends)
    appended to `calls` before the end is passed on, so the reply is stored with them."""
    for event in stream.events():
        if isinstance(event, Finished):
            calls.extend(ModelCall(record) for record in stream.tool_calls)
        yield event


def answer_call(call: ModelCall, tools: ToolSet, approve: ToolApprover) -> ToolOutcome:
    """Blocking: ask the user (`approve`), run the call if allowed, and say what the model is told."""
    record = call.record
    if call.problem is not None:
        unread = f"Your tool call could not be read ({call.problem}); nothing was run. Write it again."
        return ToolOutcome(unread, is_error=True)
    target = tools.target(record.name)
    if target is None:
        offered = ", ".join(spec.name for spec in tools.specs)
        return ToolOutcome(
            f"There is no tool named “{record.name}”; the tools are: {offered}.", is_error=True
        )
    request = ToolRequest(target[0], target[1], record.arguments, record.id)
    if approve(request) is Approval.DENY:
        return ToolOutcome("The user did not allow this call; it was not run.", is_error=True)
    return tools.host.call(target[0], target[1], record.arguments)


class ToolApprover:
    """The user's answers in one chat: a tool allowed for the chat (`allowed`, kept by the engine per
    conversation) is not asked about again."""

    def __init__(self, ask: Callable[[ToolRequest], Approval], allowed: set[tuple[str, str]]) -> None:
        self._ask = ask
        self._allowed = allowed

    def __call__(self, request: ToolRequest) -> Approval:
        if (request.server, request.tool) in self._allowed:
            return Approval.ALLOW_ONCE
        answer = self._ask(request)
        if answer is Approval.ALLOW_IN_CHAT:
            self._allowed.add((request.server, request.tool))
        return answer
