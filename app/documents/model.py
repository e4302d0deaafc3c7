"""What extraction produces, the limits it works under, and the one error it raises."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from app.errors import HearthError

KB: Final = 1024
MB: Final = 1024 * KB
GB: Final = 1024 * MB


class DocumentError(HearthError):
    """A file that cannot be read as a document; the message is one line naming the file and the reason."""


class DocumentKind(StrEnum):
    PDF = "pdf"
    DOCX = "docx"
    XLSX = "xlsx"
    CSV = "csv"
    PPTX = "pptx"
    HTML = "html"
    MARKDOWN = "markdown"
    TEXT = "text"
    CODE = "code"
    EPUB = "epub"


@dataclass(frozen=True)
class Section:
    """A structural piece of a document (a page, a heading's body, a slide, a block of rows or lines), with
    where a person finds it: "page 3", "Installation > Linux", "sheet Budget, rows 1–40", "lines 120–168"."""

    text: str
    location: str


@dataclass(frozen=True)
class ExtractedDocument:
    """A document's text in reading order. Nothing here depends on where the file lay, so a copy stored
    under another name extracts to an equal value."""

    kind: DocumentKind
    mime_type: str
    sections: tuple[Section, ...]
    pages: int | None
    title: str | None

    @property
    def text(self) -> str:
        return "\n\n".join(section.text for section in self.sections)

    @property
    def chars(self) -> int:
        """len(self.text), without building it."""
        return sum(len(section.text) for section in self.sections) + 2 * max(len(self.sections) - 1, 0)


@dataclass(frozen=True)
class ExtractionLimits:
    """Bounds that keep a hostile or merely huge file from taking the machine's memory or time.

    The zip limits are checked against the sizes a zip declares before anything is unpacked; Python's
    zipfile never inflates a member past its declared size (it fails the CRC instead), so the declared sizes
    are real bounds for every parser that reads through it."""

    max_file_bytes: int = 200 * MB
    # A document that unpacks to gigabytes is either a bomb or far more than anyone can attach.
    max_unpacked_bytes: int = 1 * GB
    max_member_bytes: int = 256 * MB
    # Office XML deflates 5–30×; deflate itself tops out near 1,032×, which only a bomb's filler reaches.
    max_compression_ratio: float = 200.0
    # Below this size a member cannot hurt whatever its ratio (an empty part compresses "infinitely").
    ratio_check_min_bytes: int = 1 * MB
    max_zip_members: int = 20_000
    # libxml2 (under python-docx and python-pptx) refuses deeper trees itself; real documents stay under 50.
    max_xml_depth: int = 256
    # About 12 million tokens, 30,000 pages: more text than any context or sensible collection file holds.
    max_chars: int = 50_000_000


DEFAULT_LIMITS: Final = ExtractionLimits()


def human_size(size: int) -> str:
    """Sizes as a person reads them: "612 MB", "3.0 GB", "20 KB", "512 bytes" (binary units, named as
    file managers name them)."""
    for unit, scale in (("GB", GB), ("MB", MB), ("KB", KB)):
        if size >= scale:
            value = size / scale
            return f"{value:.1f} {unit}" if value < 10 else f"{value:.0f} {unit}"
    return f"{size} bytes"
