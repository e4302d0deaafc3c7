"""The passage index: storing chunks, full-text and vector ranking, their fusion, scopes and caches.

Vectors come from tests/helpers/embedder.py (hashed bag of words): plumbing only, never quality.
"""

from __future__ import annotations

import functools
import sqlite3
import threading
from contextlib import closing
from datetime import UTC, datetime
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from sqlalchemy import event, text

import app.documents.index as index_module
from app.documents.index import FTS_WEIGHT, RRF_K, ChunkIndex, ChunkInput, Hit, IndexCounts
from app.storage.db import Database
from tests.helpers import embedder
from tests.helpers.documents import add_document, sha_of

MANUAL = [
    "Install the printer driver with the package manager before connecting the printer.",
    "The scanner needs no driver on Linux; it works out of the box.",
    "Paper jams are cleared by opening the rear tray.",
]
手册 = [
    "打印机驱动程序需要先用软件包管理器安装。",
    "扫描仪在Linux上不需要驱动程序。",
    "卡纸时请打开后面的纸盒。",
]
NOW = datetime(2025, 1, 1, tzinfo=UTC).isoformat(timespec="microseconds")


def query_vector(question: str) -> npt.NDArray[np.float32]:
    vector: npt.NDArray[np.float32] = embedder.embed([question])[0]
    return vector


def ids(hits: list[Hit]) -> list[int]:
    return [hit.chunk_id for hit in hits]


def texts(hits: list[Hit]) -> list[str]:
    return [hit.text for hit in hits]


def raw(db: Database, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(db.path)) as conn:
        return conn.execute(sql, params).fetchall()


def vocabulary(db: Database) -> set[str]:
    """Every term the full-text index holds for some passage."""
    with closing(sqlite3.connect(db.path)) as conn:
        conn.execute("CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, document_chunks_fts, row)")
        return {row[0] for row in conn.execute("SELECT term FROM temp.v WHERE doc > 0")}


def add_collection(db: Database, name: str, files: dict[str, str]) -> int:
    """A collection holding content SHA-256 -> status, as indexing leaves it."""
    with db.session() as session:
        collection_id = session.execute(
            text(
                "INSERT INTO collections (name, created_at, updated_at) "
                "VALUES (:name, :now, :now) RETURNING id"
            ),
            {"name": name, "now": NOW},
        ).scalar_one()
        for i, (sha, status) in enumerate(files.items()):
            session.execute(
                text(
                    "INSERT INTO collection_files (collection_id, path, size_bytes, mtime_ns, "
                    "content_sha256, "
                    "status) VALUES (:c, :path, 1, 1, :sha, :status)"
                ),
                {"c": collection_id, "path": f"/docs/{name}/{i}", "sha": sha, "status": status},
            )
    return int(collection_id)


def attach(db: Database, sha: str) -> None:
    """A user message with the content as its attachment."""
    with db.session() as session:
        conversation = session.execute(
            text(
                "INSERT INTO conversations (title, created_at, updated_at) "
                "VALUES ('c', :now, :now) RETURNING id"
            ),
            {"now": NOW},
        ).scalar_one()
        message = session.execute(
            text(
                "INSERT INTO messages (conversation_id, role, content, status, created_at, updated_at) "
                "VALUES (:c, 'user', 'see attached', 'complete', :now, :now) RETURNING id"
            ),
            {"c": conversation, "now": NOW},
        ).scalar_one()
        session.execute(
            text(
                "INSERT INTO files (sha256, size_bytes, mime_type, created_at) "
                "VALUES (:sha, 1, 'text/plain', :now)"
            ),
            {"sha": sha, "now": NOW},
        )
        session.execute(
            text(
                "INSERT INTO message_parts (message_id, position, kind, file_sha256, name) "
                "VALUES (:m, 0, 'attachment', :sha, 'manual.txt')"
            ),
            {"m": message, "sha": sha},
        )


# Storing -------------------------------------------------------------------------------------------------


def test_hits_carry_the_passage_and_where_it_is(index: ChunkIndex) -> None:
    sha = add_document(index, "manual", MANUAL)
    [hit] = index.search("paper jams", None, scope={sha}, limit=1)
    assert (hit.content_sha256, hit.ordinal, hit.location, hit.text) == (sha, 2, "page 3", MANUAL[2])
    assert (hit.fts_rank, hit.vector_rank) == (1, None)
    assert hit.score == pytest.approx(FTS_WEIGHT / (RRF_K + 1))


def test_adding_a_content_again_replaces_its_passages_and_their_terms(
    index: ChunkIndex, db: Database
) -> None:
    sha = add_document(index, "manual", MANUAL)
    index.add_chunks(sha, [ChunkInput("A completely rewritten zeppelin chapter.", "page 1", 0)], None, None)
    assert index.search("printer", None, scope={sha}) == []
    assert texts(index.search("zeppelin", None, scope={sha})) == ["A completely rewritten zeppelin chapter."]
    assert index.counts() == IndexCounts(contents=1, chunks=1, embedded=0)
    assert "printer" not in vocabulary(db)
    assert "zeppelin" in vocabulary(db)


def test_has_chunks_says_whether_indexing_again_can_be_skipped(index: ChunkIndex) -> None:
    sha = add_document(index, "manual", MANUAL)
    bare = add_document(index, "bare", MANUAL, vectors=False)
    assert index.has_chunks(sha) and index.has_chunks(sha, embedder.MODEL)
    assert not index.has_chunks(sha, "another-model")
    assert index.has_chunks(bare) and not index.has_chunks(bare, embedder.MODEL)
    assert not index.has_chunks(sha_of("never added"))


def test_vectors_are_stored_as_unit_float16(index: ChunkIndex, db: Database) -> None:
    sha = sha_of("scaled")
    index.add_chunks(sha, [ChunkInput("x", "page 1", 0)], np.array([[3.0, 4.0]]), "m")
    [(blob, model)] = raw(db, "SELECT embedding, embedding_model FROM document_chunks")
    assert model == "m"
    assert np.frombuffer(blob, dtype="<f2").tolist() == [np.float16(0.6), np.float16(0.8)]


@pytest.mark.parametrize(
    ("sha", "embeddings", "model", "message"),
    [
        ("ABC", None, None, "not a lowercase hex SHA-256"),
        (sha_of("x"), np.ones((2, 4)), None, "go together"),
        (sha_of("x"), None, "m", "go together"),
        (sha_of("x"), np.ones((1, 4)), "m", r"shape \(2, dims\)"),
        (sha_of("x"), np.ones((2, 4)) * np.nan, "m", "finite"),
        (sha_of("x"), np.vstack([np.ones(4), np.zeros(4)]), "m", "all zeros"),
    ],
)
def test_malformed_chunks_are_refused_and_nothing_is_stored(
    index: ChunkIndex, sha: str, embeddings: Any, model: str | None, message: str
) -> None:
    chunks = [ChunkInput("one", "page 1", 0), ChunkInput("two", "page 2", 1)]
    with pytest.raises(ValueError, match=message):
        index.add_chunks(sha, chunks, embeddings, model)
    assert index.counts() == IndexCounts(0, 0, 0)


def test_duplicate_ordinals_are_refused(index: ChunkIndex) -> None:
    with pytest.raises(ValueError, match="unique"):
        index.add_chunks(sha_of("x"), [ChunkInput("a", "p", 0), ChunkInput("b", "p", 0)], None, None)


# Ranking -------------------------------------------------------------------------------------------------


def test_full_text_alone_ranks_by_bm25(index: ChunkIndex) -> None:
    sha = add_document(index, "manual", MANUAL, vectors=False)
    hits = index.search("printer driver", None, scope={sha})
    assert texts(hits)[:2] == [MANUAL[0], MANUAL[1]]
    assert [hit.fts_rank for hit in hits] == [1, 2] and {hit.vector_rank for hit in hits} == {None}


def test_chinese_passages_are_found_by_a_chinese_question(index: ChunkIndex) -> None:
    sha = add_document(index, "手册", 手册, vectors=False)
    assert texts(index.search("怎么安装打印机驱动？", None, scope={sha}))[0] == 手册[0]
    assert texts(index.search("纸盒", None, scope={sha})) == [手册[2]]


def test_vectors_alone_answer_a_question_with_no_word_in_common(index: ChunkIndex) -> None:
    sha = add_document(index, "manual", MANUAL)
    # The embedder hashes words, so the question's vector is the passage's own; full text has nothing.
    hits = index.search("", query_vector(MANUAL[2]), scope={sha}, embedding_model=embedder.MODEL)
    assert texts(hits)[0] == MANUAL[2]
    assert [hit.vector_rank for hit in hits] == [1, 2, 3] and {hit.fts_rank for hit in hits} == {None}


def test_hybrid_puts_a_passage_both_rankings_like_first(index: ChunkIndex) -> None:
    sha = add_document(index, "manual", MANUAL)
    hits = index.search("driver Linux", query_vector(MANUAL[1]), scope={sha}, embedding_model=embedder.MODEL)
    assert texts(hits)[0] == MANUAL[1]
    assert (hits[0].fts_rank, hits[0].vector_rank) == (1, 1)
    assert hits[0].score == pytest.approx((1 + FTS_WEIGHT) / (RRF_K + 1))
    # The other passage with "driver" is ranked by both lists too, below.
    assert (hits[1].text, hits[1].fts_rank) == (MANUAL[0], 2) and hits[1].vector_rank is not None
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)


def test_limit_caps_the_hits(index: ChunkIndex) -> None:
    sha = add_document(index, "many", [f"passage {i} about rivers" for i in range(30)])
    assert (
        len(index.search("rivers", query_vector("rivers"), scope={sha}, embedding_model=embedder.MODEL)) == 8
    )
    assert len(index.search("rivers", None, scope={sha}, limit=3)) == 3
    assert index.search("rivers", None, scope={sha}, limit=0) == []


def test_a_query_vector_needs_its_model_and_the_right_size(index: ChunkIndex) -> None:
    sha = add_document(index, "manual", MANUAL)
    with pytest.raises(ValueError, match="embedding_model"):
        index.search("driver", query_vector("driver"), scope={sha})
    with pytest.raises(ValueError, match=f"has 3 dimensions.*have {embedder.DIMS}"):
        index.search("driver", np.ones(3), scope={sha}, embedding_model=embedder.MODEL)
    with pytest.raises(ValueError, match="not all zeros"):
        index.search("driver", np.zeros(embedder.DIMS), scope={sha}, embedding_model=embedder.MODEL)


def test_passages_embedded_by_another_model_are_not_compared(index: ChunkIndex) -> None:
    sha = add_document(index, "manual", MANUAL)
    hits = index.search("", query_vector(MANUAL[0]), scope={sha}, embedding_model="another-model")
    assert hits == []


@pytest.mark.parametrize(
    "question",
    ['"', "AND", "NEAR(a b)", "driver*", "(driver", "-driver", "col:driver", "'; DROP TABLE x; --"],
)
def test_fts5_syntax_in_a_question_is_searched_as_words(index: ChunkIndex, question: str) -> None:
    sha = add_document(index, "manual", MANUAL)
    hits = index.search(question, query_vector(question), scope={sha}, embedding_model=embedder.MODEL)
    if "driver" in question:
        # Full text matched the word itself (the fused order is the vectors' business too).
        assert any(hit.fts_rank == 1 and "driver" in hit.text for hit in hits)


def test_the_vector_ranking_is_exactly_the_float16_cosine_ranking(index: ChunkIndex, db: Database) -> None:
    """The int8 first pass may only drop rows that cannot reach the top: checked against brute force on
    clustered vectors (many near-ties) in 384 dimensions."""
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((20, 384))
    vectors = np.vstack([centres[i % 20] + 0.05 * rng.standard_normal(384) for i in range(3000)])
    sha = sha_of("clusters")
    index.add_chunks(sha, [ChunkInput(f"v{i}", "", i) for i in range(len(vectors))], vectors, "m")
    blobs = raw(db, "SELECT embedding FROM document_chunks ORDER BY ordinal")
    stored = np.vstack([np.frombuffer(blob, dtype="<f2") for (blob,) in blobs]).astype(np.float64)
    for trial in range(10):
        query = centres[trial] + 0.05 * rng.standard_normal(384)
        asked = query.astype(np.float32)  # as the index takes it
        truth = stored @ (asked / np.linalg.norm(asked)).astype(np.float64)
        hits = index.search("", query, scope={sha}, embedding_model="m", limit=50)
        got = [hit.ordinal for hit in hits]
        assert got == sorted(got, key=lambda i: -truth[i])
        assert set(got) == set(np.argsort(-truth)[:50].tolist())


def test_ranking_vectors_on_a_second_thread_gives_the_same_hits(
    index: ChunkIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    sha = add_document(index, "many", [f"passage {i} about rivers and {i % 7} lakes" for i in range(200)])
    question = "rivers and 3 lakes"
    inline = index.search(question, query_vector(question), scope={sha}, embedding_model=embedder.MODEL)
    monkeypatch.setattr(index_module, "_BACKGROUND_ROWS", 0)
    assert (
        index.search(question, query_vector(question), scope={sha}, embedding_model=embedder.MODEL) == inline
    )


def test_words_in_most_passages_are_left_to_the_vectors(
    index: ChunkIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "FTS_BUDGET", 3)
    passages = [f"the river number {i}" for i in range(9)] + ["the lighthouse"]
    sha = add_document(index, "common", passages)
    # "the" and "river" each match more passages than the budget: only "lighthouse" is asked for.
    hits = index.search(
        "the river lighthouse", query_vector("lighthouse"), scope={sha}, embedding_model=embedder.MODEL
    )
    assert [hit.text for hit in hits if hit.fts_rank is not None] == ["the lighthouse"]
    hits = index.search("the", query_vector("the"), scope={sha}, embedding_model=embedder.MODEL)
    assert hits and {hit.fts_rank for hit in hits} == {None}
    # Without vectors to lean on, a common word is still searched.
    assert len(index.search("river", None, scope={sha}, limit=20)) == 9


def test_without_vectors_a_common_word_ranks_its_most_recent_passages_only(
    index: ChunkIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(index_module, "FTS_BUDGET", 3)
    monkeypatch.setattr(index_module, "FALLBACK_SAMPLE", 4)
    older = add_document(index, "older", [f"the river number {i}" for i in range(5)])
    newer = add_document(
        index, "newer", ["a river", "the river river river", "river", "no water here", "rivers"]
    )
    hits = index.search("river", None, scope={older, newer}, limit=20)
    # The four newest passages holding the word, ranked by bm25 among themselves.
    assert {hit.text for hit in hits} == {"a river", "the river river river", "river", "the river number 4"}
    assert hits[0].text == "the river river river"


# Scopes --------------------------------------------------------------------------------------------------


def test_a_set_of_contents_limits_the_search_to_them(index: ChunkIndex) -> None:
    manual = add_document(index, "manual", MANUAL)
    chinese = add_document(index, "手册", 手册)
    vector = query_vector("driver Linux")
    assert {
        hit.content_sha256
        for hit in index.search("driver Linux 驱动", vector, scope={manual}, embedding_model=embedder.MODEL)
    } == {manual}
    both = index.search(
        "driver Linux 驱动", vector, scope={manual, chinese}, embedding_model=embedder.MODEL, limit=6
    )
    assert {hit.content_sha256 for hit in both} == {manual, chinese}
    assert index.search("driver", vector, scope=set(), embedding_model=embedder.MODEL) == []


def test_a_collection_searches_its_indexed_and_changed_files_only(index: ChunkIndex, db: Database) -> None:
    indexed = add_document(index, "indexed", ["a lighthouse on the coast"])
    changed = add_document(index, "changed", ["a lighthouse keeper's diary"])
    missing = add_document(index, "missing", ["a lighthouse that was demolished"])
    elsewhere = add_document(index, "elsewhere", ["a lighthouse in another collection"])
    collection = add_collection(db, "coast", {indexed: "indexed", changed: "changed", missing: "missing"})
    add_collection(db, "other", {elsewhere: "indexed"})
    vector = query_vector("lighthouse")
    hits = index.search("lighthouse", vector, scope=collection, embedding_model=embedder.MODEL)
    assert {hit.content_sha256 for hit in hits} == {indexed, changed}
    assert index.counts(collection) == IndexCounts(contents=2, chunks=2, embedded=2)
    assert index.search("lighthouse", vector, scope=collection + 100, embedding_model=embedder.MODEL) == []


def test_a_scope_is_a_collection_id_or_a_set(index: ChunkIndex) -> None:
    with pytest.raises(TypeError, match="scope"):
        index.search("x", None, scope=True)
    with pytest.raises(TypeError, match="scope"):
        index.search("x", None, scope="abc")  # type: ignore[arg-type]


# Caches --------------------------------------------------------------------------------------------------


def vector_reads(db: Database) -> list[str]:
    """Records every statement that reads stored vectors."""
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if "c.embedding FROM" in statement:
            seen.append(statement)

    event.listen(db.engine, "before_cursor_execute", record)
    return seen


def test_vectors_are_read_from_the_database_once_until_a_write(index: ChunkIndex, db: Database) -> None:
    sha = add_document(index, "manual", MANUAL)
    reads = vector_reads(db)
    vector = query_vector("tray")
    for _ in range(3):
        index.search("tray", vector, scope={sha}, embedding_model=embedder.MODEL)
    assert len(reads) == 1
    index.add_chunks(
        sha,
        [ChunkInput("The tray is at the front now.", "page 1", 0)],
        embedder.embed(["tray"]),
        embedder.MODEL,
    )
    assert texts(index.search("", vector, scope={sha}, embedding_model=embedder.MODEL)) == [
        "The tray is at the front now."
    ]
    assert len(reads) == 2


def test_another_process_adding_passages_is_seen(index: ChunkIndex, db: Database) -> None:
    collection = add_collection(db, "shared", {})
    vector = query_vector("harbour")
    assert index.search("", vector, scope=collection, embedding_model=embedder.MODEL) == []
    other = Database.open(db.path, db.path.parent / "backups")  # a `hearth docs` command, say
    try:
        sha = add_document(ChunkIndex(other), "harbour", ["boats in the harbour"])
        with other.session() as session:
            session.execute(
                text(
                    "INSERT INTO collection_files (collection_id, path, size_bytes, mtime_ns, "
                    "content_sha256, "
                    "status) VALUES (:c, '/docs/harbour.txt', 1, 1, :sha, 'indexed')"
                ),
                {"c": collection, "sha": sha},
            )
            session.execute(
                text("UPDATE collections SET updated_at = :now WHERE id = :c"),
                {"now": datetime.now(UTC).isoformat(), "c": collection},
            )
    finally:
        other.dispose()
    assert texts(index.search("", vector, scope=collection, embedding_model=embedder.MODEL)) == [
        "boats in the harbour"
    ]


def test_searches_while_passages_are_added_see_whole_documents(index: ChunkIndex) -> None:
    first = add_document(index, "doc 0", [f"shared words, document 0 part {j}" for j in range(5)])
    errors: list[BaseException] = []
    shas = {first}

    def write() -> None:
        try:
            for i in range(1, 15):
                shas.add(
                    add_document(
                        index, f"doc {i}", [f"shared words, document {i} part {j}" for j in range(5)]
                    )
                )
        except BaseException as exc:
            errors.append(exc)

    def read() -> None:
        try:
            for _ in range(25):
                hits = index.search(
                    "shared words",
                    query_vector("shared words"),
                    scope=set(shas),
                    embedding_model=embedder.MODEL,
                    limit=100,
                )
                # A document is added in one transaction: a search sees all of its passages or none.
                per_document: dict[str, int] = {}
                for hit in hits:
                    per_document[hit.content_sha256] = per_document.get(hit.content_sha256, 0) + 1
                assert set(per_document.values()) <= {5}
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=write)] + [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert index.counts() == IndexCounts(contents=15, chunks=75, embedded=75)


# Removing ------------------------------------------------------------------------------------------------


def test_passages_nothing_refers_to_are_removed_without_a_trace(index: ChunkIndex, db: Database) -> None:
    kept_by_collection = add_document(index, "collected", ["a passage about quokkas"])
    kept_by_message = add_document(index, "attached", ["a passage about wombats"])
    gone = add_document(index, "orphan", ["a passage about zanzibarquux"])
    add_collection(db, "animals", {kept_by_collection: "indexed"})
    attach(db, kept_by_message)
    assert index.remove_unreferenced() == 1
    assert index.counts() == IndexCounts(contents=2, chunks=2, embedded=2)
    everything = {kept_by_collection, kept_by_message, gone}
    assert set(texts(index.search("quokkas wombats zanzibarquux", None, scope=everything))) == {
        "a passage about quokkas",
        "a passage about wombats",
    }
    assert "zanzibarquux" not in vocabulary(db)
    db.dispose()
    # secure_delete, the compacted index and the checkpoint leave the word nowhere in the files.
    for file in db.path.parent.glob(f"{db.path.name}*"):
        assert b"zanzibarquux" not in file.read_bytes(), file
    assert index.remove_unreferenced() == 0


def test_a_cached_matrix_never_returns_a_passage_deleted_meanwhile(index: ChunkIndex, db: Database) -> None:
    sha = add_document(index, "orphan", MANUAL)
    vector = query_vector(MANUAL[0])
    assert index.search("", vector, scope={sha}, embedding_model=embedder.MODEL)
    other = Database.open(db.path, db.path.parent / "backups")  # another process removes it
    try:
        assert ChunkIndex(other).remove_unreferenced() == 3
    finally:
        other.dispose()
    assert index.search("", vector, scope={sha}, embedding_model=embedder.MODEL) == []


def test_counts(index: ChunkIndex) -> None:
    add_document(index, "manual", MANUAL)
    add_document(index, "bare", 手册, vectors=False)
    assert index.counts() == IndexCounts(contents=2, chunks=6, embedded=3)


def test_vector_side_workers_are_reused_run_side_by_side_and_hand_back_errors() -> None:
    workers = index_module._Workers("test-vector-side")
    for expected in range(5):
        assert workers.submit(functools.partial(list, [expected])).result(timeout=5) == [expected]
    names = {t.name for t in threading.enumerate() if t.name.startswith("test-vector-side")}
    assert names == {"test-vector-side-1"}, "one question after another needs one thread"

    # Two at once run at once: each waits for the other at the barrier, which would time out on one thread.
    barrier = threading.Barrier(2, timeout=5)

    def meet() -> list[int]:
        return [barrier.wait()]

    both = [workers.submit(meet), workers.submit(meet)]
    assert sorted(f.result(timeout=10)[0] for f in both) == [0, 1]

    def broken() -> list[int]:
        raise ValueError("vectors of another size")

    with pytest.raises(ValueError, match="another size"):
        workers.submit(broken).result(timeout=5)
    assert workers.submit(lambda: [7]).result(timeout=5) == [7], "a failed question leaves the worker serving"
