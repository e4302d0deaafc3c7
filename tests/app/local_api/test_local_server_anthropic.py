"""Anthropic's Messages API on the local server (`POST /v1/messages`), driven by the official `anthropic`
client and by raw sockets: the same runner queue, hang-up cancellation and limits as the OpenAI endpoint,
with Anthropic's reply, stream events and error shapes."""

from __future__ import annotations

import http.client
import json
import logging
import re
import socket
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic.types import (
    Message,
    MessageParam,
    RawContentBlockDeltaEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    TextBlock,
    TextDelta,
)

from app.chat.engine import ChatEngine
from app.local_api.server import MAX_BODY_BYTES, LocalServer
from tests.app.local_api.test_local_server import (
    KEY,
    LOOPBACK,
    closed_by_server,
    model_name,
    raw_exchange,
    read_head,
    request,
    server,
)
from tests.helpers.waiting import wait_until

__all__ = ["model_name", "server"]

STORY: list[MessageParam] = [
    {"role": "user", "content": "Write a very long story about a lighthouse keeper."}
]
COLOURS: list[MessageParam] = [{"role": "user", "content": "Name three colours."}]
# Sampling fields older versions of Anthropic's API took, and clients written for them still send; this
# client version has no parameter for them any more.
GREEDY = {"temperature": 0, "top_k": 1}
PIRATE = "You are a pirate. Answer every question in a pirate's words, and never mention colours."


def text_of(message: Message) -> str:
    [block] = message.content
    assert isinstance(block, TextBlock)
    return block.text


def base_url(server: LocalServer) -> str:
    # The client adds /v1/messages itself.
    return f"http://{LOOPBACK}:{server.port}"


@pytest.fixture
def client(server: LocalServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=base_url(server), api_key=KEY, max_retries=0, timeout=120) as api:
        yield api


def post(server: LocalServer, payload: object, **headers: str) -> tuple[int, dict[str, Any]]:
    """POST /v1/messages with the key as x-api-key, as Anthropic's clients send it."""
    sent = {"Authorization": "", "x-api-key": KEY, "anthropic-version": "2023-06-01", **headers}
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    status, answer, _ = request(server, "POST", "/v1/messages", body, sent)
    return status, answer


def anthropic_error(body: object, kind: str) -> str:
    """The message of an error in Anthropic's shape, which must be of `kind`."""
    assert isinstance(body, dict) and body["type"] == "error" and set(body) == {"type", "error"}, body
    assert body["error"]["type"] == kind, body
    message = body["error"]["message"]
    assert isinstance(message, str) and message
    return message


# -- with the real starter model -----------------------------------------------------------------------


@pytest.mark.model
def test_a_message_whole_and_streamed_both_ways(model_name: str, client: anthropic.Anthropic) -> None:
    whole = client.messages.create(model=model_name, max_tokens=24, extra_body=GREEDY, messages=COLOURS)
    assert whole.type == "message" and whole.role == "assistant" and whole.model == model_name
    assert whole.id.startswith("msg_")
    text = text_of(whole)
    assert text
    assert whole.stop_reason in ("end_turn", "max_tokens") and whole.stop_sequence is None
    assert whole.usage.input_tokens > 0 and 0 < whole.usage.output_tokens <= 24

    with client.messages.stream(
        model=model_name, max_tokens=24, extra_body=GREEDY, messages=COLOURS
    ) as stream:
        assert "".join(stream.text_stream) == text
        final = stream.get_final_message()
    assert text_of(final) == text
    assert final.stop_reason == whole.stop_reason and final.id != whole.id
    assert (final.usage.input_tokens, final.usage.output_tokens) == (
        whole.usage.input_tokens,
        whole.usage.output_tokens,
    )

    events = list(
        client.messages.create(
            model=model_name, max_tokens=24, extra_body=GREEDY, messages=COLOURS, stream=True
        )
    )
    kinds = [event.type for event in events]
    deltas = kinds.count("content_block_delta")
    assert deltas > 0
    # The client passes pings over (the raw stream's are checked below).
    assert kinds == [
        "message_start",
        "content_block_start",
        *["content_block_delta"] * deltas,
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    start, delta = events[0], events[-2]
    assert isinstance(start, RawMessageStartEvent) and start.message.content == []
    assert start.message.usage.input_tokens == whole.usage.input_tokens and start.message.stop_reason is None
    assert isinstance(delta, RawMessageDeltaEvent) and delta.delta.stop_reason == whole.stop_reason
    assert delta.usage.output_tokens == whole.usage.output_tokens
    pieces = [e.delta for e in events if isinstance(e, RawContentBlockDeltaEvent)]
    assert "".join(p.text for p in pieces if isinstance(p, TextDelta)) == text


@pytest.mark.model
def test_the_stream_is_named_server_sent_events(model_name: str, server: LocalServer) -> None:
    payload = {"model": model_name, "max_tokens": 4, "messages": COLOURS, "stream": True, **GREEDY}
    connection = http.client.HTTPConnection(LOOPBACK, server.port, timeout=60)
    try:
        headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01", "Content-Type": "application/json"}
        connection.request("POST", "/v1/messages", body=json.dumps(payload), headers=headers)
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type", "").startswith("text/event-stream")
        events = response.read().decode().split("\n\n")
    finally:
        connection.close()
    assert events[-1] == ""
    named = [re.fullmatch(r"event: (\w+)\ndata: (.*)", event, re.DOTALL) for event in events[:-1]]
    pairs = [(m.group(1), json.loads(m.group(2))) for m in named if m is not None]
    assert len(pairs) == len(events) - 1
    assert all(name == data["type"] for name, data in pairs)
    names = [name for name, _ in pairs]
    assert names[:3] == ["message_start", "content_block_start", "ping"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert pairs[-2][1]["delta"] == {"stop_reason": "max_tokens", "stop_sequence": None}
    assert pairs[-2][1]["usage"]["output_tokens"] == 4


@pytest.mark.model
def test_the_system_prompt_reaches_the_model_as_a_string_or_text_blocks(
    model_name: str, client: anthropic.Anthropic
) -> None:
    plain = client.messages.create(model=model_name, max_tokens=16, extra_body=GREEDY, messages=COLOURS)
    told = client.messages.create(
        model=model_name, max_tokens=16, extra_body=GREEDY, messages=COLOURS, system=PIRATE
    )
    assert told.usage.input_tokens > plain.usage.input_tokens
    assert text_of(told) != text_of(plain)
    first, second = PIRATE.split(", and ")
    blocks = client.messages.create(
        model=model_name,
        max_tokens=16,
        extra_body=GREEDY,
        messages=COLOURS,
        system=[{"type": "text", "text": first}, {"type": "text", "text": second}],
    )
    # The blocks joined by a line break: one token more or less than the string.
    assert abs(blocks.usage.input_tokens - told.usage.input_tokens) <= 3


@pytest.mark.model
def test_max_tokens_and_stop_sequences_say_why_the_reply_ended(
    model_name: str, client: anthropic.Anthropic
) -> None:
    capped = client.messages.create(model=model_name, max_tokens=3, extra_body=GREEDY, messages=STORY)
    assert capped.stop_reason == "max_tokens" and capped.usage.output_tokens == 3

    full = client.messages.create(model=model_name, max_tokens=24, extra_body=GREEDY, messages=STORY)
    text = text_of(full)
    words = text.split()
    stop = words[len(words) // 2]
    expected = text[: text.index(stop)]
    stopped = client.messages.create(
        model=model_name, max_tokens=24, extra_body=GREEDY, messages=STORY, stop_sequences=["\u2603", stop]
    )
    assert text_of(stopped) == expected
    assert (stopped.stop_reason, stopped.stop_sequence) == ("stop_sequence", stop)

    with client.messages.stream(
        model=model_name, max_tokens=24, extra_body=GREEDY, messages=STORY, stop_sequences=[stop]
    ) as stream:
        assert "".join(stream.text_stream) == expected
        final = stream.get_final_message()
    assert (final.stop_reason, final.stop_sequence) == ("stop_sequence", stop)


@pytest.mark.model
def test_a_bearer_token_works_too_and_a_wrong_one_is_401(
    model_name: str, server: LocalServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with anthropic.Anthropic(base_url=base_url(server), auth_token=KEY, max_retries=0, timeout=120) as api:
        answer = api.messages.create(model=model_name, max_tokens=4, messages=COLOURS)
        assert answer.content and answer.usage.output_tokens > 0
    with (
        anthropic.Anthropic(base_url=base_url(server), auth_token="wrong", max_retries=0) as api,
        pytest.raises(anthropic.AuthenticationError) as info,
    ):
        api.messages.create(model=model_name, max_tokens=4, messages=COLOURS)
    assert info.value.status_code == 401
    anthropic_error(info.value.body, "authentication_error")


@pytest.mark.model
def test_an_unknown_model_is_404_and_a_prompt_over_the_context_is_400(
    model_name: str, client: anthropic.Anthropic
) -> None:
    with pytest.raises(anthropic.NotFoundError) as missing:
        client.messages.create(model="claude-sonnet-4-5", max_tokens=4, messages=COLOURS)
    assert model_name in anthropic_error(missing.value.body, "not_found_error")
    huge: list[MessageParam] = [{"role": "user", "content": "lighthouse " * 6000}]
    with pytest.raises(anthropic.BadRequestError) as over:
        client.messages.create(model=model_name, max_tokens=4, messages=huge)
    assert "context" in anthropic_error(over.value.body, "invalid_request_error")


@pytest.mark.model
def test_hanging_up_mid_stream_cancels_the_generation(
    model_name: str, engine: ChatEngine, client: anthropic.Anthropic, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hearth")
    with client.messages.stream(
        model=model_name, max_tokens=2000, extra_body=GREEDY, messages=STORY
    ) as stream:
        next(iter(stream.text_stream))
    wait_until(lambda: "cancelled after" in caplog.text, "the generation to be cancelled")
    found = re.search(r"cancelled after (\d+) tokens", caplog.text)
    assert found is not None and int(found.group(1)) < 2000
    # The runner is free: the next request is answered.
    answer = client.messages.create(model=model_name, max_tokens=4, messages=COLOURS)
    assert answer.content and engine.waiting_jobs == 0


# -- the HTTP surface, with no model loaded ------------------------------------------------------------


def test_a_wrong_or_missing_key_is_401_in_anthropics_shape(
    server: LocalServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with (
        anthropic.Anthropic(base_url=base_url(server), api_key="wrong", max_retries=0) as api,
        pytest.raises(anthropic.AuthenticationError) as info,
    ):
        api.messages.create(model="any", max_tokens=4, messages=COLOURS)
    assert "x-api-key" in anthropic_error(info.value.body, "authentication_error")
    status, body = post(server, {"model": "m", "max_tokens": 4, "messages": COLOURS}, **{"x-api-key": ""})
    assert status == 401 and anthropic_error(body, "authentication_error")
    # x-api-key is Anthropic's: the OpenAI endpoints take the key as a bearer token only.
    status, _, _ = request(server, "GET", "/v1/models", headers={"Authorization": "", "x-api-key": KEY})
    assert status == 401
    assert KEY not in caplog.text


def test_no_model_loaded_is_503_and_any_anthropic_version_is_taken(server: LocalServer) -> None:
    with (
        anthropic.Anthropic(base_url=base_url(server), api_key=KEY, max_retries=0) as api,
        pytest.raises(anthropic.InternalServerError) as info,
    ):
        api.messages.create(model="any", max_tokens=4, messages=COLOURS)
    assert info.value.status_code == 503
    anthropic_error(info.value.body, "api_error")
    payload = {"model": "any", "max_tokens": 4, "messages": COLOURS}
    status, body = post(server, payload, **{"anthropic-version": "2099-01-01"})
    assert status == 503 and "No model is loaded" in anthropic_error(body, "api_error")


MALFORMED: list[tuple[object, str]] = [
    ([], "JSON object"),
    ({"max_tokens": 4, "messages": COLOURS}, "model"),
    ({"model": "m", "messages": COLOURS}, "max_tokens"),
    ({"model": "m", "max_tokens": "4", "messages": COLOURS}, "max_tokens"),
    ({"model": "m", "max_tokens": 0, "messages": COLOURS}, "max_tokens"),
    ({"model": "m", "max_tokens": True, "messages": COLOURS}, "max_tokens"),
    ({"model": "m", "max_tokens": 4}, "messages"),
    ({"model": "m", "max_tokens": 4, "messages": []}, "messages"),
    ({"model": "m", "max_tokens": 4, "messages": ["hello"]}, "messages.0"),
    ({"model": "m", "max_tokens": 4, "messages": [{"role": "system", "content": "x"}]}, "messages.0.role"),
    ({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": 7}]}, "messages.0.content"),
    (
        {"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": [{"type": "text"}]}]},
        "messages.0.content.0.text",
    ),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
                    ],
                }
            ],
        },
        "'image' blocks",
    ),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": [
                *COLOURS,
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {}}]},
            ],
        },
        "'tool_use' blocks",
    ),
    (
        {"model": "m", "max_tokens": 4, "messages": [*COLOURS, {"role": "assistant", "content": "Red"}]},
        "prefill",
    ),
    ({"model": "m", "max_tokens": 4, "messages": COLOURS, "system": 7}, "system"),
    ({"model": "m", "max_tokens": 4, "messages": COLOURS, "system": [{"type": "image"}]}, "system.0"),
    ({"model": "m", "max_tokens": 4, "messages": COLOURS, "temperature": 1.5}, "temperature"),
    ({"model": "m", "max_tokens": 4, "messages": COLOURS, "temperature": "hot"}, "temperature"),
    ({"model": "m", "max_tokens": 4, "messages": COLOURS, "top_p": -0.1}, "top_p"),
    ({"model": "m", "max_tokens": 4, "messages": COLOURS, "top_k": 2.5}, "top_k"),
    ({"model": "m", "max_tokens": 4, "messages": COLOURS, "stop_sequences": "END"}, "stop_sequences"),
    ({"model": "m", "max_tokens": 4, "messages": COLOURS, "stop_sequences": [""]}, "stop_sequences"),
    ({"model": "m", "max_tokens": 4, "messages": COLOURS, "stop_sequences": ["x"] * 17}, "stop_sequences"),
    ({"model": "m", "max_tokens": 4, "messages": COLOURS, "stream": "yes"}, "stream"),
    (
        {"model": "m", "max_tokens": 4, "messages": COLOURS, "tools": [{"name": "f", "input_schema": {}}]},
        "tools",
    ),
    (
        {
            "model": "m",
            "max_tokens": 4,
            "messages": COLOURS,
            "thinking": {"type": "enabled", "budget_tokens": 9},
        },
        "thinking",
    ),
]


@pytest.mark.parametrize(("payload", "named"), MALFORMED)
def test_malformed_requests_are_400_naming_the_field(
    server: LocalServer, payload: object, named: str
) -> None:
    status, body = post(server, payload)
    assert status == 400, body
    assert named in anthropic_error(body, "invalid_request_error")


def test_the_client_gets_bad_request_errors_for_bad_json_and_blocks_it_cannot_take(
    server: LocalServer, client: anthropic.Anthropic
) -> None:
    status, body = post(server, b"{not json")
    assert status == 400 and "JSON" in anthropic_error(body, "invalid_request_error")
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="m",
            max_tokens=4,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "AA=="},
                        }
                    ],
                }
            ],
        )
    assert "'image' blocks" in anthropic_error(info.value.body, "invalid_request_error")


def test_framing_errors_and_oversize_bodies_are_answered_in_anthropics_shape(server: LocalServer) -> None:
    head = f"POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {KEY}\r\n"
    status, body = raw_exchange(server, f"{head}Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
    assert status == 413 and str(MAX_BODY_BYTES) in anthropic_error(body, "request_too_large")
    status, body = raw_exchange(server, f"{head}\r\n".encode())
    assert status == 411 and anthropic_error(body, "invalid_request_error")
    get = f"GET /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: {KEY}\r\n\r\n"
    status, body = raw_exchange(server, get.encode())
    assert status == 405 and anthropic_error(body, "invalid_request_error")
    rebound = f"POST /v1/messages HTTP/1.1\r\nHost: evil.example\r\nx-api-key: {KEY}\r\n\r\n"
    status, body = raw_exchange(server, rebound.encode())
    assert status == 403 and anthropic_error(body, "permission_error")


def test_the_key_is_checked_before_the_body_is_asked_for_or_read(server: LocalServer) -> None:
    head = "POST /v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    huge = f"Content-Length: {10**12}\r\nExpect: 100-continue\r\n"
    with socket.create_connection((LOOPBACK, server.port), timeout=30) as sock:
        # Headers only: the answer must come without any body sent.
        sock.sendall(f"{head}x-api-key: wrong\r\n{huge}\r\n".encode())
        answer = read_head(sock)
        assert answer.startswith(b"HTTP/1.1 401 ") and b"\r\nConnection: close\r\n" in answer
        length = re.search(rb"\r\nContent-Length: (\d+)\r\n", answer)
        assert length is not None
        body = b""
        while len(body) < int(length.group(1)):
            body += sock.recv(65536)
        anthropic_error(json.loads(body), "authentication_error")
        assert closed_by_server(sock)
    with socket.create_connection((LOOPBACK, server.port), timeout=30) as sock:
        sock.sendall(f"{head}x-api-key: {KEY}\r\n{huge}\r\n".encode())
        assert read_head(sock).startswith(b"HTTP/1.1 413 ")
