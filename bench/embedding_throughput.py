"""Embedding throughput through the embedding runner vs a bare llama-cpp-python loop, side by side.

    .venv/bin/python -m bench.embedding_throughput [--model PATH] [--passages 200] [--threads 2] [--rounds 4]

Runner path: inference.embedding.EmbeddingRunner (a runner process, the pipe, the batching of
inference.embedder). Baseline: `Llama(embedding=True).embed(texts)` on the same GGUF with the same context,
batch and threads, in a worker process of its own. Each side loads its model once; then, in each round,
both embed the same passages of about 100 words (half English, half Chinese, "passage: " first, as e5
wants), taking turns every SLICE passages, so a machine whose load changes weighs on both alike. Prints
each round's tokens/s (and tokens per CPU second of the process that embeds) for both sides, and the
median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

import psutil

from app.paths import bundled_embedding_model
from inference.embedder import MAX_CONTEXT
from inference.embedding import EmbeddingRunner
from inference.gguf import read_header

ENGLISH = (
    "The river rises in the mountains and flows east through farmland before it reaches the sea.",
    "Farmers along its banks grow wheat, barley and vegetables, and many keep cattle or sheep.",
    "In spring the snow melts and the water level climbs quickly, sometimes flooding the lower fields.",
    "Engineers built a series of dams in the last century to control the floods and produce electricity.",
    "Today the valley is known for its orchards, its small market towns and its quiet walking paths.",
    "Visitors come in autumn to see the leaves change colour and to taste the local apple cider.",
)
CHINESE = (
    "这条河发源于山区，向东流经农田，最后注入大海。",
    "沿岸的农民种植小麦、大麦和蔬菜，许多人还饲养牛羊。",
    "春天积雪融化，水位迅速上涨，有时会淹没低处的田地。",
    "上个世纪，工程师修建了一系列水坝，用来控制洪水并发电。",
    "如今，这个山谷以果园、小集镇和宁静的步道而闻名。",
    "秋天，游客们来这里观赏红叶，品尝当地的苹果酒。",
)


# Passages per turn: the two sides take turns every few seconds, so a change in the machine's load
# (other programs) lands on both.
SLICE = 20


def passages(count: int) -> list[str]:
    """About 100 words each (English), or as much text in Chinese (about 170 characters); each starts at
    a different sentence, so no two are the same."""
    made = []
    for i in range(count):
        sentences = ENGLISH if i % 2 == 0 else CHINESE
        picked = [sentences[(i // 2 + k) % len(sentences)] for k in range(6)]
        made.append(f"passage: {i}. " + " ".join(picked))
    return made


# The bare loop's model, loaded once in its worker process (`_load_bare`), like the runner's.
_bare: Any = None


def _load_bare(model: str, threads: int, n_ctx: int) -> None:
    global _bare
    import llama_cpp

    from inference.ggml_backends import load_backends

    load_backends()
    _bare = llama_cpp.Llama(
        model_path=model, embedding=True, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx, n_threads=threads,
        n_threads_batch=threads, n_gpu_layers=0, verbose=False,
    )  # fmt: skip
    _bare.embed(["passage: warm-up"])


def bare_loop(texts: list[str]) -> tuple[int, float, float]:
    """Tokens, wall seconds and CPU seconds (the worker process's, all its threads)."""
    started, cpu = time.perf_counter(), time.process_time()
    _, n_tokens = _bare.embed(texts, normalize=True, return_count=True)
    return n_tokens, time.perf_counter() - started, time.process_time() - cpu


def runner_path(runner: EmbeddingRunner, texts: list[str]) -> tuple[int, float, float]:
    """Tokens, wall seconds and the runner process's CPU seconds."""
    assert runner.pid is not None
    process = psutil.Process(runner.pid)
    before, started = sum(process.cpu_times()[:2]), time.perf_counter()
    result = runner.embed_detailed(texts)
    return result.n_tokens, time.perf_counter() - started, sum(process.cpu_times()[:2]) - before


@dataclass
class Tally:
    tokens: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0

    def add(self, measured: tuple[int, float, float]) -> None:
        self.tokens += measured[0]
        self.seconds += measured[1]
        self.cpu_seconds += measured[2]

    @property
    def rate(self) -> float:
        return self.tokens / self.seconds

    @property
    def cpu_rate(self) -> float:
        return self.tokens / self.cpu_seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--passages", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args(argv)
    model = args.model or bundled_embedding_model()
    if model is None:
        print("no embedding model: run scripts/bootstrap.sh, or pass --model", file=sys.stderr)
        return 1
    texts = passages(args.passages)
    slices = [texts[start : start + SLICE] for start in range(0, len(texts), SLICE)]
    # The runner's own rule (inference.embedder): the model's context, at most MAX_CONTEXT.
    n_ctx = min(read_header(model).context_length or 512, MAX_CONTEXT)
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    pool = ProcessPoolExecutor(
        max_workers=1, mp_context=get_context("spawn"), initializer=_load_bare,
        initargs=(str(model), args.threads, n_ctx),
    )  # fmt: skip
    with pool, EmbeddingRunner(model, threads=args.threads) as embedder:
        embedder.embed(["passage: warm-up"])
        pool.submit(time.sleep, 0).result()  # the worker has loaded its model
        for round_ in range(args.rounds):
            runner, bare = Tally(), Tally()
            for index, part in enumerate(slices):
                if (round_ + index) % 2 == 0:
                    runner.add(runner_path(embedder, part))
                    bare.add(pool.submit(bare_loop, part).result())
                else:
                    bare.add(pool.submit(bare_loop, part).result())
                    runner.add(runner_path(embedder, part))
            ratios.append(runner.rate / bare.rate)
            cpu_ratios.append(runner.cpu_rate / bare.cpu_rate)
            print(
                f"round {round_ + 1}: {runner.tokens} tokens each; runner {runner.rate:.0f} tokens/s "
                f"({runner.cpu_rate:.0f} per CPU second), bare loop {bare.rate:.0f} tokens/s "
                f"({bare.cpu_rate:.0f} per CPU second); ratio {ratios[-1]:.3f} (CPU {cpu_ratios[-1]:.3f})",
                flush=True,
            )
    print(
        f"median ratio runner / bare loop: {statistics.median(ratios):.3f} in tokens/s, "
        f"{statistics.median(cpu_ratios):.3f} in tokens per CPU second"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
