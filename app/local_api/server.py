"""Hearth's loaded model over an OpenAI-compatible API, on 127.0.0.1 only, behind API keys Hearth made
(app.local_api.api_keys: several, by name, each revocable).

`GET /v1/models`, `GET /v1/models/{id}` and `POST /v1/chat/completions` (with and without streaming),
`GET /metrics` (Prometheus, from app.metrics), and `GET /health` without the key (llama.cpp's server
semantics, saying nothing but whether a model is ready). `POST /v1/messages` is Anthropic's Messages API
(app.local_api.anthropic_api shapes it) on the same generation path, limits and key, and so are Ollama's
`/api/version`, `/api/tags`, `/api/show`, `/api/chat` and `/api/generate` (app.local_api.ollama_api, NDJSON
streams, every /api/ error in Ollama's shape). `POST /v1/embeddings` and Ollama's `POST /api/embed` answer
from the embedding model (app.local_api.embeddings), off the runner queue: that model has a process of its
own.
Requests take their turn for the runner with the window's turns (ChatEngine's first come, first served
queue); a client that hangs up cancels its generation, so the runner is free for whoever is next.

The standard library's threading HTTP server is enough for one user's programs on one machine, and adds
no dependency. It listens on the loopback address only: there is deliberately no way to choose another.

Any program on the machine can connect without the key, so nothing it can do before the key is checked may
cost much or last long:
- the whole header block must arrive within `header_timeout_s` (a deadline, not a per-byte timeout, so a
  client trickling a byte now and then is dropped too) and fit in `max_header_bytes` (else 431);
- the key is checked from the headers alone; the body is read only after that, within `body_timeout_s`,
  and only up to MAX_BODY_BYTES (a `100 Continue` is sent only then, so a refused client never sends it);
- at most `max_connections` connections hold a thread. Beyond that, a new connection takes the place of
  the one that has waited longest for a request (an idle keep-alive, or one still trickling its headers):
  waiting costs the waiter its place, so idle connections cannot lock real clients out. When every one is
  busy with a request, the new connection is closed at once, without a thread.

Why not uvicorn (BSD-3) on h11 (MIT), installed already for the tests? It bounds header size, but it has
no timeout on receiving a request: its keep-alive timer is cancelled by the first byte, so a trickling
client holds a uvicorn connection forever too (uvicorn issue #157, "timeout-request-start", is open), and
`limit_concurrency` still accepts and parses every connection before answering 503. Size and bundling
are not the obstacle (uvicorn, h11 and click are about 2 MB, and pyinstaller-hooks-contrib collects
uvicorn's modules, which it imports by name), but switching would mean three more runtime packages to
follow and rewriting the threaded streaming and hang-up cancellation for asyncio, only to add the same
deadline code to uvicorn's protocol class. Hardening this server is less code and less risk.
"""

from __future__ import annotations

import dataclasses
import errno
import io
import json
import logging
import math
import selectors
import socket
import socketserver
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import chain
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from app.chat.engine import ChatEngine, ModelState, ToolsNotTaken
from app.chat.runner_queue import Job, JobCancelled
from app.chat.tool_rounds import ModelCall
from app.errors import HearthError, ModelNotFound, NoModelLoaded
from app.local_api import anthropic_api, embeddings, ollama_api
from app.local_api.api_keys import AcceptedKeys
from app.local_api.replies import MAX_STOP_STRINGS, stop_strings, whole_reply
from app.local_api.structured import ResponseFormatError, response_format_schema
from app.metrics import endpoint_label
from inference.protocol import (
    ChatMessage,
    ErrorKind,
    Failed,
    Finished,
    GenerationStats,
    SamplingParams,
    StopReason,
    TokenDelta,
    ToolCallRecord,
    ToolSpec,
)

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

log = logging.getLogger("hearth.local_server")

LOOPBACK = "127.0.0.1"
# Chat requests are text; 4 MiB is far beyond any context this runner holds, and bounds what one request
# can make the server read into memory.
MAX_BODY_BYTES = 4 << 20
# A client that neither sends nor reads for this long is dropped, so it cannot hold the runner forever.
IO_TIMEOUT_S = 30.0
# Limits on what a client can make the server hold before (and just after) its key is checked. A real
# client on this machine sends its headers in milliseconds and its body in well under a second.
HEADER_TIMEOUT_S = 10.0  # for the whole request line and headers, and for the wait between requests
BODY_TIMEOUT_S = 30.0  # for the whole body, once the key is known to be right
MAX_HEADER_BYTES = 16 << 10  # request line and headers together; OpenAI clients send well under 2 KiB
MAX_CONNECTIONS = 64  # connections holding a thread; the runner answers one request at a time anyway
# After refusing a request whose rest is still arriving, the server reads (and discards) this much of it
# before closing, for at most this long: closing with unread data makes the system send a reset, which can
# destroy the answer before the client reads it.
LINGER_BYTES = 64 << 10
LINGER_S = 1.0
# How often a request's connection is checked for a client that hung up while it waits or generates.
HANGUP_POLL_S = 0.2
SEED_LIMIT = 2**32  # llama.cpp seeds are 32-bit
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
# The legacy function-calling fields; `tools` replaced them.
_UNSUPPORTED = ("functions", "function_call")
_FINISH_REASONS = {
    StopReason.END_OF_TURN: "stop",
    StopReason.STOP_STRING: "stop",
    StopReason.MAX_TOKENS: "length",
    StopReason.CONTEXT_FULL: "length",
}


class RequestError(Exception):
    """An OpenAI-shaped error response."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.code = code
        self.param = param

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[ChatMessage, ...]
    sampling: SamplingParams
    stop: tuple[str, ...]
    stream: bool
    include_usage: bool
    tools: tuple[ToolSpec, ...] = ()
    json_schema: str | None = None  # response_format's schema text (app.local_api.structured)


def _is_number(value: object) -> bool:
    # JSON true/false arrive as bool, which Python counts as a number.
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _bad(param: str, expected: str) -> RequestError:
    return RequestError(400, f"'{param}' must be {expected}.", param=param, code="invalid_value")


def _text_of(content: object, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise RequestError(
                    400, f"{where}: only text content is supported.", param="messages", code="invalid_value"
                )
            texts.append(part["text"])
        return "\n".join(texts)
    raise _bad(where, "a string or a list of text parts")


def _messages(value: object) -> tuple[ChatMessage, ...]:
    if not isinstance(value, list) or not value:
        raise _bad("messages", "a non-empty list of messages")
    messages = []
    for index, item in enumerate(value):
        where = f"messages[{index}]"
        if not isinstance(item, dict):
            raise _bad(where, "an object with 'role' and 'content'")
        role_name = item.get("role")
        role = _ROLES.get(role_name) if isinstance(role_name, str) else None
        if role is None:
            raise RequestError(
                400,
                f"{where}: the role must be system, developer, user, assistant or tool.",
                param="messages",
                code="invalid_value",
            )
        content = item.get("content")
        # An assistant turn that only called tools has no content; here it is simply empty.
        text = "" if content is None and role == "assistant" else _text_of(content, f"{where}.content")
        calls = _calls_of(item.get("tool_calls"), where) if role == "assistant" else ()
        call_id = item.get("tool_call_id")
        if role == "tool" and not (isinstance(call_id, str) and call_id):
            raise _bad(f"{where}.tool_call_id", "the id of the call this result answers")
        name = item.get("name")
        messages.append(
            ChatMessage(
                role,
                text,
                tool_calls=calls,
                tool_call_id=call_id if role == "tool" else None,
                tool_name=name if role == "tool" and isinstance(name, str) else None,
            )
        )
    return tuple(messages)


def _calls_of(value: object, where: str) -> tuple[ToolCallRecord, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _bad(f"{where}.tool_calls", "a list of calls")
    calls = []
    for index, call in enumerate(value):
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(function, dict)
            or not isinstance(call.get("id"), str)
            or not isinstance(function.get("name"), str)
            or not isinstance(function.get("arguments"), str)
        ):
            raise _bad(f"{where}.tool_calls[{index}]", "{id, type: function, function: {name, arguments}}")
        calls.append(ToolCallRecord(call["id"], function["name"], function["arguments"]))
    return tuple(calls)


def _tools(value: object, choice: object) -> tuple[ToolSpec, ...]:
    """The request's tools, as the model's template takes them; none when `tool_choice` is "none". A call
    forced on the model ("required", a named function) would need a grammar: refused, naming it."""
    if choice not in (None, "auto", "none"):
        raise RequestError(
            400,
            'Only tool_choice "auto" and "none" are supported: a call cannot be forced on a local model.',
            param="tool_choice",
            code="unsupported",
        )
    if value is None or choice == "none":
        return ()
    if not isinstance(value, list):
        raise _bad("tools", "a list of functions")
    tools = []
    for index, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, dict) else None
        name = function.get("name") if isinstance(function, dict) else None
        if (
            not isinstance(tool, dict)
            or tool.get("type", "function") != "function"
            or not isinstance(function, dict)
            or not isinstance(name, str)
            or not name
        ):
            raise _bad(
                f"tools[{index}]", '{"type": "function", "function": {"name", "description", "parameters"}}'
            )
        parameters = function.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(parameters, dict):
            raise _bad(f"tools[{index}].function.parameters", "a JSON Schema object")
        description = function.get("description", "")
        tools.append(
            ToolSpec(name, description if isinstance(description, str) else "", json.dumps(parameters))
        )
    return tuple(tools)


def _stop(value: object) -> tuple[str, ...]:
    stops = stop_strings(value, one_string_too=True)
    if stops is None:
        raise _bad("stop", f"a non-empty string or a list of up to {MAX_STOP_STRINGS} of them")
    return stops


def parse_chat_request(body: object, defaults: Callable[[str], SamplingParams]) -> ChatRequest:
    """Check a chat completion request; `defaults(model)` gives the sampling used for what it leaves out.

    Raises RequestError (400) naming the first field that is wrong.
    """
    if not isinstance(body, dict):
        raise RequestError(400, "The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "the name of the loaded model (see GET /v1/models)")
    messages = _messages(body.get("messages"))
    for key in _UNSUPPORTED:
        if body.get(key):
            raise RequestError(
                400, f"'{key}' is not supported by this server.", param=key, code="unsupported"
            )
    if body.get("n", 1) != 1:
        raise RequestError(400, "Only one choice per request is supported ('n' must be 1).", param="n")
    if body.get("logprobs"):
        raise RequestError(400, "'logprobs' is not supported by this server.", param="logprobs")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("stream", "true or false")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise _bad("stream_options", "an object")
    include_usage = bool(options and options.get("include_usage"))

    sampling = defaults(model)
    changes: dict[str, Any] = {}
    temperature = body.get("temperature")
    if temperature is not None:
        if not _is_number(temperature) or not 0 <= temperature <= 2:
            raise _bad("temperature", "a number from 0 to 2")
        changes["temperature"] = float(temperature)
    top_p = body.get("top_p")
    if top_p is not None:
        if not _is_number(top_p) or not 0 <= top_p <= 1:
            raise _bad("top_p", "a number from 0 to 1")
        changes["top_p"] = float(top_p)
    # max_completion_tokens is the newer name; clients send one or the other.
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if value is not None:
            if not _is_int(value) or value < 1:
                raise _bad(key, "a positive integer")
            changes["max_tokens"] = value
            break
    seed = body.get("seed")
    if seed is not None:
        if not _is_int(seed) or not 0 <= seed < SEED_LIMIT:
            raise _bad("seed", f"an integer from 0 to {SEED_LIMIT - 1}")
        changes["seed"] = seed
    tools = _tools(body.get("tools"), body.get("tool_choice"))
    try:
        json_schema = response_format_schema(body.get("response_format"))
    except ResponseFormatError as exc:
        raise RequestError(400, str(exc), param="response_format", code=exc.code) from exc
    if json_schema is not None and tools:
        raise RequestError(
            400,
            "'response_format' cannot be combined with 'tools': its grammar would keep the model from "
            "calling them.",
            param="response_format",
            code="unsupported",
        )
    return ChatRequest(
        model=model,
        messages=messages,
        sampling=dataclasses.replace(sampling, **changes),
        stop=_stop(body.get("stop")),
        stream=stream,
        include_usage=include_usage,
        tools=tools,
        json_schema=json_schema,
    )


def _failure(event: Failed) -> RequestError:
    if event.kind is ErrorKind.CONTEXT_OVERFLOW:
        return RequestError(400, event.message, param="messages", code="context_length_exceeded")
    if event.kind is ErrorKind.NOT_LOADED:
        return RequestError(503, event.message, kind="server_error", code="model_not_loaded")
    if event.kind is ErrorKind.BAD_SCHEMA:
        return RequestError(400, event.message, param="response_format", code="unsupported")
    return RequestError(500, event.message, kind="server_error", code=event.kind.value)


def _usage(stats: GenerationStats) -> dict[str, int]:
    prompt = stats.prompt_tokens or 0  # always counted by the local runner
    return {
        "prompt_tokens": prompt,
        "completion_tokens": stats.completion_tokens,
        "total_tokens": prompt + stats.completion_tokens,
    }


def _watch_for_hangup(sock: socket.socket, done: threading.Event, hung_up: Callable[[], None]) -> None:
    """Notice a client that closes its connection while its request waits or generates, so the request is
    cancelled at once rather than at the next write (which, for a request still waiting, would come only
    after a whole generation nobody reads)."""
    # A selector, not select.select: that one cannot watch descriptors numbered 1024 and above.
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(sock, selectors.EVENT_READ)
            while not done.is_set():
                if not selector.select(HANGUP_POLL_S):
                    continue
                if sock.recv(1, socket.MSG_PEEK):
                    return  # it sent the next request already: it is still there
                break
        except (OSError, ValueError):
            pass  # the connection is broken or closed: the client is gone either way
    if not done.is_set():
        hung_up()


class _ClientGone(Exception):
    pass


class _HeadTooLarge(Exception):
    pass


class _DeadlineReader(io.RawIOBase):
    """A connection's input for a buffered reader. Each receive waits at most the socket's timeout and
    never past `deadline` (monotonic clock), so a client sending a byte just before every timeout cannot
    stretch one read (a line, a body) without end."""

    def __init__(self, sock: socket.socket, timeout_s: float) -> None:
        super().__init__()
        self._sock = sock
        self._timeout_s = timeout_s
        self.deadline = math.inf

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the client took too long to send its request")
        self._sock.settimeout(min(remaining, self._timeout_s))
        try:
            return self._sock.recv_into(buffer)
        finally:
            # Writes go by the socket's timeout too.
            self._sock.settimeout(self._timeout_s)


def _error_response(status: HTTPStatus, message: str) -> bytes:
    body = json.dumps(RequestError(status, message, kind="server_error").body()).encode()
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


# Sent, without waiting, to a connection refused because every connection is busy with a request.
_BUSY_RESPONSE = _error_response(
    HTTPStatus.SERVICE_UNAVAILABLE, "The server is busy with as many connections as it takes; try again."
)


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer
    protocol_version = "HTTP/1.1"
    server_version = "Hearth"
    sys_version = ""
    # So that even a malformed request line is answered with a status line (HTTP/0.9 had none).
    default_request_version = "HTTP/1.1"
    # The request has a body not read (yet): if it is answered without reading it, the connection must
    # close, or the body would be taken for the next request.
    _body_pending = False
    # The client waits for "100 Continue" before sending the body; it is said only once the key is right.
    _expects_continue = False
    # Input may still be arriving when the connection closes: read some of it first (see LINGER_BYTES).
    _linger = False

    def setup(self) -> None:
        super().setup()
        timeout_s = self.server.local.io_timeout_s
        # Every read and write on this connection gives up after this long without progress.
        self.connection.settimeout(timeout_s)
        # The base class's reader has no deadline. Closed, so that it keeps no hold on the socket.
        self.rfile.close()
        self._input = _DeadlineReader(self.connection, timeout_s)
        self.rfile = io.BufferedReader(self._input)

    def finish(self) -> None:
        super().finish()
        if self._linger:
            # Evictable meanwhile: a client lingered on must not keep a real one out.
            self.server.awaiting_request(self.connection)
            self._discard_input()

    def _discard_input(self) -> None:
        deadline, left = time.monotonic() + LINGER_S, LINGER_BYTES
        with suppress(OSError):
            self.connection.shutdown(socket.SHUT_WR)
            while left > 0 and (remaining := deadline - time.monotonic()) > 0:
                self.connection.settimeout(remaining)
                data = self.connection.recv(min(left, 16 << 10))
                if not data:
                    break
                left -= len(data)

    def handle_one_request(self) -> None:
        """One request, read within the limits the module's docstring describes: the base class reads the
        request line and headers with no deadline and up to 100 lines of 64 KiB each before any check."""
        local = self.server.local
        # What the base class's parse_request sets first, for an answer sent before it runs.
        self.command, self.requestline, self.request_version = "", "", self.default_request_version
        self.path = ""  # until parse_request reads it: not the previous request's, for the metrics
        self.close_connection = True
        self._body_pending = self._expects_continue = False
        self.server.awaiting_request(self.connection)
        self._input.deadline = time.monotonic() + local.header_timeout_s
        try:
            head = self._read_head(local.max_header_bytes)
        except _HeadTooLarge:
            self._linger = True
            self.send_error(431, f"The request line and headers must fit in {local.max_header_bytes} bytes.")
            return
        except (_ClientGone, OSError) as exc:
            log.debug("dropped a connection while reading a request: %s", type(exc).__name__)
            return
        finally:
            self._input.deadline = math.inf
        if head is None or not self.server.serving_request(self.connection):
            return
        self.raw_requestline = head[0]
        # parse_request reads the headers from rfile: give it the block already read, and only that.
        connection_input, self.rfile = self.rfile, io.BytesIO(b"".join(head[1:]))
        try:
            parsed = self.parse_request()
        finally:
            self.rfile = connection_input
        if not parsed:
            return
        method = getattr(self, f"do_{self.command}", None)
        if method is None:
            self.send_error(501, f"Unsupported method ({self.command!r})")
            return
        method()
        self.wfile.flush()

    def _read_head(self, limit: int) -> list[bytes] | None:
        """The request line and the header lines up to the empty line ending them, `limit` bytes at most;
        None when the client closed the connection before sending anything."""
        lines: list[bytes] = []
        size = 0
        while True:
            line = self.rfile.readline(limit - size + 1)
            size += len(line)
            if size > limit:
                raise _HeadTooLarge
            if not line.endswith(b"\n"):
                if not line and not lines:
                    return None
                raise _ClientGone
            blank = line in (b"\r\n", b"\n")
            if lines and blank:
                lines.append(line)
                return lines
            # Empty lines before the request line are skipped (RFC 9112, section 2.2).
            if not blank:
                lines.append(line)

    def handle_expect_100(self) -> bool:
        # The base class says "100 Continue" at once, asking for the body before the key is checked.
        self._expects_continue = True
        return True

    # -- plumbing -------------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def send_response(self, code: int, message: str | None = None) -> None:
        # Every answer is counted here, refusals before the key or the request line too.
        super().send_response(code, message)
        self.server.local.engine.metrics.count_request(endpoint_label(self.path), code)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The base class's errors (malformed request line, unknown method, ...) in OpenAI's JSON shape, or
        Anthropic's for its endpoint."""
        self.close_connection = True
        with suppress(OSError):
            self._send_request_error(RequestError(code, message or HTTPStatus(code).phrase))

    def _send_json(
        self, status: int, payload: dict[str, Any], headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        self._send_body(status, json.dumps(payload, ensure_ascii=False).encode("utf-8"), headers)

    def _send_body(
        self,
        status: int,
        body: bytes,
        headers: tuple[tuple[str, str], ...] = (),
        content_type: str = "application/json",
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        if self._body_pending:
            self.close_connection = self._linger = True
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def _speaks_anthropic(self) -> bool:
        """Whether the request is for Anthropic's Messages API, whose clients read errors in its shape."""
        return urlsplit(self.path).path.rstrip("/") == anthropic_api.PATH

    def _speaks_ollama(self) -> bool:
        return ollama_api.speaks_ollama(urlsplit(self.path).path.rstrip("/"))

    def _send_request_error(
        self, error: RequestError | anthropic_api.AnthropicError | ollama_api.OllamaError
    ) -> None:
        headers = (("WWW-Authenticate", "Bearer"),) if error.status == HTTPStatus.UNAUTHORIZED else ()
        if isinstance(error, RequestError) and self._speaks_ollama():
            error = ollama_api.OllamaError(error.status, error.message)
        if isinstance(error, RequestError) and self._speaks_anthropic():
            kind = anthropic_api.error_type(error.status, error.code)
            error = anthropic_api.AnthropicError(error.status, error.message, kind)
        self._send_json(error.status, error.body(), headers)

    def _dispatch(self, method: str) -> None:
        self._body_pending = "Content-Length" in self.headers or "Transfer-Encoding" in self.headers
        try:
            self._check_host()
            if urlsplit(self.path).path.rstrip("/") == "/health":
                # For supervisors and load balancers, which hold no key: it reveals no name or path.
                self._require(method, "GET")
                self._health()
                return
            self._check_key()
            self._route(method)
        except (RequestError, anthropic_api.AnthropicError, ollama_api.OllamaError) as error:
            try:
                self._send_request_error(error)
            except OSError:
                self.close_connection = True
        except (_ClientGone, OSError) as exc:
            log.debug("client connection lost: %s", type(exc).__name__)
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_OPTIONS(self) -> None:
        self._dispatch("OPTIONS")

    def _check_host(self) -> None:
        # A web page whose name was made to resolve to 127.0.0.1 (DNS rebinding) still sends its own name.
        host = (self.headers.get("Host") or "").strip().lower()
        name = host.split("]")[0] + "]" if host.startswith("[") else host.rsplit(":", 1)[0]
        if host and name not in ("127.0.0.1", "localhost", "[::1]"):
            raise RequestError(
                403, "This server only answers requests addressed to 127.0.0.1.", code="bad_host"
            )

    def _check_key(self) -> None:
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        given = [token.strip()] if scheme.lower() == "bearer" else []
        anthropic = self._speaks_anthropic()
        if anthropic:
            # Anthropic's clients send the key as x-api-key (and as a bearer token when given one as such).
            given += [value.strip() for value in self.headers.get_all("x-api-key") or []]
        # Header text arrives decoded as Latin-1; encoding it back gives the bytes that were sent.
        if self.server.local.keys.match([value.encode("latin-1", "replace") for value in given]) is None:
            how = "'Authorization: Bearer KEY'"
            if anthropic:
                how = "'x-api-key: KEY' or " + how
            raise RequestError(
                401,
                f"Missing, wrong or revoked API key: send a key made in Hearth as {how}.",
                code="invalid_api_key",
            )

    def _route(self, method: str) -> None:
        path = urlsplit(self.path).path.rstrip("/")
        if path == "/v1/models" or path.startswith("/v1/models/"):
            self._require(method, "GET")
            model_id = unquote(path[len("/v1/models/") :]) if path != "/v1/models" else None
            self._models(model_id)
        elif path == "/v1/chat/completions":
            self._require(method, "POST")
            self._chat()
        elif path == anthropic_api.PATH:
            self._require(method, "POST")
            self._anthropic_messages()
        elif path in (embeddings.OPENAI_PATH, embeddings.OLLAMA_PATH):
            self._require(method, "POST")
            self._embeddings(ollama=path == embeddings.OLLAMA_PATH)
        elif path == ollama_api.VERSION_PATH:
            self._require(method, "GET")
            self._send_json(200, {"version": ollama_api.VERSION})
        elif path == ollama_api.TAGS_PATH:
            self._require(method, "GET")
            self._ollama_tags()
        elif path == ollama_api.SHOW_PATH:
            self._require(method, "POST")
            self._ollama_show()
        elif path in (ollama_api.CHAT_PATH, ollama_api.GENERATE_PATH):
            self._require(method, "POST")
            self._ollama_generate(chat=path == ollama_api.CHAT_PATH)
        elif path == "/metrics":
            # Behind the key, unlike /health: it names the model and tells how much it has been used.
            self._require(method, "GET")
            self._metrics()
        else:
            raise RequestError(
                404,
                "Unknown path: this server offers /health, /metrics, /v1/models, /v1/chat/completions, "
                "/v1/messages, /v1/embeddings, /api/version, /api/tags, /api/show, /api/chat, "
                "/api/generate and /api/embed.",
                code="not_found",
            )

    @staticmethod
    def _require(method: str, allowed: str) -> None:
        if method != allowed:
            raise RequestError(405, f"Use {allowed} here.", code="method_not_allowed")

    def _read_json(self) -> object:
        if "Transfer-Encoding" in self.headers:
            raise RequestError(411, "Send the body with a Content-Length; chunked uploads are not accepted.")
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            raise RequestError(411, "The request needs a Content-Length.")
        # int() would also take signs, spaces, underscores and other scripts' digits.
        if len(set(lengths)) != 1 or not (lengths[0].isascii() and lengths[0].isdigit()):
            raise RequestError(400, "The Content-Length is not a number of bytes.")
        length = int(lengths[0])
        if length > MAX_BODY_BYTES:
            raise RequestError(
                413, f"The request body is {length} bytes; this server accepts at most {MAX_BODY_BYTES}."
            )
        if self._expects_continue:
            self._expects_continue = False
            self.wfile.write(f"{self.protocol_version} 100 Continue\r\n\r\n".encode())
        self._input.deadline = time.monotonic() + self.server.local.body_timeout_s
        try:
            body = self.rfile.read(length)
        finally:
            self._input.deadline = math.inf
        if len(body) < length:
            raise _ClientGone
        self._body_pending = False
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise RequestError(400, "The request body is not valid JSON.") from exc

    # -- endpoints ------------------------------------------------------------------------------------

    def _model_object(self, name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": self.server.local.started_at, "owned_by": "hearth"}

    def _health(self) -> None:
        state = self.server.local.engine.readiness
        if state is ModelState.READY:
            self._send_json(200, {"status": "ok"})
        else:
            self._send_json(503, {"status": "loading" if state is ModelState.LOADING else "no_model"})

    def _metrics(self) -> None:
        body, content_type = self.server.local.engine.metrics.exposition(self.headers.get("Accept"))
        self._send_body(200, body, content_type=content_type)

    def _models(self, model_id: str | None) -> None:
        local = self.server.local
        names = [name for name in (local.engine.loaded_model_name, local.embedding_model_name) if name]
        if model_id is None:
            data = [self._model_object(name) for name in dict.fromkeys(names)]
            self._send_json(200, {"object": "list", "data": data})
        elif model_id in names:
            self._send_json(200, self._model_object(model_id))
        else:
            raise RequestError(404, f"No model named {model_id!r} is loaded.", code="model_not_found")

    def _sampling_defaults(self, model: str) -> SamplingParams:
        """What a request leaves out: Hearth's settings for that model."""
        return self.server.local.engine.generation_settings(None, model).sampling

    def _chat(self) -> None:
        request = parse_chat_request(self._read_json(), self._sampling_defaults)
        calls: list[ModelCall] = []

        def respond(events: Iterator[TokenDelta | Finished | Failed]) -> None:
            completion = _Completion(request, calls)
            if request.stream:
                self._stream(completion, events)
            else:
                self._answer(completion, events)

        self._generate(request, respond, calls=calls)

    def _embeddings(self, *, ollama: bool) -> None:
        """Off the chat runner's queue (the embedding model has a process of its own), but counted as
        activity and cancelled when the client hangs up, like a chat request."""
        local = self.server.local
        body = self._read_json()
        try:
            request = embeddings.parse_ollama(body) if ollama else embeddings.parse_openai(body)
            with local.serving(self.connection) as job:
                done = embeddings.embed(
                    request,
                    local.embedder,
                    chat_model=local.engine.loaded_model_name,
                    cancelled=lambda: job.cancelled,
                )
        except embeddings.Cancelled:
            log.info("an embeddings request was cancelled: its client hung up")
            self.close_connection = True
            return
        except embeddings.EmbeddingError as exc:
            kind = "server_error" if exc.status >= 500 else "invalid_request_error"
            raise RequestError(exc.status, exc.message, kind=kind, param=exc.param, code=exc.code) from exc
        shaped = embeddings.ollama_response if ollama else embeddings.openai_response
        self._send_json(200, shaped(request, done))

    def _anthropic_messages(self) -> None:
        parsed = anthropic_api.parse_messages_request(self._read_json(), self._sampling_defaults)
        request = ChatRequest(
            model=parsed.model,
            messages=parsed.messages,
            sampling=parsed.sampling,
            stop=parsed.stop_sequences,
            stream=parsed.stream,
            include_usage=False,
        )
        prompt_tokens: list[int] = []

        def respond(events: Iterator[TokenDelta | Finished | Failed]) -> None:
            reply = anthropic_api.Reply(parsed, prompt_tokens[0] if prompt_tokens else 0)
            if not parsed.stream:
                self._send_json(200, reply.whole(events))
                return
            self._start_event_stream()
            for name, payload in reply.events(events):
                self._write_chunk(anthropic_api.sse(name, payload))
            self._write_chunk(b"")

        self._generate(request, respond, prompt_tokens=prompt_tokens)

    # -- Ollama's API (app.local_api.ollama_api) --------------------------------------------------------

    def _ollama_model(self, name: str, *, unloaded_status: int) -> str:
        """The loaded model's name when `name` is it (Ollama's ":latest" added or not); else a 404, or
        `unloaded_status` with no model loaded."""
        loaded = self.server.local.engine.loaded_model_name
        if loaded is None:
            raise ollama_api.OllamaError(
                unloaded_status, "No model is loaded in Hearth: load one in the window first."
            )
        if ollama_api.resolve_model(name, loaded) != loaded:
            raise ollama_api.OllamaError(
                404, f"The model {name!r} is not loaded; this server has {loaded!r}."
            )
        return loaded

    def _ollama_tags(self) -> None:
        engine = self.server.local.engine
        loaded = engine.loaded_model_name
        models = []
        if loaded is not None:
            # Gone from the library only while it is being removed, which unloads it first.
            with suppress(ModelNotFound):
                models.append(ollama_api.tags_entry(engine.library.get(loaded)))
        self._send_json(200, {"models": models})

    def _ollama_show(self) -> None:
        engine = self.server.local.engine
        loaded = self._ollama_model(ollama_api.model_name(self._read_json()), unloaded_status=404)
        try:
            model = engine.library.get(loaded)
        except ModelNotFound as exc:
            raise ollama_api.OllamaError(404, str(exc)) from exc
        runner = engine.loaded
        context = runner.n_ctx if runner is not None else None
        self._send_json(200, ollama_api.show(model, self._sampling_defaults(loaded), context))

    def _ollama_generate(self, *, chat: bool) -> None:
        started = time.perf_counter()
        loaded = self.server.local.engine.loaded_model_name
        parse = ollama_api.parse_chat_request if chat else ollama_api.parse_generate_request
        parsed = parse(
            self._read_json(), lambda name: self._sampling_defaults(ollama_api.resolve_model(name, loaded))
        )
        reply = ollama_api.Reply(parsed, started)
        model = ollama_api.resolve_model(parsed.model, loaded)
        if not parsed.messages:
            # Ollama's way to load a model: the one loaded is ready. Nothing is unloaded for keep_alive 0.
            self._ollama_model(parsed.model, unloaded_status=503)
            self._send_json(200, reply.loaded())
            return
        request = ChatRequest(
            model=model,
            messages=parsed.messages,
            sampling=parsed.sampling,
            stop=parsed.stop,
            stream=parsed.stream,
            include_usage=False,
            json_schema=parsed.json_schema,
        )

        def respond(events: Iterator[TokenDelta | Finished | Failed]) -> None:
            if not parsed.stream:
                self._send_json(200, reply.whole(events))
                return
            self._start_event_stream(ollama_api.NDJSON)
            for line in reply.lines(events):
                self._write_chunk(json.dumps(line, ensure_ascii=False).encode("utf-8") + b"\n")
            self._write_chunk(b"")

        self._generate(request, respond)

    def _generate(
        self,
        request: ChatRequest,
        respond: Callable[[Iterator[TokenDelta | Finished | Failed]], None],
        *,
        calls: list[ModelCall] | None = None,
        prompt_tokens: list[int] | None = None,
    ) -> None:
        """Every API's generation: in turn for the runner, cancelled when the client hangs up. `respond` is
        given the events once the first has come, so that what fails before it (a prompt over the context)
        is answered with an error status rather than inside a stream."""
        local = self.server.local
        engine = local.engine
        with local.serving(self.connection) as job:
            events = engine.complete(
                request.messages,
                request.sampling,
                model_name=request.model,
                stop=request.stop,
                job=job,
                tools=request.tools,
                calls=calls,
                prompt_tokens=prompt_tokens,
                json_schema=request.json_schema,
            )
            with closing(events):
                try:
                    first = next(events)
                except JobCancelled:
                    log.info("a request was cancelled before its turn")
                    self.close_connection = True
                    return
                except NoModelLoaded as exc:
                    raise RequestError(503, str(exc), kind="server_error", code="model_not_loaded") from exc
                except ModelNotFound as exc:
                    raise RequestError(404, str(exc), param="model", code="model_not_found") from exc
                except ToolsNotTaken as exc:
                    raise RequestError(400, str(exc), param="tools", code="unsupported") from exc
                if isinstance(first, Failed):
                    raise _failure(first)
                respond(chain([first], events))

    def _answer(self, completion: _Completion, events: Iterator[TokenDelta | Finished | Failed]) -> None:
        reply = whole_reply(
            events,
            _failure,
            lambda: RequestError(503, "The request was cancelled.", kind="server_error", code="cancelled"),
        )
        if reply is not None:
            text, stats = reply
            self._send_json(200, completion.whole(text + completion.unreadable(), stats))

    def _start_event_stream(self, content_type: str = "text/event-stream; charset=utf-8") -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _stream(self, completion: _Completion, events: Iterator[TokenDelta | Finished | Failed]) -> None:
        self._start_event_stream()
        self._event(completion.chunk({"role": "assistant", "content": ""}))
        for event in events:
            if isinstance(event, TokenDelta):
                if event.text:
                    self._event(completion.chunk({"content": event.text}))
            elif isinstance(event, Failed):
                self._event(_failure(event).body())
            elif event.stats.stop_reason is StopReason.CANCELLED:
                log.info("a streamed request was cancelled after %d tokens", event.stats.completion_tokens)
                self._event(RequestError(503, "The request was cancelled.", kind="server_error").body())
            else:
                if completion.unreadable():
                    self._event(completion.chunk({"content": completion.unreadable()}))
                if completion.readable:
                    self._event(completion.chunk({"tool_calls": completion.calls_json(streamed=True)}))
                self._event(completion.chunk({}, completion.finish_reason(event.stats)))
                if completion.request.include_usage:
                    self._event(completion.usage_chunk(event.stats))
                self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")

    def _event(self, payload: dict[str, Any]) -> None:
        self._write_chunk(b"data: " + json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n\n")

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))


class _Completion:
    """The response's fixed parts: one id and creation time for every chunk of a stream."""

    def __init__(self, request: ChatRequest, calls: list[ModelCall]) -> None:
        self.request = request
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        # The model's tool calls, taken out of its text by the engine; complete once its events end.
        self._calls = calls

    @property
    def readable(self) -> list[ToolCallRecord]:
        return [call.record for call in self._calls if call.problem is None]

    def unreadable(self) -> str:
        """A call the model wrote that cannot be read: given back as the text it is, for the client."""
        return "".join(call.record.arguments for call in self._calls if call.problem is not None)

    def calls_json(self, *, streamed: bool = False) -> list[dict[str, Any]]:
        return [
            {
                **({"index": index} if streamed else {}),
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for index, call in enumerate(self.readable)
        ]

    def finish_reason(self, stats: GenerationStats) -> str:
        return "tool_calls" if self.readable else _FINISH_REASONS[stats.stop_reason]

    def _base(self, kind: str) -> dict[str, Any]:
        return {"id": self.id, "object": kind, "created": self.created, "model": self.request.model}

    def whole(self, text: str, stats: GenerationStats) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if self.readable:
            message = {"role": "assistant", "content": text or None, "tool_calls": self.calls_json()}
        choice = {
            "index": 0,
            "message": message,
            "finish_reason": self.finish_reason(stats),
            "logprobs": None,
        }
        return {**self._base("chat.completion"), "choices": [choice], "usage": _usage(stats)}

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return {**self._base("chat.completion.chunk"), "choices": [choice]}

    def usage_chunk(self, stats: GenerationStats) -> dict[str, Any]:
        return {**self._base("chat.completion.chunk"), "choices": [], "usage": _usage(stats)}


@dataclass
class _Slot:
    """A connection holding a request thread."""

    # Since when it has been waiting for a request's head; None while it is busy with a request.
    awaiting_since: float | None
    # Shut down to make room for a newer connection; its thread is ending.
    evicted: bool = False


class _HTTPServer(ThreadingHTTPServer):
    # Request threads are joined by server_close, so stop() returns with every request finished.
    daemon_threads = False
    # On Windows SO_REUSEADDR lets a second program bind the same port and take over the connections.
    allow_reuse_address = sys.platform != "win32"
    # Connections queued by the system hold no descriptor of this process; a burst of real clients should
    # wait there rather than have their connection attempts dropped.
    request_queue_size = 64

    def __init__(self, port: int, local: LocalServer) -> None:
        self.local = local
        self._connections: dict[socket.socket, _Slot] = {}
        self._connections_lock = threading.Lock()
        self._warned_full = False
        super().__init__((LOOPBACK, port), _Handler)

    def get_request(self) -> tuple[Any, Any]:
        try:
            return super().get_request()
        except OSError as exc:
            # Out of descriptors (something else in the process holds them): the listening socket stays
            # readable, and without a pause the serving loop would spin a core retrying.
            if exc.errno in (errno.EMFILE, errno.ENFILE, 10024):  # 10024 is Windows' WSAEMFILE
                time.sleep(0.1)
            raise

    def server_bind(self) -> None:
        # HTTPServer.server_bind would look up the host's full name, which can stall on a broken resolver.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = LOOPBACK, self.server_address[1]

    def process_request(self, request: Any, client_address: Any) -> None:
        """Start a thread for a new connection, within `max_connections` (see the module's docstring)."""
        limit = self.local.max_connections
        evict: socket.socket | None = None
        with self._connections_lock:
            live = [(slot, sock) for sock, slot in self._connections.items() if not slot.evicted]
            full = len(live) >= limit
            if full:
                waiting = [
                    (since, sock, slot) for slot, sock in live if (since := slot.awaiting_since) is not None
                ]
                # Evicted connections hold their thread until it notices; this bounds how many can.
                if waiting and len(self._connections) < 2 * limit:
                    _, evict, slot = min(waiting, key=lambda item: item[0])
                    slot.evicted = True
            if not full or evict is not None:
                self._connections[request] = _Slot(awaiting_since=time.monotonic())
            warn = full and not self._warned_full
            self._warned_full |= full
        if warn:
            log.warning(
                "the local API has %d connections open, its limit: newer ones now take the place of idle "
                "ones, or are refused while all are busy",
                limit,
            )
        if evict is not None:
            with suppress(OSError):
                evict.shutdown(socket.SHUT_RDWR)  # wakes its thread, which then ends
        elif full:
            with suppress(OSError):
                request.setblocking(False)  # nothing here may wait for this client
                request.send(_BUSY_RESPONSE)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def awaiting_request(self, connection: socket.socket) -> None:
        with self._connections_lock:
            slot = self._connections.get(connection)
            if slot is not None:
                slot.awaiting_since = time.monotonic()

    def serving_request(self, connection: socket.socket) -> bool:
        """Mark a connection busy with a request; False when it was just evicted, and must close."""
        with self._connections_lock:
            slot = self._connections.get(connection)
            if slot is None or slot.evicted:
                return False
            slot.awaiting_since = None
            return True

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.pop(request, None)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        """Wake every request thread blocked on its client (including idle keep-alive connections)."""
        with self._connections_lock:
            connections = list(self._connections)
        for connection in connections:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.exception("a local server request failed")


def _bind_failure(port: int, exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return f"Hearth may not use port {port} (ports below 1024 need administrator rights); choose another."
    # 10048 is Windows' WSAEADDRINUSE.
    if exc.errno in (errno.EADDRINUSE, 10048):
        return f"Port {port} on {LOOPBACK} is already in use by another program; choose another port."
    return f"Could not listen on {LOOPBACK}:{port}: {exc.strerror or exc}"


class LocalServer:
    """The API server for one ChatEngine. `start()` binds and serves on a thread; `stop()` cancels what is
    running, drops every connection and returns when all request threads have ended."""

    def __init__(
        self,
        engine: ChatEngine,
        api_key: str | None = None,
        *,
        keys: AcceptedKeys | None = None,
        port: int,
        io_timeout_s: float = IO_TIMEOUT_S,
        on_activity: Callable[[int], None] | None = None,
        embedder: embeddings.ServedEmbedder | None = None,
    ) -> None:
        """`embedder`: the embedding model `/v1/embeddings` and `/api/embed` answer with; its runner starts
        at the first request that needs it."""
        if not 0 <= port <= 65535:
            raise HearthError(f"The port must be from 1 to 65535 (or 0 for any free port), not {port}.")
        self.engine = engine
        self.embedder = embedder
        self.io_timeout_s = io_timeout_s
        # Limits on what a client without the key can hold (see the module's docstring). Attributes, read
        # for each connection, so that tests can shrink them on one server.
        self.header_timeout_s = HEADER_TIMEOUT_S
        self.body_timeout_s = BODY_TIMEOUT_S
        self.max_header_bytes = MAX_HEADER_BYTES
        self.max_connections = MAX_CONNECTIONS
        self.started_at = int(time.time())
        self._port = port
        self._on_activity = on_activity
        self._lock = threading.Lock()
        self._jobs: set[Job] = set()
        self._stopping = False
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        # `keys` (ApiKeys.accepted()) follows the keys as they are made and revoked; one `api_key` is just
        # that key, for as long as the server runs.
        if keys is None:
            if not api_key:
                raise ValueError("give the server an API key, or the keys it accepts")
            keys = AcceptedKeys.fixed(api_key)
        self.keys = keys

    def start(self) -> None:
        """Bind 127.0.0.1:port and serve. Raises HearthError when the port cannot be used."""
        try:
            httpd = _HTTPServer(self._port, self)
        except OSError as exc:
            raise HearthError(_bind_failure(self._port, exc)) from exc
        self._httpd = httpd
        # The serving loop notices stop() only when it wakes up; waking 10 times a second costs nothing
        # measurable and lets stop() (and the window's switch) answer quickly.
        self._thread = threading.Thread(
            target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, name="hearth-local-server"
        )
        self._thread.start()
        self.keys.start()
        log.info("serving the OpenAI-compatible API at %s", self.url)

    @property
    def address(self) -> tuple[str, int]:
        """Where the listening socket is bound, as the operating system reports it."""
        assert self._httpd is not None, "not started"
        host, port = self._httpd.socket.getsockname()[:2]
        return host, port

    @property
    def port(self) -> int:
        return self.address[1]

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}/v1"

    @property
    def embedding_model_name(self) -> str | None:
        """The embedding model's id, listed beside the chat model; None without one."""
        return embeddings.model_id(self.embedder.model_path) if self.embedder is not None else None

    @property
    def active_requests(self) -> int:
        with self._lock:
            return len(self._jobs)

    @contextmanager
    def serving(self, connection: socket.socket) -> Iterator[Job]:
        """A chat request's job for the runner queue, counted as activity while it waits or generates and
        cancelled when its client hangs up."""
        job = Job()
        with self._lock:
            if self._stopping:
                raise RequestError(503, "The server is stopping.", kind="server_error", code="stopping")
            self._jobs.add(job)
            active = len(self._jobs)
        self._report(active)
        done = threading.Event()
        watcher = threading.Thread(
            target=_watch_for_hangup,
            args=(connection, done, lambda: self.engine.cancel_job(job)),
            name="hearth-local-server-hangup",
            daemon=True,
        )
        watcher.start()
        try:
            yield job
        finally:
            done.set()
            watcher.join()
            with self._lock:
                self._jobs.discard(job)
                active = len(self._jobs)
            self._report(active)

    def _report(self, active: int) -> None:
        if self._on_activity is not None:
            self._on_activity(active)

    def stop(self) -> None:
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        with self._lock:
            self._stopping = True
            jobs = list(self._jobs)
        httpd.shutdown()
        for job in jobs:
            self.engine.cancel_job(job)
        httpd.drop_connections()
        httpd.server_close()
        thread.join()
        self._httpd = self._thread = None
        # After the last request: the last uses it noted are written now.
        self.keys.close()
        log.info("the local API server stopped")

    def __enter__(self) -> LocalServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
