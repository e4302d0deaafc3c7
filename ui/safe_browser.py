"""Show model output as Markdown without letting it read files, reach the network or run anything.

Model output is untrusted input (docs/reliability.md). Qt's rich text stack is built for trusted
documents, so each of its doors is closed here:

- Images. `QTextDocument.loadResource` reads local files when its parent returns nothing, and
  Qt's image handler then calls `QImage.load(name)` itself when it is still handed a null image.
  So refusing with `None` is not enough: every resource request is answered with a harmless,
  non-null placeholder, which is the only answer that keeps Qt away from the disk, SMB and HTTP.
- Raw HTML. The Markdown importer runs with `MarkdownNoHTML`, so `<img>`, `<script>` and `<b>`
  stay literal text.
- Tooltips. A link or image title becomes the fragment's tooltip, and `QToolTip` renders
  anything that looks like HTML (an `<img src=file:...>` title would be loaded). Titles are
  replaced by the escaped link target, which is also what a user wants to see on hover.
- Links. A document never navigates; the view that shows it (the transcript) opens only http(s) links
  (`is_openable`), in the system browser, after a confirmation that shows the whole URL.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QByteArray, QCoreApplication, QRectF, Qt, QUrl
from PySide6.QtGui import (
    QColor,
    QImage,
    QPainter,
    QPen,
    QTextCharFormat,
    QTextCursor,
    QTextDocument,
    QTextFormat,
)
from PySide6.QtWidgets import QMessageBox, QWidget

log = logging.getLogger("hearth.ui.safe_browser")

MARKDOWN_FEATURES = (
    QTextDocument.MarkdownFeature.MarkdownDialectGitHub | QTextDocument.MarkdownFeature.MarkdownNoHTML
)
OPENABLE_SCHEMES = frozenset({"http", "https"})

ConfirmOpen = Callable[[QWidget, QUrl], bool]
OpenUrl = Callable[[QUrl], bool]

_placeholder: QImage | None = None


def blocked_image() -> QImage:
    """A small 'image not loaded' glyph; non-null so Qt never falls back to loading the real one."""
    global _placeholder
    if _placeholder is None:
        image = QImage(16, 16, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(QPen(QColor("#9a8f85"), 1.5))
        painter.drawRoundedRect(QRectF(1.5, 1.5, 13, 13), 2, 2)
        painter.drawLine(4, 12, 12, 4)
        painter.end()
        _placeholder = image
    return _placeholder


def refuse_resource(resource_type: int, url: QUrl) -> QImage | QByteArray:
    log.debug("refused resource %s (type %d) named in model output", url.toString(), resource_type)
    if resource_type == QTextDocument.ResourceType.ImageResource.value:
        return blocked_image()
    return QByteArray()


def is_openable(url: QUrl) -> bool:
    return url.isValid() and url.scheme().lower() in OPENABLE_SCHEMES and bool(url.host())


def display_url(url: QUrl) -> str:
    """Percent-encoded, with an internationalised host in punycode, so look-alike hosts stand out."""
    return bytes(url.toEncoded().data()).decode("ascii")


def confirm_open_url(parent: QWidget, url: QUrl) -> bool:
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Icon.Question)
    box.setWindowTitle(QCoreApplication.translate("SafeBrowser", "Open link"))
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setText(QCoreApplication.translate("SafeBrowser", "Open this link in your web browser?"))
    box.setInformativeText(display_url(url))
    box.setStandardButtons(QMessageBox.StandardButton.Open | QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(QMessageBox.StandardButton.Cancel)
    return box.exec() == QMessageBox.StandardButton.Open


def _neutralise_titles(document: QTextDocument) -> None:
    # Collected first: changing a format while iterating can merge the fragments being walked.
    changes: list[tuple[int, int, QTextCharFormat]] = []
    block = document.begin()
    while block.isValid():
        fragments = block.begin()
        while not fragments.atEnd():
            fragment = fragments.fragment()
            fragments += 1
            old = fragment.charFormat()
            if not old.toolTip():
                continue
            new = QTextCharFormat(old)
            href = old.anchorHref()
            if href:
                new.setToolTip(f"<p>{html.escape(href)}</p>")
            else:
                new.clearProperty(QTextFormat.Property.TextToolTip)
            changes.append((fragment.position(), fragment.length(), new))
        block = block.next()
    for position, length, fmt in changes:
        cursor = QTextCursor(document)
        cursor.setPosition(position)
        cursor.setPosition(position + length, QTextCursor.MoveMode.KeepAnchor)
        cursor.setCharFormat(fmt)


class SafeTextDocument(QTextDocument):
    """A document that never loads a resource and only accepts Markdown through `set_markdown`."""

    def loadResource(self, type: int, name: QUrl | str, /) -> Any:
        return refuse_resource(type, QUrl(name))

    def set_markdown(self, text: str) -> None:
        self.setMarkdown(text, MARKDOWN_FEATURES)
        _neutralise_titles(self)
