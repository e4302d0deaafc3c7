"""Draft-model speculative decoding: a small model with the same vocabulary as the loaded one guesses the
next tokens, one at a time, and the runner checks the guess with the large model in one batch (the same
check as prompt lookup's, inference.decoding._Drafts): each guessed token is kept only if sampling its
position gives it, so the reply is the one plain decoding gives.

The draft keeps its own KV cache of the conversation. Before each guess it is brought level with what the
reply holds: the positions past the longest start the two share are dropped (the guessed tokens that were
not kept, a new prompt's different tail), and what it has not seen is read. A turn that continues the
conversation then costs the draft only the new tokens, as it costs the large model.

Why not llama-cpp-python's own draft models (LlamaDraftModel): they belong to the high-level generate loop
this runner does not use, and its only implementation is prompt lookup.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from llama_cpp import Llama

# llama.cpp's common_speculative_are_compatible: vocabularies may differ in size by this many tokens (a few
# added special tokens), and must agree on every token's text from this id on (the first few ids are
# control tokens that models of one family number alike but sometimes spell differently).
VOCAB_SIZE_TOLERANCE: Final = 128
VOCAB_CHECK_FROM: Final = 5
# A guess stops at the first token the draft gives less than this probability (llama.cpp's speculative
# p_min): past that the large model rarely agrees, and every token guessed costs a draft step and a place
# in the batch.
MIN_PROBABILITY: Final = 0.75


class DraftModelError(Exception):
    """The draft model cannot guess for this model; the message says why, as a sentence."""


@dataclass(frozen=True)
class DraftVocab:
    """What must agree between a model and its draft for a guessed token id to mean the same token."""

    kind: int  # llama_vocab_type: SPM, BPE, WPM, ...
    n_tokens: int
    add_bos: bool
    add_eos: bool
    bos: int
    eos: int
    texts: tuple[bytes, ...]


def vocabulary(llm: Llama) -> DraftVocab:
    import llama_cpp

    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_tokens = int(llama_cpp.llama_vocab_n_tokens(vocab))
    return DraftVocab(
        kind=int(llama_cpp.llama_vocab_type(vocab)),
        n_tokens=n_tokens,
        add_bos=bool(llama_cpp.llama_vocab_get_add_bos(vocab)),
        add_eos=bool(llama_cpp.llama_vocab_get_add_eos(vocab)),
        bos=int(llama_cpp.llama_vocab_bos(vocab)),
        eos=int(llama_cpp.llama_vocab_eos(vocab)),
        texts=tuple(llama_cpp.llama_vocab_get_text(vocab, i) or b"" for i in range(n_tokens)),
    )


def incompatibility(model: DraftVocab, draft: DraftVocab) -> str | None:
    """Why the draft's token ids do not name the model's tokens (a sentence's end, lower case), or None."""
    if model.kind != draft.kind:
        return "its tokenizer is of another kind"
    if (model.add_bos, model.add_eos, model.bos, model.eos) != (
        draft.add_bos,
        draft.add_eos,
        draft.bos,
        draft.eos,
    ):
        return "its start and end tokens differ"
    if abs(model.n_tokens - draft.n_tokens) > VOCAB_SIZE_TOLERANCE:
        return f"its vocabulary has {draft.n_tokens:,} tokens, the model's {model.n_tokens:,}"
    for token in range(VOCAB_CHECK_FROM, min(model.n_tokens, draft.n_tokens)):
        if model.texts[token] != draft.texts[token]:
            shown = draft.texts[token].decode("utf-8", errors="replace")
            return f"its token {token} is {shown!r}, not the model's"
    return None


class DraftModel:
    """A loaded draft model and its cache of one sequence. Used from the decode thread only."""

    def __init__(self, llm: Llama, *, n_batch: int, model_vocab_size: int) -> None:
        import llama_cpp

        self.llm = llm
        self._ctx = llm.ctx
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._n_ctx = llm.n_ctx()
        self._n_batch = max(1, min(n_batch, int(llama_cpp.llama_n_batch(self._ctx))))
        self._n_vocab = llm.n_vocab()
        # A draft whose vocabulary has a few more tokens must not guess one the model does not have.
        self._usable = min(self._n_vocab, model_vocab_size)
        self._batch = llama_cpp.llama_batch_init(self._n_batch, 0, 1)
        self._cached: list[int] = []
        self._history: list[int] | None = None  # the list the last guess was for (a reply's, grown by it)
        self._matched = 0  # how much of it the cache held then

    def close(self) -> None:
        import llama_cpp

        llama_cpp.llama_batch_free(self._batch)
        self.llm.close()

    def guess(self, history: list[int], limit: int) -> tuple[list[int], float]:
        """Up to `limit` tokens the draft expects after `history` (the prompt and the reply so far), each
        the draft's most likely next token, ending at the first it is unsure of; and the seconds it took."""
        started = time.perf_counter()
        if limit <= 0 or not history:
            return [], 0.0
        guessed: list[int] = []
        if self._level_with(history):
            for _ in range(min(limit, self._n_ctx - len(self._cached))):
                token, probability = self._most_likely()
                if probability < MIN_PROBABILITY or token >= self._usable:
                    break
                guessed.append(token)
                if len(guessed) == limit or not self._read([token], logits_last=True):
                    break
        return guessed, time.perf_counter() - started

    def _level_with(self, history: list[int]) -> bool:
        """The cache made to hold `history`, its last token's logits computed; False when the draft's context
        has no room for it."""
        import llama_cpp

        # Within a reply the history only grows: what matched at the last guess still does, and only the
        # tokens since are compared (a long conversation is not walked again at every step).
        keep = self._matched if history is self._history else 0
        for held, wanted in zip(self._cached[keep:], history[keep:], strict=False):
            if held != wanted:
                break
            keep += 1
        # The last token is always read again: its logits are where the guess starts.
        keep = min(keep, len(history) - 1)
        if keep < len(self._cached):
            llama_cpp.llama_memory_seq_rm(self._memory, 0, keep, -1)
            del self._cached[keep:]
        self._history, self._matched = history, keep
        if len(history) > self._n_ctx:
            return False
        return self._read(history[keep:], logits_last=True)

    def _read(self, tokens: list[int], *, logits_last: bool) -> bool:
        import llama_cpp

        batch = self._batch
        for start in range(0, len(tokens), self._n_batch):
            chunk = tokens[start : start + self._n_batch]
            last_chunk = start + self._n_batch >= len(tokens)
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = len(self._cached) + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = logits_last and last_chunk and i == len(chunk) - 1
            if llama_cpp.llama_decode(self._ctx, batch) != 0:
                # No room (or a failed step): start from nothing at the next guess.
                llama_cpp.llama_memory_seq_rm(self._memory, 0, 0, -1)
                self._cached.clear()
                self._matched = 0
                return False
            self._cached.extend(chunk)
        return True

    def _most_likely(self) -> tuple[int, float]:
        """The token with the highest logit at the last position read, and its probability."""
        import llama_cpp
        import numpy as np

        pointer = llama_cpp.llama_get_logits_ith(self._ctx, -1)
        logits = np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), (self._n_vocab,))
        token = int(np.argmax(logits))
        probability = float(1.0 / np.exp(logits - logits[token]).sum())
        return token, probability


def load_draft(
    path: str,
    model: Llama,
    *,
    n_ctx: int,
    n_batch: int,
    n_threads: int,
    n_gpu_layers: int,
    flash_attn: bool,
) -> DraftModel:
    """The draft model at `path`, beside `model`, checked to share its vocabulary. Raises DraftModelError."""
    import llama_cpp

    try:
        llm = llama_cpp.Llama(
            model_path=path,
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_ubatch=n_batch,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            n_gpu_layers=n_gpu_layers,
            flash_attn=flash_attn,
            logits_all=False,
            verbose=True,
        )
    except Exception as exc:
        raise DraftModelError(f"llama.cpp could not load it ({str(exc) or type(exc).__name__})") from exc
    try:
        if llama_cpp.llama_model_is_recurrent(llm.model) or llama_cpp.llama_model_is_hybrid(llm.model):
            raise DraftModelError(
                "its state cannot be taken back when a guess is not kept (a recurrent model)"
            )
        problem = incompatibility(vocabulary(model), vocabulary(llm))
        if problem is not None:
            raise DraftModelError(f"it does not share the model's vocabulary: {problem}")
        return DraftModel(llm, n_batch=n_batch, model_vocab_size=model.n_vocab())
    except BaseException:
        llm.close()
        raise
