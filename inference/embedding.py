"""Text embeddings from a GGUF embedding model, computed in a runner process of its own.

    with EmbeddingRunner(path, threads=2) as runner:
        vectors = runner.embed(["query: how tall is Everest", "passage: Everest is 8,849 m high."])

Texts go in as the model wants them: multilingual-e5 needs "query: " before a question and "passage: "
before a document text; other models have their own prefixes (nomic's "search_query: "), none, or an
instruction. Each row that comes back has length 1, so a dot product is the cosine similarity.

The process is the chat runner's (inference.client.RunnerClient, with inference.embedder's entry): a
model that crashes llama.cpp kills only it. The call that finds it dead raises RUNNER_CRASHED; the next
call starts a new one and loads the model again.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Self

import numpy as np
import psutil

from inference.client import LOAD_TIMEOUT_S, RunnerClient, RunnerError
from inference.embedder import embedder_main
from inference.ggml_backends import CpuKernelMemory
from inference.protocol import (
    CountEmbeddingTokensRequest,
    EmbeddingLoaded,
    EmbeddingLoadRequest,
    Embeddings,
    EmbeddingTokenCounts,
    EmbedRequest,
    Failed,
)

# Texts per request to the runner: bounds the pipe messages and the runner's memory for a long list, while
# costing one round trip per few seconds of embedding.
TEXTS_PER_REQUEST = 256


@dataclass(frozen=True)
class EmbeddingResult:
    vectors: np.ndarray  # float32, (len(texts), dim), rows of length 1
    n_tokens: int  # tokens embedded, after cutting
    truncated: int  # texts cut to the model's context


class EmbeddingRunner:
    """Thread-safe: calls from several threads are served one at a time."""

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        *,
        threads: int | None = None,
        log_path: Path | None = None,
        kernel_memory: CpuKernelMemory | None = None,
    ) -> None:
        self._model_path = str(model_path)
        self._threads = threads or psutil.cpu_count(logical=False) or os.cpu_count() or 1
        self._client = RunnerClient(log_path, kernel_memory=kernel_memory, entry=embedder_main)
        self._lock = threading.Lock()
        self._loaded: EmbeddingLoaded | None = None
        self._truncated_total = 0

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def start(self) -> EmbeddingLoaded:
        """Start the runner and load the model, if not done yet. Raises RunnerError: MODEL_MISSING,
        MODEL_INVALID (not a GGUF, or not an embedding model), OUT_OF_MEMORY, RUNNER_CRASHED."""
        with self._lock:
            return self._ensure_loaded()

    def _ensure_loaded(self) -> EmbeddingLoaded:
        if self._loaded is not None:
            return self._loaded
        request = EmbeddingLoadRequest(self._model_path, self._threads)
        reply = self._exchange(request, LOAD_TIMEOUT_S)
        if isinstance(reply, Failed):
            raise RunnerError(reply.kind, reply.message)
        assert isinstance(reply, EmbeddingLoaded)
        self._loaded = reply
        return reply

    def _exchange(self, request: object, timeout: float | None = None) -> object:
        try:
            return self._client.exchange(request, timeout)
        except RunnerError as exc:
            # Whatever runner comes next has no model yet.
            self._loaded = None
            raise RunnerError(exc.kind, f"Embedding model: {exc.message}") from exc

    @property
    def info(self) -> EmbeddingLoaded:
        """What the runner reported at load (starting it if needed)."""
        return self.start()

    @property
    def dim(self) -> int:
        return self.start().dim

    @property
    def n_ctx(self) -> int:
        """The most tokens a text is given; longer texts are cut to it."""
        return self.start().n_ctx

    @property
    def pid(self) -> int | None:
        return self._client.pid

    @property
    def truncated_total(self) -> int:
        """How many texts have been cut to the context since this runner object was made."""
        return self._truncated_total

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 (len(texts), dim), each row L2-normalised. Raises RunnerError."""
        return self.embed_detailed(texts).vectors

    def embed_detailed(self, texts: Sequence[str]) -> EmbeddingResult:
        texts = list(texts)
        with self._lock:
            loaded = self._ensure_loaded()
            parts: list[np.ndarray] = []
            n_tokens = truncated = 0
            for start in range(0, len(texts), TEXTS_PER_REQUEST):
                request = EmbedRequest(uuid.uuid4().hex, tuple(texts[start : start + TEXTS_PER_REQUEST]))
                reply = self._exchange(request)
                if isinstance(reply, Failed):
                    raise RunnerError(reply.kind, reply.message)
                assert isinstance(reply, Embeddings) and reply.request_id == request.request_id
                parts.append(np.frombuffer(reply.vectors, dtype=np.float32).reshape(-1, loaded.dim))
                n_tokens += reply.n_tokens
                truncated += reply.truncated
            self._truncated_total += truncated
        vectors = np.concatenate(parts) if parts else np.zeros((0, loaded.dim), dtype=np.float32)
        return EmbeddingResult(vectors, n_tokens, truncated)

    def count_tokens(self, text: str) -> int:
        """The tokens `text` is as the model reads it (its start and end tokens included), before any cut
        to n_ctx."""
        return self.count_tokens_each([text])[0]

    def count_tokens_each(self, texts: Sequence[str]) -> tuple[int, ...]:
        """count_tokens for each text, in one round trip per TEXTS_PER_REQUEST texts."""
        texts = list(texts)
        counts: list[int] = []
        with self._lock:
            self._ensure_loaded()
            for start in range(0, len(texts), TEXTS_PER_REQUEST):
                request = CountEmbeddingTokensRequest(
                    uuid.uuid4().hex, tuple(texts[start : start + TEXTS_PER_REQUEST])
                )
                reply = self._exchange(request)
                if isinstance(reply, Failed):
                    raise RunnerError(reply.kind, reply.message)
                assert isinstance(reply, EmbeddingTokenCounts) and reply.request_id == request.request_id
                counts.extend(reply.counts)
        return tuple(counts)

    def close(self) -> None:
        with self._lock:
            self._client.close()
            self._loaded = None
