"""The runner process: the only place llama.cpp runs.

llama.cpp aborts the whole process on CUDA out-of-memory, GGML_ASSERT and some crafted files, so it lives
in a child process. The parent sees a dead pipe and turns it into an error message and a restart.
"""

from __future__ import annotations

import codecs
import dataclasses
import faulthandler
import logging
import os
import statistics
import sys
import time
import uuid
import weakref
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from inference.chat_template import RenderedPrompt, control_text_pattern, render_chat
from inference.estimator import KV_CACHE_TYPES
from inference.ggml_backends import CpuKernels, load_backends
from inference.gguf import GGUFError, GGUFHeader, read_header
from inference.grammar import GrammarError, schema_grammar
from inference.llama_memory import LlamaLog, gpu_used_bytes
from inference.projector import projector_problem
from inference.prompt_lookup import PromptLookup
from inference.protocol import (
    ChatMessage,
    CheckingTemplate,
    CountTokensRequest,
    ErrorKind,
    Failed,
    Finished,
    GenerateRequest,
    GenerationStats,
    Loaded,
    LoadPlan,
    LoadRequest,
    PromptReady,
    SamplingParams,
    StopReason,
    TokenCount,
    TokenDelta,
    ToolSpec,
)
from inference.tensor_overrides import experts_in_system_memory, overridden_tensors
from inference.vision import ImageSlot, Vision, VisionError

if TYPE_CHECKING:
    from llama_cpp import Llama

log = logging.getLogger("hearth.runner")

# Deltas are sent up the pipe at most this often: one message per token would cost more in pickling and
# Qt signal dispatch than the decode itself on a fast GPU. 33 ms (30 updates a second) is below what a reader
# notices, and each wake-up of the GUI process takes CPU time from the decode threads on a small machine.
FLUSH_INTERVAL_S = 0.033

# How much of the end of the rendered prompt PromptReady carries (trailing whitespace left out): enough for
# any pre-filled reasoning marker.
PROMPT_END_CHARS = 64

SHUTDOWN = "shutdown"
# See _cap_address_space: how the tests run out of memory for real on a machine without a GPU.
ADDRESS_SPACE_ENV = "HEARTH_RUNNER_ADDRESS_SPACE_MIB"
# How many recent tokens the repetition penalty looks at (llama-cpp-python's default, kept for parity).
PENALTY_LAST_N = 64
# Where an image goes in a prompt's tokens (no token has a negative id), and what the KV cache holds after
# a prompt with images: a prefix no later prompt can share, so it is decoded from the start.
IMAGE_SLOT = -1
# Prompt lookup (_Drafts): the share of guessed tokens taken to be kept before any is checked, how fast the
# measured share follows each check, how fast it drifts back while nothing is guessed, and how fast the
# decode times follow each measurement.
KEPT_PRIOR = 0.6
KEPT_SMOOTHING = 0.3
KEPT_RECOVERY = 0.05
# How many decodes of one token, and of a token with a guess, _GuessCosts times before fixing each cost.
TIMED_DECODES = 5


class StopWindow:
    """Holds back just enough text to recognise a stop string that arrives split across tokens.

    Cost per token is bounded by the longest stop string, never by the reply length.
    """

    def __init__(self, stops: tuple[str, ...]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._pending = ""
        self.hit: str | None = None  # the stop string met, once push says one was

    def push(self, text: str) -> tuple[str, bool]:
        """Returns the text that is safe to emit and whether a stop string was hit."""
        if not self._stops:
            return text, False
        self._pending += text
        hits = [(i, s) for s in self._stops if (i := self._pending.find(s)) >= 0]
        if hits:
            cut, self.hit = min(hits, key=lambda hit: hit[0])
            emitted, self._pending = self._pending[:cut], ""
            return emitted, True
        if len(self._pending) <= self._hold:
            return "", False
        split = len(self._pending) - self._hold
        emitted, self._pending = self._pending[:split], self._pending[split:]
        return emitted, False

    def flush(self) -> str:
        rest, self._pending = self._pending, ""
        return rest


@dataclass
class _Model:
    llm: Llama
    plan: LoadPlan
    template: str | None
    bos_text: str
    eos_text: str
    add_bos: bool
    vocab: Any
    # The tokens whose keys and values the context's KV cache holds (sequence 0), in order.
    cached: list[int] = field(default_factory=list)
    vision: Vision | None = None  # with a multimodal projector
    # The cache can drop its newest positions: not a recurrent or hybrid model, whose state only goes forward
    # (rejected draft tokens could not be taken back out of it).
    rewindable: bool = True
    # The most tokens prompt lookup guesses per step (LoadPlan.draft_tokens); 0: plain decoding.
    draft_tokens: int = 0
    guess_costs: _GuessCosts = field(default_factory=lambda: _GuessCosts())

    def close(self) -> None:
        if self.vision is not None:
            self.vision.close()
        self.llm.close()


@dataclass
class _GuessCosts:
    """What a decode costs with this model here, for _Drafts: the median of its first TIMED_DECODES timings,
    then fixed for as long as the model stays loaded. Guess lengths decide which positions share a batch,
    and past some depth a batch rounds differently from single tokens: costs that kept changing would make
    the same seed give another reply."""

    one_token: list[float] = field(default_factory=list)
    per_guessed_token: list[float] = field(default_factory=list)

    @property
    def one_token_s(self) -> float | None:
        return _fixed(self.one_token)

    @property
    def per_guessed_token_s(self) -> float | None:
        return _fixed(self.per_guessed_token)

    def timed(self, guessed: int, seconds: float) -> None:
        if not guessed:
            if len(self.one_token) < TIMED_DECODES:
                self.one_token.append(seconds)
            return
        one_token = self.one_token_s
        if one_token is not None and len(self.per_guessed_token) < TIMED_DECODES:
            self.per_guessed_token.append(max(0.0, seconds - one_token) / guessed)


def _fixed(timings: list[float]) -> float | None:
    return statistics.median(timings) if len(timings) >= TIMED_DECODES else None


def _disable_llama_cpp_template_compilation() -> None:
    """Hearth renders chat templates itself, in a bounded sandbox (inference.chat_template).

    `Llama()` would otherwise compile every template found in the file with no size or time limit, and a
    template with a syntax error would make the whole model fail to load.
    """
    from llama_cpp import llama_chat_format

    class _Unused:
        def __init__(self, **_: object) -> None:
            pass

        def to_chat_handler(self) -> None:
            return None

    llama_chat_format.Jinja2ChatFormatter = _Unused  # type: ignore[misc, assignment]


def _classify_load_error(message: str) -> ErrorKind:
    """`message` is the exception text plus llama.cpp's log of the load: llama-cpp-python only says "Failed
    to create llama_context", the log says why ("insufficient memory", "cudaMalloc failed")."""
    lowered = message.lower()
    if any(sign in lowered for sign in _OUT_OF_MEMORY_SIGNS):
        return ErrorKind.OUT_OF_MEMORY
    return ErrorKind.MODEL_INVALID


# The last is ENOMEM's text, as in "mmap failed: Cannot allocate memory" for the weights.
_OUT_OF_MEMORY_SIGNS = (
    "out of memory",
    "failed to allocate",
    "insufficient memory",
    "cudamalloc",
    "cannot allocate memory",
)


class CancelFlag(Protocol):
    """A shared boolean: `multiprocessing.sharedctypes.RawValue(ctypes.c_bool)` across processes.

    A lock-free byte in shared memory, read between tokens: `multiprocessing.Event.is_set()` would take a
    cross-process lock (two system calls) on every token.
    """

    value: bool


class Runner:
    def __init__(
        self, send: Callable[[object], None], cancel: CancelFlag, kernels: CpuKernels | None = None
    ) -> None:
        self._send = send
        self._cancel = cancel
        self._kernels = kernels
        self._model: _Model | None = None

    def load(self, request: LoadRequest) -> None:
        plan = request.plan
        if self._model is not None:
            self._model.close()
            self._model = None
        if not Path(plan.model_path).is_file():
            self._send(Failed("load", ErrorKind.MODEL_MISSING, f"Model file not found: {plan.model_path}"))
            return
        try:
            header = read_header(plan.model_path)
        except GGUFError as exc:
            self._send(Failed("load", ErrorKind.MODEL_INVALID, f"Not a valid GGUF model: {exc}"))
            return
        started = time.perf_counter()
        gpu_before = gpu_used_bytes() if plan.n_gpu_layers > 0 else None
        kv_type = KV_CACHE_TYPES[plan.kv_type].ggml_type
        buffers = LlamaLog()
        try:
            import llama_cpp

            kernels = self._kernels or load_backends()
            _disable_llama_cpp_template_compilation()
            _cap_address_space()
            with buffers, experts_in_system_memory() if plan.experts_on_cpu else nullcontext():
                llm = llama_cpp.Llama(
                    model_path=plan.model_path,
                    n_ctx=plan.n_ctx,
                    n_batch=plan.n_batch,
                    n_ubatch=plan.n_batch,
                    n_threads=plan.n_threads,
                    n_threads_batch=plan.n_threads,
                    n_gpu_layers=plan.n_gpu_layers,
                    flash_attn=plan.flash_attn,
                    type_k=kv_type,
                    type_v=kv_type,
                    swa_full=plan.swa_full,
                    split_mode=llama_cpp.LLAMA_SPLIT_MODE_LAYER
                    if plan.main_gpu is None
                    else llama_cpp.LLAMA_SPLIT_MODE_NONE,
                    main_gpu=plan.main_gpu or 0,
                    tensor_split=list(plan.tensor_split) if plan.tensor_split else None,
                    use_mlock=plan.use_mlock,
                    logits_all=False,
                    # verbose=False would point fd 2 at /dev/null for the whole load, losing the message of a
                    # native abort; fd 2 is the runner log, where that message belongs.
                    verbose=True,
                )
        except Exception as exc:
            message = str(exc) or type(exc).__name__
            # llama-cpp-python's own buffers (numpy arrays sized by the context) fail as a MemoryError.
            kind = (
                ErrorKind.OUT_OF_MEMORY
                if isinstance(exc, MemoryError)
                else _classify_load_error(f"{message}\n{buffers.text}")
            )
            if kind is ErrorKind.OUT_OF_MEMORY:
                message = f"not enough memory to load it with a {plan.n_ctx:,}-token context ({message})"
            self._send(Failed("load", kind, f"llama.cpp could not load the model: {message}"))
            return
        try:
            vision = _load_vision(plan, header, llm)
        except VisionError as exc:
            llm.close()
            self._send(Failed("load", ErrorKind.MODEL_INVALID, str(exc)))
            return
        model = llm._model
        vocab = llama_cpp.llama_model_get_vocab(model.model)
        bos_id, eos_id = model.token_bos(), model.token_eos()
        self._model = _Model(
            llm=llm,
            plan=plan,
            template=header.chat_template,
            bos_text=model.token_get_text(bos_id) if bos_id >= 0 else "",
            eos_text=model.token_get_text(eos_id) if eos_id >= 0 else "",
            add_bos=model.add_bos_token(),
            vocab=vocab,
            vision=vision,
            rewindable=not llama_cpp.llama_model_is_recurrent(model.model)
            and not llama_cpp.llama_model_is_hybrid(model.model),
        )
        if self._model.rewindable:
            self._model.draft_tokens = plan.draft_tokens
        # Template code from the model file runs from here on: the client's prompt watchdog takes over.
        self._send(CheckingTemplate())
        probe = render_chat(self._model.template, ())
        memory = buffers.buffer_sizes() or {"weights": int(llama_cpp.llama_model_size(model.model))}
        gpu_after = gpu_used_bytes() if gpu_before is not None else None
        if gpu_before is not None and gpu_after is not None:
            memory["gpu_used"] = gpu_after - gpu_before
        self._send(
            Loaded(
                model_path=plan.model_path,
                n_ctx=llm.n_ctx(),
                n_ctx_train=model.n_ctx_train(),
                n_gpu_layers=plan.n_gpu_layers,
                n_layers=plan.n_layers,
                backend="CUDA" if plan.n_gpu_layers > 0 and llama_cpp.llama_supports_gpu_offload() else "CPU",
                template_source=probe.source,
                template_note=probe.note,
                load_seconds=time.perf_counter() - started,
                memory_bytes=memory,
                predicted_bytes=dict(plan.predicted_bytes),
                host_expert_tensors=len(overridden_tensors(buffers.text)),
                cpu_kernels=kernels.variant,
                cpu_kernels_reason=kernels.reason,
                draft_tokens=self._model.draft_tokens,
            )
        )

    def generate(self, request: GenerateRequest) -> None:
        model = self._model
        if model is None:
            self._send(Failed(request.request_id, ErrorKind.NOT_LOADED, "No model is loaded."))
            return
        images = tuple(image for message in request.messages for image in message.images)
        if images and model.vision is None:
            why = "this model has no vision projector, so it cannot see the images in this conversation"
            self._send(Failed(request.request_id, ErrorKind.MODEL_INVALID, why.capitalize() + "."))
            return
        # Before the prompt: a schema that cannot be a grammar costs no decoding, and a conversion that ran
        # away would meet the client's prompt watchdog.
        try:
            grammar = _grammar(model, request.json_schema)
        except GrammarError as exc:
            self._send(Failed(request.request_id, ErrorKind.BAD_SCHEMA, str(exc)))
            return
        rendered, tokens = _prompt_tokens(model, request.messages, request.tools)
        try:
            slots = model.vision.tokenized(images) if model.vision is not None and images else []
        except VisionError as exc:
            self._send(Failed(request.request_id, ErrorKind.MODEL_INVALID, f"{exc}."))
            return
        n_prompt = len(tokens) + sum(slot.n_tokens - 1 for slot in slots)
        self._send(PromptReady(request.request_id, n_prompt, rendered.text.rstrip()[-PROMPT_END_CHARS:]))
        n_ctx = model.llm.n_ctx()
        if n_prompt >= n_ctx:
            self._send(
                Failed(
                    request.request_id,
                    ErrorKind.CONTEXT_OVERFLOW,
                    f"The conversation needs {n_prompt} tokens but the context holds {n_ctx}. "
                    "Start a new conversation or raise the context length in settings.",
                )
            )
            return
        stops = request.extra_stop + rendered.stop_strings
        self._stream(model, request, tokens, stops, slots, n_prompt, grammar)

    def count_tokens(self, request: CountTokensRequest) -> None:
        model = self._model
        if model is None:
            self._send(Failed(request.request_id, ErrorKind.NOT_LOADED, "No model is loaded."))
            return
        rendered, tokens = _prompt_tokens(model, request.messages, request.tools)
        images = tuple(image for message in request.messages for image in message.images)
        n_tokens = len(tokens)
        if model.vision is not None and images:
            try:
                n_tokens += sum(slot.n_tokens - 1 for slot in model.vision.tokenized(images))
            except VisionError as exc:
                self._send(Failed(request.request_id, ErrorKind.MODEL_INVALID, f"{exc}."))
                return
        self._send(TokenCount(request.request_id, n_tokens, model.llm.n_ctx(), rendered.source))

    def _stream(
        self,
        model: _Model,
        request: GenerateRequest,
        tokens: list[int],
        stops: tuple[str, ...],
        images: list[ImageSlot],
        n_prompt: int,
        grammar: str | None = None,
    ) -> None:
        """The decode loop, on llama.cpp's low-level API: per token one sample, one decode, one piece.

        `Llama.generate()` would do the same work plus Python bookkeeping per token (batch filling, numpy
        copies, a KV removal call); on a fast model that bookkeeping is a measurable share of each token.
        """
        import llama_cpp

        llm, sampling = model.llm, request.sampling
        seed = sampling.seed if sampling.seed is not None else int.from_bytes(os.urandom(4), "little") >> 1
        vocab = model.vocab
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        window = StopWindow(stops)
        piece_buffer = ctypes_buffer()
        # With tools, control tokens are spelled out: they mark the calls (`<|python_tag|>`, `[TOOL_CALLS]`,
        # DeepSeek's and harmony's markers), which the app's parser looks for in the text.
        spelled = bool(request.tools)
        budget = min(sampling.max_tokens, llm.n_ctx() - n_prompt)
        started = time.perf_counter()
        first_token_at: float | None = None
        pending: list[str] = []
        pending_tokens = 0
        # The first token goes out on its own, at once: time to first token is what the user waits for.
        last_flush = started - FLUSH_INTERVAL_S
        produced = 0
        reason = StopReason.MAX_TOKENS if budget == sampling.max_tokens else StopReason.CONTEXT_FULL
        if images:
            cached = 0
            _decode_with_images(model, tokens, images)
        else:
            cached = _reuse_prefix(model, tokens)
            _decode(model, tokens[cached:])
        ctx = llm.ctx
        sampler = _sampler_chain(
            sampling, seed, llm.n_vocab(), _grammar_sampler(vocab, grammar) if grammar is not None else None
        )
        one = (llama_cpp.llama_token * 1)()
        # Prompt lookup stays on with a grammar. The grammar's state advances only with the tokens sampled
        # (llama_sampler_sample accepts what it returns), and each position is sampled in order, only once
        # the tokens before it are the reply's own: a guess is never shown to the grammar, so it sees
        # exactly the tokens plain decoding gives it.
        drafts = _Drafts(model, tokens) if model.draft_tokens and not images else None
        # Tokens decoded after the newest reply token on a draft's guess; each is kept only if sampling its
        # position gives it, so the reply is the one plain decoding gives.
        guessed: list[int] = []
        logits_at = -1
        try:
            while True:
                token = llama_cpp.llama_sampler_sample(sampler, ctx, logits_at)
                if first_token_at is None:
                    first_token_at = time.perf_counter()
                if not sampling.ignore_eos and llama_cpp.llama_vocab_is_eog(vocab, token):
                    reason = StopReason.END_OF_TURN
                    break
                produced += 1
                n = llama_cpp.llama_token_to_piece(vocab, token, piece_buffer, len(piece_buffer), 0, spelled)
                text, hit_stop = window.push(decoder.decode(piece_buffer.raw[:n]))
                if text:
                    pending.append(text)
                pending_tokens += 1
                if hit_stop:
                    reason = StopReason.STOP_STRING
                    break
                if self._cancel.value:
                    reason = StopReason.CANCELLED
                    break
                if produced >= budget:
                    break
                now = time.perf_counter()
                if now - last_flush >= FLUSH_INTERVAL_S:
                    self._send(TokenDelta(request.request_id, "".join(pending), pending_tokens))
                    pending.clear()
                    pending_tokens = 0
                    last_flush = now
                if drafts is None:
                    one[0] = token
                    if llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(one, 1)) != 0:
                        reason = StopReason.CONTEXT_FULL
                        break
                    model.cached.append(token)
                    continue
                drafts.add(token)
                if guessed and guessed[0] == token:
                    # Already in the cache, and so are the logits of the position after it.
                    model.cached.append(guessed.pop(0))
                    drafts.kept(hit=True)
                    logits_at += 1
                    continue
                if guessed:
                    drafts.kept(hit=False)
                    drafts.forget(len(model.cached))
                guessed = drafts.guess(budget - produced - 1, llm.n_ctx() - len(model.cached) - 1)
                if not drafts.decode(token, guessed, len(model.cached)):
                    reason = StopReason.CONTEXT_FULL
                    break
                model.cached.append(token)
                logits_at = 0 if guessed else -1
        finally:
            llama_cpp.llama_sampler_free(sampler)
            if drafts is not None:
                # A guess not yet checked, or a batch that failed part way, leaves positions past what
                # model.cached says the cache holds.
                drafts.forget(len(model.cached))
                drafts.close()
        if reason is not StopReason.STOP_STRING:
            pending.append(window.flush() + decoder.decode(b"", final=True))
        if pending or pending_tokens:
            self._send(TokenDelta(request.request_id, "".join(pending), pending_tokens))
        finished_at = time.perf_counter()
        ttft = (first_token_at or finished_at) - started
        decode_time = finished_at - (first_token_at or finished_at)
        self._send(
            Finished(
                request.request_id,
                GenerationStats(
                    prompt_tokens=n_prompt,
                    cached_prompt_tokens=cached,
                    completion_tokens=produced,
                    time_to_first_token_s=ttft,
                    # The first token's time is prompt processing; speed counts only the tokens after it.
                    tokens_per_second=(produced - 1) / decode_time
                    if produced > 1 and decode_time > 0
                    else 0.0,
                    stop_reason=reason,
                    seed=seed,
                    drafted_tokens=drafts.drafted if drafts is not None else 0,
                    accepted_draft_tokens=drafts.accepted if drafts is not None else 0,
                    stop_string=window.hit if reason is StopReason.STOP_STRING else None,
                ),
            )
        )


class _Drafts:
    """Prompt-lookup speculative decoding for one reply (inference.prompt_lookup): a guess of the next
    tokens decoded in one batch with the token before them, each kept only if sampling its position gives
    it.

    A guess pays when the batch costs less than the tokens it saves. On a GPU, or a large model whose
    weights stream from memory, a batch of ten costs about what one token costs; a small model on a few CPU
    cores is compute-bound, and a batch costs nearly a token's time per token. So guesses are as long as
    they are worth, by the decode costs measured with this model (_GuessCosts) and the share of guessed
    tokens kept so far in this reply: the length that gives the most expected tokens per second, down to
    none.
    """

    def __init__(self, model: _Model, prompt: list[int]) -> None:
        import llama_cpp

        self._history = list(prompt)
        self._lookup: PromptLookup | None = None
        self.drafted = 0
        self.accepted = 0
        self._ctx = model.llm.ctx
        self._limit = model.draft_tokens
        self._batch = llama_cpp.llama_batch_init(self._limit + 1, 0, 1)
        self._costs = model.guess_costs
        self._kept = KEPT_PRIOR

    def add(self, token: int) -> None:
        if self._lookup is None:
            self._history.append(token)
        else:
            self._lookup.append(token)

    def guess(self, budget: int, room: int) -> list[int]:
        """The next tokens as the conversation so far suggests them, as many as are worth decoding, no more
        than the reply may still produce after the next one (`budget`) or the context still holds
        (`room`)."""
        if self._lookup is None:
            # Indexed once the first reply token is out: a long prompt's index is not in the time to it.
            self._lookup = PromptLookup(self._history)
        found = self._lookup.draft(min(self._limit, budget, room))
        guessed = found[: self._worth(len(found))]
        if found and not guessed:
            # Without guesses the kept share is never measured again: it drifts back to the prior, so that
            # a stretch of copying later in the reply is still found.
            self._kept += (KEPT_PRIOR - self._kept) * KEPT_RECOVERY
        self.drafted += len(guessed)
        return guessed

    def _worth(self, found: int) -> int:
        one_token, per_guessed_token = self._costs.one_token_s, self._costs.per_guessed_token_s
        if one_token is None:
            return 0  # the first steps decode their token alone, to time it
        if per_guessed_token is None:
            return found  # then whole guesses, to time them
        best_length, best_rate = 0, 1 / one_token
        expected, chance = 1.0, 1.0
        for length in range(1, found + 1):
            chance *= self._kept
            expected += chance
            rate = expected / (one_token + length * per_guessed_token)
            if rate > best_rate:
                best_length, best_rate = length, rate
        return best_length

    def kept(self, hit: bool) -> None:
        """One guessed token checked: kept (`hit`), or not."""
        self._kept += ((1.0 if hit else 0.0) - self._kept) * KEPT_SMOOTHING
        if hit:
            self.accepted += 1

    def decode(self, token: int, guessed: list[int], position: int) -> bool:
        """`token` at `position` and the guess after it, with logits for each; False when the context
        has no room for them."""
        started = time.perf_counter()
        decoded = _decode_every(self._ctx, self._batch, [token, *guessed], position)
        self._costs.timed(len(guessed), time.perf_counter() - started)
        return decoded

    def forget(self, position: int) -> None:
        """Drop the rejected guess: every position from `position` on."""
        import llama_cpp

        llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self._ctx), 0, position, -1)

    def close(self) -> None:
        import llama_cpp

        llama_cpp.llama_batch_free(self._batch)


def _decode_every(ctx: Any, batch: Any, tokens: list[int], position: int) -> bool:
    """Decode `tokens` at positions from `position` in `batch` (allocated for at least as many), keeping
    the logits of each; False when llama.cpp refuses them (no room in the context)."""
    import llama_cpp

    batch.n_tokens = len(tokens)
    for i, token in enumerate(tokens):
        batch.token[i] = token
        batch.pos[i] = position + i
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = 0
        batch.logits[i] = True
    return bool(llama_cpp.llama_decode(ctx, batch) == 0)


def _reuse_prefix(model: _Model, tokens: list[int]) -> int:
    """Keep the KV cache for the longest prefix this prompt shares with what it holds; drop the rest.

    At least one prompt token is always decoded again: sampling needs the logits of the prompt's last token.
    """
    import llama_cpp

    keep = 0
    for held, wanted in zip(model.cached, tokens, strict=False):
        if held != wanted:
            break
        keep += 1
    keep = min(keep, len(tokens) - 1)
    memory = llama_cpp.llama_get_memory(model.llm.ctx)
    if keep < len(model.cached) and not llama_cpp.llama_memory_seq_rm(memory, 0, keep, -1):
        # This cache cannot drop a tail (recurrent models): start over.
        llama_cpp.llama_memory_clear(memory, True)
        keep = 0
    del model.cached[keep:]
    return keep


def _decode(model: _Model, tokens: list[int]) -> None:
    """Prompt processing in batches of n_batch; positions continue from what the cache holds.

    The last token is decoded on its own: the first reply token is sampled from its logits, and ggml's
    batched kernels can round differently from its single-token ones (with the AVX2 kernels, by up to 0.6 in
    a logit for some batch sizes: 16 and 35 tokens, not 24 or 32). Alone, it gives the same logits whether
    the cache held all the prompt but that token or none of it: the same seed gives the same reply.
    """
    _decode_at(
        model.llm.ctx,
        tokens,
        len(model.cached),
        _batch_step(model),
        last_alone=True,
        done=model.cached.extend,
    )


def _batch_step(model: _Model) -> int:
    """Prompt tokens per llama_decode. llama.cpp caps the batch at the context length it was asked for
    (before rounding the context up to 256), and aborts the whole process on a larger batch: a 128-token
    setting with a 200-token prompt."""
    import llama_cpp

    return min(model.plan.n_batch, int(llama_cpp.llama_n_batch(model.llm.ctx)))


def _decode_with_images(model: _Model, tokens: list[int], images: list[ImageSlot]) -> None:
    """A prompt with images, from the start: its text in batches at explicit positions, each image (at its
    IMAGE_SLOT) encoded by mtmd into the positions after. Image embeddings depend on the picture, not on
    tokens, so nothing of the cache can be matched to a later prompt: it is marked as holding none."""
    import llama_cpp

    assert model.vision is not None
    ctx = model.llm.ctx
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
    model.cached[:] = [IMAGE_SLOT]
    step = _batch_step(model)
    pending = iter(images)
    n_past = 0
    run: list[int] = []
    for token in tokens:
        if token != IMAGE_SLOT:
            run.append(token)
            continue
        n_past = _decode_at(ctx, run, n_past, step, last_alone=False)
        run = []
        n_past = model.vision.evaluate(ctx, next(pending), n_past, step)
    # The prompt ends in the template's own text (the assistant's turn opening): its last token alone, as
    # _decode does, gives the logits the first reply token is sampled from.
    _decode_at(ctx, run, n_past, step, last_alone=True)


def _decode_at(
    ctx: Any,
    tokens: list[int],
    n_past: int,
    step: int,
    *,
    last_alone: bool,
    done: Callable[[list[int]], object] = lambda _chunk: None,
) -> int:
    """Decode `tokens` at positions from `n_past` (after an image the next position is mtmd's to say, so
    positions are given, not left to llama.cpp), in batches of `step`, calling `done` with each batch once
    it is in the cache; returns the next position. Only the last token's logits are kept, when
    `last_alone`."""
    import llama_cpp

    body, tail = (tokens[:-1], tokens[-1:]) if last_alone else (tokens, [])
    chunks = [body[i : i + step] for i in range(0, len(body), step)] + ([tail] if tail else [])
    for chunk in chunks:
        if not chunk:
            continue
        batch = llama_cpp.llama_batch_init(len(chunk), 0, 1)
        try:
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = n_past + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = last_alone and chunk is chunks[-1] and i == len(chunk) - 1
            status = llama_cpp.llama_decode(ctx, batch)
        finally:
            llama_cpp.llama_batch_free(batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status} while reading the prompt")
        done(chunk)
        n_past += len(chunk)
    return n_past


def _load_vision(plan: LoadPlan, header: GGUFHeader, llm: Llama) -> Vision | None:
    """The model's projector, checked against its header first (mtmd's own check only logs the reason)."""
    if plan.mmproj_path is None:
        return None
    name = Path(plan.mmproj_path).name
    try:
        projector = read_header(plan.mmproj_path)
    except (OSError, GGUFError) as exc:
        raise VisionError(f"The vision projector {name} cannot be read: {exc}") from exc
    problem = projector_problem(projector, header)
    if problem is not None:
        raise VisionError(f"The vision projector {name} does not fit this model: {problem}")
    try:
        return Vision(
            plan.mmproj_path,
            llm.model,
            n_threads=plan.n_threads,
            use_gpu=plan.n_gpu_layers > 0,
            flash_attn=plan.flash_attn,
        )
    except VisionError as exc:
        raise VisionError(f"The vision projector {name}: {exc}") from exc


def _sampler_chain(sampling: SamplingParams, seed: int, n_vocab: int, grammar: Any = None) -> Any:
    """The same chain `Llama.generate()` builds: repetition penalty, the grammar sampler `grammar` if any
    (the chain takes it over), then greedy at temperature 0, else top-k, top-p, min-p, temperature and a
    seeded draw."""
    import llama_cpp

    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())

    def add(sampler: Any) -> None:
        llama_cpp.llama_sampler_chain_add(chain, sampler)

    add(llama_cpp.llama_sampler_init_penalties(n_vocab, PENALTY_LAST_N, sampling.repeat_penalty, 0.0, 0.0))
    if grammar is not None:
        # Before anything narrows the candidates: after top-k, every token left could be one the grammar
        # refuses, the draw would then pick a refused one anyway, and llama.cpp aborts the process when the
        # grammar is given it. Over the whole vocabulary some token always continues the JSON. (llama.cpp's
        # common_sampler draws first and runs the grammar over the vocabulary only when it refuses the
        # token drawn, to save time; with the grammar first, the draw is exactly the constrained
        # distribution, for one pass of the grammar over the vocabulary per token.)
        add(grammar)
    if sampling.temperature <= 0.0:
        add(llama_cpp.llama_sampler_init_greedy())
        return chain
    add(llama_cpp.llama_sampler_init_top_k(sampling.top_k))
    add(llama_cpp.llama_sampler_init_top_p(sampling.top_p, 1))
    add(llama_cpp.llama_sampler_init_min_p(sampling.min_p, 1))
    add(llama_cpp.llama_sampler_init_temp(sampling.temperature))
    add(llama_cpp.llama_sampler_init_dist(seed))
    return chain


def _grammar(model: _Model, json_schema: str | None) -> str | None:
    """The GBNF grammar for a reply held to `json_schema` (None without one), checked by llama.cpp's own
    parser with this model's vocabulary. Raises GrammarError."""
    if json_schema is None:
        return None
    import llama_cpp

    grammar = schema_grammar(json_schema)
    llama_cpp.llama_sampler_free(_grammar_sampler(model.vocab, grammar))
    return grammar


def _grammar_sampler(vocab: Any, grammar: str) -> Any:
    """A grammar sampler for `grammar` (root rule "root"). Raises GrammarError when llama.cpp cannot use it:
    it then returns NULL, having written why to the runner log."""
    import llama_cpp

    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode("utf-8"), b"root")
    if not sampler:
        raise GrammarError(
            "llama.cpp cannot use the grammar made from the JSON schema (a reference that leads back to "
            "itself before anything is written, for one); the runner log says why."
        )
    return sampler


def _prompt_tokens(
    model: _Model, messages: tuple[ChatMessage, ...], tools: tuple[ToolSpec, ...] = ()
) -> tuple[RenderedPrompt, list[int]]:
    """The prompt exactly as generation would see it: counting and generating must agree to the token.
    Each image of a message is an IMAGE_SLOT before its text, in order."""
    control = _control_tokens(model)
    # A marker no message can contain: it is made for this prompt.
    marker = f"<hearth-image-{uuid.uuid4().hex}>" if any(m.images for m in messages) else None
    if marker is not None:
        messages = tuple(
            dataclasses.replace(m, content=marker * len(m.images) + "\n" + m.content) if m.images else m
            for m in messages
        )
    rendered = render_chat(
        model.template,
        messages,
        bos_token=model.bos_text,
        eos_token=model.eos_text,
        control_texts=control.texts,
        tools=tools,
    )
    prompt = rendered.text
    add_bos = model.add_bos and not (model.bos_text and prompt.startswith(model.bos_text))
    bos_id = model.llm.token_bos()
    tokens = [bos_id] if add_bos and bos_id >= 0 else []
    return rendered, tokens + _tokenize_prompt(model, control, rendered, marker)


@dataclass(frozen=True)
class _ControlTokens:
    """The tokens that llama.cpp's `parse_special` adds to what it recognises in text: CONTROL and UNKNOWN.

    (USER_DEFINED tokens are recognised in plain text too, so message text can spell those, as in HF.)
    """

    ids: dict[str, int]  # text -> the lowest id with that text
    texts: frozenset[str]
    lstrip: frozenset[str]  # texts whose token swallows the whitespace before it (llama.cpp's LSTRIP)
    rstrip: frozenset[str]  # ... and after it (RSTRIP)


# Keyed by the Llama object, so a model loaded later never sees another model's tokens.
_control_cache: weakref.WeakKeyDictionary[Any, _ControlTokens] = weakref.WeakKeyDictionary()
_ASCII_SPACE = " \t\n\v\f\r"  # C's isspace(), which llama.cpp's LSTRIP and RSTRIP use


def _control_tokens(model: _Model) -> _ControlTokens:
    cached = _control_cache.get(model.llm)
    if cached is not None:
        return cached
    import llama_cpp

    vocab = model.vocab
    special = llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN
    ids: dict[str, int] = {}
    lstrip: set[str] = set()
    rstrip: set[str] = set()
    for token in range(llama_cpp.llama_vocab_n_tokens(vocab)):
        attr = llama_cpp.llama_vocab_get_attr(vocab, token)
        if not attr & special:
            continue
        try:
            text = llama_cpp.llama_vocab_get_text(vocab, token).decode("utf-8")
        except UnicodeDecodeError:
            continue  # cannot occur in text that is valid UTF-8, which every prompt is
        if not text or text in ids:
            continue
        ids[text] = token
        if attr & llama_cpp.LLAMA_TOKEN_ATTR_LSTRIP:
            lstrip.add(text)
        if attr & llama_cpp.LLAMA_TOKEN_ATTR_RSTRIP:
            rstrip.add(text)
    control = _ControlTokens(ids, frozenset(ids), frozenset(lstrip), frozenset(rstrip))
    _control_cache[model.llm] = control
    return control


def _tokenize_prompt(
    model: _Model, control: _ControlTokens, rendered: RenderedPrompt, image_marker: str | None = None
) -> list[int]:
    """What `tokenize(text, special=True)` does, except that message text never becomes a control token.

    llama.cpp splits the text at control-token texts and tokenizes each stretch between them on its own
    (tokenizer_st_partition); this does the same split, but only in the template's own text, and hands
    each stretch (message text included) to llama.cpp with special=False. A message without control-token
    text therefore gets exactly the tokens it got before, and the KV-cache prefix still matches.
    """
    llm = model.llm
    pattern = control_text_pattern(control.texts)
    tokens: list[int] = []
    stretch: list[str] = []
    strip_leading = False

    def add_text(text: str) -> None:
        nonlocal strip_leading
        if image_marker is not None and image_marker in text:
            first, *rest = text.split(image_marker)
            add_text(first)
            for after in rest:
                add_image()
                add_text(after)
            return
        if strip_leading:
            text = text.lstrip(_ASCII_SPACE)
            strip_leading = not text
        stretch.append(text)

    def add_plain(plain: str) -> None:
        if plain:
            tokens.extend(llm.tokenize(plain.encode("utf-8"), add_bos=False, special=False))

    def add_image() -> None:
        nonlocal strip_leading
        add_plain("".join(stretch))
        stretch.clear()
        tokens.append(IMAGE_SLOT)
        strip_leading = False

    def add_token(text: str) -> None:
        nonlocal strip_leading
        plain = "".join(stretch)
        if text in control.lstrip:
            plain = plain.rstrip(_ASCII_SPACE)
        stretch.clear()
        add_plain(plain)
        tokens.append(control.ids[text])
        strip_leading = text in control.rstrip

    for piece, literal in rendered.pieces():
        if literal or pattern is None:
            add_text(piece)
            continue
        position = 0
        for match in pattern.finditer(piece):
            add_text(piece[position : match.start()])
            add_token(match.group())
            position = match.end()
        add_text(piece[position:])
    add_plain("".join(stretch))
    return tokens


def _cap_address_space() -> None:
    """Test hook, Linux only: with ADDRESS_SPACE_ENV set to N, the runner caps its address space at what it
    uses now plus N MiB, once. A machine without a GPU has no VRAM to exhaust; under the cap a large context
    fails to allocate inside llama.cpp for real, the way a too-small GPU makes it fail."""
    extra_mib = os.environ.get(ADDRESS_SPACE_ENV)
    if not extra_mib or not sys.platform.startswith("linux"):
        return
    import resource

    if resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY:
        return
    used = int(Path("/proc/self/statm").read_text(encoding="ascii").split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = used + int(extra_mib) * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def ctypes_buffer() -> Any:
    import ctypes

    # 256 bytes: the longest single-token piece in real vocabularies is far shorter.
    return ctypes.create_string_buffer(256)


def _redirect_native_stderr(log_path: str | None) -> None:
    """llama.cpp writes diagnostics (and the reason for an abort) to fd 2; keep them in the runner log.

    Windowed builds have no console at all, so writing to the inherited fd 2 could fail there.
    """
    if not log_path:
        return
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115


def _record_native_crashes(log_path: str | None) -> None:
    """A native crash (a segfault in llama.cpp, a bad CPU kernel, an abort) leaves the Python stack of every
    thread next to the runner log, in runner-crash.log.

    inference cannot use app.logging_setup's handlers, and needs only this part of them: uncaught Python
    exceptions already reach fd 2, the runner log. The stacks go to a file of their own because the client
    quotes the runner log's last error line to the user, and that must stay llama.cpp's reason
    ("GGML_ASSERT ... failed"), not faulthandler's "Fatal Python error: Aborted" written after it.
    """
    if not log_path:
        faulthandler.enable(file=sys.stderr, all_threads=True)
        return
    crash_path = Path(log_path).with_name(f"{Path(log_path).stem}-crash.log")
    # Never closed: faulthandler writes to this descriptor at crash time, whenever that comes.
    fd = os.open(crash_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    faulthandler.enable(file=fd, all_threads=True)


def prepare_runner_process(
    log_path: str | None, cpu_variant: str | None, cpu_reason: str
) -> CpuKernels | None:
    """What every runner process does first: its log, its crash record, and llama.cpp's backends (the CPU
    variant `cpu_variant`, inference.ggml_backends; None for the best). None when those cannot be loaded."""
    _redirect_native_stderr(log_path)
    _record_native_crashes(log_path)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s runner %(message)s")
    try:
        # Before any request: the kernels are chosen once per runner, and a variant that cannot even be
        # loaded shows up in the log at start.
        return load_backends(cpu_variant, cpu_reason)
    except Exception:
        log.exception("llama.cpp's backends could not be loaded")
        return None


def serve(conn: Connection, handlers: Mapping[type, Callable[[Any], None]]) -> None:
    """Answer requests until the parent says so or goes away; each request type has its handler, which
    sends the replies itself. A handler that raises answers Failed(INTERNAL) under the request's id."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return  # the GUI process went away; nothing left to serve
        if message == SHUTDOWN:
            return
        handler = handlers.get(type(message))
        if handler is None:
            log.error("unknown request %r", type(message).__name__)
            continue
        try:
            handler(message)
        except Exception as exc:
            log.exception("runner request failed")
            request_id = getattr(message, "request_id", "load")
            conn.send(Failed(request_id, ErrorKind.INTERNAL, f"{type(exc).__name__}: {exc}"))


def runner_main(
    conn: Connection,
    cancel: CancelFlag,
    log_path: str | None,
    cpu_variant: str | None = None,
    cpu_reason: str = "",
) -> None:
    """`cpu_variant` names the ggml CPU variant to run on (inference.ggml_backends), None for the best."""
    kernels = prepare_runner_process(log_path, cpu_variant, cpu_reason)
    runner = Runner(conn.send, cancel, kernels)
    serve(
        conn,
        {
            LoadRequest: runner.load,
            GenerateRequest: runner.generate,
            CountTokensRequest: runner.count_tokens,
        },
    )
