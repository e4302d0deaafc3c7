"""HTML (and the XHTML inside EPUBs) through the standard library's tolerant parser: visible text only,
paragraphs kept apart, tables as rows, and sections cut at headings. html.parser expands no entities beyond
HTML's fixed named set and keeps no tree, so hostile markup costs time linear in its size and no more."""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Final

from app.documents.formats.common import SectionCollector, table_row
from app.documents.formats.text import decode_text
from app.documents.model import DocumentKind, ExtractedDocument, ExtractionLimits

HTML_MIME: Final = "text/html"

_SKIPPED: Final = frozenset({"script", "style", "noscript", "template", "svg", "math", "iframe", "object"})
_BLOCKS: Final = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "div", "dl", "dt",
        "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "li", "main", "nav", "ol", "p",
        "pre", "section", "summary", "table", "ul",
    }
)  # fmt: skip
_HEADINGS: Final = {f"h{level}": level for level in range(1, 7)}
# Marks a <br> in collected text until whitespace is collapsed (a private-use character no page uses).
_BREAK: Final = "\ue000"
_AROUND_BREAK_RE: Final = re.compile(" ?\ue000 ?")
_CHARSET_RE: Final = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([A-Za-z0-9_.:-]+)""", re.IGNORECASE)


@dataclass
class HtmlText:
    title: str | None
    # (heading path or "" before the first heading, text) in reading order.
    sections: list[tuple[str, str]] = field(default_factory=list)


class _Extractor(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.result = HtmlText(None)
        self._path: list[tuple[int, str]] = []
        self._paragraphs: list[str] = []
        self._line: list[str] = []
        self._skip = 0
        self._pre = 0
        self._in_title = False
        self._title: list[str] = []
        self._heading: tuple[int, list[str]] | None = None
        # One list of rows per open table, each row a list of cells, each cell a list of text pieces.
        self._tables: list[list[list[list[str]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIPPED:
            self._skip += 1
        elif self._skip:
            return
        elif tag == "title":
            self._in_title = True
        elif tag in _HEADINGS:
            self._end_paragraph()
            self._heading = (_HEADINGS[tag], [])
        elif tag == "table":
            self._end_paragraph()
            self._tables.append([])
        elif tag == "tr" and self._tables:
            self._tables[-1].append([])
        elif tag in ("td", "th") and self._tables and self._tables[-1]:
            self._tables[-1][-1].append([])
        elif tag == "br":
            self._text(_BREAK)
        elif tag in _BLOCKS:
            self._end_paragraph()
            if tag == "pre":
                self._pre += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        # <br/> and <hr/>: a void element opens and closes at once; an XHTML "<p/>" is an empty block.
        if tag not in _SKIPPED:
            self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIPPED:
            self._skip = max(self._skip - 1, 0)
        elif self._skip:
            return
        elif tag == "title":
            self._in_title = False
            self.result.title = " ".join("".join(self._title).split()) or self.result.title
        elif tag in _HEADINGS and self._heading is not None:
            self._end_heading(*self._heading)
        elif tag == "table" and self._tables:
            self._end_table()
        elif tag in _BLOCKS:
            self._end_paragraph()
            if tag == "pre":
                self._pre = max(self._pre - 1, 0)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self._title.append(data)
        else:
            self._text(data)

    def _text(self, data: str) -> None:
        if self._heading is not None:
            self._heading[1].append(data)
        elif self._tables and self._tables[-1] and self._tables[-1][-1]:
            self._tables[-1][-1][-1].append(data)
        elif self._tables:
            return  # text between a table's cells is markup whitespace
        else:
            self._line.append(data)

    def _end_paragraph(self) -> None:
        raw = "".join(self._line)
        self._line.clear()
        if self._pre:
            text = raw.replace(_BREAK, "\n").strip("\n")
        else:
            # Runs of whitespace are one space, as a browser shows them; only <br> breaks a line.
            text = _AROUND_BREAK_RE.sub("\n", " ".join(raw.split()))
        if text.strip():
            self._paragraphs.append(text.strip("\n"))

    def _end_heading(self, level: int, pieces: list[str]) -> None:
        self._heading = None
        text = " ".join("".join(pieces).split())
        if not text:
            return
        self._end_section()
        while self._path and self._path[-1][0] >= level:
            self._path.pop()
        self._path.append((level, text))
        self._paragraphs.append(text)

    def _end_table(self) -> None:
        rows = self._tables.pop()
        lines = [table_row(["".join(cell) for cell in row]) for row in rows if row]
        if not lines:
            return
        if self._tables and self._tables[-1] and self._tables[-1][-1]:
            # A table inside a cell reads as that cell's text.
            self._tables[-1][-1][-1].append(" ".join(lines))
        else:
            self._paragraphs.append("\n".join(lines))

    def _end_section(self) -> None:
        self._end_paragraph()
        if self._paragraphs:
            path = " > ".join(text for _, text in self._path)
            self.result.sections.append((path, "\n\n".join(self._paragraphs)))
            self._paragraphs = []

    def finish(self) -> HtmlText:
        self.close()
        while self._tables:
            self._end_table()
        if self._heading is not None:
            self._end_heading(*self._heading)
        self._end_section()
        return self.result


def decode_html(data: bytes, name: str) -> str:
    """HTML's bytes as text: a BOM wins, then a <meta charset> near the top, then decode_text's guessing."""
    if not data.startswith((codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        declared = _CHARSET_RE.search(data[:4096])
        if declared:
            try:
                codec = codecs.lookup(declared.group(1).decode("ascii")).name
            except LookupError:
                codec = ""
            # A page saying utf-8 may still be cp1252 in fact; decode_text guesses better than a replace.
            if codec and codec != "utf-8" and b"\x00" not in data:
                return data.decode(codec, errors="replace")
    return decode_text(data, name)


def parse_html(text: str) -> HtmlText:
    parser = _Extractor()
    parser.feed(text)
    return parser.finish()


def extract_html(data: bytes, name: str, limits: ExtractionLimits) -> ExtractedDocument:
    """Visible text by heading path ("Installation > Linux"; "beginning" before the first heading)."""
    page = parse_html(decode_html(data, name))
    collector = SectionCollector(name, limits)
    for path, text in page.sections:
        collector.add(text, path or "beginning")
    return ExtractedDocument(DocumentKind.HTML, HTML_MIME, collector.result(), None, page.title)
