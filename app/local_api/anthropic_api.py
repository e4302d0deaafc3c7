"""Anthropic's Messages API (`POST /v1/messages`) for the local server: a request read into the messages and
sampling the runner takes, and the reply, its stream's events and every error in Anthropic's own shapes.

This module does no I/O and keeps no state: the local server (app.local_api.server) reads the request,
checks the key (sent as `x-api-key`, or as a bearer token), and runs the generation on the path it shares
with `/v1/chat/completions` (the runner queue, hang-up cancellation, the limits).

Text only: image, document, tool and thinking blocks are refused with a 400 naming them, as are tools.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from app.local_api.replies import MAX_STOP_STRINGS, stop_strings, whole_reply
from inference.protocol import (
    ChatMessage,
    ErrorKind,
    Failed,
    Finished,
    GenerationStats,
    SamplingParams,
    StopReason,
    TokenDelta,
)

log = logging.getLogger("hearth.local_server")

PATH = "/v1/messages"
# Anthropic's error type for each status; other 4xx statuses are invalid_request_error, as Anthropic's own
# API answers them.
_ERROR_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    # The server is stopping, or busy with every connection it takes: try again, as with Anthropic's 529.
    503: "overloaded_error",
    529: "overloaded_error",
}
# Not a load that passes: retrying does not help until a model is loaded in Hearth.
_ERROR_TYPES_BY_CODE = {"model_not_loaded": "api_error"}
# Fields of Anthropic's API that change what the model is asked to do, which a local model cannot do here.
_UNSUPPORTED = ("tools", "mcp_servers", "container")


class AnthropicError(Exception):
    """An error response in Anthropic's shape."""

    def __init__(self, status: int, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind or error_type(status)

    def body(self) -> dict[str, Any]:
        return {"type": "error", "error": {"type": self.kind, "message": self.message}}


def error_type(status: int, code: str | None = None) -> str:
    """Anthropic's error type for an error this server answers with `status` (and its OpenAI `code`)."""
    by_code = _ERROR_TYPES_BY_CODE.get(code or "")
    if by_code is not None:
        return by_code
    return _ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")


@dataclass(frozen=True)
class MessagesRequest:
    model: str
    messages: tuple[ChatMessage, ...]  # the system prompt first, when the request has one
    sampling: SamplingParams
    stop_sequences: tuple[str, ...]
    stream: bool


def _invalid(message: str) -> AnthropicError:
    return AnthropicError(400, message, "invalid_request_error")


def _bad(where: str, expected: str) -> AnthropicError:
    return _invalid(f"{where}: must be {expected}.")


def _is_number(value: object) -> bool:
    # JSON true/false arrive as bool, which Python counts as a number.
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _text_of(content: object, where: str) -> str:
    """A message's (or the system prompt's) text: a string, or a list of text blocks."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(where, "a string or a list of content blocks")
    texts = []
    for index, block in enumerate(content):
        at = f"{where}.{index}"
        kind = block.get("type") if isinstance(block, dict) else None
        if not isinstance(block, dict) or not isinstance(kind, str):
            raise _bad(at, 'a content block ({"type": "text", "text": ...})')
        if kind != "text":
            raise _invalid(f"{at}: {kind!r} blocks are not supported by this server, only text.")
        text = block.get("text")
        if not isinstance(text, str):
            raise _bad(f"{at}.text", "a string")
        texts.append(text)
    return "\n".join(texts)


def _messages(value: object) -> list[ChatMessage]:
    if not isinstance(value, list) or not value:
        raise _bad("messages", "a non-empty list of messages")
    messages = []
    for index, item in enumerate(value):
        where = f"messages.{index}"
        if not isinstance(item, dict):
            raise _bad(where, "an object with 'role' and 'content'")
        role = item.get("role")
        if role not in ("user", "assistant"):
            raise _bad(f"{where}.role", '"user" or "assistant" (the system prompt goes in "system")')
        messages.append(ChatMessage(role, _text_of(item.get("content"), f"{where}.content")))
    if messages[-1].role != "user":
        # Anthropic continues a final assistant turn (a prefill); the chat templates here cannot.
        raise _invalid(
            f"messages.{len(messages) - 1}: the last message must be the user's: continuing an "
            "assistant turn (prefill) is not supported by this server."
        )
    return messages


def _number(body: dict[str, Any], key: str, low: float, high: float) -> dict[str, float]:
    value = body.get(key)
    if value is None:
        return {}
    if not _is_number(value) or not low <= value <= high:
        raise _bad(key, f"a number from {low:g} to {high:g}")
    return {key: float(value)}


def _stop_sequences(value: object) -> tuple[str, ...]:
    stops = stop_strings(value, one_string_too=False)
    if stops is None:
        raise _bad("stop_sequences", f"a list of up to {MAX_STOP_STRINGS} non-empty strings")
    return stops


def parse_messages_request(body: object, defaults: Callable[[str], SamplingParams]) -> MessagesRequest:
    """Check a Messages API request; `defaults(model)` gives the sampling used for what it leaves out.

    Raises AnthropicError (400) naming the first field that is wrong.
    """
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "the name of the loaded model")
    max_tokens = body.get("max_tokens")
    # Required by Anthropic's API: a client written for it always sends it.
    if max_tokens is None:
        raise _invalid("max_tokens: Field required.")
    if not _is_int(max_tokens) or max_tokens < 1:
        raise _bad("max_tokens", "a positive integer")
    system = body.get("system")
    system_text = "" if system is None else _text_of(system, "system")
    messages = _messages(body.get("messages"))
    for key in _UNSUPPORTED:
        if body.get(key):
            raise _invalid(f"{key}: not supported by this server (text replies only).")
    thinking = body.get("thinking")
    if thinking is not None and not (isinstance(thinking, dict) and thinking.get("type") == "disabled"):
        raise _invalid("thinking: extended thinking is not supported by this server.")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream", "true or false")
    changes: dict[str, Any] = {"max_tokens": max_tokens}
    # Anthropic's ranges, narrower than OpenAI's temperature.
    changes |= _number(body, "temperature", 0, 1)
    changes |= _number(body, "top_p", 0, 1)
    top_k = body.get("top_k")
    if top_k is not None:
        if not _is_int(top_k) or top_k < 0:
            raise _bad("top_k", "a non-negative integer")
        changes["top_k"] = top_k
    if system_text:
        messages.insert(0, ChatMessage("system", system_text))
    return MessagesRequest(
        model=model,
        messages=tuple(messages),
        sampling=dataclasses.replace(defaults(model), **changes),
        stop_sequences=_stop_sequences(body.get("stop_sequences")),
        stream=stream,
    )


def failure(event: Failed) -> AnthropicError:
    if event.kind is ErrorKind.CONTEXT_OVERFLOW:
        return AnthropicError(400, event.message, "invalid_request_error")
    if event.kind is ErrorKind.NOT_LOADED:
        return AnthropicError(503, event.message, "api_error")
    return AnthropicError(500, event.message, "api_error")


def _cancelled() -> AnthropicError:
    return AnthropicError(503, "The request was cancelled.", "overloaded_error")


def sse(name: str, payload: dict[str, Any]) -> bytes:
    """One server-sent event, named as Anthropic's stream names them (the client reads the name)."""
    data = json.dumps(payload, ensure_ascii=False)
    return f"event: {name}\ndata: {data}\n\n".encode()


class Reply:
    """One reply: its id, and its body or its stream's events, from the engine's events."""

    def __init__(self, request: MessagesRequest, input_tokens: int) -> None:
        self.request = request
        self.id = f"msg_{uuid.uuid4().hex}"
        # Counted when the prompt was rendered, before the first token: the stream's first event says it.
        self._input_tokens = input_tokens

    def _stop(self, stats: GenerationStats) -> tuple[str, str | None]:
        """Anthropic's stop_reason and stop_sequence."""
        if stats.stop_reason is StopReason.STOP_STRING and stats.stop_string in self.request.stop_sequences:
            return "stop_sequence", stats.stop_string
        if stats.stop_reason is StopReason.MAX_TOKENS:
            return "max_tokens", None
        if stats.stop_reason is StopReason.CONTEXT_FULL:
            return "model_context_window_exceeded", None
        # The end of the turn, or one of the chat template's own stop strings.
        return "end_turn", None

    def _usage(self, stats: GenerationStats | None) -> dict[str, int]:
        prompt = stats.prompt_tokens if stats is not None else None
        output = stats.completion_tokens if stats is not None else 0
        return {"input_tokens": prompt if prompt is not None else self._input_tokens, "output_tokens": output}

    def _message(self, content: list[dict[str, Any]], stats: GenerationStats | None) -> dict[str, Any]:
        reason, sequence = self._stop(stats) if stats is not None else (None, None)
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.request.model,
            "content": content,
            "stop_reason": reason,
            "stop_sequence": sequence,
            "usage": self._usage(stats),
        }

    def whole(self, events: Iterator[TokenDelta | Finished | Failed]) -> dict[str, Any]:
        """The Message for a request not streamed. Raises AnthropicError when the generation fails."""
        reply = whole_reply(events, failure, _cancelled)
        if reply is None:
            raise AnthropicError(500, "The generation ended without finishing.", "api_error")
        text, stats = reply
        return self._message([{"type": "text", "text": text}], stats)

    def events(
        self, events: Iterator[TokenDelta | Finished | Failed]
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """A streamed reply's events, named: message_start, one text block (content_block_start, a ping,
        its text_delta content_block_delta events, content_block_stop), message_delta with the stop reason
        and the usage, message_stop; an error event instead of the rest when the generation fails."""
        yield "message_start", {"type": "message_start", "message": self._message([], None)}
        yield (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        )
        yield "ping", {"type": "ping"}
        for event in events:
            if isinstance(event, TokenDelta):
                if event.text:
                    delta = {"type": "text_delta", "text": event.text}
                    yield "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            elif isinstance(event, Failed):
                yield "error", failure(event).body()
                return
            elif event.stats.stop_reason is StopReason.CANCELLED:
                log.info("a streamed request was cancelled after %d tokens", event.stats.completion_tokens)
                yield "error", _cancelled().body()
                return
            else:
                reason, sequence = self._stop(event.stats)
                yield "content_block_stop", {"type": "content_block_stop", "index": 0}
                yield (
                    "message_delta",
                    {
                        "type": "message_delta",
                        "delta": {"stop_reason": reason, "stop_sequence": sequence},
                        "usage": self._usage(event.stats),
                    },
                )
                yield "message_stop", {"type": "message_stop"}
                return
