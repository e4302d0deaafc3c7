"""Generation in the runner process: every reply in progress advances in the same llama_decode (continuous
batching), each in its own KV-cache sequence (a slot) with its own sampler.

A step decodes the next token of every reply that is generating and, in the room the batch has left, the
next stretch of the prompts still being read; then each generating reply samples from its own row of the
logits. A reply that arrives mid-step joins at the next one, so a long prompt never holds back the streams
already running (llama.cpp's server does the same), and N replies cost far less than N one after another:
each step reads the weights once for all of them.

The slots share one KV cache of the context length the model was loaded with (llama.cpp's unified cache):
one long conversation can fill all of it, and several short ones share it. A finished reply's slot keeps
its cache, for the next prompt that starts the same way (the window's next turn in its conversation). When
the cache runs out, idle slots give theirs up first, oldest first; then the reply that came last is
preempted: its cache is dropped and it waits, with every token it has, to be read again once there is room.
Its stream pauses and goes on where it was; nothing is lost or sent twice.

A reply that has the runner to itself decodes exactly as it did before batching: the prompt in batches of
n_batch, the first token sampled from the last of them (as llama.cpp's server does: no step of its own for the
prompt's last token), then one token per step (or speculative guesses, which are made only then: in a shared
step, a guess would make every other stream wait for it). The same seed then gives the same reply.
Beside other replies, a reply's tokens share a batch whose make-up changes from step to step, and ggml's
kernels round a batch differently from a single token: the reply is as good, but not bit for bit the same.
"""

from __future__ import annotations

import codecs
import logging
import os
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from inference.draft_model import DraftModel
from inference.prompt_lookup import PromptLookup
from inference.protocol import (
    ErrorKind,
    Failed,
    Finished,
    GenerateRequest,
    GenerationStats,
    LoadPlan,
    SamplingParams,
    StopReason,
    TokenDelta,
)
from inference.vision import Vision, VisionError

if TYPE_CHECKING:
    from llama_cpp import Llama

log = logging.getLogger("hearth.runner")

# Deltas are sent up the pipe at most this often: one message per token would cost more in pickling and
# Qt signal dispatch than the decode itself on a fast GPU. 33 ms (30 updates a second) is below what a reader
# notices, and each wake-up of the GUI process takes CPU time from the decode threads on a small machine.
FLUSH_INTERVAL_S = 0.033
# How many recent tokens the repetition penalty looks at (llama-cpp-python's default, kept for parity).
PENALTY_LAST_N = 64
# Where an image goes in a prompt's tokens (no token has a negative id), and what a slot's cache holds after
# a prompt with images: a prefix no later prompt can share, so it is decoded from the start.
IMAGE_SLOT = -1
# Speculative decoding (_Drafts): the share of guessed tokens taken to be kept before any is checked, how
# fast the measured share follows each check, how fast it drifts back while nothing is guessed, and how fast
# the decode times follow each measurement.
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
class Slot:
    """One KV-cache sequence of the context: what it holds, and whether a reply is using it."""

    seq_id: int
    # The tokens whose keys and values the sequence holds, in order (IMAGE_SLOT first after a prompt with
    # images: nothing a later prompt can share).
    cached: list[int] = field(default_factory=list)
    # Context cells the sequence takes: len(cached), but an image takes as many cells as it has tokens.
    # Cells another sequence holds too (Scheduler._borrow_prefix) are counted in both.
    cells: int = 0
    busy: bool = False
    used_at: int = 0  # the step its last reply started at: idle caches are given up oldest first

    def hold(self, tokens: list[int]) -> None:
        self.cached.extend(tokens)
        self.cells += len(tokens)

    def emptied(self) -> None:
        self.cached.clear()
        self.cells = 0


@dataclass
class LoadedModel:
    llm: Llama
    plan: LoadPlan
    template: str | None
    bos_text: str
    eos_text: str
    add_bos: bool
    vocab: Any
    slots: list[Slot]  # as many as replies can be generated at once (LoadPlan.n_parallel)
    vision: Vision | None = None  # with a multimodal projector
    # The cache can drop its newest positions: not a recurrent or hybrid model, whose state only goes forward
    # (rejected draft tokens could not be taken back out of it, nor a prompt's tail).
    rewindable: bool = True
    # The most tokens guessed per step (LoadPlan.draft_tokens); 0: plain decoding.
    draft_tokens: int = 0
    # The small model that guesses them (LoadPlan.draft_model_path); None: prompt lookup guesses.
    draft: DraftModel | None = None
    guess_costs: _GuessCosts = field(default_factory=lambda: _GuessCosts())

    def close(self) -> None:
        if self.vision is not None:
            self.vision.close()
        if self.draft is not None:
            self.draft.close()
            self.draft = None
        self.llm.close()


@dataclass
class _GuessCosts:
    """What a decode costs with this model here, for _Drafts: the median of its first TIMED_DECODES timings,
    then fixed for as long as the model stays loaded. Guess lengths decide which positions share a batch,
    and past some depth a batch rounds differently from single tokens: costs that kept changing would make
    the same seed give another reply. With a draft model, what one guessed token costs the draft too."""

    one_token: list[float] = field(default_factory=list)
    per_guessed_token: list[float] = field(default_factory=list)
    per_drafted_token: list[float] = field(default_factory=list)

    @property
    def one_token_s(self) -> float | None:
        return _fixed(self.one_token)

    @property
    def per_guessed_token_s(self) -> float | None:
        return _fixed(self.per_guessed_token)

    @property
    def per_drafted_token_s(self) -> float | None:
        return _fixed(self.per_drafted_token)

    def timed(self, guessed: int, seconds: float) -> None:
        if not guessed:
            if len(self.one_token) < TIMED_DECODES:
                self.one_token.append(seconds)
            return
        one_token = self.one_token_s
        if one_token is not None and len(self.per_guessed_token) < TIMED_DECODES:
            self.per_guessed_token.append(max(0.0, seconds - one_token) / guessed)

    def drafted(self, guessed: int, seconds: float) -> None:
        if guessed and len(self.per_drafted_token) < TIMED_DECODES:
            self.per_drafted_token.append(seconds / guessed)


def _fixed(timings: list[float]) -> float | None:
    return statistics.median(timings) if len(timings) >= TIMED_DECODES else None


class _Drafts:
    """Speculative decoding for one reply: a guess of the next tokens, by prompt lookup
    (inference.prompt_lookup) or by a draft model (inference.draft_model), decoded in one batch with the
    token before them, each kept only if sampling its position gives it.

    A guess pays when the batch costs less than the tokens it saves. On a GPU, or a large model whose
    weights stream from memory, a batch of ten costs about what one token costs; a small model on a few CPU
    cores is compute-bound, and a batch costs nearly a token's time per token. So guesses are as long as
    they are worth, by the decode costs measured with this model (_GuessCosts: a draft model's own steps
    included) and the share of guessed tokens kept so far in this reply: the length that gives the most
    expected tokens per second, down to none.
    """

    def __init__(self, model: LoadedModel, prompt: list[int]) -> None:
        self._history = list(prompt)
        self._lookup: PromptLookup | None = None
        self._draft = model.draft
        self.drafted = 0
        self.accepted = 0
        self._limit = model.draft_tokens
        self.costs = model.guess_costs
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
        limit = min(self._limit, budget, room)
        if self._draft is not None:
            wanted = self._worth(limit)
            guessed, seconds = self._draft.guess(self._history, wanted)
            self.costs.drafted(len(guessed), seconds)
        else:
            if self._lookup is None:
                # Indexed once the first reply token is out: a long prompt's index is not in the time to it.
                self._lookup = PromptLookup(self._history)
            found = self._lookup.draft(limit)
            wanted = len(found)
            guessed = found[: self._worth(wanted)]
        if wanted and not guessed:
            # Without guesses the kept share is never measured again: it drifts back to the prior, so that
            # a stretch of copying (or of text the draft predicts) later in the reply is still found.
            self._kept += (KEPT_PRIOR - self._kept) * KEPT_RECOVERY
        self.drafted += len(guessed)
        return guessed

    def _worth(self, found: int) -> int:
        costs = self.costs
        one_token, per_guessed_token = costs.one_token_s, costs.per_guessed_token_s
        if one_token is None:
            return 0  # the first steps decode their token alone, to time it
        drafting = costs.per_drafted_token_s if self._draft is not None else 0.0
        if per_guessed_token is None or drafting is None:
            return found  # then whole guesses, to time them
        best_length, best_rate = 0, 1 / one_token
        expected, chance = 1.0, 1.0
        for length in range(1, found + 1):
            chance *= self._kept
            expected += chance
            rate = expected / (one_token + length * (per_guessed_token + drafting))
            if rate > best_rate:
                best_length, best_rate = length, rate
        return best_length

    def kept(self, hit: bool) -> None:
        """One guessed token checked: kept (`hit`), or not."""
        self._kept += ((1.0 if hit else 0.0) - self._kept) * KEPT_SMOOTHING
        if hit:
            self.accepted += 1


class _Reply:
    """One reply in progress: its slot, what of its prompt is still to be read, its sampler and its text."""

    def __init__(
        self,
        model: LoadedModel,
        request: GenerateRequest,
        tokens: list[int],
        stops: tuple[str, ...],
        n_prompt: int,
        *,
        images: tuple[Any, ...] = (),
        grammar: Any = None,
        spelled: bool = False,
        order: int = 0,
    ) -> None:
        sampling = request.sampling
        self.request = request
        self.order = order  # admission order: the youngest reply is preempted first
        self.tokens = tokens
        self.images = images  # the request's pictures, tokenized again (cheaply: kept) when it is admitted
        self.n_prompt = n_prompt
        seed = sampling.seed
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little") >> 1
        self.sampler = _sampler_chain(sampling, self.seed, model.llm.n_vocab(), grammar)
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.window = StopWindow(stops)
        self.spelled = spelled
        self.budget = min(sampling.max_tokens, model.llm.n_ctx() - n_prompt)
        self.reason = StopReason.MAX_TOKENS if self.budget == sampling.max_tokens else StopReason.CONTEXT_FULL
        self.ignore_eos = sampling.ignore_eos
        self.drafts = _Drafts(model, tokens) if model.draft_tokens and not images else None
        # Tokens decoded after `feed` on a draft's guess, each kept only if sampling its position gives it.
        self.guessed: list[int] = []
        self.slot: Slot | None = None
        self.body: list[int] = []  # tokens still to read before `feed`
        self.feed = -1  # the next token to decode with its logits: the prompt's last, then each one sampled
        self.position = 0  # where `body`, then `feed`, goes
        self.cached_prompt = 0
        self.produced = 0
        self.pending: list[str] = []
        self.pending_tokens = 0
        self.started = time.perf_counter()
        # The first token goes out on its own, at once: time to first token is what the user waits for.
        self.last_flush = self.started - FLUSH_INTERVAL_S
        self.first_token_at: float | None = None
        self.cancelled = False
        self.preempted = False  # its cache was dropped for room once (Scheduler._preempt)

    @property
    def request_id(self) -> str:
        return self.request.request_id

    @property
    def reading(self) -> bool:
        return bool(self.body)

    def free(self) -> None:
        import llama_cpp

        if self.sampler is not None:
            llama_cpp.llama_sampler_free(self.sampler)
            self.sampler = None


# Read by Hearth's patch to ggml's CPU kernels (packaging/llama_patches/0003-batch-invariant-small-batches
# .patch): while it is set, the rows of a small batch are each multiplied, and attend, as a token decoded
# alone does, to the bit. It is set for the decodes that check guesses, and only for them: a guessed token
# then gets the logits it would get decoded alone, while every other batch (a prompt's pieces, several
# replies' tokens) takes the same fast kernels in a load with guesses as in one without, so that the two
# give the same replies.
BATCH_INVARIANT_ENV = "HEARTH_BATCH_INVARIANT"


@contextmanager
def rows_alone() -> Iterator[None]:
    """The kernels a token decoded alone takes, for each row of the batches decoded in the block. Only around
    llama_decode, on the thread that runs llama.cpp: its worker threads read the variable during the decode,
    and nothing else in the runner reads the environment from C while the decode thread changes it."""
    os.environ[BATCH_INVARIANT_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(BATCH_INVARIANT_ENV, None)


class _Entry(NamedTuple):
    """A reply's part of one llama_decode: prompt tokens to read (no logits), then `fed`, the tokens whose
    logits are sampled (the next token and any guessed after it), empty while the prompt goes on."""

    reply: _Reply
    read: list[int]
    fed: list[int]


class Scheduler:
    """The replies in progress on one loaded model, and the steps that advance them together.

    `submit` and `cancel` may be called from any thread; `step` runs on one thread: the runner process's
    decode thread (`start`), or the caller's (`drain`, for code that drives a Runner directly).
    """

    def __init__(self, model: LoadedModel, send: Callable[[object], None]) -> None:
        import llama_cpp

        self._model = model
        self._send = send
        self._ctx = model.llm.ctx
        self._memory = llama_cpp.llama_get_memory(self._ctx)
        self._n_ctx = model.llm.n_ctx()
        self._n_batch = _batch_step(model)
        self._batch = llama_cpp.llama_batch_init(max(self._n_batch, model.draft_tokens + 1), 0, 1)
        self._piece = ctypes_buffer()
        self._changed = threading.Condition()
        self._incoming: deque[_Reply] = deque()
        self._cancelled: set[str] = set()
        self._waiting: deque[_Reply] = deque()  # admitted in this order as slots free up
        self._active: list[_Reply] = []  # in admission order
        self._steps = 0
        self._admitted = 0
        self._thread: threading.Thread | None = None
        self._stopping = False

    # --- any thread ---------------------------------------------------------------------------------

    def submit(self, reply: _Reply) -> None:
        with self._changed:
            self._incoming.append(reply)
            self._changed.notify_all()

    def cancel(self, request_id: str) -> None:
        with self._changed:
            self._cancelled.add(request_id)
            self._changed.notify_all()

    # --- the decode thread ------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="hearth-decode", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Every reply in progress ends (cancelled), the decode thread with them; then the scheduler is
        freed."""
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self._take_incoming()
        for reply in [*self._active, *self._waiting]:
            reply.reason = StopReason.CANCELLED
            self._finish(reply)
        self._active.clear()
        self._waiting.clear()
        import llama_cpp

        llama_cpp.llama_batch_free(self._batch)

    def drain(self) -> None:
        """Steps until every reply submitted has ended."""
        while self.step():
            pass

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._stopping and not (self._incoming or self._waiting or self._active):
                    self._changed.wait()
                if self._stopping:
                    return
            try:
                self.step()
            except Exception as exc:
                log.exception("a decode step failed")
                for reply in [*self._active]:
                    self._fail(reply, ErrorKind.INTERNAL, f"{type(exc).__name__}: {exc}")

    def step(self) -> bool:
        """One llama_decode for every reply that has something to decode; returns whether any reply is
        still in progress."""
        self._take_incoming()
        self._admit()
        for reply in [r for r in self._active if r.cancelled]:
            reply.reason = StopReason.CANCELLED
            self._finish(reply)
        if not self._active:
            return bool(self._waiting)
        self._steps += 1
        generating = [r for r in self._active if not r.reading]
        # Guesses only for a reply that has the runner to itself, once its first token is out.
        alone = len(self._active) == 1 and not self._waiting
        guessing = generating[0] if alone and generating and generating[0].produced else None
        drafts = guessing.drafts if guessing is not None else None
        if guessing is not None and drafts is not None:
            assert guessing.slot is not None
            guessing.guessed = drafts.guess(
                guessing.budget - guessing.produced - 1, self._n_ctx - guessing.slot.cells - 1
            )
        generating = self._make_room(generating)
        entries = [_Entry(r, [], [r.feed, *r.guessed]) for r in generating]
        room = self._n_batch - sum(len(entry.fed) for entry in entries)
        free = self._free_cells() - sum(len(entry.fed) for entry in entries)
        for reply in [r for r in self._active if r.reading]:
            if room <= 0:
                break
            # A reply preempted before reads again only once all it has, and all the replies being written
            # may still write, fit: else it would be preempted again, and read again, step after step.
            needed = (
                len(reply.body) + self._still_to_write(reply)
                if reply.preempted
                else min(room, len(reply.body))
            )
            if free < needed:
                free += self._give_up_idle_caches(needed - free)
                if free < needed and reply.preempted:
                    continue
            chunk = reply.body[: max(0, min(room, free))]
            if chunk:
                # The prompt's end goes with the token after it, as llama-server reads a prompt: the first
                # token is sampled from this llama_decode, not from a step of its own one decode later.
                whole = len(chunk) == len(reply.body) and room > len(chunk) and free > len(chunk)
                fed = [reply.feed] if whole else []
                entries.append(_Entry(reply, chunk, fed))
                room -= len(chunk) + len(fed)
                free -= len(chunk) + len(fed)
        if not entries:
            # Every reply is reading, and the cache is full of what they have read: the youngest waits.
            youngest = self._preemptible()
            if youngest is None:
                raise RuntimeError("no room in the context for any reply")  # n_prompt < n_ctx rules it out
            self._preempt(youngest)
            return True
        started = time.perf_counter()
        status = self._decode(entries)
        elapsed = time.perf_counter() - started
        if status != 0:
            self._decode_failed(entries, status)
            return True
        if guessing is not None and drafts is not None:
            drafts.costs.timed(len(guessing.guessed), elapsed)
        index = 0
        for reply, read, fed in entries:
            slot = reply.slot
            assert slot is not None
            if read:
                slot.hold(read)
                reply.position += len(read)
                del reply.body[: len(read)]
                index += len(read)
            if fed:
                slot.hold([reply.feed])
                reply.position += 1
                self._sample(reply, index)
                index += len(fed)
        return True

    def _take_incoming(self) -> None:
        with self._changed:
            while self._incoming:
                self._waiting.append(self._incoming.popleft())
            cancelled, self._cancelled = self._cancelled, set()
        for reply in [*self._waiting, *self._active]:
            if reply.request_id in cancelled:
                reply.cancelled = True
        for reply in [r for r in self._waiting if r.cancelled]:
            self._waiting.remove(reply)
            reply.reason = StopReason.CANCELLED
            self._finish(reply)

    def _admit(self) -> None:
        """Waiting replies into free slots, first come first served (the slot chosen by _preference)."""
        while self._waiting:
            free_slots = [s for s in self._model.slots if not s.busy]
            if not free_slots:
                return
            reply = self._waiting[0]
            if reply.images and self._active:
                # Its prompt up to the last picture is read in one go, and needs the room for all of it now.
                return
            self._waiting.popleft()
            slot = max(free_slots, key=lambda s: _preference(s, reply.tokens))
            slot.busy, slot.used_at = True, self._steps
            reply.slot, reply.order = slot, self._admitted
            self._admitted += 1
            self._active.append(reply)
            if reply.images:
                self._read_with_images(reply)
                continue
            keep = self._reuse_prefix(slot, reply.tokens)
            reply.cached_prompt = keep
            reply.body = reply.tokens[keep:-1]
            reply.feed = reply.tokens[-1]
            reply.position = keep

    def _reuse_prefix(self, slot: Slot, tokens: list[int]) -> int:
        """Keep the slot's cache for the longest start this prompt shares with it; drop the rest. Where
        another slot's cache shares a longer start, this slot takes those cells instead. Returns how many
        prompt tokens need no reading. At least one is always decoded again: sampling needs the logits of
        the prompt's last token."""
        import llama_cpp

        keep = min(_shared(slot.cached, tokens), len(tokens) - 1)
        if keep < len(slot.cached) and not llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, keep, -1):
            # This cache cannot drop a tail (recurrent models): the whole sequence goes.
            llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
            keep = 0
        del slot.cached[keep:]
        slot.cells = keep
        if self._model.rewindable:
            keep = self._borrow_prefix(slot, tokens, keep)
        return keep

    def _borrow_prefix(self, slot: Slot, tokens: list[int], held: int) -> int:
        """The longest start of `tokens` any other slot holds, if longer than the `held` this slot has, put
        in this slot's sequence too; returns the tokens the slot now holds. Every sequence shares the one
        unified cache (inference.runner._parallel_sequences), so llama_memory_seq_cp only marks the same
        cells as this sequence's as well: no copy, and the other slot's cache stays whole. A new
        conversation then skips the system prompt and tools another one has read, and leaves that one's
        slot alone (llama-server reuses a cache only in its own slot, overwriting the rest of it).

        The cells are counted in each slot's `cells`, so the free room the scheduler sees is less than
        llama.cpp's, never more: the same as if the slot had read them itself."""
        import llama_cpp

        donor, shared = max(
            ((other, min(_shared(other.cached, tokens), len(tokens) - 1)) for other in self._model.slots),
            key=lambda pair: pair[1],
        )
        if donor is slot or shared <= held:
            return held
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
        llama_cpp.llama_memory_seq_cp(self._memory, donor.seq_id, slot.seq_id, 0, shared)
        slot.cached[:] = donor.cached[:shared]
        slot.cells = shared
        return shared

    def _read_with_images(self, reply: _Reply) -> None:
        """A prompt with images, from the start up to its last image, in one go: its text in batches at
        explicit positions, each image encoded by mtmd into the positions after. The text after the last
        image is left to the steps, which read its end with the token after it, as any prompt's. Image
        embeddings depend on the picture, not on tokens, so nothing of the cache can be matched to a later
        prompt: the slot is marked as holding none."""
        import llama_cpp

        model, slot = self._model, reply.slot
        assert model.vision is not None and slot is not None
        self._give_up_idle_caches(self._n_ctx)
        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
        slot.emptied()
        slot.cached.append(IMAGE_SLOT)
        try:
            with model.vision.lock:
                pending = iter(model.vision.tokenized(reply.images))
                n_past = 0
                run: list[int] = []
                for token in reply.tokens[:-1]:
                    if token != IMAGE_SLOT:
                        run.append(token)
                        continue
                    n_past = _decode_at(self._ctx, run, n_past, self._n_batch, seq_id=slot.seq_id)
                    run = []
                    image = next(pending)
                    n_past = model.vision.evaluate(self._ctx, image, n_past, self._n_batch, slot.seq_id)
        except (VisionError, RuntimeError) as exc:
            self._fail(reply, ErrorKind.MODEL_INVALID, f"{exc}.")
            return
        slot.cells = reply.n_prompt - 1 - len(run)
        reply.body, reply.feed, reply.position = run, reply.tokens[-1], n_past

    def _still_to_write(self, reading: _Reply) -> int:
        """The most tokens the other replies may still add to the cache."""
        return sum(r.budget - r.produced for r in self._active if r is not reading and not r.reading)

    def _free_cells(self) -> int:
        return self._n_ctx - sum(slot.cells for slot in self._model.slots)

    def _drop_cache(self, slot: Slot) -> None:
        import llama_cpp

        llama_cpp.llama_memory_seq_rm(self._memory, slot.seq_id, 0, -1)
        slot.emptied()

    def _give_up_idle_caches(self, needed: int) -> int:
        """Idle slots' caches dropped, oldest first, until `needed` cells are free; returns how many were."""
        freed = 0
        for slot in sorted((s for s in self._model.slots if not s.busy and s.cells), key=lambda s: s.used_at):
            if freed >= needed:
                break
            freed += slot.cells
            self._drop_cache(slot)
        return freed

    def _make_room(self, generating: list[_Reply]) -> list[_Reply]:
        """Cells for this step's generated tokens: from idle caches first, then from the youngest replies,
        which are preempted (never the oldest: it always goes on). Returns the replies that still generate
        this step."""
        needed = sum(1 + len(r.guessed) for r in generating) - self._free_cells()
        if needed > 0:
            needed -= self._give_up_idle_caches(needed)
        while needed > 0:
            youngest = self._preemptible()
            if youngest is None:
                break
            assert youngest.slot is not None
            needed -= youngest.slot.cells
            self._preempt(youngest)
        return [r for r in generating if not r.reading]

    def _preemptible(self) -> _Reply | None:
        """The youngest reply whose cache can be dropped and read again: not the oldest, not one with
        pictures (they cannot be read again from tokens), and one that holds some of the cache."""
        oldest = min(self._active, key=lambda r: r.order)
        candidates = [
            r
            for r in self._active
            if r is not oldest and not r.images and r.slot is not None and r.slot.cells
        ]
        return max(candidates, key=lambda r: r.order, default=None)

    def _preempt(self, reply: _Reply) -> None:
        """Drop the reply's cache: it waits, with every token it has, to be read again."""
        slot = reply.slot
        assert slot is not None
        log.info(
            "reply %s waits for room in the context (%d tokens to read again)",
            reply.request_id,
            slot.cells,
        )
        reply.guessed = []
        reply.preempted = True
        # What it had read, then what it had still to read; `feed` stays the next token after them.
        reply.body = [*slot.cached, *reply.body]
        reply.position = 0
        self._drop_cache(slot)

    def _decode(self, entries: list[_Entry]) -> int:
        import llama_cpp

        batch = self._batch
        batch.n_tokens = 0
        for reply, read, fed in entries:
            assert reply.slot is not None
            _place(batch, read, reply.position, reply.slot.seq_id, logits=False)
            _place(batch, fed, reply.position + len(read), reply.slot.seq_id, logits=True)
        checking_guesses = any(len(entry.fed) > 1 for entry in entries)
        with rows_alone() if checking_guesses else nullcontext():
            return int(llama_cpp.llama_decode(self._ctx, batch))

    def _decode_failed(self, entries: list[_Entry], status: int) -> None:
        """llama.cpp refused the batch (status 1: no room in the cache for it). Beside other replies the
        youngest one waits; alone, a generating reply ends as the context is full, a reading one fails."""
        youngest = self._preemptible() if status == 1 else None
        if youngest is not None:
            self._preempt(youngest)
            return
        for reply, read, _ in entries:
            self._forget_guess(reply)
            if not read:
                reply.reason = StopReason.CONTEXT_FULL
                self._finish(reply)
            else:
                why = f"llama_decode failed with status {status} while reading the prompt"
                self._fail(reply, ErrorKind.INTERNAL, why)

    def _sample(self, reply: _Reply, index: int) -> None:
        """Sample the reply's next tokens from its logits at batch row `index`, then each guessed position's
        while the guesses hold."""
        import llama_cpp

        slot = reply.slot
        assert slot is not None
        while True:
            token = llama_cpp.llama_sampler_sample(reply.sampler, self._ctx, index)
            if self._took(reply, token):
                self._finish(reply)
                return
            drafts = reply.drafts
            if drafts is not None:
                drafts.add(token)
                if reply.guessed and reply.guessed[0] == token:
                    # Already in the cache, and so are the logits of the position after it.
                    slot.hold([reply.guessed.pop(0)])
                    reply.position += 1
                    drafts.kept(hit=True)
                    index += 1
                    continue
                if reply.guessed:
                    drafts.kept(hit=False)
                    self._forget_guess(reply)
            reply.feed = token
            return

    def _forget_guess(self, reply: _Reply) -> None:
        """Drop a guess not kept: every position of the reply's sequence past what its slot holds."""
        import llama_cpp

        if reply.guessed and reply.slot is not None:
            llama_cpp.llama_memory_seq_rm(self._memory, reply.slot.seq_id, reply.position, -1)
        reply.guessed = []

    def _took(self, reply: _Reply, token: int) -> bool:
        """The token sampled for the reply, into its text; whether the reply ends here."""
        import llama_cpp

        if reply.first_token_at is None:
            reply.first_token_at = time.perf_counter()
        if not reply.ignore_eos and llama_cpp.llama_vocab_is_eog(self._model.vocab, token):
            reply.reason = StopReason.END_OF_TURN
            return True
        reply.produced += 1
        piece = self._piece
        # With tools, control tokens are spelled out: they mark the calls (`<|python_tag|>`, `[TOOL_CALLS]`,
        # DeepSeek's and harmony's markers), which the app's parser looks for in the text.
        n = llama_cpp.llama_token_to_piece(self._model.vocab, token, piece, len(piece), 0, reply.spelled)
        text, hit_stop = reply.window.push(reply.decoder.decode(piece.raw[:n]))
        if text:
            reply.pending.append(text)
        reply.pending_tokens += 1
        if hit_stop:
            reply.reason = StopReason.STOP_STRING
            return True
        if reply.cancelled:
            reply.reason = StopReason.CANCELLED
            return True
        if reply.produced >= reply.budget:
            return True
        now = time.perf_counter()
        if now - reply.last_flush >= FLUSH_INTERVAL_S:
            self._send(TokenDelta(reply.request_id, "".join(reply.pending), reply.pending_tokens))
            reply.pending.clear()
            reply.pending_tokens = 0
            reply.last_flush = now
        return False

    def _release(self, reply: _Reply) -> None:
        self._forget_guess(reply)
        reply.free()
        if reply in self._active:
            self._active.remove(reply)
        if reply.slot is not None:
            # What it holds stays, for a later prompt that starts the same way (a prompt read part way too).
            reply.slot.busy = False

    def _fail(self, reply: _Reply, kind: ErrorKind, message: str) -> None:
        self._release(reply)
        self._send(Failed(reply.request_id, kind, message))

    def _finish(self, reply: _Reply) -> None:
        self._release(reply)
        if reply.reason is not StopReason.STOP_STRING:
            reply.pending.append(reply.window.flush() + reply.decoder.decode(b"", final=True))
        text = "".join(reply.pending)
        if text or reply.pending_tokens:
            self._send(TokenDelta(reply.request_id, text, reply.pending_tokens))
        finished_at = time.perf_counter()
        first = reply.first_token_at or finished_at
        decode_time = finished_at - first
        drafts = reply.drafts
        self._send(
            Finished(
                reply.request_id,
                GenerationStats(
                    prompt_tokens=reply.n_prompt,
                    cached_prompt_tokens=reply.cached_prompt,
                    completion_tokens=reply.produced,
                    time_to_first_token_s=first - reply.started,
                    # The first token's time is prompt processing; speed counts only the tokens after it.
                    tokens_per_second=(reply.produced - 1) / decode_time
                    if reply.produced > 1 and decode_time > 0
                    else 0.0,
                    stop_reason=reply.reason,
                    seed=reply.seed,
                    drafted_tokens=drafts.drafted if drafts is not None else 0,
                    accepted_draft_tokens=drafts.accepted if drafts is not None else 0,
                    stop_string=reply.window.hit if reply.reason is StopReason.STOP_STRING else None,
                ),
            )
        )


def _preference(slot: Slot, tokens: list[int]) -> tuple[bool, int, int]:
    """How well a free slot suits a prompt, for max(): one whose cache saves the prompt more tokens than
    it would lose of what it holds, by the most saved (an empty one saves nothing and loses nothing); else
    the one idle longest. A new conversation with the same system prompt as the window's then takes an
    empty slot, not the window's, whose next turn still finds its whole conversation there (the system
    prompt it finds in the window's slot: Scheduler._borrow_prefix); a regenerated reply reuses its
    conversation's slot, losing only the old reply."""
    shared = _shared(slot.cached, tokens)
    worth_it = len(slot.cached) - shared <= shared
    return worth_it, shared if worth_it else 0, -slot.used_at


def _shared(cached: list[int], tokens: list[int]) -> int:
    """How many tokens `tokens` starts with that `cached` starts with too."""
    shared = 0
    for held, wanted in zip(cached, tokens, strict=False):
        if held != wanted:
            break
        shared += 1
    return shared


def _decode_every(ctx: Any, batch: Any, tokens: list[int], position: int, seq_id: int = 0) -> bool:
    """Decode `tokens` at positions from `position` of sequence `seq_id` in `batch` (allocated for at least
    as many), keeping the logits of each; False when llama.cpp refuses them (no room in the context)."""
    import llama_cpp

    batch.n_tokens = 0
    _place(batch, tokens, position, seq_id, logits=True)
    return bool(llama_cpp.llama_decode(ctx, batch) == 0)


def _place(batch: Any, tokens: list[int], position: int, seq_id: int, *, logits: bool) -> None:
    """Add `tokens` to `batch` after what it holds, at positions from `position` of sequence `seq_id`."""
    start = batch.n_tokens
    for i, token in enumerate(tokens, start):
        batch.token[i] = token
        batch.pos[i] = position + i - start
        batch.n_seq_id[i] = 1
        batch.seq_id[i][0] = seq_id
        batch.logits[i] = logits
    batch.n_tokens = start + len(tokens)


def _batch_step(model: LoadedModel) -> int:
    """Prompt tokens per llama_decode. llama.cpp caps the batch at the context length it was asked for
    (before rounding the context up to 256), and aborts the whole process on a larger batch: a 128-token
    setting with a 200-token prompt."""
    import llama_cpp

    return min(model.plan.n_batch, int(llama_cpp.llama_n_batch(model.llm.ctx)))


def _decode_at(
    ctx: Any,
    tokens: list[int],
    n_past: int,
    step: int,
    *,
    seq_id: int = 0,
) -> int:
    """Decode `tokens` at positions from `n_past` of sequence `seq_id` (after an image the next position is
    mtmd's to say, so positions are given, not left to llama.cpp), in batches of `step`; returns the next
    position. No logits are kept."""
    import llama_cpp

    for start in range(0, len(tokens), step):
        chunk = tokens[start : start + step]
        batch = llama_cpp.llama_batch_init(len(chunk), 0, 1)
        try:
            batch.n_tokens = 0
            _place(batch, chunk, n_past, seq_id, logits=False)
            status = llama_cpp.llama_decode(ctx, batch)
        finally:
            llama_cpp.llama_batch_free(batch)
        if status != 0:
            raise RuntimeError(f"llama_decode failed with status {status} while reading the prompt")
        n_past += len(chunk)
    return n_past


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


def ctypes_buffer() -> Any:
    import ctypes

    # 256 bytes: the longest single-token piece in real vocabularies is far shorter.
    return ctypes.create_string_buffer(256)
