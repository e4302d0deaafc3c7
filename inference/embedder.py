"""The embedding runner process: an embedding model in llama.cpp, in a process of its own.

Started by inference.embedding through the chat runner's machinery (RunnerClient with `embedder_main` as
its entry), so a model file that crashes llama.cpp takes down only this process, never the app or the chat
model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inference.ggml_backends import CpuKernels
from inference.gguf import GGUFError, read_header
from inference.llama_memory import LlamaLog
from inference.protocol import (
    CountEmbeddingTokensRequest,
    EmbeddingLoaded,
    EmbeddingLoadRequest,
    Embeddings,
    EmbeddingTokenCounts,
    EmbedRequest,
    ErrorKind,
    Failed,
)
from inference.runner import (
    _classify_load_error,
    _disable_llama_cpp_template_compilation,
    prepare_runner_process,
    serve,
)

if TYPE_CHECKING:
    from llama_cpp import Llama

# An encoder attends over the whole of one llama.cpp call at once (texts packed together are masked apart,
# but still computed), so that call's size is also the longest text. Embedding models are trained on 512
# tokens (e5, bge) up to 8,192 (bge-m3, nomic); past a few thousand, the attention of a full call outweighs
# the rest of the model, and retrieval chunks are far shorter anyway.
MAX_CONTEXT = 2048
# A model whose file names no context length (llama.cpp would then refuse it anyway).
FALLBACK_CONTEXT = 512

_POOLING_NAMES = {1: "mean", 2: "cls", 3: "last"}  # llama.cpp's LLAMA_POOLING_TYPE_*


@dataclass
class _Model:
    llm: Llama
    dim: int
    n_ctx: int
    n_seq_max: int
    eos_id: int  # added at the end of every text, and kept when a text is cut; -1 when none is added


class Embedder:
    def __init__(self, send: Callable[[object], None], kernels: CpuKernels | None) -> None:
        self._send = send
        self._kernels = kernels
        self._model: _Model | None = None
        self._batch: Any = None

    def load(self, request: EmbeddingLoadRequest) -> None:
        self._close()
        path = request.model_path
        if not Path(path).is_file():
            self._send(Failed("load", ErrorKind.MODEL_MISSING, f"Embedding model file not found: {path}"))
            return
        try:
            header = read_header(path)
        except GGUFError as exc:
            self._send(Failed("load", ErrorKind.MODEL_INVALID, f"Not a valid GGUF model: {exc}"))
            return
        n_ctx = min(header.context_length or FALLBACK_CONTEXT, MAX_CONTEXT)
        started = time.perf_counter()
        buffers = LlamaLog()
        try:
            import llama_cpp

            _disable_llama_cpp_template_compilation()
            with buffers:
                llm = llama_cpp.Llama(
                    model_path=path,
                    embedding=True,
                    n_ctx=n_ctx,
                    n_batch=n_ctx,
                    n_ubatch=n_ctx,
                    n_threads=request.n_threads,
                    n_threads_batch=request.n_threads,
                    n_gpu_layers=0,
                    # As for chat (inference.runner): fd 2 is the runner log, where a native abort's reason
                    # belongs.
                    verbose=True,
                )
        except Exception as exc:
            message = str(exc) or type(exc).__name__
            kind = _classify_load_error(f"{message}\n{buffers.text}")
            self._send(Failed("load", kind, f"llama.cpp could not load the embedding model: {message}"))
            return
        pooling = _POOLING_NAMES.get(int(llama_cpp.llama_pooling_type(llm.ctx)))
        if pooling is None:
            llm.close()
            name = header.model_name or Path(path).name
            self._send(
                Failed(
                    "load",
                    ErrorKind.MODEL_INVALID,
                    f"{name} is not a text-embedding model: its file names no way to pool a text into one "
                    "vector (mean, CLS or last token).",
                )
            )
            return
        vocab = llama_cpp.llama_model_get_vocab(llm._model.model)
        eos = llm.token_eos() if llama_cpp.llama_vocab_get_add_eos(vocab) else -1
        n_seq_max = int(llama_cpp.llama_n_seq_max(llm.ctx))
        # A text must fit one micro-batch: an encoder sees a whole text in one pass.
        n_tokens = int(min(llama_cpp.llama_n_batch(llm.ctx), llama_cpp.llama_n_ubatch(llm.ctx)))
        self._model = _Model(llm, llm.n_embd(), n_tokens, n_seq_max, eos)
        self._batch = llama_cpp.llama_batch_init(self._model.n_ctx, 0, n_seq_max)
        self._send(
            EmbeddingLoaded(
                model_path=path,
                dim=self._model.dim,
                n_ctx=self._model.n_ctx,
                pooling=pooling,
                load_seconds=time.perf_counter() - started,
                cpu_kernels=self._kernels.variant if self._kernels else "",
            )
        )

    def _close(self) -> None:
        if self._batch is not None:
            import llama_cpp

            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._model is not None:
            self._model.llm.close()
            self._model = None

    def _tokens(self, model: _Model, text: str) -> list[int]:
        # special=False: a text that spells "<s>" or "</s>" gets those characters, not the control tokens.
        return model.llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)

    def embed(self, request: EmbedRequest) -> None:
        model = self._model
        if model is None:
            self._send(Failed(request.request_id, ErrorKind.NOT_LOADED, "No embedding model is loaded."))
            return
        sequences: list[list[int]] = []
        truncated = 0
        for text in request.texts:
            tokens = self._tokens(model, text)
            if len(tokens) > model.n_ctx:
                truncated += 1
                # The end-of-text token the model was trained with stays; the text before it is cut.
                keep_eos = model.eos_id >= 0 and tokens[-1] == model.eos_id
                tokens = [*tokens[: model.n_ctx - 1], tokens[-1]] if keep_eos else tokens[: model.n_ctx]
            sequences.append(tokens)
        vectors = np.empty((len(sequences), model.dim), dtype=np.float32)
        for first, group in _groups(sequences, model.n_ctx, model.n_seq_max):
            self._decode(model, group, vectors[first : first + len(group)])
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        vectors /= np.maximum(norms, np.float32(1e-12))
        n_tokens = sum(len(s) for s in sequences)
        self._send(Embeddings(request.request_id, vectors.tobytes(), n_tokens, truncated))

    def _decode(self, model: _Model, group: Sequence[list[int]], out: np.ndarray) -> None:
        """One llama.cpp call for several texts, each its own sequence; llama.cpp pools each one."""
        import llama_cpp

        batch = self._batch
        position = 0
        for seq, tokens in enumerate(group):
            for i, token in enumerate(tokens):
                batch.token[position] = token
                batch.pos[position] = i
                batch.n_seq_id[position] = 1
                batch.seq_id[position][0] = seq
                # Every token an output: llama.cpp pools over outputs, and warns (once per call) otherwise.
                batch.logits[position] = True
                position += 1
        batch.n_tokens = position
        ctx = model.llm.ctx
        memory = llama_cpp.llama_get_memory(ctx)
        if memory:
            # A decoder-based embedding model keeps a KV cache: each call starts from an empty one.
            llama_cpp.llama_memory_clear(memory, True)
            status = llama_cpp.llama_decode(ctx, batch)
        else:
            # An encoder has none; llama_decode would say so in the log on every call, then encode.
            status = llama_cpp.llama_encode(ctx, batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status} while embedding")
        for seq in range(len(group)):
            pointer = llama_cpp.llama_get_embeddings_seq(ctx, seq)
            out[seq] = np.ctypeslib.as_array(pointer, shape=(model.dim,))

    def count_tokens(self, request: CountEmbeddingTokensRequest) -> None:
        model = self._model
        if model is None:
            self._send(Failed(request.request_id, ErrorKind.NOT_LOADED, "No embedding model is loaded."))
            return
        counts = tuple(len(self._tokens(model, text)) for text in request.texts)
        self._send(EmbeddingTokenCounts(request.request_id, counts))


def _groups(
    sequences: Sequence[list[int]], max_tokens: int, max_sequences: int
) -> list[tuple[int, Sequence[list[int]]]]:
    """Consecutive runs of texts that fit one llama.cpp call, each with the index of its first text."""
    groups: list[tuple[int, Sequence[list[int]]]] = []
    start, tokens = 0, 0
    for index, sequence in enumerate(sequences):
        if index > start and (tokens + len(sequence) > max_tokens or index - start >= max_sequences):
            groups.append((start, sequences[start:index]))
            start, tokens = index, 0
        tokens += len(sequence)
    if start < len(sequences):
        groups.append((start, sequences[start:]))
    return groups


def embedder_main(
    conn: Connection,
    log_path: str | None,
    cpu_variant: str | None = None,
    cpu_reason: str = "",
) -> None:
    """The embedding runner's main function, with runner_main's arguments."""
    kernels = prepare_runner_process(log_path, cpu_variant, cpu_reason)
    embedder = Embedder(conn.send, kernels)
    serve(
        conn,
        {
            EmbeddingLoadRequest: embedder.load,
            EmbedRequest: embedder.embed,
            CountEmbeddingTokensRequest: embedder.count_tokens,
        },
    )
