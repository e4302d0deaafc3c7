"""Putting documents into the passage index in tests (vectors from the plumbing-only test embedder)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from app.documents.index import ChunkIndex, ChunkInput
from tests.helpers import embedder


def sha_of(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def add_document(
    index: ChunkIndex, name: str, passages: Sequence[str], *, vectors: bool = True, location: str = "page"
) -> str:
    """Store `passages` as the chunks of a content named `name` (its SHA-256 is that of the name), with
    the test embedder's vectors unless `vectors` is False. Returns the SHA-256."""
    sha = sha_of(name)
    chunks = [ChunkInput(text, f"{location} {i + 1}", i) for i, text in enumerate(passages)]
    if vectors:
        index.add_chunks(sha, chunks, embedder.embed(passages), embedder.MODEL)
    else:
        index.add_chunks(sha, chunks, None, None)
    return sha
