"""Bar P9: document ingestion (extraction, chunking, embedding, indexing) against its two parts alone.

    .venv/bin/python -m bench.ingestion [--files 20] [--kib 20] [--rounds 3] [--model PATH] [--no-publish]

Generates --files Markdown files of about --kib KiB each (headings over paragraphs taken in turn from the
retrieval corpus, tests/data/retrieval: English and Chinese alike, each paragraph numbered so that no two
are the same), then, round after round, times three things on the same files:

- end to end: DocumentLibrary.refresh of a new collection holding them, on a fresh database (extract,
  chunk, embed with the bundled model in its runner, store passages, vectors and full-text terms);
- extraction alone: app.documents.extract on each file (the parser's own speed);
- the embedding model alone: RunnerEmbedder.embed_passages on the same chunks in a bare loop, in batches
  of the library's size (EMBED_BATCH) over all of them, where the library batches within each file (the
  chunks are made once, before the rounds).

The model is loaded once, before the first round, and the three share it, alternating which goes first so
a change in the machine's load weighs on all of them. Each is a rate over the same input bytes; a round's
ratio is the end-to-end rate over the slower of the other two, and the bar is a median ratio of at least
0.9.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from app.attachments.files import FileStore
from app.documents.chunking import chunk
from app.documents.embedding import RunnerEmbedder
from app.documents.extract import extract
from app.documents.library import EMBED_BATCH, DocumentLibrary, Embedder
from app.paths import bundled_embedding_model
from app.storage.db import Database
from bench import results

CORPUS: Final = results.ROOT / "tests" / "data" / "retrieval"
BAR: Final = 0.9
SIDES: Final = ("end_to_end", "extraction", "embedding")
SIDE_LABELS: Final = {
    "end_to_end": "end to end (DocumentLibrary.refresh)",
    "extraction": "extraction alone",
    "embedding": "embedding model alone (bare loop)",
}


def paragraphs(corpus: Path) -> list[str]:
    return [p.read_text(encoding="utf-8").strip() for p in sorted((corpus / "passages").glob("*.txt"))]


def make_files(folder: Path, count: int, kib: int, source: list[str]) -> list[Path]:
    """`count` Markdown files of about `kib` KiB: a heading every three paragraphs, each paragraph prefixed
    with its file and place, so no chunk repeats another."""
    folder.mkdir(parents=True, exist_ok=True)
    made = []
    taken = 0
    for number in range(count):
        parts = [f"# Notes {number + 1}\n"]
        size, place = 0, 0
        while size < kib * 1024:
            if place % 3 == 0:
                parts.append(f"\n## Part {place // 3 + 1}\n")
            parts.append(f"\n({number + 1}.{place + 1}) {source[taken % len(source)]}\n")
            size = sum(len(part.encode()) for part in parts)
            place += 1
            taken += 1
        path = folder / f"notes-{number + 1:02}.md"
        path.write_text("".join(parts), encoding="utf-8")
        made.append(path)
    return made


def end_to_end(folder: Path, embedder: Embedder, scratch: Path) -> float:
    """Seconds to index the folder as a new collection on a fresh database (opening the database, which
    runs the migrations, is not counted: the app has it open already)."""
    home = Path(tempfile.mkdtemp(prefix="home-", dir=scratch))
    db = Database.open(home / "hearth.sqlite3", home / "backups")
    try:
        library = DocumentLibrary(db, FileStore(home / "attachments"), lambda: embedder)
        started = time.perf_counter()
        library.collections.create("bench", [folder])
        report = library.refresh("bench")
        elapsed = time.perf_counter() - started
        if report.failed or report.indexed == 0:
            raise RuntimeError(f"indexing failed: {report}")
        return elapsed
    finally:
        db.dispose()


def extraction(files: list[Path]) -> int:
    return sum(extract(path).chars for path in files)


def embedding(texts: list[str], embedder: Embedder) -> int:
    for start in range(0, len(texts), EMBED_BATCH):
        embedder.embed_passages(texts[start : start + EMBED_BATCH])
    return len(texts)


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def measure(files: list[Path], embedder: RunnerEmbedder, rounds: int, scratch: Path) -> dict[str, Any]:
    texts = [c.text for path in files for c in chunk(extract(path))]
    tokens = sum(embedder.count_tokens(t) for t in texts)
    size = sum(path.stat().st_size for path in files)
    embedder.embed_passages(["warm-up"])
    folder = files[0].parent
    work: dict[str, Callable[[], float]] = {
        "end_to_end": lambda: end_to_end(folder, embedder, scratch),
        "extraction": lambda: timed(lambda: extraction(files)),
        "embedding": lambda: timed(lambda: embedding(texts, embedder)),
    }
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    for round_ in range(rounds):
        order = SIDES if round_ % 2 == 0 else tuple(reversed(SIDES))
        for side in order:
            seconds[side].append(work[side]())
            print(f"round {round_ + 1} {side:10}: {seconds[side][-1]:.2f} s", flush=True)
    ratios = [
        # Rates over the same bytes: the slower side is the one that took longer.
        max(extract_s, embed_s) / e2e_s
        for e2e_s, extract_s, embed_s in zip(*(seconds[s] for s in SIDES), strict=True)
    ]
    return {
        "files": len(files),
        "bytes": size,
        "chunks": len(texts),
        "tokens": tokens,
        "embed_batch": EMBED_BATCH,
        "seconds": seconds,
        "ratios": ratios,
        "median_ratio": statistics.median(ratios),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--kib", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", type=Path, default=None)
    results.add_publish_option(parser)
    args = parser.parse_args(argv)
    model = args.model or bundled_embedding_model()
    if model is None:
        print("no embedding model: run scripts/bootstrap.sh, or pass --model", file=sys.stderr)
        return 1
    session = results.begin("ingestion", args, argv)
    embedder = RunnerEmbedder(model)
    try:
        with tempfile.TemporaryDirectory(prefix="hearth-p9-") as scratch:
            files = make_files(Path(scratch) / "docs", args.files, args.kib, paragraphs(CORPUS))
            data = {"model": model.name, **measure(files, embedder, args.rounds, Path(scratch))}
    finally:
        embedder.close()
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    else:
        print(json.dumps({k: v for k, v in data.items() if k != "model"}))
    return 0


def render_table(data: Mapping[str, Any]) -> str:
    rows = ["| what | median | MB/s | tokens/s |", "|---|---|---|---|"]
    for side in SIDES:
        median = statistics.median(data["seconds"][side])
        rate = data["bytes"] / median / 1e6
        per_token = "—" if side == "extraction" else f"{data['tokens'] / median:,.0f}"
        rows.append(f"| {SIDE_LABELS[side]} | {median:,.2f} s | {rate:,.3f} | {per_token} |")
    ratio = data["median_ratio"]
    verdict = "meets" if ratio >= BAR else "misses"
    return "\n".join(
        [
            *rows,
            "",
            f"{data['files']} Markdown files, {data['bytes'] / 1024:,.0f} KiB, {data['chunks']:,} chunks, "
            f"{data['tokens']:,} tokens; {data['model']}, batches of {data['embed_batch']}; medians of "
            f"{len(data['ratios'])} rounds. End to end runs at {ratio:.2f}× the slower of the two alone "
            f"(median of the rounds' ratios), which {verdict} the bar of {BAR}×.",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
