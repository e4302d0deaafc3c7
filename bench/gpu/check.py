"""The GPU figures for one model, one line each; bench/gpu_check.sh runs this on a machine with an NVIDIA GPU.

    python -m bench.gpu.check MODEL.gguf [--tokens 2000] [--rounds 1]

doctor  `hearth doctor --json`, run as a user runs it, sees a CUDA build and the GPU
plan    inference.planner for this model on this machine with the default settings (the configuration
        Hearth recommends and loads)
P7      the plan's predicted VRAM against NVML's used-memory growth over the load through the app's runner
        (and llama.cpp's buffer report): within 5% or 150 MiB
G2      after the load and --tokens generated tokens: no failure, VRAM did not keep growing, and at least
        512 MiB of the GPU is still free
MoE     a generated mixture-of-experts model (8 layers of 16 experts, 2.2 GB of expert weights, sparse on
        disk) loaded with its experts in system memory (llama.cpp's --cpu-moe, as inference.planner plans it
        when VRAM is short): every expert tensor overridden to the CPU, the predicted VRAM against NVML's
        measure (P7), and a reply generated
vision  the same model with a generated multimodal projector as wide as it (tests/helpers/tiny_vision.py,
        random weights) loaded through the app's runner: mtmd puts the projector on the GPU (its log says
        "CLIP using CUDA"), an image's embeddings go into the context and a reply is generated
G1      tokens/s through the whole app path (bench.stream_overhead.app_path: runner → pipe → worker thread →
        Qt signal, SQLite) against a bare llama.cpp decode loop with the plan's offload and flash attention,
        same GGUF, greedy, EOS ignored, in the same run: ratio ≥ 0.95

Exits 1 when a bar is missed or the GPU is not used.
"""

from __future__ import annotations

import argparse
import importlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from inference.client import RunnerClient
from inference.estimator import predict_memory, within_bar
from inference.gguf import read_header
from inference.hardware import llama_backend, probe_hardware
from inference.planner import plan_load
from inference.protocol import (
    ChatMessage,
    Failed,
    Finished,
    GenerateRequest,
    ImageInput,
    LoadPlan,
    SamplingParams,
    TokenDelta,
)

MIB = 1 << 20
HEADROOM_BAR = 512 * MIB
G1_BAR = 0.95
# VRAM that may appear during generation without counting as growth (allocator rounding, cuBLAS workspace).
GROWTH_TOLERANCE = 64 * MIB
PROMPT = "Write a long, detailed story about a lighthouse keeper and the sea."


class Nvml:
    """Device-level memory of the GPU the plan uses, straight from NVML."""

    def __init__(self, index: int) -> None:
        import pynvml

        self._nvml: Any = pynvml
        pynvml.nvmlInit()
        self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)

    def memory(self) -> tuple[int, int, int]:
        info = self._nvml.nvmlDeviceGetMemoryInfo(self._handle)
        return int(info.used), int(info.free), int(info.total)

    def close(self) -> None:
        self._nvml.nvmlShutdown()


def mib(n: float) -> str:
    return f"{n / MIB:,.0f} MiB"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "FAIL"


def doctor() -> bool:
    with tempfile.TemporaryDirectory() as home:
        result = subprocess.run(
            [sys.executable, "-m", "app", "doctor", "--json", "--home", home],
            capture_output=True,
            text=True,
            check=False,
        )
    if result.returncode != 0:
        print(f"doctor: exit {result.returncode}: {result.stderr.strip()[-300:]} FAIL")
        return False
    report = json.loads(result.stdout)
    gpus = "; ".join(
        f"GPU {g['index']} {g['name']}, {g['total_mib']:,} MiB, driver {g['driver_version']}"
        for g in report["gpus"]
    )
    ok = report["backend"]["name"] == "CUDA" and bool(report["gpus"])
    backend = f"{report['backend']['name']} ({report['backend']['detail']})"
    print(f"doctor: backend {backend}; {gpus or report['gpu_reason']} {verdict(ok)}")
    return ok


def run_checks(model: Path, tokens: int, rounds: int, allow_cpu: bool = False) -> bool:
    # By name: bench/ is a folder of scripts, not a package, so mypy knows this module by another name.
    overhead: Any = importlib.import_module("bench.stream_overhead")
    app_path, bare_loop, prompt_tokens_for = overhead.app_path, overhead.bare_loop, overhead.prompt_tokens_for

    results = [doctor()]
    hardware = probe_hardware()
    backend, detail = llama_backend()
    header = read_header(model)
    plan = plan_load(
        str(model),
        header,
        hardware,
        context_length=4096,
        gpu_layers="auto",
        n_threads=None,
        gpu_offload_supported=backend == "CUDA",
    )
    full = plan.n_gpu_layers > plan.n_layers
    print(
        f"plan: {plan.reason}; n_ctx {plan.n_ctx}, n_gpu_layers {plan.n_gpu_layers}/{plan.n_layers}, "
        f"flash_attn {plan.flash_attn}, KV {plan.kv_type} {verdict(full)}"
    )
    results.append(full)
    if not hardware.gpus or backend != "CUDA":
        print(f"no GPU in use: {hardware.gpu_reason or detail}")
        if not allow_cpu:
            return False
        # --allow-cpu: the same steps on the CPU with memory figures left out, to check this script
        # itself on a machine without a GPU.
        load_and_generate(None, plan, tokens)
        experts_in_system_memory(None)
        vision(model, plan, on_gpu=False)
    else:
        gpu = max(hardware.gpus, key=lambda g: g.free_mib)
        nvml = Nvml(gpu.index)
        try:
            results += load_and_generate(nvml, plan, tokens)
            results.append(experts_in_system_memory(nvml))
            results.append(vision(model, plan, on_gpu=True))
        finally:
            nvml.close()

    prompt = prompt_tokens_for(model)
    threads = plan.n_threads
    ratios: list[float] = []
    for round_no in range(1, rounds + 1):
        bare = bare_loop(model, prompt, tokens, plan.n_ctx, threads, plan.n_gpu_layers, plan.flash_attn)
        app = app_path(model, tokens, plan.n_ctx, threads)
        bare_rate = (tokens - 1) / bare.token_times[-1]
        app_rate = (tokens - 1) / app.token_times[-1]
        ratios.append(app_rate / bare_rate)
        print(
            f"G1 round {round_no}: bare {bare_rate:,.1f} tok/s, app {app_rate:,.1f} tok/s "
            f"(last 200: bare {bare.late():,.1f}, app {app.late():,.1f}), ratio {ratios[-1]:.3f}"
        )
    g1 = sorted(ratios)[len(ratios) // 2]
    print(f"G1 app/bare tokens/s over {tokens} tokens: {g1:.3f} (bar >= {G1_BAR}) {verdict(g1 >= G1_BAR)}")
    results.append(g1 >= G1_BAR)
    return all(results)


def load_and_generate(nvml: Nvml | None, plan: Any, tokens: int) -> list[bool]:
    def memory() -> tuple[int, int, int]:
        return nvml.memory() if nvml is not None else (0, 0, 0)

    before, _, total = memory()
    with tempfile.TemporaryDirectory() as logs:
        client = RunnerClient(Path(logs) / "runner.log")
        try:
            started = time.perf_counter()
            loaded = client.load(plan)
            load_s = time.perf_counter() - started
            after_load, _, _ = memory()
            measured = after_load - before
            predicted = int(plan.predicted_bytes.get("gpu_total", 0))
            buffers = loaded.memory_bytes
            print(
                f"load: {load_s:.1f} s through the runner, backend {loaded.backend}, "
                f"{loaded.n_gpu_layers}/{loaded.n_layers} layers, llama.cpp buffers: "
                + ", ".join(f"{k} {mib(v)}" for k, v in sorted(buffers.items()))
            )
            p7 = bool(predicted) and bool(measured) and within_bar(predicted, measured)
            error = (predicted - measured) / measured * 100 if measured else 0.0
            print(
                f"P7 predicted VRAM {mib(predicted)} vs NVML-measured {mib(measured)} for the load "
                f"({error:+.1f}%; bar: within 5% or 150 MiB) {verdict(p7)}"
            )

            sampling = replace(SamplingParams(), temperature=0.0, max_tokens=tokens, ignore_eos=True)
            request = GenerateRequest("gpu-check", (ChatMessage("user", PROMPT),), sampling)
            produced, failure, rate = 0, "", 0.0
            for event in client.generate(request):
                if isinstance(event, TokenDelta):
                    produced += event.n_tokens
                elif isinstance(event, Finished):
                    rate = event.stats.tokens_per_second
                elif isinstance(event, Failed):
                    failure = f"{event.kind}: {event.message}"
            used, free, _ = memory()
        finally:
            client.close()
    growth = used - after_load
    g2 = (
        not failure
        and produced == tokens
        and nvml is not None
        and growth <= GROWTH_TOLERANCE
        and free >= HEADROOM_BAR
    )
    print(
        f"G2 after load + {produced} tokens ({rate:,.1f} tok/s{'; ' + failure if failure else ''}): "
        f"NVML used {mib(used)} of {mib(total)}, {mib(free)} free (bar >= 512 MiB), "
        f"growth during generation {mib(growth)} {verdict(g2)}"
    )
    return [p7, g2]


def experts_in_system_memory(nvml: Nvml | None) -> bool:
    model_shapes: Any = importlib.import_module("tests.helpers.model_shapes")
    n_layers = 8
    with tempfile.TemporaryDirectory() as work:
        model = model_shapes.tiny_moe_file(
            Path(work),
            n_layers=n_layers,
            n_expert=16,
            n_embd=2048,
            n_ff_exp=1408,
            matrix_type=1,  # F16
        )
        predicted = predict_memory(
            read_header(model), context=4096, n_gpu_layers=n_layers + 1, flash_attn=True, experts_on_cpu=True
        )
        plan = LoadPlan(
            model_path=str(model),
            n_ctx=4096,
            n_gpu_layers=n_layers + 1,
            n_layers=n_layers,
            flash_attn=True,
            n_threads=probe_hardware().cpu_count_physical or 1,
            experts_on_cpu=True,
            predicted_bytes=predicted.as_dict(),
        )
        before = nvml.memory()[0] if nvml is not None else 0
        client = RunnerClient(Path(work) / "runner.log")
        try:
            loaded = client.load(plan)
            measured = nvml.memory()[0] - before if nvml is not None else 0
            sampling = replace(SamplingParams(), max_tokens=32, ignore_eos=True)
            events = list(client.generate(GenerateRequest("moe", (ChatMessage("user", PROMPT),), sampling)))
        finally:
            client.close()
    overridden = loaded.host_expert_tensors == 3 * n_layers
    generated = isinstance(events[-1], Finished) and events[-1].stats.completion_tokens == 32
    p7 = nvml is not None and within_bar(predicted.gpu_total, measured)
    buffers = ", ".join(f"{k} {mib(v)}" for k, v in sorted(loaded.memory_bytes.items()))
    placed = f"{loaded.host_expert_tensors}/{3 * n_layers}"
    print(
        f"MoE experts in system memory: {placed} expert tensors overridden, "
        f"llama.cpp buffers: {buffers}; predicted VRAM {mib(predicted.gpu_total)} (weights "
        f"{mib(predicted.gpu_weights)}) vs NVML-measured {mib(measured)}; 32 tokens generated: {generated} "
        f"{verdict(overridden and generated and p7)}"
    )
    return overridden and generated and p7


def vision(model: Path, plan: LoadPlan, *, on_gpu: bool) -> bool:
    from PIL import Image

    tiny_vision: Any = importlib.import_module("tests.helpers.tiny_vision")
    width = read_header(model).embedding_length or 0
    picture = io.BytesIO()
    Image.new("RGB", (64, 48), "navy").save(picture, format="PNG")
    image = ImageInput("image/png", picture.getvalue())
    sampling = replace(SamplingParams(), max_tokens=16, ignore_eos=True)
    with tempfile.TemporaryDirectory() as work:
        mmproj = tiny_vision.write_tiny_projector(Path(work) / "mmproj-check.gguf", projection_dim=width)
        runner_log = Path(work) / "runner.log"
        client = RunnerClient(runner_log)
        try:
            client.load(replace(plan, mmproj_path=str(mmproj)))
            request = GenerateRequest(
                "vision", (ChatMessage("user", "Describe the picture.", (image,)),), sampling
            )
            events = list(client.generate(request))
        finally:
            client.close()
        log_text = runner_log.read_text(encoding="utf-8", errors="replace")
    last = events[-1]
    generated = isinstance(last, Finished) and last.stats.completion_tokens == 16
    prompt = last.stats.prompt_tokens if isinstance(last, Finished) else 0
    took_image = prompt > tiny_vision.TINY_IMAGE_TOKENS
    gpu = "CLIP using CUDA" in log_text
    where = "on the GPU" if gpu else "on the CPU"
    ok = generated and took_image and (gpu or not on_gpu)
    print(
        f"vision: projector {width} wide loaded {where}; the image's prompt {prompt} tokens "
        f"({tiny_vision.TINY_IMAGE_TOKENS} of them the image); 16 tokens generated: {generated} {verdict(ok)}"
    )
    return ok


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("model", type=Path)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--allow-cpu", action="store_true", help="go on without a GPU (checks this script)")
    args = parser.parse_args()
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    sys.exit(0 if run_checks(args.model.resolve(), args.tokens, args.rounds, args.allow_cpu) else 1)


if __name__ == "__main__":
    main()
