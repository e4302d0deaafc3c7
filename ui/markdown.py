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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from PySide6.QtCore import QRectF
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFont,
    QTextBlock,
    QTextBlockFormat,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
    QTextFrame,
    QTextFrameFormat,
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


def _fence_closes(line: str, fence: str) -> bool:
    stripped = line.strip()
    if len(line) - len(line.lstrip(" ")) > 3 or not stripped:
        return False
    return set(stripped) == {fence[0]} and len(stripped) >= len(fence)


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


@dataclass
class Segment:
    """One rendered block of a message: its document, laid out at `width`."""

    source: str
    document: SafeTextDocument
    code_blocks: list[CodeBlock] = field(default_factory=list)
    width: float = -1.0
    height: float = 0.0

    def layout(self, width: float) -> float:
        if width != self.width:
            self.width = width
            self.document.setTextWidth(width)
        self.height = self.document.size().height()
        return self.height

    def code_rect(self, code: CodeBlock) -> QRectF:
        """The code block's area including its header strip, in document coordinates."""
        layout = self.document.documentLayout()
        first = layout.blockBoundingRect(self.document.findBlockByNumber(code.first_block))
        last = layout.blockBoundingRect(self.document.findBlockByNumber(code.last_block))
        top = first.top() - CODE_HEADER_PX
        return QRectF(0.0, top, self.width, last.bottom() + CODE_PAD_PX / 2 - top)

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
        frame.setTopMargin(CODE_HEADER_PX)
    if codes[-1].last_block == document.blockCount() - 1:
        frame.setBottomMargin(CODE_PAD_PX)
    document.rootFrame().setFrameFormat(frame)
    cursor = QTextCursor(document)
    for code in codes:
        for number in range(code.first_block, code.last_block + 1):
            block = document.findBlockByNumber(number)
            fmt = QTextBlockFormat(block.blockFormat())
            # Qt lays fenced code out as non-breaking lines; a painted view has no sideways scroll.
            fmt.setNonBreakableLines(False)
            fmt.setLeftMargin(CODE_PAD_PX)
            fmt.setRightMargin(CODE_PAD_PX)
            fmt.setTopMargin(CODE_HEADER_PX if number == code.first_block else 0)
            fmt.setBottomMargin(CODE_PAD_PX if number == code.last_block else 0)
            cursor.setPosition(block.position())
            cursor.setBlockFormat(fmt)
            chars = QTextCharFormat()
            chars.setFont(style.code_font)
            cursor.setPosition(block.position())
            cursor.setPosition(block.position() + block.length() - 1, QTextCursor.MoveMode.KeepAnchor)
            cursor.mergeCharFormat(chars)


def _highlight(document: SafeTextDocument, codes: list[CodeBlock], theme: Theme) -> None:
    cursor = QTextCursor(document)
    for code in codes:
        base = document.findBlockByNumber(code.first_block).position()
        for start, length, colour in highlight_spans(code.text, code.language):
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
            fmt.setBorder(1)
            fmt.setBorderBrush(QBrush(QColor(theme.border)))
            fmt.setBorderStyle(QTextFrameFormat.BorderStyle.BorderStyle_Solid)
            fmt.setBorderCollapse(True)
            fmt.setCellPadding(5)
            fmt.setCellSpacing(0)
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
