"""Painting message rows: the bubble, the header, the reasoning, the blocks in view, the tool cards and the
footer.

Only the blocks that intersect the exposed area are painted, and the pieces of split blocks are copied
from images of them as painted (`PieceImages`).
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from collections.abc import Callable

from PySide6.QtCore import QCoreApplication, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QAbstractTextDocumentLayout, QColor, QImage, QPainter, QPalette, QPen, QPixmap

from ui.markdown import Segment
from ui.message_row import (
    ROLE_LABELS,
    ROW_PAD,
    THINKING_INDENT,
    Hit,
    MessageRow,
    RowFonts,
    copy_button,
    translated,
)
from ui.row_documents import paint_documents
from ui.row_tools import paint_card
from ui.theme import Theme


class PieceImages:
    """Pieces of split blocks as painted, to copy onto the screen again: painting a viewport full of table
    cell by cell costs several milliseconds a paint, copying it a fraction of one (a resize shows pieces
    as they were until they are laid out again; scrolling repaints everything in view)."""

    def __init__(self, limit_bytes: int) -> None:
        self._limit = limit_bytes
        self._bytes = 0
        # id(segment) → (the segment, weakly; what it was painted as; the image), least recently used first.
        self._images: OrderedDict[int, tuple[weakref.ref[Segment], tuple[object, ...], QPixmap]] = (
            OrderedDict()
        )

    def get(self, segment: Segment, key: tuple[object, ...]) -> QPixmap | None:
        found = self._images.get(id(segment))
        if found is None or found[0]() is not segment or found[1] != key:
            return None
        self._images.move_to_end(id(segment))
        return found[2]

    def admits(self, size: QSize) -> bool:
        """Whether an image this size is kept (a piece taller than a few screens is painted directly)."""
        return size.width() * size.height() * 4 <= self._limit // 8

    def put(self, segment: Segment, key: tuple[object, ...], image: QPixmap) -> None:
        size = image.width() * image.height() * 4
        self._drop(id(segment))
        self._images[id(segment)] = (weakref.ref(segment), key, image)
        self._bytes += size
        while self._bytes > self._limit:
            self._drop(next(iter(self._images)))

    def _drop(self, key: int) -> None:
        found = self._images.pop(key, None)
        if found is not None:
            self._bytes -= found[2].width() * found[2].height() * 4


class RowPainter:
    """Paints rows for one paint event, as they look now: the theme, fonts and palette, what the pointer
    is over and which actions can be used."""

    def __init__(
        self,
        *,
        theme: Theme,
        fonts: RowFonts,
        palette: QPalette,
        ratio: float,
        hover: Hit | None,
        action_enabled: Callable[[int, str], bool],
        images: PieceImages,
        thumbnail: Callable[[str], QImage | None] = lambda _sha256: None,
    ) -> None:
        self._theme = theme
        self._fonts = fonts
        self._palette = palette
        # Device pixels per pixel: pieces' images are made at the screen's resolution.
        self._ratio = ratio
        self._hover = hover
        self._action_enabled = action_enabled
        self._images = images
        self._thumbnail = thumbnail

    def paint_row(self, painter: QPainter, row: MessageRow, top: float, bottom: float, now: float) -> None:
        """Paint `row`, the part of it from `top` to `bottom` (row coordinates), with the painter at the
        row's origin."""
        theme = self._theme
        geometry = row.geometry
        assert geometry is not None
        bubble = QRectF(0.5, 0.5, geometry.width - 1, geometry.height - 1)
        # Only the part in view (its cut edges, and their rounded corners, just out of view): a bubble
        # thousands of pixels tall costs as much to fill as it is tall.
        bubble.setTop(max(bubble.top(), top - 2 * ROW_PAD))
        bubble.setBottom(min(bubble.bottom(), bottom + 2 * ROW_PAD))
        fill = theme.user_bubble if row.role == "user" else theme.assistant_bubble
        border = theme.user_border if row.role == "user" else theme.assistant_border
        if row.flash_until > now:
            fill = theme.flash
        painter.setPen(QPen(QColor(border), 1))
        painter.setBrush(QColor(fill))
        painter.drawRoundedRect(bubble, 10, 10)

        painter.setFont(self._fonts.role)
        painter.setPen(QColor(theme.role))
        painter.drawText(
            geometry.header, int(Qt.AlignmentFlag.AlignLeft), translated(ROLE_LABELS.get(row.role, ""))
        )
        if geometry.thinking is not None:
            self._paint_thinking(painter, row, top, bottom, now)

        content = row.content_width(geometry.width)
        for y, segment in row.segments_between(top, bottom):
            # A piece not laid out yet is left blank; one laid out at another width (the window is being
            # resized) shows as it was, cut to the row, until its turn to be laid out again comes.
            if segment.width > 0:
                if segment.width != content:
                    painter.save()
                    painter.setClipRect(
                        QRectF(ROW_PAD, y, content, segment.height), Qt.ClipOperation.IntersectClip
                    )
                self._paint_segment(
                    painter, row, segment, QPointF(ROW_PAD, y), top - y, bottom - y, QColor(fill)
                )
                if segment.width != content:
                    painter.restore()
        self._paint_cards(painter, row, top, bottom)

        if geometry.documents is not None:
            hover = self._hover
            over = (
                (hover.kind, hover.key) if hover is not None and hover.message_id == row.message_id else None
            )
            entry = row.entry
            paint_documents(
                painter,
                geometry.documents,
                entry.files,
                entry.sources,
                row.sources_expanded,
                self._fonts.small,
                theme,
                over,
                self._thumbnail,
            )
        painter.setFont(self._fonts.small)
        flags = int(Qt.TextFlag.TextWordWrap)
        if geometry.badge is not None:
            painter.setPen(QColor(theme.error if row.status == "error" else theme.muted))
            painter.drawText(geometry.badge, flags, row.badge_text)
        if geometry.note is not None:
            painter.setPen(QColor(theme.warning))
            painter.drawText(geometry.note, flags, row.note_text)
        if geometry.stats is not None:
            painter.setPen(QColor(theme.muted))
            painter.drawText(geometry.stats, flags, row.stats_text)
        self._paint_actions(painter, row)

    def _paint_thinking(
        self, painter: QPainter, row: MessageRow, top: float, bottom: float, now: float
    ) -> None:
        """The "Thinking" label and, when expanded, the reasoning: muted, right of a thin rule."""
        geometry = row.geometry
        assert geometry is not None and geometry.thinking is not None
        theme = self._theme
        label = geometry.thinking
        hovered = self._hover == Hit(row.message_id, "thinking", "toggle")
        if hovered:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(theme.list_hover))
            painter.drawRoundedRect(label.adjusted(-4, 0, 4, 0), 5, 5)
        painter.setFont(self._fonts.small)
        painter.setPen(QColor(theme.text if hovered else theme.muted))
        painter.drawText(
            label, int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter), row.thinking_label(now)
        )
        document = row.thinking
        if document is None or not row.expanded:
            return
        y = geometry.thinking_top
        if y > bottom or y + document.height < top:
            return
        painter.setPen(QPen(QColor(theme.border), 2))
        painter.drawLine(QPointF(ROW_PAD + 1, y), QPointF(ROW_PAD + 1, y + document.height))
        painter.save()
        painter.translate(QPointF(ROW_PAD + THINKING_INDENT, y))
        context = QAbstractTextDocumentLayout.PaintContext()
        context.clip = QRectF(0, top - y, document.width, bottom - top)
        palette = QPalette(self._palette)
        palette.setColor(QPalette.ColorRole.Text, QColor(theme.muted))
        context.palette = palette
        document.document.documentLayout().draw(painter, context)
        painter.restore()

    def _paint_cards(self, painter: QPainter, row: MessageRow, top: float, bottom: float) -> None:
        """The tool cards' borders and headers in view (an expanded card's text is among the row's blocks)."""
        geometry = row.geometry
        assert geometry is not None
        for index, (card, placed) in enumerate(zip(row.cards, geometry.cards, strict=False)):
            if placed.frame.bottom() < top or placed.frame.top() > bottom:
                continue
            paint_card(
                painter,
                placed,
                row.card_label(index),
                card.failed,
                self._fonts.small,
                self._fonts.code,
                self._theme,
                hovered=self._hover == Hit(row.message_id, "tool", str(index)),
                top=top,
                bottom=bottom,
            )

    def _paint_segment(
        self,
        painter: QPainter,
        row: MessageRow,
        segment: Segment,
        at: QPointF,
        top: float,
        bottom: float,
        fill: QColor,
    ) -> None:
        """A block, `top`..`bottom` of it in view; a piece of a split block from its image (see
        `PieceImages`), painted on the bubble's `fill` once per layout."""
        painter.save()
        # A piece at whole pixels, as in its image: painted directly (too tall to keep) it looks the same.
        painter.translate(QPointF(at.x(), round(at.y())) if segment.lazy else at)
        ratio = self._ratio
        size = QSize(math.ceil(segment.width * ratio), math.ceil(segment.height * ratio))
        if not segment.lazy or not self._images.admits(size):
            self._paint_blocks(painter, segment, top, bottom)
            self._paint_copy_buttons(painter, row, segment, top, bottom)
            painter.restore()
            return
        key = (segment.width, segment.height, fill.rgba(), self._theme, ratio)
        image = self._images.get(segment, key)
        if image is None:
            image = QPixmap(size)
            image.setDevicePixelRatio(ratio)
            image.fill(fill)
            image_painter = QPainter(image)
            image_painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            self._paint_blocks(image_painter, segment, 0.0, segment.height)
            image_painter.end()
            self._images.put(segment, key, image)
        painter.drawPixmap(QPointF(0, 0), image)
        # The Copy button changes as it is hovered and clicked: painted on top, every time.
        self._paint_copy_buttons(painter, row, segment, top, bottom)
        painter.restore()

    def _paint_blocks(self, painter: QPainter, segment: Segment, top: float, bottom: float) -> None:
        """The segment's document on the background of its code blocks, in segment coordinates."""
        theme = self._theme
        for code in segment.code_blocks:
            rect = segment.code_rect(code)
            if rect.bottom() < top or rect.top() > bottom:
                continue
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(theme.code_bg))
            painter.drawRoundedRect(rect, 6, 6)
            # Where a piece of a long code block meets the next, the corners stay square: one block.
            if code.continued:
                painter.drawRect(QRectF(rect.left(), rect.top(), rect.width(), 6))
            if code.open_end:
                painter.drawRect(QRectF(rect.left(), rect.bottom() - 6, rect.width(), 6))
            if code.continued:
                continue
            strip = QRectF(rect.left(), rect.top(), rect.width(), 22)
            painter.setBrush(QColor(theme.code_header))
            painter.drawRoundedRect(strip, 6, 6)
            painter.setFont(self._fonts.small)
            painter.setPen(QColor(theme.muted))
            painter.drawText(
                strip.adjusted(10, 0, -10, 0), int(Qt.AlignmentFlag.AlignVCenter), code.language or ""
            )
        context = QAbstractTextDocumentLayout.PaintContext()
        context.clip = QRectF(0, top, segment.width, bottom - top)
        palette = QPalette(self._palette)
        palette.setColor(QPalette.ColorRole.Text, QColor(theme.text))
        context.palette = palette
        painter.save()
        painter.setPen(QColor(theme.text))
        # Text is antialiased on its own; antialiased table borders made a viewport of table 3× slower.
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        segment.document.documentLayout().draw(painter, context)
        painter.restore()

    def _paint_copy_buttons(
        self, painter: QPainter, row: MessageRow, segment: Segment, top: float, bottom: float
    ) -> None:
        theme = self._theme
        for number, code in enumerate(segment.code_blocks):
            if code.continued:
                continue
            button = copy_button(segment.code_rect(code), self._fonts)
            if button.bottom() < top or button.top() > bottom:
                continue
            key = f"{id(segment)}:{number}"
            hovered = self._hover is not None and self._hover.kind == "code" and self._hover.key == key
            if hovered:
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(QColor(theme.list_hover))
                painter.drawRoundedRect(button, 4, 4)
            painter.setFont(self._fonts.small)
            painter.setPen(QColor(theme.text if hovered else theme.muted))
            label = (
                QCoreApplication.translate("Transcript", "Copied")
                if row.copied == key
                else QCoreApplication.translate("Transcript", "Copy")
            )
            painter.drawText(button, int(Qt.AlignmentFlag.AlignCenter), label)

    def _paint_actions(self, painter: QPainter, row: MessageRow) -> None:
        geometry = row.geometry
        assert geometry is not None
        theme = self._theme
        painter.setFont(self._fonts.action)
        for name, rect in geometry.actions:
            if name == "sibling":
                painter.setPen(QColor(theme.muted))
                painter.drawText(rect, int(Qt.AlignmentFlag.AlignCenter), row.sibling_text)
                continue
            enabled = self._action_enabled(row.message_id, name)
            hovered = enabled and self._hover == Hit(row.message_id, "action", name)
            if hovered:
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(QColor(theme.list_hover))
                painter.drawRoundedRect(rect, 5, 5)
            colour = theme.text if hovered else theme.muted if enabled else theme.button_disabled_text
            painter.setPen(QColor(colour))
            painter.drawText(rect, int(Qt.AlignmentFlag.AlignCenter), row.action_label(name))
