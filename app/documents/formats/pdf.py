"""PDF text layers, page by page, through pypdf (BSD-3). pypdf caps every stream it inflates (75 MB by
default), so a compressed bomb inside a PDF stops there; the text itself is capped by the collector."""

from __future__ import annotations

import logging
from typing import BinaryIO, Final

from pypdf import PdfReader
from pypdf.errors import DependencyError, PdfReadError

from app.documents.formats.common import SectionCollector
from app.documents.model import DocumentError, DocumentKind, ExtractedDocument, ExtractionLimits

log = logging.getLogger("hearth.documents")

PDF_MIME: Final = "application/pdf"


def extract_pdf(fh: BinaryIO, name: str, limits: ExtractionLimits) -> ExtractedDocument:
    """One section per page that has text, located as "page 3"; `pages` counts every page. A page that
    pypdf cannot decode is skipped (and logged) as long as some other page yields text."""
    try:
        # Given a file object, pypdf seeks and reads what it needs instead of loading the whole file.
        reader = PdfReader(fh)
    except (PdfReadError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise DocumentError(f"{name} is damaged or truncated and can't be read as a PDF.") from exc
    if reader.is_encrypted:
        _unlock(reader, name)
    try:
        page_count = len(reader.pages)
    except (PdfReadError, ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise DocumentError(f"{name} is damaged: its page tree can't be read.") from exc
    collector = SectionCollector(name, limits)
    failed: list[int] = []
    for number in range(1, page_count + 1):
        try:
            text = reader.pages[number - 1].extract_text()
        except Exception:
            # A hostile or broken page can fail in any way pypdf's code can; it costs that page, not the file.
            log.warning("%s: page %d could not be read", name, number, exc_info=True)
            failed.append(number)
            continue
        collector.add(text, f"page {number}")
    if not collector.sections:
        if page_count == 0:
            raise DocumentError(f"{name} has no pages.")
        if len(failed) == page_count:
            raise DocumentError(f"{name} is damaged: none of its {page_count} pages can be read.")
        raise DocumentError(
            f"{name} has no text layer (a scan or images of pages); reading it would need OCR, "
            "which Hearth doesn't do."
        )
    return ExtractedDocument(DocumentKind.PDF, PDF_MIME, collector.result(), page_count, _title(reader))


def _unlock(reader: PdfReader, name: str) -> None:
    """Many PDFs are encrypted with an empty user password (only printing or copying is restricted); those
    open as any other. One that needs a password to open is refused: Hearth has no way to ask for it."""
    try:
        opened = reader.decrypt("")
    except DependencyError as exc:
        raise DocumentError(f"{name} is encrypted with a cipher Hearth can't open.") from exc
    except (PdfReadError, ValueError, KeyError, TypeError, NotImplementedError) as exc:
        raise DocumentError(f"{name} is encrypted in a way Hearth can't open.") from exc
    if not opened:
        raise DocumentError(f"{name} is password-protected; remove the password and attach it again.")


def _title(reader: PdfReader) -> str | None:
    try:
        metadata = reader.metadata
        title = metadata.title if metadata is not None else None
    except (PdfReadError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return title.strip() or None if isinstance(title, str) else None
