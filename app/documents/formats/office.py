"""Word, Excel and PowerPoint files (the OOXML zips), read only after safezip has vetted the container and
every XML part in it. extract.py imports this module on the first Office file, so the libraries (and lxml
and Pillow beneath them) cost nothing at start-up."""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Iterator
from typing import Any, BinaryIO, Final

import docx
import openpyxl
import pptx
from docx.document import Document as DocxDocument
from docx.styles.style import ParagraphStyle
from docx.table import Table
from docx.text.paragraph import Paragraph
from pptx.shapes.base import BaseShape
from pptx.shapes.graphfrm import GraphicFrame
from pptx.shapes.group import GroupShape

from app.documents.formats.common import SectionCollector, add_row_blocks, table_row
from app.documents.formats.safezip import open_checked_zip, scan_xml_members
from app.documents.model import DocumentKind, ExtractedDocument, ExtractionLimits

# openpyxl warns about each feature it drops on reading (drawings, data validation, print areas); none of
# them is text, and the warnings would only reach the user's terminal as noise.
warnings.filterwarnings("ignore", category=UserWarning, module="openpyxl")

DOCX_MIME: Final = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX_MIME: Final = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX_MIME: Final = "application/vnd.openxmlformats-officedocument.presentationml.presentation"


def vet(fh: BinaryIO, name: str, label: str, limits: ExtractionLimits) -> None:
    """Check the zip and scan its XML before the real parser opens it; leaves `fh` at the start."""
    with open_checked_zip(fh, name, label, limits) as archive:
        scan_xml_members(archive, name, limits)
    fh.seek(0)


def extract_docx(fh: BinaryIO, name: str, limits: ExtractionLimits) -> ExtractedDocument:
    """Paragraphs and tables in document order, cut into sections at each heading and located by heading
    path ("Installation > Linux"); text before the first heading is "beginning". The title is the file's
    own property, or else its first Title paragraph."""
    vet(fh, name, "Word", limits)
    document = docx.Document(fh)
    collector = SectionCollector(name, limits)
    path: list[tuple[int, str]] = []
    body: list[str] = []
    title = document.core_properties.title or None

    def flush() -> None:
        collector.add("\n\n".join(body), " > ".join(text for _, text in path) or "beginning")
        body.clear()

    levels = _heading_levels(document)
    for block in document.iter_inner_content():
        if not isinstance(block, Paragraph):
            body.append(_docx_table(block))
            continue
        text = block.text.strip()
        # The style ID straight from the XML: Paragraph.style searches every style per call, which made a
        # 200-paragraph document take seconds.
        level = levels.get(block._p.style or "")
        if level is None or level == 0 or not text:
            # A Title paragraph names the document; as a path element it would prefix every location.
            if level == 0:
                title = title or text
            if text:
                body.append(text)
            continue
        flush()
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, text))
        body.append(text)
    flush()
    return ExtractedDocument(DocumentKind.DOCX, DOCX_MIME, collector.result(), None, title)


def _heading_levels(document: DocxDocument) -> dict[str, int]:
    """Heading level by paragraph style ID: 0 for Title, 1–9 for "Heading 1"… and for custom styles based
    on them (python-docx reports built-in styles by their English names whatever the document's language)."""
    by_id = {style.style_id: style for style in document.styles if isinstance(style, ParagraphStyle)}
    levels: dict[str, int] = {}
    for style_id, style in by_id.items():
        current: ParagraphStyle | None = style
        # Bounded: a hostile file may chain styles in a loop.
        for _ in range(16):
            if current is None:
                break
            level = _named_level(current.name)
            if level is not None:
                levels[style_id] = level
                break
            current = current.base_style
    return levels


def _named_level(name: str | None) -> int | None:
    if name == "Title":
        return 0
    prefix, _, number = (name or "").partition(" ")
    if prefix == "Heading" and number.isdigit() and 1 <= int(number) <= 9:
        return int(number)
    return None


def _docx_table(table: Table) -> str:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        previous: object = None
        for cell in row.cells:
            # A merged cell is reported once per grid column it spans; its text belongs in the row once.
            if cell._tc is previous:
                continue
            previous = cell._tc
            parts = [p.text for p in cell.paragraphs]
            parts.extend(_docx_table(inner) for inner in cell.tables)
            cells.append(" ".join(part for part in parts if part.strip()))
        rows.append(table_row(cells))
    return "\n".join(rows)


def extract_xlsx(fh: BinaryIO, name: str, limits: ExtractionLimits) -> ExtractedDocument:
    """Each worksheet's cell values (cached results for formulas, as Excel last computed them) in blocks of
    rows located as "sheet Budget, rows 1–40"."""
    vet(fh, name, "Excel", limits)
    workbook = openpyxl.load_workbook(fh, read_only=True, data_only=True)
    try:
        collector = SectionCollector(name, limits)
        # Worksheets only: chartsheets hold no cell values.
        for sheet in workbook.worksheets:
            # The declared dimension may be wrong or hostile (A1:XFD1048576 pads every row to 16,384 cells).
            sheet.reset_dimensions()
            rows = enumerate(sheet.iter_rows(values_only=True), start=1)
            add_row_blocks(collector, _text_rows(rows), f"sheet {sheet.title}, ")
        title = workbook.properties.title or None
    finally:
        workbook.close()
    return ExtractedDocument(DocumentKind.XLSX, XLSX_MIME, collector.result(), None, title)


def _text_rows(rows: Iterator[tuple[int, tuple[Any, ...]]]) -> Iterator[tuple[int, list[str]]]:
    for number, values in rows:
        cells = [_cell_text(value) for value in values]
        while cells and not cells[-1]:
            cells.pop()
        yield number, cells


def _cell_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, dt.datetime):
        return value.date().isoformat() if value.time() == dt.time() else value.isoformat(sep=" ")
    if isinstance(value, dt.date | dt.time):
        return value.isoformat()
    return str(value)


def extract_pptx(fh: BinaryIO, name: str, limits: ExtractionLimits) -> ExtractedDocument:
    """Each slide's text (titles, text boxes, tables, grouped shapes) and its speaker notes, one section per
    slide located as "slide 3"; `pages` is the slide count."""
    vet(fh, name, "PowerPoint", limits)
    presentation = pptx.Presentation(fh)
    collector = SectionCollector(name, limits)
    title = presentation.core_properties.title or None
    count = 0
    for number, slide in enumerate(presentation.slides, start=1):
        count = number
        parts = [text for shape in slide.shapes for text in _shape_texts(shape)]
        if title is None and slide.shapes.title is not None and slide.shapes.title.has_text_frame:
            title = slide.shapes.title.text_frame.text.strip() or None
        if slide.has_notes_slide:
            notes = slide.notes_slide.notes_text_frame
            if notes is not None and notes.text.strip():
                parts.append("Notes: " + notes.text.strip())
        collector.add("\n".join(parts), f"slide {number}")
    return ExtractedDocument(DocumentKind.PPTX, PPTX_MIME, collector.result(), count, title)


def _shape_texts(shape: BaseShape) -> Iterator[str]:
    if isinstance(shape, GroupShape):
        for inner in shape.shapes:
            yield from _shape_texts(inner)
    elif isinstance(shape, GraphicFrame) and shape.has_table:
        yield "\n".join(table_row([cell.text for cell in row.cells]) for row in shape.table.rows)
    elif shape.has_text_frame:
        text: str = shape.text_frame.text.strip()  # type: ignore[attr-defined]
        if text:
            yield text
