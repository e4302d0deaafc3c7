"""inference.planner: load plans from the estimator on injected hardware, and the runner reporting what
llama.cpp really allocated next to what the plan predicted."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from inference.estimator import describe_prediction, within_bar
from inference.gguf import GGUFHeader, read_header
from inference.hardware import HardwareReport, probe_hardware
from inference.planner import plan_load
from inference.protocol import CheckingTemplate, Loaded, LoadPlan, LoadRequest
from inference.runner import Runner
from tests.helpers.model_shapes import GIB, MIB, hardware, llama3_8b


@pytest.fixture(scope="module")
def q4(tmp_path_factory: pytest.TempPathFactory) -> GGUFHeader:
    return llama3_8b(tmp_path_factory.mktemp("llama3-8b"), "Q4_K_M")


def plan(
    header: GGUFHeader,
    machine: HardwareReport,
    *,
    context: int = 8192,
    gpu_layers: str | int = "auto",
    cuda: bool = True,
) -> LoadPlan:
    return plan_load(
        "/models/m.gguf",
        header,
        machine,
        context_length=context,
        gpu_layers=gpu_layers,
        n_threads=None,
        gpu_offload_supported=cuda,
    )


def test_full_offload_when_it_fits(q4: GGUFHeader) -> None:
    p = plan(q4, hardware(vram_mib=24576, ram_mib=32768, gpu_name="RTX 4090"))
    assert (p.n_gpu_layers, p.n_layers, p.n_ctx, p.kv_type, p.flash_attn) == (33, 32, 8192, "f16", True)
    assert p.reason == "CUDA · 32/32 layers on RTX 4090"
    assert p.n_threads == 8 and p.n_batch == 512 and p.swa_full
    assert p.predicted_bytes["kv"] == GIB
    assert p.predicted_bytes["gpu_total"] > p.predicted_bytes["gpu"] > 4 * GIB


def test_kv_cache_is_quantized_when_that_makes_it_fit(q4: GGUFHeader) -> None:
    p = plan(q4, hardware(vram_mib=8192, ram_mib=32768), context=32768)
    assert (p.n_gpu_layers, p.n_ctx, p.kv_type, p.flash_attn) == (33, 32768, "q8_0", True)
    assert p.reason.split(";")[0] == "CUDA · 32/32 layers on RTX Test"
    assert "KV cache quantized to q8_0 to fit" in p.reason


def test_context_is_reduced_for_full_offload_when_quantizing_is_not_enough(q4: GGUFHeader) -> None:
    p = plan(q4, hardware(vram_mib=7168, ram_mib=32768), context=32768)
    assert (p.n_gpu_layers, p.n_ctx, p.kv_type) == (33, 21248, "q8_0")
    assert "context reduced to 21248 tokens (KV cache q8_0) to fit" in p.reason


def test_partial_offload_when_nothing_else_fits(q4: GGUFHeader) -> None:
    p = plan(q4, hardware(vram_mib=4096, ram_mib=32768))
    assert (p.n_gpu_layers, p.n_ctx, p.kv_type, p.flash_attn) == (14, 8192, "f16", True)
    assert p.reason == "CUDA · 14/32 layers on RTX Test"


def test_a_layer_count_from_the_settings_is_kept(q4: GGUFHeader) -> None:
    machine = hardware(vram_mib=24576, ram_mib=32768)
    assert plan(q4, machine, gpu_layers=10).n_gpu_layers == 10
    assert plan(q4, machine, gpu_layers=10).reason == "CUDA · 10/32 layers on RTX Test"
    assert plan(q4, machine, gpu_layers=32).n_gpu_layers == 33
    assert plan(q4, machine, gpu_layers=99).n_gpu_layers == 33
    # Too many layers for this GPU: the layer count stays, the context gives way.
    small = plan(q4, hardware(vram_mib=6144, ram_mib=32768), gpu_layers=32, context=32768)
    assert small.n_gpu_layers == 33 and small.kv_type == "q8_0" and 4096 <= small.n_ctx < 32768


def test_cpu_plans_say_why(q4: GGUFHeader) -> None:
    with_gpu = hardware(vram_mib=24576, ram_mib=32768)
    cpu_build = plan(q4, with_gpu, cuda=False)
    assert (cpu_build.n_gpu_layers, cpu_build.flash_attn, cpu_build.kv_type) == (0, False, "f16")
    assert cpu_build.reason == "CPU · llama.cpp was built without GPU support"
    assert plan(q4, with_gpu, gpu_layers=0).reason == "CPU · GPU offload disabled in settings"
    assert plan(q4, hardware(vram_mib=None, ram_mib=32768)).reason == "CPU · no NVIDIA GPU found"
    tiny_gpu = plan(q4, hardware(vram_mib=1024, ram_mib=32768))
    assert tiny_gpu.reason == "CPU · model does not fit in RTX Test's free memory (1024 MiB)"
    assert tiny_gpu.n_gpu_layers == 0 and tiny_gpu.predicted_bytes["gpu"] == 0


def test_context_is_capped_by_training_length(tmp_path: Path) -> None:
    header = llama3_8b(tmp_path, n_ctx_train=8192)
    p = plan(header, hardware(vram_mib=None, ram_mib=32768), context=32768)
    assert p.n_ctx == 8192
    assert "context capped at the model's training length (8192)" in p.reason


def test_cpu_context_gives_way_to_system_memory(q4: GGUFHeader) -> None:
    # 7 GiB: the f16 cache for 32k does not fit, nor a q8_0 one; a shorter context with q8_0 (and flash
    # attention, which llama.cpp needs for a quantized V cache) does.
    p = plan(q4, hardware(vram_mib=None, ram_mib=7168), context=32768)
    assert p.n_gpu_layers == 0 and p.kv_type == "q8_0" and p.flash_attn
    assert 4096 <= p.n_ctx < 32768 and p.n_ctx % 256 == 0


def test_a_model_that_fits_nowhere_still_gets_a_plan(q4: GGUFHeader) -> None:
    p = plan(q4, hardware(vram_mib=None, ram_mib=2048))
    assert p.n_ctx == 512 and p.n_gpu_layers == 0
    assert p.reason.startswith("CPU · no NVIDIA GPU found; may not fit: the estimate needs")


@pytest.mark.model
def test_runner_reports_measured_memory_next_to_the_prediction(starter_model: Path) -> None:
    """The real starter through the runner's load path, with this machine's hardware: what llama.cpp
    allocated comes back in Loaded.memory_bytes, the plan's prediction in Loaded.predicted_bytes."""
    header = read_header(starter_model)
    load_plan = plan_load(
        str(starter_model),
        header,
        probe_hardware(),
        context_length=4096,
        gpu_layers="auto",
        n_threads=2,
        gpu_offload_supported=False,
    )
    replies: list[object] = []
    runner = Runner(replies.append)
    runner.load(LoadRequest(load_plan))
    del runner
    gc.collect()

    (loaded,) = [reply for reply in replies if not isinstance(reply, CheckingTemplate)]
    assert isinstance(loaded, Loaded), loaded
    measured, predicted = loaded.memory_bytes, loaded.predicted_bytes
    assert predicted == load_plan.predicted_bytes
    assert measured["kv"] == 4096 * 30 * 3 * 128 * 2 == 90 * MIB
    assert (
        measured["gpu"] == 0 and measured["ram"] == measured["weights"] + measured["kv"] + measured["compute"]
    )
    for key in ("weights", "kv", "compute"):
        assert abs(predicted[key] - measured[key]) <= 0.02 * measured[key] + MIB, (key, predicted, measured)
        assert within_bar(predicted[key], measured[key])
    # About 280 MiB, or 377 MiB with AMX kernels, whose packed copies of the weights are counted.
    total = sum(predicted[key] for key in ("weights", "kv", "compute"))
    assert describe_prediction(predicted, measured).startswith(f"predicted {total / MIB:,.0f} MiB, actual ")
