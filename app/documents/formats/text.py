"""Plain text, source code, Markdown and CSV: decoding bytes that may be in any common encoding (or not text
at all), and cutting them into located sections."""

from __future__ import annotations

import codecs
import contextlib
import csv
import io
import re
from collections.abc import Iterator
from typing import Final

from app.documents.formats.common import SectionCollector, add_row_blocks, line_span
from app.documents.model import DocumentError, DocumentKind, ExtractedDocument, ExtractionLimits

# Byte-order marks that settle the encoding; UTF-8's is stripped by the utf-8-sig codec.
_BOMS: Final = (
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# A UTF-8 file with this share of broken sequences is still read (a log cut mid-character, a stray byte).
_MAX_INVALID_SHARE: Final = 0.001
# Controls other than tab, newline, carriage return, form feed and escape do not occur in text; random
# bytes decoded as cp1252 are about 11% controls. Terminal logs carry an escape per colour change.
_CONTROL_RE: Final = re.compile(r"[\x00-\x08\x0b\x0e-\x1a\x1c-\x1f\x7f]")
_MAX_CONTROL_SHARE: Final = 0.02
# Western text in cp1252 is mostly ASCII; a file whose high bytes dominate is not cp1252 text.
_MAX_LEGACY_NON_ASCII_SHARE: Final = 0.3
# GB18030 decodes many byte strings; it is taken only when what it yields is mostly Chinese.
_CJK_RE: Final = re.compile(r"[\u3000-\u303f\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef]")
_MIN_GB_CJK_SHARE: Final = 0.6
_NON_ASCII: Final = bytes(range(0x80, 0x100))

# Text and code files become sections of at most this many lines and characters, cut at blank lines where
# they can be: a location such as "lines 120–168" is then precise enough to find the passage.
_BLOCK_LINES: Final = 60
_BLOCK_CHARS: Final = 4000


def _binary(name: str) -> DocumentError:
    return DocumentError(f"{name} looks like a binary file, not text.")


def _plausible(text: str) -> bool:
    return len(_CONTROL_RE.findall(text)) <= _MAX_CONTROL_SHARE * max(len(text), 1)


def _non_ascii_chars(text: str) -> int:
    return len(text) - len(text.encode("ascii", "ignore"))


def decode_text(data: bytes, name: str) -> str:
    """Text from bytes in UTF-8 (with or without a BOM), UTF-16 with a BOM, GB18030/GBK, or cp1252, tried in
    that order; a legacy encoding is taken only when its result reads as text. Newlines become "\\n"."""
    text = _decode(data, name)
    if not _plausible(text):
        raise _binary(name)
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _decode(data: bytes, name: str) -> str:
    for bom, codec in _BOMS:
        if data.startswith(bom):
            text = data.decode(codec, errors="replace")
            if text.count("\ufffd") > _MAX_INVALID_SHARE * len(text) + 1:
                raise _binary(name)
            return text
    if b"\x00" in data:
        raise _binary(name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    lenient = data.decode("utf-8", errors="replace")
    invalid = lenient.count("\ufffd")
    valid_non_ascii = _non_ascii_chars(lenient) - invalid
    # Mostly good UTF-8 with a few broken sequences: a damaged UTF-8 file, not a legacy encoding.
    if valid_non_ascii > invalid and invalid <= _MAX_INVALID_SHARE * len(lenient) + 1:
        return lenient
    for legacy in (_gb18030, _cp1252):
        guess = legacy(data)
        if guess is not None and _plausible(guess):
            return guess
    raise _binary(name)


def _gb18030(data: bytes) -> str | None:
    try:
        text = data.decode("gb18030")
    except UnicodeDecodeError:
        return None
    non_ascii = _non_ascii_chars(text)
    return text if len(_CJK_RE.findall(text)) >= _MIN_GB_CJK_SHARE * non_ascii else None


def _cp1252(data: bytes) -> str | None:
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return None
    high = len(data) - len(data.translate(None, _NON_ASCII))
    return text if high <= _MAX_LEGACY_NON_ASCII_SHARE * len(data) else None


def _blocks(lines: list[str]) -> Iterator[tuple[int, int]]:
    """(first, end) line ranges of at most _BLOCK_LINES lines and about _BLOCK_CHARS characters, ending at
    a blank line when one falls in the block's second half; blank lines at a block's edges are left out."""
    start = 0
    total = len(lines)
    while start < total:
        while start < total and not lines[start].strip():
            start += 1
        if start == total:
            return
        end = start
        chars = 0
        last_blank = -1
        while end < total and end - start < _BLOCK_LINES and (chars < _BLOCK_CHARS or end == start):
            chars += len(lines[end]) + 1
            if not lines[end].strip():
                last_blank = end
            end += 1
        if end < total and last_blank > start + (end - start) // 2:
            end = last_blank
        stop = end
        while stop > start and not lines[stop - 1].strip():
            stop -= 1
        yield start, stop
        start = end


def extract_lines(
    data: bytes, name: str, kind: DocumentKind, mime: str, limits: ExtractionLimits
) -> ExtractedDocument:
    """Plain text or source code, in blocks of lines located by line number."""
    text = decode_text(data, name)
    lines = text.split("\n")
    collector = SectionCollector(name, limits)
    for first, stop in _blocks(lines):
        collector.add("\n".join(lines[first:stop]), line_span(first + 1, stop))
    return ExtractedDocument(kind, mime, collector.result(), None, None)


_FENCE_RE: Final = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_ATX_RE: Final = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_SETEXT_RE: Final = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FRONT_MATTER_TITLE_RE: Final = re.compile(r"^title:\s*['\"]?(.*?)['\"]?\s*$", re.MULTILINE)


def extract_markdown(data: bytes, name: str, limits: ExtractionLimits) -> ExtractedDocument:
    """Markdown cut at its headings (ATX "# Title" and setext underlines, not inside code fences), each
    section located by its heading path, "Installation > Linux"."""
    lines = decode_text(data, name).split("\n")
    collector = SectionCollector(name, limits)
    title: str | None = None
    start = _front_matter_end(lines)
    if start:
        match = _FRONT_MATTER_TITLE_RE.search("\n".join(lines[1 : start - 1]))
        title = match.group(1) if match and match.group(1) else None
    path: list[tuple[int, str]] = []
    body: list[str] = []
    fence: str | None = None

    def flush() -> None:
        collector.add("\n".join(body), " > ".join(text for _, text in path) or "beginning")
        body.clear()

    for line in lines[start:]:
        fence_match = _FENCE_RE.match(line)
        if fence is not None:
            if fence_match and fence_match.group(1).startswith(fence):
                fence = None
            body.append(line)
            continue
        if fence_match:
            fence = fence_match.group(1)
            body.append(line)
            continue
        level, heading = _heading(line, body)
        if level == 0:
            body.append(line)
            continue
        if _SETEXT_RE.match(line):
            underlined = body.pop()
            flush()
            body.extend((underlined, line))
        else:
            flush()
            body.append(line)
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, heading))
        if level == 1 and title is None:
            title = heading
    flush()
    return ExtractedDocument(DocumentKind.MARKDOWN, "text/markdown", collector.result(), None, title)


def _front_matter_end(lines: list[str]) -> int:
    """The line after a YAML front matter block ("---" … "---" at the very top), or 0 when there is none;
    its closing "---" would otherwise read as a setext heading."""
    if not lines or lines[0].strip() != "---":
        return 0
    for index in range(1, min(len(lines), 200)):
        if lines[index].strip() in ("---", "..."):
            return index + 1
    return 0


def _heading(line: str, body: list[str]) -> tuple[int, str]:
    """(level, text) when the line makes a heading, (0, "") when it does not."""
    atx = _ATX_RE.match(line)
    if atx:
        text = (atx.group(2) or "").strip()
        return (len(atx.group(1)), text) if text else (0, "")
    setext = _SETEXT_RE.match(line)
    # An underline makes a heading of the single line above it; after a blank line "---" is a rule.
    if (
        setext
        and body
        and body[-1].strip()
        and (len(body) == 1 or not body[-2].strip() or _ATX_RE.match(body[-2]))
    ):
        above = body[-1].strip()
        if not _ATX_RE.match(above) and not above.startswith(("-", "*", "+", ">", "|")):
            return (1 if setext.group(1).startswith("=") else 2), above
    return 0, ""


def extract_csv(data: bytes, name: str, limits: ExtractionLimits, *, tabs: bool) -> ExtractedDocument:
    """Comma-, semicolon-, tab- or bar-separated rows (the dialect sniffed from the start of the file), in
    blocks of rows that each repeat the header."""
    text = decode_text(data, name)
    dialect: type[csv.Dialect] = csv.excel_tab if tabs else csv.excel
    if not tabs:
        with contextlib.suppress(csv.Error):
            dialect = csv.Sniffer().sniff(text[:16_384], delimiters=",;\t|")
    collector = SectionCollector(name, limits)
    reader = csv.reader(io.StringIO(text, newline=""), dialect)
    try:
        add_row_blocks(collector, enumerate(reader, start=1), "")
    except csv.Error as exc:
        raise DocumentError(f"{name} isn't valid CSV (record {reader.line_num}: {exc}).") from exc
    return ExtractedDocument(DocumentKind.CSV, "text/csv", collector.result(), None, None)
