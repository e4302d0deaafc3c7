"""Speculative decoding on a mixture-of-experts model: the experts' matrix products (llama.cpp's MUL_MAT_ID,
which the dense models of the other tests never reach) must give a batch of guesses the logits each token
gets alone, or a reply with guesses is not the reply without them. The model is a tiny random one
(tests/helpers/moe_model.py): what is checked is bits, not words."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from inference.protocol import ChatMessage, LoadPlan
from tests.helpers.moe_model import N_BLOCKS, write_tiny_moe
from tests.helpers.quantize import quantize
from tests.inference.test_prompt_lookup import (
    CHEAP_GUESSES,
    EDIT,
    GREEDY,
    LONG_EDIT,
    Loaded,
    batched_logits_are_exact,
    plain_and_guessing,
    starter_plan,
)

pytestmark = pytest.mark.model

# The most tokens a batch of guesses holds that Hearth's patch still gives each token the kernels it gets
# alone (packaging/llama_patches/0003-batch-invariant-small-batches.patch).
SMALL_BATCH = 16


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_moe(tmp_path_factory.mktemp("moe") / "tiny-moe.F32.gguf")


@pytest.fixture(scope="module")
def dense_batches_are_exact() -> bool:
    """Whether the starter model's batches get the logits of single tokens on this machine: where its dense
    kernels already round a batch differently (AMX), what the experts do cannot be told apart."""
    with plain_and_guessing(replace(starter_plan(), draft_tokens=12)) as pair:
        return batched_logits_are_exact(pair, LONG_EDIT)


def moe_plan(path: Path) -> LoadPlan:
    return LoadPlan(
        model_path=str(path),
        n_ctx=2048,
        n_gpu_layers=0,
        n_layers=N_BLOCKS,
        flash_attn=True,
        n_threads=2,
        draft_tokens=12,
    )


@pytest.fixture(scope="module", params=["Q4_0", "Q4_K_M", "Q8_0", "F16"])
def moe_pair(request: pytest.FixtureRequest, tiny_moe: Path) -> Iterator[tuple[Loaded, Loaded]]:
    ftype: str = request.param
    model = quantize(tiny_moe, tiny_moe.with_name(f"tiny-moe.{ftype}.gguf"), ftype)
    with plain_and_guessing(moe_plan(model)) as pair:
        yield pair


@pytest.mark.parametrize("prompt", [EDIT, LONG_EDIT], ids=["shallow", "past-512"])
def test_experts_give_each_token_of_a_batch_the_logits_it_gets_alone(
    moe_pair: tuple[Loaded, Loaded], dense_batches_are_exact: bool, prompt: str
) -> None:
    if not dense_batches_are_exact:
        pytest.skip("this machine's dense kernels round a batch differently from single tokens")
    _plain, guessing = moe_pair
    assert guessing.runner._model is not None and guessing.runner._model.draft_tokens
    depth = len(guessing.runner._model.llm.tokenize(prompt.encode()))
    assert depth > (512 if prompt is LONG_EDIT else 100)
    assert batched_logits_are_exact(moe_pair, prompt, SMALL_BATCH)


def test_a_moe_reply_with_prompt_lookup_is_the_plain_reply(
    moe_pair: tuple[Loaded, Loaded], dense_batches_are_exact: bool
) -> None:
    if not dense_batches_are_exact:
        pytest.skip("this machine's dense kernels round a batch differently from single tokens")
    plain, lookup = moe_pair
    lookup.pay_for_guesses(CHEAP_GUESSES)
    messages = (ChatMessage("user", LONG_EDIT),)
    greedy = replace(GREEDY, max_tokens=200, ignore_eos=True)
    plain.forget()
    lookup.forget()
    expected, plain_stats = plain.reply(messages, greedy)
    text, stats = lookup.reply(messages, greedy)
    assert plain_stats.drafted_tokens == 0
    assert text == expected and stats.completion_tokens == plain_stats.completion_tokens == 200
    assert stats.accepted_draft_tokens > 0
    assert lookup.cache_agrees()
