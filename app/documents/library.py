"""Documents for chats: attachments (stored by content, extracted once) and collections (indexed in place),
and the passages that answer a question from either.

The seams it joins: extraction and chunking (app.documents.extract / chunking), the file store
(app.attachments.files), the passage index and collections (app.documents.index / collections), and an
embedder: the bundled embedding model in its own runner process (inference.embedding), started only when
something has to be searched, so a chat whose attachments fit whole never loads it.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

import numpy as np
import numpy.typing as npt
from sqlalchemy import text

from app.attachments.files import FileStore
from app.documents.chunking import chunk
from app.documents.collections import CollectionStore, FoundFile
from app.documents.context import AttachedText, Passage
from app.documents.extract import extract, extract_bytes
from app.documents.index import ChunkIndex, ChunkInput
from app.documents.model import DocumentError, ExtractedDocument, Section
from app.errors import HearthError
from app.images.pdf_pages import page_images
from app.images.prepare import DEFAULT_SIZING, IMAGE_KIND, ImageSizing, is_image_file, prepare_image
from app.library.installed import sha256_file
from app.storage.db import Database
from app.storage.orm import DocumentTextRow
from app.storage.stored_files import record_file
from inference.protocol import ImageInput

log = logging.getLogger("hearth.documents")


# Passages searched per question before the best are kept: the fused ranking needs candidates to fuse.
SEARCH_LIMIT: Final = 8
# Pictures kept as a model is given them: the context meter counts a draft's pictures before Send, and the
# turn sends them, so each is decoded, oriented and resized once. A few megabytes each at most.
PREPARED_KEPT: Final = 16
EMBED_BATCH: Final = 32


class Embedder(Protocol):
    """Turns text into unit vectors. `model_id` names the model the vectors came from (its SHA-256)."""

    @property
    def model_id(self) -> str: ...

    def embed_passages(self, texts: Sequence[str]) -> npt.NDArray[np.float32]: ...

    def embed_query(self, text: str) -> npt.NDArray[np.float32]: ...

    def count_tokens(self, text: str) -> int: ...


@dataclass(frozen=True)
class Attachment:
    name: str
    sha256: str
    mime_type: str
    size_bytes: int
    kind: str  # app.documents.model.DocumentKind
    pages: int | None
    chars: int


@dataclass(frozen=True)
class IndexProgress:
    collection: str
    done: int
    total: int
    path: str  # the file being indexed, "" when finished


@dataclass(frozen=True)
class RefreshReport:
    collection: str
    indexed: int
    failed: tuple[tuple[str, str], ...]  # (path, why)
    missing: int
    unchanged: int
    cancelled: bool = False


class _Cancelled(Exception):
    """Indexing was cancelled in the middle of a file."""


class DocumentLibrary:
    def __init__(
        self,
        db: Database,
        files: FileStore,
        embedder: Callable[[], Embedder] | None,
    ) -> None:
        """`embedder` is called the first time something must be embedded (it may start a process)."""
        self._db = db
        self.files = files
        self.index = ChunkIndex(db)
        self.collections = CollectionStore(db, self.index, files=files)
        self._embedder_factory = embedder
        self._embedder: Embedder | None = None
        self._embedder_lock = threading.Lock()
        # (what, sha256, sizing) → the pictures: one for an image, the first pages of a PDF.
        self._prepared: OrderedDict[tuple[str, str, ImageSizing], tuple[ImageInput, ...]] = OrderedDict()
        self._prepared_lock = threading.Lock()

    # Attachments ---------------------------------------------------------------------------------------

    def attach(self, path: Path, *, images_refused: str | None = None) -> Attachment:
        """Check, extract and store a file for a message. Raises DocumentError / HearthError with one line
        naming the file; nothing is stored then. The extracted text is kept, so sending never extracts.
        An image (by its first bytes, whatever its name) is decoded in full once, so a corrupt one is
        refused here, and stored as it is: a model is given it prepared (image_input) at each send.
        `images_refused`: why the chat's model cannot see images, raised for an image instead."""
        if is_image_file(path):
            if images_refused is not None:
                raise HearthError(images_refused)
            return self._attach_image(path)
        document = extract(path)
        # Pinned until the message is sent (ConversationStore.begin_turn), so deleting another conversation
        # meanwhile cannot release it.
        stored = self.files.put_file(path, pin=True)
        with self._db.session() as session:
            record_file(session, stored.sha256, stored.size_bytes, document.mime_type)
            if session.get(DocumentTextRow, stored.sha256) is None:
                session.add(_text_row(stored.sha256, document))
        return Attachment(
            path.name,
            stored.sha256,
            document.mime_type,
            stored.size_bytes,
            document.kind.value,
            document.pages,
            document.chars,
        )

    def _attach_image(self, path: Path) -> Attachment:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise HearthError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
        return self.attach_image_bytes(data, path.name)

    def attach_image_bytes(self, data: bytes, name: str, *, images_refused: str | None = None) -> Attachment:
        """An image that is not a file (a pasted screenshot), checked and stored like an attached one."""
        if images_refused is not None:
            raise HearthError(images_refused)
        prepared = prepare_image(data, name)
        stored = self.files.put_bytes(data, name, pin=True)
        with self._db.session() as session:
            record_file(session, stored.sha256, stored.size_bytes, prepared.original.mime_type)
        return Attachment(
            name, stored.sha256, prepared.original.mime_type, stored.size_bytes, IMAGE_KIND, None, 0
        )

    def image_input(self, name: str, sha256: str, sizing: ImageSizing = DEFAULT_SIZING) -> ImageInput:
        """A stored image as a vision model is given it: upright, RGB, as large as `sizing` allows."""

        def prepared() -> tuple[ImageInput]:
            data = self._stored_bytes(sha256, f"The attached image {name or sha256[:12]}")
            # Decoded in full when it was attached (an imported one is checked by the model's side).
            image = prepare_image(data, name or sha256[:12], sizing=sizing, verified=True)
            return (ImageInput(image.mime_type, image.data),)

        [image] = self._kept(("image", sha256, sizing), prepared)
        return image

    def page_inputs(
        self, name: str, sha256: str, sizing: ImageSizing = DEFAULT_SIZING
    ) -> tuple[ImageInput, ...]:
        """A stored PDF's first pages as pictures (app.images.pdf_pages), as large as `sizing` allows."""

        def rendered() -> tuple[ImageInput, ...]:
            return tuple(page_images(self._stored_bytes(sha256, f"The attached {name}"), name, sizing=sizing))

        return self._kept(("pages", sha256, sizing), rendered)

    def _kept(
        self, key: tuple[str, str, ImageSizing], make: Callable[[], tuple[ImageInput, ...]]
    ) -> tuple[ImageInput, ...]:
        with self._prepared_lock:
            if (found := self._prepared.get(key)) is not None:
                self._prepared.move_to_end(key)
                return found
        made = make()
        with self._prepared_lock:
            self._prepared[key] = made
            while len(self._prepared) > PREPARED_KEPT:
                self._prepared.popitem(last=False)
        return made

    def _stored_bytes(self, sha256: str, what: str) -> bytes:
        try:
            return self.files.path(sha256).read_bytes()
        except FileNotFoundError:
            raise HearthError(f"{what} is missing; attach it again.") from None

    def attached_text(self, name: str, sha256: str) -> AttachedText:
        return AttachedText(name, sha256, self._document(sha256, name).text)

    def _document(self, sha256: str, name: str = "") -> ExtractedDocument:
        with self._db.read_session() as session:
            row = session.get(DocumentTextRow, sha256)
            if row is not None:
                return _document_from_row(row)
        # An imported conversation brings the file, not its text: read it once, here.
        try:
            data = self.files.path(sha256).read_bytes()
        except FileNotFoundError:
            raise HearthError(
                f"The attached file {name or sha256[:12]} is missing; attach it again."
            ) from None
        document = extract_bytes(data, name or sha256)
        with self._db.session() as session:
            if session.get(DocumentTextRow, sha256) is None:
                session.add(_text_row(sha256, document))
        return document

    def retrieve(
        self, question: str, attachments: Sequence[AttachedText], limit: int = SEARCH_LIMIT
    ) -> list[Passage]:
        """The passages of these attachments that best answer `question`, indexing them first if needed
        (the first question about a long file pays for embedding it, once)."""
        embedder = self._get_embedder()
        names = {doc.sha256: doc.name for doc in attachments}
        for sha in names:
            if not self.index.has_chunks(sha, embedder.model_id):
                self._index_content(sha, self._document(sha), embedder)
        hits = self.index.search(
            question,
            embedder.embed_query(question),
            scope=set(names),
            embedding_model=embedder.model_id,
            limit=limit,
        )
        return [Passage(names[h.content_sha256], h.content_sha256, h.location, h.text, h.score) for h in hits]

    # Collections -----------------------------------------------------------------------------------------

    def search_collection(self, name: str, question: str, limit: int = SEARCH_LIMIT) -> list[Passage]:
        collection = self.collections.get(name)
        embedder = self._get_embedder()
        hits = self.index.search(
            question,
            embedder.embed_query(question),
            scope=collection.id,
            embedding_model=embedder.model_id,
            limit=limit,
        )
        # Only the hits' files: a collection may hold thousands, and this runs for every question.
        with self._db.read_session() as session:
            rows = session.execute(
                text(
                    "SELECT content_sha256, path FROM collection_files WHERE collection_id = :id "
                    "AND content_sha256 IN (SELECT value FROM json_each(:shas))"
                ),
                {"id": collection.id, "shas": json.dumps(sorted({h.content_sha256 for h in hits}))},
            ).all()
        paths = {str(sha): str(path) for sha, path in rows}
        return [
            Passage(
                paths.get(h.content_sha256, h.content_sha256[:12]),
                h.content_sha256,
                h.location,
                h.text,
                h.score,
                collection=name,
            )
            for h in hits
        ]

    def refresh(
        self,
        name: str,
        progress: Callable[[IndexProgress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> RefreshReport:
        """Index what changed in the collection's folders since the last time. A file that cannot be read is
        recorded as failed with its reason and the rest go on; `cancel` stops before the next file, or
        between embedding batches of a long one (what was indexed stays indexed, the file it stopped in
        stays to do)."""
        plan = self.collections.scan(name)
        todo = plan.to_index
        failed: list[tuple[str, str]] = []
        indexed = 0
        embedder = self._get_embedder() if todo else None
        for number, found in enumerate(todo):
            if cancel is not None and cancel.is_set():
                return RefreshReport(
                    name, indexed, tuple(failed), len(plan.missing), len(plan.unchanged), True
                )
            if progress is not None:
                progress(IndexProgress(name, number, len(todo), found.path))
            assert embedder is not None
            try:
                self._index_file(name, found, embedder, cancel)
                indexed += 1
            except _Cancelled:
                # Mid-file: nothing of it was stored, so it stays pending (or changed) for the next pass.
                return RefreshReport(
                    name, indexed, tuple(failed), len(plan.missing), len(plan.unchanged), True
                )
            except (DocumentError, HearthError, OSError) as exc:
                reason = str(exc) if isinstance(exc, HearthError) else f"{found.path}: {exc.strerror or exc}"
                self.collections.mark_failed(name, found.path, reason)
                failed.append((found.path, reason))
        if embedder is not None:
            # A large collection's graph is brought up to date here, with the indexing, not by the first
            # question after it.
            self.index.prepare(self.collections.get(name).id, embedder.model_id)
        if progress is not None:
            progress(IndexProgress(name, len(todo), len(todo), ""))
        return RefreshReport(name, indexed, tuple(failed), len(plan.missing), len(plan.unchanged))

    def _index_file(
        self, name: str, found: FoundFile, embedder: Embedder, cancel: threading.Event | None
    ) -> None:
        path = Path(found.path)
        digest = sha256_file(path)
        if not self.index.has_chunks(digest, embedder.model_id):
            self._index_content(digest, extract(path), embedder, cancel)
        self.collections.mark_indexed(name, path, digest, found.size_bytes, found.mtime_ns)

    def _index_content(
        self,
        sha256: str,
        document: ExtractedDocument,
        embedder: Embedder,
        cancel: threading.Event | None = None,
    ) -> None:
        """`cancel` is checked between batches (raising _Cancelled, with nothing stored): a long PDF takes
        minutes to embed, and Cancel, or quitting, must not wait for all of it."""
        # The estimate, not the model's tokenizer: chunking measures thousands of spans, each a round trip to
        # the runner, and e5's 512-token window leaves room for the estimate's error at 400.
        chunks = chunk(document)
        vectors: list[npt.NDArray[np.float32]] = []
        for i in range(0, len(chunks), EMBED_BATCH):
            if cancel is not None and cancel.is_set():
                raise _Cancelled
            vectors.append(embedder.embed_passages([c.text for c in chunks[i : i + EMBED_BATCH]]))
        matrix = np.concatenate(vectors) if vectors else np.zeros((0, 1), dtype=np.float32)
        self.index.add_chunks(
            sha256,
            [ChunkInput(c.text, c.location, c.ordinal) for c in chunks],
            matrix,
            embedder.model_id,
        )

    # Shared ----------------------------------------------------------------------------------------------

    def _get_embedder(self) -> Embedder:
        with self._embedder_lock:
            if self._embedder is None:
                if self._embedder_factory is None:
                    raise HearthError(
                        "No embedding model is installed, so documents too long to read whole cannot be "
                        "searched. Reinstall Hearth, or choose an embedding model in the library."
                    )
                self._embedder = self._embedder_factory()
            return self._embedder

    def close(self) -> None:
        self.index.close()
        with self._embedder_lock:
            closer = getattr(self._embedder, "close", None)
            if closer is not None:
                closer()
            self._embedder = None


def release_unreferenced(db: Database, files: FileStore) -> None:
    """Delete the stored files, extracted texts and passages that no message and no collection holds."""
    CollectionStore(db, ChunkIndex(db), files=files).release_unreferenced()


def _text_row(sha256: str, document: ExtractedDocument) -> DocumentTextRow:
    return DocumentTextRow(
        content_sha256=sha256,
        kind=document.kind.value,
        mime_type=document.mime_type,
        title=document.title,
        pages=document.pages,
        chars=document.chars,
        sections_json=json.dumps([[s.text, s.location] for s in document.sections], ensure_ascii=False),
    )


def _document_from_row(row: DocumentTextRow) -> ExtractedDocument:
    from app.documents.model import DocumentKind

    sections = tuple(Section(text, location) for text, location in json.loads(row.sections_json))
    return ExtractedDocument(DocumentKind(row.kind), row.mime_type, sections, row.pages, row.title)
