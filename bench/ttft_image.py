"""Time to first token with one 1,024 × 1,024 photo for a local vision model, vs the bare library.

    .venv/bin/python -m bench.ttft_image [--model PATH] [--rounds 5] [--no-publish]

The vision model is the starter model with a generated projector (tests/helpers/tiny_vision.py: the layout
of LLaVA's, 156 KiB of random weights), because no vision model can be downloaded here. The figures are
therefore Hearth's path around a vision encoder, not a real encoder's cost: preparing the picture, storing
it, the pipe to the runner, mtmd's tokenizing and encoding, the image's embeddings and the prompt evaluated.
A real projector adds the same encoder time to both sides.

Each round makes its own 1,024 × 1,024 JPEG (camera noise, so nothing is cached), attaches it as the window
does and times, through ChatService, from Send to the first token on the GUI thread. Baseline, in the same
run and alternating which goes first: llama-cpp-python's own multimodal path (MTMDChatHandler with the same
projector, `Llama.create_chat_completion` streamed, the JPEG as a data URL, as its documentation shows),
same model, context, threads and batch, timed to its first streamed token. Also timed apart: checking the
photo when it is attached (app.images.prepare, a full decode) and preparing it at Send as the engine does:
no larger than the projector uses (this one resizes every picture to a 56-pixel square, so the photo is
scaled down until its short side is 56; the bare library is given the photo as it is).
Writes docs/bench/ttft_image.json and the README's table (bench/results.py).
"""

from __future__ import annotations

import argparse
import base64
import io
import statistics
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from PIL import Image
from PySide6.QtCore import QCoreApplication

from app.chat.documents import TurnDocuments
from app.chat.engine import ChatEngine
from app.core import Core
from app.images.prepare import ImageSizing, prepare_image
from app.paths import HearthPaths
from app.qt.chat_service import ChatService
from app.settings import Settings, SettingsStore
from bench import results
from bench.ttft_prefix import send_and_time, starter_model
from inference.ggml_backends import load_backends
from inference.gguf import read_header
from inference.projector import projector_info
from inference.protocol import LoadPlan
from tests.helpers.tiny_vision import write_tiny_projector

QUESTION = "What is in this photo?"
SIDE = 1024
CONTEXT = 2048


def photo(seed: int) -> bytes:
    out = io.BytesIO()
    Image.effect_noise((SIDE, SIDE), 40 + seed).convert("RGB").save(out, format="JPEG")
    return out.getvalue()


class BareLibrary:
    """llama-cpp-python's multimodal chat as its documentation shows it, loaded like Hearth's plan."""

    def __init__(self, model: Path, mmproj: Path, plan: LoadPlan) -> None:
        import llama_cpp
        from llama_cpp.llama_chat_format import MTMDChatHandler

        class TextTemplateHandler(MTMDChatHandler):
            """The starter model's template takes a message's content as one string (a vision model's
            takes the list of parts): the parts are joined the way Hearth joins them, the image first."""

            @classmethod
            def _convert_message_for_template(cls, message: Any, media_marker: str) -> dict[str, Any]:
                converted = super()._convert_message_for_template(message, media_marker)
                if isinstance(converted.get("content"), list):
                    converted["content"] = "\n".join(part["text"] for part in converted["content"])
                return converted

        load_backends()
        self.llm = llama_cpp.Llama(
            model_path=str(model),
            chat_handler=TextTemplateHandler(clip_model_path=str(mmproj), verbose=False, use_gpu=False),
            n_ctx=plan.n_ctx, n_batch=plan.n_batch, n_ubatch=plan.n_batch, n_threads=plan.n_threads,
            n_threads_batch=plan.n_threads, n_gpu_layers=plan.n_gpu_layers, verbose=False,
        )  # fmt: skip

    def ttft_ms(self, jpeg: bytes) -> float:
        url = "data:image/jpeg;base64," + base64.b64encode(jpeg).decode()
        messages: Any = [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": url}},
                    {"type": "text", "text": QUESTION},
                ],
            }
        ]
        started = time.perf_counter()
        stream = self.llm.create_chat_completion(
            messages=messages, max_tokens=8, temperature=0.0, stream=True
        )
        for chunk in stream:
            if chunk["choices"][0]["delta"].get("content"):  # type: ignore[index,union-attr]
                return (time.perf_counter() - started) * 1000.0
        raise SystemExit("the bare library produced no token")

    def close(self) -> None:
        self.llm.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    results.add_publish_option(parser)
    args = parser.parse_args(argv)
    session = results.begin("ttft_image", args, argv)
    model = args.model or starter_model()
    app = QCoreApplication.instance() or QCoreApplication([])

    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as home:
        folder = Path(home) / "model"
        folder.mkdir()
        mmproj = write_tiny_projector(folder / "mmproj-tiny-F16.gguf")
        projector = f"{mmproj.name} (generated, {mmproj.stat().st_size // 1024} KiB, random weights)"
        (folder / "vision.gguf").symlink_to(model.resolve())
        core = Core.open(HearthPaths(Path(home) / "hearth"))
        documents = core.documents()
        settings = SettingsStore(replace(Settings(), temperature=0.0, context_length=CONTEXT, gpu_layers=0))
        engine = ChatEngine(
            core.store, core.library, settings, runner_log=core.paths.runner_log_file, documents=documents
        )
        service = ChatService(engine)
        name = core.library.import_file(folder / "vision.gguf", name="SmolLM2 vision", mmproj=mmproj).name
        engine.ensure_loaded(name, context_length=CONTEXT)
        plan = engine.client.plan
        assert plan is not None
        bare_library = BareLibrary(model, mmproj, plan)
        # What the engine gives the runner at Send (ChatEngine._local_images).
        sizing = ImageSizing(settings.current.image_max_side, projector_info(read_header(mmproj)).resize)
        try:
            for round_no in range(args.rounds):
                jpeg = photo(round_no)
                path = Path(home) / f"photo-{round_no + 1}.jpg"
                path.write_bytes(jpeg)
                started = time.perf_counter()
                prepared = prepare_image(jpeg, path.name)
                check_ms = (time.perf_counter() - started) * 1000.0
                started = time.perf_counter()
                sent = prepare_image(jpeg, path.name, sizing=sizing, verified=True)
                prepare_ms = (time.perf_counter() - started) * 1000.0
                attached = documents.attach(path)
                conversation = core.store.create_conversation(f"Photo {round_no + 1}").id
                turn = TurnDocuments((attached,))
                bare_first = round_no % 2 == 0
                if bare_first:
                    bare = bare_library.ttft_ms(jpeg)
                hearth = send_and_time(app, service, conversation, QUESTION, name, turn)
                if not bare_first:
                    bare = bare_library.ttft_ms(jpeg)
                rounds.append(
                    {
                        "first": "bare" if bare_first else "hearth",
                        "jpeg_bytes": len(jpeg),
                        "prepared": [prepared.width, prepared.height, len(prepared.data)],
                        "sent": [sent.width, sent.height, len(sent.data)],
                        "check_ms": check_ms,
                        "prepare_ms": prepare_ms,
                        "bare_ms": bare,
                        "hearth_ms": hearth.ttft_ms,
                        "prompt_tokens": hearth.stats.prompt_tokens,
                        "ratio": hearth.ttft_ms / bare,
                    }
                )
                print(
                    f"round {round_no + 1}: bare library {bare:8.1f} ms · Hearth {hearth.ttft_ms:8.1f} ms · "
                    f"ratio {rounds[-1]['ratio']:.3f} · checking the image {check_ms:6.1f} ms, preparing it "
                    f"at Send {prepare_ms:6.1f} ms",
                    flush=True,
                )
        finally:
            bare_library.close()
            service.shutdown()
            documents.close()
            core.close()

    data = {
        "model": model.name,
        "projector": projector,
        "threads": plan.n_threads,
        "n_ctx": plan.n_ctx,
        "n_batch": plan.n_batch,
        "rounds": rounds,
        "median_ratio": statistics.median(r["ratio"] for r in rounds),
        "median_bare_ms": statistics.median(r["bare_ms"] for r in rounds),
        "median_hearth_ms": statistics.median(r["hearth_ms"] for r in rounds),
        "median_check_ms": statistics.median(r["check_ms"] for r in rounds),
        "median_prepare_ms": statistics.median(r["prepare_ms"] for r in rounds),
    }
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    return 0


def render_table(data: Mapping[str, Any]) -> str:
    rounds = data["rounds"]
    n = len(rounds)
    last = rounds[-1]
    per_round = ", ".join(f"{r['ratio']:.3f} ({r['first']} first)" for r in rounds)
    sent_w, sent_h, _ = last.get("sent", last["prepared"])
    return "\n".join(
        [
            f"| | median of {n} rounds | best round |",
            "|---|---|---|",
            f"| llama-cpp-python's MTMDChatHandler, streamed, → first token "
            f"| {data['median_bare_ms']:,.0f} ms | {min(r['bare_ms'] for r in rounds):,.0f} ms |",
            f"| Hearth, Send with the photo attached → first token on the GUI thread "
            f"| {data['median_hearth_ms']:,.0f} ms | {min(r['hearth_ms'] for r in rounds):,.0f} ms |",
            f"| ratio (median of per-round ratios) | {data['median_ratio']:.3f} "
            f"| {min(r['ratio'] for r in rounds):.3f} |",
            "| checking the photo when it is attached (decoded in full; not part of the time above) "
            f"| {data['median_check_ms']:,.1f} ms | {min(r['check_ms'] for r in rounds):,.1f} ms |",
            f"| preparing it at Send (sized to what the projector uses: {sent_w} × {sent_h}) "
            f"| {data['median_prepare_ms']:,.1f} ms | {min(r['prepare_ms'] for r in rounds):,.1f} ms |",
            "",
            f"One {SIDE:,} × {SIDE:,} JPEG ({last['jpeg_bytes'] / 1024:,.0f} KiB) per round, "
            f"{last['prompt_tokens']} prompt tokens with the image; {data['model']} with "
            f"{data['projector']}, CPU, {data['threads']} threads, context {data['n_ctx']:,}, batch "
            f"{data['n_batch']}. Per-round ratios: {per_round}.",
        ]
    )


if __name__ == "__main__":
    raise SystemExit(main())
