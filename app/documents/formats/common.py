"""Pieces every format reader shares: a section collector that enforces the text limit, and bounded reads."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import BinaryIO, Final

from app.documents.model import DocumentError, ExtractionLimits, Section, human_size


class SectionCollector:
    """Gathers sections in reading order and stops the extraction as soon as the text passes the limit, so
    a file that expands into more text than Hearth keeps never has all of it in memory."""

    def __init__(self, name: str, limits: ExtractionLimits) -> None:
        self._name = name
        self._limit = limits.max_chars
        self._chars = 0
        self.sections: list[Section] = []

    def add(self, text: str, location: str) -> None:
        # Only blank lines go from the start: a block of code keeps its first line's indentation.
        text = text.rstrip().lstrip("\r\n")
        if not text:
            return
        self._chars += len(text)
        if self._chars > self._limit:
            raise DocumentError(
                f"{self._name} holds more than {self._limit:,} characters of text, the limit."
            )
        self.sections.append(Section(text, location))

    def result(self) -> tuple[Section, ...]:
        return tuple(self.sections)


def read_capped(fh: BinaryIO, name: str, limits: ExtractionLimits) -> bytes:
    """The whole file, refusing one that turns out longer than the limit while being read (a file that grew
    after it was measured, or a stream with no size): the read itself stops one byte past the limit."""
    data = fh.read(limits.max_file_bytes + 1)
    if len(data) > limits.max_file_bytes:
        raise DocumentError(f"{name} is over {human_size(limits.max_file_bytes)}, the limit.")
    return data


# Forty rows make a block that reads as one passage yet stays near a chunk's size for typical sheets.
ROWS_PER_BLOCK: Final = 40


def table_row(cells: Sequence[str]) -> str:
    """One table row as Markdown writes it, which models read well and people recognise."""
    return "| " + " | ".join(" ".join(cell.split()).replace("|", "\\|") for cell in cells) + " |"


def add_row_blocks(
    collector: SectionCollector, rows: Iterable[tuple[int, Sequence[str]]], where: str
) -> None:
    """Rows (numbered as the file numbers them) in blocks, located as f"{where}rows 1–40". The first non-empty
    row opens every later block too: a passage of figures means little without its column names."""
    header: str | None = None
    block: list[str] = []
    first = last = 0
    for number, cells in rows:
        if not any(cell.strip() for cell in cells):
            continue
        line = table_row(cells)
        if not block:
            first = number
            if header is not None:
                block.append(header)
        if header is None:
            header = line
        block.append(line)
        last = number
        if len(block) >= ROWS_PER_BLOCK:
            collector.add("\n".join(block), f"{where}{_span('rows', first, last)}")
            block = []
    if block:
        collector.add("\n".join(block), f"{where}{_span('rows', first, last)}")


def _span(noun: str, first: int, last: int) -> str:
    return f"{noun[:-1]} {first}" if first == last else f"{noun} {first}–{last}"


def line_span(first: int, last: int) -> str:
    """ "line 7" or "lines 7–60", 1-based and inclusive."""
    return _span("lines", first, last)
