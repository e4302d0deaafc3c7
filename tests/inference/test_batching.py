"""Several replies generated at once (continuous batching, inference.decoding), on the real starter model:
through the runner process as the app drives it, and in this process where a test looks at the slots."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import pytest

from inference.client import RunnerClient
from inference.decoding import _decode_every, _shared
from inference.protocol import (
    ChatMessage,
    ErrorKind,
    Failed,
    Finished,
    GenerateRequest,
    GenerationStats,
    LoadPlan,
    LoadRequest,
    PromptReady,
    SamplingParams,
    StopReason,
    TokenDelta,
)
from inference.runner import Runner

pytestmark = pytest.mark.model

# Each prompt starts a list the model continues in its own words: a reply that read another sequence's
# cache, or was sampled from another's logits, would say the wrong things.
LISTS = {
    "numbers": ("Continue the list: 1, 2, 3, 4, 5,", ("3, 4",)),
    "letters": ("Continue the alphabet: A, B, C, D,", ("E", "F")),
    "days": ("Continue the list: Monday, Tuesday, Wednesday,", ("Monday", "Wednesday")),
    "months": ("Continue the list: January, February, March,", ("January", "March")),
}
WORDS_OF_OTHERS = {
    "numbers": ("Monday", "January", " B,"),
    "letters": ("Monday", "January", "5,"),
    "days": ("January", " B,", "5,"),
    "months": ("Monday", " B,", "5,"),
}
LONG = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)


def plan_for(path: str, *, n_ctx: int = 2048, n_parallel: int = 4) -> LoadPlan:
    return LoadPlan(
        model_path=path,
        n_ctx=n_ctx,
        n_gpu_layers=0,
        n_layers=30,
        flash_attn=True,
        n_threads=2,
        n_parallel=n_parallel,
    )


@dataclass
class Stream:
    """One reply as a client thread saw it, event by event, in the order all threads saw theirs."""

    name: str
    text: str = ""
    events: list[object] = field(default_factory=list)
    first_delta_at: int | None = None  # positions in the shared order of events
    ended_at: int | None = None

    @property
    def stats(self) -> GenerationStats:
        [finished] = [e for e in self.events if isinstance(e, Finished)]
        return finished.stats


class Streams:
    """Replies read by one thread each, all sent at the same moment."""

    def __init__(self, client: RunnerClient) -> None:
        self._client = client
        self._order = 0
        self._lock = threading.Lock()

    def _tick(self) -> int:
        with self._lock:
            self._order += 1
            return self._order

    def run(
        self,
        requests: dict[str, GenerateRequest],
        on_event: Callable[[Stream, object], None] = lambda _stream, _event: None,
    ) -> dict[str, Stream]:
        streams = {name: Stream(name) for name in requests}
        start = threading.Barrier(len(requests))

        def read(name: str) -> None:
            stream = streams[name]
            start.wait()
            for event in self._client.generate(requests[name]):
                stream.events.append(event)
                if isinstance(event, TokenDelta):
                    stream.text += event.text
                    if stream.first_delta_at is None:
                        stream.first_delta_at = self._tick()
                on_event(stream, event)
            stream.ended_at = self._tick()

        threads = [threading.Thread(target=read, args=(name,)) for name in requests]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        assert not any(thread.is_alive() for thread in threads), "a reply never ended"
        return streams


def request(name: str, prompt: str, sampling: SamplingParams = LONG) -> GenerateRequest:
    return GenerateRequest(name, (ChatMessage("user", prompt),), sampling)


@pytest.fixture
def client(starter_model: str) -> Iterator[RunnerClient]:
    runner = RunnerClient()
    loaded = runner.load(plan_for(starter_model))
    assert loaded.n_parallel == 4
    yield runner
    runner.close()


@pytest.fixture(scope="module")
def starter_model() -> str:
    from tests.conftest import starter_model_file

    path = starter_model_file()
    if path is None:
        pytest.skip("the starter model is not installed")
    return str(path)


def test_replies_asked_for_at_once_are_written_together_each_from_its_own_prompt(
    client: RunnerClient,
) -> None:
    streams = Streams(client).run({name: request(name, prompt) for name, (prompt, _) in LISTS.items()})

    # Every reply was under way before any of them ended: they were decoded side by side.
    firsts = [s.first_delta_at for s in streams.values()]
    ends = [s.ended_at for s in streams.values()]
    assert all(first is not None for first in firsts) and all(end is not None for end in ends)
    assert max(f for f in firsts if f is not None) < min(e for e in ends if e is not None)
    for name, stream in streams.items():
        assert stream.stats.stop_reason is StopReason.MAX_TOKENS
        assert stream.stats.completion_tokens == LONG.max_tokens
        assert sum(e.n_tokens for e in stream.events if isinstance(e, TokenDelta)) == LONG.max_tokens
        _, own = LISTS[name]
        assert all(word in stream.text for word in own), (name, stream.text)
        assert not any(word in stream.text for word in WORDS_OF_OTHERS[name]), (name, stream.text)


def test_cancelling_one_reply_leaves_the_others_running(client: RunnerClient) -> None:
    def cancel_letters(stream: Stream, event: object) -> None:
        if stream.name == "letters" and isinstance(event, TokenDelta) and stream.first_delta_at is not None:
            client.cancel("letters")

    names = ("numbers", "letters", "days")
    streams = Streams(client).run({n: request(n, LISTS[n][0]) for n in names}, cancel_letters)

    assert streams["letters"].stats.stop_reason is StopReason.CANCELLED
    assert streams["letters"].stats.completion_tokens < LONG.max_tokens
    for name in ("numbers", "days"):
        assert streams[name].stats.stop_reason is StopReason.MAX_TOKENS
        assert streams[name].stats.completion_tokens == LONG.max_tokens


def test_a_conversation_finds_its_cache_in_its_slot_after_other_conversations(client: RunnerClient) -> None:
    first_turn = (ChatMessage("user", "Name three rivers of Europe."),)
    [first] = Streams(client).run({"a1": GenerateRequest("a1", first_turn, LONG)}).values()
    # Another conversation with the same system prompt (the template's own) in between, then two at once.
    Streams(client).run({"b": request("b", LISTS["days"][0])})
    Streams(client).run({"c": request("c", LISTS["months"][0]), "d": request("d", LISTS["letters"][0])})
    follow_up = (*first_turn, ChatMessage("assistant", first.text), ChatMessage("user", "And three of Asia?"))
    [second] = Streams(client).run({"a2": GenerateRequest("a2", follow_up, LONG)}).values()

    # The first turn's prompt and reply were still cached: only the new message and the header were read.
    assert first.stats.prompt_tokens is not None
    assert second.stats.cached_prompt_tokens >= first.stats.prompt_tokens + first.stats.completion_tokens - 2


def test_a_runner_that_dies_ends_every_reply_in_progress(starter_model: str) -> None:
    client = RunnerClient()
    client.load(plan_for(starter_model))
    started = threading.Barrier(3, timeout=60)

    def kill_once_all_stream(stream: Stream, event: object) -> None:
        streaming = isinstance(event, TokenDelta) and len(stream.events) == 2
        if streaming and started.wait() == 0:
            client.kill()

    try:
        sampling = SamplingParams(temperature=0.0, max_tokens=2000, ignore_eos=True)
        names = ("numbers", "letters", "days")
        streams = Streams(client).run(
            {n: request(n, LISTS[n][0], sampling) for n in names}, kill_once_all_stream
        )
    finally:
        client.close()

    for stream in streams.values():
        [failed] = [e for e in stream.events if isinstance(e, Failed)]
        assert failed.kind is ErrorKind.RUNNER_CRASHED
        assert not any(isinstance(e, Finished) for e in stream.events)


class InProcess:
    """A Runner in this process, generating on its own decode thread as in the runner process."""

    def __init__(self, plan: LoadPlan) -> None:
        self.sent: list[object] = []
        self._arrived = threading.Condition()
        self.runner = Runner(self._send, threaded=True)
        self.runner.load(LoadRequest(plan))
        assert self.runner._model is not None, self.sent

    def _send(self, message: object) -> None:
        with self._arrived:
            self.sent.append(message)
            self._arrived.notify_all()

    def finished(self, request_id: str) -> Finished | Failed:
        def ended() -> list[Finished | Failed]:
            return [m for m in self.sent if isinstance(m, Finished | Failed) and m.request_id == request_id]

        with self._arrived:
            assert self._arrived.wait_for(ended, timeout=600), f"{request_id} never ended"
            return ended()[0]

    def streamed_tokens(self, request_id: str) -> int:
        return sum(m.n_tokens for m in self.sent if isinstance(m, TokenDelta) and m.request_id == request_id)

    def slots_agree_with_llama_cpp(self) -> bool:
        """Each slot's record of its cells is exactly what llama.cpp's memory holds for its sequence."""
        import llama_cpp

        model = self.runner._model
        assert model is not None
        memory = llama_cpp.llama_get_memory(model.llm.ctx)
        return all(
            int(llama_cpp.llama_memory_seq_pos_max(memory, slot.seq_id)) + 1 == slot.cells
            for slot in model.slots
        )

    def close(self) -> None:
        self.runner.close()


def test_a_reply_the_context_has_no_room_for_waits_and_goes_on_where_it_was(
    starter_model: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Two replies of 150 tokens after prompts of about 45 cannot both fit in 256 cells: the younger gives
    # its cache up, waits for the older to end, reads everything it had again and goes on.
    side = InProcess(plan_for(starter_model, n_ctx=256, n_parallel=2))
    sampling = SamplingParams(temperature=0.0, max_tokens=150, ignore_eos=True)
    try:
        with caplog.at_level(logging.INFO, logger="hearth.runner"):
            for name in ("numbers", "days"):
                side.runner.generate(request(name, LISTS[name][0], sampling))
            ends = {name: side.finished(name) for name in ("numbers", "days")}
        assert any("waits for room in the context" in r.getMessage() for r in caplog.records)
        for name, end in ends.items():
            assert isinstance(end, Finished), end
            assert end.stats.stop_reason is StopReason.MAX_TOKENS
            assert end.stats.completion_tokens == sampling.max_tokens
            # Nothing streamed twice, nothing left out.
            assert side.streamed_tokens(name) == sampling.max_tokens
            prompts = [m for m in side.sent if isinstance(m, PromptReady) and m.request_id == name]
            assert len(prompts) == 1
        assert side.slots_agree_with_llama_cpp()
    finally:
        side.close()


def test_a_new_conversation_takes_the_system_prompt_another_slot_holds_and_leaves_that_slot_whole(
    starter_model: str,
) -> None:
    import llama_cpp

    sampling = SamplingParams(temperature=0.0, max_tokens=20, ignore_eos=True)
    rivers = (ChatMessage("user", "Name three rivers of Europe."),)
    days = (ChatMessage("user", LISTS["days"][0]),)
    # Another system prompt: it shares only the turn's opening with the others.
    french = (ChatMessage("system", "You answer in French."), ChatMessage("user", "Name two cheeses."))

    def follow_up(turn: tuple[ChatMessage, ...], reply: str, question: str) -> tuple[ChatMessage, ...]:
        return (*turn, ChatMessage("assistant", reply), ChatMessage("user", question))

    def run(side: InProcess, name: str, messages: tuple[ChatMessage, ...]) -> tuple[str, GenerationStats]:
        side.runner.generate(GenerateRequest(name, messages, sampling))
        end = side.finished(name)
        assert isinstance(end, Finished), end
        deltas = [m.text for m in side.sent if isinstance(m, TokenDelta) and m.request_id == name]
        return "".join(deltas), end.stats

    # The days conversation in a slot of its own that held the rivers' first: it reads the same pieces
    # after the same cells of the system prompt (those the rivers' prompt began with).
    alone = InProcess(plan_for(starter_model, n_parallel=1))
    try:
        run(alone, "rivers", rivers)
        days_alone, first_alone = run(alone, "days", days)
        _, second_alone = run(alone, "days-2", follow_up(days, days_alone, "And two more?"))
    finally:
        alone.close()

    side = InProcess(plan_for(starter_model, n_parallel=2))
    try:
        model = side.runner._model
        assert model is not None
        memory = llama_cpp.llama_get_memory(model.llm.ctx)
        rivers_text, rivers_stats = run(side, "rivers", rivers)
        [rivers_slot] = [slot for slot in model.slots if slot.cached]
        held = rivers_slot.cached[:]
        days_text, first = run(side, "days", days)
        [days_slot] = [slot for slot in model.slots if slot is not rivers_slot]
        system_prompt = _shared(held, days_slot.cached)
        assert system_prompt > 10
        assert first.cached_prompt_tokens == system_prompt == first_alone.cached_prompt_tokens
        # Read after the other slot's cells, it says what it says after its own.
        assert days_text == days_alone

        # The slot it took them from kept its whole conversation.
        assert rivers_slot.cached == held and side.slots_agree_with_llama_cpp()
        _, rivers_next = run(side, "rivers-2", follow_up(rivers, rivers_text, "And three of Asia?"))
        assert rivers_stats.prompt_tokens is not None
        assert rivers_next.cached_prompt_tokens >= rivers_stats.prompt_tokens + sampling.max_tokens - 2

        # The rivers' slot, idle longest once the days conversation has gone on, gives up all but the
        # turn's opening; the cells it lent stay the days conversation's.
        _, second = run(side, "days-2", follow_up(days, days_text, "And two more?"))
        run(side, "french", french)
        assert _shared(rivers_slot.cached, held) < system_prompt
        assert llama_cpp.llama_memory_seq_pos_min(memory, days_slot.seq_id) == 0
        assert side.slots_agree_with_llama_cpp()
        assert second.cached_prompt_tokens == second_alone.cached_prompt_tokens
        # The same turn again finds all of its prompt but the last token, which gives the first logits.
        _, again = run(side, "days-2-again", follow_up(days, days_text, "And two more?"))
        assert second.prompt_tokens is not None and again.cached_prompt_tokens == second.prompt_tokens - 1
    finally:
        side.close()


def test_more_replies_than_slots_wait_their_turn_in_order(starter_model: str) -> None:
    side = InProcess(plan_for(starter_model, n_ctx=1024, n_parallel=2))
    sampling = SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True)
    try:
        for name in LISTS:
            side.runner.generate(request(name, LISTS[name][0], sampling))
        for name in LISTS:
            end = side.finished(name)
            assert isinstance(end, Finished) and end.stats.completion_tokens == sampling.max_tokens
        ends = [m.request_id for m in side.sent if isinstance(m, Finished)]
        # Two at a time, first come first served: the last two start only once the first two are done.
        assert set(ends[:2]) == {"numbers", "letters"} and set(ends[2:]) == {"days", "months"}
        assert side.slots_agree_with_llama_cpp()
    finally:
        side.close()


# --- attention in the cache the sequences share ------------------------------------------------------------
# Every sequence's cells are in one KV cache (llama.cpp's unified cache), so a query's attention runs over the
# other sequences' cells too, hidden from it by the mask; Hearth's patch to ggml passes over those without
# looking at each (packaging/llama_patches/0004-fa-skip-hidden-cells.patch).

PIECE = 16  # tokens per decode: a batch small enough for the path that gathers the cells a token sees


def _cells(start: int, count: int, salt: int) -> list[int]:
    return [(i * 7919 + salt) % 40000 + 100 for i in range(start, start + count)]


class SharedCache:
    """The starter model loaded as the runner loads it for several replies, driven with llama.cpp's calls."""

    def __init__(self, path: str) -> None:
        import llama_cpp

        self.runner = Runner(lambda _message: None)
        # Without guesses: batches take llama.cpp's own kernels, as several replies decoded together do.
        self.runner.load(LoadRequest(plan_for(path, n_ctx=4096, n_parallel=3)))
        model = self.runner._model
        assert model is not None and not model.draft_tokens
        self.ctx = model.llm.ctx
        self.vocab_bytes = model.llm.n_vocab() * 4
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.batch = llama_cpp.llama_batch_init(PIECE, 0, 1)

    def read(self, tokens: list[int], position: int, seq_id: int) -> None:
        """`tokens` in pieces of PIECE, at positions from `position` of sequence `seq_id`."""
        for start in range(0, len(tokens), PIECE):
            self.logits(tokens[start : start + PIECE], position + start, seq_id)

    def logits(self, tokens: list[int], position: int, seq_id: int) -> list[bytes]:
        import ctypes

        import llama_cpp

        assert _decode_every(self.ctx, self.batch, tokens, position, seq_id)
        return [
            ctypes.string_at(llama_cpp.llama_get_logits_ith(self.ctx, i), self.vocab_bytes)
            for i in range(len(tokens))
        ]

    def close(self) -> None:
        import llama_cpp

        llama_cpp.llama_batch_free(self.batch)
        self.runner.close()


def test_what_another_sequence_holds_never_reaches_a_replys_logits(starter_model: str) -> None:
    # The same layout of cells twice, the other sequence's cells before and after the reply's, holding other
    # tokens each time: the reply's logits, for a token alone (its attention split over the threads by
    # chunks of cells) and for a batch of four, are the same to the bit.
    prompt = _cells(0, 400, salt=0)
    seen: list[list[bytes]] = []
    for other_salt in (1, 2):
        cache = SharedCache(starter_model)
        try:
            cache.read(_cells(0, 320, other_salt), 0, seq_id=1)
            cache.read(prompt, 0, seq_id=0)
            cache.read(_cells(320, 480, other_salt), 320, seq_id=1)
            alone = cache.logits(_cells(400, 1, salt=3), 400, seq_id=0)
            together = cache.logits(_cells(401, 4, salt=3), 401, seq_id=0)
            seen.append(alone + together)
        finally:
            cache.close()
    assert seen[0] == seen[1]


def test_a_batch_among_other_sequences_cells_gets_the_logits_it_gets_alone_in_the_cache(
    starter_model: str,
) -> None:
    # A reply's prompt read piece by piece, in turn with another sequence's pieces (its cells between the
    # other's), then four of its tokens as one batch: the logits they get alone in the cache, to the bit.
    # Its cells are in the same order either way, and a batch's attention goes through the cells a token
    # sees in that order.
    import llama_cpp

    prompt = _cells(0, 12 * PIECE, salt=0)
    seen: list[list[bytes]] = []
    for beside_another in (False, True):
        cache = SharedCache(starter_model)
        try:
            for start in range(0, len(prompt), PIECE):
                cache.read(prompt[start : start + PIECE], start, seq_id=0)
                if beside_another:
                    cache.read(_cells(start, PIECE, salt=1), start, seq_id=1)
            if beside_another:
                assert llama_cpp.llama_memory_seq_pos_max(cache.memory, 1) == len(prompt) - 1
            seen.append(cache.logits(_cells(len(prompt), 4, salt=3), len(prompt), seq_id=0))
        finally:
            cache.close()
    assert seen[0] == seen[1]


@pytest.mark.parametrize("n_batch", [512, 32], ids=["one-batch", "several-batches"])
def test_the_first_token_comes_from_the_decode_that_reads_the_end_of_the_prompt(
    starter_model: str, n_batch: int
) -> None:
    """As llama-server reads a prompt: its last token goes in its last batch, whose logits give the first
    token. A decode of its own for that token would cost a whole token's time before anything is shown."""
    sent: list[object] = []
    runner = Runner(sent.append)
    runner.load(LoadRequest(replace(plan_for(starter_model, n_ctx=1024, n_parallel=1), n_batch=n_batch)))
    scheduler = runner._scheduler
    assert scheduler is not None
    try:
        for max_tokens in (1, 5):
            sent.clear()
            steps = scheduler._steps
            prompt = (
                f"({max_tokens}) Write a long story about a lighthouse keeper and the sea: winter storms, "
                "the ships that pass in the night, the gulls on the rocks and the long evenings by the lamp."
            )
            runner.generate(request("r", prompt, replace(LONG, max_tokens=max_tokens)))
            [ready] = [m for m in sent if isinstance(m, PromptReady)]
            [end] = [m for m in sent if isinstance(m, Finished)]
            assert end.stats.completion_tokens == max_tokens
            to_read = ready.prompt_tokens - end.stats.cached_prompt_tokens  # the second starts as the first
            assert to_read > (n_batch if n_batch == 32 else 0)
            reads = -(-to_read // n_batch)
            assert scheduler._steps - steps == reads + max_tokens - 1
    finally:
        runner.close()
