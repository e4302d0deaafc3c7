"""Prompt-lookup speculative decoding: the n-gram index, and the runner's decode loop with it on the real
starter model, against the same runner decoding plainly."""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

import pytest

from inference.decoding import TIMED_DECODES, _decode_at, _decode_every, _GuessCosts, rows_alone
from inference.prompt_lookup import MAX_NGRAM, MIN_NGRAM, PromptLookup
from inference.protocol import (
    ChatMessage,
    Finished,
    GenerateRequest,
    GenerationStats,
    LoadPlan,
    LoadRequest,
    SamplingParams,
    StopReason,
    TokenDelta,
)
from inference.runner import Runner, _prompt_tokens

# Prompt and reply within the first 256 positions (LONG_EDIT goes past them).
EDIT = (
    "Fix the typo in this paragraph and give back the whole paragraph: The river starts high in the "
    "mountains, where snow melts in the spring sun. It flows down through pine forests and green valleys, "
    "past small villages and old stone bridges, until it reachs the wide plain."
)
GREEDY = SamplingParams(temperature=0.0, max_tokens=120, seed=1)
# Past 256 positions, where ggml's attention for a single token would leave the path a batch takes, but for
# Hearth's patch (packaging/llama_patches/0003-batch-invariant-small-batches.patch).
LONG_EDIT = "Copy this code exactly, but rename total_price to order_total:\n\n" + "\n\n".join(
    f"def {name}(items, rate):\n    subtotal = 0\n    for item in items:\n"
    f"        subtotal += item.price * item.quantity\n    return subtotal * rate\n"
    for name in ("total_price", "discounted", "with_tax", "shipping", "insured", "wrapped")
)


def costs(one_token_s: float, per_guessed_token_s: float, per_drafted_token_s: float = 0.0005) -> _GuessCosts:
    """Decode costs as the runner would have measured them: what guess lengths pay is decided by them, so
    the tests fix them rather than depend on how fast this machine is right now. A draft model's step is
    cheap by default, as a real draft's is beside its model (the tests' draft is the model itself)."""
    return _GuessCosts(
        [one_token_s] * TIMED_DECODES,
        [per_guessed_token_s] * TIMED_DECODES,
        [per_drafted_token_s] * TIMED_DECODES,
    )


# A GPU's: a batch of a dozen costs little more than one token. A small model on two CPU cores: each
# guessed token costs nearly what a token alone does.
CHEAP_GUESSES = costs(0.010, 0.0005)
DEAR_GUESSES = costs(0.010, 0.009)


def reference_draft(history: list[int], limit: int) -> list[int]:
    """The same rule, spelled out by scanning: the longest tail n-gram's last earlier occurrence."""
    for size in range(MAX_NGRAM, MIN_NGRAM - 1, -1):
        if len(history) <= size:
            continue
        tail = history[-size:]
        for end in range(len(history) - 2, size - 2, -1):
            if history[end - size + 1 : end + 1] == tail:
                return history[end + 1 : end + 1 + limit]
    return []


def test_a_draft_follows_the_longest_earlier_match() -> None:
    # (2, 3) last came before 9; (1, 2, 3), longer, before 8: the longer one wins.
    lookup = PromptLookup([1, 2, 3, 8, 5, 2, 3, 9, 1, 2, 3])
    assert lookup.draft(3) == [8, 5, 2]
    assert lookup.draft(0) == []


def test_a_tail_never_matches_itself_and_one_token_is_no_match() -> None:
    assert PromptLookup([1, 2]).draft(4) == []
    assert PromptLookup([5, 6, 7, 5]).draft(4) == []  # only 5 repeats: below MIN_NGRAM
    repeated = PromptLookup([1, 2, 1, 2])
    assert repeated.draft(4) == [1, 2]
    repeated.append(7)
    assert repeated.draft(4) == []


def test_appending_token_by_token_drafts_as_the_scan_does() -> None:
    rng = random.Random(7)
    for _ in range(200):
        history = [rng.randrange(6) for _ in range(rng.randrange(1, 40))]
        lookup = PromptLookup(history[:1])
        for count, token in enumerate(history[1:], start=2):
            lookup.append(token)
            assert lookup.draft(5) == reference_draft(history[:count], 5), history[:count]


# --- the runner ------------------------------------------------------------------------------------


class Loaded:
    def __init__(self, plan: LoadPlan) -> None:
        self.sent: list[object] = []
        self.runner = Runner(self.sent.append)
        self.runner.load(LoadRequest(plan))
        assert self.runner._model is not None, self.sent

    def reply(
        self,
        messages: tuple[ChatMessage, ...],
        sampling: SamplingParams,
        extra_stop: tuple[str, ...] = (),
        json_schema: str | None = None,
    ) -> tuple[str, GenerationStats]:
        self.sent.clear()
        self.runner.generate(
            GenerateRequest("t", messages, sampling, extra_stop=extra_stop, json_schema=json_schema)
        )
        [finished] = [m for m in self.sent if isinstance(m, Finished)]
        return "".join(m.text for m in self.sent if isinstance(m, TokenDelta)), finished.stats

    def pay_for_guesses(self, guess_costs: _GuessCosts) -> None:
        assert self.runner._model is not None
        # A copy: the runner adds to lists that are not full yet, and the costs are shared between tests.
        self.runner._model.guess_costs = copy.deepcopy(guess_costs)

    def forget(self) -> None:
        """An empty cache: the next prompt is read whole. Replies compared between two runners must have
        read their prompts in the same pieces (a prompt read in other batches holds other bits)."""
        import llama_cpp

        model = self.runner._model
        assert model is not None
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(model.llm.ctx), True)
        for slot in model.slots:
            slot.emptied()

    def cache_agrees(self) -> bool:
        """What the runner records as cached is exactly what llama.cpp's memory holds."""
        import llama_cpp

        model = self.runner._model
        assert model is not None
        memory = llama_cpp.llama_get_memory(model.llm.ctx)
        return int(llama_cpp.llama_memory_seq_pos_max(memory, 0)) + 1 == len(model.slots[0].cached)


def starter_plan(n_ctx: int = 1024) -> LoadPlan:
    """The starter model on the CPU with flash attention, as a model with guesses loads (skips without it)."""
    from tests.conftest import starter_model_file

    path = starter_model_file()
    if path is None:
        pytest.skip("the starter model is not installed")
    return LoadPlan(
        model_path=str(path), n_ctx=n_ctx, n_gpu_layers=0, n_layers=30, flash_attn=True, n_threads=2
    )


@contextmanager
def plain_and_guessing(guessing: LoadPlan) -> Iterator[tuple[Loaded, Loaded]]:
    """The plan loaded twice, without guesses and with them, each replying with the kernels its load chose:
    the replies compared are those of a model loaded without speculative decoding and with it."""
    plain, guesses = Loaded(replace(guessing, draft_tokens=0, draft_model_path=None)), Loaded(guessing)
    try:
        yield plain, guesses
    finally:
        for side in (plain, guesses):
            side.runner.close()


@pytest.fixture(scope="module")
def runners() -> Iterator[tuple[Loaded, Loaded]]:
    with plain_and_guessing(replace(starter_plan(), draft_tokens=12)) as pair:
        yield pair


def batched_logits_are_exact(pair: tuple[Loaded, Loaded], prompt: str = EDIT, n: int = 8) -> bool:
    """Whether this machine's kernels give a batch of the prompt's last `n` tokens, at its depth, the logits
    each gets decoded alone: what an identical reply rests on. Checked on the guessing side of the pair;
    both sides' caches are emptied, so that the replies compared next read their prompts alike."""
    plain, side = pair
    plain.forget()
    import ctypes

    import llama_cpp

    model = side.runner._model
    assert model is not None
    ctx = model.llm.ctx
    _, tokens = _prompt_tokens(model, (ChatMessage("user", prompt),))
    memory = llama_cpp.llama_get_memory(ctx)
    size = model.llm.n_vocab() * ctypes.sizeof(ctypes.c_float)
    batch = llama_cpp.llama_batch_init(n, 0, 1)
    try:
        side.forget()
        start = _decode_at(ctx, tokens[:-n], 0, model.plan.n_batch)
        alone = []
        for i, token in enumerate(tokens[-n:]):
            assert _decode_every(ctx, batch, [token], start + i)
            alone.append(ctypes.string_at(llama_cpp.llama_get_logits_ith(ctx, 0), size))
        llama_cpp.llama_memory_seq_rm(memory, 0, start, -1)
        with rows_alone():  # as the runner decodes a guess
            assert _decode_every(ctx, batch, tokens[-n:], start)
        together = [ctypes.string_at(llama_cpp.llama_get_logits_ith(ctx, i), size) for i in range(n)]
    finally:
        llama_cpp.llama_batch_free(batch)
        side.forget()
    return alone == together


@pytest.mark.model
@pytest.mark.parametrize(
    "sampling", [GREEDY, SamplingParams(temperature=0.8, max_tokens=120, seed=11)], ids=["greedy", "sampled"]
)
def test_a_reply_with_prompt_lookup_is_the_plain_reply_in_fewer_steps(
    runners: tuple[Loaded, Loaded], sampling: SamplingParams
) -> None:
    """Each token is still sampled from its own position's logits, in order, with the same sampler: the
    guesses only decide which positions are decoded together. At temperature 0 and with a seed alike."""
    plain, lookup = runners
    if not batched_logits_are_exact(runners):
        pytest.skip("this machine's kernels round a batch differently from single tokens at this depth")
    lookup.pay_for_guesses(CHEAP_GUESSES)
    messages = (ChatMessage("user", EDIT),)
    expected, plain_stats = plain.reply(messages, sampling)
    text, stats = lookup.reply(messages, sampling)
    assert text == expected and stats.completion_tokens == plain_stats.completion_tokens
    assert plain_stats.drafted_tokens == 0
    if sampling is GREEDY:
        # The greedy reply copies the paragraph back: most of it is guessed, and kept.
        assert stats.accepted_draft_tokens > stats.completion_tokens // 3
    assert 0 < stats.accepted_draft_tokens <= stats.drafted_tokens
    assert lookup.cache_agrees()


@pytest.mark.model
def test_a_reply_cut_during_a_guess_leaves_the_cache_as_the_runner_records_it(
    runners: tuple[Loaded, Loaded],
) -> None:
    """A stop string or the token budget met inside a guess: the positions guessed past it are dropped, so
    the next turn reuses exactly the prefix the cache holds and replies as a plain runner does."""
    plain, lookup = runners
    exact = batched_logits_are_exact(runners)
    lookup.pay_for_guesses(CHEAP_GUESSES)
    first = (ChatMessage("user", EDIT),)
    turns = [(first, replace(GREEDY), ("villages",)), (first, replace(GREEDY, max_tokens=30), ())]
    # The plain side takes the same turns: its cache then holds what the guessing side's does.
    for messages, sampling, stops in turns:
        plain.reply(messages, sampling, extra_stop=stops)
    _, stats = lookup.reply(*turns[0][:2], extra_stop=turns[0][2])
    assert stats.stop_reason is StopReason.STOP_STRING and stats.drafted_tokens > 0
    assert lookup.cache_agrees()
    cut, cut_stats = lookup.reply(*turns[1][:2])
    assert cut_stats.stop_reason is StopReason.MAX_TOKENS and cut_stats.completion_tokens == 30
    assert cut_stats.drafted_tokens > 0 and lookup.cache_agrees()

    follow_up = (*first, ChatMessage("assistant", cut), ChatMessage("user", "Say it again."))
    reply, reply_stats = lookup.reply(follow_up, replace(GREEDY, max_tokens=40))
    assert reply_stats.cached_prompt_tokens > 0 and lookup.cache_agrees()
    expected, _ = plain.reply(follow_up, replace(GREEDY, max_tokens=40))
    if exact:
        assert reply == expected


@pytest.mark.model
def test_guesses_stop_where_a_batch_costs_nearly_a_token_per_token(runners: tuple[Loaded, Loaded]) -> None:
    """The same reply either way; with decode costs of a compute-bound CPU most of the guessing stops."""
    _, lookup = runners
    messages = (ChatMessage("user", EDIT),)
    lookup.pay_for_guesses(CHEAP_GUESSES)
    cheap_text, cheap = lookup.reply(messages, GREEDY)
    lookup.pay_for_guesses(DEAR_GUESSES)
    dear_text, dear = lookup.reply(messages, GREEDY)
    assert dear_text == cheap_text
    assert dear.drafted_tokens < cheap.drafted_tokens // 2


@pytest.mark.model
def test_decode_costs_are_timed_then_fixed_for_the_load(runners: tuple[Loaded, Loaded]) -> None:
    """The first steps are timed, alone and with guesses; after TIMED_DECODES of each the costs stay as they
    are, so later replies with the same seed are decided by the same costs."""
    _, lookup = runners
    lookup.pay_for_guesses(_GuessCosts())
    assert lookup.runner._model is not None
    measured = lookup.runner._model.guess_costs
    for _ in range(4):
        if measured.per_guessed_token_s is not None:
            break
        lookup.reply((ChatMessage("user", EDIT),), GREEDY)
    assert measured.one_token_s is not None and measured.one_token_s > 0
    assert measured.per_guessed_token_s is not None
    fixed = (list(measured.one_token), list(measured.per_guessed_token))
    lookup.reply((ChatMessage("user", EDIT),), GREEDY)
    assert (measured.one_token, measured.per_guessed_token) == fixed


@pytest.mark.model
def test_a_reply_held_to_a_json_schema_is_guessed_too_and_stays_the_plain_reply(
    runners: tuple[Loaded, Loaded],
) -> None:
    """The grammar sees only the tokens sampled, position by position, as in plain decoding: guesses it
    refuses are simply not kept."""
    plain, lookup = runners
    if not batched_logits_are_exact(runners):
        pytest.skip("this machine's kernels round a batch differently from single tokens at this depth")
    lookup.pay_for_guesses(CHEAP_GUESSES)
    schema = {"type": "object", "properties": {"paragraph": {"type": "string"}}, "required": ["paragraph"]}
    messages = (ChatMessage("user", EDIT + ' Answer in JSON, the paragraph under "paragraph".'),)
    expected, plain_stats = plain.reply(messages, GREEDY, json_schema=json.dumps(schema))
    text, stats = lookup.reply(messages, GREEDY, json_schema=json.dumps(schema))
    assert text == expected and stats.completion_tokens == plain_stats.completion_tokens
    assert json.loads(text)["paragraph"].startswith("The river starts high in the mountains")
    assert 0 < stats.accepted_draft_tokens <= stats.drafted_tokens
    assert lookup.cache_agrees()


@pytest.mark.model
def test_past_512_positions_a_reply_with_prompt_lookup_is_still_the_plain_reply(
    runners: tuple[Loaded, Loaded],
) -> None:
    """llama.cpp's own kernels split a single token's attention over the threads past 256 positions, and
    the rows of a batch not: Hearth's patch computes both in the same fixed chunks, so the long edit is
    given back the same by a load with prompt lookup and one without."""
    plain, lookup = runners
    lookup.pay_for_guesses(CHEAP_GUESSES)
    messages = (ChatMessage("user", LONG_EDIT),)
    assert (lookup.reply(messages, GREEDY)[1].prompt_tokens or 0) > 256
    if not batched_logits_are_exact(runners, LONG_EDIT):
        pytest.skip("this machine's matrix kernels round a batch differently from single tokens")
    # On past the end of its turn, so that the reply surely goes past 512 positions.
    long_greedy = replace(GREEDY, max_tokens=320, ignore_eos=True)
    expected, plain_stats = plain.reply(messages, long_greedy)
    text, stats = lookup.reply(messages, long_greedy)
    assert text == expected and stats.accepted_draft_tokens > 0
    assert (plain_stats.prompt_tokens or 0) + plain_stats.completion_tokens > 512


@pytest.mark.model
def test_deep_in_the_cache_a_token_gets_the_same_logits_on_one_thread_as_on_two() -> None:
    """The chunks of a single token's attention do not follow the thread count (llama.cpp's split gives
    each thread one part of the cache): a token decoded deep in the cache gets the same logits whatever
    the model's threads setting."""
    import ctypes

    import llama_cpp

    tokens = [(i * 7919) % 40000 + 100 for i in range(700)]
    logits = []
    for threads in (1, 2):
        side = Loaded(replace(starter_plan(), n_threads=threads))
        try:
            model = side.runner._model
            assert model is not None
            ctx = model.llm.ctx
            start = _decode_at(ctx, tokens[:-1], 0, model.plan.n_batch)
            batch = llama_cpp.llama_batch_init(1, 0, 1)
            try:
                assert _decode_every(ctx, batch, tokens[-1:], start)
            finally:
                llama_cpp.llama_batch_free(batch)
            size = model.llm.n_vocab() * ctypes.sizeof(ctypes.c_float)
            logits.append(ctypes.string_at(llama_cpp.llama_get_logits_ith(ctx, 0), size))
        finally:
            side.runner.close()
    assert logits[0] == logits[1]
