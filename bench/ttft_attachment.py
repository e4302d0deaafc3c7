"""Bar P11: time to first token with an attached 20-page PDF that fits the context, vs the bare prompt eval.

    .venv/bin/python -m bench.ttft_attachment [--model PATH] [--pages 20] [--words-per-page 190]
        [--context 8192] [--rounds 3] [--no-publish]

Each round writes a new 20-page PDF with a real text layer (pypdf, one page per page of prose), attaches it
as the window does (DocumentLibrary.attach: extracted and stored once, before Send), then presses Send
through ChatService with the file attached and times until the first token reaches the GUI thread: reading
the stored text, counting it against the context, planning it in whole, storing the message with its
attachment, rendering and tokenizing in the runner, prompt evaluation, the pipe. Each round's prose is its
own, so nothing past the chat template's first tokens can come from the KV cache.

Baseline: the same model, loaded with the same plan by llama.cpp in this process (bench/ttft_prefix.py's
bare loop), evaluating exactly the prompt Hearth sent (the same extracted text in the same framing; the
token counts are checked equal) and sampling one token. Rounds alternate which side goes first.

The default pages hold about 250 tokens each, so that the document fits the starter model's 8,192-token
context (SmolLM2-135M's trained length) whole. The run also counts what Send did besides: how many times a
file was extracted (it must be none: attaching did it) and how many passages were embedded (none: a
document that fits is read whole, never searched).
Writes docs/bench/ttft_attachment.json and the README's table (bench/results.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from PySide6.QtCore import QCoreApplication

import app.documents.library as library_module
from app.chat.documents import TurnDocuments
from app.chat.engine import ChatEngine
from app.core import Core
from app.documents.context import DocumentContext
from app.paths import HearthPaths
from app.qt.chat_service import ChatService
from app.settings import Settings, SettingsStore
from bench import results
from bench.ttft_prefix import BareLoop, overhead, send_and_time, starter_model
from inference.protocol import ChatMessage
from tests.helpers.document_files import pdf_bytes

TARGET_RATIO = 1.10
QUESTION = "What is this report about, in one sentence?"
WORDS_PER_LINE = 10
# Everyday words, so that the tokenizer sees prose rather than rare pieces.
_WORDS = """
the river harbour city council report budget year spring summer winter autumn road bridge school
library market garden water power station train line station service people family house street
project plan cost growth office team member meeting decision change local regional national north
south east west new old large small early late public private first second third final annual rose
fell held opened closed built moved planned reported agreed noted asked expected increased
"""
VOCABULARY = tuple(_WORDS.split())

P = ParamSpec("P")
R = TypeVar("R")


def prose(rng: random.Random, pages: int, words_per_page: int) -> list[list[str]]:
    """Pages of lines of sentences; each call's text is its own (`rng`)."""
    out = []
    for page in range(pages):
        words = [rng.choice(VOCABULARY) for _ in range(words_per_page)]
        for end in range(rng.randint(8, 14), len(words), rng.randint(8, 16)):
            words[end - 1] += "."
        lines = [
            " ".join(words[i : i + WORDS_PER_LINE]).capitalize() for i in range(0, len(words), WORDS_PER_LINE)
        ]
        out.append([f"Page {page + 1}", *lines])
    return out


class Calls:
    """Counts calls to functions of app.documents.library while wrapped, from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    @contextmanager
    def counting(self, *names: str) -> Iterator[None]:
        originals = {name: getattr(library_module, name) for name in names}
        for name, function in originals.items():
            setattr(library_module, name, self._wrap(name, function))
        try:
            yield
        finally:
            for name, function in originals.items():
                setattr(library_module, name, function)

    def _wrap(self, name: str, function: Callable[P, R]) -> Callable[P, R]:
        def counted(*args: P.args, **kwargs: P.kwargs) -> R:
            with self._lock:
                self.counts[name] = self.counts.get(name, 0) + 1
            return function(*args, **kwargs)

        return counted


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--words-per-page", type=int, default=190)
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--rounds", type=int, default=3)
    results.add_publish_option(parser)
    args = parser.parse_args(argv)
    session = results.begin("ttft_attachment", args, argv)
    model = args.model or starter_model()
    app = QCoreApplication.instance() or QCoreApplication([])

    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as home:
        core = Core.open(HearthPaths(Path(home)))
        documents = core.documents()
        settings = SettingsStore(replace(Settings(), temperature=0.0, context_length=args.context))
        engine = ChatEngine(
            core.store, core.library, settings, runner_log=core.paths.runner_log_file, documents=documents
        )
        service = ChatService(engine)
        same = [m for m in core.library.list_models() if m.path == model.resolve()]
        name = same[0].name if same else core.library.import_file(model).name
        engine.ensure_loaded(name, context_length=args.context)
        plan = engine.client.plan
        assert plan is not None
        baseline_loop = BareLoop(model, plan)
        calls = Calls()
        try:
            for round_no in range(args.rounds):
                pdf = Path(home) / f"report-{round_no + 1}.pdf"
                pages = prose(random.Random(round_no), args.pages, args.words_per_page)
                pdf.write_bytes(pdf_bytes(pages, title=f"Report {round_no + 1}"))
                attached = documents.attach(pdf)
                prompt = DocumentContext(whole=(documents.attached_text(attached.name, attached.sha256),))
                tokens = baseline_loop.prompt_tokens([ChatMessage("user", prompt.prompt(QUESTION))])
                conversation = core.store.create_conversation(f"Report {round_no + 1}").id
                turn = TurnDocuments((attached,))

                def hearth(conversation: int = conversation, turn: TurnDocuments = turn) -> Any:
                    with calls.counting("extract", "extract_bytes", "chunk"):
                        return send_and_time(app, service, conversation, QUESTION, name, turn)

                bare_first = round_no % 2 == 0
                if bare_first:
                    bare = baseline_loop.prompt_eval_ms(tokens)
                first = hearth()
                if not bare_first:
                    bare = baseline_loop.prompt_eval_ms(tokens)
                check_whole(core, conversation, attached.sha256, first.stats.prompt_tokens, tokens)
                rounds.append(
                    {
                        "first": "bare" if bare_first else "hearth",
                        "pdf_bytes": pdf.stat().st_size,
                        "pages": attached.pages,
                        "chars": attached.chars,
                        "prompt_tokens": len(tokens),
                        "bare_ms": bare,
                        "hearth": {"ttft_ms": first.ttft_ms, "stats": dataclasses.asdict(first.stats)},
                        "ratio": first.ttft_ms / bare,
                        "outside_llama_cpp_ms": overhead(first),
                    }
                )
                print(
                    f"round {round_no + 1}: bare prompt eval {bare:9.1f} ms ({len(tokens)} tokens) · Hearth "
                    f"TTFT after Send {first.ttft_ms:9.1f} ms · ratio {rounds[-1]['ratio']:.3f} · outside "
                    f"llama.cpp {overhead(first):6.1f} ms",
                    flush=True,
                )
            embedded = documents.index.counts().embedded
        finally:
            baseline_loop.close()
            service.shutdown()
            documents.close()
            core.close()

    data = {
        "model": model.name,
        "where": f"GPU, {plan.n_gpu_layers} layers" if plan.n_gpu_layers else "CPU",
        "threads": plan.n_threads,
        "n_ctx": plan.n_ctx,
        "n_batch": plan.n_batch,
        "target": TARGET_RATIO,
        "rounds": rounds,
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "median_bare_ms": statistics.median(r["bare_ms"] for r in rounds),
        "median_hearth_ms": statistics.median(r["hearth"]["ttft_ms"] for r in rounds),
        "median_outside_ms": statistics.median(r["outside_llama_cpp_ms"] for r in rounds),
        # What Send did besides, over every round: the file was extracted when attached, never again.
        "extractions_during_send": calls.counts.get("extract", 0) + calls.counts.get("extract_bytes", 0),
        "chunkings_during_send": calls.counts.get("chunk", 0),
        "passages_embedded": embedded,
    }
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    return 0


def check_whole(
    core: Core,
    conversation: int,
    sha256: str,
    prompt_tokens: int | None,
    bare_tokens: list[int],
) -> None:
    """The document went in whole, and the runner evaluated as many tokens as the bare loop did."""
    user = next(m for m in core.store.list_messages(conversation) if m.role == "user")
    modes = [part.meta.get("mode") for part in user.attachments if part.file_sha256 == sha256]
    if modes != ["whole"]:
        sys.exit(f"the PDF did not fit the context whole ({modes}): use fewer --pages or a larger --context")
    if prompt_tokens != len(bare_tokens):
        sys.exit(f"Hearth's prompt had {prompt_tokens} tokens, the bare loop's {len(bare_tokens)}")


def render_table(data: Mapping[str, Any]) -> str:
    rounds = data["rounds"]
    n = len(rounds)
    last = rounds[-1]
    median_ratio, target = data["median_ratio"], data["target"]
    bare, hearth, outside = data["median_bare_ms"], data["median_hearth_ms"], data["median_outside_ms"]
    verdict = "met" if median_ratio <= target else "**not met**"
    per_round = ", ".join(f"{r['ratio']:.3f} ({r['first']} first)" for r in rounds)
    send_path = (
        "Send extracted no file and embedded no passage"
        if data["extractions_during_send"] == 0 and data["passages_embedded"] == 0
        else f"**Send extracted files {data['extractions_during_send']} times and "
        f"{data['passages_embedded']} passages were embedded**"
    )
    return "\n".join(
        [
            f"| | median of {n} rounds | best round |",
            "|---|---|---|",
            f"| bare prompt eval + first token ({last['prompt_tokens']:,} tokens in the last round) "
            f"| {bare:,.0f} ms | {min(r['bare_ms'] for r in rounds):,.0f} ms |",
            f"| Hearth, Send with the PDF attached → first token on the GUI thread | {hearth:,.0f} ms "
            f"| {min(r['hearth']['ttft_ms'] for r in rounds):,.0f} ms |",
            f"| ratio (median of per-round ratios) | {median_ratio:.3f} "
            f"| {min(r['ratio'] for r in rounds):.3f} |",
            f"| time Hearth spends outside llama.cpp's prompt eval | {outside:.1f} ms "
            f"({outside / bare:.1%} of the bare prompt eval) | |",
            f"| prompt tokens Hearth's runner found in its KV cache (the template and instruction) "
            f"| {statistics.median(r['hearth']['stats']['cached_prompt_tokens'] for r in rounds):,.0f} | |",
            "",
            f"A {last['pages']}-page PDF ({last['pdf_bytes'] / 1024:,.0f} KiB, {last['chars']:,} characters "
            f"of text) attached whole; {data['model']}, {data['where']}, {data['threads']} threads, context "
            f"{data['n_ctx']:,}, batch {data['n_batch']}. Per-round ratios: {per_round}. {send_path} "
            f"(over all rounds). Target ≤ {target:.2f}: {verdict}.",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
