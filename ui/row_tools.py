"""A transcript row's tool cards: each call a reply made, and the result a tool message holds, as a card
whose header line ("▸ Called add  {"a": 2, "b": 3}") expands to the whole text as a code block.

The text is data, never Markdown: expanded, it is one fenced block (`ToolCard.block`) rendered and, when
big, split into pieces like any other code block (`ui.markdown`); collapsed, only its header is laid out,
so a 32,000-character result costs one line. `ui.message_row` places the cards below the message's text and
asks what a click hit; `ui.row_painter` paints them with `paint_card`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Literal

from PySide6.QtCore import QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPen

from app.conversations.records import MessagePart
from ui.theme import Theme

# Of the text, this much is read for the header's one-line preview, and this much of it kept: the header
# elides it to its width anyway, and a result can be 32,000 characters.
PREVIEW_SCAN = 2_000
PREVIEW_CHARS = 300
# The card's border sits this far outside the text column, so its code block lines up with the reply's.
CARD_INSET = 4
CARD_GAP = 6
HEADER_PAD = 4
# Between the header's label and its preview.
PREVIEW_GAP = 10


def fenced(text: str, language: str = "") -> str:
    # A fence longer than any run of backticks in the text, so nothing in it can close the block.
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def _one_line(text: str) -> str:
    return " ".join(text[:PREVIEW_SCAN].split())[:PREVIEW_CHARS]


@dataclass(frozen=True)
class ToolCard:
    """A call (`text`: its arguments, indented when they are JSON) or a result (`text`: as the tool
    returned it, `failed` when it is an error)."""

    kind: Literal["call", "result"]
    tool: str
    text: str
    preview: str
    language: str = ""
    failed: bool = False

    @classmethod
    def of_call(cls, part: MessagePart) -> ToolCard:
        arguments = part.text or ""
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            # The model's own text, not JSON: shown as written.
            return cls("call", part.name or "", arguments, _one_line(arguments))
        pretty = json.dumps(parsed, indent=2, ensure_ascii=False)
        return cls("call", part.name or "", pretty, _one_line(json.dumps(parsed, ensure_ascii=False)), "json")

    @classmethod
    def of_result(cls, part: MessagePart | None, text: str) -> ToolCard:
        name = (part.name or "") if part is not None else ""
        return cls("result", name, text, _one_line(text), failed=part is not None and part.is_error)

    @property
    def block(self) -> str:
        """The text as the Markdown an expanded card renders: one code block."""
        return fenced(self.text, self.language)


@dataclass
class CardGeometry:
    """Where a card is, in row coordinates: its border, its header line (what a click toggles), the
    preview as elided to fit the header, and the tops of its text's blocks (expanded)."""

    frame: QRectF
    header: QRectF
    preview: str
    tops: list[float] = field(default_factory=list)


def header_height(label_font: QFont, preview_font: QFont) -> float:
    tallest = max(QFontMetricsF(label_font).height(), QFontMetricsF(preview_font).height())
    return math.ceil(tallest) + 2 * HEADER_PAD


def _label_rect(header: QRectF) -> QRectF:
    return header.adjusted(CARD_INSET + HEADER_PAD, 0, -(CARD_INSET + HEADER_PAD), 0)


def elided_preview(preview: str, label: str, header: QRectF, label_font: QFont, preview_font: QFont) -> str:
    """What of `preview` fits right of `label` in `header` ("" when nothing useful does)."""
    room = _label_rect(header).width() - QFontMetricsF(label_font).horizontalAdvance(label) - PREVIEW_GAP
    metrics = QFontMetricsF(preview_font)
    if room < 3 * metrics.averageCharWidth():
        return ""
    return metrics.elidedText(preview, Qt.TextElideMode.ElideRight, room)


def paint_card(
    painter: QPainter,
    geometry: CardGeometry,
    label: str,
    failed: bool,
    label_font: QFont,
    preview_font: QFont,
    theme: Theme,
    *,
    hovered: bool,
    top: float,
    bottom: float,
) -> None:
    """The card's border and header; its text's blocks are painted with the row's. Only the part from
    `top` to `bottom` (row coordinates) is drawn: an expanded result can be thousands of pixels tall."""
    frame = QRectF(geometry.frame)
    # Its cut edges (and their rounded corners) just out of view.
    frame.setTop(max(frame.top(), top - 2 * CARD_GAP))
    frame.setBottom(min(frame.bottom(), bottom + 2 * CARD_GAP))
    border = theme.error if failed else theme.assistant_border
    header = geometry.header
    if hovered:
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(theme.list_hover))
        painter.drawRoundedRect(header, 6, 6)
    painter.setPen(QPen(QColor(border), 1))
    painter.setBrush(Qt.BrushStyle.NoBrush)
    painter.drawRoundedRect(frame.adjusted(0.5, 0.5, -0.5, -0.5), 6, 6)
    if header.bottom() < top or header.top() > bottom:
        return
    inner = _label_rect(header)
    left_middle = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    painter.setFont(label_font)
    painter.setPen(QColor(theme.error if failed else theme.text))
    painter.drawText(inner, left_middle, label)
    if geometry.preview:
        painter.setFont(preview_font)
        painter.setPen(QColor(theme.muted))
        offset = QFontMetricsF(label_font).horizontalAdvance(label) + PREVIEW_GAP
        painter.drawText(inner.adjusted(offset, 0, 0, 0), left_middle, geometry.preview)
