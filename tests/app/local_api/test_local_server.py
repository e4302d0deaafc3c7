"""The local OpenAI-compatible server, driven by the official `openai` client and by raw sockets."""

from __future__ import annotations

import http.client
import json
import logging
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from pathlib import Path
from typing import Any

import openai
import psutil
import pytest
from openai.types.chat import ChatCompletionMessageParam

from app.chat.engine import ChatEngine, TurnCallbacks
from app.chat.runner_queue import Job, JobCancelled, RunnerQueue
from app.core import Core
from app.errors import HearthError
from app.local_api.server import MAX_BODY_BYTES, LocalServer
from inference.protocol import SamplingParams
from tests.helpers.waiting import wait_until

KEY = "hearth-test-key-0123456789abcdef"
LOOPBACK = "127.0.0.1"
STORY: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Write a very long story about a lighthouse keeper."}
]
COLOURS: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Name three colours."}]


@pytest.fixture
def model_name(starter_model: Path, core: Core, engine: ChatEngine) -> str:
    (model,) = core.library.list_models()
    engine.prepare(model.name)
    return model.name


@pytest.fixture
def one_reply_at_a_time(model_name: str, engine: ChatEngine) -> str:
    """The model loaded with room for one reply: requests and turns wait for the runner in turn."""
    engine.settings_store.update(parallel_slots=1)
    engine.prepare(model_name)
    return model_name


def serve(engine: ChatEngine, port: int = 0, **options: Any) -> LocalServer:
    server = LocalServer(engine, KEY, port=port, **options)
    server.start()
    return server


@pytest.fixture
def server(engine: ChatEngine) -> Iterator[LocalServer]:
    running = serve(engine)
    yield running
    running.stop()


@pytest.fixture
def client(server: LocalServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=120) as api:
        yield api


def request(
    server: LocalServer,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any], http.client.HTTPResponse]:
    connection = http.client.HTTPConnection(LOOPBACK, server.port, timeout=60)
    try:
        sent = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json", **(headers or {})}
        connection.request(method, path, body=body, headers=sent)
        response = connection.getresponse()
        data = response.read()
        return response.status, json.loads(data) if data else {}, response
    finally:
        connection.close()


def raw_exchange(server: LocalServer, data: bytes) -> tuple[int, dict[str, Any]]:
    """Send bytes as they are (framing a well-behaved client would never send) and read the answer."""
    with socket.create_connection((LOOPBACK, server.port), timeout=60) as sock:
        sock.sendall(data)
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, json.loads(response.read())


def text_of(stream: Iterator[Any]) -> str:
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


# -- with the real starter model -----------------------------------------------------------------------


@pytest.mark.model
def test_models_lists_the_loaded_model(model_name: str, client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == [model_name]
    assert client.models.retrieve(model_name).owned_by == "hearth"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("not-loaded")


@pytest.mark.model
def test_chat_completion_with_and_without_streaming(
    core: Core, model_name: str, client: openai.OpenAI
) -> None:
    whole = client.chat.completions.create(
        model=model_name, messages=COLOURS, temperature=0, seed=1, max_tokens=24
    )
    choice = whole.choices[0]
    assert whole.object == "chat.completion" and whole.model == model_name
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    usage = whole.usage
    assert usage is not None and usage.prompt_tokens > 0 and 0 < usage.completion_tokens <= 24
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens

    chunks = list(
        client.chat.completions.create(
            model=model_name,
            messages=COLOURS,
            temperature=0,
            seed=1,
            max_tokens=24,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    assert len({c.id for c in chunks}) == 1
    assert text_of(iter(chunks)) == choice.message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == choice.finish_reason
    assert chunks[-1].choices == [] and chunks[-1].usage == usage
    # The API never writes to the conversation database.
    assert core.store.list_conversations() == []


@pytest.mark.model
def test_stream_is_server_sent_events_ending_with_done(model_name: str, server: LocalServer) -> None:
    body = json.dumps({"model": model_name, "messages": COLOURS, "max_tokens": 4, "stream": True})
    connection = http.client.HTTPConnection(LOOPBACK, server.port, timeout=60)
    try:
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        connection.request("POST", "/v1/chat/completions", body=body, headers=headers)
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        events = response.read().decode().split("\n\n")
    finally:
        connection.close()
    assert events[-2:] == ["data: [DONE]", ""]
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert {p["object"] for p in payloads} == {"chat.completion.chunk"}
    assert payloads[-1]["choices"][0]["finish_reason"] == "length"


@pytest.mark.model
def test_temperature_zero_and_a_seed_reproduce_the_reply(model_name: str, client: openai.OpenAI) -> None:
    def reply(temperature: float, seed: int | None = None) -> str | None:
        answer = client.chat.completions.create(
            model=model_name, messages=STORY, max_tokens=12, temperature=temperature, top_p=0.9, seed=seed
        )
        return answer.choices[0].message.content

    assert reply(0) == reply(0)
    assert reply(1.0, seed=7) == reply(1.0, seed=7)


@pytest.mark.model
def test_max_tokens_and_stop_strings_end_the_reply(model_name: str, client: openai.OpenAI) -> None:
    capped = client.chat.completions.create(model=model_name, messages=STORY, temperature=0, max_tokens=3)
    assert capped.choices[0].finish_reason == "length"
    assert capped.usage is not None and capped.usage.completion_tokens == 3

    full = client.chat.completions.create(model=model_name, messages=STORY, temperature=0, max_tokens=24)
    text = full.choices[0].message.content or ""
    stop = text.split()[len(text.split()) // 2]
    expected = text[: text.index(stop)]
    whole = client.chat.completions.create(
        model=model_name, messages=STORY, temperature=0, max_tokens=24, stop=[stop]
    )
    assert whole.choices[0].message.content == expected and whole.choices[0].finish_reason == "stop"
    streamed = list(
        client.chat.completions.create(
            model=model_name, messages=STORY, temperature=0, max_tokens=24, stop=stop, stream=True
        )
    )
    assert text_of(iter(streamed)) == expected and streamed[-1].choices[0].finish_reason == "stop"


@pytest.mark.model
def test_unknown_model_is_404(model_name: str, client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=COLOURS)
    assert info.value.code == "model_not_found" and model_name in info.value.message


@pytest.mark.model
def test_a_prompt_longer_than_the_context_is_400(model_name: str, client: openai.OpenAI) -> None:
    huge: list[ChatCompletionMessageParam] = [{"role": "user", "content": "lighthouse " * 6000}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=model_name, messages=huge, max_tokens=4)
    assert info.value.code == "context_length_exceeded"


@pytest.mark.model
def test_requests_wait_for_a_place_in_order_and_the_windows_turn_never_waits_for_them(
    one_reply_at_a_time: str, engine: ChatEngine, client: openai.OpenAI
) -> None:
    model_name = one_reply_at_a_time
    first = client.chat.completions.create(
        model=model_name, messages=STORY, temperature=0, max_tokens=2000, stream=True
    )
    next(iter(first))  # the first chunk is sent once the runner is working on this request
    results: dict[str, Any] = {}

    def second() -> None:
        answer = client.chat.completions.create(
            model=model_name, messages=COLOURS, temperature=0, max_tokens=8, stream=True
        )
        results["second"] = text_of(answer)

    thread = threading.Thread(target=second)
    thread.start()
    wait_until(lambda: engine.waiting_jobs == 1, "the second request to wait for the one place")
    # The window's turn has a place of its own: it is answered while the second request still waits.
    sampling = SamplingParams(temperature=0.0, max_tokens=8)
    gui = engine.run_turn("Say hello.", model_name, sampling=sampling, callbacks=TurnCallbacks())
    assert gui.status == "complete" and gui.text
    assert engine.waiting_jobs == 1 and "second" not in results
    first.close()  # hanging up hands the place on to the second request
    thread.join(120)
    assert results["second"]


@pytest.mark.model
def test_hanging_up_mid_stream_cancels_the_generation(
    model_name: str, engine: ChatEngine, client: openai.OpenAI, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hearth")
    stream = client.chat.completions.create(
        model=model_name, messages=STORY, temperature=0, max_tokens=2000, stream=True
    )
    next(iter(stream))
    stream.close()
    wait_until(lambda: "cancelled after" in caplog.text, "the generation to be cancelled")
    found = re.search(r"cancelled after (\d+) tokens", caplog.text)
    assert found is not None and int(found.group(1)) < 2000
    # The runner is free: the next request is answered.
    answer = client.chat.completions.create(model=model_name, messages=COLOURS, max_tokens=4)
    assert answer.choices[0].message.content
    assert engine.waiting_jobs == 0


@pytest.mark.model
def test_hanging_up_while_waiting_gives_up_the_place_in_line(
    one_reply_at_a_time: str, engine: ChatEngine, server: LocalServer, client: openai.OpenAI,
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    model_name = one_reply_at_a_time
    caplog.set_level(logging.INFO, logger="hearth")
    running = client.chat.completions.create(
        model=model_name, messages=STORY, temperature=0, max_tokens=2000, stream=True
    )
    next(iter(running))
    body = json.dumps({"model": model_name, "messages": COLOURS, "max_tokens": 4}).encode()
    with socket.create_connection((LOOPBACK, server.port), timeout=60) as waiting:
        waiting.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        wait_until(lambda: engine.waiting_jobs == 1, "the request to queue")
    wait_until(lambda: engine.waiting_jobs == 0, "the request to leave the queue")
    running.close()
    wait_until(lambda: "cancelled after" in caplog.text, "the running stream to be cancelled")
    assert "cancelled before its turn" in caplog.text


@pytest.mark.model
def test_a_slow_reader_gets_the_whole_stream(
    model_name: str, server: LocalServer, client: openai.OpenAI
) -> None:
    expected = client.chat.completions.create(model=model_name, messages=STORY, temperature=0, max_tokens=40)
    body = json.dumps(
        {"model": model_name, "messages": STORY, "temperature": 0, "max_tokens": 40, "stream": True}
    ).encode()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A tiny receive window, so the server's writes really wait for this reader.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.settimeout(60)
    with sock:
        sock.connect((LOOPBACK, server.port))
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        received = bytearray()
        while not received.endswith(b"0\r\n\r\n"):
            piece = sock.recv(64)
            assert piece, "the server closed the connection early"
            received += piece
            time.sleep(0.002)
    head, _, chunked = bytes(received).partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    text = ""
    for line in re.findall(rb"data: (\{.*?\})\n\n", _unchunk(chunked)):
        event = json.loads(line)
        if event["choices"]:
            text += event["choices"][0]["delta"].get("content") or ""
    assert text == expected.choices[0].message.content


def _unchunk(data: bytes) -> bytes:
    out = bytearray()
    while True:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return bytes(out)
        out += rest[:size]
        data = rest[size + 2 :]


@pytest.mark.model
def test_stop_cancels_what_is_running_and_frees_the_runner(model_name: str, engine: ChatEngine) -> None:
    server = serve(engine)
    with openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=120) as api:
        stream = api.chat.completions.create(
            model=model_name, messages=STORY, temperature=0, max_tokens=2000, stream=True
        )
        next(iter(stream))
        server.stop()  # returns once every request thread has ended
        with pytest.raises(openai.APIError):
            list(stream)
    restarted = serve(engine)
    try:
        with openai.OpenAI(base_url=restarted.url, api_key=KEY, max_retries=0, timeout=120) as api:
            assert api.chat.completions.create(model=model_name, messages=COLOURS, max_tokens=4).choices
    finally:
        restarted.stop()


# -- the HTTP surface, with no model loaded ------------------------------------------------------------


def test_wrong_or_missing_key_is_401_and_the_key_is_never_logged(
    server: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0) as api:
        with pytest.raises(openai.AuthenticationError) as info:
            api.models.list()
        assert info.value.code == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            api.chat.completions.create(model="any", messages=COLOURS)
    status, body, response = request(server, "GET", "/v1/models", headers={"Authorization": ""})
    assert status == 401 and body["error"]["type"] == "invalid_request_error"
    assert response.getheader("WWW-Authenticate") == "Bearer"
    assert request(server, "GET", "/v1/models", headers={"Authorization": f"Basic {KEY}"})[0] == 401
    status, body, _ = request(server, "GET", "/v1/models")
    assert status == 200 and body == {"object": "list", "data": []}
    assert KEY not in caplog.text


def test_no_model_loaded_is_503(server: LocalServer) -> None:
    with (
        openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0) as api,
        pytest.raises(openai.InternalServerError) as info,
    ):
        api.chat.completions.create(model="any", messages=COLOURS)
    assert info.value.status_code == 503 and info.value.code == "model_not_loaded"


def health(server: LocalServer, method: str = "GET", **headers: str) -> tuple[int, dict[str, Any]]:
    """GET /health as a supervisor asks it: without the key."""
    connection = http.client.HTTPConnection(LOOPBACK, server.port, timeout=60)
    try:
        connection.request(method, "/health", headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def test_health_says_no_model_then_loading_then_ok_without_the_key_and_nothing_else(
    starter_model: Path, core: Core, engine: ChatEngine, server: LocalServer
) -> None:
    assert health(server) == (503, {"status": "no_model"})
    assert health(server, Authorization="Bearer wrong") == (503, {"status": "no_model"})
    (model,) = core.library.list_models()
    # The load is held at the runner's door, so the test sees it under way however fast this machine is.
    go_on, real_load = threading.Event(), engine.client.load

    def held_load(plan: Any) -> Any:
        assert go_on.wait(60)
        return real_load(plan)

    engine.client.load = held_load  # type: ignore[method-assign]
    loading = threading.Thread(target=engine.ensure_loaded, args=(model.name,))
    loading.start()
    try:
        wait_until(lambda: health(server)[1] == {"status": "loading"}, "health to say loading")
        assert health(server)[0] == 503
    finally:
        go_on.set()
        loading.join(60)
    assert health(server) == (200, {"status": "ok"})
    assert health(server, "POST")[0] == 405
    assert health(server, Host="evil.example")[0] == 403


MALFORMED: list[tuple[object, str | None]] = [
    ([], None),
    ({"messages": COLOURS}, "model"),
    ({"model": "m", "messages": []}, "messages"),
    ({"model": "m", "messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    (
        {"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": 1}]}]},
        "messages[0].tool_calls[0]",
    ),
    ({"model": "m", "messages": [{"role": ["user"], "content": "x"}]}, "messages"),
    ({"model": "m", "messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
    (
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
        "messages",
    ),
    ({"model": "m", "messages": COLOURS, "temperature": "hot"}, "temperature"),
    ({"model": "m", "messages": COLOURS, "temperature": 2.5}, "temperature"),
    ({"model": "m", "messages": COLOURS, "temperature": True}, "temperature"),
    ({"model": "m", "messages": COLOURS, "top_p": 1.5}, "top_p"),
    ({"model": "m", "messages": COLOURS, "max_tokens": 0}, "max_tokens"),
    ({"model": "m", "messages": COLOURS, "max_completion_tokens": 2.5}, "max_completion_tokens"),
    ({"model": "m", "messages": COLOURS, "seed": -1}, "seed"),
    ({"model": "m", "messages": COLOURS, "seed": 2**32}, "seed"),
    ({"model": "m", "messages": COLOURS, "stop": [""]}, "stop"),
    ({"model": "m", "messages": COLOURS, "stop": ["x"] * 17}, "stop"),
    ({"model": "m", "messages": COLOURS, "stream": "yes"}, "stream"),
    ({"model": "m", "messages": COLOURS, "n": 2}, "n"),
    ({"model": "m", "messages": COLOURS, "tools": [{"type": "function"}]}, "tools[0]"),
    ({"model": "m", "messages": COLOURS, "tools": "add"}, "tools"),
    ({"model": "m", "messages": COLOURS, "tool_choice": "required"}, "tool_choice"),
    ({"model": "m", "messages": COLOURS, "functions": [{"name": "f"}]}, "functions"),
]


@pytest.mark.parametrize(("payload", "param"), MALFORMED)
def test_malformed_requests_are_400_naming_the_field(
    server: LocalServer, payload: object, param: str | None
) -> None:
    status, body, _ = request(server, "POST", "/v1/chat/completions", json.dumps(payload).encode())
    assert status == 400, body
    assert body["error"]["type"] == "invalid_request_error" and body["error"]["param"] == param


def test_broken_framing_gets_a_clear_answer_and_the_server_goes_on(server: LocalServer) -> None:
    auth = f"Authorization: Bearer {KEY}\r\nHost: 127.0.0.1\r\n"
    post = "POST /v1/chat/completions HTTP/1.1\r\n" + auth
    assert raw_exchange(server, f"{post}Content-Length: 9\r\n\r\nnot json!".encode())[0] == 400
    assert raw_exchange(server, f"{post}\r\n".encode())[0] == 411
    assert raw_exchange(server, f"{post}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n".encode())[0] == 411
    assert raw_exchange(server, f"{post}Content-Length: lots\r\n\r\n".encode())[0] == 400
    # Refused from the header alone: the body is never read.
    assert raw_exchange(server, f"{post}Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())[0] == 413
    assert raw_exchange(server, f"GET /v1/chat/completions HTTP/1.1\r\n{auth}\r\n".encode())[0] == 405
    assert (
        raw_exchange(server, f"PUT /v1/models HTTP/1.1\r\n{auth}Content-Length: 0\r\n\r\n".encode())[0] == 405
    )
    assert raw_exchange(server, f"GET /v2/anything HTTP/1.1\r\n{auth}\r\n".encode())[0] == 404
    status, body = raw_exchange(server, b"NONSENSE\r\n\r\n")
    assert status == 400 and "error" in body
    # A page on another name that resolves to 127.0.0.1 (DNS rebinding) is turned away.
    rebound = f"GET /v1/models HTTP/1.1\r\nAuthorization: Bearer {KEY}\r\nHost: evil.example:8765\r\n\r\n"
    assert raw_exchange(server, rebound.encode())[0] == 403
    assert request(server, "GET", "/v1/models")[0] == 200


def test_a_slow_sender_is_answered_and_a_stalled_one_is_dropped(engine: ChatEngine) -> None:
    server = serve(engine, io_timeout_s=1.0)
    try:
        body = json.dumps({"model": "m", "messages": COLOURS, "temperature": 9}).encode()
        message = (
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        with socket.create_connection((LOOPBACK, server.port), timeout=60) as slow:
            for start in range(0, len(message), 7):
                slow.sendall(message[start : start + 7])
                time.sleep(0.01)
            response = http.client.HTTPResponse(slow)
            response.begin()
            assert response.status == 400 and json.loads(response.read())["error"]["param"] == "temperature"

        with socket.create_connection((LOOPBACK, server.port), timeout=60) as stalled:
            stalled.sendall(message[: len(message) - 5])
            # Others are served while it stalls: it holds a thread of its own, never the runner.
            assert request(server, "GET", "/v1/models")[0] == 200
            assert stalled.recv(1024) == b"", "the stalled connection should be closed by the server"
    finally:
        server.stop()


# -- what a client without the key can cost -------------------------------------------------------------


def serve_with_limits(engine: ChatEngine, **limits: float) -> LocalServer:
    """A server whose limits are shrunk (or raised) on the instance, as the defaults would make tests slow."""
    server = LocalServer(engine, KEY, port=0)
    for name, value in limits.items():
        setattr(server, name, value)
    server.start()
    return server


def read_head(sock: socket.socket) -> bytes:
    """One response's status line and headers, read as they are (http.client skips a 100 Continue)."""
    head = b""
    while b"\r\n\r\n" not in head:
        piece = sock.recv(1)
        assert piece, f"the connection closed after {head!r}"
        head += piece
    return head


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def open_fds() -> int:
    """Descriptors this process has open (Windows has no such count: there, 0)."""
    proc = Path("/proc/self/fd")
    if proc.is_dir():
        return sum(1 for _ in proc.iterdir())
    return psutil.Process().num_fds() if hasattr(psutil.Process, "num_fds") else 0


def test_the_limits_have_sane_defaults(engine: ChatEngine) -> None:
    server = LocalServer(engine, KEY, port=0)
    assert 1 <= server.header_timeout_s <= 30
    assert server.header_timeout_s <= server.body_timeout_s <= 120
    assert 8 << 10 <= server.max_header_bytes <= 64 << 10
    assert 8 <= server.max_connections <= 256
    assert MAX_BODY_BYTES <= 16 << 20


@pytest.mark.parametrize("phase", ["headers", "body"])
def test_a_trickling_client_is_dropped_while_others_are_served(engine: ChatEngine, phase: str) -> None:
    limit_s = 1.0
    # The per-read timeout stays long: only a deadline for the whole headers (or body) can end this.
    server = serve_with_limits(engine, header_timeout_s=limit_s, body_timeout_s=limit_s)
    start = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {KEY}\r\nContent-Length: 100000\r\n".encode()
    )
    start += b"\r\n" if phase == "body" else b"X-Slow: "
    try:
        with socket.create_connection((LOOPBACK, server.port), timeout=60) as slow:
            slow.sendall(start)
            began, dropped, served = time.monotonic(), False, False
            while not dropped and time.monotonic() - began < 5 * limit_s:
                try:
                    slow.sendall(b"a")
                except OSError:
                    dropped = True
                    break
                if not served:
                    assert request(server, "GET", "/v1/models")[0] == 200
                    served = True
                slow.settimeout(0.1)
                with suppress(TimeoutError):
                    dropped = closed_by_server(slow)
            assert served
            assert dropped, f"a client trickling its {phase} was still connected after {5 * limit_s} s"
    finally:
        server.stop()


def test_idle_connections_beyond_the_cap_neither_lock_clients_out_nor_use_up_descriptors(
    engine: ChatEngine,
) -> None:
    cap = 8
    # No timeout frees a place during the test: only the cap's handling can let the request in.
    server = serve_with_limits(engine, max_connections=cap, header_timeout_s=600)
    fds, threads = open_fds(), threading.active_count()
    idle: list[socket.socket] = []
    try:
        for _ in range(cap + 50):
            idle.append(socket.create_connection((LOOPBACK, server.port), timeout=60))
        assert request(server, "GET", "/v1/models")[0] == 200
        # Each idle connection is a descriptor of this test's own; the server's stay near the cap.
        wait_until(lambda: open_fds() - fds - len(idle) <= cap + 4, "the server to hold few descriptors", 20)
        wait_until(
            lambda: threading.active_count() - threads <= cap + 2, "the server to hold few threads", 20
        )
        assert request(server, "GET", "/v1/models")[0] == 200
    finally:
        for sock in idle:
            sock.close()
        server.stop()


def test_when_every_connection_is_busy_a_new_one_is_refused_at_once(engine: ChatEngine) -> None:
    server = serve_with_limits(engine, max_connections=2)
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        + f"Authorization: Bearer {KEY}\r\nContent-Length: 10\r\nExpect: 100-continue\r\n\r\n".encode()
    )
    try:
        busy = [socket.create_connection((LOOPBACK, server.port), timeout=60) for _ in range(2)]
        with busy[0], busy[1]:
            for sock in busy:
                sock.sendall(head)
                # Told to go on with its body: past the key check, busy with its request.
                assert read_head(sock).startswith(b"HTTP/1.1 100 ")
            with socket.create_connection((LOOPBACK, server.port), timeout=30) as refused:
                response = http.client.HTTPResponse(refused)
                response.begin()
                assert response.status == 503 and json.loads(response.read())["error"]
                assert closed_by_server(refused)
            busy[0].sendall(b'{"x": 1}  ')
            response = http.client.HTTPResponse(busy[0])
            response.begin()
            assert response.status == 400
        # The busy ones are gone: there is room again.
        assert request(server, "GET", "/v1/models")[0] == 200
    finally:
        server.stop()


def test_oversized_headers_get_431_and_the_connection_closes(engine: ChatEngine) -> None:
    server = serve_with_limits(engine)
    request_line = f"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
    try:
        assert request(server, "GET", "/v1/models", headers={"X-Pad": "a" * (12 << 10)})[0] == 200
        for extra in [
            "X-Big: " + "a" * (20 << 10) + "\r\n",
            "".join(f"X-{i}: {'a' * 250}\r\n" for i in range(90)),
        ]:
            with socket.create_connection((LOOPBACK, server.port), timeout=60) as sock:
                sock.sendall(f"{request_line}{extra}\r\n".encode())
                response = http.client.HTTPResponse(sock)
                response.begin()
                assert response.status in (431, 400), response.status
                assert "error" in json.loads(response.read())
                assert closed_by_server(sock)
        assert request(server, "GET", "/v1/models")[0] == 200
    finally:
        server.stop()


def test_the_key_is_checked_before_the_body_is_asked_for_or_read(engine: ChatEngine) -> None:
    server = serve_with_limits(engine)
    post = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    huge = f"Content-Length: {10**12}\r\n"
    try:
        for expect in ["", "Expect: 100-continue\r\n"]:
            with socket.create_connection((LOOPBACK, server.port), timeout=30) as sock:
                # Headers only: the answer must come without any body sent.
                sock.sendall(f"{post}Authorization: Bearer wrong\r\n{huge}{expect}\r\n".encode())
                head = read_head(sock)
                assert head.startswith(b"HTTP/1.1 401 "), head
                assert b"\r\nConnection: close\r\n" in head
                length = re.search(rb"\r\nContent-Length: (\d+)\r\n", head)
                assert length is not None
                body = b""
                while len(body) < int(length.group(1)):
                    body += sock.recv(65536)
                assert json.loads(body)["error"]["code"] == "invalid_api_key"
                assert closed_by_server(sock)
        authorised = f"{post}Authorization: Bearer {KEY}\r\n"
        with socket.create_connection((LOOPBACK, server.port), timeout=30) as sock:
            sock.sendall(f"{authorised}{huge}Expect: 100-continue\r\n\r\n".encode())
            assert read_head(sock).startswith(b"HTTP/1.1 413 ")
        payload = json.dumps({"model": "m", "messages": COLOURS, "temperature": 9}).encode()
        with socket.create_connection((LOOPBACK, server.port), timeout=30) as sock:
            sock.sendall(
                f"{authorised}Content-Length: {len(payload)}\r\nExpect: 100-continue\r\n\r\n".encode()
            )
            assert read_head(sock).startswith(b"HTTP/1.1 100 ")
            sock.sendall(payload)
            response = http.client.HTTPResponse(sock)
            response.begin()
            assert response.status == 400 and json.loads(response.read())["error"]["param"] == "temperature"
    finally:
        server.stop()


def test_the_server_listens_on_loopback_only(engine: ChatEngine, server: LocalServer) -> None:
    assert server.address == (LOOPBACK, server.port)
    assert server.url == f"http://127.0.0.1:{server.port}/v1"
    others = [
        address.address
        for addresses in psutil.net_if_addrs().values()
        for address in addresses
        if address.family == socket.AF_INET and not address.address.startswith("127.")
    ]
    for address in others:
        with pytest.raises(OSError):
            socket.create_connection((address, server.port), timeout=5).close()
    with pytest.raises(HearthError, match="already in use"):
        serve(engine, port=server.port)


# -- the queue -----------------------------------------------------------------------------------------


def test_runner_queue_is_first_come_first_served_and_stop_spares_api_requests() -> None:
    queue = RunnerQueue()
    holder, api, gui, order = Job(), Job(), Job(interactive=True), []

    def queued(n: int) -> Callable[[], bool]:
        return lambda: queue.waiting == n

    def take(job: Job, name: str) -> None:
        try:
            with queue.turn(job):
                order.append(name)
        except JobCancelled:
            order.append(f"{name} cancelled")

    with queue.turn(holder):
        threads = []
        for job, name in [(Job(), "first"), (api, "api"), (Job(), "third"), (gui, "gui")]:
            threads.append(threading.Thread(target=take, args=(job, name)))
            threads[-1].start()
            wait_until(queued(len(threads)), f"{name} to queue")
        queue.cancel_interactive()  # the Stop button: the GUI's turn leaves the line, the API's stays
        wait_until(lambda: queue.waiting == 3, "the GUI turn to leave")
        assert not holder.cancelled and not api.cancelled
    for thread in threads:
        thread.join(10)
    assert order == ["gui cancelled", "first", "api", "third"]
    stopped: list[str] = []
    running = Job(interactive=True)
    with queue.share(running), running.stopping(lambda: stopped.append("generation")):
        assert not queue.interactive_stopped
        queue.cancel_interactive()
        assert queue.interactive_stopped
    assert stopped == ["generation"]
