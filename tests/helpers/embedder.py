"""A deterministic stand-in for an embedding model, for plumbing tests ONLY.

Each word (and each CJK bigram) of a text is hashed to one of DIMS coordinates with a sign, and the counts
are L2-normalised: texts sharing words get similar vectors, nothing else does. It lets tests drive the
passage index, its vector cache and its fusion with vectors whose nearest neighbours are known, without
loading a model. It knows nothing of meaning (a paraphrase with other words is not near its original), so
it must never be used to judge retrieval quality: that is measured with the real embedding model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from app.documents.segment import question_terms

DIMS = 64
MODEL = "hashed-bag-of-words"


def embed(texts: Sequence[str], dims: int = DIMS) -> npt.NDArray[np.float32]:
    vectors = np.zeros((len(texts), dims), dtype=np.float32)
    for row, text in enumerate(texts):
        for term in question_terms(text, max_terms=10_000):
            digest = hashlib.blake2b(term.lower().encode(), digest_size=8).digest()
            value = int.from_bytes(digest, "little")
            vectors[row, value % dims] += 1.0 if value >> 63 else -1.0
        if not vectors[row].any():
            vectors[row, 0] = 1.0  # no words: still a unit vector
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors
