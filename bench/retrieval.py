"""Bar P10: hybrid retrieval latency over a collection of 100,000 and 1,000,000 passages: under 50 ms at
p95, and flat as the collection grows tenfold.

    .venv/bin/python -m bench.retrieval [--sizes 100000 1000000] [--queries 200] [--dims 384]
        [--keep DIR] [--no-publish]

For each size, builds a database with the app's own schema (migrations included) in a temporary folder
(or in --keep DIR, where a later run measures it again without building) and fills it through the real
ChunkIndex.add_chunks (50 passages a document, one collection holding every document): passages of
English and Chinese text drawn from Zipf-distributed vocabularies (so some words and bigrams are in most
passages, as in real text) and random unit vectors. Then, through the real ChunkIndex:

- prepares the collection's vector graph (ChunkIndex.prepare, as indexing a collection does: built from
  SQLite, or loaded from the file a --keep run saved beside the database);
- times the first question, then --queries questions, hybrid (full-text + vectors, fused), the figure the
  bar is about, and the same questions full-text only and vectors only, to show where the time goes;

with the CPU time of each question next to its wall time (on a shared machine, wall time also counts
waiting for a core). Flatness is each p95 at the largest size over the p95 at the smallest.

A question is a stretch of one passage (a few English words or a dozen Chinese characters, common ones
included) with a vector near that passage's. Random vectors measure time, not quality (they have no
neighbourhoods for a graph to follow, the hardest case for it): retrieval quality, exact and through the
graph, is measured with the real embedding model on a real corpus by bench/recall.py. Building the
million-passage database takes about ten minutes here, its graph as long again; --keep keeps both.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
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

from app.documents.ann import APPROXIMATE_FROM
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


MODES = ("hybrid", "full-text only", "vectors only")


def measure(path: Path, asked: list[tuple[str, np.ndarray[Any, Any], str]]) -> dict[str, Any]:
    database = Database.open(path, path.parent / "backups")
    index = ChunkIndex(database)
    try:
        started = time.perf_counter()
        prepared = index.prepare(COLLECTION_ID, MODEL)
        prepare_s = time.perf_counter() - started
        question, vector, _ = asked[0]
        started = time.perf_counter()
        index.search(question, vector, scope=COLLECTION_ID, embedding_model=MODEL)
        first_ms = (time.perf_counter() - started) * 1000.0
        wall: dict[str, list[float]] = {mode: [] for mode in MODES}
        # CPU time of the process (every thread): what a question costs whatever else the machine is
        # running, where wall time also counts the wait for a core.
        cpu: dict[str, list[float]] = {mode: [] for mode in MODES}
        found = 0
        for question, vector, source in asked:
            for mode, (words, near) in zip(
                MODES, ((question, vector), (question, None), ("", vector)), strict=True
            ):
                started, started_cpu = time.perf_counter(), time.process_time()
                hits = index.search(
                    words, near, scope=COLLECTION_ID, embedding_model=MODEL if near is not None else None
                )
                wall[mode].append((time.perf_counter() - started) * 1000.0)
                cpu[mode].append((time.process_time() - started_cpu) * 1000.0)
                if mode == "hybrid":
                    found += any(hit.text == source for hit in hits)
        index.wait()
        return {
            "vector_search": "graph" if prepared is not None else "exact",
            # None when the graph was loaded as saved (a --keep run), else how many vectors went in.
            "graph_added": prepared.added if prepared is not None else None,
            "prepare_s": prepare_s,
            "first_ms": first_ms,
            "modes": {mode: {**_ms(times), "runs_ms": times} for mode, times in wall.items()},
            "cpu": {mode: {**_ms(times), "runs_ms": times} for mode, times in cpu.items()},
            "source_in_top_8": found / len(asked),
        }
    finally:
        database.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
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
                f"  {measured['vector_search']} vectors (ready in {measured['prepare_s']:.0f} s); hybrid p50 "
                f"{hybrid['p50_ms']:.1f} ms, p95 {hybrid['p95_ms']:.1f} ms; first question "
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
        # Through ann: importing usearch before its locale set-up breaks llama.cpp in this process.
        "usearch": importlib.metadata.version("usearch"),
        "approximate_from": APPROXIMATE_FROM,
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


def flatness(data: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    """p95 at the largest size over p95 at the smallest, wall and CPU, per mode."""
    sizes = data["sizes"]
    small = min(sizes, key=lambda row: row["chunks"])
    large = max(sizes, key=lambda row: row["chunks"])
    return {
        mode: {kind: large[kind][mode]["p95_ms"] / small[kind][mode]["p95_ms"] for kind in ("modes", "cpu")}
        for mode in MODES
    }


def render_table(data: Mapping[str, Any]) -> str:
    lines = [
        "| passages | vectors searched | hybrid p50 / p95 | hybrid CPU p50 / p95 | full text only p50 / p95 "
        "(CPU p95) | vectors only p50 / p95 (CPU p95) | first question | ready |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in data["sizes"]:
        hybrid, fts, vectors = (row["modes"][m] for m in MODES)
        cpu = row["cpu"]
        if row["vector_search"] == "exact":
            ready = f"exact, {row['size_mib']:,.0f} MiB"
        elif row["graph_added"]:
            ready = f"graph built in {row['prepare_s']:,.0f} s, {row['size_mib']:,.0f} MiB"
        else:
            ready = f"graph loaded in {row['prepare_s']:,.1f} s, {row['size_mib']:,.0f} MiB"
        built = "" if row["built_s"] is None else f"database built in {row['built_s']:,.0f} s; "
        lines.append(
            f"| {row['chunks']:,} | {row['vector_search']} "
            f"| {hybrid['p50_ms']:.1f} / {hybrid['p95_ms']:.1f} ms "
            f"| {cpu['hybrid']['p50_ms']:.1f} / {cpu['hybrid']['p95_ms']:.1f} ms "
            f"| {fts['p50_ms']:.1f} / {fts['p95_ms']:.1f} ms ({cpu['full-text only']['p95_ms']:.1f}) "
            f"| {vectors['p50_ms']:.1f} / {vectors['p95_ms']:.1f} ms ({cpu['vectors only']['p95_ms']:.1f}) "
            f"| {row['first_ms']:,.0f} ms | {built}{ready} |"
        )
    sizes = data["sizes"]
    target = data["target_p95_ms"]
    largest = max(sizes, key=lambda row: row["chunks"])
    p95 = largest["modes"]["hybrid"]["p95_ms"]
    verdict = "met" if p95 < target else "**not met**"
    growth = ""
    if len(sizes) > 1:
        smallest = min(sizes, key=lambda row: row["chunks"])
        ratios = flatness(data)
        growth = (
            f" From {smallest['chunks']:,} to {largest['chunks']:,} passages "
            f"({largest['chunks'] / smallest['chunks']:.0f}×), p95 at the largest over p95 at the smallest "
            "(wall; CPU): "
            + "; ".join(f"{mode} {r['modes']:.2f}× ({r['cpu']:.2f}×)" for mode, r in ratios.items())
            + "."
        )
    found = ", ".join(f"{row['source_in_top_8']:.0%}" for row in sizes)
    return "\n".join(
        [
            *lines,
            "",
            f"{data['queries']} questions per size (English and Chinese), {data['dims']}-dimensional "
            f"random vectors, one collection holding every passage; collections from "
            f"{data['approximate_from']:,} vectors are searched through their HNSW graph (usearch "
            f"{data['usearch']}), smaller ones exactly. SQLite {data['sqlite']}, NumPy {data['numpy']}; "
            f"1-minute load average {data['load_average'][0]:.1f} at the start and "
            f"{data['load_average'][1]:.1f} at the end on {data['cores']} cores. The passage a question came "
            f"from was among its 8 hits for {found} of the questions (random vectors have no neighbourhoods "
            "for a graph to follow: its worst case; bench/recall.py measures quality with the real model). "
            f"Target p95 < {target:.0f} ms at the largest size: {verdict}.{growth}",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
