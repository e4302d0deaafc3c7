"""Embeddings on the local server: OpenAI's `POST /v1/embeddings` driven by the official `openai` client and
Ollama's `POST /api/embed` by the official `ollama` client, with the real bundled embedding model
(multilingual-e5-small) in its own runner process; bad input by raw requests too."""

from __future__ import annotations

import base64
import http.client
import json
import logging
import multiprocessing
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import ollama
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.chat.engine import ChatEngine
from app.core import Core
from app.documents.embedding import RunnerEmbedder
from app.local_api.embeddings import MAX_INPUTS
from app.local_api.server import MAX_BODY_BYTES, LocalServer
from tests.app.local_api.test_local_server import (
    KEY,
    LOOPBACK,
    STORY,
    model_name,
    raw_exchange,
    request,
    serve,
)
from tests.helpers.waiting import wait_until

# The fixture this file takes from the server's main tests, named here so that pytest finds it.
__all__ = ["model_name"]

EMBEDDINGS = "/v1/embeddings"
OLLAMA_EMBED = "/api/embed"
# Two paraphrases and an unrelated sentence, in English and in Chinese.
ENGLISH = (
    "The cat sat on the mat.",
    "A cat was sitting on the rug.",
    "Stock markets fell sharply on Monday.",
)
CHINESE = ("猫坐在垫子上。", "一只猫正坐在地毯上。", "周一股市大幅下跌。")
TEXTS = [*ENGLISH, *CHINESE]
# A text is one llama.cpp call alone, but packed with others into one when batched: the same text gives
# the same vector to float32 rounding of those different sums, not bit for bit (identical when the same
# request comes again). Measured differences are around 1e-3 in a coordinate of a unit vector.
BATCH_ATOL = 5e-3
BATCH_MIN_COSINE = 0.9999
# Well over the model's 512 tokens.
LONG = "lighthouse " * 700


@pytest.fixture
def embedder(embedding_model: Path, core: Core) -> Iterator[RunnerEmbedder]:
    """The embedder the composition root makes: the documents' one, shared with the API."""
    made = core.embedder()
    assert made is not None and made.model_path == embedding_model
    assert core.embedder() is made
    yield made
    made.close()


@pytest.fixture
def embedding_id(embedding_model: Path) -> str:
    return embedding_model.stem


@pytest.fixture
def server(engine: ChatEngine, embedder: RunnerEmbedder) -> Iterator[LocalServer]:
    running = serve(engine, embedder=embedder)
    yield running
    running.stop()


@pytest.fixture
def api(server: LocalServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=120) as client:
        yield client


@pytest.fixture(autouse=True)
def no_ollama_key_from_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    # The ollama client sends $OLLAMA_API_KEY as the key when it is given none.
    monkeypatch.delenv("OLLAMA_API_KEY", raising=False)


def ollama_client(server: LocalServer, key: str | None = KEY) -> ollama.Client:
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return ollama.Client(host=f"http://{LOOPBACK}:{server.port}", headers=headers, timeout=120)


def matrix(rows: Any) -> npt.NDArray[np.float32]:
    return np.asarray([np.asarray(row, dtype=np.float32) for row in rows], dtype=np.float32)


def vectors_of(response: Any) -> npt.NDArray[np.float32]:
    assert [item.index for item in response.data] == list(range(len(response.data)))
    return matrix(item.embedding for item in response.data)


def embedding_runners() -> int:
    return len(multiprocessing.active_children())


def requests_counted(server: LocalServer, endpoint: str, status: int) -> float:
    connection = http.client.HTTPConnection(LOOPBACK, server.port, timeout=60)
    try:
        connection.request("GET", "/metrics", headers={"Authorization": f"Bearer {KEY}"})
        text = connection.getresponse().read().decode()
    finally:
        connection.close()
    wanted = {"endpoint": endpoint, "status": str(status)}
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "hearth_api_requests_total" and wanted.items() <= sample.labels.items()
    )


# -- OpenAI's API, with the official client -----------------------------------------------------------


@pytest.mark.model
def test_batched_deterministic_and_listed_starting_the_runner_on_first_use(
    api: openai.OpenAI, embedder: RunnerEmbedder, embedding_id: str
) -> None:
    assert [m.id for m in api.models.list()] == [embedding_id]
    assert api.models.retrieve(embedding_id).id == embedding_id
    assert embedding_runners() == 0, "the runner starts at the first embeddings request, not before"

    first = api.embeddings.create(model=embedding_id, input=TEXTS, encoding_format="float")
    assert embedding_runners() == 1
    assert first.object == "list" and first.model == embedding_id
    vectors = vectors_of(first)
    dimensions, _ = embedder.shape()
    assert vectors.shape == (len(TEXTS), dimensions)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert 0 < first.usage.prompt_tokens == first.usage.total_tokens

    # The same request again: bit for bit.
    again = api.embeddings.create(model=embedding_id, input=TEXTS, encoding_format="float")
    assert np.array_equal(vectors_of(again), vectors)
    assert again.usage == first.usage

    # base64 asked for: the client gives the string as it came, little-endian float32.
    encoded = api.embeddings.create(model=embedding_id, input=TEXTS, encoding_format="base64")
    decoded = matrix(
        np.frombuffer(base64.b64decode(str(item.embedding)), dtype="<f4") for item in encoded.data
    )
    assert np.array_equal(decoded, vectors)
    # Without encoding_format the client asks for base64 and decodes it itself.
    assert np.array_equal(vectors_of(api.embeddings.create(model=embedding_id, input=TEXTS)), vectors)

    # One by one: the same vectors, to float rounding (BATCH_ATOL).
    alone = matrix(api.embeddings.create(model=embedding_id, input=text).data[0].embedding for text in TEXTS)
    assert np.allclose(alone, vectors, atol=BATCH_ATOL)
    assert np.all(np.sum(alone * vectors, axis=1) > BATCH_MIN_COSINE)
    assert embedding_runners() == 1


@pytest.mark.model
def test_paraphrases_are_closer_than_unrelated_texts_in_english_and_chinese(
    api: openai.OpenAI, embedding_id: str
) -> None:
    for paraphrase, other, unrelated in (ENGLISH, CHINESE):
        a, b, c = vectors_of(api.embeddings.create(model=embedding_id, input=[paraphrase, other, unrelated]))
        assert a @ b > a @ c + 0.1, (paraphrase, other, unrelated)
        assert a @ b > b @ c + 0.1, (paraphrase, other, unrelated)


@pytest.mark.model
def test_texts_are_embedded_as_given_with_no_prefix_added(
    api: openai.OpenAI, embedder: RunnerEmbedder, embedding_id: str
) -> None:
    """e5 expects "query: " or "passage: " in front; the API adds neither (OpenAI's semantics), so a client
    adding "query: " gets what Hearth's own search embeds a question as."""
    texts = ["hello world", "query: hello world"]
    plain, prefixed = vectors_of(api.embeddings.create(model=embedding_id, input=texts))
    assert np.array_equal(np.stack([plain, prefixed]), embedder.embed_as_given(texts).vectors)
    assert np.allclose(prefixed, embedder.embed_query("hello world"), atol=BATCH_ATOL)
    assert not np.allclose(plain, prefixed, atol=BATCH_ATOL)


@pytest.mark.model
def test_dimensions_and_an_input_over_the_context(
    api: openai.OpenAI, embedder: RunnerEmbedder, embedding_id: str
) -> None:
    dimensions, n_ctx = embedder.shape()
    answer = api.embeddings.create(model=embedding_id, input="hi", dimensions=dimensions)
    assert len(answer.data[0].embedding) == dimensions
    with pytest.raises(openai.BadRequestError) as refused:
        api.embeddings.create(model=embedding_id, input="hi", dimensions=dimensions // 2)
    assert refused.value.param == "dimensions" and str(dimensions) in refused.value.message

    with pytest.raises(openai.BadRequestError) as refused:
        api.embeddings.create(model=embedding_id, input=["short", LONG])
    assert refused.value.code == "context_length_exceeded" and refused.value.param == "input"
    assert "'input[1]'" in refused.value.message and f"at most {n_ctx}" in refused.value.message
    # A text of exactly the context fits.
    words = ["lighthouse"] * n_ctx
    while embedder.count_tokens_as_given([" ".join(words)])[0] > n_ctx:
        words.pop()
    fits = api.embeddings.create(model=embedding_id, input=" ".join(words))
    assert fits.usage.prompt_tokens <= n_ctx


@pytest.mark.model
def test_embeddings_do_not_wait_for_the_chat_runner(
    model_name: str, engine: ChatEngine, api: openai.OpenAI, embedding_id: str
) -> None:
    assert [m.id for m in api.models.list()] == [model_name, embedding_id]
    story = api.chat.completions.create(
        model=model_name, messages=STORY, temperature=0, max_tokens=2000, stream=True
    )
    next(iter(story))  # the chat runner is generating for this request
    answer = api.embeddings.create(model=embedding_id, input=TEXTS)
    assert len(answer.data) == len(TEXTS)
    assert engine.waiting_jobs == 0
    story.close()
    with pytest.raises(openai.NotFoundError) as refused:
        api.embeddings.create(model=model_name, input="hi")
    assert refused.value.code == "model_not_found" and embedding_id in refused.value.message


@pytest.mark.model
def test_a_client_hanging_up_stops_its_request(
    server: LocalServer, api: openai.OpenAI, embedding_id: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="hearth")
    api.embeddings.create(model=embedding_id, input="warm up")
    body = json.dumps({"model": embedding_id, "input": [f"sentence number {i}" for i in range(MAX_INPUTS)]})
    with socket.create_connection((LOOPBACK, server.port), timeout=60) as sock:
        sock.sendall(
            f"POST {EMBEDDINGS} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}".encode()
        )
    wait_until(lambda: "embeddings request was cancelled" in caplog.text, "the request to be cancelled")
    assert len(api.embeddings.create(model=embedding_id, input=TEXTS).data) == len(TEXTS)
    assert requests_counted(server, EMBEDDINGS, 200) == 2


# -- Ollama's API, with the official client -----------------------------------------------------------


@pytest.mark.model
def test_ollama_client_embeds_as_the_openai_endpoint_does(
    server: LocalServer, api: openai.OpenAI, embedding_id: str, embedder: RunnerEmbedder
) -> None:
    with ollama_client(server) as client:
        ollama_embeds(client, api, embedding_id, embedder)
    assert requests_counted(server, OLLAMA_EMBED, 200) == 5
    assert requests_counted(server, OLLAMA_EMBED, 400) == 2


def ollama_embeds(
    client: ollama.Client, api: openai.OpenAI, embedding_id: str, embedder: RunnerEmbedder
) -> None:
    # An empty input loads the model, as Ollama's clients preload one.
    empty = client.embed(model=embedding_id, input="")
    assert empty.embeddings == [] and embedding_runners() == 1

    answer = client.embed(model=embedding_id, input=TEXTS)
    assert answer.model == embedding_id
    vectors = matrix(answer.embeddings)
    openai_vectors = vectors_of(
        api.embeddings.create(model=embedding_id, input=TEXTS, encoding_format="float")
    )
    assert np.array_equal(vectors, openai_vectors)
    assert answer.prompt_eval_count is not None and answer.prompt_eval_count > 0
    assert answer.total_duration is not None and answer.load_duration is not None
    assert 0 <= answer.load_duration <= answer.total_duration
    assert np.array_equal(matrix(client.embed(model=embedding_id, input=TEXTS).embeddings), vectors)

    # One string; the default tag Ollama's clients add names the same model.
    single = client.embed(model=f"{embedding_id}:latest", input=TEXTS[0])
    assert np.allclose(matrix(single.embeddings), vectors[:1], atol=BATCH_ATOL)

    # Ollama cuts a text over the context unless told not to.
    _, n_ctx = embedder.shape()
    cut = client.embed(model=embedding_id, input=[LONG])
    assert len(cut.embeddings) == 1 and cut.prompt_eval_count == n_ctx
    with pytest.raises(ollama.ResponseError) as refused:
        client.embed(model=embedding_id, input=["short", LONG], truncate=False)
    assert refused.value.status_code == 400 and "'input[1]'" in refused.value.error

    with pytest.raises(ollama.ResponseError) as refused:
        client.embed(model=embedding_id, input="hi", dimensions=3)
    assert refused.value.status_code == 400 and "'dimensions'" in refused.value.error


def test_ollama_errors_are_in_ollama_shape(server: LocalServer, embedding_id: str) -> None:
    with ollama_client(server, key=None) as stranger, pytest.raises(ollama.ResponseError) as refused:
        stranger.embed(model=embedding_id, input="hi")
    assert refused.value.status_code == 401 and "API key" in refused.value.error
    with ollama_client(server) as client, pytest.raises(ollama.ResponseError) as refused:
        client.embed(model="nomic-embed-text", input="hi")
    assert refused.value.status_code == 404 and embedding_id in refused.value.error


OLLAMA_MALFORMED: list[tuple[bytes, int, str]] = [
    (b"{not json", 400, "not valid JSON"),
    (b"[]", 400, "JSON object"),
    (b'{"input": "hi"}', 400, "'model'"),
    (b'{"model": 5, "input": "hi"}', 400, "'model'"),
    (b'{"model": "M", "input": 5}', 400, "'input'"),
    (b'{"model": "M", "input": ["ok", ""]}', 400, "'input[1]' is empty"),
    (b'{"model": "M", "input": [1, 2, 3]}', 400, "token ids"),
    (b'{"model": "M", "input": "hi", "truncate": "yes"}', 400, "'truncate'"),
    (b'{"model": "M", "input": "hi", "options": []}', 400, "'options'"),
    (b'{"model": "M", "input": "hi", "keep_alive": []}', 400, "'keep_alive'"),
    (json.dumps({"model": "M", "input": ["a"] * (MAX_INPUTS + 1)}).encode(), 400, f"at most {MAX_INPUTS}"),
    (b'{"model": "unknown", "input": "hi"}', 404, "No embedding model named 'unknown'"),
]


@pytest.mark.parametrize(("body", "status", "says"), OLLAMA_MALFORMED)
def test_ollama_bad_input_is_refused_without_starting_the_runner(
    server: LocalServer, embedding_id: str, body: bytes, status: int, says: str
) -> None:
    got, answer, _ = request(
        server, "POST", OLLAMA_EMBED, body.replace(b'"M"', json.dumps(embedding_id).encode())
    )
    assert (got, list(answer)) == (status, ["error"]), answer
    assert isinstance(answer["error"], str) and says in answer["error"]
    assert embedding_runners() == 0


# -- bad input on OpenAI's endpoint ---------------------------------------------------------------------

OPENAI_MALFORMED: list[tuple[bytes, int, str | None, str | None]] = [
    # (body, status, param, code)
    (b"{not json", 400, None, None),
    (b'"just a string"', 400, None, None),
    (b'{"input": "hi"}', 400, "model", "invalid_value"),
    (b'{"model": ["M"], "input": "hi"}', 400, "model", "invalid_value"),
    (b'{"model": "M"}', 400, "input", "invalid_value"),
    (b'{"model": "M", "input": null}', 400, "input", "invalid_value"),
    (b'{"model": "M", "input": 42}', 400, "input", "invalid_value"),
    (b'{"model": "M", "input": {"text": "hi"}}', 400, "input", "invalid_value"),
    (b'{"model": "M", "input": ["hi", 42]}', 400, "input", "invalid_value"),
    (b'{"model": "M", "input": ""}', 400, "input", "invalid_value"),
    (b'{"model": "M", "input": []}', 400, "input", "invalid_value"),
    (b'{"model": "M", "input": ["ok", ""]}', 400, "input", "invalid_value"),
    (b'{"model": "M", "input": [101, 2023, 102]}', 400, "input", "unsupported"),
    (b'{"model": "M", "input": [[101, 2023], [102]]}', 400, "input", "unsupported"),
    (b'{"model": "M", "input": "hi", "encoding_format": "int8"}', 400, "encoding_format", "invalid_value"),
    (b'{"model": "M", "input": "hi", "dimensions": "384"}', 400, "dimensions", "invalid_value"),
    (b'{"model": "M", "input": "hi", "dimensions": 0}', 400, "dimensions", "invalid_value"),
    (json.dumps({"model": "M", "input": ["a"] * (MAX_INPUTS + 1)}).encode(), 400, "input", "too_many_inputs"),
    (b'{"model": "text-embedding-3-small", "input": "hi"}', 404, "model", "model_not_found"),
]


@pytest.mark.parametrize(("body", "status", "param", "code"), OPENAI_MALFORMED)
def test_openai_bad_input_is_refused_without_starting_the_runner(
    server: LocalServer, embedding_id: str, body: bytes, status: int, param: str | None, code: str | None
) -> None:
    got, answer, _ = request(
        server, "POST", EMBEDDINGS, body.replace(b'"M"', json.dumps(embedding_id).encode())
    )
    assert got == status, answer
    error = answer["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert (error["param"], error["code"]) == (param, code) and error["message"]
    assert embedding_runners() == 0


def test_openai_client_errors_missing_key_and_wrong_method(
    server: LocalServer, api: openai.OpenAI, embedding_id: str
) -> None:
    with openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0) as stranger:
        with pytest.raises(openai.AuthenticationError) as refused:
            stranger.embeddings.create(model=embedding_id, input="hi")
        assert refused.value.code == "invalid_api_key"
    status, _, _ = request(
        server, "POST", EMBEDDINGS, b'{"model": "x", "input": "hi"}', {"Authorization": ""}
    )
    assert status == 401
    with pytest.raises(openai.NotFoundError) as unknown:
        api.embeddings.create(model="text-embedding-3-small", input="hi")
    assert unknown.value.code == "model_not_found" and embedding_id in unknown.value.message
    with pytest.raises(openai.BadRequestError) as empty:
        api.embeddings.create(model=embedding_id, input="")
    assert empty.value.param == "input"
    status, answer, _ = request(server, "GET", EMBEDDINGS)
    assert status == 405 and answer["error"]["code"] == "method_not_allowed"
    assert embedding_runners() == 0


@pytest.mark.parametrize("path", [EMBEDDINGS, OLLAMA_EMBED])
def test_an_oversized_body_is_413_in_the_api_s_shape(server: LocalServer, path: str) -> None:
    status, answer = raw_exchange(
        server,
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
        f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode(),
    )
    assert status == 413
    message = answer["error"] if path == OLLAMA_EMBED else answer["error"]["message"]
    assert isinstance(message, str) and str(MAX_BODY_BYTES) in message


def test_without_an_embedding_model_nothing_is_listed_and_requests_are_404(engine: ChatEngine) -> None:
    running = serve(engine)
    try:
        status, listed, _ = request(running, "GET", "/v1/models")
        assert (status, listed["data"]) == (200, [])
        status, answer, _ = request(running, "POST", EMBEDDINGS, b'{"model": "any", "input": "hi"}')
        assert status == 404 and "no embedding model" in answer["error"]["message"]
        status, answer, _ = request(running, "POST", OLLAMA_EMBED, b'{"model": "any", "input": "hi"}')
        assert status == 404 and "no embedding model" in answer["error"]
    finally:
        running.stop()
