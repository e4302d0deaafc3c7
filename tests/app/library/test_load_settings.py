"""Per-model load settings: validation, the round trip through the library's database, the planner and the
estimator following them, and a real load of the starter model with them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.chat.engine import ChatEngine
from app.core import Core
from app.errors import HearthError
from app.library.installed import ModelLibrary
from app.library.load_settings import (
    PROMPT_LOOKUP_TOKENS,
    ModelLoadSettings,
    from_json,
    load_settings_problems,
    parse_value,
    plan_model_load,
    with_values,
)
from app.library.model_ops import installed_load_plan
from inference.estimator import predict_memory, within_bar
from inference.gguf import GGUFHeader
from inference.hardware import GpuInfo, HardwareReport, probe_hardware
from inference.protocol import LoadPlan
from tests.conftest import starter_name
from tests.helpers.model_shapes import MIB, hardware, llama3_8b

NO_GPU = hardware(vram_mib=None, ram_mib=32768)


def two_gpus() -> HardwareReport:
    gpus = (
        GpuInfo(0, "RTX A", 24576, 24576, 0, "555.42", "12.5"),
        GpuInfo(1, "RTX B", 12288, 12288, 0, "555.42", "12.5"),
    )
    return HardwareReport(gpus, "", 65536, 65536, 8, 16)


@pytest.fixture(scope="module")
def q4(tmp_path_factory: pytest.TempPathFactory) -> GGUFHeader:
    return llama3_8b(tmp_path_factory.mktemp("llama3-8b"), "Q4_K_M")


def plan(
    header: GGUFHeader, machine: HardwareReport, settings: ModelLoadSettings, context: int = 8192
) -> LoadPlan:
    return plan_model_load(
        "/models/m.gguf",
        header,
        machine,
        settings,
        context_length=context,
        global_gpu_layers="auto",
        global_threads=None,
        gpu_offload_supported=True,
    )


def test_a_quantized_v_cache_without_flash_attention_is_explained() -> None:
    settings = ModelLoadSettings(kv_cache_type="q4_0", flash_attention="off")
    assert load_settings_problems(settings, n_layers=30, hardware=NO_GPU) == (
        "A quantized V cache (q4_0) needs flash attention: set flash_attention=on or auto.",
    )
    assert (
        load_settings_problems(
            ModelLoadSettings(kv_cache_type="f16", flash_attention="off"), n_layers=30, hardware=NO_GPU
        )
        == ()
    )


def test_impossible_gpu_settings_are_explained() -> None:
    too_many = ModelLoadSettings(gpu_layers=31)
    assert load_settings_problems(too_many, n_layers=30, hardware=NO_GPU) == (
        "gpu_layers=31 is more than the model's 30 layers: use 30 to put all of them on the GPU, or auto.",
    )
    [no_gpu] = load_settings_problems(ModelLoadSettings(main_gpu=0), n_layers=30, hardware=NO_GPU)
    assert no_gpu == "main_gpu=0 names no GPU: no GPU was found — no NVIDIA GPU found."
    one = hardware(vram_mib=8192, ram_mib=32768)
    [split] = load_settings_problems(ModelLoadSettings(tensor_split=(1.0, 1.0)), n_layers=30, hardware=one)
    assert (
        split == "tensor_split spreads a model over several GPUs, but this machine has 1 GPU (0: RTX Test)."
    )
    [count] = load_settings_problems(
        ModelLoadSettings(tensor_split=(1.0, 1.0, 1.0)), n_layers=30, hardware=two_gpus()
    )
    assert count.startswith("tensor_split has 3 shares, but this machine has 2 GPUs (0: RTX A, 1: RTX B)")
    both = ModelLoadSettings(main_gpu=1, tensor_split=(3.0, 1.0))
    [exclusive] = load_settings_problems(both, n_layers=30, hardware=two_gpus())
    assert exclusive.startswith("main_gpu and tensor_split exclude each other")
    assert load_settings_problems(ModelLoadSettings(threads=17), n_layers=30, hardware=NO_GPU) == (
        "threads=17 is more than this machine's 16 logical CPUs.",
    )
    fine = ModelLoadSettings(gpu_layers=30, tensor_split=(3.0, 1.0), threads=16)
    assert load_settings_problems(fine, n_layers=30, hardware=two_gpus()) == ()


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("kv_cache_type", "q5_1", "kv_cache_type must be one of f16, q8_0, q4_0"),
        ("flash_attention", "maybe", "flash_attention must be one of auto, on, off"),
        ("gpu_layers", -1, 'gpu_layers must be "auto" or a number of layers'),
        ("threads", 0, "threads must be a number from 1 to 1024"),
        ("context_length", True, "context_length must be a number of tokens"),
        ("tensor_split", [0, 0], "tensor_split must be one share per GPU, none negative and not all zero"),
        ("mlock", 1, "mlock must be true or false"),
        ("prompt_lookup", "yes", "prompt_lookup must be true or false"),
        ("batch", 1, "Unknown load setting 'batch'"),
    ],
)
def test_values_of_the_wrong_kind_are_refused(key: str, value: object, message: str) -> None:
    with pytest.raises(HearthError, match=message.replace("(", r"\(")):
        with_values(ModelLoadSettings(), {key: value})


def test_command_line_values() -> None:
    assert parse_value("tensor_split", "3,1") == [3.0, 1.0]
    assert parse_value("mlock", "on") is True
    assert parse_value("prompt_lookup", "off") is False
    assert parse_value("gpu_layers", "auto") == "auto"
    assert parse_value("gpu_layers", "12") == 12
    assert parse_value("kv_cache_type", "") is None  # empty: automatic
    assert parse_value("flash_attention", "") == "auto"
    with pytest.raises(HearthError, match="threads must be a whole number, not 'many'"):
        parse_value("threads", "many")


def test_settings_round_trip_through_the_library(library: ModelLibrary, starter_model: Path) -> None:
    model = library.register_starter()
    assert model is not None and model.load_settings == ModelLoadSettings()
    settings = ModelLoadSettings(
        kv_cache_type="q8_0",
        flash_attention="on",
        gpu_layers=0,
        threads=2,
        mlock=True,
        context_length=2048,
        prompt_lookup=True,
    )
    library.set_load_settings(model.name, settings, NO_GPU)
    assert library.get(model.name).load_settings == settings
    library.set_load_settings(model.name, ModelLoadSettings(), NO_GPU)
    assert library.get(model.name).load_settings.automatic


def test_settings_that_cannot_work_are_not_stored(library: ModelLibrary, starter_model: Path) -> None:
    model = library.register_starter()
    assert model is not None
    bad = ModelLoadSettings(kv_cache_type="q8_0", flash_attention="off")
    with pytest.raises(HearthError, match="needs flash attention"):
        library.set_load_settings(model.name, bad, NO_GPU)
    assert library.get(model.name).load_settings.automatic


def test_unusable_stored_values_fall_back_to_automatic() -> None:
    settings = from_json('{"kv_cache_type": "q2_k", "threads": 4, "someday": 1}')
    assert settings == ModelLoadSettings(threads=4)


def test_automatic_settings_plan_as_before(q4: GGUFHeader) -> None:
    machine = hardware(vram_mib=8192, ram_mib=32768)
    automatic = plan(q4, machine, ModelLoadSettings(), context=32768)
    assert (automatic.kv_type, automatic.flash_attn) == ("q8_0", True)  # quantized to fit, as before
    assert "set for this model" not in automatic.reason


def test_the_planner_follows_the_settings(q4: GGUFHeader) -> None:
    machine = hardware(vram_mib=24576, ram_mib=32768)
    fixed = plan(
        q4,
        machine,
        ModelLoadSettings(kv_cache_type="q4_0", flash_attention="on", gpu_layers=10, threads=3, mlock=True),
    )
    assert (fixed.kv_type, fixed.flash_attn, fixed.n_gpu_layers, fixed.n_threads, fixed.use_mlock) == (
        "q4_0",
        True,
        10,
        3,
        True,
    )
    assert fixed.reason.endswith(
        "set for this model: kv_cache_type=q4_0, flash_attention=on, gpu_layers=10, threads=3, mlock=true"
    )
    off = plan(q4, machine, ModelLoadSettings(flash_attention="off"))
    assert (off.flash_attn, off.kv_type) == (False, "f16")


def test_prompt_lookup_reaches_the_plan_with_flash_attention_unless_it_is_off(q4: GGUFHeader) -> None:
    """Flash attention is what makes ggml's CPU kernels give a guessed batch the logits of plain decoding
    (bench/speculative.py), so Auto turns it on; a user's Off stays off."""
    machine = hardware(vram_mib=None, ram_mib=32768)
    automatic = plan(q4, machine, ModelLoadSettings())
    assert (automatic.draft_tokens, automatic.flash_attn) == (0, False)
    lookup = plan(q4, machine, ModelLoadSettings(prompt_lookup=True))
    assert (lookup.draft_tokens, lookup.flash_attn) == (PROMPT_LOOKUP_TOKENS, True)
    assert lookup.reason.endswith("set for this model: prompt_lookup=true")
    off = plan(q4, machine, ModelLoadSettings(prompt_lookup=True, flash_attention="off"))
    assert (off.draft_tokens, off.flash_attn) == (PROMPT_LOOKUP_TOKENS, False)


def test_flash_attention_off_never_quantizes_the_cache_to_fit(q4: GGUFHeader) -> None:
    """Where the automatic plan would quantize the cache, f16 stays and the context gives way instead."""
    machine = hardware(vram_mib=8192, ram_mib=32768)
    off = plan(q4, machine, ModelLoadSettings(flash_attention="off"), context=32768)
    assert (off.kv_type, off.flash_attn) == ("f16", False)
    assert off.n_ctx < 32768 and "(KV cache f16) to fit" in off.reason


def test_main_gpu_and_split_reach_the_plan(q4: GGUFHeader) -> None:
    on_second = plan(q4, two_gpus(), ModelLoadSettings(main_gpu=1))
    assert on_second.main_gpu == 1 and on_second.reason.startswith("CUDA · 32/32 layers on RTX B")
    split = plan(q4, two_gpus(), ModelLoadSettings(tensor_split=(3.0, 1.0)))
    assert split.tensor_split == (3.0, 1.0) and split.main_gpu is None
    assert "the estimate counts the GPU with the most free memory alone" in split.reason
    # The GPUs named when the settings were saved may be gone since: the load goes on without them.
    gone = plan(q4, hardware(vram_mib=24576, ram_mib=32768), ModelLoadSettings(main_gpu=1))
    assert gone.main_gpu is None and "main GPU 1 not found" in gone.reason
    unsplit = plan(q4, hardware(vram_mib=24576, ram_mib=32768), ModelLoadSettings(tensor_split=(3.0, 1.0)))
    assert unsplit.tensor_split is None and "GPU split of 2 not used: 1 GPU(s) found" in unsplit.reason


def test_a_quantized_cache_predicts_less_kv_memory(q4: GGUFHeader) -> None:
    f16 = predict_memory(q4, context=8192, n_gpu_layers=0, kv_type="f16", flash_attn=True)
    q8 = predict_memory(q4, context=8192, n_gpu_layers=0, kv_type="q8_0", flash_attn=True)
    q4_0 = predict_memory(q4, context=8192, n_gpu_layers=0, kv_type="q4_0", flash_attn=True)
    assert f16.kv == 1024 * MIB and q8.kv == f16.kv * 34 // 64 and q4_0.kv < q8.kv
    planned = {
        kv: plan(q4, NO_GPU, ModelLoadSettings(kv_cache_type=kv)).predicted_bytes["kv"]
        for kv in ("f16", "q8_0")
    }
    assert planned == {"f16": f16.kv, "q8_0": q8.kv}
    shorter = plan(q4, NO_GPU, ModelLoadSettings(context_length=2048), context=2048)
    assert shorter.n_ctx == 2048 and shorter.predicted_bytes["kv"] == f16.kv // 4


def test_the_fit_of_an_installed_model_follows_its_settings(core: Core, starter_model: Path) -> None:
    model = core.library.get(starter_name(core))
    machine = probe_hardware()
    automatic = installed_load_plan(model, ModelLoadSettings(), core.settings, machine)
    quantized = installed_load_plan(
        model, ModelLoadSettings(kv_cache_type="q8_0", context_length=2048), core.settings, machine
    )
    assert (automatic.n_ctx, automatic.kv_type) == (core.settings.context_length, "f16")
    assert (quantized.n_ctx, quantized.kv_type, quantized.flash_attn) == (2048, "q8_0", True)
    assert quantized.predicted_bytes["kv"] < automatic.predicted_bytes["kv"] // 2


@pytest.mark.model
def test_a_real_load_uses_the_settings(core: Core, make_engine: Callable[..., ChatEngine]) -> None:
    """The starter model loaded by the engine with a q8_0 cache, flash attention on, 2 threads and a
    2,048-token context from its load settings: llama.cpp's context and KV buffer are what was set and what
    the estimator predicted; a changed setting loads it again."""
    name = starter_name(core)
    settings = ModelLoadSettings(kv_cache_type="q8_0", flash_attention="on", threads=2, context_length=2048)
    core.library.set_load_settings(name, settings, probe_hardware())
    engine = make_engine()
    loaded = engine.ensure_loaded(name)
    plan = engine.client.plan
    assert plan is not None and (plan.kv_type, plan.flash_attn, plan.n_threads) == ("q8_0", True, 2)
    assert loaded.n_ctx == 2048
    # 30 layers × 2048 cells × 3 KV heads × (64 + 64) dims, in q8_0 blocks of 32 elements in 34 bytes.
    # llama.cpp's log gives MiB to two decimals.
    assert abs(loaded.memory_bytes["kv"] - 30 * 2048 * 3 * 128 * 34 // 32) <= MIB // 100
    for key in ("weights", "kv", "compute"):
        assert within_bar(loaded.predicted_bytes[key], loaded.memory_bytes[key]), key
    assert engine.generation_settings(None, name).context_length == 2048

    core.library.set_load_settings(name, ModelLoadSettings(context_length=1024), probe_hardware())
    reloaded = engine.ensure_loaded(name)
    assert reloaded.n_ctx == 1024 and abs(reloaded.memory_bytes["kv"] - 1024 * 30 * 3 * 128 * 2) <= MIB // 100
