"""Embeddings for the local server: OpenAI's `POST /v1/embeddings` and Ollama's `POST /api/embed`, both from
the embedding model Hearth ships (the one documents are searched with), in its own runner process.

This module reads a request, embeds it and shapes the answer; the local server (app.local_api.server)
reads the body, checks the key, counts the request as activity and notices a client hanging up.

Choices, the same for both APIs:
- Texts are embedded as given, with no prefix added (OpenAI's semantics: the input is the text). The
  bundled multilingual-e5 was trained with "query: " before a question and "passage: " before a text to
  find; a client that wants the retrieval quality Hearth's own search gets adds them itself.
- A vector has the model's dimensions; `dimensions` asking for any other number is a 400, since cutting a
  vector short only works for models trained for it, which e5 is not.
- Texts over the model's context: OpenAI's API refuses them (400 naming the input), as OpenAI does;
  Ollama's cuts them (`truncate`, default true, as Ollama does), and refuses them with `truncate: false`.
- Text only: token-id inputs are refused (400 naming `input`), as ids from another tokenizer (tiktoken's,
  which OpenAI clients send) would be read as other tokens of this model's vocabulary.

The runner is shared with the documents, one request at a time: a long request takes its turn between
the documents' batches, and the chat model's runner (another process) is never waited for.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from app.errors import HearthError
from inference.embedding import EmbeddingResult

OPENAI_PATH = "/v1/embeddings"
OLLAMA_PATH = "/api/embed"
# OpenAI's own limit on inputs per request.
MAX_INPUTS = 2048
# Texts per call to the runner: between calls, a client that hung up is noticed and the rest is not
# embedded. Each call is well under a second on a CPU for short texts.
TEXTS_PER_CALL = 64
# Ollama names models with a tag; a client that adds the default one means the same model.
_OLLAMA_DEFAULT_TAG = ":latest"


class ServedEmbedder(Protocol):
    """What the server needs of an embedder (app.documents.embedding.RunnerEmbedder is one). Every method
    but `model_path` may start the runner; they raise HearthError when it cannot embed."""

    @property
    def model_path(self) -> Path: ...

    def shape(self) -> tuple[int, int]: ...  # (dimensions, the most tokens a text is given)

    def embed_as_given(self, texts: Sequence[str]) -> EmbeddingResult: ...

    def count_tokens_as_given(self, texts: Sequence[str]) -> tuple[int, ...]: ...


class EmbeddingError(Exception):
    """A refused request; the server gives it its API's shape."""

    def __init__(
        self, status: int, message: str, *, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code


class Cancelled(Exception):
    """The client hung up: nothing is answered."""


@dataclass(frozen=True)
class EmbeddingRequest:
    model: str
    texts: tuple[str, ...]
    truncate: bool  # cut texts over the context, rather than refuse them
    dimensions: int | None = None
    base64: bool = False  # OpenAI's encoding_format


@dataclass(frozen=True)
class Embedded:
    vectors: npt.NDArray[np.float32]  # (texts, dimensions), each row of length 1
    tokens: int  # what the model read, after any cut
    load_s: float  # starting the runner and loading the model, when this request had to
    total_s: float


def model_id(path: Path) -> str:
    """The id clients name the embedding model by: its file's stem, as the chat model's id is."""
    return path.stem


def _bad(param: str, expected: str) -> EmbeddingError:
    return EmbeddingError(400, f"'{param}' must be {expected}.", param=param, code="invalid_value")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _model(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model", "the name of the embedding model (see GET /v1/models)")
    return model


def _texts(value: object, *, empty_means_none: bool) -> tuple[str, ...]:
    """The inputs, each a non-empty string. `empty_means_none`: "" and [] are no input (Ollama's way of
    loading a model ahead of use)."""
    if empty_means_none and value in ("", []):
        return ()
    items = [value] if isinstance(value, str) else value
    if _token_ids_given(items):
        raise EmbeddingError(
            400,
            "'input' as token ids is not supported: send the text (ids from another tokenizer would be read "
            "as other tokens of this model).",
            param="input",
            code="unsupported",
        )
    if not isinstance(items, list) or not items or not all(isinstance(i, str) for i in items):
        raise _bad("input", "a non-empty string or a non-empty list of them")
    if len(items) > MAX_INPUTS:
        raise EmbeddingError(
            400,
            f"'input' has {len(items)} texts; at most {MAX_INPUTS} are taken in one request.",
            param="input",
            code="too_many_inputs",
        )
    for index, text in enumerate(items):
        if not text:
            where = "input" if isinstance(value, str) else f"input[{index}]"
            raise EmbeddingError(400, f"'{where}' is empty.", param="input", code="invalid_value")
    return tuple(items)


def _token_ids_given(items: object) -> bool:
    """OpenAI's other input forms: one text as token ids, or several texts so."""
    if not isinstance(items, list) or not items:
        return False
    return all(_is_int(i) for i in items) or all(
        isinstance(i, list) and i and all(_is_int(t) for t in i) for i in items
    )


def _dimensions(body: dict[str, Any]) -> int | None:
    dimensions = body.get("dimensions")
    if dimensions is not None and (not _is_int(dimensions) or dimensions < 1):
        raise _bad("dimensions", "a positive integer")
    return dimensions


def parse_openai(body: object) -> EmbeddingRequest:
    """Check an OpenAI embeddings request. Raises EmbeddingError (400) naming the first field that is
    wrong."""
    if not isinstance(body, dict):
        raise EmbeddingError(400, "The request body must be a JSON object.")
    model = _model(body)
    if "input" not in body:
        raise _bad("input", "a non-empty string or a non-empty list of them")
    texts = _texts(body["input"], empty_means_none=False)
    encoding = body.get("encoding_format")
    if encoding not in (None, "float", "base64"):
        raise _bad("encoding_format", '"float" or "base64"')
    return EmbeddingRequest(model, texts, False, _dimensions(body), encoding == "base64")


def parse_ollama(body: object) -> EmbeddingRequest:
    """Check an Ollama embed request. `options` and `keep_alive` are taken and not used: the model stays
    loaded while Hearth runs, and an embedding model has nothing to sample."""
    if not isinstance(body, dict):
        raise EmbeddingError(400, "The request body must be a JSON object.")
    model = _model(body)
    texts = _texts(body.get("input", ""), empty_means_none=True)
    truncate = body.get("truncate", True)
    if not isinstance(truncate, bool):
        raise _bad("truncate", "true or false")
    options = body.get("options")
    if options is not None and not isinstance(options, dict):
        raise _bad("options", "an object")
    keep_alive = body.get("keep_alive")
    if keep_alive is not None and not isinstance(keep_alive, str | int | float):
        raise _bad("keep_alive", 'a duration (such as "5m") or a number of seconds')
    return EmbeddingRequest(model, texts, truncate, _dimensions(body))


def embed(
    request: EmbeddingRequest,
    embedder: ServedEmbedder | None,
    *,
    chat_model: str | None,
    cancelled: Callable[[], bool],
) -> Embedded:
    """The request's vectors, in its order. Raises EmbeddingError (an unknown model, a text too long, a
    runner that failed) or Cancelled when `cancelled()` turns true between calls to the runner."""
    started = time.perf_counter()
    served = model_id(embedder.model_path) if embedder is not None else None
    if embedder is None or request.model not in (served, f"{served}{_OLLAMA_DEFAULT_TAG}"):
        if embedder is None:
            why = "this Hearth has no embedding model installed."
        elif request.model == chat_model:
            why = f"it is the chat model; embeddings come from {served!r}."
        else:
            why = f"the embedding model is {served!r} (see GET /v1/models)."
        raise EmbeddingError(
            404, f"No embedding model named {request.model!r}: {why}", param="model", code="model_not_found"
        )
    try:
        dimensions, n_ctx = embedder.shape()
        load_s = time.perf_counter() - started
        if request.dimensions is not None and request.dimensions != dimensions:
            raise EmbeddingError(
                400,
                f"'dimensions' must be {dimensions}, this model's: its vectors cannot be shortened.",
                param="dimensions",
                code="invalid_value",
            )
        if not request.truncate and request.texts:
            _check_lengths(request, embedder.count_tokens_as_given(request.texts), n_ctx)
        parts: list[npt.NDArray[np.float32]] = []
        tokens = 0
        for start in range(0, len(request.texts), TEXTS_PER_CALL):
            if cancelled():
                raise Cancelled
            result = embedder.embed_as_given(request.texts[start : start + TEXTS_PER_CALL])
            parts.append(result.vectors)
            tokens += result.n_tokens
    except HearthError as exc:
        raise EmbeddingError(500, str(exc), code="embedding_failed") from exc
    vectors = np.concatenate(parts) if parts else np.zeros((0, dimensions), dtype=np.float32)
    return Embedded(vectors, tokens, load_s, time.perf_counter() - started)


def _check_lengths(request: EmbeddingRequest, counts: Sequence[int], n_ctx: int) -> None:
    for index, count in enumerate(counts):
        if count > n_ctx:
            where = "input" if len(request.texts) == 1 else f"input[{index}]"
            raise EmbeddingError(
                400,
                f"'{where}' is {count} tokens; this model reads at most {n_ctx}. Shorten or split it.",
                param="input",
                code="context_length_exceeded",
            )


def openai_response(request: EmbeddingRequest, done: Embedded) -> dict[str, Any]:
    def encoded(row: npt.NDArray[np.float32]) -> str | list[float]:
        if request.base64:
            # OpenAI's base64: the float32 bytes, little-endian whatever this machine's order.
            return base64.b64encode(row.astype("<f4").tobytes()).decode("ascii")
        vector: list[float] = row.tolist()
        return vector

    data = [
        {"object": "embedding", "index": index, "embedding": encoded(row)}
        for index, row in enumerate(done.vectors)
    ]
    return {
        "object": "list",
        "data": data,
        "model": request.model,
        "usage": {"prompt_tokens": done.tokens, "total_tokens": done.tokens},
    }


def ollama_response(request: EmbeddingRequest, done: Embedded) -> dict[str, Any]:
    return {
        "model": request.model,
        "embeddings": done.vectors.tolist(),
        # Ollama counts time in nanoseconds.
        "total_duration": round(done.total_s * 1e9),
        "load_duration": round(done.load_s * 1e9),
        "prompt_eval_count": done.tokens,
    }
