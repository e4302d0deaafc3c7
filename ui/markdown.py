"""Markdown for the transcript: split a reply into blocks, render each block once, safely.

A streaming reply is a list of *settled* blocks, each rendered once into its own document, plus a
live *tail* (the block still being written) re-rendered on each flush. A block settles when a new
paragraph starts after a blank line outside a code fence, or when its code fence closes. Waiting
for the next line (rather than settling at the blank line itself) keeps a list whose items are
separated by blank lines, and an item's indented continuation, in one block, so a streamed reply
renders exactly like the same text loaded from the database.

Rendering goes through `SafeTextDocument` (no resources, no raw HTML, escaped tooltips); on top of
that, code blocks get a header strip (language and a Copy button, painted by the transcript), syntax
colours once their fence has closed, and inline code, links and tables get the theme's colours.

A settled table or code block too big to lay out in one go is cut into pieces (`split_block`), each
its own small document, painted joined: one table whose columns line up, one code block with one Copy
button for all of it and colours from one pass of the lexer over the whole.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from PySide6.QtCore import QRectF
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QFontMetricsF,
    QTextBlock,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextFrame,
    QTextFrameFormat,
    QTextLength,
    QTextOption,
    QTextTable,
)

from ui.highlight import highlight_spans, language_of
from ui.safe_browser import SafeTextDocument
from ui.theme import Theme

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_LIST_ITEM = re.compile(r"^ {0,3}(?:[-+*]|\d{1,9}[.)])(?:[ \t]|$)")
# A block that grows past this settles at its next blank line even inside a list, so one endless
# list cannot turn every flush into a re-render of the whole list.
SETTLE_SOFT_LIMIT = 4_000
# Room above a code block for the strip with its language and Copy button.
CODE_HEADER_PX = 26
CODE_PAD_PX = 10
TABLE_CELL_PADDING = 5
TABLE_BORDER = 1


def _fence_closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    if len(line) - len(line.lstrip(" ")) > 3 or not stripped:
        return False
    return set(stripped) == {fence[0]} and len(stripped) >= len(fence)


def _closing_fence(text: str, start: int, fence: str, *, whole: bool) -> int:
    """Where the first line from `start` (a line start) that closes `fence` starts, or -1. Found by
    looking for three fence characters, not line by line: a 50,000-line code block is then a few string
    searches, not 50,000 Python steps. Unless `whole`, a last line without its newline does not count
    (more text may follow)."""
    run = fence[0] * 3
    position = start
    while True:
        found = text.find(run, position)
        if found < 0:
            return -1
        line_start = text.rfind("\n", start, found) + 1 or start
        line_end = text.find("\n", found)
        if line_end < 0:
            if not whole:
                return -1
            line_end = len(text)
        if _fence_closes(text[line_start:line_end], fence):
            return line_start
        position = line_end + 1


class BlockSplitter:
    """Cuts growing Markdown text into settled blocks, looking at each new line once.

    `feed` returns the blocks that settled because of the new text; `pending` is the unsettled tail.
    Feeding a text in any number of pieces settles the same blocks as feeding it whole.
    """

    def __init__(self) -> None:
        self.pending = ""
        # Where the next unexamined line starts in `pending`.
        self._scan = 0
        self._fence: str | None = None
        self._blank_before = False
        self._in_list = False
        self._has_content = False
        self.settled_count = 0

    @property
    def in_fence(self) -> bool:
        return self._fence is not None

    def feed(self, text: str) -> list[str]:
        pending = self.pending + text
        settled: list[str] = []
        # Blocks are sliced out of `pending` as they settle and the rest is cut off once at the end, so
        # a large piece of text costs one pass, not one copy of the remainder per block.
        block_start = 0
        while True:
            if self._fence is not None and not self._skip_to_closing_fence(pending):
                break
            end = pending.find("\n", self._scan)
            if end < 0:
                break
            start, self._scan = self._scan, end + 1
            cut = self._line(pending[start:end], start - block_start, end + 1)
            if cut is not None:
                block = pending[block_start:cut]
                block_start = cut
                if block.strip():
                    settled.append(block)
                    self.settled_count += 1
        self.pending = pending[block_start:]
        self._scan -= block_start
        return settled

    def _skip_to_closing_fence(self, pending: str) -> bool:
        """Inside a fence only a closing fence matters: move on to the next line that closes it. False
        when no complete line does yet."""
        assert self._fence is not None
        closing = _closing_fence(pending, self._scan, self._fence, whole=False)
        if closing < 0:
            # The next feed looks at the last, incomplete line again.
            self._scan = pending.rfind("\n", self._scan) + 1 or self._scan
            return False
        self._scan = closing
        return True

    def finish(self) -> list[str]:
        """Everything still pending, as the last block; the splitter is then empty."""
        block, self.pending = self.pending, ""
        self._scan = 0
        self._fence = None
        self._blank_before = self._in_list = self._has_content = False
        if not block.strip():
            return []
        self.settled_count += 1
        return [block]

    def _line(self, line: str, offset: int, after: int) -> int | None:
        """Where to cut `pending` because of this line, if anywhere. `offset` is the line's distance
        from the start of the block; `after` is where the next line starts."""
        if self._fence is not None:
            if _fence_closes(line, self._fence):
                self._fence = None
                self._reset()
                return after
            return None
        if not line.strip():
            self._blank_before = self._has_content
            return None
        cut: int | None = None
        if self._blank_before:
            indented = line.startswith(("    ", "\t"))
            continues_list = self._in_list and (indented or bool(_LIST_ITEM.match(line)))
            # An indented line never starts a block: on its own it would render as indented code.
            if not continues_list or (offset > SETTLE_SOFT_LIMIT and not indented):
                cut = after - len(line) - 1
                self._reset()
        self._blank_before = False
        self._has_content = True
        if _LIST_ITEM.match(line):
            self._in_list = True
        opened = _FENCE_OPEN.match(line)
        if opened and not (opened.group(1)[0] == "`" and "`" in opened.group(2)):
            self._fence = opened.group(1)
        return cut

    def _reset(self) -> None:
        self._blank_before = self._in_list = self._has_content = False


def split_markdown(text: str) -> list[str]:
    splitter = BlockSplitter()
    return splitter.feed(text) + splitter.finish()


# -- blocks too big for one document ----------------------------------------------------------------
#
# Qt lays a document out in one go, a table above all (about 0.4 ms per six-column row here, 20 µs per
# line of code), so a 2,000-row table or a 50,000-line code block in one document froze the window for
# seconds when it was shown and again at every resize. Such a block is cut into pieces, each its own small
# document, that the transcript renders and lays out a few at a time and paints joined into one table or
# one code block.

# Cells per piece of a split table, and the size from which a table is split at all: smaller tables stay
# one document, their columns sized by Qt.
TABLE_PIECE_CELLS = 36
TABLE_SPLIT_CELLS = 120
# Rows looked at for the columns' widths, and cells per column measured: the longest in characters.
TABLE_WIDTH_SAMPLE = 250
TABLE_WIDTH_CANDIDATES = 32
# Lines and characters per piece of a split code block; a block up to twice that stays one document.
CODE_PIECE_LINES = 120
CODE_PIECE_CHARS = 6_000

_DELIMITER_CELL = re.compile(r"^\s*:?-+:?\s*$")
_CELL_SEPARATOR = re.compile(r"(?<!\\)\|")
_CELL_MARKUP = re.compile(r"\]\([^)]*\)|[*_`~\\[\]]")


class TableShape:
    """What the pieces of one table share: the rows above its body, and the natural width of each column
    (its widest cell), which every piece sizes its columns from, so they line up."""

    def __init__(self, head: str, candidates: list[list[str]]) -> None:
        self.head = head
        # Per column, the cells longest in characters: the widest on screen is among them.
        self._candidates = candidates
        self._widths: tuple[QFont, tuple[float, ...]] | None = None

    def widths(self, font: QFont) -> tuple[float, ...]:
        if self._widths is None or self._widths[0] != font:
            bold = QFont(font)
            bold.setBold(True)
            metrics = QFontMetricsF(bold)
            self._widths = (
                font,
                tuple(
                    max(metrics.horizontalAdvance(cell) for cell in cells)
                    + 2 * TABLE_CELL_PADDING
                    + TABLE_BORDER
                    + 1
                    for cells in self._candidates
                ),
            )
        return self._widths[1]


class CodeText:
    """The whole text of a split code block: what its Copy button copies, and what it is coloured as (one
    lexer pass over the whole, so a string or comment running across pieces keeps its colour)."""

    def __init__(self, language: str, text: str) -> None:
        self.language = language
        self.text = text
        self._spans: list[tuple[int, int, str]] | None = None

    def spans(self) -> list[tuple[int, int, str]]:
        if self._spans is None:
            self._spans = highlight_spans(self.text, self.language)
        return self._spans


@dataclass(frozen=True)
class Piece:
    """One document's worth of a block too big for one: table rows (as Markdown, under the table's head)
    or code (`code.text[offset:offset + len(source)]`, as plain text)."""

    source: str
    joined: bool
    last: bool
    table: TableShape | None = None
    code: CodeText | None = None
    offset: int = 0


def _cells(line: str) -> list[str]:
    inner = line.strip()
    if inner.startswith("|"):
        inner = inner[1:]
    if inner.endswith("|") and not inner.endswith("\\|"):
        inner = inner[:-1]
    return _CELL_SEPARATOR.split(inner)


def _table_pieces(block: str) -> Iterator[Piece] | None:
    block = block.lstrip("\n")
    if block.lstrip(" ")[:1] != "|":
        return None
    lines = block.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    # Only a block that is one table and nothing else, every line a row that starts with a pipe.
    if len(lines) < 3 or any(
        line.startswith(("    ", "\t")) or line.lstrip(" ")[:1] != "|" for line in lines
    ):
        return None
    header, delimiter = _cells(lines[0]), _cells(lines[1])
    if len(header) != len(delimiter) or not all(_DELIMITER_CELL.match(cell) for cell in delimiter):
        return None
    if len(header) * (len(lines) - 2) <= TABLE_SPLIT_CELLS:
        return None
    return _cut_table(lines, len(header))


def _cut_table(lines: list[str], columns: int) -> Iterator[Piece]:
    rows = lines[2:]
    # Each column's longest cells in characters, from a plain split (an escaped pipe only misleads this
    # guess) of rows spread over the table; they lose their markup and are measured on screen
    # (`TableShape.widths`). A cell wider than any of them wraps.
    sample = rows[:: max(1, len(rows) // TABLE_WIDTH_SAMPLE)]
    cells = [row.strip().strip("|").split("|")[:columns] for row in lines[:1] + sample]
    longest = [0] * columns
    for row in cells:
        for index, length in enumerate(map(len, row)):
            longest[index] = max(longest[index], length)
    candidates: list[list[str]] = [[] for _ in range(columns)]
    for row in cells:
        for index, cell in enumerate(row):
            if len(cell) >= 0.75 * longest[index] and len(candidates[index]) < TABLE_WIDTH_CANDIDATES:
                candidates[index].append(_CELL_MARKUP.sub("", cell).strip())
    shape = TableShape(f"{lines[0]}\n{lines[1]}\n", candidates)
    per_piece = max(1, TABLE_PIECE_CELLS // columns)
    for start in range(0, len(rows), per_piece):
        source = shape.head + "\n".join(rows[start : start + per_piece]) + "\n"
        yield Piece(source, joined=start > 0, last=start + per_piece >= len(rows), table=shape)


def _code_pieces(block: str) -> Iterator[str | Piece] | None:
    if "\r" in block:
        block = block.replace("\r\n", "\n").replace("\r", "\n")
    # A fenced block, maybe right under a paragraph or heading of its own (a fence interrupts those, so
    # they render the same apart); nothing that could hold the fence inside it, like a list or a quote.
    line_start = 0
    while True:
        line_end = block.find("\n", line_start)
        if line_end < 0:
            return None
        line = block[line_start:line_end]
        opened = _FENCE_OPEN.match(line)
        if opened is not None:
            break
        # (A blank line here can only come first: the splitter starts a new block after one.)
        if line.strip() and (
            line.startswith(("    ", "\t")) or line.lstrip(" ").startswith(">") or _LIST_ITEM.match(line)
        ):
            return None
        line_start = line_end + 1
    fence = opened.group(1)
    if fence[0] == "`" and "`" in opened.group(2):
        return None
    start = line_end + 1
    end = len(block) - 1 if block.endswith("\n") else len(block)
    closing = _closing_fence(block, start, fence, whole=True)
    if closing >= 0:
        if block.find("\n", closing, end) >= 0:
            return None
        end = max(start, closing - 1)
    if block.count("\n", start, end) <= 2 * CODE_PIECE_LINES and end - start <= 2 * CODE_PIECE_CHARS:
        return None
    text = block[start:end]
    indent = len(line) - len(line.lstrip(" "))
    if indent:
        # The content as CommonMark defines it: the fence's own indentation comes off every line.
        text = re.sub(f"(?m)^ {{1,{indent}}}", "", text)
    code = CodeText(language_of(opened.group(2)), text)
    return _cut_code(block[:line_start], code)


def _cut_code(above: str, code: CodeText) -> Iterator[str | Piece]:
    if above.strip():
        yield above
    text = code.text
    start = 0
    while True:
        end = start
        for _ in range(CODE_PIECE_LINES):
            found = text.find("\n", end, start + CODE_PIECE_CHARS)
            if found < 0:
                if end == start or start + CODE_PIECE_CHARS >= len(text):
                    # The rest fits; or one line is longer than a piece, and shows wrapped where it is cut.
                    end = min(len(text), start + CODE_PIECE_CHARS)
                break
            end = found + 1
        # A piece ending at a line break shows that break by being the last line of its document (the
        # last piece keeps it: it ends the code with an empty line).
        source = text[start : end - 1] if text[end - 1 : end] == "\n" and end < len(text) else text[start:end]
        yield Piece(source, joined=start > 0, last=end >= len(text), code=code, offset=start)
        if end >= len(text):
            return
        start = end


def split_block(block: str) -> Iterator[str | Piece]:
    """A settled block as documents to render: itself, or if it is a table or code block too big for one
    document, its pieces (and the line or two above a code block, on their own). The pieces are cut as
    they are taken, so a huge block costs little before its first piece."""
    if len(block) >= 2 * TABLE_SPLIT_CELLS:
        pieces = _table_pieces(block) or _code_pieces(block)
        if pieces is not None:
            return pieces
    return iter((block,))


# -- LaTeX stays as the model wrote it -------------------------------------------------------------

_MATH = re.compile(
    r"\$\$[\s\S]+?\$\$"
    r"|\\\[[\s\S]+?\\\]"
    r"|\\\([\s\S]+?\\\)"
    r"|(?<![\\$\w])\$(?=[^\s$])[^$\n]*?(?<=[^\s\\])\$(?!\d)"
)
_CODE_SPAN = re.compile(r"(`+)[\s\S]*?(?<!`)\1(?!`)")
_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _escape_markdown(text: str) -> str:
    return "".join("\\" + ch if ch in _PUNCTUATION else ch for ch in text)


def _protect_prose(text: str) -> str:
    pieces: list[str] = []
    last = 0
    for code in _CODE_SPAN.finditer(text):
        pieces.append(_MATH.sub(lambda m: _escape_markdown(m.group(0)), text[last : code.start()]))
        pieces.append(code.group(0))
        last = code.end()
    pieces.append(_MATH.sub(lambda m: _escape_markdown(m.group(0)), text[last:]))
    return "".join(pieces)


def protect_math(markdown: str) -> str:
    """Escape Markdown syntax inside $…$, $$…$$, \\(…\\) and \\[…\\] so the LaTeX shows as written
    (otherwise `\\(` loses its backslash and `a_1 b_1` can turn into emphasis).

    Code (fenced, indented or inline) is left alone.
    """
    if "$" not in markdown and "\\(" not in markdown and "\\[" not in markdown:
        return markdown
    out: list[str] = []
    prose: list[str] = []
    fence: str | None = None

    def flush_prose() -> None:
        if prose:
            out.append(_protect_prose("".join(prose)))
            prose.clear()

    for line in markdown.splitlines(keepends=True):
        if fence is not None:
            out.append(line)
            if _fence_closes(line.rstrip("\r\n"), fence):
                fence = None
            continue
        opened = _FENCE_OPEN.match(line.rstrip("\r\n"))
        if opened or line.startswith(("    ", "\t")):
            flush_prose()
            out.append(line)
            if opened:
                fence = opened.group(1)
            continue
        prose.append(line)
    flush_prose()
    return "".join(out)


# -- rendering ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RenderStyle:
    theme: Theme
    font: QFont
    code_font: QFont


@dataclass
class CodeBlock:
    first_block: int
    last_block: int
    language: str
    text: str
    # Pieces of one code block too long for one document (see `split_block`): a `continued` piece has no
    # header strip (the first piece's Copy button copies the whole code, which is its `text`), an
    # `open_end` piece no padding below, so the pieces join into one block.
    continued: bool = False
    open_end: bool = False

    @property
    def header(self) -> int:
        return 0 if self.continued else CODE_HEADER_PX

    @property
    def padding(self) -> int:
        return 0 if self.open_end else CODE_PAD_PX


class Segment:
    """One rendered block of a message: its document, laid out at `width`.

    A piece of a split block (see `split_block`) makes its document only when it is first needed (laid
    out, painted or read): a 2,000-row table is a few hundred pieces, and those in view come first.
    """

    def __init__(
        self,
        source: str,
        document: SafeTextDocument | Callable[[], SafeTextDocument],
        code_blocks: list[CodeBlock] | None = None,
        *,
        joined: bool = False,
        overlap: float = 0.0,
        columns: tuple[float, ...] = (),
    ) -> None:
        self.source = source
        self._document = document if isinstance(document, SafeTextDocument) else None
        self._make = None if isinstance(document, SafeTextDocument) else document
        self._lazy = self._make is not None
        self.code_blocks = code_blocks if code_blocks is not None else []
        self.width = -1.0
        self.height = 0.0
        # A piece of a split table or code block after the first: it sits right under the piece before
        # it, reaching `overlap` up over it (the pieces of a table share the border between them).
        self.joined = joined
        self.overlap = overlap
        # A piece of a split table: the natural width of each column, which its columns are sized from,
        # and whether they fit (the table at its natural width) or share the width by their proportions.
        self.columns = columns
        self._fits: bool | None = None

    @property
    def document(self) -> SafeTextDocument:
        if self._document is None:
            assert self._make is not None
            self._document, self._make = self._make(), None
        return self._document

    @property
    def lazy(self) -> bool:
        """A piece of a split block, its document made when first needed."""
        return self._lazy

    @property
    def rendered(self) -> bool:
        return self._document is not None

    def layout(self, width: float) -> float:
        if width != self.width:
            self.width = width
            # Only when the table starts or stops fitting: a new table format lays the document out again.
            fits = sum(self.columns) <= width
            if self.columns and fits != self._fits:
                self._fits = fits
                _size_columns(self.document, self.columns, fits=fits)
            self.document.setTextWidth(width)
        self.height = self.document.size().height()
        if self._lazy:
            # Whole pixels: pieces laid out in the background above the view then shift it by whole
            # pixels, which the scroll position takes up exactly, and nothing in view has to be repainted.
            self.height = math.ceil(self.height)
        return self.height

    def code_rect(self, code: CodeBlock) -> QRectF:
        """The code block's area including its header strip, in document coordinates."""
        layout = self.document.documentLayout()
        first = layout.blockBoundingRect(self.document.findBlockByNumber(code.first_block))
        last = layout.blockBoundingRect(self.document.findBlockByNumber(code.last_block))
        top = first.top() - code.header
        bottom = last.bottom() + code.padding / 2 if code.padding else max(last.bottom(), self.height)
        return QRectF(0.0, top, self.width, bottom - top)

    def plain_text(self) -> str:
        return self.document.toPlainText()


def _new_document(style: RenderStyle) -> SafeTextDocument:
    document = SafeTextDocument()
    document.setDocumentMargin(0)
    document.setDefaultFont(style.font)
    option = QTextOption()
    option.setWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
    document.setDefaultTextOption(option)
    document.setUndoRedoEnabled(False)
    return document


def _is_code(block: QTextBlock) -> bool:
    return block.blockFormat().hasProperty(QTextFormat.Property.BlockCodeLanguage)


def _code_blocks(document: SafeTextDocument) -> list[CodeBlock]:
    found: list[CodeBlock] = []
    block = document.begin()
    while block.isValid():
        if not _is_code(block):
            block = block.next()
            continue
        language = str(block.blockFormat().property(QTextFormat.Property.BlockCodeLanguage) or "")
        first = block.blockNumber()
        lines = []
        while block.isValid() and _is_code(block):
            lines.append(block.text())
            last = block.blockNumber()
            block = block.next()
        found.append(CodeBlock(first, last, language_of(language), "\n".join(lines)))
    return found


def _style_code_blocks(document: SafeTextDocument, codes: list[CodeBlock], style: RenderStyle) -> None:
    if not codes:
        return
    # Qt drops the top margin of a frame's first block and the bottom margin of its last, so a code
    # block at either end of the document gets its header room and padding from the frame instead.
    frame = document.rootFrame().frameFormat()
    if codes[0].first_block == 0:
        frame.setTopMargin(codes[0].header)
    if codes[-1].last_block == document.blockCount() - 1:
        frame.setBottomMargin(codes[-1].padding)
    document.rootFrame().setFrameFormat(frame)
    cursor = QTextCursor(document)
    lines = QTextBlockFormat()
    # Qt lays fenced code out as non-breaking lines; a painted view has no sideways scroll.
    lines.setNonBreakableLines(False)
    lines.setLeftMargin(CODE_PAD_PX)
    lines.setRightMargin(CODE_PAD_PX)
    lines.setTopMargin(0)
    lines.setBottomMargin(0)
    chars = QTextCharFormat()
    chars.setFont(style.code_font)
    for code in codes:
        # One merge over the whole block: Qt applies it to every line in C++ (per line from Python, a
        # 50,000-line block took seconds).
        first = document.findBlockByNumber(code.first_block)
        last = document.findBlockByNumber(code.last_block)
        cursor.setPosition(first.position())
        cursor.setPosition(last.position() + last.length() - 1, QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeBlockFormat(lines)
        cursor.mergeCharFormat(chars)
        top = QTextBlockFormat()
        top.setTopMargin(code.header)
        QTextCursor(first).mergeBlockFormat(top)
        bottom = QTextBlockFormat()
        bottom.setBottomMargin(code.padding)
        QTextCursor(last).mergeBlockFormat(bottom)


def _highlight(document: SafeTextDocument, codes: list[CodeBlock], theme: Theme) -> None:
    for code in codes:
        base = document.findBlockByNumber(code.first_block).position()
        _colour(document, base, highlight_spans(code.text, code.language), theme)


def _colour(
    document: SafeTextDocument, base: int, spans: Sequence[tuple[int, int, str]], theme: Theme
) -> None:
    cursor = QTextCursor(document)
    for start, length, colour in spans:
        fmt = QTextCharFormat()
        fmt.setForeground(QBrush(theme.color(colour)))
        if colour == "syn_comment":
            fmt.setFontItalic(True)
        # One character of the code text is one position in the document: lines joined by "\n"
        # map onto blocks joined by one separator each.
        cursor.setPosition(base + start)
        cursor.setPosition(base + start + length, QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(fmt)


def _style_inline(document: SafeTextDocument, theme: Theme) -> None:
    link = QColor(theme.link)
    code_bg = QColor(theme.inline_code_bg)
    changes: list[tuple[int, int, QTextCharFormat]] = []
    block = document.begin()
    while block.isValid():
        if not _is_code(block):
            fragments = block.begin()
            while not fragments.atEnd():
                fragment = fragments.fragment()
                fragments += 1
                old = fragment.charFormat()
                if old.isAnchor():
                    fmt = QTextCharFormat()
                    fmt.setForeground(QBrush(link))
                    fmt.setFontUnderline(True)
                elif old.fontFixedPitch():
                    fmt = QTextCharFormat()
                    fmt.setBackground(QBrush(code_bg))
                else:
                    continue
                changes.append((fragment.position(), fragment.length(), fmt))
        block = block.next()
    cursor = QTextCursor(document)
    for position, length, fmt in changes:
        cursor.setPosition(position)
        cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
        cursor.mergeCharFormat(fmt)


def _style_tables(frame: QTextFrame, theme: Theme) -> None:
    for child in frame.childFrames():
        if isinstance(child, QTextTable):
            fmt = child.format()
            fmt.setBorder(TABLE_BORDER)
            fmt.setBorderBrush(QBrush(QColor(theme.border)))
            fmt.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
            # One line between cells, as collapsed borders look, from cells that overlap by their border:
            # Qt paints collapsed borders about five times slower (a 40-row table took 37 ms a paint).
            fmt.setBorderCollapse(False)
            fmt.setCellPadding(TABLE_CELL_PADDING)
            fmt.setCellSpacing(-TABLE_BORDER)
            child.setFormat(fmt)
        _style_tables(child, theme)


def render_markdown(source: str, style: RenderStyle, *, settled: bool = True) -> Segment:
    """A block of model output as a safe document. Code is coloured only once `settled`: the live tail
    is re-rendered on every flush and must stay cheap."""
    document = _new_document(style)
    document.set_markdown(protect_math(source))
    codes = _code_blocks(document)
    _style_code_blocks(document, codes, style)
    _style_inline(document, style.theme)
    _style_tables(document.rootFrame(), style.theme)
    if settled:
        _highlight(document, codes, style.theme)
    return Segment(source, document, codes)


def render_piece(piece: Piece, style: RenderStyle) -> Segment:
    """One piece of a split table or code block (see `split_block`); its document is made when first
    needed."""
    if piece.code is not None:
        code = piece.code
        # The line count is a guess until the document exists: Qt may break lines at more than "\n".
        block = CodeBlock(
            0,
            piece.source.count("\n"),
            code.language,
            piece.source if piece.joined else code.text,
            continued=piece.joined,
            open_end=not piece.last,
        )
        return Segment(
            piece.source,
            lambda: _code_piece_document(piece, code, block, style),
            [block],
            joined=piece.joined,
        )
    assert piece.table is not None
    return Segment(
        piece.source,
        lambda: _table_piece_document(piece, style),
        joined=piece.joined,
        overlap=TABLE_BORDER if piece.joined else 0.0,
        columns=piece.table.widths(style.font),
    )


def _table_piece_document(piece: Piece, style: RenderStyle) -> SafeTextDocument:
    document = render_markdown(piece.source, style).document
    tables = [frame for frame in document.rootFrame().childFrames() if isinstance(frame, QTextTable)]
    if piece.joined and tables:
        # Rendered under the table's head so cells parse alike; shown once, above the first piece.
        tables[0].removeRows(0, 1)
    return document


def _code_piece_document(
    piece: Piece, code: CodeText, block: CodeBlock, style: RenderStyle
) -> SafeTextDocument:
    # Plain text in code formats, as the Markdown importer would make them: the code is already cut out of
    # its fences, and parsing 50,000 lines of it as Markdown again, piece by piece, would only cost time.
    document = _new_document(style)
    option = document.defaultTextOption()
    # Qt's Markdown importer turns a tab into spaces up to the next multiple of four; the text here keeps
    # its tabs (Copy gives them back), shown at the same stops.
    option.setTabStopDistance(4 * QFontMetricsF(style.code_font).horizontalAdvance(" "))
    document.setDefaultTextOption(option)
    document.setPlainText(piece.source)
    cursor = QTextCursor(document)
    cursor.select(QTextCursor.SelectionType.Document)
    fmt = QTextBlockFormat()
    fmt.setProperty(QTextFormat.Property.BlockCodeLanguage, code.language)
    cursor.mergeBlockFormat(fmt)
    block.last_block = document.blockCount() - 1
    _style_code_blocks(document, [block], style)
    spans = code.spans()
    end = piece.offset + len(piece.source)
    # The spans over the whole code that reach into this piece, cut to it.
    first = bisect.bisect_right(spans, piece.offset, key=lambda span: span[0] + span[1])
    inside = []
    for start, length, colour in itertools.islice(spans, first, None):
        if start >= end:
            break
        clipped = max(start, piece.offset)
        inside.append((clipped - piece.offset, min(start + length, end) - clipped, colour))
    _colour(document, 0, inside, style.theme)
    return document


def _size_columns(document: SafeTextDocument, natural: tuple[float, ...], *, fits: bool) -> None:
    """Columns in proportion to their natural widths, at those widths when the table `fits`: the same for
    every piece of one table, whatever rows each holds."""
    tables = [frame for frame in document.rootFrame().childFrames() if isinstance(frame, QTextTable)]
    if not tables:
        return
    total = sum(natural)
    fmt = tables[0].format()
    if fits:
        fmt.setWidth(QTextLength(QTextLength.Type.FixedLength, total))
    else:
        fmt.setWidth(QTextLength(QTextLength.Type.PercentageLength, 100))
    fmt.setColumnWidthConstraints(
        [QTextLength(QTextLength.Type.PercentageLength, 100 * column / total) for column in natural]
    )
    tables[0].setFormat(fmt)


def render_plain(text: str, style: RenderStyle, *, monospace: bool = False) -> Segment:
    """Text shown exactly as written: what the user typed, or an oversized live tail."""
    document = _new_document(style)
    if monospace:
        document.setDefaultFont(style.code_font)
    document.setPlainText(text)
    return Segment(text, document)


def append_plain(segment: Segment, text: str) -> None:
    """Grow a plain segment by `text` without touching what is already laid out."""
    cursor = QTextCursor(segment.document)
    cursor.movePosition(QTextCursor.MoveOperation.End)
    cursor.insertText(text)
    segment.source += text
