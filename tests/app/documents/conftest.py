"""Fixtures for app.documents."""

from __future__ import annotations

import pytest

from app.documents.index import ChunkIndex
from app.storage.db import Database


@pytest.fixture
def index(db: Database) -> ChunkIndex:
    return ChunkIndex(db)
