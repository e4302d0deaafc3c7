"""The passage index: full-text (FTS5 bm25) and dense vectors over `document_chunks`, fused for a question.

A file's text is chunked once per content (its SHA-256) and shared by every attachment and collection
holding the same bytes. `search` ranks the passages of a scope (some contents, or a collection) twice:

- by bm25 over `document_chunks_fts`, whose terms app.documents.segment derives (CJK text as bigrams);
- by exact cosine similarity to the question's embedding, over every passage of the scope;

takes the best CANDIDATES of each and fuses the two lists by Reciprocal Rank Fusion (Cormack, Clarke and
Büttcher, SIGIR 2009): score = sum over the lists of 1 / (RRF_K + rank). Ranks, not scores, because the
two scores share no scale: bm25 is unbounded and depends on the corpus and the question's length, and a
model's cosines sit in a band of its own (E5's crowd between 0.7 and 1), so any weighted sum would need tuning
per model and per collection. The paper's k = 60 (Elasticsearch's default too) lost to vectors alone on
paraphrased questions in bench/recall.py (English and Chinese): with a 50-deep full-text list matching common
words, any passage both lists rank near 10th beat the vectors' first. k = 10 keeps the top of each list worth
more than a pair of middling ranks, and the full-text vote counts half (FTS_WEIGHT): exact names and codes
still lift a passage, paraphrases are left to the vectors. A quarter weight scored higher still on that
corpus, but it holds no exact-identifier questions, where full text should win; bench/recall.py prints both.

Vectors are stored as float16 little-endian, L2-normalised (768 bytes at 384 dimensions). Reading 100,000
blobs out of SQLite for every question would take over a second, so each (model, scope) pair keeps
its matrix in memory, built on first use and dropped when a write makes it stale: a generation counter
counts this process's writes, and the database's own counters (the chunk id sequence, a collection's
`updated_at`) catch those of another process (a `hearth docs` command while the window is open). Hits
are read back from the database inside the scope, so a passage deleted meanwhile is never returned.

Exactness at speed: NumPy has no fast float16 arithmetic, and a float32 copy is 1.5 KB a passage read at
memory speed for every question. So the cached matrix also holds an int8 copy (one scale per row). A
first pass scores every row from int8 (cast block by block to float32 for BLAS); since rounding moves
each coordinate by at most half a step, each row's true cosine lies within a known bound of its int8
score, so every row that could still reach the top CANDIDATES is kept and only those (a few hundred) are
scored again from their float16 values. The result is exactly the float16 cosine top list, from a pass
over a quarter of the bytes a float32 copy would take.
"""

from __future__ import annotations

import functools
import json
import logging
import queue
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence, Set
from concurrent import futures
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
from sqlalchemy import text
from sqlalchemy.orm import Session

from app.documents.ann import (
    APPROXIMATE_FROM,
    OVERSAMPLE,
    Graph,
    GraphFiles,
    IdArray,
    Stamp,
    Sync,
    difference,
)
from app.documents.segment import index_terms, match_any, question_terms
from app.storage.db import Database

log = logging.getLogger("hearth.documents")

# How many passages each ranking contributes to the fusion.
CANDIDATES = 50
RRF_K = 10
# How much a full-text rank counts against a vector rank (see the module docstring).
FTS_WEIGHT = 0.5
# Passages full-text search ranks per question, at most. FTS5 scores every passage matching any term and
# counts each term's passages to weigh it, so a word found in most passages ("the", 的) would cost time
# in proportion to the collection while adding next to nothing to bm25 (its IDF is near zero). Terms are
# taken rarest first while the passages they match together fit this budget; the common ones are left to
# the vectors (the idea of Lucene's CommonTermsQuery cut-off). A fixed number keeps the cost flat as a
# collection grows.
FTS_BUDGET = 3000
# Without vectors (no embedding model), a question made only of such common words still gets a full-text
# answer: bm25 over the most recent of its rarest word's passages, this many at most, so that its cost stays
# flat too (ranking every match took 0.7 s at a million passages).
FALLBACK_SAMPLE = 5000
# Matrices kept per (model, scope): a few collections and the attachments of the chats in use.
CACHE_ENTRIES = 8
# Collection files whose passages are searched: a changed file keeps its last indexed passages until it
# is indexed again; missing and failed files are left out.
SEARCHABLE_STATUSES = ("indexed", "changed")
_STATUSES = ", ".join(f"'{status}'" for status in SEARCHABLE_STATUSES)
EMBEDDING_DTYPE = np.dtype("<f2")
# From this many vectors on, they are ranked on a second thread while the full text is ranked.
_BACKGROUND_ROWS = 20_000
# Rows scored per step of the int8 pass: the float32 copy of a block stays in the CPU cache.
_BLOCK_ROWS = 1024
# A question brings a collection's graph up to date itself when this many vectors or fewer are missing from
# it (about a second of insertions); more (a first build, a lost cache) are added on a thread of their own
# while questions are answered exactly.
INLINE_ADDS = 5_000
# Vectors read from SQLite per statement when a graph is filled.
_READ_BATCH = 10_000
_SHA256 = re.compile(r"[0-9a-f]{64}")

Scope: TypeAlias = int | Set[str]
"""A collection id, or the SHA-256s of the contents to search (a chat's attachments)."""

FloatArray: TypeAlias = npt.NDArray[np.float32]


@dataclass(frozen=True)
class ChunkInput:
    text: str
    location: str  # "page 3", "Installation > Linux", "sheet Budget, rows 1-40"
    ordinal: int  # the passage's place in its document


@dataclass(frozen=True)
class Hit:
    chunk_id: int
    content_sha256: str
    ordinal: int
    location: str
    text: str
    score: float  # the fused score: higher is better
    fts_rank: int | None  # 1 = the best full-text match; None when full-text did not rank it
    vector_rank: int | None  # 1 = the nearest vector; None when the vectors did not rank it


@dataclass(frozen=True)
class IndexCounts:
    contents: int
    chunks: int
    embedded: int  # chunks with a vector


@dataclass(frozen=True)
class _Matrix:
    """The vectors of one (model, scope), as read at `generation` / `stamp`."""

    generation: int
    stamp: tuple[object, ...]
    ids: npt.NDArray[np.int64]
    vectors: npt.NDArray[np.float16]
    sketch: npt.NDArray[np.int8]  # vectors / (row scale / 127), rounded
    scales: FloatArray  # row scale / 127: sketch * scales ≈ vectors
    slack: FloatArray  # the most rounding moved any coordinate of the row

    @classmethod
    def build(cls, generation: int, stamp: tuple[object, ...], ids: list[int], blobs: list[bytes]) -> _Matrix:
        dims = {len(blob) for blob in blobs}
        if len(dims) > 1:
            raise ValueError(f"vectors of one model must have one size; found {sorted(dims)} bytes")
        width = len(blobs[0]) // EMBEDDING_DTYPE.itemsize if blobs else 0
        vectors = np.frombuffer(b"".join(blobs), dtype=EMBEDDING_DTYPE).reshape(len(blobs), width)
        rows = len(blobs)
        sketch = np.empty((rows, width), dtype=np.int8)
        scales = np.empty(rows, dtype=np.float32)
        # Block by block, so that the float32 copies stay in the CPU cache.
        for start in range(0, rows, _BLOCK_ROWS):
            stop = min(rows, start + _BLOCK_ROWS)
            wide = vectors[start:stop].astype(np.float32)
            peak = np.abs(wide).max(axis=1)
            scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
            wide /= scale[:, None]
            np.rint(wide, out=wide)
            np.copyto(sketch[start:stop], wide, casting="unsafe")
            scales[start:stop] = scale
        return cls(
            generation,
            stamp,
            np.asarray(ids, dtype=np.int64),
            vectors,
            sketch,
            scales,
            (scales / 2.0).astype(np.float32),
        )

    @property
    def dims(self) -> int:
        return int(self.vectors.shape[1])

    def nearest(self, query: FloatArray, n: int) -> list[int]:
        """The ids of the `n` rows of highest cosine to `query` (unit length), best first."""
        rows = len(self.ids)
        if rows == 0 or n < 1:
            return []
        coarse = np.empty(rows, dtype=np.float32)
        block = np.empty((min(rows, _BLOCK_ROWS), self.dims), dtype=np.float32)
        for start in range(0, rows, _BLOCK_ROWS):
            stop = min(rows, start + _BLOCK_ROWS)
            part = block[: stop - start]
            np.copyto(part, self.sketch[start:stop], casting="unsafe")
            np.matmul(part, query, out=coarse[start:stop])
        coarse *= self.scales
        # Rounding to int8 moved each coordinate by at most `slack`, so the cosine is within
        # slack * sum|q| of the int8 score; summing `dims` float32 products adds at most dims * 2^-24 of
        # the sum of their magnitudes (<= 127 * sum|q| steps), and the scaling one more rounding.
        error = 1.0 + 2.0 * 127.0 * self.dims * 2.0**-24
        bound = self.slack * (float(np.abs(query).sum()) * error) + 1e-6
        if n < rows:
            floor = np.partition(coarse - bound, rows - n)[rows - n]
            candidates = np.flatnonzero(coarse + bound >= floor)
        else:
            candidates = np.arange(rows)
        # In float64: near-duplicate passages differ by less than float32 can tell apart near 1.0.
        exact = np.einsum("ij,j->i", self.vectors[candidates].astype(np.float64), query.astype(np.float64))
        best = candidates[np.argsort(-exact, kind="stable")[:n]]
        return [int(i) for i in self.ids[best]]


class _Workers:
    """Threads for the vector side of questions (an exact ranking or a walk of the graph), which runs there
    while SQLite ranks the full text on the asking thread: both release the GIL, so a question costs the
    slower of the two instead of their sum.

    Kept waiting rather than started per question: starting a thread waits until the system first runs it,
    milliseconds on a busy machine. Daemon threads, unlike concurrent.futures' pool: an index is never shut
    down, and an idle worker must not keep the process alive."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._work: queue.SimpleQueue[tuple[Callable[[], list[int]], Future[list[int]]]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0
        self._started = 0

    def submit(self, work: Callable[[], list[int]]) -> Future[list[int]]:
        future: Future[list[int]] = Future()
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                self._started += 1
                threading.Thread(
                    target=self._serve, name=f"{self._name}-{self._started}", daemon=True
                ).start()
        self._work.put((work, future))
        return future

    def _serve(self) -> None:
        while True:
            work, future = self._work.get()
            try:
                result = work()
            except BaseException as exc:  # handed to the asker by future.result()
                self._done()
                future.set_exception(exc)
            else:
                # Idle before the asker hears back, so that its next question finds this thread free.
                self._done()
                future.set_result(result)

    def _done(self) -> None:
        with self._lock:
            self._idle += 1


def _walk(graph: Graph, query: FloatArray, n: int) -> list[int]:
    """About the `n` nearest ids by the graph (its lock held only while it is walked)."""
    with graph.lock:
        return graph.candidates(query, n)


def _unit_rows(embeddings: npt.ArrayLike, rows: int) -> npt.NDArray[np.float16]:
    matrix = np.asarray(embeddings, dtype=np.float32)
    if matrix.ndim != 2 or matrix.shape[0] != rows or matrix.shape[1] == 0:
        raise ValueError(f"embeddings must have shape ({rows}, dims); got {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise ValueError("embeddings must be finite")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    if (norms == 0).any():
        raise ValueError("an embedding is all zeros")
    unit: npt.NDArray[np.float16] = (matrix / norms).astype(EMBEDDING_DTYPE)
    return unit


def _unit_query(vector: npt.ArrayLike) -> FloatArray:
    query = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(query))
    if not np.isfinite(query).all() or norm == 0:
        raise ValueError("the query vector must be finite and not all zeros")
    return query / norm


def _check_sha256(value: str) -> None:
    if not _SHA256.fullmatch(value):
        raise ValueError(f"not a lowercase hex SHA-256: {value!r}")


def _rrf(fts_rank: int | None, vector_rank: int | None) -> float:
    score = FTS_WEIGHT / (RRF_K + fts_rank) if fts_rank is not None else 0.0
    return score + (1.0 / (RRF_K + vector_rank) if vector_rank is not None else 0.0)


def _fuse(fts: Sequence[int], vectors: Sequence[int]) -> list[tuple[int, float, int | None, int | None]]:
    """(chunk id, RRF score, fts rank, vector rank), best first; ties go to the better single rank."""
    ranks: dict[int, list[int | None]] = {}
    for position, chunk_id in enumerate(fts, start=1):
        ranks.setdefault(chunk_id, [None, None])[0] = position
    for position, chunk_id in enumerate(vectors, start=1):
        ranks.setdefault(chunk_id, [None, None])[1] = position
    fused = [(chunk_id, _rrf(pair[0], pair[1]), pair[0], pair[1]) for chunk_id, pair in ranks.items()]
    fused.sort(key=lambda item: (-item[1], min(r for r in item[2:] if r is not None), item[0]))
    return fused


class ChunkIndex:
    """Passages and their vectors in the app's database. Thread-safe; share one per Database, so that
    its writes invalidate its own caches at once."""

    def __init__(
        self,
        db: Database,
        *,
        candidates: int = CANDIDATES,
        cache_entries: int = CACHE_ENTRIES,
        approximate_from: int = APPROXIMATE_FROM,
    ):
        """`approximate_from`: collections with this many vectors or more are searched through a graph."""
        self._db = db
        self._candidates = candidates
        self._cache_entries = cache_entries
        self._approximate_from = approximate_from
        self._lock = threading.Lock()
        self._generation = 0
        self._matrices: OrderedDict[tuple[str, object], _Matrix] = OrderedDict()
        # How many passages each term matches (up to FTS_BUDGET + 1), as of chunk id sequence `_counted_at`.
        self._term_counts: dict[str, int] = {}
        self._counted_at: object = None
        # Large collections' graphs (app.documents.ann) by (model, collection id), kept while in use, and the
        # stamp at which a collection was last found small enough to search exactly.
        self._files = GraphFiles(db.path)
        self._graphs: dict[tuple[str, int], Graph] = {}
        self._exact_at: dict[tuple[str, int], Stamp] = {}
        self._builders: dict[tuple[str, int], threading.Thread] = {}
        self._savers: list[threading.Thread] = []
        # Set by close(): a graph being built stops between batches, unsaved (the next start resumes).
        self._closing = threading.Event()
        self._vector_side = _Workers("hearth-vector-search")

    # Writing ---------------------------------------------------------------------------------------------

    def add_chunks(
        self,
        content_sha256: str,
        chunks: Sequence[ChunkInput],
        embeddings: npt.ArrayLike | None,
        embedding_model: str | None,
    ) -> None:
        """Store a content's passages (and their vectors, one row each, in chunk order), replacing any
        stored before, in one transaction. Vectors are L2-normalised and stored as float16."""
        _check_sha256(content_sha256)
        if (embeddings is None) != (embedding_model is None):
            raise ValueError("embeddings and embedding_model go together")
        ordinals = [chunk.ordinal for chunk in chunks]
        if len(set(ordinals)) != len(ordinals):
            raise ValueError("chunk ordinals must be unique")
        blobs: list[bytes | None] = [None] * len(chunks)
        if embeddings is not None:
            blobs = [row.tobytes() for row in _unit_rows(embeddings, len(chunks))]
        with self._db.session() as session:
            self._delete_contents(session, [content_sha256])
            rows = [
                {
                    "sha": content_sha256,
                    "ordinal": chunk.ordinal,
                    "location": chunk.location,
                    "text": chunk.text,
                    "embedding": blob,
                    "model": embedding_model if blob is not None else None,
                }
                for chunk, blob in zip(chunks, blobs, strict=True)
            ]
            if rows:
                session.execute(
                    text(
                        "INSERT INTO document_chunks (content_sha256, ordinal, location, text, embedding, "
                        "embedding_model) VALUES (:sha, :ordinal, :location, :text, :embedding, :model)"
                    ),
                    rows,
                )
                ids = session.execute(
                    text("SELECT id, ordinal FROM document_chunks WHERE content_sha256 = :sha"),
                    {"sha": content_sha256},
                ).all()
                by_ordinal = {chunk.ordinal: chunk for chunk in chunks}
                session.execute(
                    text("INSERT INTO document_chunks_fts (rowid, terms) VALUES (:id, :terms)"),
                    [{"id": row.id, "terms": index_terms(by_ordinal[row.ordinal].text)} for row in ids],
                )
        self.invalidate()

    def delete_unreferenced(self, session: Session, among: Iterable[str] | None = None) -> int:
        """Delete, inside the caller's transaction, the passages of contents that no collection file and
        no message part refers to (of `among` only, when given). Returns how many passages went.

        For stores that remove the references in the same transaction; call `invalidate` after it commits.
        """
        unreferenced = (
            "SELECT DISTINCT content_sha256 FROM document_chunks AS c WHERE "
            "NOT EXISTS (SELECT 1 FROM collection_files AS f WHERE f.content_sha256 = c.content_sha256) "
            "AND NOT EXISTS (SELECT 1 FROM message_parts AS p WHERE p.file_sha256 = c.content_sha256)"
        )
        if among is None:
            shas = session.execute(text(unreferenced)).scalars().all()
        else:
            shas = (
                session.execute(
                    text(f"{unreferenced} AND content_sha256 IN (SELECT value FROM json_each(:shas))"),
                    {"shas": json.dumps(sorted(set(among)))},
                )
                .scalars()
                .all()
            )
        return self._delete_contents(session, shas)

    def compact(self, session: Session) -> None:
        """Rewrite the full-text index without the terms of deleted passages.

        FTS5 deletes by adding tombstones, and the words stay in older segments until they are merged;
        merging everything drops them, and secure_delete zeroes the freed pages (as for messages).
        """
        session.execute(text("INSERT INTO document_chunks_fts (document_chunks_fts) VALUES ('optimize')"))

    def remove_unreferenced(self) -> int:
        """Delete the passages no collection and no message uses any more, leaving none of their text on
        disk. Returns how many went."""
        with self._db.session() as session:
            removed = self.delete_unreferenced(session)
            if removed:
                self.compact(session)
        if removed:
            self.invalidate()
            self._db.checkpoint()
        return removed

    def invalidate(self) -> None:
        """Drop every cached matrix: the passages or a collection's files changed."""
        with self._lock:
            self._generation += 1
            self._matrices.clear()
            self._term_counts.clear()

    def _delete_contents(self, session: Session, shas: Sequence[str]) -> int:
        if not shas:
            return 0
        params = {"shas": json.dumps(list(shas))}
        old = session.execute(
            text(
                "SELECT id, text FROM document_chunks "
                "WHERE content_sha256 IN (SELECT value FROM json_each(:shas))"
            ),
            params,
        ).all()
        if old:
            # External content: FTS5 removes a row's terms only when handed the same terms again.
            session.execute(
                text(
                    "INSERT INTO document_chunks_fts (document_chunks_fts, rowid, terms) "
                    "VALUES ('delete', :id, :terms)"
                ),
                [{"id": row.id, "terms": index_terms(row.text)} for row in old],
            )
            session.execute(
                text(
                    "DELETE FROM document_chunks WHERE content_sha256 IN (SELECT value FROM json_each(:shas))"
                ),
                params,
            )
        return len(old)

    # Reading ---------------------------------------------------------------------------------------------

    def has_chunks(self, content_sha256: str, embedding_model: str | None = None) -> bool:
        """Whether the content's passages are stored (all with vectors from `embedding_model`, if given):
        whether indexing it again can be skipped."""
        with self._db.read_session() as session:
            row = session.execute(
                text(
                    "SELECT count(*) AS chunks, "
                    "count(*) FILTER (WHERE embedding_model IS :model) AS matching "
                    "FROM document_chunks WHERE content_sha256 = :sha"
                ),
                {"sha": content_sha256, "model": embedding_model},
            ).one()
        if row.chunks == 0:
            return False
        return embedding_model is None or row.matching == row.chunks

    def counts(self, scope: Scope | None = None) -> IndexCounts:
        """How many contents, passages and vectors are stored (in `scope`, if given)."""
        condition, params = ("1", {}) if scope is None else _scope_condition(scope, "c.content_sha256")
        with self._db.read_session() as session:
            row = session.execute(
                text(
                    "SELECT count(DISTINCT c.content_sha256) AS contents, count(*) AS chunks, "
                    f"count(c.embedding) AS embedded FROM document_chunks AS c WHERE {condition}"
                ),
                params,
            ).one()
        return IndexCounts(row.contents, row.chunks, row.embedded)

    def search(
        self,
        query_text: str,
        query_vector: npt.ArrayLike | None,
        *,
        scope: Scope,
        embedding_model: str | None = None,
        limit: int = 8,
    ) -> list[Hit]:
        """The `limit` passages of `scope` that best answer the question, best first.

        Full-text always (when the question has words); vectors too when `query_vector` is given, which
        then needs the `embedding_model` it was made with (passages embedded by another model are not
        compared with it). Either side alone is enough: a question with no word in common with any
        passage is still answered by its vector.
        """
        if limit < 1:
            return []
        if query_vector is not None and embedding_model is None:
            raise ValueError("a query vector needs the embedding_model it was made with")
        n = max(self._candidates, limit)
        condition, params = _scope_condition(scope, "c.content_sha256")
        terms = question_terms(query_text)
        with self._db.read_session() as session:
            sequence = session.execute(
                text("SELECT seq FROM sqlite_sequence WHERE name = 'document_chunks'")
            ).scalar()
            background: Future[list[int]] | None = None
            graph: Graph | None = None
            nearest: list[int] = []
            if query_vector is not None:
                assert embedding_model is not None
                query = _unit_query(query_vector)
                if isinstance(scope, int) and not isinstance(scope, bool):
                    graph = self._graph(session, scope, embedding_model, sequence)
                if graph is not None:
                    _check_dims(query, graph.dims, embedding_model)
                    walk = functools.partial(_walk, graph, query, n * OVERSAMPLE)
                    if terms:
                        background = self._vector_side.submit(walk)
                    else:
                        nearest = walk()
                else:
                    matrix = self._matrix(session, scope, embedding_model, sequence)
                    if len(matrix.ids):
                        _check_dims(query, matrix.dims, embedding_model)
                    if len(matrix.ids) >= _BACKGROUND_ROWS and terms:
                        background = self._vector_side.submit(functools.partial(matrix.nearest, query, n))
                    else:
                        nearest = matrix.nearest(query, n)
            try:
                fts = self._full_text(
                    session, sequence, terms, condition, params, n, fallback=query_vector is None
                )
            finally:
                if background is not None:
                    futures.wait([background])
            if background is not None:
                nearest = background.result()
            if graph is not None:
                nearest = self._rescored(session, graph.model, nearest, query, n, condition, params)
            fused = _fuse(fts, nearest)
            # Which candidates still exist in the scope (a passage deleted since the matrix was read, or
            # moved out of the scope, is not), then the text of the best `limit` of them only.
            present = set(
                session.execute(
                    text(
                        "SELECT c.id FROM json_each(:ids) AS j CROSS JOIN document_chunks AS c "
                        f"ON c.id = j.value WHERE {condition}"
                    ),
                    {**params, "ids": json.dumps([item[0] for item in fused])},
                ).scalars()
            )
            best = [item for item in fused if item[0] in present][:limit]
            rows = {
                row.id: row
                for row in session.execute(
                    text(
                        "SELECT id, content_sha256, ordinal, location, text FROM document_chunks "
                        "WHERE id IN (SELECT value FROM json_each(:ids))"
                    ),
                    {"ids": json.dumps([item[0] for item in best])},
                )
            }
        hits = []
        for chunk_id, score, fts_rank, vector_rank in best:
            row = rows[chunk_id]
            hits.append(
                Hit(
                    chunk_id,
                    row.content_sha256,
                    row.ordinal,
                    row.location,
                    row.text,
                    score,
                    fts_rank,
                    vector_rank,
                )
            )
        return hits

    def _full_text(
        self,
        session: Session,
        sequence: object,
        terms: list[str],
        condition: str,
        params: dict[str, object],
        n: int,
        *,
        fallback: bool,
    ) -> list[int]:
        """The ids of the best `n` passages of the scope by bm25, best first."""
        chosen, over_budget = self._selective(session, sequence, terms, fallback=fallback)
        if not chosen:
            return []
        if over_budget:
            return list(
                session.execute(
                    text(
                        "SELECT s.id FROM (SELECT f.rowid AS id, f.rank AS score "
                        "FROM document_chunks_fts AS f WHERE document_chunks_fts MATCH :match "
                        "ORDER BY f.rowid DESC LIMIT :sample) AS s "
                        f"CROSS JOIN document_chunks AS c ON c.id = s.id WHERE {condition} "
                        "ORDER BY s.score LIMIT :n"
                    ),
                    {**params, "match": match_any(chosen), "n": n, "sample": FALLBACK_SAMPLE},
                ).scalars()
            )
        return list(
            session.execute(
                text(
                    "SELECT f.rowid FROM document_chunks_fts AS f "
                    "CROSS JOIN document_chunks AS c ON c.id = f.rowid "
                    f"WHERE document_chunks_fts MATCH :match AND {condition} "
                    "ORDER BY f.rank LIMIT :n"
                ),
                {**params, "match": match_any(chosen), "n": n},
            ).scalars()
        )

    def _selective(
        self, session: Session, sequence: object, terms: list[str], *, fallback: bool
    ) -> tuple[list[str], bool]:
        """The terms worth asking FTS5 for: rarest first, within FTS_BUDGET passages together. With
        `fallback` (no vectors to lean on), the rarest term that matches anything when none fits; the flag
        says that happened."""
        if not terms:
            return [], False
        with self._lock:
            if self._counted_at != sequence or len(self._term_counts) > 100_000:
                self._term_counts.clear()
                self._counted_at = sequence
            counts = {term: self._term_counts.get(term.lower()) for term in terms}
        missing = [term for term, count in counts.items() if count is None]
        if missing:
            probes = " UNION ALL ".join(
                f"SELECT {i} AS i, (SELECT count(*) FROM (SELECT 1 FROM document_chunks_fts "
                f"WHERE document_chunks_fts MATCH :t{i} LIMIT :cap)) AS n"
                for i in range(len(missing))
            )
            found = session.execute(
                text(probes),
                {"cap": FTS_BUDGET + 1, **{f"t{i}": match_any([t]) for i, t in enumerate(missing)}},
            ).all()
            for row in found:
                counts[missing[row.i]] = row.n
            with self._lock:
                if self._counted_at == sequence:
                    self._term_counts.update((missing[row.i].lower(), row.n) for row in found)
        chosen: list[str] = []
        total = 0
        # Stable: among terms as rare as each other, the question's order.
        for term in sorted((t for t in terms if counts[t]), key=lambda t: counts[t] or 0):
            matched = counts[term] or 0
            if total + matched > FTS_BUDGET:
                if not chosen and fallback:
                    return [term], True
                break
            chosen.append(term)
            total += matched
        return chosen, False

    def _matrix(self, session: Session, scope: Scope, embedding_model: str, sequence: object) -> _Matrix:
        key = (embedding_model, _scope_key(scope))
        stamp = _stamp(session, scope, sequence)
        with self._lock:
            generation = self._generation
            cached = self._matrices.get(key)
            if cached is not None and cached.generation == generation and cached.stamp == stamp:
                self._matrices.move_to_end(key)
                return cached
        condition, params = _scope_condition(scope, "c.content_sha256")
        rows = session.execute(
            text(
                "SELECT c.id, c.embedding FROM document_chunks AS c "
                f"WHERE c.embedding_model = :model AND {condition} ORDER BY c.id"
            ),
            {**params, "model": embedding_model},
        ).all()
        matrix = _Matrix.build(generation, stamp, [row.id for row in rows], [row.embedding for row in rows])
        with self._lock:
            # A write that committed while this one was read has moved the generation on: keep it only
            # for this question.
            if generation == self._generation:
                self._matrices[key] = matrix
                self._matrices.move_to_end(key)
                while len(self._matrices) > self._cache_entries:
                    self._matrices.popitem(last=False)
        return matrix

    # Large collections: approximate search (app.documents.ann) ------------------------------------------

    def _graph(self, session: Session, collection_id: int, model: str, sequence: object) -> Graph | None:
        """The collection's graph, brought up to date; None when the collection is searched exactly: it is
        small, or its graph is being built on another thread."""
        key = (model, collection_id)
        stamp = _stamp(session, collection_id, sequence)
        with self._lock:
            graph = self._graphs.get(key)
            if graph is not None and graph.stamp == stamp:
                return graph
            if self._exact_at.get(key) == stamp or key in self._builders:
                return None
        identity = _identity(session, collection_id)
        graph = self._saved_or(graph, key, stamp, identity)
        # A saved graph as current as the database is trusted as it is (when the collection is still
        # large: this index may draw the line elsewhere than the one that saved it).
        if graph is not None and graph.stamp == stamp and len(graph) >= self._approximate_from:
            self._install(key, graph)
            return graph
        members = _members(session, collection_id, model)
        if len(members) < self._approximate_from:
            with self._lock:
                self._exact_at[key] = stamp
                self._graphs.pop(key, None)
            self._files.remove(model, collection_id)
            return None
        graph = self._of_size(session, graph, key, members, identity)
        with graph.lock:
            gone, new = difference(graph.keys(), members)
            if len(new) > INLINE_ADDS:
                self._start_build(model, collection_id)
                return None
            self._apply(graph, gone, new, stamp, threads=0)
        self._install(key, graph)
        if not graph.saved:
            self._save_soon(graph)
        return graph

    def _saved_or(
        self, graph: Graph | None, key: tuple[str, int], stamp: Stamp, identity: str
    ) -> Graph | None:
        """The saved graph when there is none in memory or another process saved a newer one."""
        if graph is None or self._files.saved_stamp(*key) == stamp:
            return Graph.load(self._files, *key, identity) or graph
        return graph

    @staticmethod
    def _of_size(
        session: Session, graph: Graph | None, key: tuple[str, int], members: IdArray, identity: str
    ) -> Graph:
        """`graph`, or a new one when there is none for vectors of the stored size and this collection."""
        dims = _dims(session, int(members[0]))
        if graph is not None and graph.dims == dims and graph.identity == identity:
            return graph
        return Graph(*key, dims, identity)

    def _apply(
        self,
        graph: Graph,
        gone: IdArray,
        new: IdArray,
        stamp: Stamp,
        *,
        threads: int,
        cancel: threading.Event | None = None,
    ) -> Sync:
        """Remove `gone` from the graph and add `new` from SQLite (with the graph's lock held)."""
        none = np.zeros((0, graph.dims), dtype=EMBEDDING_DTYPE)
        if len(gone):
            # The saved file still holds the removed vectors: it goes now, the graph is saved again after.
            self._files.remove(graph.model, graph.collection_id)
            graph.update(gone, new[:0], none, threads=threads)
        added = 0
        for start in range(0, len(new), _READ_BATCH):
            if cancel is not None and cancel.is_set():
                raise _Closed
            with self._db.read_session() as session:
                ids, vectors = _read_vectors(session, new[start : start + _READ_BATCH], graph.model)
            if len(ids) and vectors.shape[1] != graph.dims:
                raise ValueError(
                    f"vectors of one model must have one size; found {vectors.shape[1]} and {graph.dims}"
                )
            added += graph.update(gone[:0], ids, vectors, threads=threads).added
        graph.stamp = stamp
        return Sync(added, len(gone))

    @staticmethod
    def _rescored(
        session: Session,
        model: str,
        candidates: list[int],
        query: FloatArray,
        n: int,
        condition: str,
        params: dict[str, object],
    ) -> list[int]:
        """The graph's candidates scored again from their stored float16 vectors, in the scope as it is
        now: the best `n`."""
        if not candidates:
            return []
        rows = session.execute(
            text(
                "SELECT c.id, c.embedding FROM json_each(:ids) AS j CROSS JOIN document_chunks AS c "
                f"ON c.id = j.value WHERE c.embedding_model = :model AND {condition}"
            ),
            {**params, "ids": json.dumps(candidates), "model": model},
        ).all()
        if not rows:
            return []
        vectors = np.frombuffer(b"".join(row.embedding for row in rows), dtype=EMBEDDING_DTYPE)
        exact = vectors.reshape(len(rows), -1).astype(np.float64) @ query.astype(np.float64)
        return [int(rows[i].id) for i in np.argsort(-exact, kind="stable")[:n]]

    def prepare(self, collection_id: int, embedding_model: str, *, threads: int = 0) -> Sync | None:
        """Bring the collection's graph up to date now and save it, so that questions do not have to (after
        indexing). None when the collection is small enough to be searched exactly."""
        return self._prepare(collection_id, embedding_model, threads=threads)

    def _prepare(
        self, collection_id: int, embedding_model: str, *, threads: int, cancel: threading.Event | None = None
    ) -> Sync | None:
        key = (embedding_model, collection_id)
        with self._lock:
            running = self._builders.get(key)
        if running is not None and running is not threading.current_thread():
            running.join()
        with self._db.read_session() as session:
            sequence = session.execute(
                text("SELECT seq FROM sqlite_sequence WHERE name = 'document_chunks'")
            ).scalar()
            stamp = _stamp(session, collection_id, sequence)
            members = _members(session, collection_id, embedding_model)
            if len(members) < self._approximate_from:
                return None
            with self._lock:
                graph = self._graphs.get(key)
            identity = _identity(session, collection_id)
            graph = self._of_size(
                session, self._saved_or(graph, key, stamp, identity), key, members, identity
            )
        with graph.lock:
            gone, new = difference(graph.keys(), members)
            done = self._apply(graph, gone, new, stamp, threads=threads, cancel=cancel)
            self._save(graph)
        self._install(key, graph)
        return done

    def _install(self, key: tuple[str, int], graph: Graph) -> None:
        with self._lock:
            self._graphs[key] = graph
            self._exact_at.pop(key, None)

    def _start_build(self, model: str, collection_id: int) -> None:
        key = (model, collection_id)

        def build() -> None:
            try:
                # One thread: the model answering the user needs the other cores.
                self._prepare(collection_id, model, threads=1, cancel=self._closing)
            except _Closed:
                pass
            except Exception:
                log.exception("building the vector index of collection %d failed", collection_id)
            finally:
                with self._lock:
                    self._builders.pop(key, None)

        with self._lock:
            if key in self._builders:
                return
            thread = threading.Thread(target=build, name="hearth-vector-index", daemon=True)
            self._builders[key] = thread
        thread.start()

    def _save(self, graph: Graph) -> None:
        """Save with the graph's lock held; a cache that cannot be written (a read-only home) only makes
        the next start slower."""
        try:
            graph.save(self._files)
        except OSError as exc:
            log.warning("could not save the vector index of collection %d: %s", graph.collection_id, exc)

    def _save_soon(self, graph: Graph) -> None:
        def save() -> None:
            with graph.lock:
                if not graph.saved:
                    self._save(graph)

        thread = threading.Thread(target=save, name="hearth-vector-index-save", daemon=True)
        with self._lock:
            self._savers = [t for t in self._savers if t.is_alive()] + [thread]
        thread.start()

    def wait(self) -> None:
        """Let graphs being built or saved finish (before the process ends)."""
        while True:
            with self._lock:
                pending = [t for t in (*self._builders.values(), *self._savers) if t.is_alive()]
            if not pending:
                return
            for thread in pending:
                thread.join()

    def close(self) -> None:
        """Stop building graphs and let those being saved finish (the process is about to end)."""
        self._closing.set()
        self.wait()

    def forget_collection(self, collection_id: int) -> None:
        """Drop a deleted collection's graphs, in memory and on disk."""
        self.wait()
        with self._lock:
            for key in [k for k in self._graphs if k[1] == collection_id]:
                del self._graphs[key]
        self._files.remove_collection(collection_id)


class _Closed(Exception):
    """The index was closed while a graph was being filled."""


def _check_dims(query: FloatArray, dims: int, embedding_model: str) -> None:
    if dims != query.shape[0]:
        raise ValueError(
            f"the query vector has {query.shape[0]} dimensions; the passages embedded by "
            f"{embedding_model} have {dims}"
        )


def _identity(session: Session, collection_id: int) -> str:
    created = session.execute(
        text("SELECT created_at FROM collections WHERE id = :id"), {"id": collection_id}
    ).scalar()
    return str(created)


def _dims(session: Session, chunk_id: int) -> int:
    blob = session.execute(
        text("SELECT embedding FROM document_chunks WHERE id = :id"), {"id": chunk_id}
    ).scalar_one()
    return len(blob) // EMBEDDING_DTYPE.itemsize


def _members(session: Session, collection_id: int, model: str) -> IdArray:
    """The sorted ids of the passages the collection searches that have vectors from `model`.

    Read from the (content, ordinal) index alone; a content's passages all carry one model (add_chunks
    stores them together), so the model is checked on one passage of each content.
    """
    rows = session.execute(
        text(
            "WITH contents AS (SELECT DISTINCT f.content_sha256 AS sha FROM collection_files AS f "
            f"WHERE f.collection_id = :collection_id AND f.status IN ({_STATUSES}) "
            "AND (SELECT e.embedding_model FROM document_chunks AS e "
            "WHERE e.content_sha256 = f.content_sha256 LIMIT 1) = :model) "
            "SELECT c.id FROM contents CROSS JOIN document_chunks AS c ON c.content_sha256 = contents.sha"
        ),
        {"collection_id": collection_id, "model": model},
    ).scalars()
    return np.sort(np.fromiter(rows, dtype=np.int64))


def _read_vectors(session: Session, ids: IdArray, model: str) -> tuple[IdArray, npt.NDArray[np.float16]]:
    """The stored vectors of those of `ids` that still exist with `model`'s vectors."""
    rows = session.execute(
        text(
            "SELECT c.id, c.embedding FROM json_each(:ids) AS j CROSS JOIN document_chunks AS c "
            "ON c.id = j.value WHERE c.embedding_model = :model"
        ),
        {"ids": json.dumps(ids.tolist()), "model": model},
    ).all()
    found = np.asarray([row.id for row in rows], dtype=np.int64)
    if not rows:
        return found, np.zeros((0, 0), dtype=EMBEDDING_DTYPE)
    blob = b"".join(row.embedding for row in rows)
    return found, np.frombuffer(blob, dtype=EMBEDDING_DTYPE).reshape(len(rows), -1)


def _scope_key(scope: Scope) -> tuple[str, object]:
    # bool is an int: True must not quietly mean collection 1.
    if isinstance(scope, bool) or not isinstance(scope, int | Set):
        raise TypeError(f"a scope is a collection id or a set of SHA-256s, not {type(scope).__name__}")
    return ("collection", scope) if isinstance(scope, int) else ("contents", frozenset(scope))


def _scope_condition(scope: Scope, column: str) -> tuple[str, dict[str, object]]:
    """A SQL condition on `column` (a content SHA-256) for the passages in `scope`."""
    kind, value = _scope_key(scope)
    if kind == "collection":
        # Looked up per passage (by content, ix_collection_files_content_sha256), not `IN (the collection's
        # contents)`: SQLite would list every file of the collection for each question, a cost that grows
        # with the collection while the passages checked stay a few hundred.
        return (
            "EXISTS (SELECT 1 FROM collection_files AS f "
            f"WHERE f.content_sha256 = {column} AND f.collection_id = :collection_id "
            f"AND f.status IN ({_STATUSES}))",
            {"collection_id": value},
        )
    assert isinstance(value, frozenset)
    return f"{column} IN (SELECT value FROM json_each(:shas))", {"shas": json.dumps(sorted(value))}


def _stamp(session: Session, scope: Scope, sequence: object) -> tuple[object, ...]:
    """What changes whenever another process adds passages (the chunk id sequence) or changes the
    collection's files."""
    if isinstance(scope, int):
        updated = session.execute(
            text("SELECT updated_at FROM collections WHERE id = :id"), {"id": scope}
        ).scalar()
        return (sequence, updated)
    return (sequence,)
