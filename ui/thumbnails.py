"""Thumbnails of attached images for the transcript, made off the GUI thread.

A photo can be 100 megapixels: decoding it where the transcript paints would freeze the window, so a chip
paints a placeholder until its thumbnail has been made on the documents worker (app.images.prepare, which
refuses decompression bombs from the header and decodes JPEGs at a reduced scale), then `ready` asks for a
repaint. Made once per picture and kept, within a byte budget, least recently used first out.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial
from pathlib import Path
from typing import Final

from PySide6.QtCore import QObject, Signal
from PySide6.QtGui import QImage

from app.attachments.files import FileStore
from app.images.prepare import ImageSizing, prepare_image
from app.qt.background import Background

# The long side a thumbnail is made at, in device pixels: the chip's box on a 2× screen.
THUMBNAIL_SIDE: Final = 256
CACHE_BYTES: Final = 64 << 20


def thumbnail_bytes(path: Path, side: int = THUMBNAIL_SIDE) -> bytes:
    """The stored image at `path`, upright and at most `side` pixels on its long side, as PNG or JPEG."""
    return prepare_image(path.read_bytes(), path.name, sizing=ImageSizing(side)).data


class Thumbnails(QObject):
    # str: the sha256 of the stored image whose thumbnail is now available (or failed: a placeholder stays).
    ready = Signal(str)

    def __init__(self, files: FileStore, worker: Background, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._files = files
        self._worker = worker
        self._images: OrderedDict[str, QImage] = OrderedDict()
        self._bytes = 0
        self._asked: set[str] = set()

    def image(self, sha256: str) -> QImage | None:
        """The thumbnail if it is made; otherwise None, and it is made (once) on the worker."""
        found = self._images.get(sha256)
        if found is not None:
            self._images.move_to_end(sha256)
            return found
        if sha256 not in self._asked:
            self._asked.add(sha256)
            self._worker.call(
                partial(thumbnail_bytes, self._files.path(sha256)),
                partial(self._made, sha256),
                partial(self._failed, sha256),
                operation="making a thumbnail",
            )
        return None

    def _failed(self, sha256: str, _error: Exception) -> None:
        # Asked once: a file that cannot be read keeps its placeholder.
        self.ready.emit(sha256)

    def _made(self, sha256: str, data: bytes) -> None:
        image = QImage.fromData(data)
        if image.isNull():
            return
        self._images[sha256] = image
        self._bytes += image.sizeInBytes()
        while self._bytes > CACHE_BYTES and len(self._images) > 1:
            sha, oldest = self._images.popitem(last=False)
            self._bytes -= oldest.sizeInBytes()
            # Made again if it is painted again.
            self._asked.discard(sha)
        self.ready.emit(sha256)
