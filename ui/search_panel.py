"""Full-text search over conversations: a query box, ranked hits with the matches highlighted.

The panel knows nothing about the store: it asks for a search (`searchRequested`, debounced while the
user types) and the window answers with `show_results`. Snippets are model and user text with the
store's hit markers (\\x02 … \\x03); everything else in them is escaped before it becomes rich text.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Sequence

from PySide6.QtCore import (
    QAbstractListModel,
    QEvent,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QRectF,
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QAbstractTextDocumentLayout, QColor, QKeyEvent, QPainter, QPalette
from PySide6.QtWidgets import (
    QLabel,
    QLineEdit,
    QListView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QVBoxLayout,
    QWidget,
)

from app.conversations.store import HIT_END, HIT_START, SearchHit
from ui.safe_browser import SafeTextDocument
from ui.theme import LIGHT, Theme

SEARCH_DELAY_MS = 200
_MARKERS = re.compile(f"([{HIT_START}{HIT_END}])")
HIT_ROLE = Qt.ItemDataRole.UserRole + 1


def snippet_html(snippet: str, highlight: str) -> str:
    """Escaped snippet text with each marked hit in a highlighted span; stray markers are dropped."""
    out: list[str] = []
    inside = False
    for part in _MARKERS.split(snippet):
        if part == HIT_START:
            if not inside:
                out.append(f'<span style="background-color:{highlight}; font-weight:600;">')
                inside = True
        elif part == HIT_END:
            if inside:
                out.append("</span>")
                inside = False
        else:
            out.append(html.escape(" ".join(part.split()) if "\n" in part else part))
    if inside:
        out.append("</span>")
    return "".join(out)


def plain_snippet(snippet: str) -> str:
    return snippet.replace(HIT_START, "").replace(HIT_END, "")


class SearchResults(QAbstractListModel):
    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.hits: list[SearchHit] = []

    def set_hits(self, hits: Sequence[SearchHit]) -> None:
        self.beginResetModel()
        self.hits = list(hits)
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.hits)

    def data(
        self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole
    ) -> object:
        if not index.isValid() or index.row() >= len(self.hits):
            return None
        hit = self.hits[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return f"{hit.title}\n{plain_snippet(hit.snippet)}"
        if role == HIT_ROLE:
            return hit
        return None


class HitDelegate(QStyledItemDelegate):
    """Title on the first line, the highlighted snippet below (at most two lines)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.theme: Theme = LIGHT

    def _document(self, hit: SearchHit, option: QStyleOptionViewItem, width: float) -> SafeTextDocument:
        document = SafeTextDocument()
        document.setDocumentMargin(0)
        document.setDefaultFont(option.font)
        document.setTextWidth(width)
        theme = self.theme
        if hit.message_id is None:
            where = self.tr("Title")
        elif hit.role == "user":
            where = self.tr("You")
        elif hit.in_reasoning:
            where = self.tr("Hearth (thinking)")
        elif hit.in_tool_call:
            where = self.tr("Hearth (tool call)")
        elif hit.role == "tool":
            where = self.tr("Tool")
        else:
            where = self.tr("Hearth")
        title = snippet_html(hit.snippet, theme.hit_bg) if hit.message_id is None else html.escape(hit.title)
        body = "" if hit.message_id is None else snippet_html(hit.snippet, theme.hit_bg)
        label = html.escape(where) + (": " if body else "")
        document.setHtml(
            f'<div style="color:{theme.text}"><b>{title}</b></div>'
            f'<div style="color:{theme.muted}">{label}<span style="color:{theme.text}">{body}</span></div>'
        )
        return document

    def paint(
        self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        hit = index.data(HIT_ROLE)
        if not isinstance(hit, SearchHit):
            return
        rect = QRectF(option.rect)
        state = option.state
        painter.save()
        if state & QStyle.StateFlag.State_Selected:
            painter.fillRect(rect, QColor(self.theme.list_selected))
        elif state & QStyle.StateFlag.State_MouseOver:
            painter.fillRect(rect, QColor(self.theme.list_hover))
        inner = rect.adjusted(8, 6, -8, -6)
        document = self._document(hit, option, inner.width())
        painter.translate(inner.topLeft())
        painter.setClipRect(QRectF(0, 0, inner.width(), inner.height()))
        context = QAbstractTextDocumentLayout.PaintContext()
        context.palette.setColor(QPalette.ColorRole.Text, QColor(self.theme.text))
        document.documentLayout().draw(painter, context)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        line = option.fontMetrics.lineSpacing()
        return QSize(200, int(line * 3 + 14))


class SearchPanel(QWidget):
    """`hitActivated(conversation_id, message_id or None)` when the user picks a result."""

    searchRequested = Signal(str)
    hitActivated = Signal(int, object)
    closed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("searchPanel")
        self.query = QLineEdit()
        self.query.setObjectName("searchQuery")
        self.query.setClearButtonEnabled(True)
        self.status = QLabel()
        self.status.setObjectName("hint")
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        self.status.setWordWrap(True)
        self.model = SearchResults(self)
        self.delegate = HitDelegate(self)
        self.results = QListView()
        self.results.setObjectName("searchResults")
        self.results.setModel(self.model)
        self.results.setItemDelegate(self.delegate)
        self.results.setUniformItemSizes(True)
        self.results.setMouseTracking(True)
        self.results.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.query)
        layout.addWidget(self.status)
        layout.addWidget(self.results, 1)

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(SEARCH_DELAY_MS)
        self._timer.timeout.connect(self._request)
        self._asked = ""
        self._answered = ""
        # Enter pressed before the results came: open the best hit as soon as they do.
        self._activate_when_ready = False
        self.query.textChanged.connect(self._on_text)
        self.query.returnPressed.connect(self._activate_first)
        self.query.installEventFilter(self)
        # Enter on a result (activated) and a click; on platforms where one click also activates, the
        # second signal for the same result is ignored.
        self.results.activated.connect(self._activate)
        self.results.clicked.connect(self._activate)
        self._last_activation: tuple[int, int | None, float] | None = None
        self.retranslate()

    def retranslate(self) -> None:
        self.query.setPlaceholderText(self.tr("Search all chats…"))
        self._show_status()

    def set_theme(self, theme: Theme) -> None:
        self.delegate.theme = theme
        self.results.viewport().update()

    def open(self) -> None:
        self.show()
        self.query.setFocus()
        self.query.selectAll()

    def close_panel(self) -> None:
        self._timer.stop()
        self.hide()
        self.closed.emit()

    @property
    def hits(self) -> list[SearchHit]:
        return list(self.model.hits)

    def show_results(self, query: str, hits: Sequence[SearchHit]) -> None:
        """Results for `query`; dropped if the user has typed something else since."""
        if query != self.query.text().strip():
            return
        self._answered = query
        self.model.set_hits(hits)
        if hits:
            self.results.setCurrentIndex(self.model.index(0, 0))
        self._show_status()
        if self._activate_when_ready and hits:
            self._activate(self.model.index(0, 0))
        self._activate_when_ready = False

    def _show_status(self) -> None:
        text = self.query.text().strip()
        if not text:
            message = self.tr("Type to search titles and messages.")
        elif self._timer.isActive() or text != self._asked:
            message = self.tr("Searching…")
        elif not self.model.hits:
            message = self.tr("Nothing found.")
        else:
            message = self.tr("%n result(s)", "", len(self.model.hits))
        self.status.setText(message)

    def _on_text(self, _text: str) -> None:
        self._activate_when_ready = False
        self._timer.start()
        self._show_status()

    def _request(self) -> None:
        query = self.query.text().strip()
        self._asked = query
        if not query:
            self._answered = ""
            self.model.set_hits([])
            self._show_status()
            return
        self.searchRequested.emit(query)

    def _activate_first(self) -> None:
        query = self.query.text().strip()
        if query != self._answered:
            self._activate_when_ready = True
            if self._timer.isActive() or query != self._asked:
                self._timer.stop()
                self._request()
            return
        index = self.results.currentIndex()
        if not index.isValid() and self.model.rowCount():
            index = self.model.index(0, 0)
        if index.isValid():
            self._activate(index)

    def _activate(self, index: QModelIndex) -> None:
        hit = index.data(HIT_ROLE)
        if not isinstance(hit, SearchHit):
            return
        now = time.monotonic()
        last = self._last_activation
        if last is not None and last[:2] == (hit.conversation_id, hit.message_id) and now - last[2] < 0.5:
            return
        self._last_activation = (hit.conversation_id, hit.message_id, now)
        self.hitActivated.emit(hit.conversation_id, hit.message_id)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if (
            watched is self.query
            and isinstance(event, QKeyEvent)
            and event.type() == QEvent.Type.KeyPress
            and event.key() == Qt.Key.Key_Down
            and self.model.rowCount()
        ):
            self.results.setFocus()
            if not self.results.currentIndex().isValid():
                self.results.setCurrentIndex(self.model.index(0, 0))
            return True
        return super().eventFilter(watched, event)
