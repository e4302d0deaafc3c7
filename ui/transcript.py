"""The conversation transcript: a painted, virtualised list with one row per message.

Why painted rows instead of a widget per message: a `QTextBrowser` per message costs milliseconds to
create and lays out the whole message, so a 200-message conversation opened slowly and a long reply
re-laid out everything on each flush. Here a row is data plus cached documents, in four parts:

- `ui.message_row`: one message, its blocks (a streaming reply's settled blocks and live tail, the
  pieces of blocks too big for one document) and their layout;
- `ui.row_view`: the rows in a scroll area, rendered and laid out lazily within a budget per event-loop
  turn, keeping the scroll position on what the user reads;
- `ui.row_painter`: painting only the rows, and within a row only the blocks, in the exposed area;
- this module: the widget, the conversation's entries, live replies, thinking, tool cards, actions and
  links.

Everything the model wrote goes through `ui.markdown` (safe documents: no resource loading, no raw
HTML); links open only as http(s) after confirmation, and their tooltips are escaped.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from PySide6.QtCore import (
    QCoreApplication,
    QEvent,
    QPoint,
    QPointF,
    QRect,
    QRectF,
    QSize,
    Qt,
    QTimer,
    QUrl,
    Signal,
)
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QDesktopServices,
    QGuiApplication,
    QHelpEvent,
    QImage,
    QMouseEvent,
    QPainter,
    QPaintEvent,
)
from PySide6.QtWidgets import QMenu, QToolTip, QWidget

from app.chat.live_reply import ReplyChange
from ui.message_row import (
    ACTION_TIPS,
    EDITING_ACTIONS,
    ROW_PAD,
    Hit,
    MessageRow,
    ReplyStats,
    TranscriptEntry,
    copy_button,
    translated,
)
from ui.row_painter import PieceImages, RowPainter
from ui.row_view import FLUSH_INTERVAL_MS, ROW_SPACING, VIEW_MARGIN, RowView
from ui.safe_browser import ConfirmOpen, OpenUrl, confirm_open_url, is_openable
from ui.thumbnails import Thumbnails

# Memory for images of pieces as painted (a few screens of them).
PIECE_IMAGES_BYTES = 48 * 1024 * 1024
COPIED_FEEDBACK_MS = 1_500
FLASH_MS = 1_600
# How often the "Thinking… 3.2 s" label of a reply that is thinking right now is repainted.
THINKING_TICK_MS = 100
# How a reply's reasoning is first shown (app.settings.THINKING_DISPLAYS).
THINKING_DISPLAYS = ("collapsed", "expanded", "hidden")


class Transcript(RowView):
    """Emits `actionTriggered(action, message_id)` for everything but copying, which it does itself;
    `fileClicked(message_id, index)` for a prompt's attached file, `sourceClicked(message_id, index)`
    for a reply's source passage (indexes into the entry's `files` and `sources`)."""

    actionTriggered = Signal(str, int)
    fileClicked = Signal(int, int)
    sourceClicked = Signal(int, int)
    copied = Signal(str)

    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        confirm_open: ConfirmOpen = confirm_open_url,
        open_url: OpenUrl = QDesktopServices.openUrl,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("transcript")
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.viewport().setMouseTracking(True)
        self._confirm_open = confirm_open
        self._open_url = open_url
        self._editing_enabled = True
        self._hover: Hit | None = None
        self._pressed: Hit | None = None
        self._thinking_display = "collapsed"
        # Per streaming row: what stops it hearing from its live reply.
        self._live_links: dict[int, Callable[[], None]] = {}
        self._piece_images = PieceImages(PIECE_IMAGES_BYTES)
        self._thumbnail: Callable[[str], QImage | None] = lambda _sha256: None
        self._feedback_timer = QTimer(self)
        self._feedback_timer.setSingleShot(True)
        self._feedback_timer.timeout.connect(self._clear_feedback)
        self._flash_timer = QTimer(self)
        self._flash_timer.setSingleShot(True)
        self._flash_timer.timeout.connect(self.viewport().update)
        self._thinking_timer = QTimer(self)
        self._thinking_timer.setInterval(THINKING_TICK_MS)
        self._thinking_timer.timeout.connect(self._tick_thinking)

    def set_thumbnails(self, thumbnails: Thumbnails) -> None:
        """Where image chips get their thumbnails; the rows repaint as each one is made."""
        self._thumbnail = thumbnails.image
        thumbnails.ready.connect(lambda _sha256: self.viewport().update())

    # -- rows ---------------------------------------------------------------------------------------

    def row(self, message_id: int) -> MessageRow | None:
        index = self._index.get(message_id)
        return self._rows[index] if index is not None else None

    def rows(self) -> list[MessageRow]:
        return list(self._rows)

    def entries(self) -> list[TranscriptEntry]:
        return [
            replace(row.entry, content=row.text, reasoning=row.reasoning_text or None) for row in self._rows
        ]

    def _new_row(self, entry: TranscriptEntry) -> MessageRow:
        row = MessageRow(entry, thinking_display=self._thinking_display)
        if row.live is not None:
            message_id = row.message_id
            self._unlink(message_id)
            self._live_links[message_id] = row.live.changed.connect(
                lambda change: self._live_changed(message_id, change)
            )
        return row

    def _unlink(self, message_id: int) -> None:
        disconnect = self._live_links.pop(message_id, None)
        if disconnect is not None:
            disconnect()

    @property
    def thinking_display(self) -> str:
        return self._thinking_display

    def set_thinking_display(self, display: str) -> None:
        """How every reply's reasoning is shown from now on: "collapsed", "expanded" or "hidden"."""
        if display not in THINKING_DISPLAYS:
            raise ValueError(f"display must be one of {THINKING_DISPLAYS}, not {display!r}")
        if display == self._thinking_display:
            return
        self._thinking_display = display
        for row in self._rows:
            row.set_thinking_display(display)
        self._relayout_all()

    def clear(self) -> None:
        self._flush_timer.stop()
        self._idle_timer.stop()
        self._dirty.clear()
        for message_id in list(self._live_links):
            self._unlink(message_id)
        self._rows = []
        self._index = {}
        self._hover = self._pressed = None
        self._stick_to_bottom = True
        self._relayout_all()

    def set_entries(self, entries: Sequence[TranscriptEntry]) -> None:
        # A branch read again with messages added (a tool turn's results) keeps what was opened in the rest.
        before = {row.message_id: row for row in self._rows}
        self.clear()
        self._rows = [self._new_row(entry) for entry in entries]
        for row in self._rows:
            old = before.get(row.message_id)
            if old is not None:
                _keep_view_state(old, row)
        self._reindex()
        for row in self._rows:
            row.height = row.estimate(self._width, self._fonts)
        self._relayout_all()
        self.scroll_to_bottom()

    def add_entry(self, entry: TranscriptEntry) -> MessageRow:
        if entry.message_id in self._index:
            self.remove_from(entry.message_id)
        row = self._new_row(entry)
        row.height = row.estimate(self._width, self._fonts)
        self._rows.append(row)
        self._index[entry.message_id] = len(self._rows) - 1
        if row.streaming:
            row.render(self._style, self._deadline())
        self._relayout_all()
        return row

    def remove_from(self, message_id: int) -> None:
        """Drop this message's row and every row after it (a branch being replaced)."""
        index = self._index.get(message_id)
        if index is None:
            return
        for row in self._rows[index:]:
            self._dirty.discard(row.message_id)
            self._unlink(row.message_id)
        del self._rows[index:]
        self._reindex()
        self._relayout_all()

    def update_entry(self, entry: TranscriptEntry) -> None:
        """New facts about a message (sibling counts, stats, status); its text re-renders only if it
        changed."""
        row = self.row(entry.message_id)
        if row is None:
            return
        if row.streaming:
            # A reply still being written shows its live text, newer than the store's. One the store has
            # finished was shown from a read taken while it was written: the store's copy replaces it.
            if entry.status == "streaming":
                return
            self._dirty.discard(entry.message_id)
            self._unlink(entry.message_id)
        if (
            row.streaming
            or entry.content != row.text
            or entry.role != row.role
            or (entry.reasoning or "") != row.reasoning_text
            or entry.tools != row.cards
        ):
            index = self._index[entry.message_id]
            self._rows[index] = self._new_row(entry)
            self._rows[index].height = row.height
            _keep_view_state(row, self._rows[index])
        else:
            row.entry = entry
            row.geometry = None
            row.measured_width = None
        self._relayout_all()

    def annotate(self, message_id: int, context_note: str | None) -> None:
        """Say what the overflow policy left out of this reply's prompt (shown while it streams too)."""
        index = self._index.get(message_id)
        if index is None:
            return
        row = self._rows[index]
        row.entry = replace(row.entry, context_note=context_note)
        if row.geometry is not None:
            old = row.height
            row.relayout_growth(self._fonts, self._turn_budget(), self._window(index))
            self._height_changed(index, row.height - old, at_end=True)
        self._after_growth()

    def sync_entries(self, entries: Sequence[TranscriptEntry]) -> None:
        """Show `entries`, keeping the rendered rows that did not change and the scroll position."""
        current = [row.message_id for row in self._rows]
        if current != [entry.message_id for entry in entries]:
            stick = self._stick_to_bottom
            self.set_entries(entries)
            if not stick:
                self._stick_to_bottom = False
            return
        for entry in entries:
            self.update_entry(entry)

    def set_editing_enabled(self, enabled: bool) -> None:
        """Actions that change the conversation wait while a reply is being written."""
        if enabled != self._editing_enabled:
            self._editing_enabled = enabled
            self.viewport().update()

    def action_enabled(self, message_id: int, action: str) -> bool:
        row = self.row(message_id)
        if row is None or action not in row.actions():
            return False
        if action in EDITING_ACTIONS and not self._editing_enabled:
            return False
        if action == "previous":
            return row.entry.sibling_index > 1
        if action == "next":
            return row.entry.sibling_index < row.entry.sibling_count
        return action != "sibling"

    # -- streaming ----------------------------------------------------------------------------------

    def append_delta(self, message_id: int, text: str) -> None:
        """Add text to a streaming row's live reply; rendering waits for the next flush tick."""
        row = self.row(message_id)
        if row is not None and row.live is not None:
            row.live.append_answer(text)

    def append_reasoning(self, message_id: int, text: str) -> None:
        """Add reasoning to a streaming row's live reply, like append_delta; the Thinking clock starts."""
        row = self.row(message_id)
        if row is not None and row.live is not None:
            row.live.append_reasoning(text)

    def answer_was_reasoning(self, message_id: int) -> None:
        """The reply's answer so far was its thinking: it moves into the Thinking section."""
        row = self.row(message_id)
        if row is not None and row.live is not None:
            row.live.answer_was_reasoning()

    def _live_changed(self, message_id: int, change: ReplyChange) -> None:
        """A streaming row's live reply grew (or its answer moved into the reasoning): show it at the next
        flush tick."""
        index = self._index.get(message_id)
        if index is None:
            return
        row = self._rows[index]
        if change is ReplyChange.MOVED:
            old = row.height
            row.answer_moved()
            row.height = row.estimate(self._width, self._fonts)
            self._height_changed(index, row.height - old, at_end=True)
        self._dirty.add(message_id)
        if not self._flush_timer.isActive():
            self._flush_timer.start(FLUSH_INTERVAL_MS)
        if change is not ReplyChange.ANSWER and row.thinking_live and not self._thinking_timer.isActive():
            self._thinking_timer.start()
        if change is ReplyChange.MOVED:
            self._after_growth()

    def toggle_thinking(self, message_id: int) -> None:
        """Expand or collapse a reply's Thinking section, keeping its label where the user clicked it."""
        index = self._index.get(message_id)
        if index is None or not self._rows[index].has_thinking:
            return
        row = self._rows[index]
        row.set_expanded(not row.expanded)
        self._measure(index, at_end=True)
        self._update_scroll_range()
        geometry = row.geometry
        if geometry is not None and geometry.thinking is not None:
            self._ensure_visible(index, geometry.thinking)
        self.viewport().update()

    def toggle_sources(self, message_id: int) -> None:
        """Expand or collapse a reply's Sources block, keeping its label in view."""
        index = self._index.get(message_id)
        if index is None or not self._rows[index].entry.sources:
            return
        row = self._rows[index]
        row.set_sources_expanded(not row.sources_expanded)
        self._measure(index, at_end=True)
        self._update_scroll_range()
        geometry = row.geometry
        if geometry is not None and geometry.documents is not None and geometry.documents.toggle is not None:
            self._ensure_visible(index, geometry.documents.toggle)
        self.viewport().update()

    def toggle_card(self, message_id: int, card: int) -> None:
        """Expand or collapse one of a message's tool cards, keeping its header where the user clicked it."""
        index = self._index.get(message_id)
        if index is None or card >= len(self._rows[index].cards):
            return
        row = self._rows[index]
        row.set_card_expanded(card, card not in row.cards_expanded)
        self._measure(index, at_end=True)
        self._update_scroll_range()
        geometry = row.geometry
        if geometry is not None and card < len(geometry.cards):
            self._ensure_visible(index, geometry.cards[card].header)
        self.viewport().update()

    def set_cards_expanded(self, message_id: int, expanded: bool) -> None:
        """Expand or collapse all of a message's tool cards (from its context menu, or for a search hit in a
        tool's result)."""
        row = self.row(message_id)
        if row is None or not row.cards:
            return
        for card in range(len(row.cards)):
            row.set_card_expanded(card, expanded)
        self._relayout_all()

    def expand_thinking(self, message_id: int) -> None:
        """Open a reply's Thinking section (a search found words in it), unless thinking is hidden."""
        row = self.row(message_id)
        if row is not None and row.has_thinking and not row.expanded:
            row.set_expanded(True)
            self._relayout_all()

    def thinking_rect(self, message_id: int) -> QRect:
        """The Thinking label of a reply, in viewport coordinates, after scrolling it into view."""
        index = self._index[message_id]
        self._measure_all(index)
        geometry = self._rows[index].geometry
        assert geometry is not None
        if geometry.thinking is None:
            raise KeyError(f"message {message_id} shows no thinking")
        self._ensure_visible(index, geometry.thinking)
        return geometry.thinking.translated(self._row_origin(index)).toAlignedRect()

    def card_rect(self, message_id: int, card: int = 0) -> QRect:
        """A tool card's header, in viewport coordinates, after scrolling it into view."""
        index = self._index[message_id]
        self._measure_all(index)
        geometry = self._rows[index].geometry
        assert geometry is not None
        rect = geometry.cards[card].header
        self._ensure_visible(index, rect)
        return rect.translated(self._row_origin(index)).toAlignedRect()

    def _tick_thinking(self) -> None:
        """Repaint only the labels of replies thinking right now, so their clocks run."""
        live = False
        value = self.verticalScrollBar().value()
        for index in self._visible_range(value, value + self.viewport().height()):
            row = self._rows[index]
            if row.thinking_live and row.geometry is not None and row.geometry.thinking is not None:
                live = True
                self.viewport().update(
                    row.geometry.thinking.translated(self._row_origin(index)).toAlignedRect()
                )
        if not live and not any(row.thinking_live for row in self._rows):
            self._thinking_timer.stop()

    def finish(
        self,
        message_id: int,
        status: str,
        stats: ReplyStats | None = None,
        error: str | None = None,
        *,
        context_note: str | None = None,
    ) -> None:
        index = self._index.get(message_id)
        if index is None:
            return
        row = self._rows[index]
        self._dirty.discard(message_id)
        self._unlink(message_id)
        if row.live is not None:
            # Usually stopped already by whoever writes the reply; one the transcript made is stopped here.
            row.live.finish()
        old = row.height
        entry = replace(row.entry, status=status, stats=stats, error=error, context_note=context_note)
        row.finish(self._style, entry, self._deadline())
        if not self._measure(index, at_end=True) and row.height != old:
            self._height_changed(index, row.height - old, at_end=True)
        if row.draining:
            self._dirty.add(message_id)
            self._flush_timer.start(0)
        self._after_growth()

    # -- scrolling ----------------------------------------------------------------------------------

    def scroll_to_message(self, message_id: int, *, flash: bool = False) -> None:
        index = self._index.get(message_id)
        if index is None:
            return
        self._measure(index)
        self._update_scroll_range()
        self._stick_to_bottom = False
        self._scroll_to(max(0, self._top(index) - ROW_SPACING))
        self._stick_to_bottom = self.is_at_bottom()
        self._settle_viewport()
        if flash:
            self._rows[index].flash_until = time.monotonic() + FLASH_MS / 1000
            self._flash_timer.start(FLASH_MS)
        self.viewport().update()

    # -- locating things (tests, accessibility) -----------------------------------------------------

    def action_rect(self, message_id: int, action: str) -> QRect:
        """Where an action button is, in viewport coordinates, after scrolling it into view."""
        index = self._index[message_id]
        self._measure_all(index)
        geometry = self._rows[index].geometry
        assert geometry is not None
        rect = next((r for name, r in geometry.actions if name == action), None)
        if rect is None:
            raise KeyError(f"message {message_id} has no {action!r} action")
        self._ensure_visible(index, rect)
        return rect.translated(self._row_origin(index)).toAlignedRect()

    def documents_rect(self, message_id: int, kind: str, index: int = 0) -> QRect:
        """A file chip ("file"), the Sources line ("sources") or a source ("source"), in viewport
        coordinates, after scrolling it into view."""
        row_index = self._index[message_id]
        self._measure_all(row_index)
        geometry = self._rows[row_index].geometry
        assert geometry is not None
        documents = geometry.documents
        if documents is None:
            raise KeyError(f"message {message_id} shows no documents")
        if kind == "sources":
            if documents.toggle is None:
                raise KeyError(f"message {message_id} has no sources")
            rect = documents.toggle
        else:
            rect = (documents.chips if kind == "file" else documents.sources)[index]
        self._ensure_visible(row_index, rect)
        return rect.translated(self._row_origin(row_index)).toAlignedRect()

    def code_copy_rect(self, message_id: int, number: int = 0) -> QRect:
        """The Copy button of the message's `number`-th code block, in viewport coordinates."""
        index = self._index[message_id]
        self._measure_all(index)
        row = self._rows[index]
        blocks = [(y, s, c) for y, s in row.body_segments() for c in s.code_blocks if not c.continued]
        y, segment, code = blocks[number]
        button = copy_button(segment.code_rect(code), self._fonts).translated(ROW_PAD, y)
        self._ensure_visible(index, button)
        return button.translated(self._row_origin(index)).toAlignedRect()

    def text_point(self, message_id: int, text: str) -> QPoint:
        """The middle of the first character of `text` in the message, in viewport coordinates."""
        index = self._index[message_id]
        self._measure_all(index)
        for y, segment in self._rows[index].body_segments():
            cursor = segment.document.find(text)
            if cursor.isNull():
                continue
            block = cursor.block()
            layout = block.layout()
            line = layout.lineForTextPosition(cursor.selectionStart() - block.position())
            # PySide6 returns (x, position) for QTextLine.cursorToX.
            found = line.cursorToX(cursor.selectionStart() - block.position() + 1)
            x = float(found[0]) if isinstance(found, tuple) else 0.0
            block_top = segment.document.documentLayout().blockBoundingRect(block).top()
            point = QPointF(ROW_PAD + x - 2, y + block_top + line.y() + line.height() / 2)
            self._ensure_visible(index, QRectF(point, QSize(1, 1)))
            return (point + self._row_origin(index)).toPoint()
        raise KeyError(f"{text!r} is not in message {message_id}")

    # -- painting -----------------------------------------------------------------------------------

    def paintEvent(self, event: QPaintEvent) -> None:
        self._settle_viewport()
        painter = QPainter(self.viewport())
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        theme = self._theme
        painter.fillRect(event.rect(), QColor(theme.window))
        value = self.verticalScrollBar().value()
        exposed = event.rect()
        now = time.monotonic()
        rows = RowPainter(
            theme=theme,
            fonts=self._fonts,
            palette=self.palette(),
            ratio=self.viewport().devicePixelRatioF(),
            hover=self._hover,
            action_enabled=self.action_enabled,
            images=self._piece_images,
            thumbnail=self._thumbnail,
        )
        for index in self._visible_range(value + exposed.top(), value + exposed.bottom() + 1):
            row = self._rows[index]
            if row.geometry is None or row.measured_width != self._width:
                continue
            origin = self._row_origin(index)
            painter.save()
            painter.translate(origin)
            clip_top = value + exposed.top() - self._top(index)
            rows.paint_row(painter, row, clip_top, clip_top + exposed.height(), now)
            painter.restore()
        painter.end()

    # -- interaction --------------------------------------------------------------------------------

    def _hit(self, pos: QPoint) -> Hit | None:
        value = self.verticalScrollBar().value()
        y = pos.y() + value
        for index in self._visible_range(y, y + 1):
            hit = self._rows[index].hit(QPointF(pos.x() - VIEW_MARGIN, y - self._top(index)), self._fonts)
            if hit is not None:
                return hit
        return None

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        hit = self._hit(event.position().toPoint())
        if hit != self._hover:
            self._hover = hit
            clickable = hit is not None and (
                hit.kind != "action" or self.action_enabled(hit.message_id, hit.key)
            )
            cursor = Qt.CursorShape.PointingHandCursor if clickable else Qt.CursorShape.ArrowCursor
            self.viewport().setCursor(cursor)
            self.viewport().update()
        super().mouseMoveEvent(event)

    def leaveEvent(self, event: QEvent) -> None:
        if self._hover is not None:
            self._hover = None
            self.viewport().update()
        super().leaveEvent(event)

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self._pressed = self._hit(event.position().toPoint())
        super().mousePressEvent(event)

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            hit = self._hit(event.position().toPoint())
            pressed, self._pressed = self._pressed, None
            if hit is not None and hit == pressed:
                self._activate(hit)
        super().mouseReleaseEvent(event)

    def _activate(self, hit: Hit) -> None:
        if hit.kind == "link":
            self._open_link(QUrl(hit.key))
        elif hit.kind == "thinking":
            self.toggle_thinking(hit.message_id)
        elif hit.kind == "tool":
            self.toggle_card(hit.message_id, int(hit.key))
        elif hit.kind == "code":
            self._copy_code(hit)
        elif hit.kind == "sources":
            self.toggle_sources(hit.message_id)
        elif hit.kind == "file":
            self.fileClicked.emit(hit.message_id, int(hit.key))
        elif hit.kind == "source":
            self.sourceClicked.emit(hit.message_id, int(hit.key))
        elif self.action_enabled(hit.message_id, hit.key):
            self.trigger(hit.key, hit.message_id)

    def trigger(self, action: str, message_id: int) -> None:
        """Run a message action as if its button was clicked."""
        row = self.row(message_id)
        if row is None:
            return
        if action == "copy":
            text = row.copy_text
            QGuiApplication.clipboard().setText(text)
            self._show_copied(row, "message")
            self.copied.emit(text)
            return
        self.actionTriggered.emit(action, message_id)

    def _copy_code(self, hit: Hit) -> None:
        row = self.row(hit.message_id)
        if row is None:
            return
        segment_id, number = hit.key.split(":")
        for _top, segment in row.body_segments():
            if str(id(segment)) == segment_id:
                code = segment.code_blocks[int(number)].text
                QGuiApplication.clipboard().setText(code)
                self._show_copied(row, hit.key)
                self.copied.emit(code)
                return

    def _show_copied(self, row: MessageRow, key: str) -> None:
        for other in self._rows:
            other.copied = None
        row.copied = key
        if row.geometry is not None:
            row.geometry = None
            row.measured_width = None
        self._settle_viewport()
        self._feedback_timer.start(COPIED_FEEDBACK_MS)
        self.viewport().update()

    def _clear_feedback(self) -> None:
        for row in self._rows:
            if row.copied is not None:
                row.copied = None
                row.geometry = None
                row.measured_width = None
        self._settle_viewport()
        self.viewport().update()

    def _open_link(self, url: QUrl) -> None:
        if not is_openable(url):
            return
        if self._confirm_open(self, url):
            self._open_url(url)

    def viewportEvent(self, event: QEvent) -> bool:
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            hit = self._hit(event.pos())
            if hit is not None and hit.kind == "link":
                # Escaped: QToolTip renders anything that looks like HTML, and the target is model output.
                QToolTip.showText(event.globalPos(), f"<p>{html.escape(hit.key)}</p>", self.viewport())
            elif hit is not None and hit.kind == "action" and hit.key in ACTION_TIPS:
                QToolTip.showText(
                    event.globalPos(), html.escape(translated(ACTION_TIPS[hit.key])), self.viewport()
                )
            else:
                QToolTip.hideText()
                event.ignore()
            return True
        return super().viewportEvent(event)

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        pos = self.viewport().mapFrom(self, event.pos())
        y = pos.y() + self.verticalScrollBar().value()
        rows = self._visible_range(y, y + 1)
        if not rows:
            return
        row = self._rows[rows.start]
        menu = QMenu(self)
        if row.has_thinking:
            label = (
                QCoreApplication.translate("Transcript", "Hide thinking")
                if row.expanded
                else QCoreApplication.translate("Transcript", "Show thinking")
            )
            toggle = menu.addAction(label)
            toggle.triggered.connect(lambda _checked=False, m=row.message_id: self.toggle_thinking(m))
        if row.cards:
            # Open any that are closed; once all are open, close them.
            expand = len(row.cards_expanded) < len(row.cards)
            label = (
                QCoreApplication.translate("Transcript", "Show tool details")
                if expand
                else QCoreApplication.translate("Transcript", "Hide tool details")
            )
            cards = menu.addAction(label)
            cards.triggered.connect(
                lambda _checked=False, m=row.message_id, e=expand: self.set_cards_expanded(m, e)
            )
        for name in row.actions():
            if name == "sibling":
                continue
            action = menu.addAction(translated(ACTION_TIPS[name]))
            action.setEnabled(self.action_enabled(row.message_id, name))
            action.triggered.connect(lambda _checked=False, n=name, m=row.message_id: self.trigger(n, m))
        if not menu.isEmpty():
            menu.exec(event.globalPos())


def _keep_view_state(old: MessageRow, new: MessageRow) -> None:
    """What the user opened in a message's row stays open in the row that replaces it."""
    new.sources_expanded = old.sources_expanded
    if old.has_thinking:
        new.expanded = old.expanded
    new.cards_expanded = {card for card in old.cards_expanded if card < len(new.cards)}
