"""Bar P10: hybrid retrieval latency over a collection of 10,000 and 100,000 passages.

    .venv/bin/python -m bench.retrieval [--sizes 10000 100000] [--queries 200] [--dims 384]
        [--keep DIR] [--no-publish]

For each size, builds a database with the app's own schema (migrations included) in a temporary folder
(or in --keep DIR, where a later run measures it again without building) and fills it through the real
ChunkIndex.add_chunks (50 passages a document, one collection holding every document): passages of
English and Chinese text drawn from Zipf-distributed vocabularies (so some words and bigrams are in most
passages, as in real text) and random unit vectors. Then times, through the real
ChunkIndex.search over the collection:

- the first question (it reads every vector out of SQLite into the in-memory matrix),
- --queries questions, hybrid (full-text + vectors, fused), the figure the bar is about,
- the same questions full-text only and vectors only, to show where the time goes,

and the CPU time of each hybrid question (on a shared machine, wall time also counts waiting for a core).

A question is a stretch of one passage (a few English words or a dozen Chinese characters, common ones
included) with a vector near that passage's. The vectors are random, so this measures time, not quality:
retrieval quality is measured with the real embedding model on a real corpus.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from app.documents.index import ChunkIndex, ChunkInput
from app.storage.db import Database
from bench import results

SEED = 20250301
TARGET_P95_MS = 50.0
CHUNKS_PER_DOCUMENT = 50
EN_VOCABULARY = 20_000
ZH_VOCABULARY = 20_000
ZH_SHARE = 0.3  # of passages
MODEL = "f" * 64  # stands for the embedding model's SHA-256
COLLECTION_ID = 1
SYLLABLES = ("ka", "lo", "mi", "ren", "sa", "to", "vel", "qua", "dor", "ni", "pe", "shu", "ar", "bel", "cy")
# The 3,500 characters of the Chinese "common characters" list are spread over the unified block; a
# random 3,500 of it gives bigrams as frequent as real ones are.
HAN_FIRST, HAN_LAST, HAN_COMMON = 0x4E00, 0x9FA5, 3500


def _zipf(rng: random.Random, vocabulary: list[str]) -> Iterator[str]:
    cumulative = list(itertools.accumulate(1.0 / rank for rank in range(1, len(vocabulary) + 1)))
    while True:
        yield from rng.choices(vocabulary, cum_weights=cumulative, k=10_000)


def _english(rng: random.Random) -> list[str]:
    words: set[str] = set()
    while len(words) < EN_VOCABULARY:
        words.add("".join(rng.choices(SYLLABLES, k=rng.randint(1, 4))))
    return sorted(words)


def _chinese(rng: random.Random) -> list[str]:
    characters = [chr(c) for c in rng.sample(range(HAN_FIRST, HAN_LAST + 1), HAN_COMMON)]
    words: set[str] = set()
    while len(words) < ZH_VOCABULARY:
        words.add("".join(rng.choices(characters, k=rng.choice((1, 2, 2, 2, 3, 4)))))
    return sorted(words)


def passages(rng: random.Random, count: int) -> list[str]:
    english, chinese = _zipf(rng, _english(rng)), _zipf(rng, _chinese(rng))
    texts = []
    for _ in range(count):
        if rng.random() < ZH_SHARE:
            sentences = [
                "".join(next(chinese) for _ in range(rng.randint(6, 14))) for _ in range(rng.randint(8, 16))
            ]
            texts.append("。".join(sentences) + "。")
        else:
            sentences = [
                " ".join(next(english) for _ in range(rng.randint(8, 20))) for _ in range(rng.randint(8, 14))
            ]
            texts.append(". ".join(s.capitalize() for s in sentences) + ".")
    return texts


def unit_vectors(rng: np.random.Generator, count: int, dims: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    vectors = rng.standard_normal((count, dims), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def corpus(size: int, dims: int) -> tuple[list[str], np.ndarray[Any, np.dtype[np.float32]]]:
    """The passages and their vectors: the same for the same size, so --keep can measure again."""
    return passages(random.Random(SEED + size), size), unit_vectors(
        np.random.default_rng(SEED + size), size, dims
    )


def build(path: Path, texts: list[str], vectors: np.ndarray[Any, Any]) -> float:
    """Returns the seconds it took."""
    started = time.perf_counter()
    database = Database.open(path, path.parent / "backups")
    index = ChunkIndex(database)
    shas = []
    for document, start in enumerate(range(0, len(texts), CHUNKS_PER_DOCUMENT)):
        sha = hashlib.sha256(f"document {document}".encode()).hexdigest()
        shas.append(sha)
        stop = min(len(texts), start + CHUNKS_PER_DOCUMENT)
        chunks = [ChunkInput(texts[i], f"page {i - start + 1}", i - start) for i in range(start, stop)]
        index.add_chunks(sha, chunks, vectors[start:stop], MODEL)
    database.dispose()
    # The collection around them, as indexing would leave it (CollectionStore has no bulk import).
    now = datetime.now(UTC).isoformat(timespec="microseconds")
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(
            "INSERT INTO collections (id, name, created_at, updated_at, embedding_model) "
            "VALUES (?, ?, ?, ?, ?)",
            (COLLECTION_ID, "bench", now, now, MODEL),
        )
        conn.executemany(
            "INSERT INTO collection_files (collection_id, path, size_bytes, mtime_ns, content_sha256, "
            "status, indexed_at) VALUES (?, ?, 1000, 0, ?, 'indexed', ?)",
            [(COLLECTION_ID, f"/docs/{i}.pdf", sha, now) for i, sha in enumerate(shas)],
        )
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return time.perf_counter() - started


def questions(
    texts: list[str], vectors: np.ndarray[Any, Any], count: int
) -> list[tuple[str, np.ndarray[Any, Any], str]]:
    """(question, its vector, the passage it came from)."""
    rng, vector_rng = random.Random(SEED), np.random.default_rng(SEED)
    asked = []
    for _ in range(count):
        source = rng.randrange(len(texts))
        passage = texts[source]
        if passage.isascii():
            words = passage.replace(".", "").split()
            start = rng.randrange(len(words) - 8)
            question = " ".join(words[start : start + rng.randint(4, 8)])
        else:
            start = rng.randrange(len(passage) - 20)
            question = passage[start : start + rng.randint(8, 16)]
        near = vectors[source] + vector_rng.standard_normal(vectors.shape[1]).astype(np.float32) * 0.05
        asked.append((question, near, passage))
    return asked


def _ms(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "p50_ms": statistics.median(ordered),
        "p95_ms": ordered[max(0, round(0.95 * len(ordered)) - 1)],
        "max_ms": ordered[-1],
    }


def measure(path: Path, asked: list[tuple[str, np.ndarray[Any, Any], str]]) -> dict[str, Any]:
    database = Database.open(path, path.parent / "backups")
    index = ChunkIndex(database)
    try:
        question, vector, _ = asked[0]
        started = time.perf_counter()
        index.search(question, vector, scope=COLLECTION_ID, embedding_model=MODEL)
        first_ms = (time.perf_counter() - started) * 1000.0
        modes: dict[str, list[float]] = {"hybrid": [], "full-text only": [], "vectors only": []}
        # CPU time of the process (both threads of a hybrid search): what a question costs whatever else
        # the machine is running, where wall time also counts the wait for a core.
        cpu: list[float] = []
        found = 0
        for question, vector, source in asked:
            for mode, (words, near) in {
                "hybrid": (question, vector),
                "full-text only": (question, None),
                "vectors only": ("", vector),
            }.items():
                started, started_cpu = time.perf_counter(), time.process_time()
                hits = index.search(
                    words, near, scope=COLLECTION_ID, embedding_model=MODEL if near is not None else None
                )
                modes[mode].append((time.perf_counter() - started) * 1000.0)
                if mode == "hybrid":
                    cpu.append((time.process_time() - started_cpu) * 1000.0)
                    found += any(hit.text == source for hit in hits)
        return {
            "first_ms": first_ms,
            "modes": {mode: {**_ms(times), "runs_ms": times} for mode, times in modes.items()},
            "hybrid_cpu": {**_ms(cpu), "runs_ms": cpu},
            "source_in_top_8": found / len(asked),
        }
    finally:
        database.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--keep", type=Path, metavar="DIR", help="build (or reuse) the databases here")
    results.add_publish_option(parser)
    args = parser.parse_args(argv)
    session = results.begin("retrieval", args, argv)

    folder = args.keep or Path(tempfile.mkdtemp(prefix="hearth-p10-"))
    rows = []
    try:
        for size in args.sizes:
            path = folder / f"retrieval-{size}.sqlite3"
            folder.mkdir(parents=True, exist_ok=True)
            texts, vectors = corpus(size, args.dims)
            built_s = None if path.exists() else build(path, texts, vectors)
            size_mib = path.stat().st_size / (1 << 20)
            print(f"{size:,} passages: built in {built_s or 0:,.0f} s, {size_mib:,.0f} MiB", flush=True)
            measured = measure(path, questions(texts, vectors, args.queries))
            rows.append({"chunks": size, "built_s": built_s, "size_mib": size_mib, **measured})
            hybrid = measured["modes"]["hybrid"]
            print(
                f"  hybrid p50 {hybrid['p50_ms']:.1f} ms, p95 {hybrid['p95_ms']:.1f} ms; first question "
                f"{measured['first_ms']:.0f} ms",
                flush=True,
            )
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    data = {
        "queries": args.queries,
        "dims": args.dims,
        "sqlite": sqlite3.sqlite_version,
        "numpy": np.__version__,
        "target_p95_ms": TARGET_P95_MS,
        "sizes": rows,
        # As bench/results.py records them, here for the table: how busy the cores were.
        "load_average": [round(session.load_at_start[0], 2), round(os.getloadavg()[0], 2)],
        "cores": os.cpu_count(),
    }
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    return 0


def render_table(data: Mapping[str, Any]) -> str:
    lines = [
        "| passages | hybrid p50 | hybrid p95 | hybrid CPU time p50 / p95 | full-text only p50 / p95 "
        "| vectors only p50 / p95 | first question | built |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in data["sizes"]:
        hybrid, fts, vectors = (row["modes"][m] for m in ("hybrid", "full-text only", "vectors only"))
        built = "" if row["built_s"] is None else f"{row['built_s']:,.0f} s, "
        lines.append(
            f"| {row['chunks']:,} | {hybrid['p50_ms']:.1f} ms | {hybrid['p95_ms']:.1f} ms "
            f"| {row['hybrid_cpu']['p50_ms']:.1f} / {row['hybrid_cpu']['p95_ms']:.1f} ms "
            f"| {fts['p50_ms']:.1f} / {fts['p95_ms']:.1f} ms "
            f"| {vectors['p50_ms']:.1f} / {vectors['p95_ms']:.1f} ms "
            f"| {row['first_ms']:,.0f} ms | {built}{row['size_mib']:,.0f} MiB |"
        )
    sizes = data["sizes"]
    target = data["target_p95_ms"]
    largest = max(sizes, key=lambda row: row["chunks"])
    p95 = largest["modes"]["hybrid"]["p95_ms"]
    verdict = "met" if p95 < target else "**not met**"
    growth = ""
    if len(sizes) > 1:
        smallest = min(sizes, key=lambda row: row["chunks"])
        ratio = p95 / smallest["modes"]["hybrid"]["p95_ms"]
        growth = (
            f" From {smallest['chunks']:,} to {largest['chunks']:,} passages "
            f"({largest['chunks'] / smallest['chunks']:.0f}×) the hybrid p95 grew {ratio:.2f}×."
        )
    return "\n".join(
        [
            *lines,
            "",
            f"{data['queries']} questions per size (English and Chinese), {data['dims']}-dimensional "
            f"vectors, one collection holding every passage; SQLite {data['sqlite']}, NumPy {data['numpy']}; "
            f"1-minute load average {data['load_average'][0]:.1f} at the start and "
            f"{data['load_average'][1]:.1f} at the end on {data['cores']} cores. "
            f"Target p95 < {target:.0f} ms at the largest size: {verdict}.{growth}",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
