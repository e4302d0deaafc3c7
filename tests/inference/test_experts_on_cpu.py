"""Mixture-of-experts models with their routed experts in system memory (llama.cpp's --cpu-moe): when the
planner takes that placement, and that the runner really loads that way.

The GPU side needs a GPU (bench/gpu/check.py); here the real runner loads a small generated MoE model with the
override and llama.cpp reports where each expert tensor went, which is the part Hearth adds.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from app.cli.main import main
from inference.client import RunnerClient
from inference.estimator import predict_memory, profile_model, recommend
from inference.gguf import GGUFHeader, read_header
from inference.planner import plan_load, smaller_plan
from inference.protocol import ChatMessage, Finished, GenerateRequest, LoadPlan, SamplingParams, TokenDelta
from inference.tensor_overrides import overridden_tensors
from tests.helpers.hubserver import HubServer, ServedFile
from tests.helpers.model_shapes import deepseek_v2_lite_file, hardware, tiny_moe_file

REPO = "deepseek-ai/DeepSeek-V2-Lite-GGUF"


@pytest.fixture(scope="module")
def lite(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GGUFHeader]:
    path = deepseek_v2_lite_file(tmp_path_factory.mktemp("dsv2"))
    return path, read_header(path)


def plan_for(model: tuple[Path, GGUFHeader], vram_mib: int, gpu_layers: str | int = "auto") -> LoadPlan:
    path, header = model
    return plan_load(
        str(path),
        header,
        hardware(vram_mib=vram_mib, ram_mib=64_000),
        context_length=8192,
        gpu_layers=gpu_layers,
        n_threads=None,
        gpu_offload_supported=True,
    )


def test_experts_go_to_system_memory_when_that_beats_offloading_whole_layers(
    lite: tuple[Path, GGUFHeader],
) -> None:
    # 6 GB holds 6 of DeepSeek-V2-Lite's 27 layers (about 12% of full-offload speed), or every layer without
    # its routed experts (about 17%: a token reads only 6 of the 64 experts from system memory).
    plan = plan_for(lite, 6000)
    assert plan.experts_on_cpu and plan.n_gpu_layers == 28
    assert plan.reason == (
        "CUDA · 27/27 layers on RTX Test, experts in system memory; experts in system memory (llama.cpp's "
        "--cpu-moe): about 17% of full-offload speed, against 12% with 6/27 whole layers on the GPU"
    )
    profile = profile_model(lite[1])
    assert plan.predicted_bytes == (
        predict_memory(
            profile, context=plan.n_ctx, n_gpu_layers=28, flash_attn=True, experts_on_cpu=True
        ).as_dict()
    )
    assert plan.predicted_bytes["gpu_total"] < 6000 * 1024 * 1024


def test_whole_layers_stay_when_they_are_faster(lite: tuple[Path, GGUFHeader]) -> None:
    # 12 GB holds 16 layers: about 20%, against 17% with the experts in system memory.
    plan = plan_for(lite, 12_000)
    assert not plan.experts_on_cpu and plan.n_gpu_layers == 16
    assert plan.reason.startswith("CUDA · 16/27 layers on RTX Test;")
    assert "--cpu-moe): would give about 17% of full-offload speed, against 20% with 16/27" in plan.reason


def test_a_layer_count_from_the_settings_or_enough_vram_never_moves_experts(
    lite: tuple[Path, GGUFHeader],
) -> None:
    assert not plan_for(lite, 6000, gpu_layers=5).experts_on_cpu
    full = plan_for(lite, 40_000)
    assert not full.experts_on_cpu and full.n_gpu_layers == 28


def test_after_running_out_of_memory_the_experts_stay_in_system_memory(lite: tuple[Path, GGUFHeader]) -> None:
    plan = plan_for(lite, 6000)
    smaller = smaller_plan(plan, lite[1])
    assert smaller is not None and smaller.experts_on_cpu and smaller.n_gpu_layers == 13
    assert smaller.reason.startswith("CUDA · 13/27 layers on the GPU, experts in system memory;")
    assert smaller.predicted_bytes["gpu_total"] < plan.predicted_bytes["gpu_total"]
    cpu = smaller_plan(smaller, lite[1])
    for _ in range(3):
        assert cpu is not None
        cpu = smaller_plan(cpu, lite[1]) if cpu.n_gpu_layers else cpu
    assert cpu is not None and cpu.n_gpu_layers == 0 and not cpu.experts_on_cpu


@pytest.mark.parametrize("experts_on_cpu", [True, False], ids=["experts-on-cpu", "default"])
def test_the_runner_loads_the_experts_into_system_memory_and_generates(
    tmp_path: Path, experts_on_cpu: bool
) -> None:
    model = tiny_moe_file(tmp_path, n_layers=3)
    plan = LoadPlan(
        model_path=str(model),
        n_ctx=256,
        n_gpu_layers=4,  # every layer and the output, as on a GPU machine; a CPU build ignores it
        n_layers=3,
        flash_attn=False,
        n_threads=1,
        experts_on_cpu=experts_on_cpu,
    )
    client = RunnerClient(tmp_path / "runner.log")
    try:
        loaded = client.load(plan)
        request = GenerateRequest(
            "r1", (ChatMessage("user", "hi"),), SamplingParams(max_tokens=4, seed=1, ignore_eos=True)
        )
        events = list(client.generate(request))
    finally:
        client.close()
    assert loaded.host_expert_tensors == (9 if experts_on_cpu else 0)
    assert isinstance(events[-1], Finished) and events[-1].stats.completion_tokens == 4
    assert any(isinstance(event, TokenDelta) for event in events)


def test_overridden_tensors_are_read_from_llama_cpp_s_log() -> None:
    log = (
        "load_tensors: loading model tensors, this can take a while... (mmap = true)\n"
        "tensor blk.1.ffn_gate_exps.weight (1104 MiB q8_0) buffer type overridden to CUDA_Host\n"
        "tensor blk.1.ffn_down_exps.weight (0 MiB f32) buffer type overridden to CPU\n"
        "load_tensors: CPU_Mapped model buffer size = 92.10 MiB\n"
    )
    assert overridden_tensors(log) == {
        "blk.1.ffn_gate_exps.weight": "CUDA_Host",
        "blk.1.ffn_down_exps.weight": "CPU",
    }


def test_the_recommendation_prefers_the_faster_experts_placement(lite: tuple[Path, GGUFHeader]) -> None:
    recommendation = recommend([lite[1]], hardware(vram_mib=6000, ram_mib=64_000), context=8192)
    assert recommendation.index == 0 and recommendation.estimate is not None
    assert recommendation.estimate.verdict == "experts_cpu"
    assert recommendation.reason == (
        "Q8_0 runs with every layer on RTX Test and its experts in system memory at 8192 tokens, "
        "at about 17% of full-offload speed"
    )
    assert "No file fits fully on the GPU; experts left on the CPU slow generation down." in (
        recommendation.warnings
    )


def test_models_files_shows_the_placement_a_load_would_use(hub: HubServer, tmp_path: Path) -> None:
    path = deepseek_v2_lite_file(tmp_path)
    # A header-only file of 16 GB: the Hub's listing carries its hash, which nothing here reads.
    hub.add_repo(
        REPO, [ServedFile(f"DeepSeek-V2-Lite-{path.name}", path.stat().st_size, "0" * 64, path=path)]
    )
    out, err = io.StringIO(), io.StringIO()
    argv = ["models", "files", REPO, "--json", "--vram", "6000", "--ram", "64000", "--context", "8192"]
    assert main([*argv, "--endpoint", hub.url], out=out, err=err) == 0, err.getvalue()
    [row] = json.loads(out.getvalue())["files"]
    assert row["verdict"] == "experts_cpu" and row["n_gpu_layers"] == row["n_layers"] == 27
    assert row["expected_speed_ratio"] == pytest.approx(0.17, abs=0.005) and row["recommended"]
    assert row["gpu_bytes"] < 6000 * 1024 * 1024 < row["ram_bytes"]
    assert "against 12% with 6/27 whole layers on the GPU" in row["notes"][-1]
