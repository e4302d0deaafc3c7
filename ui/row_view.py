"""The scrolling under the transcript: a column of message rows rendered and laid out lazily.

- A row has an estimated height until it is first near the viewport; an idle pass then measures the
  rest in small time slices, and rows far from the viewport drop their documents (keeping their height)
  so memory stays bounded however long the conversation is.
- Text waiting to be rendered (a streaming reply's deltas, a long message shown in slices) is rendered
  by `flush`, at most `RENDER_BUDGET_S` a call; deltas are coalesced on a 40 ms timer.
- The pieces of split blocks are laid out within a budget per event-loop turn shared by everything in
  that turn, those in view first; the idle pass lays out the rest, and repaints only when what is in view
  changed. A resize lays out again what is in view first; until its turn, a piece shows as laid out for
  the old width.
- When a row above the viewport changes height, the scroll position moves with it, so what the user
  reads does not jump; the view follows a growing reply only when it was already at the bottom.

`RowView` holds the rows and keeps them measured; what they are and how they are shown, painted and
clicked is the transcript's (`ui.transcript.Transcript`).
"""

from __future__ import annotations

import bisect
import math
import time

from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, QTimer
from PySide6.QtGui import QFont, QFontDatabase, QResizeEvent
from PySide6.QtWidgets import QAbstractScrollArea, QWidget

from ui.markdown import RenderStyle
from ui.message_row import MessageRow, RowFonts
from ui.theme import LIGHT, Theme

# Deltas arriving faster than this are merged into one render of the streaming row.
FLUSH_INTERVAL_MS = 40
# Within this many pixels of the end counts as "at the bottom", so a rounding step does not unstick.
BOTTOM_SLACK_PX = 4
# Rendering work per event-loop turn; a burst of text, or a very long message, is rendered in slices.
RENDER_BUDGET_S = 0.008
# Laying out pieces of split blocks per event-loop turn, all callers together: less than the render
# budget, to leave room for the paint that shows them.
PIECE_BUDGET_S = 0.005
# Rows keeping their rendered documents; the rest keep only their height.
MAX_RENDERED_ROWS = 300
# After a resize, pieces of split blocks wait this long to be laid out again, and so does the idle pass
# (resizes come one after the other while the user drags).
RESIZE_IDLE_DELAY_MS = 100
# Time the idle measuring pass may take per event-loop turn.
IDLE_SLICE_S = 0.004

VIEW_MARGIN = 16
ROW_SPACING = 10


class RowView(QAbstractScrollArea):
    """Rows of messages (`MessageRow`) in a vertical scroll area: renders and lays them out as they come
    into view or as time allows, and keeps the scroll position on what the user reads."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # Always there: a scroll bar that appears once the conversation outgrows the view would narrow
        # every row and make all of them lay out again.
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        self._theme: Theme = LIGHT
        self._style = self._make_style()
        self._fonts = RowFonts.for_font(self.font(), self._style.code_font)
        self._rows: list[MessageRow] = []
        self._index: dict[int, int] = {}
        self._tops: list[int] = []
        self._tops_valid = False
        self._total = 0
        self._width = self._row_width()
        self._dirty: set[int] = set()
        self._stick_to_bottom = True
        self._scrolling = False
        self._settling = False
        self._idle_queue: list[int] = []
        self._idle_next = 0
        self._idling = False

        self._flush_timer = QTimer(self)
        self._flush_timer.setSingleShot(True)
        self._flush_timer.setInterval(FLUSH_INTERVAL_MS)
        self._flush_timer.timeout.connect(self.flush)
        self._idle_timer = QTimer(self)
        self._idle_timer.setSingleShot(True)
        self._idle_timer.setInterval(0)
        self._idle_timer.timeout.connect(self._idle_measure)
        self._turn_deadline: float | None = None
        self._resized_until = 0.0
        # Fires once the events of the turn that started a budget are done: the next turn gets a new one.
        self._turn_timer = QTimer(self)
        self._turn_timer.setSingleShot(True)
        self._turn_timer.setInterval(0)
        self._turn_timer.timeout.connect(self._next_turn)

        bar = self.verticalScrollBar()
        bar.setSingleStep(40)
        bar.valueChanged.connect(self._on_scrolled)

    # -- styles -------------------------------------------------------------------------------------

    def _make_style(self) -> RenderStyle:
        font = QFont(self.font())
        code = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
        if font.pointSizeF() > 0:
            code.setPointSizeF(font.pointSizeF() * 0.95)
        return RenderStyle(self._theme, font, code)

    @property
    def theme(self) -> Theme:
        return self._theme

    def set_theme(self, theme: Theme) -> None:
        """Colours are baked into rendered documents (syntax, links), so every row renders again."""
        self._theme = theme
        self._restyle()

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._restyle()
        elif event.type() == QEvent.Type.LanguageChange:
            self._invalidate_layout()

    def _restyle(self) -> None:
        self._style = self._make_style()
        self._fonts = RowFonts.for_font(self.font(), self._style.code_font)
        for row in self._rows:
            row.release(restyle=True)
        self._invalidate_layout()

    def _invalidate_layout(self) -> None:
        for row in self._rows:
            row.measured_width = None
            row.geometry = None
        self._relayout_all()

    # -- rendering ----------------------------------------------------------------------------------

    def flush(self) -> None:
        """Render the text the rows in `_dirty` have waiting, as much as fits in this call's budget; what is
        left waits for the next turn of the event loop."""
        deadline = self._deadline()
        behind: set[int] = set()
        for message_id in self._dirty:
            index = self._index.get(message_id)
            if index is None:
                continue
            row = self._rows[index]
            # A reply shown in slices (not one being written) shares the turn's budget with the pieces
            # laid out in it: what it renders are mostly pieces, and they are cheap to make, not to show.
            until = deadline if row.streaming else min(deadline, self._turn_budget())
            changed = row.apply_pending(self._style, until)
            if row.draining:
                behind.add(message_id)
            if not changed:
                continue
            old = row.height
            if row.geometry is not None and row.geometry.width == self._width:
                # Pieces in what is left of this flush's budget (the rest wait for a later turn).
                row.relayout_growth(self._fonts, min(until, self._turn_budget()), self._window(index))
                if not row.exact:
                    self._schedule_idle()
            else:
                row.height = row.estimate(self._width, self._fonts)
                row.measured_width = None
            self._height_changed(index, row.height - old, at_end=True)
        self._dirty = behind
        if behind:
            # Out of time with text still to render: carry on at the next turn of the event loop.
            self._flush_timer.start(0)
        self._after_growth()

    def _deadline(self) -> float:
        return time.perf_counter() + RENDER_BUDGET_S

    def _turn_budget(self) -> float:
        """When this turn of the event loop has spent its budget for laying out pieces of split blocks.
        Everything in a turn shares it (a resize, the paint after it, a flush, the idle pass), so together
        they stay within one budget however often each asks."""
        if self._turn_deadline is None:
            self._turn_deadline = time.perf_counter() + PIECE_BUDGET_S
            self._turn_timer.start()
        return self._turn_deadline

    def _next_turn(self) -> None:
        self._turn_deadline = None

    def _after_growth(self) -> None:
        self._update_scroll_range()
        if self._stick_to_bottom:
            self._scroll_to(self.verticalScrollBar().maximum())
        self.viewport().update()

    # -- geometry -----------------------------------------------------------------------------------

    def _row_width(self) -> int:
        return max(120, self.viewport().width() - 2 * VIEW_MARGIN)

    def _reindex(self) -> None:
        self._index = {row.message_id: i for i, row in enumerate(self._rows)}

    def _ensure_tops(self) -> None:
        if self._tops_valid:
            return
        tops = []
        y = ROW_SPACING
        for row in self._rows:
            tops.append(y)
            y += row.height + ROW_SPACING
        self._tops = tops
        self._total = y
        self._tops_valid = True

    def _top(self, index: int) -> int:
        self._ensure_tops()
        return self._tops[index]

    def _height_changed(self, index: int, delta: int, *, at_end: bool = False) -> None:
        """Keep what the user reads in place when a row above the viewport changes height.

        `at_end`: the row grew or shrank at its bottom (a streaming reply); that moves nothing the user
        can see unless the whole row is above the viewport.
        """
        if delta == 0:
            return
        top = self._top(index)
        self._tops_valid = False
        value = self.verticalScrollBar().value()
        changed_above = top + self._rows[index].height - delta <= value if at_end else top < value
        if not self._stick_to_bottom and changed_above:
            self._update_scroll_range()
            self._scroll_to(value + delta)

    def _measure(self, index: int, *, at_end: bool = False, until: float | None = None) -> bool:
        """Lay out a row at the current width, what is in view first, until `until` (by default the end of
        this turn's budget, and a row whose part in view is laid out is left as it is). The pieces of a
        split block still not laid out are left to the idle pass. True if the row's height changed."""
        row = self._rows[index]
        top = self._top(index)
        value = self.verticalScrollBar().value()
        window = self._window(index)
        measured = row.measured_width == self._width and row.geometry is not None
        pieces_until = self._turn_budget() if until is None else until
        if until is None and time.perf_counter() < self._resized_until:
            # Mid-drag: pieces keep their layout for the last width until the resizing pauses.
            pieces_until = 0.0
        if measured and (row.exact or (until is None and row.exact_in(window))):
            return False
        if measured and time.perf_counter() >= pieces_until:
            self._schedule_idle()
            return False
        old = row.height
        # Where the top of the view is inside this row, to keep it there as blocks above it change height.
        pin = row.pin(window[0]) if measured and top < value < top + old else None
        deadline = self._deadline() if until is None else until
        row.layout(self._width, self._style, self._fonts, deadline, window, pieces_until)
        if not row.exact:
            self._schedule_idle()
        if row.draining:
            self._dirty.add(row.message_id)
            if not self._flush_timer.isActive():
                self._flush_timer.start(0)
        if row.height == old:
            return False
        place = row.unpin(pin) if pin is not None else None
        if place is not None and not self._stick_to_bottom:
            self._tops_valid = False
            self._update_scroll_range()
            self._scroll_to(top + round(place))
        else:
            self._height_changed(index, row.height - old, at_end=at_end)
        return True

    def _measure_all(self, index: int) -> None:
        """Render and lay out all of a row now: the places the locating helpers report must be exact."""
        row = self._rows[index]
        if row.segments is not None and row.draining:
            row.apply_pending(self._style, math.inf)
            row.geometry = None
        self._measure(index, until=math.inf)

    def _window(self, index: int) -> tuple[float, float]:
        """The viewport in the row's coordinates."""
        top = self._top(index) - self.verticalScrollBar().value()
        return float(-top), float(self.viewport().height() - top)

    def _relayout_all(self) -> None:
        self._width = self._row_width()
        self._tops_valid = False
        self._update_scroll_range()
        self._settle_viewport()
        if self._stick_to_bottom:
            self._scroll_to(self.verticalScrollBar().maximum())
        self._schedule_idle(restart=True)
        self.viewport().update()

    def _schedule_idle(self, *, restart: bool = False, delay_ms: int = 0) -> None:
        """Measure what is not exact yet in the background, from the viewport out (`restart`: from the
        start, even if a pass is under way), beginning in `delay_ms`."""
        if not restart and (self._idling or self._idle_timer.isActive()):
            return
        self._idle_queue = []
        self._idle_next = 0
        self._idle_timer.start(delay_ms)

    def _update_scroll_range(self) -> None:
        self._ensure_tops()
        bar = self.verticalScrollBar()
        maximum = max(0, self._total - self.viewport().height())
        if bar.maximum() != maximum or bar.pageStep() != self.viewport().height():
            self._scrolling = True
            try:
                bar.setRange(0, maximum)
                bar.setPageStep(self.viewport().height())
            finally:
                self._scrolling = False

    def _visible_range(self, top: int, bottom: int) -> range:
        self._ensure_tops()
        if not self._rows:
            return range(0)
        first = max(0, bisect.bisect_right(self._tops, top) - 1)
        if self._tops[first] + self._rows[first].height <= top:
            # `top` falls in the spacing below this row.
            first += 1
        last = bisect.bisect_left(self._tops, bottom)
        return range(first, min(len(self._rows), last))

    def _settle_viewport(self) -> None:
        """Measure the rows in view; repeat, because measuring moves rows in and out of view."""
        if self._settling:
            return
        self._settling = True
        try:
            for _ in range(8):
                value = self.verticalScrollBar().value()
                changed = False
                for index in self._visible_range(value, value + self.viewport().height()):
                    changed |= self._measure(index)
                self._update_scroll_range()
                if self._stick_to_bottom:
                    self._scroll_to(self.verticalScrollBar().maximum())
                if not changed:
                    return
        finally:
            self._settling = False

    def _idle_measure(self) -> None:
        """Measure the rows not measured yet, nearest to the viewport first, a few at a time.

        What it lays out is mostly out of view; where the view only shifts with it (blocks above it grew
        or shrank), nothing is repainted: a paint of a viewport full of table costs more than the slice.
        """
        deadline = min(self._turn_budget(), time.perf_counter() + IDLE_SLICE_S)
        if not self._idle_queue:
            self._idle_queue = self._idle_order()
        order = self._idle_queue
        shown = self._view_signature()
        self._idling = True
        try:
            while self._idle_next < len(order):
                index = order[self._idle_next]
                if index < len(self._rows):
                    self._measure(index, until=deadline)
                    if not self._rows[index].exact:
                        # Out of time in the middle of a long row: it goes on from there next time.
                        break
                self._idle_next += 1
                if time.perf_counter() > deadline:
                    break
            self._update_scroll_range()
            if self._stick_to_bottom:
                self._scroll_to(self.verticalScrollBar().maximum())
        finally:
            self._idling = False
        if self._view_signature() != shown:
            self.viewport().update()
        # After the scroll range caught up with the new heights: "far" is measured from what is shown.
        self._release_far_rows()
        if self._idle_next < len(order):
            self._idle_timer.start(0)

    def _view_signature(self) -> list[tuple[object, ...]]:
        """What the viewport shows, where: each row in view and, in viewport coordinates, its top, the
        blocks in view and its bottom if in view. Equal before and after a change: nothing to repaint."""
        value = self.verticalScrollBar().value()
        height = self.viewport().height()
        shown: list[tuple[object, ...]] = []
        for index in self._visible_range(value, value + height):
            row = self._rows[index]
            top = self._top(index) - value
            blocks = [
                (id(segment), y + top, segment.width)
                for y, segment in row.segments_between(-top, height - top)
            ]
            bottom = top + row.height if top + row.height <= height else None
            shown.append((id(row), row.measured_width, top if top >= 0 else None, bottom, blocks))
        return shown

    def _idle_order(self) -> list[int]:
        value = self.verticalScrollBar().value()
        visible = self._visible_range(value, value + self.viewport().height())
        middle = visible.start if visible else len(self._rows) - 1
        return sorted(range(len(self._rows)), key=lambda i: abs(i - middle))

    def _release_far_rows(self) -> None:
        rendered = [i for i, row in enumerate(self._rows) if row.segments is not None and not row.streaming]
        if len(rendered) <= MAX_RENDERED_ROWS:
            return
        value = self.verticalScrollBar().value()
        visible = self._visible_range(value, value + self.viewport().height())
        middle = visible.start if visible else 0
        rendered.sort(key=lambda i: abs(i - middle), reverse=True)
        for index in rendered[: len(rendered) - MAX_RENDERED_ROWS]:
            self._rows[index].release()

    # -- scrolling ----------------------------------------------------------------------------------

    def _scroll_to(self, value: int) -> None:
        self._scrolling = True
        try:
            self.verticalScrollBar().setValue(value)
        finally:
            self._scrolling = False

    def _on_scrolled(self, _value: int) -> None:
        if not self._scrolling:
            self._stick_to_bottom = self.is_at_bottom()
        self._settle_viewport()
        if not self._idling:
            self.viewport().update()

    def scrollContentsBy(self, dx: int, dy: int) -> None:
        """Nothing: `_on_scrolled` repaints, unless the scroll only follows content that moved with it."""

    def scroll_to_bottom(self) -> None:
        self._stick_to_bottom = True
        self._settle_viewport()
        self._update_scroll_range()
        self._scroll_to(self.verticalScrollBar().maximum())
        self.viewport().update()

    def is_at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - BOTTOM_SLACK_PX

    def _ensure_visible(self, index: int, rect: QRectF) -> None:
        """Scroll so `rect` (row coordinates) is inside the viewport."""
        top = self._top(index) + rect.top()
        bottom = self._top(index) + rect.bottom()
        value = self.verticalScrollBar().value()
        height = self.viewport().height()
        self._stick_to_bottom = False
        if top < value:
            self._scroll_to(int(top) - ROW_SPACING)
        elif bottom > value + height:
            self._scroll_to(int(bottom) - height + ROW_SPACING)
        self._stick_to_bottom = self.is_at_bottom()
        self._settle_viewport()

    def _row_origin(self, index: int) -> QPointF:
        return QPointF(VIEW_MARGIN, self._top(index) - self.verticalScrollBar().value())

    def row_top(self, message_id: int) -> int:
        """Where a message's row starts, in the coordinates the vertical scroll bar's value is in."""
        return self._top(self._index[message_id])

    def visible_message_ids(self) -> list[int]:
        value = self.verticalScrollBar().value()
        return [
            self._rows[i].message_id for i in self._visible_range(value, value + self.viewport().height())
        ]

    # -- resizing -----------------------------------------------------------------------------------

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._row_width() == self._width:
            self._update_scroll_range()
            self._settle_viewport()
            return
        anchor = self._anchor()
        for row in self._rows:
            if row.measured_width is not None:
                # Wider rows are shorter: a proportional guess until the row is measured again.
                row.height = max(1, round(row.height * self._width / max(1, self._row_width())))
            row.measured_width = None
            row.geometry = None
        self._relayout_all()
        self._restore_anchor(anchor)
        # While the window is being resized, pieces of split blocks show as laid out for the width before
        # (cut to the row) and the idle pass waits: a drag is not slowed down by laying out what would be
        # laid out again at the next width. Once it pauses, what is in view is laid out first.
        self._resized_until = time.perf_counter() + RESIZE_IDLE_DELAY_MS / 1000
        self._schedule_idle(restart=True, delay_ms=RESIZE_IDLE_DELAY_MS)

    def _anchor(self) -> tuple[int, float, tuple[int, float] | None] | None:
        """The row at the top of the view, how far into it the view starts, and where that is among its
        blocks (a long reply rewraps unevenly: the block being read is what should stay in view)."""
        if self._stick_to_bottom or not self._rows:
            return None
        value = self.verticalScrollBar().value()
        visible = self._visible_range(value, value + 1)
        if not visible:
            return None
        index = visible.start
        row = self._rows[index]
        offset = value - self._top(index)
        return index, offset / max(1, row.height), row.pin(offset)

    def _restore_anchor(self, anchor: tuple[int, float, tuple[int, float] | None] | None) -> None:
        if anchor is None:
            return
        index, fraction, pin = anchor
        row = self._rows[index]
        place = row.unpin(pin) if pin is not None else None
        for _ in range(4):
            # Laying out what comes into view can move the place again; a few rounds settle it.
            self._update_scroll_range()
            self._scroll_to(self._top(index) + round(fraction * row.height if place is None else place))
            if not self._measure(index):
                break
            place = row.unpin(pin) if pin is not None else None
        self._update_scroll_range()
        self._settle_viewport()
