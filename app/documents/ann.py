"""Approximate nearest neighbours for large collections: an HNSW graph per (embedding model, collection),
kept in a file beside the database as a cache of the vectors SQLite holds.

Exact search reads every vector of a collection for every question: a few milliseconds at 20,000 passages,
a quarter of a second at a million, in proportion to the collection. An HNSW graph (Malkov and Yashunin,
2016) finds the nearest vectors by walking a few hundred of them, whatever the collection's size.

The library is usearch (Apache-2.0; wheels for Linux, Windows and macOS on x86-64 and arm64). Its distance
kernels come from NumKong, which picks the CPU's instruction set when the process starts (serial, Haswell,
Skylake, Ice Lake, Sapphire Rapids… on x86-64: `hardware_acceleration` says which), so one installer runs
on every CPU. faiss-cpu (MIT) was measured too: its HNSW cannot delete, keeps float32 vectors (1.5 KB a
passage, twice what SQLite holds) and brings an OpenBLAS of its own beside NumPy's; hnswlib publishes no
wheels, and its source build compiles for the building machine's CPU (-march=native).

One graph per collection rather than one for every passage: a graph filtered down to a small collection has
to walk past the other collections' vectors and may find fewer than it was asked for, while a collection's
own graph always returns its nearest. A chat's attachments are searched exactly (they are few).

The graph is a cache, never the truth:

- it stores 8-bit vectors; the candidates it returns (twice as many as asked for) are scored again from
  their float16 vectors in SQLite, in the scope as it stands, so a passage deleted since is never returned
  and the order is the exact cosine order;
- its file carries, in a JSON file beside it, what it was built from: the embedding model, the collection
  (its id and creation time), the database's stamp for the collection (app.documents.index), its size and
  the SHA-256 of the graph file. A missing, unreadable or corrupt file, or one whose checksum does not
  match (a crash between the two renames), or another database's, is rebuilt from SQLite; one whose stamp
  is not the database's (a crash after the database committed but before the graph was saved, another
  process's writes) is brought up to date by comparing its passages with the collection's: the missing
  ones are added, the gone ones removed;
- removing a vector leaves its bytes in the graph's storage, so the freed slots are overwritten before the
  graph is saved again, and the old file is deleted at once: deleted documents do not linger in the cache.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
import re
import sys
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, TypeAlias

import numpy as np
import numpy.typing as npt

from app.fsutil import fsync_directory, make_private_dir, private_opener

if TYPE_CHECKING:
    from usearch.index import Index

log = logging.getLogger("hearth.documents")

FORMAT: Final = 1
# Collections with fewer vectors than this are searched exactly. Measured here (median CPU time per question,
# 384 dimensions, random vectors): exact 0.8 / 1.3 / 3.6 / 9.5 ms at 5,000 / 10,000 / 20,000 / 50,000
# vectors, the graph's walk plus rescoring 0.8 / 1.3 / 2.2 / 3.4 ms, plus about a millisecond to read the
# candidates' vectors back from SQLite: below 20,000 exactness costs next to nothing.
APPROXIMATE_FROM: Final = 20_000
# HNSW's M and efConstruction: usearch's default links, a shallower search while inserting (building goes
# at about twice the speed for the same recall once candidates are rescored exactly).
CONNECTIVITY: Final = 16
EXPANSION_ADD: Final = 64
# The walk's breadth (ef; usearch widens it to the count asked for) for CANDIDATES * OVERSAMPLE candidates.
# Measured on 200,000 clustered vectors (a stand-in for embeddings): the exact top 50 among the rescored
# 100 candidates 97.4% at ef 128 (one question of 100 stuck in the wrong region), 99.4% at 256, for 1.5 and
# 1.9 ms of CPU. On random vectors (no neighbourhoods to follow, the worst case) 256 costs 2.3 ms at 100,000
# and 5.8 ms at a million.
EXPANSION_SEARCH: Final = 256
OVERSAMPLE: Final = 2
# usearch inserting on several threads into a small graph leaves some vectors unreachable (measured: 5 of
# 300 clustered vectors, recall@20 down to 0.85 for some questions; none on one thread). The first
# vectors of a graph go in one at a time; a large graph's further thousands may use more threads.
SERIAL_UNTIL: Final = 20_000
# Keys of the filler vectors that overwrite freed slots (chunk ids are SQLite rowids, far below).
_FILLER_KEY: Final = 1 << 62

IdArray: TypeAlias = npt.NDArray[np.int64]
Stamp: TypeAlias = tuple[object, ...]


class GraphFiles:
    """Where the graphs of one database live: `vector-index/` beside it, owner-only (vectors tell a lot about
    the text they came from), named after the database file, so that databases sharing a folder (the
    benchmarks') keep theirs apart."""

    def __init__(self, database: Path) -> None:
        self.directory = database.parent / "vector-index"
        self._prefix = database.stem

    def paths(self, model: str, collection_id: int) -> tuple[Path, Path]:
        # The model is a SHA-256 in practice, but any string must make a safe file name.
        name = f"{self._prefix}-{hashlib.sha256(model.encode()).hexdigest()[:16]}-{collection_id}"
        return self.directory / f"{name}.usearch", self.directory / f"{name}.json"

    def saved_stamp(self, model: str, collection_id: int) -> Stamp | None:
        """The database stamp the saved graph says it reflects (without checking the graph)."""
        try:
            return saved_stamp(json.loads(self.paths(model, collection_id)[1].read_text(encoding="utf-8")))
        except (OSError, ValueError):
            return None

    def remove(self, model: str, collection_id: int) -> None:
        for path in self.paths(model, collection_id):
            path.unlink(missing_ok=True)

    def remove_collection(self, collection_id: int) -> None:
        """Every model's graph of the collection."""
        if not self.directory.is_dir():
            return
        for path in self.directory.iterdir():
            stem = path.name.split(".", 1)[0]
            if re.fullmatch(rf"{re.escape(self._prefix)}-[0-9a-f]{{16}}-{collection_id}", stem):
                path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Sync:
    """What bringing a graph up to date changed."""

    added: int
    removed: int


class Graph:
    """One collection's vectors from one embedding model, as an HNSW graph. Thread-safe: searching, updating
    and saving take turns on its lock."""

    def __init__(
        self, model: str, collection_id: int, dims: int, identity: str, index: Index | None = None
    ) -> None:
        """`identity` tells this database's collection from another one with the same id (a database
        copied in from elsewhere): its creation time."""
        self.model = model
        self.collection_id = collection_id
        self.dims = dims
        self.identity = identity
        self._index = index if index is not None else _new_index(dims)
        self.lock = threading.Lock()
        # The database's stamp the graph reflects; None until compared with it.
        self.stamp: Stamp | None = None
        # Whether vectors changed since the file was written, and what the file says about itself.
        self.unsaved = True
        self.saved_stamp: Stamp | None = None
        self._saved_digest: str | None = None

    def __len__(self) -> int:
        return len(self._index)

    @property
    def hardware_acceleration(self) -> str:
        return str(self._index.hardware_acceleration)

    def keys(self) -> IdArray:
        return np.sort(np.asarray(self._index.keys, dtype=np.int64))

    def candidates(self, query: npt.NDArray[np.float32], n: int) -> list[int]:
        """About the `n` nearest chunk ids (call with the lock held)."""
        if len(self._index) == 0 or n < 1:
            return []
        found = self._index.search(query, n, threads=1)
        return [int(key) for key in found.keys]

    def update(self, gone: IdArray, ids: IdArray, vectors: npt.NDArray[np.float16], *, threads: int) -> Sync:
        """Remove `gone`, add `ids` with their `vectors` (call with the lock held)."""
        if len(gone):
            self._index.remove(gone.astype(np.uint64))
            # usearch only marks a removed vector free: its bytes stay in memory and in the next saved file
            # until an addition reuses the slot. Fill the freed slots with a constant and free them again.
            fillers = np.arange(_FILLER_KEY, _FILLER_KEY + len(gone), dtype=np.uint64)
            self._index.add(fillers, np.ones((len(gone), self.dims), dtype=np.float32), threads=1)
            self._index.remove(fillers)
        keys = ids.astype(np.uint64)
        serial = max(0, min(len(keys), SERIAL_UNTIL - len(self._index))) if threads != 1 else len(keys)
        if serial:
            self._index.add(keys[:serial], vectors[:serial], threads=1)
        if serial < len(keys):
            self._index.add(keys[serial:], vectors[serial:], threads=threads)
        if len(gone) or len(ids):
            self.unsaved = True
        return Sync(len(ids), len(gone))

    @property
    def saved(self) -> bool:
        return not self.unsaved and self.saved_stamp == self.stamp

    def save(self, files: GraphFiles) -> None:
        """Write the graph and its description atomically (call with the lock held); only the description
        when the vectors are those already saved."""
        graph_path, meta_path = files.paths(self.model, self.collection_id)
        make_private_dir(files.directory)
        token = f".{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp"
        graph_tmp = graph_path.with_name(graph_path.name + token)
        meta_tmp = meta_path.with_name(meta_path.name + token)
        rewrite = self.unsaved or self._saved_digest is None or not graph_path.exists()
        try:
            digest = self._saved_digest
            if rewrite:
                # usearch opens the file itself: create it owner-only first.
                os.close(private_opener(str(graph_tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
                self._index.save(str(graph_tmp))
                with graph_tmp.open("rb") as written:
                    digest = hashlib.file_digest(written, "sha256").hexdigest()
                    os.fsync(written.fileno())
            meta = {
                "format": FORMAT,
                "model": self.model,
                "collection_id": self.collection_id,
                "identity": self.identity,
                "dims": self.dims,
                "count": len(self._index),
                "stamp": list(self.stamp) if self.stamp is not None else None,
                "sha256": digest,
            }
            with open(meta_tmp, "w", encoding="utf-8", opener=private_opener) as out:
                json.dump(meta, out)
                out.flush()
                os.fsync(out.fileno())
            # The graph first: a crash between the two renames leaves a description whose checksum does not
            # match the graph, which is then rebuilt, never trusted.
            if rewrite:
                graph_tmp.replace(graph_path)
            meta_tmp.replace(meta_path)
            fsync_directory(files.directory)
            self.unsaved, self.saved_stamp, self._saved_digest = False, self.stamp, digest
        finally:
            graph_tmp.unlink(missing_ok=True)
            meta_tmp.unlink(missing_ok=True)

    @classmethod
    def load(cls, files: GraphFiles, model: str, collection_id: int, identity: str) -> Graph | None:
        """The saved graph, or None when it is missing, damaged or not this model's and collection's."""
        graph_path, meta_path = files.paths(model, collection_id)
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            with graph_path.open("rb") as saved:
                digest = hashlib.file_digest(saved, "sha256").hexdigest()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("the vector index %s is unreadable (%s); rebuilding it", graph_path, exc)
            return None
        expected = {
            "format": FORMAT,
            "model": model,
            "collection_id": collection_id,
            "identity": identity,
            "sha256": digest,
        }
        if (
            not isinstance(meta, dict)
            or any(meta.get(key) != value for key, value in expected.items())
            or not isinstance(meta.get("dims"), int)
            or meta["dims"] < 1
        ):
            log.warning("the vector index %s does not match its description; rebuilding it", graph_path)
            return None
        dims = meta["dims"]
        index = _new_index(dims)
        try:
            index.load(str(graph_path))
        except (RuntimeError, ValueError, OSError) as exc:
            log.warning("the vector index %s could not be loaded (%s); rebuilding it", graph_path, exc)
            return None
        if len(index) != meta.get("count") or index.ndim != dims:
            log.warning(
                "the vector index %s holds %d vectors, not %s; rebuilding it",
                graph_path,
                len(index),
                meta.get("count"),
            )
            return None
        graph = cls(model, collection_id, dims, identity, index)
        graph.stamp = graph.saved_stamp = saved_stamp(meta)
        graph.unsaved, graph._saved_digest = False, digest
        return graph


def saved_stamp(meta: object) -> Stamp | None:
    stamp = meta.get("stamp") if isinstance(meta, dict) else None
    return tuple(stamp) if isinstance(stamp, list) else None


_import_lock = threading.Lock()


def _usearch_index() -> type[Index]:
    """usearch's Index class, imported when a graph is first needed: most processes never search a large
    collection, and the import loads 15 MB of kernels.

    On Linux, usearch's extension carries a static copy of libstdc++ whose locale facet ids are GNU "unique"
    symbols, which the dynamic linker makes process-wide. Loaded before the system libstdc++ has set up its
    own locale, they take its place, and llama.cpp loading a model in the same process afterwards fails in
    its vocabulary with std::bad_cast. Setting up the system's classic locale first keeps its ids in force
    (tests/app/documents/test_vector_index.py loads a model after a graph was built).
    """
    with _import_lock:
        if sys.platform.startswith("linux"):
            # Another C++ runtime (musl, libc++): nothing to set up.
            with contextlib.suppress(OSError, AttributeError):
                ctypes.CDLL("libstdc++.so.6")._ZNSt6locale7classicEv()
        import usearch.index

        return usearch.index.Index


def _new_index(dims: int) -> Index:
    return _usearch_index()(
        ndim=dims,
        metric="cos",
        dtype="i8",
        connectivity=CONNECTIVITY,
        expansion_add=EXPANSION_ADD,
        expansion_search=EXPANSION_SEARCH,
    )


def difference(have: IdArray, want: IdArray) -> tuple[IdArray, IdArray]:
    """(ids to remove, ids to add) to turn the sorted `have` into the sorted `want`."""
    gone: IdArray = np.setdiff1d(have, want, assume_unique=True)
    new: IdArray = np.setdiff1d(want, have, assume_unique=True)
    return gone, new
