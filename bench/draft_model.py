"""Draft-model speculative decoding against plain decoding and prompt lookup, side by side.

    .venv/bin/python -m bench.draft_model [--rounds 3] [--threads N] [--no-publish]

No two GGUF models of one vocabulary and different sizes can be had offline, so the pair is made here: the
target is the starter model (SmolLM2-135M-Instruct Q4_1) written out by llama.cpp's quantizer as F16 — the
same weights, about three times the bytes to read per token — and the draft is the Q4_1 file itself. The draft
agrees with the target nearly always, so this measures what guessing costs and saves in the runner's loop
with close to the best agreement a real pair (a 0.5B beside a 7B of one family) would reach; a real pair's
draft is also far cheaper beside its target than this one is.

Four sides run the runner's own code (inference.runner.Runner) on the F16 target with one load plan
(context, threads, flash attention on): plain; with the Q4_1 draft (LoadPlan.draft_model_path), guessing
as long as its measured costs say guesses pay; with the same draft guessing at every step (its costs fixed
as a GPU's would be: what a draft gives where a batch costs what one token does); and with prompt lookup.
Tasks: the issue's code edit, a paragraph given back with a typo fixed, and a story, which repeats nothing
of its prompt (prompt lookup has nothing to guess from). Temperature 0; each side is warmed
up first; the order rotates between rounds. Speed is the runner's decode rate (tokens after the first over
the time after it); speedups are per task and round, then the median. Whether each reply is identical to
plain decoding's is checked in every round.

Writes docs/bench/draft_model.json and the README's table (bench/results.py).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import results
from bench.speculative import (
    DRAFT_TOKENS,
    N_CTX,
    SAMPLING,
    TASKS,
    Side,
    every_guess_costs,
    same_reply,
    starter_model,
    task_row,
)
from inference.ggml_backends import load_backends
from inference.llama_memory import LlamaLog

# app.library.load_settings.DRAFT_MODEL_TOKENS, what the app asks for with a draft model.
DRAFT_MODEL_TOKENS = 8
F16 = 1  # llama_ftype LLAMA_FTYPE_MOSTLY_F16 (llama.h)
BENCH_TASKS = {
    "code": TASKS["code"],
    "paragraph": TASKS["paragraph"],
    "story": "Write a short story, about ten sentences, about a lighthouse keeper who finds a message in a "
    "bottle.",
}
SIDES = ("plain", "draft", "every", "lookup")
GUESSING = SIDES[1:]
LABELS = {"draft": "draft model", "every": "draft model, every guess", "lookup": "prompt lookup"}
BENCH_SAMPLING = replace(SAMPLING, max_tokens=240)


def f16_target(starter: Path, directory: Path) -> Path:
    import llama_cpp

    load_backends()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = F16
    params.allow_requantize = True
    target = directory / "SmolLM2-135M-Instruct.F16.gguf"
    with LlamaLog(echo=False):
        failed = llama_cpp.llama_model_quantize(
            str(starter).encode(), str(target).encode(), ctypes.byref(params)
        )
    if failed:
        sys.exit("writing the starter model as F16 failed")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    results.add_publish_option(parser)
    args = parser.parse_args()
    session = results.begin("draft_model", args)
    draft = starter_model()
    with tempfile.TemporaryDirectory(prefix="hearth-draft-bench-") as directory:
        target = f16_target(draft, Path(directory))
        sides = {
            "plain": Side(target, args.threads, 0, sampling=BENCH_SAMPLING),
            "draft": Side(target, args.threads, DRAFT_MODEL_TOKENS, draft, sampling=BENCH_SAMPLING),
            "every": Side(target, args.threads, DRAFT_MODEL_TOKENS, draft, sampling=BENCH_SAMPLING),
            "lookup": Side(target, args.threads, DRAFT_TOKENS, sampling=BENCH_SAMPLING),
        }
        # What the draft gives where guessing is free: the runner's costs fixed as a GPU's would be, so it
        # guesses at every step instead of stopping where guesses do not pay on this CPU.
        sides["every"].fix_guess_costs(every_guess_costs())
        for side in sides.values():
            side.reply(BENCH_TASKS["code"])
        rounds = [_round(sides, round_no) for round_no in range(1, args.rounds + 1)]
        rows = [row for batch in rounds for row in batch]
    data = {
        "target": target.name,
        "draft": draft.name,
        "threads": args.threads,
        "n_ctx": N_CTX,
        "draft_tokens": DRAFT_MODEL_TOKENS,
        "lookup_tokens": DRAFT_TOKENS,
        "max_tokens": BENCH_SAMPLING.max_tokens,
        "rows": rows,
        "median_speedup": {
            side: {
                task: statistics.median(r[f"{side}_speedup"] for r in rows if r["task"] == task)
                for task in BENCH_TASKS
            }
            for side in GUESSING
        },
        "all_identical": all(r[f"{side}_identical"] for r in rows for side in GUESSING),
    }
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")


def _round(sides: Mapping[str, Side], round_no: int) -> list[dict[str, Any]]:
    rows = []
    # Rotating which side goes first cancels slow drifts of the machine's speed between them.
    order = SIDES[round_no % len(SIDES) :] + SIDES[: round_no % len(SIDES)]
    for task, prompt in BENCH_TASKS.items():
        replies = {name: sides[name].reply(prompt) for name in order}
        rows.append(task_row(round_no, task, replies, GUESSING))
    return rows


def render_table(data: Mapping[str, Any]) -> str:
    header = "| round (first) | task | reply tokens | plain tok/s |"
    for side in GUESSING:
        header += f" {LABELS[side]}: tok/s | speedup | guessed tokens kept | same reply |"
    lines = [header, "|---" * (4 + 4 * len(GUESSING)) + "|"]
    for r in data["rows"]:
        line = f"| {r['round']} ({r['first']}) | {r['task']} | {r['tokens']} | {r['plain_tok_s']:.1f} |"
        for side in GUESSING:
            line += (
                f" {r[f'{side}_tok_s']:.1f} | ×{r[f'{side}_speedup']:.2f} "
                f"| {r[f'{side}_accepted']} of {r[f'{side}_drafted']} | {same_reply(r, side)} |"
            )
        lines.append(line)
    medians = {
        side: ", ".join(f"{task} ×{value:.2f}" for task, value in data["median_speedup"][side].items())
        for side in GUESSING
    }
    identical = (
        "every reply was identical to plain decoding's"
        if data["all_identical"]
        else "some replies differed from plain decoding's"
    )
    threads = data["threads"]
    return "\n".join(
        [
            *lines,
            "",
            f"Target {data['target']} (the starter's weights written as F16), draft {data['draft']}; "
            f"CPU, {threads} thread{'s' if threads != 1 else ''}, context {data['n_ctx']:,}, flash attention "
            f"on, draft guesses of up to {data['draft_tokens']} tokens, prompt lookup up to "
            f'{data["lookup_tokens"]}, greedy, at most {data["max_tokens"]} tokens per reply. "Every '
            "guess\": the runner's guess costs fixed as if a batch cost what one token does, so the draft "
            "guesses at every step. Median speedups: "
            + "; ".join(f"{LABELS[side]} {medians[side]}" for side in GUESSING)
            + f"; {identical}.",
        ]
    )


if __name__ == "__main__":
    main()
