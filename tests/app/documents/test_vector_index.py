"""Large collections' vector graphs (app.documents.ann): searched like the exact ranking, kept beside the
database as a cache that is rebuilt when missing or damaged, repaired when it lags the database, and emptied
of what was deleted.

The graphs are made to serve small collections here (`approximate_from`), with clustered random vectors
(many near neighbours, as embeddings have); quality with the real model is checked at the end.
"""

from __future__ import annotations

import itertools
import json
import os
import stat
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

import app.documents.index as index_module
from app.documents.ann import GraphFiles, _usearch_index
from app.documents.collections import CollectionStore
from app.documents.index import ChunkIndex, ChunkInput
from app.storage.db import Database
from tests.helpers.documents import sha_of

if TYPE_CHECKING:
    from usearch.index import Index

DIMS = 48
MODEL = "clustered"
PER_DOCUMENT = 10
LARGE = 40  # collections of this many vectors or more are searched through their graph here


def index_of(db: Database) -> ChunkIndex:
    return ChunkIndex(db, approximate_from=LARGE)


def add_vectors(index: ChunkIndex, name: str, vectors: npt.NDArray[np.float64]) -> str:
    sha = sha_of(name)
    chunks = [ChunkInput(f"{name} part {i}", "", i) for i in range(len(vectors))]
    index.add_chunks(sha, chunks, vectors, MODEL)
    return sha


def clustered(rng: np.random.Generator, count: int) -> npt.NDArray[np.float64]:
    centres = np.random.default_rng(1).standard_normal((12, DIMS))
    vectors: npt.NDArray[np.float64] = centres[rng.integers(0, 12, count)] + 0.3 * rng.standard_normal(
        (count, DIMS)
    )
    return vectors


def new_collection(db: Database, name: str) -> int:
    with db.session() as session:
        return int(
            session.execute(
                text(
                    "INSERT INTO collections (name, created_at, updated_at) VALUES (:n, '2025', '2025') "
                    "RETURNING id"
                ),
                {"n": name},
            ).scalar_one()
        )


def put_in(db: Database, collection_id: int, shas: list[str], *, status: str = "indexed") -> None:
    """Files holding these contents in the collection, and the collection's stamp moved on, as indexing
    leaves them (CollectionStore.mark_indexed)."""
    with db.session() as session:
        for sha in shas:
            session.execute(
                text(
                    "INSERT INTO collection_files (collection_id, path, size_bytes, mtime_ns, "
                    "content_sha256, status) VALUES (:c, :p, 1, 1, :sha, :status)"
                ),
                {"c": collection_id, "p": f"/docs/{collection_id}/{sha}", "sha": sha, "status": status},
            )
        touch(session, collection_id)


_TICKS = itertools.count(1)


def touch(session: Session, collection_id: int) -> None:
    """Move the collection's updated_at on, as every change to its files does."""
    moment = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=next(_TICKS))
    session.execute(
        text("UPDATE collections SET updated_at = :at WHERE id = :c"),
        {"at": moment.isoformat(timespec="microseconds"), "c": collection_id},
    )


def take_out(db: Database, collection_id: int, sha: str) -> None:
    with db.session() as session:
        session.execute(
            text("DELETE FROM collection_files WHERE collection_id = :c AND content_sha256 = :sha"),
            {"c": collection_id, "sha": sha},
        )
        touch(session, collection_id)


def collection(
    db: Database, index: ChunkIndex, name: str, documents: int, seed: int
) -> tuple[int, list[str]]:
    rng = np.random.default_rng(seed)
    shas = [add_vectors(index, f"{name} {d}", clustered(rng, PER_DOCUMENT)) for d in range(documents)]
    collection_id = new_collection(db, name)
    put_in(db, collection_id, shas)
    return collection_id, shas


def nearest(index: ChunkIndex, collection_id: int, query: npt.ArrayLike, limit: int = 20) -> list[int]:
    hits = index.search("", query, scope=collection_id, embedding_model=MODEL, limit=limit)
    return [hit.chunk_id for hit in hits]


def scores(db: Database, collection_id: int, query: npt.ArrayLike) -> dict[int, float]:
    """Every searched passage's cosine to `query`, from the stored float16 vectors (brute force)."""
    with db.read_session() as session:
        rows = session.execute(
            text(
                "SELECT c.id, c.embedding FROM document_chunks AS c JOIN collection_files AS f "
                "ON f.content_sha256 = c.content_sha256 WHERE f.collection_id = :c AND f.status = 'indexed'"
            ),
            {"c": collection_id},
        ).all()
    unit = np.asarray(query, dtype=np.float32)
    unit = (unit / np.linalg.norm(unit)).astype(np.float64)
    return {int(r.id): float(np.frombuffer(r.embedding, dtype="<f2").astype(np.float64) @ unit) for r in rows}


def exact_top(db: Database, collection_id: int, query: npt.ArrayLike, limit: int = 20) -> list[int]:
    cosine = scores(db, collection_id, query)
    return sorted(cosine, key=lambda i: -cosine[i])[:limit]


def assert_approximately_exact(
    db: Database, collection_id: int, query: npt.ArrayLike, got: list[int]
) -> None:
    """What a graph returns: in exact cosine order (rescored), holding nearly all of the exact top (HNSW
    may miss a near tie or leave a node unreachable)."""
    cosine = scores(db, collection_id, query)
    assert got == sorted(got, key=lambda i: -cosine[i])
    truth = exact_top(db, collection_id, query, len(got))
    assert len(set(got) & set(truth)) >= 0.9 * len(truth)


def queries(count: int = 10) -> list[npt.NDArray[np.float64]]:
    rng = np.random.default_rng(99)
    return list(clustered(rng, count))


def files(db: Database, collection_id: int) -> tuple[Path, Path]:
    return GraphFiles(db.path).paths(MODEL, collection_id)


def saved_stamp(db: Database, collection_id: int) -> object:
    return GraphFiles(db.path).saved_stamp(MODEL, collection_id)


def saved_keys_of_content(db: Database, sha: str) -> set[int]:
    with db.read_session() as session:
        rows = session.execute(text("SELECT id FROM document_chunks WHERE content_sha256 = :s"), {"s": sha})
        return {int(i) for i in rows.scalars()}


def chunk_ids(db: Database) -> set[int]:
    with db.read_session() as session:
        return {int(i) for i in session.execute(text("SELECT id FROM document_chunks")).scalars()}


def saved_graph(db: Database, collection_id: int) -> Index:
    # Through ann, which sets up libstdc++'s locale before usearch loads (llama.cpp breaks otherwise).
    graph = _usearch_index().restore(str(files(db, collection_id)[0]))
    assert graph is not None
    return graph


def saved_keys(db: Database, collection_id: int) -> set[int]:
    return {int(key) for key in np.asarray(saved_graph(db, collection_id).keys)}


# Which search ------------------------------------------------------------------------------------------


def test_a_small_collection_is_searched_exactly_and_leaves_no_file(db: Database) -> None:
    index = index_of(db)
    collection_id, _ = collection(db, index, "small", 3, seed=1)  # 30 vectors, below LARGE
    assert nearest(index, collection_id, queries(1)[0]) == nearest(
        ChunkIndex(db), collection_id, queries(1)[0]
    )
    index.wait()
    assert not any(path.exists() for path in files(db, collection_id))


def test_a_large_collection_is_searched_through_its_graph_in_the_exact_order(db: Database) -> None:
    index = index_of(db)
    collection_id, _ = collection(db, index, "large", 30, seed=2)  # 300 vectors
    exact = ChunkIndex(db)  # the default threshold: exact at this size
    for query in queries():
        assert nearest(exact, collection_id, query) == exact_top(db, collection_id, query)
        assert_approximately_exact(db, collection_id, query, nearest(index, collection_id, query))
    index.wait()
    graph, meta = files(db, collection_id)
    assert graph.is_file() and meta.is_file()
    assert json.loads(meta.read_text(encoding="utf-8"))["count"] == 300
    if os.name == "posix":
        assert stat.S_IMODE(graph.stat().st_mode) == 0o600
        assert stat.S_IMODE(graph.parent.stat().st_mode) == 0o700


def test_a_question_sees_passages_added_since_the_graph_was_built(db: Database) -> None:
    index = index_of(db)
    collection_id, _ = collection(db, index, "growing", 10, seed=3)
    target = np.random.default_rng(4).standard_normal((1, DIMS))
    assert nearest(index, collection_id, target[0], limit=1) != []
    added = add_vectors(index, "new arrival", target)
    put_in(db, collection_id, [added])
    [hit] = index.search("", target[0], scope=collection_id, embedding_model=MODEL, limit=1)
    assert hit.content_sha256 == added


# The cache ---------------------------------------------------------------------------------------------


def prepared(db: Database) -> tuple[int, list[str]]:
    """A large collection whose graph is saved."""
    index = index_of(db)
    collection_id, shas = collection(db, index, "cached", 20, seed=5)
    assert index.prepare(collection_id, MODEL) is not None
    return collection_id, shas


def searched_approximately(db: Database, index: ChunkIndex, collection_id: int) -> None:
    for query in queries():
        assert_approximately_exact(db, collection_id, query, nearest(index, collection_id, query))


def test_a_saved_graph_is_not_used_where_this_index_searches_exactly(db: Database) -> None:
    collection_id, _ = prepared(db)
    exact = ChunkIndex(db)  # draws the line at the default size, far above this collection's
    for query in queries():
        assert nearest(exact, collection_id, query) == exact_top(db, collection_id, query)


def test_a_missing_graph_file_is_rebuilt(db: Database) -> None:
    collection_id, _ = prepared(db)
    for path in files(db, collection_id):
        path.unlink()
    index = index_of(db)
    searched_approximately(db, index, collection_id)
    index.wait()
    assert saved_keys(db, collection_id) == chunk_ids(db)


@pytest.mark.parametrize(
    "damage", ["graph bytes", "graph truncated", "description", "description of another"]
)
def test_a_damaged_graph_file_is_rebuilt_not_trusted(db: Database, damage: str) -> None:
    collection_id, _ = prepared(db)
    graph, meta = files(db, collection_id)
    if damage == "graph bytes":
        data = bytearray(graph.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 64] = bytes(64)
        graph.write_bytes(bytes(data))
    elif damage == "graph truncated":
        graph.write_bytes(graph.read_bytes()[:100])
    elif damage == "description":
        meta.write_text("{not json", encoding="utf-8")
    else:
        described = json.loads(meta.read_text(encoding="utf-8"))
        meta.write_text(json.dumps({**described, "model": "another model"}), encoding="utf-8")
    index = index_of(db)
    searched_approximately(db, index, collection_id)
    index.wait()
    assert len(saved_keys(db, collection_id)) == 200
    assert json.loads(meta.read_text(encoding="utf-8"))["model"] == MODEL


def test_a_crash_before_the_graph_was_saved_is_detected_and_repaired(db: Database) -> None:
    collection_id, _ = prepared(db)
    before = saved_stamp(db, collection_id)
    # Another process commits a new document into the collection and dies before saving the graph.
    other = Database.open(db.path, db.path.parent / "backups")
    try:
        target = np.random.default_rng(6).standard_normal((1, DIMS))
        added = add_vectors(
            ChunkIndex(other, approximate_from=LARGE), "committed, never in the graph", target
        )
        put_in(other, collection_id, [added])
    finally:
        other.dispose()
    assert saved_stamp(db, collection_id) == before
    index = index_of(db)
    [hit] = index.search("", target[0], scope=collection_id, embedding_model=MODEL, limit=1)
    assert hit.content_sha256 == added
    index.wait()
    assert saved_stamp(db, collection_id) != before
    assert len(saved_keys(db, collection_id)) == 201
    # Another process, starting now, trusts the saved graph as it is.
    again = index_of(db)
    [hit] = again.search("", target[0], scope=collection_id, embedding_model=MODEL, limit=1)
    assert hit.content_sha256 == added


def test_a_crash_between_the_two_renames_is_not_trusted(db: Database) -> None:
    collection_id, shas = prepared(db)
    _, meta = files(db, collection_id)
    old_description = meta.read_text(encoding="utf-8")
    index = index_of(db)
    take_out(db, collection_id, shas[0])
    nearest(index, collection_id, queries(1)[0])
    index.wait()
    meta.write_text(old_description, encoding="utf-8")  # the new graph, the old description
    fresh = index_of(db)
    searched_approximately(db, fresh, collection_id)
    fresh.wait()
    assert saved_keys(db, collection_id) == chunk_ids(db) - saved_keys_of_content(db, shas[0])


# Deleting ----------------------------------------------------------------------------------------------


def test_removed_passages_leave_the_results_the_graph_and_its_file(db: Database) -> None:
    collection_id, shas = prepared(db)
    graph, _ = files(db, collection_id)
    with db.read_session() as session:
        gone = [
            int(i)
            for i in session.execute(
                text("SELECT id FROM document_chunks WHERE content_sha256 = :s"), {"s": shas[0]}
            ).scalars()
        ]
    stored = saved_graph(db, collection_id)
    gone_bytes = [np.asarray(stored.get(key, dtype="i8")).tobytes() for key in gone]
    assert all(data in graph.read_bytes() for data in gone_bytes)
    index = index_of(db)
    take_out(db, collection_id, shas[0])
    with db.read_session() as session:
        own = session.execute(
            text("SELECT embedding FROM document_chunks WHERE id = :i"), {"i": gone[0]}
        ).scalar_one()
    query = np.frombuffer(own, dtype="<f2").astype(np.float32)
    hits = index.search("", query, scope=collection_id, embedding_model=MODEL, limit=50)
    assert len(hits) == 50 and not {hit.chunk_id for hit in hits} & set(gone)
    index.wait()
    assert not saved_keys(db, collection_id) & set(gone)
    saved = graph.read_bytes()
    assert not any(data in saved for data in gone_bytes)


def test_deleting_a_collection_deletes_its_graph(db: Database, tmp_path: Path) -> None:
    index = index_of(db)
    store = CollectionStore(db, index)
    created = store.create("doomed", [tmp_path])
    rng = np.random.default_rng(7)
    put_in(
        db, created.id, [add_vectors(index, f"doomed {d}", clustered(rng, PER_DOCUMENT)) for d in range(6)]
    )
    assert index.prepare(created.id, MODEL) is not None
    assert all(path.exists() for path in files(db, created.id))
    store.remove("doomed")
    assert not any(path.exists() for path in files(db, created.id))


# Scopes ------------------------------------------------------------------------------------------------


def test_each_collection_gets_its_own_k_nearest_however_small_beside_large_ones(db: Database) -> None:
    index = index_of(db)
    large, _ = collection(db, index, "large", 30, seed=8)
    other, _ = collection(db, index, "other large", 30, seed=9)
    rng = np.random.default_rng(10)
    tiny_shas = [add_vectors(index, "tiny", clustered(rng, 5))]
    tiny = new_collection(db, "tiny")
    put_in(db, tiny, tiny_shas)
    shared = new_collection(db, "shared")
    put_in(db, shared, [sha_of("large 0"), sha_of("other large 0"), *tiny_shas])  # under LARGE: exact
    for query in queries(5):
        for scope, limit in ((large, 20), (other, 20), (tiny, 3), (tiny, 20), (shared, 20)):
            hits = index.search("", query, scope=scope, embedding_model=MODEL, limit=limit)
            members = {sha for sha, in_scope in _contents(db).items() if scope in in_scope}
            assert {hit.content_sha256 for hit in hits} <= members
            got = [hit.chunk_id for hit in hits]
            if scope in (large, other):
                assert_approximately_exact(db, scope, query, got)
            else:
                assert got == exact_top(db, scope, query, limit)
            assert len(hits) == min(limit, 5 if scope == tiny else 20)
    index.wait()
    assert all(path.exists() for path in files(db, large) + files(db, other))
    assert not any(path.exists() for path in files(db, tiny) + files(db, shared))


def _contents(db: Database) -> dict[str, set[int]]:
    with db.read_session() as session:
        rows = session.execute(text("SELECT content_sha256, collection_id FROM collection_files")).all()
    out: dict[str, set[int]] = {}
    for sha, collection_id in rows:
        out.setdefault(sha, set()).add(collection_id)
    return out


def test_a_file_that_went_missing_is_not_searched_through_the_graph(db: Database) -> None:
    index = index_of(db)
    collection_id, shas = collection(db, index, "large", 10, seed=11)
    query = queries(1)[0]
    assert nearest(index, collection_id, query, limit=100)
    with db.session() as session:
        session.execute(
            text("UPDATE collection_files SET status = 'missing' WHERE content_sha256 = :sha"),
            {"sha": shas[1]},
        )
        touch(session, collection_id)
    hits = index.search("", query, scope=collection_id, embedding_model=MODEL, limit=100)
    assert len(hits) == 90 and shas[1] not in {hit.content_sha256 for hit in hits}


def test_a_query_of_another_size_is_refused_through_the_graph_too(db: Database) -> None:
    index = index_of(db)
    collection_id, _ = collection(db, index, "large", 10, seed=12)
    with pytest.raises(ValueError, match=f"has 3 dimensions.*have {DIMS}"):
        index.search("", np.ones(3), scope=collection_id, embedding_model=MODEL)


# Building ----------------------------------------------------------------------------------------------


def delay_builds(index: ChunkIndex, release: threading.Event, monkeypatch: pytest.MonkeyPatch) -> None:
    """Graphs built on their thread start when `release` is set (so that a test sees them not ready)."""
    original = index._prepare

    def delayed(*args: Any, **kwargs: Any) -> Any:
        release.wait(timeout=60)
        return original(*args, **kwargs)

    monkeypatch.setattr(index, "_prepare", delayed)


def test_closing_stops_a_graph_being_built_and_leaves_no_file(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "INLINE_ADDS", 50)
    monkeypatch.setattr(index_module, "_READ_BATCH", 10)
    index = index_of(db)
    collection_id, _ = collection(db, index, "large", 20, seed=14)
    building = threading.Event()
    delay_builds(index, building, monkeypatch)
    assert nearest(index, collection_id, queries(1)[0]) == exact_top(db, collection_id, queries(1)[0])
    waiting = index.wait

    def release_then_wait() -> None:  # close() asks the build to stop, then waits for it: release it then
        building.set()
        waiting()

    monkeypatch.setattr(index, "wait", release_then_wait)
    index.close()
    assert not any(path.exists() for path in files(db, collection_id))
    assert not list(files(db, collection_id)[0].parent.glob("*.tmp"))


def test_a_graph_too_large_to_build_during_a_question_is_built_on_a_thread_meanwhile_exactly(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "INLINE_ADDS", 50)
    index = index_of(db)
    collection_id, _ = collection(db, index, "large", 20, seed=13)
    building = threading.Event()
    delay_builds(index, building, monkeypatch)
    # The graph cannot be ready yet: these are answered exactly.
    for query in queries():
        assert nearest(index, collection_id, query) == exact_top(db, collection_id, query)
    assert not files(db, collection_id)[0].exists()
    building.set()
    index.wait()
    assert len(saved_keys(db, collection_id)) == 200
    searched_approximately(db, index, collection_id)


# The process ---------------------------------------------------------------------------------------------

LOAD_AFTER_GRAPH = """
import numpy as np
from app.documents.ann import Graph
from inference.ggml_backends import load_backends

graph = Graph("m", 1, 8, "created")
graph.update(np.zeros(0, np.int64), np.arange(3, dtype=np.int64), np.ones((3, 8), np.float16), threads=1)
assert len(graph) == 3
load_backends()
import llama_cpp

llama_cpp.Llama(model_path={model!r}, n_ctx=256, verbose=False).close()
print("loaded")
"""


@pytest.mark.model
def test_a_model_still_loads_in_a_process_that_built_a_graph(starter_model: Path) -> None:
    # A fresh interpreter: in this one, other tests may already have loaded a model, which hides the problem.
    done = subprocess.run(
        [sys.executable, "-c", LOAD_AFTER_GRAPH.format(model=str(starter_model))],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])},
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "loaded", done.stderr[-2000:]
