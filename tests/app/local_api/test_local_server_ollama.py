"""Ollama's API on the local server (`/api/version`, `/api/tags`, `/api/show`, `/api/chat`, `/api/generate`),
driven by the official `ollama` client and by raw sockets: the same runner queue, hang-up cancellation,
limits and key as the OpenAI endpoint, with Ollama's NDJSON streams, replies and `{"error": ...}` shape."""

from __future__ import annotations

import http.client
import json
import logging
import re
import socket
from collections.abc import Generator, Iterator
from typing import Any, Literal, cast

import jsonschema
import ollama
import pytest

from app.chat.engine import ChatEngine
from app.core import Core
from app.local_api import ollama_api
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
from tests.app.local_api.test_local_server_metrics import scrape
from tests.app.local_api.test_local_server_structured import PERSON
from tests.helpers.waiting import wait_until

__all__ = ["model_name", "server"]

COLOURS = [{"role": "user", "content": "Name three colours."}]
STORY = [{"role": "user", "content": "Write a very long story about a lighthouse keeper."}]
ASK_JSON = "Describe a person as JSON: their name, favourite colour, age and hobbies."
GREEDY = {"temperature": 0, "seed": 1}
DURATIONS = ("total_duration", "load_duration", "prompt_eval_duration", "eval_duration")


def host(server: LocalServer) -> str:
    return f"http://{LOOPBACK}:{server.port}"


def make_client(server: LocalServer, key: str | None = KEY) -> ollama.Client:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return ollama.Client(host=host(server), headers=headers, timeout=120)


@pytest.fixture
def client(server: LocalServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[ollama.Client]:
    # The client sends $OLLAMA_API_KEY as the key when it is given none: not from this machine's setup.
    monkeypatch.delenv("OLLAMA_API_KEY", raising=False)
    with make_client(server) as api:
        yield api


def post(server: LocalServer, path: str, payload: object, **headers: str) -> tuple[int, dict[str, Any]]:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    status, answer, _ = request(server, "POST", path, body, headers)
    return status, answer


def ollama_error(body: object) -> str:
    """The message of an error in Ollama's shape: `{"error": message}` and nothing else."""
    assert isinstance(body, dict) and set(body) == {"error"}, body
    message = body["error"]
    assert isinstance(message, str) and message
    return message


def assert_counts(final: ollama.ChatResponse | ollama.GenerateResponse, most: int) -> None:
    assert final.done is True and final.done_reason in ("stop", "length")
    assert final.prompt_eval_count is not None and final.prompt_eval_count > 0
    assert final.eval_count is not None and 0 < final.eval_count <= most
    durations = [getattr(final, name) for name in DURATIONS]
    assert all(isinstance(value, int) and value >= 0 for value in durations), durations
    assert final.total_duration is not None and final.prompt_eval_duration is not None
    assert final.total_duration >= final.prompt_eval_duration > 0


# -- with the real starter model -----------------------------------------------------------------------


@pytest.mark.model
def test_version_tags_and_show_describe_the_loaded_model(
    core: Core, model_name: str, server: LocalServer, client: ollama.Client
) -> None:
    # The client has no call for the version: Ollama's own tools read it like this.
    status, body, _ = request(server, "GET", "/api/version")
    assert status == 200 and body == {"version": ollama_api.VERSION}

    installed = core.library.get(model_name)
    (listed,) = client.list().models
    assert listed.model == model_name and listed.size == installed.total_size_bytes
    assert listed.digest == installed.sha256 and listed.modified_at is not None
    assert listed.details is not None and listed.details.format == "gguf"
    assert (listed.details.family, listed.details.quantization_level) == ("llama", "Q4_1")
    assert listed.details.parameter_size == "134.52M"
    status, raw, _ = request(server, "GET", "/api/tags")
    assert status == 200 and raw["models"][0]["name"] == model_name

    shown = client.show(model_name)
    assert shown.details == listed.details and shown.capabilities == ["completion"]
    assert shown.template and "im_start" in shown.template  # the GGUF's own chat template
    assert shown.modelinfo is not None
    assert shown.modelinfo["general.architecture"] == "llama"
    assert shown.modelinfo["llama.context_length"] == 8192
    assert shown.modelinfo["general.parameter_count"] == 134515008
    assert shown.modelinfo["tokenizer.ggml.tokens"] == []  # left empty, as Ollama does without verbose
    assert shown.parameters is not None and re.search(r"^num_ctx +\d+$", shown.parameters, re.M)
    assert shown.modelfile is not None and f"FROM {model_name}\n" in shown.modelfile
    # Ollama's default tag names the same model.
    assert client.show(f"{model_name}:latest").details == listed.details
    with pytest.raises(ollama.ResponseError) as missing:
        client.show("llama3.2")
    assert missing.value.status_code == 404 and model_name in missing.value.error


@pytest.mark.model
def test_chat_whole_and_streamed(core: Core, model_name: str, client: ollama.Client) -> None:
    whole = client.chat(model=model_name, messages=COLOURS, options={**GREEDY, "num_predict": 24})
    assert whole.model == model_name and whole.created_at
    assert whole.message.role == "assistant" and whole.message.content
    assert_counts(whole, 24)

    parts = list(
        client.chat(model=model_name, messages=COLOURS, options={**GREEDY, "num_predict": 24}, stream=True)
    )
    assert all(part.done is False for part in parts[:-1]) and parts[-1].done is True
    assert "".join(part.message.content or "" for part in parts) == whole.message.content
    assert parts[-1].message.content == "" and parts[-1].done_reason == whole.done_reason
    assert parts[-1].eval_count == whole.eval_count
    assert_counts(parts[-1], 24)
    # The API never writes to the conversation database.
    assert core.store.list_conversations() == []


@pytest.mark.model
def test_generate_whole_and_streamed_with_a_system_prompt(model_name: str, client: ollama.Client) -> None:
    options = {**GREEDY, "num_predict": 16}
    plain = client.generate(model=model_name, prompt="Name three colours.", options=options)
    assert plain.response and plain.model == model_name
    assert_counts(plain, 16)
    parts = list(
        client.generate(model=model_name, prompt="Name three colours.", options=options, stream=True)
    )
    assert "".join(part.response or "" for part in parts) == plain.response
    assert parts[-1].done is True and parts[-1].response == ""
    assert_counts(parts[-1], 16)

    pirate = "You are a pirate. Answer every question in a pirate's words, and never mention colours."
    told = client.generate(model=model_name, prompt="Name three colours.", system=pirate, options=options)
    assert told.response and told.response != plain.response
    assert told.prompt_eval_count is not None and plain.prompt_eval_count is not None
    assert told.prompt_eval_count > plain.prompt_eval_count


@pytest.mark.model
def test_the_stream_is_ndjson_by_default_and_an_empty_request_says_loaded(
    model_name: str, server: LocalServer
) -> None:
    body = json.dumps({"model": model_name, "messages": COLOURS, "options": {"num_predict": 4}})
    connection = http.client.HTTPConnection(LOOPBACK, server.port, timeout=60)
    try:
        headers = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
        connection.request("POST", "/api/chat", body=body, headers=headers)
        response = connection.getresponse()
        assert response.status == 200
        assert response.getheader("Content-Type") == "application/x-ndjson"
        data = response.read().decode()
    finally:
        connection.close()
    assert data.endswith("\n")
    lines = [json.loads(line) for line in data.splitlines()]
    assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
    assert {line["model"] for line in lines} == {model_name}
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", line["created_at"]) for line in lines)
    assert lines[-1]["done_reason"] == "length" and lines[-1]["eval_count"] == 4

    # Ollama's way to load a model: nothing to generate, the model is ready.
    for path, payload in (("/api/chat", {"messages": []}), ("/api/generate", {"keep_alive": 0})):
        status, answer = post(server, path, {"model": model_name, **payload})
        assert status == 200 and answer["done"] is True and answer["done_reason"] == "load", answer
    status, answer = post(server, "/api/generate", {"model": "llama3.2"})
    assert status == 404 and model_name in ollama_error(answer)


@pytest.mark.model
def test_options_reproduce_cap_and_stop_the_reply(model_name: str, client: ollama.Client) -> None:
    def reply(**options: Any) -> ollama.GenerateResponse:
        return client.generate(model=model_name, prompt=STORY[0]["content"], options=options)

    assert reply(temperature=0, num_predict=12).response == reply(temperature=0, num_predict=12).response
    seeded = reply(temperature=1.0, top_p=0.9, top_k=50, seed=7, num_predict=12).response
    assert seeded == reply(temperature=1.0, top_p=0.9, top_k=50, seed=7, num_predict=12).response

    capped = reply(temperature=0, num_predict=3)
    assert capped.done_reason == "length" and capped.eval_count == 3

    text = reply(temperature=0, num_predict=24).response or ""
    stop = text.split()[len(text.split()) // 2]
    stopped = reply(temperature=0, num_predict=24, stop=[stop])
    assert stopped.response == text[: text.index(stop)] and stopped.done_reason == "stop"
    # Options Hearth does not have, and the load-time ones (the model is loaded already), are ignored.
    ignored = reply(temperature=0, num_predict=24, num_ctx=64, mirostat=2, num_gpu=0)
    assert ignored.response == text


@pytest.mark.model
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_format_json_parses_and_a_schema_validates(
    model_name: str, client: ollama.Client, stream: bool
) -> None:
    def reply(schema: dict[str, Any] | Literal["json"], **options: Any) -> tuple[str, str | None]:
        options = {**GREEDY, "num_predict": 200, **options}
        messages = [{"role": "user", "content": ASK_JSON}]
        if not stream:
            answer = client.chat(model=model_name, messages=messages, format=schema, options=options)
            return answer.message.content or "", answer.done_reason
        parts = list(
            client.chat(model=model_name, messages=messages, format=schema, options=options, stream=True)
        )
        return "".join(part.message.content or "" for part in parts), parts[-1].done_reason

    text, reason = reply("json")
    assert reason == "stop", text
    assert isinstance(json.loads(text), dict)
    text, reason = reply(PERSON, temperature=0.8, seed=4)
    assert reason == "stop", text
    jsonschema.validate(json.loads(text), PERSON)


@pytest.mark.model
def test_an_unknown_model_is_404_and_a_prompt_over_the_context_is_400(
    model_name: str, client: ollama.Client
) -> None:
    for stream in (False, True):
        with pytest.raises(ollama.ResponseError) as missing:
            list(client.chat(model="llama3.2", messages=COLOURS, stream=True)) if stream else client.chat(
                model="llama3.2", messages=COLOURS
            )
        assert missing.value.status_code == 404 and model_name in missing.value.error
    huge = "lighthouse " * 6000
    with pytest.raises(ollama.ResponseError) as over:
        client.generate(model=model_name, prompt=huge, options={"num_predict": 4})
    assert over.value.status_code == 400 and "context" in over.value.error
    # A format the runner cannot make a grammar of is refused before anything is generated.
    loop = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    with pytest.raises(ollama.ResponseError) as refused:
        list(client.chat(model=model_name, messages=COLOURS, format=loop, stream=True))
    assert refused.value.status_code == 400
    assert client.chat(model=model_name, messages=COLOURS, options={"num_predict": 2}).message.content


@pytest.mark.model
def test_hanging_up_mid_stream_cancels_the_generation(
    model_name: str, engine: ChatEngine, client: ollama.Client, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hearth")
    stream = cast(
        "Generator[ollama.ChatResponse, None, None]",
        client.chat(
            model=model_name, messages=STORY, options={"temperature": 0, "num_predict": 2000}, stream=True
        ),
    )
    next(stream)
    stream.close()  # leaves the client's response block, closing the connection
    wait_until(lambda: "cancelled after" in caplog.text, "the generation to be cancelled")
    found = re.search(r"cancelled after (\d+) tokens", caplog.text)
    assert found is not None and int(found.group(1)) < 2000
    # The runner is free: the next request is answered.
    answer = client.generate(model=model_name, prompt="Hello", options={"num_predict": 4})
    assert answer.response and engine.waiting_jobs == 0


# -- the HTTP surface, with no model loaded ------------------------------------------------------------


def test_a_wrong_or_missing_key_is_401_in_ollamas_shape(
    server: LocalServer, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.delenv("OLLAMA_API_KEY", raising=False)
    for key in (None, "wrong"):
        with make_client(server, key) as api, pytest.raises(ollama.ResponseError) as info:
            api.list()
        assert info.value.status_code == 401 and "Authorization: Bearer" in info.value.error
    status, body, response = request(server, "GET", "/api/version", headers={"Authorization": ""})
    assert status == 401 and ollama_error(body) and response.getheader("WWW-Authenticate") == "Bearer"
    # The client's own way to give a key: $OLLAMA_API_KEY, sent as a bearer token.
    monkeypatch.setenv("OLLAMA_API_KEY", KEY)
    with ollama.Client(host=host(server)) as api:
        assert api.list().models == []
    assert KEY not in caplog.text


def test_no_model_loaded_lists_none_and_chat_is_503(server: LocalServer, client: ollama.Client) -> None:
    assert client.list().models == []
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(model="any", messages=COLOURS)
    assert info.value.status_code == 503 and "No model is loaded" in info.value.error
    with pytest.raises(ollama.ResponseError) as empty:
        client.chat(model="any", messages=[])
    assert empty.value.status_code == 503
    with pytest.raises(ollama.ResponseError) as shown:
        client.show("any")
    assert shown.value.status_code == 404


MALFORMED: list[tuple[str, object, str]] = [
    ("/api/chat", [], "JSON object"),
    ("/api/chat", {"messages": COLOURS}, "model"),
    ("/api/chat", {"model": 7, "messages": COLOURS}, "model"),
    ("/api/chat", {"model": "m", "messages": "hello"}, "messages"),
    ("/api/chat", {"model": "m", "messages": ["hello"]}, "messages[0]"),
    ("/api/chat", {"model": "m", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ("/api/chat", {"model": "m", "messages": [{"role": "user", "content": 7}]}, "messages[0].content"),
    (
        "/api/chat",
        {"model": "m", "messages": [{"role": "user", "content": "x", "images": ["AA=="]}]},
        "images",
    ),
    ("/api/chat", {"model": "m", "messages": [{"role": "tool", "content": "4"}]}, "tool"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "tools": [{"type": "function"}]}, "tools"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "stream": "yes"}, "stream"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "think": True}, "think"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "format": "xml"}, "format"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "format": {"type": "banana"}}, "format"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "format": {"type": "object", "not": {}}}, "not at #"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "options": [1]}, "options"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "options": {"temperature": "hot"}}, "temperature"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "options": {"temperature": -1}}, "temperature"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "options": {"top_p": 0}}, "top_p"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "options": {"top_k": 2.5}}, "top_k"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "options": {"seed": 2**32}}, "seed"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "options": {"num_predict": 0}}, "num_predict"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "options": {"num_predict": "9"}}, "num_predict"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "options": {"stop": [""]}}, "stop"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "options": {"stop": ["x"] * 17}}, "stop"),
    ("/api/chat", {"model": "m", "messages": COLOURS, "keep_alive": []}, "keep_alive"),
    ("/api/generate", {"model": "m", "prompt": 7}, "prompt"),
    ("/api/generate", {"model": "m", "prompt": "x", "system": ["a"]}, "system"),
    ("/api/generate", {"model": "m", "prompt": "x", "raw": True}, "raw"),
    ("/api/generate", {"model": "m", "prompt": "x", "context": [1, 2, 3]}, "context"),
    ("/api/generate", {"model": "m", "prompt": "x", "suffix": "y"}, "suffix"),
    ("/api/generate", {"model": "m", "prompt": "x", "template": "{{ .Prompt }}"}, "template"),
    ("/api/generate", {"model": "m", "prompt": "x", "images": ["AA=="]}, "images"),
    ("/api/show", {}, "model"),
    ("/api/show", "llama3.2", "JSON object"),
]


@pytest.mark.parametrize(("path", "payload", "named"), MALFORMED)
def test_malformed_requests_are_400_naming_the_field(
    server: LocalServer, path: str, payload: object, named: str
) -> None:
    status, body = post(server, path, payload)
    assert status == 400, body
    assert named in ollama_error(body)


def test_bad_json_framing_and_oversize_bodies_are_answered_in_ollamas_shape(
    server: LocalServer, client: ollama.Client
) -> None:
    status, body = post(server, "/api/chat", b"{not json")
    assert status == 400 and "JSON" in ollama_error(body)
    with pytest.raises(ollama.ResponseError) as info:
        client.chat(
            model="m", messages=[{"role": "user", "content": "What is this?", "images": [b"\x89PNG"]}]
        )
    assert info.value.status_code == 400 and "images" in info.value.error
    head = f"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
    status, body = raw_exchange(server, f"{head}Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode())
    assert status == 413 and str(MAX_BODY_BYTES) in ollama_error(body)
    status, body = raw_exchange(server, f"{head}\r\n".encode())
    assert status == 411 and ollama_error(body)
    status, body = raw_exchange(
        server, f"GET /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n\r\n".encode()
    )
    assert status == 405 and ollama_error(body)
    status, body, _ = request(server, "GET", "/api/pull")
    assert status == 404 and "/api/chat" in ollama_error(body)
    rebound = f"GET /api/tags HTTP/1.1\r\nHost: evil.example\r\nAuthorization: Bearer {KEY}\r\n\r\n"
    status, body = raw_exchange(server, rebound.encode())
    assert status == 403 and ollama_error(body)


def test_the_key_is_checked_before_the_body_is_asked_for_or_read(server: LocalServer) -> None:
    head = "POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    huge = f"Content-Length: {10**12}\r\nExpect: 100-continue\r\n"
    with socket.create_connection((LOOPBACK, server.port), timeout=30) as sock:
        # Headers only: the answer must come without any body sent.
        sock.sendall(f"{head}Authorization: Bearer wrong\r\n{huge}\r\n".encode())
        answer = read_head(sock)
        assert answer.startswith(b"HTTP/1.1 401 ") and b"\r\nConnection: close\r\n" in answer
        length = re.search(rb"\r\nContent-Length: (\d+)\r\n", answer)
        assert length is not None
        body = b""
        while len(body) < int(length.group(1)):
            body += sock.recv(65536)
        ollama_error(json.loads(body))
        assert closed_by_server(sock)
    with socket.create_connection((LOOPBACK, server.port), timeout=30) as sock:
        sock.sendall(f"{head}Authorization: Bearer {KEY}\r\n{huge}\r\n".encode())
        assert read_head(sock).startswith(b"HTTP/1.1 413 ")


def test_ollama_paths_are_counted_under_their_own_names(server: LocalServer, client: ollama.Client) -> None:
    client.list()
    request(server, "GET", "/api/version")
    with pytest.raises(ollama.ResponseError):
        client.show("any")
    with pytest.raises(ollama.ResponseError):
        client.generate(model="any", prompt="Hello")
    with pytest.raises(ollama.ResponseError):
        client.chat(model="any", messages=COLOURS)
    request(server, "GET", "/api/pull")
    counted = scrape(server)
    assert counted.requests("/api/tags", 200) == 1 and counted.requests("/api/version", 200) == 1
    assert counted.requests("/api/show", 404) == 1 and counted.requests("/api/generate", 503) == 1
    assert counted.requests("/api/chat", 503) == 1 and counted.requests("other", 404) == 1


def test_parameter_sizes_are_written_as_ollama_writes_them() -> None:
    assert ollama_api.parameter_size(8_030_261_248) == "8.0B"
    assert ollama_api.parameter_size(134_515_008) == "134.52M"
    assert ollama_api.parameter_size(999) == "999"
