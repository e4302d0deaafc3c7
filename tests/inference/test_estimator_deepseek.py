"""inference.estimator on DeepSeek shapes: multi-head latent attention (the KV cache holds the compressed
latent and the rope part only) and mixture-of-experts layers (routed experts that may stay in system memory),
on header-only files shaped like DeepSeek-V2-Lite and DeepSeek-R1-Distill-Qwen-7B
(tests/helpers/model_shapes.py),
against hand-computed bytes and against llama.cpp's own sizing (a no_alloc dry run)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from inference.estimator import (
    CUDA_CONTEXT_BYTES,
    GPU_TO_CPU_BANDWIDTH,
    ModelProfile,
    estimate_fit,
    predict_memory,
    profile_model,
    within_bar,
)
from inference.gguf import read_header
from tests.helpers.model_shapes import (
    MIB,
    deepseek_v2_lite_file,
    dry_run,
    hardware,
    r1_distill_qwen_7b_file,
)

# Q8_0 stores 32 weights in 34 bytes; norms and the router are F32 (4 bytes).
# DeepSeek-V2-Lite, one layer's attention (MLA file): attn_q 2048·(16·192) = 6,291,456 + attn_kv_a_mqa
# 2048·(512+64) = 1,179,648 + attn_k_b 128·512·16 = 1,048,576 + attn_v_b 512·128·16 = 1,048,576 + attn_output
# (16·128)·2048 = 4,194,304 = 13,762,560 weights; norms 2048 + 512 + 2048 floats.
ATTENTION = 13_762_560 * 34 // 32 + (2048 + 512 + 2048) * 4  # 14,641,152
# Layer 0 is dense: gate, up, down of 2048·10944 = 67,239,936 weights.
DENSE_LAYER = ATTENTION + 67_239_936 * 34 // 32  # 86,083,584
# Layers 1–26 are MoE: each of ffn_{gate,up,down}_exps holds 64 experts of 2048·1408 = 184,549,376 weights,
# the two shared experts are ffn_*_shexp of 2048·2816 (3 × 5,767,168), the router 2048·64 floats.
EXPERT_TENSOR = 184_549_376 * 34 // 32  # 196,083,712
EXPERTS = 3 * EXPERT_TENSOR  # 588,251,136
MOE_LAYER = ATTENTION + EXPERTS + 3 * 5_767_168 * 34 // 32 + 2048 * 64 * 4  # 621,799,424
# token_embd and output: 2048·102400 = 209,715,200 weights each (output_norm: 2048 floats more).
EMBD = 209_715_200 * 34 // 32  # 222,822,400
OUTPUT = EMBD + 2048 * 4  # 222,830,592
# MLA KV cache (f16): K only, kv_lora_rank + rope = 576 values per token per layer; V is a view of it.
MLA_KV_PER_TOKEN = 27 * 576 * 2  # 31,104 bytes
# The same model in an older file (no *_mla keys): 16 full heads of K 192 and V 128.
LEGACY_KV_PER_TOKEN = 27 * 16 * (192 + 128) * 2  # 276,480 bytes
# DeepSeek-R1-Distill-Qwen-7B (Qwen2): 28 layers × 4 KV heads × (128 + 128) × 2 bytes = 56 KiB per token.
QWEN_KV_PER_TOKEN = 28 * 4 * 256 * 2  # 57,344 bytes
# One Qwen layer: q, o 3584² + k, v 3584·512 + FFN 3·3584·18944 = 233,046,016 weights; F32 norms and biases
# 2·3584 + 3584 + 512 + 512 floats.
QWEN_LAYER = 233_046_016 * 34 // 32 + (2 * 3584 + 3584 + 512 + 512) * 4  # 247,658,496


@pytest.fixture(scope="module")
def lite(tmp_path_factory: pytest.TempPathFactory) -> ModelProfile:
    return profile_model(read_header(deepseek_v2_lite_file(tmp_path_factory.mktemp("dsv2"))))


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> ModelProfile:
    return profile_model(read_header(r1_distill_qwen_7b_file(tmp_path_factory.mktemp("qwen"))))


# --- weights ---------------------------------------------------------------------------------------------


def test_deepseek_v2_lite_weights_come_from_the_tensor_table(lite: ModelProfile) -> None:
    assert lite.layer_bytes == (DENSE_LAYER, *(MOE_LAYER,) * 26)
    assert lite.expert_bytes == (0, *(EXPERTS,) * 26)
    assert lite.max_expert_tensor_bytes == EXPERT_TENSOR
    assert (lite.n_expert, lite.n_expert_used) == (64, 6)
    assert lite.input_bytes == EMBD and lite.output_bytes == OUTPUT
    assert lite.notes == ()


def test_r1_distill_qwen_7b_weights_and_no_experts(qwen: ModelProfile) -> None:
    assert qwen.layer_bytes == (QWEN_LAYER,) * 28
    assert qwen.expert_bytes == (0,) * 28
    assert not qwen.kv_k_only


# --- KV cache --------------------------------------------------------------------------------------------


def test_mla_kv_cache_holds_the_latent_and_rope_part_only(lite: ModelProfile) -> None:
    assert lite.kv_k_only
    assert (lite.key_length, lite.value_length, lite.kv_heads[0]) == (576, 512, 1)
    for ctx in (4096, 32768):
        assert predict_memory(lite, context=ctx, n_gpu_layers=0).kv == ctx * MLA_KV_PER_TOKEN
    assert predict_memory(lite, context=4096, n_gpu_layers=0).kv == 121.5 * MIB
    # q8_0: 576 values are 18 blocks of 34 bytes.
    q8 = predict_memory(lite, context=4096, n_gpu_layers=0, kv_type="q8_0", flash_attn=True)
    assert q8.kv == 4096 * 27 * 18 * 34


def test_older_deepseek2_files_keep_full_heads(tmp_path: Path) -> None:
    legacy = profile_model(read_header(deepseek_v2_lite_file(tmp_path, mla=False)))
    assert not legacy.kv_k_only
    assert predict_memory(legacy, context=4096, n_gpu_layers=0).kv == 4096 * LEGACY_KV_PER_TOKEN == 1080 * MIB


def test_r1_distill_qwen_7b_kv_cache_is_56_kib_per_token(qwen: ModelProfile) -> None:
    assert predict_memory(qwen, context=8192, n_gpu_layers=0).kv == 8192 * QWEN_KV_PER_TOKEN == 448 * MIB


# --- experts in system memory ----------------------------------------------------------------------------


def test_experts_on_cpu_move_the_routed_experts_to_system_memory(lite: ModelProfile) -> None:
    full = predict_memory(lite, context=8192, n_gpu_layers=28, flash_attn=True)
    moe = predict_memory(lite, context=8192, n_gpu_layers=28, flash_attn=True, experts_on_cpu=True)
    assert full.gpu_weights == sum(lite.layer_bytes) + OUTPUT
    assert moe.gpu_weights == full.gpu_weights - 26 * EXPERTS
    assert moe.ram_weights == full.ram_weights + 26 * EXPERTS == EMBD + 26 * EXPERTS
    assert moe.gpu_kv == full.gpu_kv == 8192 * MLA_KV_PER_TOKEN
    # Prompt batches copy one host expert tensor at a time to the GPU to multiply there.
    assert moe.gpu_compute == full.gpu_compute + EXPERT_TENSOR
    assert moe.gpu_runtime == CUDA_CONTEXT_BYTES


def test_too_little_vram_reports_the_experts_on_cpu_placement(lite: ModelProfile) -> None:
    assert estimate_fit(lite, hardware(vram_mib=24_000, ram_mib=64_000), context=8192).verdict == "gpu"

    estimate = estimate_fit(lite, hardware(vram_mib=12_000, ram_mib=64_000), context=8192)
    assert estimate.verdict == "partial"
    alternative = estimate.experts_on_cpu
    assert alternative is not None and alternative.verdict == "experts_cpu"
    assert alternative.llama_n_gpu_layers == 28
    assert alternative.gpu_bytes < estimate.gpu_bytes < 12_000 * MIB
    assert alternative.max_context == 163_840
    # Decoding reads the expert-free weights on the GPU and 6 of 64 experts from system memory.
    on_gpu = DENSE_LAYER + 26 * (MOE_LAYER - EXPERTS) + OUTPUT
    on_cpu = 26 * EXPERTS * 6 // 64
    assert alternative.expected_speed_ratio == pytest.approx(
        (on_gpu + on_cpu) / (on_gpu + GPU_TO_CPU_BANDWIDTH * on_cpu)
    )
    # Here whole layers are faster: 16 of 27 on the GPU.
    assert estimate.n_gpu_layers == 16 and estimate.best_placement == estimate
    assert estimate.notes[-1] == (
        "experts in system memory (llama.cpp's --cpu-moe): would give about 17% of full-offload speed, "
        "against 20% with 16/27 whole layers on the GPU"
    )

    # Not even the expert-free part fits in 2 GiB.
    small = estimate_fit(lite, hardware(vram_mib=2048, ram_mib=64_000), context=8192)
    assert small.experts_on_cpu is None
    assert not any("--cpu-moe" in n for n in small.notes)


def test_partial_offload_speed_counts_only_the_experts_a_token_uses(lite: ModelProfile) -> None:
    estimate = estimate_fit(lite, hardware(vram_mib=12_000, ram_mib=64_000), context=8192)
    k = estimate.n_gpu_layers
    active = [DENSE_LAYER, *(MOE_LAYER - EXPERTS + EXPERTS * 6 // 64,) * 26]
    on_gpu = sum(active[27 - k :])
    on_cpu = sum(active[: 27 - k]) + OUTPUT
    expected = (on_gpu + on_cpu) / (on_gpu + GPU_TO_CPU_BANDWIDTH * on_cpu)
    assert estimate.expected_speed_ratio == pytest.approx(expected, rel=1e-6)


def test_dense_models_have_no_experts_placement(qwen: ModelProfile) -> None:
    estimate = estimate_fit(qwen, hardware(vram_mib=6000, ram_mib=64_000), context=8192)
    assert estimate.verdict == "partial"
    assert estimate.experts_on_cpu is None


# --- against llama.cpp itself ----------------------------------------------------------------------------


@pytest.mark.model
@pytest.mark.parametrize(
    ("shape", "load", "low", "high"),
    [
        # At short contexts the output step leads and llama.cpp reserves 28 MiB (12%) more than modelled.
        pytest.param("mla", {"context": 4096}, -0.12, 0.0, id="v2-lite-4k"),
        pytest.param("mla", {"context": 16384}, 0.0, 0.03, id="v2-lite-16k-kq-grows"),
        pytest.param("mla", {"context": 32768, "flash_attn": True}, -0.12, 0.0, id="v2-lite-32k-fa"),
        pytest.param("legacy", {"context": 4096}, -0.12, 0.0, id="v2-lite-legacy-4k"),
        pytest.param("qwen", {"context": 8192}, 0.0, 0.05, id="r1-distill-qwen-7b-8k"),
    ],
)
def test_deepseek_shapes_match_llama_cpp_dry_run(
    tmp_path: Path, shape: str, load: dict[str, object], low: float, high: float
) -> None:
    """llama-cpp-python 0.3.36 sizes these files itself (no_alloc): the KV cache exactly (MLA: K only), the
    compute buffer within the stated band and bar P7."""
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    files = {
        "mla": lambda: deepseek_v2_lite_file(tmp_path),
        "legacy": lambda: deepseek_v2_lite_file(tmp_path, mla=False),
        "qwen": lambda: r1_distill_qwen_7b_file(tmp_path),
    }
    path = files[shape]()
    kv, compute = dry_run(path, **load)
    predicted = predict_memory(read_header(path), n_gpu_layers=0, **load)  # type: ignore[arg-type]
    assert predicted.kv == kv
    error = (predicted.compute - compute) / compute
    assert low - 0.0001 <= error <= high, (predicted.compute / MIB, compute / MIB)
    assert within_bar(predicted.compute, compute)
