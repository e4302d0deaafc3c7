"""Issue 15, item 5: retrieval quality on a corpus of our own, in English, Chinese and across the two.

    .venv/bin/python -m bench.recall [--corpus tests/data/retrieval] [--model PATH] [--no-publish]

The corpus (tests/data/retrieval/) is 60 short passages on everyday and technical topics, 30 in English and
30 in Chinese, each a file of its own, and questions that paraphrase them: two per passage in its own
language (other words than the passage's; for Chinese, other characters), plus English questions about
Chinese passages and Chinese questions about English ones. Each question names the one passage that
answers it.

The passages are indexed as a collection through the product's own path (DocumentLibrary.refresh: extract,
chunk, embed with the bundled model in its runner, ChunkIndex.add_chunks), then every question is asked
three ways of the same ChunkIndex.search:

- full text only: the question's words, no vector (bm25 over FTS5);
- vectors only: the question's embedding, no words;
- hybrid: both, fused by the index's Reciprocal Rank Fusion: what a chat's question gets;

and the last two again through the collection's HNSW graph (app.documents.ann), which the product uses
from 20,000 vectors on and here is made to serve the small corpus, so that approximate search is judged
against exact search on the same questions.

Reported per question set: recall@1, @3 and @5 (the share of questions whose passage is among the first
k) and MRR (the mean of 1 / the passage's rank, 0 when it is not ranked). So that a change to the fusion
can be judged on the same run, the two single lists are fused again here with the full-text list's votes
weighted differently and with other RRF constants (the first variant is the product's own fusion, which this
checks it reproduces; weight 1 at k 60 is the textbook RRF it replaced).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sqlalchemy import text

from app.attachments.files import FileStore
from app.documents.embedding import RunnerEmbedder
from app.documents.index import CANDIDATES, FTS_WEIGHT, RRF_K, ChunkIndex
from app.documents.library import DocumentLibrary, Embedder
from app.paths import bundled_embedding_model
from app.storage.db import Database
from bench import results

CORPUS: Final = results.ROOT / "tests" / "data" / "retrieval"
MODES: Final = ("full_text", "vectors", "hybrid", "vectors_graph", "hybrid_graph")
MODE_LABELS: Final = {
    "full_text": "full text only",
    "vectors": "vectors only",
    "hybrid": "hybrid (RRF)",
    "vectors_graph": "vectors only, HNSW graph",
    "hybrid_graph": "hybrid, HNSW graph",
}
# What the graph's modes are compared with.
EXACT_OF: Final = {"vectors_graph": "vectors", "hybrid_graph": "hybrid"}
SETS: Final = ("en", "zh", "cross", "all")
SET_LABELS: Final = {
    "en": "English",
    "zh": "Chinese",
    "cross": "cross-language",
    "all": "all",
}
CUTOFFS: Final = (1, 3, 5)
# Re-fused variants: (the full-text list's weight, RRF k). The first is the product's fusion.
FUSIONS: Final = ((FTS_WEIGHT, RRF_K), (1.0, 60), (0.5, 60), (0.25, 60), (0.25, 10))


@dataclass(frozen=True)
class Question:
    text: str
    passage: str  # the answering passage's id: its file name without the suffix
    set: str  # "en", "zh" or "cross"


def load_questions(corpus: Path) -> list[Question]:
    raw = json.loads((corpus / "questions.json").read_text(encoding="utf-8"))
    return [Question(item["question"], item["passage"], item["set"]) for item in raw]


def passage_files(corpus: Path) -> list[Path]:
    return sorted((corpus / "passages").glob("*.txt"))


@dataclass(frozen=True)
class Indexed:
    """The corpus as a collection: where to search, and which passage each chunk belongs to."""

    index: ChunkIndex
    collection_id: int
    passage_of_chunk: dict[int, str]
    graph: ChunkIndex  # the same passages, searched through the collection's graph whatever its size


def index_corpus(home: Path, corpus: Path, embedder: Embedder) -> Indexed:
    """The corpus indexed as a collection on a fresh database in `home`, through DocumentLibrary.refresh."""
    db = Database.open(home / "hearth.sqlite3", home / "backups")
    library = DocumentLibrary(db, FileStore(home / "attachments"), lambda: embedder)
    collection = library.collections.create("recall", [corpus / "passages"])
    report = library.refresh("recall")
    if report.failed:
        raise RuntimeError(f"passages failed to index: {report.failed}")
    by_sha = {hashlib.sha256(path.read_bytes()).hexdigest(): path.stem for path in passage_files(corpus)}
    with db.read_session() as session:
        rows = session.execute(text("SELECT id, content_sha256 FROM document_chunks")).all()
    graph = ChunkIndex(db, approximate_from=1)
    if graph.prepare(collection.id, embedder.model_id) is None:
        raise RuntimeError("the corpus's graph was not built")
    return Indexed(library.index, collection.id, {int(i): by_sha[str(sha)] for i, sha in rows}, graph)


def _passages(chunk_ids: Sequence[int], passage_of_chunk: Mapping[int, str]) -> list[str]:
    """Chunk ids to passage ids, in order, each passage at its best chunk's place."""
    return list(dict.fromkeys(passage_of_chunk[c] for c in chunk_ids))


def weighted_fusion(
    fts: Sequence[int], vectors: Sequence[int], fts_weight: float, k: int = RRF_K
) -> list[int]:
    """The index's RRF (app.documents.index._fuse: ties to the better single rank, then the lower id) with
    each full-text vote multiplied by `fts_weight`, and constant `k`."""
    ranks: dict[int, list[int | None]] = {}
    for position, chunk_id in enumerate(fts, start=1):
        ranks.setdefault(chunk_id, [None, None])[0] = position
    for position, chunk_id in enumerate(vectors, start=1):
        ranks.setdefault(chunk_id, [None, None])[1] = position

    def score(pair: list[int | None]) -> float:
        f, v = pair
        return (fts_weight / (k + f) if f is not None else 0.0) + (1.0 / (k + v) if v else 0.0)

    def key(item: tuple[int, list[int | None]]) -> tuple[float, int, int]:
        chunk_id, pair = item
        return (-score(pair), min(r for r in pair if r is not None), chunk_id)

    return [chunk_id for chunk_id, _ in sorted(ranks.items(), key=key)]


def _variant(fts_weight: float, k: int) -> str:
    return f"w {fts_weight}, k {k}"


def rank_of(passage: str, ranking: Sequence[str]) -> int | None:
    return ranking.index(passage) + 1 if passage in ranking else None


def ask(indexed: Indexed, embedder: Embedder, question: Question) -> dict[str, Any]:
    """The passage's rank (1 = first, None = not among CANDIDATES) by each mode and fusion variant."""
    vector = embedder.embed_query(question.text)
    scope, model = indexed.collection_id, embedder.model_id
    index = indexed.index
    fts = [h.chunk_id for h in index.search(question.text, None, scope=scope, limit=CANDIDATES)]
    near = [
        h.chunk_id for h in index.search("", vector, scope=scope, embedding_model=model, limit=CANDIDATES)
    ]
    hybrid = [
        h.chunk_id
        for h in index.search(question.text, vector, scope=scope, embedding_model=model, limit=CANDIDATES)
    ]
    graph = indexed.graph
    chunk_lists = {
        "full_text": fts,
        "vectors": near,
        "hybrid": hybrid,
        "vectors_graph": [
            h.chunk_id for h in graph.search("", vector, scope=scope, embedding_model=model, limit=CANDIDATES)
        ],
        "hybrid_graph": [
            h.chunk_id
            for h in graph.search(question.text, vector, scope=scope, embedding_model=model, limit=CANDIDATES)
        ],
    }
    ranks = {
        mode: rank_of(question.passage, _passages(ids, indexed.passage_of_chunk))
        for mode, ids in chunk_lists.items()
    }
    variants = {
        _variant(w, k): rank_of(
            question.passage, _passages(weighted_fusion(fts, near, w, k), indexed.passage_of_chunk)
        )
        for w, k in FUSIONS
    }
    return {
        "question": question.text,
        "set": question.set,
        "passage": question.passage,
        "ranks": ranks,
        "fusion_ranks": variants,
        # The product's fusion, redone here, must rank the passage where the index did.
        "refusion_matches": variants[_variant(*FUSIONS[0])] == ranks["hybrid"],
    }


def metrics(ranks: Sequence[int | None]) -> dict[str, float]:
    found = [r for r in ranks if r is not None]
    out = {f"recall@{k}": sum(1 for r in found if r <= k) / len(ranks) for k in CUTOFFS}
    out["mrr"] = sum(1 / r for r in found) / len(ranks)
    return out


def summarise(asked: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Metrics per mode and per question set, and per fusion variant over each set."""

    def of_set(name: str) -> list[Mapping[str, Any]]:
        return [a for a in asked if name == "all" or a["set"] == name]

    by_mode = {
        mode: {name: metrics([a["ranks"][mode] for a in of_set(name)]) for name in SETS} for mode in MODES
    }
    by_fusion = {
        _variant(w, k): {
            name: metrics([a["fusion_ranks"][_variant(w, k)] for a in of_set(name)]) for name in SETS
        }
        for w, k in FUSIONS
    }
    return {"modes": by_mode, "fusions": by_fusion, "counts": {n: len(of_set(n)) for n in SETS}}


def measure(corpus: Path, embedder: Embedder, home: Path) -> dict[str, Any]:
    """Index the corpus in `home`, ask every question, and return the per-question ranks and the metrics."""
    indexed = index_corpus(home, corpus, embedder)
    questions = load_questions(corpus)
    asked = [ask(indexed, embedder, q) for q in questions]
    return {
        "passages": len(passage_files(corpus)),
        "chunks": len(indexed.passage_of_chunk),
        "candidates": CANDIDATES,
        "rrf_k": RRF_K,
        **summarise(asked),
        "questions": asked,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--model", type=Path, default=None)
    results.add_publish_option(parser)
    args = parser.parse_args(argv)
    model = args.model or bundled_embedding_model()
    if model is None:
        print("no embedding model: run scripts/bootstrap.sh, or pass --model", file=sys.stderr)
        return 1
    session = results.begin("recall", args, argv)
    embedder = RunnerEmbedder(model)
    try:
        with tempfile.TemporaryDirectory(prefix="hearth-recall-") as home:
            data = {"model": model.name, **measure(args.corpus, embedder, Path(home))}
    finally:
        embedder.close()
    print(render_table(data))
    misses = [q for q in data["questions"] if (q["ranks"]["hybrid"] or 99) > 5]
    for q in misses:
        print(f"hybrid miss@5 [{q['set']}] {q['passage']}: {q['question']} ranks {q['ranks']}")
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    return 0


def _row(label: str, figures: Mapping[str, Mapping[str, float]]) -> str:
    cells = [
        " / ".join(f"{figures[name][f'recall@{k}']:.2f}" for k in CUTOFFS) + f" · {figures[name]['mrr']:.2f}"
        for name in SETS
    ]
    return f"| {label} | " + " | ".join(cells) + " |"


def graph_drops(data: Mapping[str, Any]) -> dict[str, float]:
    """How much lower each graph mode's recall@5 and MRR are than exact search's, per set."""
    modes = data["modes"]
    return {
        f"{MODE_LABELS[graph]}, {SET_LABELS[name]}, {metric}": modes[exact][name][metric]
        - modes[graph][name][metric]
        for graph, exact in EXACT_OF.items()
        for name in SETS
        for metric in ("recall@5", "mrr")
    }


def render_table(data: Mapping[str, Any]) -> str:
    counts = data["counts"]
    header = "| mode | " + " | ".join(f"{SET_LABELS[n]} ({counts[n]})" for n in SETS) + " |"
    rows = [header, "|---|" + "---|" * len(SETS)]
    rows += [_row(MODE_LABELS[mode], data["modes"][mode]) for mode in MODES]
    variants = [header.replace("| mode |", "| re-fused |"), "|---|" + "---|" * len(SETS)]
    variants += [_row(name, figures) for name, figures in data["fusions"].items()]
    reproduced = all(q["refusion_matches"] for q in data["questions"])
    best = max(data["fusions"], key=lambda name: data["fusions"][name]["all"]["mrr"])
    hybrid, vectors = data["modes"]["hybrid"], data["modes"]["vectors"]
    worse = [SET_LABELS[n] for n in SETS if hybrid[n]["mrr"] < vectors[n]["mrr"]]
    drops = graph_drops(data)
    drop = max(drops.values())
    graph_verdict = (
        "Through the HNSW graph recall@5 and MRR are those of exact search on every set."
        if drop <= 0
        else f"Through the HNSW graph the largest drop from exact search is {drop:.3f} "
        f"({max(drops, key=lambda key: drops[key])})."
    )
    return "\n".join(
        [
            *rows,
            "",
            f"Recall@1 / @3 / @5 · MRR over {data['passages']} passages ({data['chunks']} chunks), "
            f"{data['model']}; questions per set in brackets. "
            + (
                f"Hybrid ranks below vectors alone (MRR) on: {', '.join(worse)}."
                if worse
                else "Hybrid's MRR is at least that of vectors alone on every set."
            )
            + f" {graph_verdict}",
            "",
            *variants,
            "",
            "The same two lists re-fused with each full-text vote weighted by w and RRF constant k; "
            f"{_variant(*FUSIONS[0])} {'reproduces' if reproduced else 'does NOT reproduce'} the index's "
            f"ranking. Best MRR over all questions: {best}.",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
