"""A client for OpenAI-compatible chat servers (vLLM, TGI, llama.cpp's servers, Ollama): the model list and
streamed chat completions, as the same events the local runner yields.

One connection per request, never pooled: Stop shuts that connection's socket down from the thread that
asks, which wakes a read blocked in another thread at once (closing a socket does not). Redirects are not
followed (the API key would go wherever a redirect points) and proxy variables are not read, for the
same reason. TLS certificates are always verified: against the system's CAs, or against a CA bundle the
user chose for an internal server.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import httpx2

from app.errors import HearthError
from app.logging_setup import REDACTED, redact, register_secret
from inference.protocol import (
    SAMPLING_SETTINGS,
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

log = logging.getLogger("hearth.openai")

CONNECT_TIMEOUT_S: Final = 10.0
# A server may queue a request or read a long prompt before its first byte; beyond this it is stuck.
READ_TIMEOUT_S: Final = 120.0
LIST_TIMEOUT_S: Final = 15.0
MAX_EVENT_BYTES: Final = 1 << 20
MAX_LISTED_MODELS: Final = 1000
MAX_ERROR_BODY_BYTES: Final = 64 * 1024
MAX_DETAIL_CHARS: Final = 300
# The reasoning parser downstream separates thinking from the answer by these tags.
THINK_OPEN: Final = "<think>"
THINK_CLOSE: Final = "</think>"
_LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1"})
_CONTEXT_ERROR = re.compile(
    r"context[ _](?:length|window|size)|maximum context|tokens \+ `?max_new_tokens`? must be", re.IGNORECASE
)
_FINISH_REASONS: Final = {
    "stop": StopReason.END_OF_TURN,
    "tool_calls": StopReason.END_OF_TURN,
    "length": StopReason.MAX_TOKENS,
}


class RemoteError(HearthError):
    """A server could not be used: the message is for the user, `kind` for the code that shows it."""

    def __init__(self, kind: ErrorKind, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


# Context lengths a server reports are taken between these; anything else is a server's mistake.
MIN_REPORTED_CONTEXT: Final = 16
MAX_REPORTED_CONTEXT: Final = 1 << 30


@dataclass(frozen=True)
class ServerModel:
    id: str
    owned_by: str | None = None
    # The tokens of prompt and reply together the server takes for this model, as it reports them
    # (see OpenAIClient.list_models); None when it does not say.
    context_tokens: int | None = None


def normalize_base_url(url: str) -> str:
    """The API root as `scheme://host[:port]/…/v1`: what the user typed, with `/v1` added when no version
    is given. Raises HearthError for anything but a plain http(s) address."""
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise HearthError(f"“{text}” is not a server address: use http://HOST:PORT or https://HOST/….")
    if parts.username is not None or parts.password is not None:
        # A key in the address would end up in settings files and logs; it goes in the keyring instead.
        raise HearthError("Leave credentials out of the address; give the API key separately.")
    if parts.query or parts.fragment:
        raise HearthError("A server address has no query (?…) or fragment (#…).")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port out of range
    except ValueError as exc:
        raise HearthError(f"“{text}” has an invalid port.") from exc
    path = parts.path.rstrip("/")
    if not re.search(r"/v\d+$", path):
        path += "/v1"
    return urlunsplit((parts.scheme, parts.netloc.lower(), path, "", ""))


def is_loopback(url: str) -> bool:
    return (urlsplit(url).hostname or "") in _LOOPBACK_HOSTS


class StreamCancel:
    """Stop for one request at a time, safe from any thread: sets a flag and shuts down the socket."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False
        self._sockets: list[socket.socket] = []

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def reset(self) -> None:
        with self._lock:
            self._cancelled = False
            self._sockets.clear()

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            sockets = list(self._sockets)
        for sock in sockets:
            _shutdown(sock)

    def attach(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            cancelled = self._cancelled
        if cancelled:
            _shutdown(sock)

    def detach(self) -> None:
        with self._lock:
            self._sockets.clear()


def _shutdown(sock: socket.socket) -> None:
    # Already closed or never connected: nothing left to wake.
    with contextlib.suppress(OSError):
        # The plain socket's shutdown, also for a TLS socket: SSLSocket.shutdown would unwrap the TLS
        # layer under the reading thread's feet. At the descriptor level, a blocked recv returns at once.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


class OpenAIClient:
    """Blocking; one request at a time per `cancel`. `name` is how messages refer to the server."""

    def __init__(
        self,
        base_url: str,
        *,
        name: str = "",
        api_key: str | None = None,
        ca_bundle: Path | None = None,
        connect_timeout_s: float = CONNECT_TIMEOUT_S,
        read_timeout_s: float = READ_TIMEOUT_S,
    ) -> None:
        self.base_url = normalize_base_url(base_url)
        self.name = name or (urlsplit(self.base_url).netloc)
        self._api_key = api_key
        if api_key:
            register_secret(api_key)
        self._ca_bundle = ca_bundle
        self._connect_timeout_s = connect_timeout_s
        self._read_timeout_s = read_timeout_s

    # -- requests -----------------------------------------------------------------------------------

    def list_models(self, cancel: StreamCancel | None = None) -> list[ServerModel]:
        """GET /models, with each model's context length where the server tells it: vLLM's
        `max_model_len` in the list; else llama.cpp's server (its list has `meta`) from GET /props
        (`default_generation_settings.n_ctx`, what it serves), failing that the model's `meta.n_ctx_train`;
        else text-generation-inference's GET /info (`max_total_tokens`). The extra request is made only
        when the list says nothing, and its failure costs nothing but the figure.

        Raises RemoteError; `cancel` ends the request at once from another thread."""
        cancel = cancel or StreamCancel()
        timeout = min(self._read_timeout_s, LIST_TIMEOUT_S)
        with self._open("GET", "/models", None, cancel, timeout) as response:
            if response.status_code != 200:
                raise self._status_error(response, what="the model list")
            body = self._read_body(response, MAX_EVENT_BYTES)
        try:
            data = json.loads(body)
            entries = data["data"]
            if not isinstance(entries, list):
                raise TypeError("data is not a list")
        except (ValueError, KeyError, TypeError) as exc:
            raise RemoteError(
                ErrorKind.SERVER_ERROR,
                f"{self.name} answered the model list with something that is not an OpenAI model list "
                f"({exc}); is {self.base_url} the API address?",
            ) from exc
        listed = [
            entry
            for entry in entries[:MAX_LISTED_MODELS]
            if isinstance(entry, dict) and isinstance(entry.get("id"), str) and entry["id"].strip()
        ]
        contexts = [_context_length(entry.get("max_model_len")) for entry in listed]
        if listed and not any(contexts):
            llama_cpp = any(isinstance(entry.get("meta"), dict) for entry in listed)
            served = self._reported_context(cancel, llama_cpp)
            trained = [_context_length(_get(entry, "meta", "n_ctx_train")) for entry in listed]
            contexts = [served or n for n in trained]
        models: list[ServerModel] = []
        for entry, context in zip(listed, contexts, strict=True):
            owner = entry.get("owned_by")
            models.append(ServerModel(entry["id"], owner if isinstance(owner, str) else None, context))
        return models

    def _reported_context(self, cancel: StreamCancel, llama_cpp: bool) -> int | None:
        """What llama.cpp's server says it serves (GET /props) or TGI's (GET /info), beside the API root."""
        path, keys = (
            ("/props", ("default_generation_settings", "n_ctx"))
            if llama_cpp
            else ("/info", ("max_total_tokens",))
        )
        timeout = min(self._read_timeout_s, LIST_TIMEOUT_S)
        try:
            with self._open("GET", path, None, cancel, timeout, root=True) as response:
                if response.status_code != 200:
                    return None
                body = self._read_body(response, MAX_EVENT_BYTES)
            data = json.loads(body)
        except (RemoteError, ValueError, RecursionError):
            return None
        return _context_length(_get(data, *keys))

    def chat(
        self,
        model: str,
        messages: Sequence[ChatMessage],
        sampling: SamplingParams,
        *,
        request_id: str,
        cancel: StreamCancel,
        tools: Sequence[ToolSpec] = (),
    ) -> ChatStream:
        """POST /chat/completions with stream=true and wait for the response headers. With `tools`, the
        model may call them: the calls it streams are the stream's `tool_calls` once its events end.

        Raises RemoteError when the server cannot be reached or refuses the request (nothing was
        generated). Afterwards everything, including a cut connection, arrives as events of the stream.
        """
        body: dict[str, Any] = {
            "model": model,
            "messages": [_message_json(m) for m in messages],
            "stream": True,
            # Servers that support it send token counts in a last event; others ignore it.
            "stream_options": {"include_usage": True},
            **request_sampling(sampling),
        }
        if tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": json.loads(t.parameters_json),
                    },
                }
                for t in tools
            ]
        started = time.perf_counter()
        context = self._open("POST", "/chat/completions", body, cancel, self._read_timeout_s)
        try:
            response = context.__enter__()
        except RemoteError:
            if cancel.cancelled:
                return ChatStream.cancelled_before_reply(request_id, sampling)
            raise
        if response.status_code != 200:
            try:
                raise self._status_error(response, what=f"model “{model}”", model=model)
            finally:
                context.__exit__(None, None, None)
        return ChatStream(self, response, context, request_id, sampling, cancel, started)

    # -- plumbing -----------------------------------------------------------------------------------

    def _ssl_context(self) -> ssl.SSLContext | bool:
        if self._ca_bundle is None:
            return True
        try:
            # Only the chosen bundle is trusted: an internal CA, not the system's list plus it.
            return ssl.create_default_context(cafile=str(self._ca_bundle))
        except (OSError, ssl.SSLError) as exc:
            raise RemoteError(
                ErrorKind.SERVER_UNREACHABLE,
                f"The CA bundle for {self.name} ({self._ca_bundle}) could not be read: {exc}.",
            ) from exc

    def _headers(self) -> dict[str, str]:
        headers = {"accept": "application/json, text/event-stream", "user-agent": "Hearth"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        return headers

    def _open(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None,
        cancel: StreamCancel,
        read_s: float,
        *,
        root: bool = False,
    ) -> _Exchange:
        """`root`: `path` is beside the API root (llama.cpp's /props, TGI's /info), not under it."""
        base = re.sub(r"/v\d+$", "", self.base_url) if root else self.base_url
        return _Exchange(self, method, base + path, body, cancel, read_s)

    def _read_body(self, response: httpx2.Response, limit: int) -> bytes:
        chunks: list[bytes] = []
        size = 0
        try:
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    break
        except httpx2.TransportError as exc:
            raise self.transport_error(exc, during="reading its answer") from exc
        return b"".join(chunks)[:limit]

    def _detail(self, response: httpx2.Response) -> str:
        """The server's own explanation, short, on one line, never the API key."""
        try:
            raw = self._read_body(response, MAX_ERROR_BODY_BYTES)
        except RemoteError:
            return ""
        text = raw.decode("utf-8", "replace")
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            found = data.get("error", data.get("detail", data.get("message")))
            if isinstance(found, dict):
                found = found.get("message", found.get("detail"))
            if isinstance(found, str | int | float):
                text = str(found)
            elif isinstance(found, list) and found:
                text = json.dumps(found)[:MAX_DETAIL_CHARS]
        return self.clean(text)

    def clean(self, text: str) -> str:
        text = " ".join(text.split())
        if len(text) > MAX_DETAIL_CHARS:
            text = text[:MAX_DETAIL_CHARS] + "…"
        text = redact(text)
        return text.replace(self._api_key, REDACTED) if self._api_key else text

    def _status_error(self, response: httpx2.Response, *, what: str, model: str | None = None) -> RemoteError:
        status = response.status_code
        detail = self._detail(response)
        said = f": {detail}" if detail else ""
        server = self.name
        if response.has_redirect_location:
            where = _host(response.headers.get("location", ""))
            return RemoteError(
                ErrorKind.SERVER_ERROR,
                f"{server} redirected the request to {where or 'another address'} ({status}); Hearth does "
                "not follow redirects with an API key. Add the server with the address it redirects to.",
                status=status,
            )
        if status in (401, 403):
            if self._api_key:
                message = (
                    f"{server} refused the API key ({status}{said}). Add the server again with the right key."
                )
            else:
                message = f"{server} needs an API key ({status}{said}). Add the server again with its key."
            return RemoteError(ErrorKind.SERVER_AUTH, message, status=status)
        if status == 404:
            if model is not None:
                return RemoteError(
                    ErrorKind.MODEL_MISSING,
                    f"{server} has no model “{model}” (404{said}); pick one of the models it lists.",
                    status=status,
                )
            return RemoteError(
                ErrorKind.SERVER_ERROR,
                f"{server} has no OpenAI-compatible API at {self.base_url} (404{said}); check the address "
                "(it usually ends in /v1).",
                status=status,
            )
        if status == 429:
            retry = response.headers.get("retry-after", "").strip()
            later = f" Try again in {retry} s." if retry.isdigit() else " Try again in a moment."
            return RemoteError(
                ErrorKind.SERVER_BUSY, f"{server} is busy or rate-limited (429{said}).{later}", status=status
            )
        if status in (400, 413, 422) and (status == 413 or _CONTEXT_ERROR.search(detail)):
            return RemoteError(
                ErrorKind.CONTEXT_OVERFLOW,
                f"The conversation is too long for {what} on {server} ({status}{said}). Start a new "
                "conversation, or shorten the message.",
                status=status,
            )
        if status >= 500:
            return RemoteError(
                ErrorKind.SERVER_ERROR,
                f"{server} failed with a server error ({status}{said}); try again later, or ask whoever runs "
                "it.",
                status=status,
            )
        return RemoteError(
            ErrorKind.SERVER_ERROR,
            f"{server} rejected the request for {what} ({status}{said}).",
            status=status,
        )

    def transport_error(self, exc: httpx2.TransportError, *, during: str) -> RemoteError:
        where = urlsplit(self.base_url).netloc
        verify = _certificate_problem(exc)
        if verify is not None:
            return RemoteError(
                ErrorKind.SERVER_CERTIFICATE,
                f"The TLS certificate of {self.name} ({where}) could not be verified ({verify}). For an "
                "internal server, choose the CA bundle that signed it.",
            )
        if isinstance(exc, httpx2.ConnectTimeout):
            return RemoteError(
                ErrorKind.SERVER_UNREACHABLE,
                f"{self.name} ({where}) did not accept a connection within {self._connect_timeout_s:g} s.",
            )
        if isinstance(exc, httpx2.ConnectError):
            return RemoteError(
                ErrorKind.SERVER_UNREACHABLE,
                f"Could not connect to {self.name} at {where} ({self.clean(str(exc)) or 'refused'}); is the "
                "server running and the address right?",
            )
        if isinstance(exc, httpx2.TimeoutException):
            return RemoteError(
                ErrorKind.SERVER_TIMEOUT,
                f"{self.name} sent nothing for {self._read_timeout_s:g} s while {during}; it may be "
                "overloaded.",
            )
        return RemoteError(
            ErrorKind.STREAM_CUT,
            f"The connection to {self.name} was lost while {during} "
            f"({self.clean(str(exc)) or type(exc).__name__}).",
        )


class _Exchange:
    """One request on its own connection: a context manager around the streamed response."""

    def __init__(
        self,
        client: OpenAIClient,
        method: str,
        url: str,
        body: Mapping[str, Any] | None,
        cancel: StreamCancel,
        read_s: float,
    ) -> None:
        self._client = client
        self._method = method
        self._url = url
        self._body = body
        self._cancel = cancel
        self._read_s = read_s
        self._http: httpx2.Client | None = None
        self._response: httpx2.Response | None = None

    def _trace(self, event: str, info: Mapping[str, Any]) -> None:
        # The socket, as soon as it exists, so a Stop can wake a read that waits for the first byte.
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            stream = info.get("return_value")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if isinstance(sock, socket.socket):
                self._cancel.attach(sock)

    def __enter__(self) -> httpx2.Response:
        client = self._client
        timeout = httpx2.Timeout(connect=client._connect_timeout_s, read=self._read_s, write=30.0, pool=5.0)
        self._http = httpx2.Client(
            verify=client._ssl_context(), timeout=timeout, trust_env=False, follow_redirects=False
        )
        try:
            request = self._http.build_request(
                self._method,
                self._url,
                headers=client._headers(),
                json=self._body,
                extensions={"trace": self._trace},
            )
            self._response = self._http.send(request, stream=True)
            log.info("%s %s: %d", self._method, self._url, self._response.status_code)
        except httpx2.TransportError as exc:
            log.info("%s %s failed: %r", self._method, self._url, exc)
            self.__exit__(None, None, None)
            if self._cancel.cancelled:
                raise RemoteError(ErrorKind.INTERNAL, "Stopped before the server answered.") from exc
            raise client.transport_error(exc, during="waiting for its answer") from exc
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self._response

    def __exit__(self, *_exc: object) -> None:
        self._cancel.detach()
        if self._response is not None:
            # A connection cut, or shut down by Stop, has nothing left to close cleanly.
            with contextlib.suppress(httpx2.TransportError):
                self._response.close()
            self._response = None
        if self._http is not None:
            self._http.close()
            self._http = None


def request_sampling(sampling: SamplingParams) -> dict[str, Any]:
    """The settings every OpenAI-compatible server understands. The others (top_k, min_p, the repeat
    penalty) are not part of the API (some servers reject unknown fields), so the server's defaults apply to
    them, as to a setting left unset (no seed: the server chooses one)."""
    values = {name: getattr(sampling, name) for name, setting in SAMPLING_SETTINGS.items() if setting.openai}
    return {name: value for name, value in values.items() if value is not None}


class ChatStream:
    """The events of one streamed reply: TokenDelta…, then exactly one Finished or Failed."""

    def __init__(
        self,
        client: OpenAIClient | None,
        response: httpx2.Response | None,
        exchange: _Exchange | None,
        request_id: str,
        sampling: SamplingParams,
        cancel: StreamCancel | None,
        started: float,
    ) -> None:
        self._client = client
        self._response = response
        self._exchange = exchange
        self._request_id = request_id
        self._sampling = sampling
        self._cancel = cancel
        self._started = started
        self._first_at: float | None = None
        self._last_at: float | None = None
        self._chunks = 0
        self._usage: dict[str, Any] = {}
        self._finish_reason: str | None = None
        self._thinking = False
        # The calls streamed in `delta.tool_calls`, by index: their id, name and arguments come in pieces.
        self._calls: dict[int, dict[str, str]] = {}

    @property
    def tool_calls(self) -> list[ToolCallRecord]:
        """The calls the model made, complete once the events have ended."""
        return [
            ToolCallRecord(
                call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
                call.get("name", ""),
                call.get("arguments") or "{}",
            )
            for _, call in sorted(self._calls.items())
        ]

    @classmethod
    def cancelled_before_reply(cls, request_id: str, sampling: SamplingParams) -> ChatStream:
        return cls(None, None, None, request_id, sampling, None, time.perf_counter())

    def close(self) -> None:
        if self._exchange is not None:
            self._exchange.__exit__(None, None, None)
            self._exchange = None

    def events(self) -> Iterator[TokenDelta | Finished | Failed]:
        try:
            yield from self._events()
        finally:
            self.close()

    def _events(self) -> Iterator[TokenDelta | Finished | Failed]:
        if self._response is None or self._client is None or self._cancel is None:
            yield self._finished(StopReason.CANCELLED)
            return
        client, cancel = self._client, self._cancel
        done = False
        try:
            for event in httpx2.EventSource(self._response, max_event_size=MAX_EVENT_BYTES):
                if cancel.cancelled:
                    break
                if event.data.strip() == "[DONE]":
                    done = True
                    break
                failure = self._failure_in(event.event, event.data)
                if failure is not None:
                    yield from self._close_thinking()
                    yield failure
                    return
                text = self._take(event.data)
                if isinstance(text, Failed):
                    yield from self._close_thinking()
                    yield text
                    return
                if text:
                    yield TokenDelta(self._request_id, text, 1)
        except httpx2.TransportError as exc:
            if not cancel.cancelled:
                yield from self._close_thinking()
                yield self._cut(exc)
                return
        yield from self._close_thinking()
        if cancel.cancelled:
            yield self._finished(StopReason.CANCELLED)
        elif done or self._finish_reason is not None:
            yield self._finished(_FINISH_REASONS.get(self._finish_reason or "stop", StopReason.END_OF_TURN))
        elif self._chunks == 0:
            yield Failed(
                self._request_id,
                ErrorKind.STREAM_CUT,
                f"{client.name} ended the reply without sending any of it; its log may say why (a prompt "
                "longer than its context does this on some servers).",
            )
        else:
            yield Failed(
                self._request_id,
                ErrorKind.STREAM_CUT,
                f"{client.name} ended the stream before the reply was complete; the partial reply is kept.",
            )

    def _failure_in(self, event: str, data: str) -> Failed | None:
        assert self._client is not None
        if event == "error":
            return Failed(
                self._request_id,
                ErrorKind.SERVER_ERROR,
                f"{self._client.name} reported an error mid-reply: {self._client.clean(data)}",
            )
        return None

    def _take(self, data: str) -> str | Failed:
        """The text in one event (reasoning wrapped in think tags), or why the event is unusable."""
        assert self._client is not None
        name = self._client.name
        try:
            chunk = json.loads(data)
        except ValueError:
            return Failed(
                self._request_id,
                ErrorKind.SERVER_ERROR,
                f"{name} sent a malformed event ({self._client.clean(data)[:80]!r} is not JSON); the partial "
                "reply is kept.",
            )
        if not isinstance(chunk, dict):
            return Failed(
                self._request_id, ErrorKind.SERVER_ERROR, f"{name} sent an event that is not a JSON object."
            )
        error = chunk.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            return Failed(
                self._request_id,
                ErrorKind.SERVER_ERROR,
                f"{name} reported an error mid-reply: {self._client.clean(str(message))}",
            )
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self._usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list) or not choices:
            return ""
        choice = choices[0]
        if not isinstance(choice, dict):
            return ""
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            self._finish_reason = reason
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return ""
        self._take_calls(delta.get("tool_calls"))
        thinking = delta.get("reasoning_content")
        if not isinstance(thinking, str):
            thinking = delta.get("reasoning")
        content = delta.get("content")
        parts: list[str] = []
        if isinstance(thinking, str) and thinking:
            if not self._thinking:
                parts.append(THINK_OPEN)
                self._thinking = True
            parts.append(thinking)
        if isinstance(content, str) and content:
            if self._thinking:
                parts.append(THINK_CLOSE)
                self._thinking = False
            parts.append(content)
        if parts:
            now = time.perf_counter()
            if self._first_at is None:
                self._first_at = now
            self._last_at = now
            self._chunks += 1
        return "".join(parts)

    def _take_calls(self, pieces: object) -> None:
        """OpenAI streams each call in pieces: the first gives its id and name, the rest its arguments."""
        if not isinstance(pieces, list):
            return
        for piece in pieces:
            if not isinstance(piece, dict):
                continue
            index = piece.get("index", len(self._calls))
            call = self._calls.setdefault(index if isinstance(index, int) else len(self._calls), {})
            if isinstance(piece.get("id"), str):
                call["id"] = piece["id"]
            function = piece.get("function")
            if not isinstance(function, dict):
                continue
            if isinstance(function.get("name"), str):
                call["name"] = call.get("name", "") + function["name"]
            if isinstance(function.get("arguments"), str):
                call["arguments"] = call.get("arguments", "") + function["arguments"]
            self._chunks += 1

    def _close_thinking(self) -> Iterator[TokenDelta]:
        if self._thinking:
            self._thinking = False
            yield TokenDelta(self._request_id, THINK_CLOSE, 0)

    def _cut(self, exc: httpx2.TransportError) -> Failed:
        assert self._client is not None
        if isinstance(exc, httpx2.SSEError):
            return Failed(
                self._request_id,
                ErrorKind.SERVER_ERROR,
                f"{self._client.name} sent a malformed event stream ({self._client.clean(str(exc))}); the "
                "partial reply is kept.",
            )
        during = "streaming the reply" if self._chunks else "waiting for the reply"
        error = self._client.transport_error(exc, during=during)
        kind = error.kind if error.kind is not ErrorKind.STREAM_CUT or self._chunks else ErrorKind.STREAM_CUT
        tail = "; the partial reply is kept." if self._chunks else "."
        return Failed(self._request_id, kind, str(error).rstrip(".") + tail)

    def _finished(self, reason: StopReason) -> Finished:
        finished_at = time.perf_counter()
        first = self._first_at or finished_at
        completion = self._usage.get("completion_tokens")
        produced = completion if isinstance(completion, int) and completion >= 0 else self._chunks
        prompt = self._usage.get("prompt_tokens")
        decode_time = (self._last_at or first) - first
        return Finished(
            self._request_id,
            GenerationStats(
                prompt_tokens=prompt if isinstance(prompt, int) and prompt >= 0 else None,
                cached_prompt_tokens=0,
                completion_tokens=produced,
                time_to_first_token_s=first - self._started,
                # As for local replies: the first token's time is the prompt's; speed counts the rest.
                tokens_per_second=(produced - 1) / decode_time if produced > 1 and decode_time > 0 else 0.0,
                stop_reason=reason,
                seed=self._sampling.seed,
            ),
        )


def _message_json(message: ChatMessage) -> dict[str, Any]:
    """A message in OpenAI's shape: text alone as a string; with images, content parts, the text first and
    each image as a data URL (what vLLM, llama.cpp's server, Ollama and TGI accept for vision models); a
    reply's calls as `tool_calls`, a tool's result with the call it answers."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.tool_calls:
        return {
            "role": message.role,
            "content": message.content or None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in message.tool_calls
            ],
        }
    if not message.images:
        return {"role": message.role, "content": message.content}
    parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}] if message.content else []
    parts += [
        {
            "type": "image_url",
            "image_url": {"url": f"data:{image.mime_type};base64,{base64.b64encode(image.data).decode()}"},
        }
        for image in message.images
    ]
    return {"role": message.role, "content": parts}


def _get(data: object, *keys: str) -> object:
    for key in keys:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _context_length(value: object) -> int | None:
    """A context length as a server reports it, if it is a plausible one."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if MIN_REPORTED_CONTEXT <= value <= MAX_REPORTED_CONTEXT else None


def _certificate_problem(exc: BaseException) -> str | None:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return current.verify_message or str(current)
        if "CERTIFICATE_VERIFY_FAILED" in str(current):
            return "certificate verify failed"
        current = current.__cause__ or current.__context__
    return None


def _host(url: str) -> str:
    return urlsplit(url).netloc
