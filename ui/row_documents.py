"""A transcript row's documents, painted like the rest of the row: the chips of a prompt's attached files,
and the collapsible "Sources (N)" block of a reply that was given passages.

Geometry is in row coordinates, below the message's text; `ui.message_row` places it in the footer and
asks it what a click hit, `ui.row_painter` paints it. Strings are in the "Transcript" context.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from PySide6.QtCore import QCoreApplication, QRectF, QSizeF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QImage, QPainter, QPen

from app.conversations.records import MessagePart
from app.documents.library import Attachment
from app.images.prepare import IMAGE_KIND
from ui.attachments import describe_file
from ui.theme import Theme

CHIP_PAD = 8
CHIP_GAP = 6
LINE_PAD = 3
# Of a passage, this much is shown on its line (the dialog shows all of it).
SNIPPET_CHARS = 240
# An image's chip: its thumbnail fitted in this box, its name under it.
THUMB_WIDTH = 128
THUMB_HEIGHT = 96


@dataclass(frozen=True)
class FileRef:
    """An attached file as a chip shows it; `sha256` finds the stored copy."""

    name: str
    kind: str | None
    size_bytes: int | None
    pages: int | None
    sha256: str | None

    @classmethod
    def of_part(cls, part: MessagePart) -> FileRef:
        pages = part.meta.get("pages")
        return cls(
            part.name or "attachment",
            part.meta.get("kind"),
            part.size_bytes,
            pages if isinstance(pages, int) else None,
            part.file_sha256,
        )

    @classmethod
    def of_attachment(cls, attachment: Attachment) -> FileRef:
        return cls(
            attachment.name, attachment.kind, attachment.size_bytes, attachment.pages, attachment.sha256
        )

    @property
    def label(self) -> str:
        return describe_file(self.name, self.kind, self.size_bytes, self.pages)

    @property
    def image(self) -> bool:
        return self.kind == IMAGE_KIND and self.sha256 is not None


@dataclass(frozen=True)
class SourceRef:
    """A passage a reply was given: its file, where in it, its text; `sha256` when the file is stored with
    the chat (an attachment), None for a collection's file."""

    name: str
    location: str
    text: str
    sha256: str | None

    @classmethod
    def of_part(cls, part: MessagePart) -> SourceRef:
        return cls(part.name or "", str(part.meta.get("location") or ""), part.text or "", part.file_sha256)

    @property
    def line(self) -> str:
        snippet = " ".join(self.text.split())[:SNIPPET_CHARS]
        return " — ".join(piece for piece in (self.name, self.location, snippet) if piece)


@dataclass
class DocumentsGeometry:
    chips: list[QRectF] = field(default_factory=list)
    toggle: QRectF | None = None
    sources: list[QRectF] = field(default_factory=list)
    bottom: float = 0.0


def sources_label(count: int, expanded: bool) -> str:
    text = QCoreApplication.translate("Transcript", "Sources ({count})").format(count=count)
    return f"{'▾' if expanded else '▸'} {text}"


def layout_documents(
    files: Sequence[FileRef],
    sources: Sequence[SourceRef],
    expanded: bool,
    font: QFont,
    left: float,
    width: float,
    top: float,
) -> DocumentsGeometry | None:
    """Chips flow left to right and wrap (an image's is its thumbnail over its name); the Sources line,
    then (expanded) one line per passage."""
    if not files and not sources:
        return None
    metrics = QFontMetricsF(font)
    line = math.ceil(metrics.height())
    geometry = DocumentsGeometry()
    x, y = left, top
    tallest = 0.0  # of the chips on the current line
    for ref in files:
        if ref.image:
            w, h = min(width, THUMB_WIDTH + 2 * LINE_PAD), THUMB_HEIGHT + line + 3 * LINE_PAD
        else:
            w, h = min(width, metrics.horizontalAdvance(ref.label) + 2 * CHIP_PAD), line + 2 * LINE_PAD
        if x > left and x + w > left + width:
            x, y, tallest = left, y + tallest + CHIP_GAP, 0.0
        geometry.chips.append(QRectF(x, y, w, h))
        tallest = max(tallest, h)
        x += w + CHIP_GAP
    if files:
        y += tallest + CHIP_GAP
    if sources:
        label = sources_label(len(sources), expanded)
        geometry.toggle = QRectF(left, y, metrics.horizontalAdvance(label) + 2 * LINE_PAD, line + LINE_PAD)
        y = geometry.toggle.bottom()
        if expanded:
            for _ref in sources:
                geometry.sources.append(QRectF(left, y, width, line + 2 * LINE_PAD))
                y += line + 2 * LINE_PAD
    geometry.bottom = y
    return geometry


def hit_documents(geometry: DocumentsGeometry, x: float, y: float) -> tuple[str, str] | None:
    """("file", index), ("sources", "toggle") or ("source", index) under the point, if any."""
    for index, rect in enumerate(geometry.chips):
        if rect.contains(x, y):
            return "file", str(index)
    if geometry.toggle is not None and geometry.toggle.contains(x, y):
        return "sources", "toggle"
    for index, rect in enumerate(geometry.sources):
        if rect.contains(x, y):
            return "source", str(index)
    return None


def thumbnail_box(chip: QRectF) -> QRectF:
    """Where an image chip's thumbnail goes: the box above its name."""
    return QRectF(chip.left() + LINE_PAD, chip.top() + LINE_PAD, chip.width() - 2 * LINE_PAD, THUMB_HEIGHT)


def _paint_thumbnail(painter: QPainter, chip: QRectF, image: QImage | None, theme: Theme) -> None:
    box = thumbnail_box(chip)
    if image is None:
        painter.setPen(QColor(theme.muted))
        painter.drawText(box, int(Qt.AlignmentFlag.AlignCenter), "…")
        return
    fitted = QSizeF(image.size()).scaled(box.size(), Qt.AspectRatioMode.KeepAspectRatio)
    target = QRectF(0, 0, fitted.width(), fitted.height())
    target.moveCenter(box.center())
    painter.save()
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    painter.drawImage(target, image)
    painter.restore()


def paint_documents(
    painter: QPainter,
    geometry: DocumentsGeometry,
    files: Sequence[FileRef],
    sources: Sequence[SourceRef],
    expanded: bool,
    font: QFont,
    theme: Theme,
    hover: tuple[str, str] | None,
    thumbnail: Callable[[str], QImage | None] = lambda _sha256: None,
) -> None:
    """`thumbnail` gives an image's thumbnail by its sha256, or None while it is being made."""
    painter.setFont(font)
    metrics = QFontMetricsF(font)
    centred = int(Qt.AlignmentFlag.AlignCenter)
    left_middle = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    for index, (rect, ref) in enumerate(zip(geometry.chips, files, strict=False)):
        hovered = hover == ("file", str(index))
        painter.setPen(QPen(QColor(theme.assistant_border if not hovered else theme.text), 1))
        painter.setBrush(QColor(theme.list_hover if hovered else theme.window))
        if ref.image and ref.sha256 is not None:
            painter.drawRoundedRect(rect, 6, 6)
            _paint_thumbnail(painter, rect, thumbnail(ref.sha256), theme)
            label = QRectF(
                rect.left(), rect.bottom() - metrics.height() - LINE_PAD, rect.width(), metrics.height()
            )
            painter.setPen(QColor(theme.text))
            name = metrics.elidedText(ref.name, Qt.TextElideMode.ElideMiddle, rect.width() - 2 * LINE_PAD)
            painter.drawText(label, centred, name)
            continue
        painter.drawRoundedRect(rect, rect.height() / 2, rect.height() / 2)
        painter.setPen(QColor(theme.text))
        text = metrics.elidedText(ref.label, Qt.TextElideMode.ElideMiddle, rect.width() - 2 * CHIP_PAD)
        painter.drawText(rect, centred, text)
    if geometry.toggle is not None:
        painter.setPen(QColor(theme.text if hover == ("sources", "toggle") else theme.muted))
        painter.drawText(geometry.toggle, left_middle, sources_label(len(sources), expanded))
    for index, (rect, source) in enumerate(zip(geometry.sources, sources, strict=False)):
        if hover == ("source", str(index)):
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(theme.list_hover))
            painter.drawRoundedRect(rect, 4, 4)
        painter.setPen(QColor(theme.text))
        inner = rect.adjusted(LINE_PAD, 0, -LINE_PAD, 0)
        painter.drawText(
            inner, left_middle, metrics.elidedText(source.line, Qt.TextElideMode.ElideRight, inner.width())
        )
