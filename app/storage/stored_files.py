"""The `files` rows: the stored files (app.attachments.files.FileStore) the database knows of. Attaching a
file and importing a conversation that carries files both record them here."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.dialects.sqlite import insert
from sqlalchemy.orm import Session

from app.attachments.files import FileStore
from app.storage.db import Database
from app.storage.orm import FilesRow

log = logging.getLogger("hearth.files")


def record_file(session: Session, sha256: str, size_bytes: int, mime_type: str) -> None:
    """Add the row of a stored file unless the database has it already: the same bytes stored again (attached
    twice, or imported with another conversation) keep their first row."""
    session.execute(
        insert(FilesRow)
        .values(sha256=sha256, size_bytes=size_bytes, mime_type=mime_type, created_at=datetime.now(UTC))
        .on_conflict_do_nothing(index_elements=[FilesRow.sha256])
    )


def delete_unlisted(db: Database, files: FileStore) -> int:
    """Delete (overwritten first) the stored files no `files` row lists: the store's files a restored database
    does not hold, or bytes a crash left between storing a file and recording it. Pinned files stay. For the
    start, before anything else in the process stores files. Returns how many went."""
    with db.read_session() as session:
        listed = set(session.scalars(select(FilesRow.sha256)))
    unlisted = [path.name for path in files.stored() if path.name not in listed]
    for sha256 in unlisted:
        files.delete(sha256)
    if unlisted:
        log.info("deleted %d stored files the database does not list", len(unlisted))
    return len(unlisted)
