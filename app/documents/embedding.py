"""The embedder documents use: an embedding model in its own runner process (inference.embedding), with the
prefixes its family was trained with. The local API (app.local_api.embeddings) embeds through the same one,
texts as its clients give them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from app.errors import HearthError
from app.library.installed import sha256_file
from inference.client import RunnerError
from inference.embedding import EmbeddingResult, EmbeddingRunner

# (query prefix, passage prefix) by a word in the model's file name. Retrieval models are trained with these;
# without them e5 ranks noticeably worse (its model card: "otherwise you will see a performance degradation").
_PREFIXES = (
    ("e5", ("query: ", "passage: ")),
    ("nomic", ("search_query: ", "search_document: ")),
    ("bge", ("Represent this sentence for searching relevant passages: ", "")),
)


def prefixes_for(model_path: Path) -> tuple[str, str]:
    name = model_path.name.lower()
    for word, prefixes in _PREFIXES:
        if word in name:
            return prefixes
    return ("", "")


class RunnerEmbedder:
    """Thread-safe (the runner serves one call at a time). Starts the runner on first use."""

    def __init__(self, model_path: Path, *, log_path: Path | None = None) -> None:
        self._path = model_path
        self._query_prefix, self._passage_prefix = prefixes_for(model_path)
        self._runner = EmbeddingRunner(model_path, log_path=log_path)
        self._model_id: str | None = None

    @property
    def model_path(self) -> Path:
        return self._path

    @property
    def model_id(self) -> str:
        """The model file's SHA-256: vectors from different models are never compared."""
        if self._model_id is None:
            self._model_id = sha256_file(self._path)
        return self._model_id

    def embed_passages(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self._embed([self._passage_prefix + t for t in texts])

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        vectors: npt.NDArray[np.float32] = self._embed([self._query_prefix + text])[0]
        return vectors

    def count_tokens(self, text: str) -> int:
        try:
            return self._runner.count_tokens(self._passage_prefix + text)
        except RunnerError as exc:
            raise HearthError(exc.message) from exc

    def shape(self) -> tuple[int, int]:
        """(dimensions, the most tokens a text is given), starting the runner if needed."""
        try:
            info = self._runner.info
        except RunnerError as exc:
            raise HearthError(exc.message) from exc
        return info.dim, info.n_ctx

    def embed_as_given(self, texts: Sequence[str]) -> EmbeddingResult:
        """No prefix added: for clients that know what their model expects. Texts over the context are
        cut to it."""
        try:
            return self._runner.embed_detailed(texts)
        except RunnerError as exc:
            raise HearthError(exc.message) from exc

    def count_tokens_as_given(self, texts: Sequence[str]) -> tuple[int, ...]:
        try:
            return self._runner.count_tokens_each(texts)
        except RunnerError as exc:
            raise HearthError(exc.message) from exc

    def _embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        try:
            return np.asarray(self._runner.embed(texts), dtype=np.float32)
        except RunnerError as exc:
            raise HearthError(exc.message) from exc

    def close(self) -> None:
        self._runner.close()
