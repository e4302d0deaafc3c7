"""The conversation transcript: a painted, virtualised list with one row per message.

Why painted rows instead of a widget per message: a `QTextBrowser` per message costs milliseconds to
create and lays out the whole message, so a 200-message conversation opened slowly and a long reply
re-laid out everything on each flush. Here a row is data plus cached documents:

- Rows are rendered lazily. A row has an estimated height until it is first near the viewport; an
  idle pass then measures the rest in small time slices, and rows far from the viewport drop their
  documents (keeping their height) so memory stays bounded however long the conversation is.
- A streaming reply is settled blocks (each rendered once, code highlighted when its fence closes)
  plus a live tail re-rendered on each flush; a tail too long to re-render cheaply grows by plain
  appends until it settles. Deltas are coalesced on a 40 ms timer.
- A table or code block too big for one document (a 2,000-row table, a 50,000-line listing) comes as
  pieces (`ui.markdown.split_block`) that make their documents when first needed. Those in view are
  laid out first, within a budget per event-loop turn shared by everything in that turn; the idle pass
  lays out the rest, and repaints only when what is in view changed. A resize lays out again what is
  in view first; until its turn, a piece shows as laid out for the old width.
- Painting draws only the rows, and within a row only the blocks, that intersect the exposed area.
- When a row above the viewport changes height, the scroll position moves with it, so what the user
  reads does not jump; the view follows a growing reply only when it was already at the bottom.

Everything the model wrote goes through `ui.markdown` (safe documents: no resource loading, no raw
HTML); links open only as http(s) after confirmation, and their tooltips are escaped.
"""

from __future__ import annotations

import bisect
import html
import math
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace

from PySide6.QtCore import (
    QT_TRANSLATE_NOOP,
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
    QAbstractTextDocumentLayout,
    QColor,
    QContextMenuEvent,
    QDesktopServices,
    QFont,
    QFontDatabase,
    QFontMetricsF,
    QGuiApplication,
    QHelpEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QPixmap,
    QResizeEvent,
)
from PySide6.QtWidgets import QAbstractScrollArea, QMenu, QToolTip, QWidget

from app.chat.live_reply import LiveReply, ReplyChange
from ui.markdown import (
    TABLE_BORDER,
    TABLE_CELL_PADDING,
    BlockSplitter,
    Piece,
    RenderStyle,
    Segment,
    append_plain,
    render_markdown,
    render_piece,
    render_plain,
    split_block,
    split_markdown,
)
from ui.safe_browser import ConfirmOpen, OpenUrl, confirm_open_url, is_openable
from ui.theme import LIGHT, Theme

# Deltas arriving faster than this are merged into one render of the streaming row.
FLUSH_INTERVAL_MS = 40
# Within this many pixels of the end counts as "at the bottom", so a rounding step does not unstick.
BOTTOM_SLACK_PX = 4
# The live tail is re-rendered as Markdown up to this size; past it, new text is appended as plain
# text until the block settles, so per-flush work stays bounded for an endless paragraph or code block.
TAIL_MARKDOWN_LIMIT = 3_000
# Rendering work per event-loop turn; a burst of text, or a very long message, is rendered in slices.
RENDER_BUDGET_S = 0.008
# Laying out pieces of split blocks per event-loop turn, all callers together: less than the render
# budget, to leave room for the paint that shows them.
PIECE_BUDGET_S = 0.005
# Memory for images of pieces as painted (a few screens of them).
PIECE_IMAGES_BYTES = 48 * 1024 * 1024
# Rows keeping their rendered documents; the rest keep only their height.
MAX_RENDERED_ROWS = 300
# After a resize, pieces of split blocks wait this long to be laid out again, and so does the idle pass
# (resizes come one after the other while the user drags).
RESIZE_IDLE_DELAY_MS = 100
# Time the idle measuring pass may take per event-loop turn.
IDLE_SLICE_S = 0.004
COPIED_FEEDBACK_MS = 1_500
FLASH_MS = 1_600
# How often the "Thinking… 3.2 s" label of a reply that is thinking right now is repainted.
THINKING_TICK_MS = 100
# How a reply's reasoning is first shown (app.settings.THINKING_DISPLAYS).
THINKING_DISPLAYS = ("collapsed", "expanded", "hidden")

VIEW_MARGIN = 16
ROW_SPACING = 10
ROW_PAD = 12
GAP = 4
# Between the rendered blocks of one message (each is its own document, so their margins do not meet).
SEGMENT_GAP = 8
ACTION_HEIGHT = 24
ACTION_PAD = 8
# The expanded reasoning sits right of a thin rule, indented this much.
THINKING_INDENT = 12

CONTEXT = "Transcript"
ROLE_LABELS = {
    "user": QT_TRANSLATE_NOOP("Transcript", "You"),
    "assistant": QT_TRANSLATE_NOOP("Transcript", "Hearth"),
    "system": QT_TRANSLATE_NOOP("Transcript", "System"),
}
STATUS_BADGES = {
    "streaming": QT_TRANSLATE_NOOP("Transcript", "Writing…"),
    "stopped": QT_TRANSLATE_NOOP("Transcript", "Stopped"),
    "error": QT_TRANSLATE_NOOP("Transcript", "Error"),
    "interrupted": QT_TRANSLATE_NOOP("Transcript", "Interrupted: Hearth closed before this reply finished"),
}
ACTION_LABELS = {
    "previous": "‹",
    "next": "›",
    "copy": QT_TRANSLATE_NOOP("Transcript", "Copy"),
    "edit": QT_TRANSLATE_NOOP("Transcript", "Edit"),
    "regenerate": QT_TRANSLATE_NOOP("Transcript", "Regenerate"),
    "delete": QT_TRANSLATE_NOOP("Transcript", "Delete"),
    "info": QT_TRANSLATE_NOOP("Transcript", "Info"),
}
ACTION_TIPS = {
    "previous": QT_TRANSLATE_NOOP("Transcript", "Previous version"),
    "next": QT_TRANSLATE_NOOP("Transcript", "Next version"),
    "copy": QT_TRANSLATE_NOOP("Transcript", "Copy as Markdown"),
    "edit": QT_TRANSLATE_NOOP("Transcript", "Edit this message (the current version is kept)"),
    "regenerate": QT_TRANSLATE_NOOP("Transcript", "Write another reply (this one is kept)"),
    "delete": QT_TRANSLATE_NOOP("Transcript", "Delete this message and what follows it"),
    "info": QT_TRANSLATE_NOOP("Transcript", "How this reply was made"),
}
# Actions that change the conversation; they wait while a reply is being written.
EDITING_ACTIONS = frozenset({"previous", "next", "edit", "regenerate", "delete"})
ROLE_ACTIONS = {
    "user": ("copy", "edit", "delete"),
    "assistant": ("copy", "regenerate", "delete", "info"),
}


def _tr(text: object) -> str:
    # `text` is a QT_TRANSLATE_NOOP marker (typed `object` by PySide6) or a plain string.
    return QCoreApplication.translate(CONTEXT, str(text))


@dataclass(frozen=True)
class ReplyStats:
    ttft_s: float | None
    tokens_per_second: float | None
    completion_tokens: int | None
    prompt_tokens: int | None = None

    def describe(self) -> str:
        parts = []
        if self.ttft_s is not None:
            parts.append(
                QCoreApplication.translate("Transcript", "TTFT {seconds} s").format(
                    seconds=f"{self.ttft_s:.2f}"
                )
            )
        if self.tokens_per_second is not None:
            parts.append(
                QCoreApplication.translate("Transcript", "{rate} tok/s").format(
                    rate=f"{self.tokens_per_second:.1f}"
                )
            )
        if self.prompt_tokens is not None:
            parts.append(
                QCoreApplication.translate("Transcript", "{count} tokens in").format(count=self.prompt_tokens)
            )
        if self.completion_tokens is not None:
            parts.append(
                QCoreApplication.translate("Transcript", "{count} tokens out").format(
                    count=self.completion_tokens
                )
            )
        return " · ".join(parts)


@dataclass(frozen=True)
class TranscriptEntry:
    message_id: int
    role: str
    content: str
    status: str = "complete"
    error: str | None = None
    stats: ReplyStats | None = None
    sibling_index: int = 1
    sibling_count: int = 1
    context_note: str | None = None
    reasoning: str | None = None
    # Finished: how long the model thought. Streaming: how long it has thought so far (the row's live
    # reply keeps time from there).
    reasoning_seconds: float | None = None
    # Streaming: the reply as it is being written, held by whoever writes it (the window's chat session);
    # the row shows it. Without one the row makes its own from the fields above.
    live: LiveReply | None = field(default=None, compare=False, repr=False)


@dataclass
class _Geometry:
    """Where things are inside a row, in row coordinates, for one width."""

    width: int
    header: QRectF
    body_top: float
    seg_tops: list[float]
    body_height: float
    badge: QRectF | None
    note: QRectF | None
    stats: QRectF | None
    actions: list[tuple[str, QRectF]]
    height: int
    # The "Thinking" line (click to expand or collapse) and, when expanded, the top of the reasoning.
    thinking: QRectF | None = None
    thinking_top: float = 0.0


@dataclass(frozen=True)
class _Hit:
    message_id: int
    kind: str  # "action" | "code" | "link"
    key: str


class _Budget:
    """Laying out blocks until a deadline, a step at a time: one more step is started only when one like
    the last few still fits before it (the first whenever there is time at all, so every call gets
    somewhere). Making a piece's document and laying it out are a step each."""

    # Seconds a step has taken lately (the same for every row: the same kinds of blocks).
    cost = 0.0

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.used = False

    def allows(self) -> bool:
        now = time.perf_counter()
        return now < self.deadline and (not self.used or now + _Budget.cost <= self.deadline)

    def layout(self, segment: Segment, width: float) -> bool:
        """Lay out `segment` at `width`, making its document first if needed; False if the time ran out
        in between (it is laid out next time)."""
        if segment.lazy and not segment.rendered:
            self._step(lambda: segment.document)
            if not self.allows():
                return False
        self._step(lambda: segment.layout(width))
        return True

    def _step(self, work: Callable[[], object]) -> None:
        started = time.perf_counter()
        work()
        _Budget.cost = 0.7 * _Budget.cost + 0.3 * (time.perf_counter() - started)
        self.used = True


class _PieceImages:
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

    def clear(self) -> None:
        self._images.clear()
        self._bytes = 0

    def _drop(self, key: int) -> None:
        found = self._images.pop(key, None)
        if found is not None:
            self._bytes -= found[2].width() * found[2].height() * 4


@dataclass(frozen=True)
class _Fonts:
    body: QFont
    code: QFont
    role: QFont
    small: QFont
    action: QFont
    # For estimating the height of rows not laid out yet.
    average_char: float
    line: float
    chrome: float
    code_line: float


class MessageRow:
    """One message: its text, its rendered blocks (when near the viewport) and its painted layout."""

    def __init__(self, entry: TranscriptEntry, *, thinking_display: str = "collapsed") -> None:
        self.entry = entry
        self._content = entry.content
        self._reasoning = entry.reasoning or ""
        # A streaming reply's text and thinking clock are read from its live reply; the row counts the
        # pieces of it taken in so far, so each flush takes only the new ones.
        self.live: LiveReply | None = None
        self._answer_taken = 0
        self._reasoning_taken = 0
        if entry.status == "streaming":
            self.live = entry.live or LiveReply(
                entry.content, entry.reasoning or "", thought_seconds=entry.reasoning_seconds
            )
            self._answer_taken = len(self.live.answer_pieces)
            self._reasoning_taken = len(self.live.reasoning_pieces)
        # The reasoning's document: only while the section is expanded and the row is rendered.
        self.thinking: Segment | None = None
        self.show_thinking = thinking_display != "hidden"
        self.expanded = thinking_display == "expanded"
        self.segments: list[Segment] | None = None
        self._splitter: BlockSplitter | None = None
        self._tail: Segment | None = None
        self._tail_plain = False
        self._tail_generation = -1
        self._tail_stale = False
        self._backlog: deque[str] = deque()
        # The block being cut into pieces (`split_block`), a few at a time like the backlog.
        self._cutting: Iterator[str | Piece] | None = None
        self.height = 0
        # The width `height` is for; None while it is an estimate for the whole row.
        self.measured_width: int | None = None
        # False while some blocks have only an estimated height at `measured_width` (a reply of thousands
        # of blocks is laid out where it is seen first, the rest a slice at a time).
        self.exact = False
        self.geometry: _Geometry | None = None
        self.flash_until = 0.0
        self.copied: str | None = None
        if entry.status == "streaming":
            self._splitter = BlockSplitter()

    # -- what tests and the window read -------------------------------------------------------------

    @property
    def message_id(self) -> int:
        return self.entry.message_id

    @property
    def role(self) -> str:
        return self.entry.role

    @property
    def status(self) -> str:
        return self.entry.status

    @property
    def streaming(self) -> bool:
        return self._splitter is not None

    @property
    def text(self) -> str:
        return self.live.answer if self.live is not None else self._content

    @property
    def reasoning_text(self) -> str:
        return self.live.reasoning if self.live is not None else self._reasoning

    def _taken_answer(self) -> str:
        if self.live is None:
            return self._content
        return "".join(self.live.answer_pieces[: self._answer_taken])

    def _taken_reasoning(self) -> str:
        if self.live is None:
            return self._reasoning
        return "".join(self.live.reasoning_pieces[: self._reasoning_taken])

    @property
    def has_thinking(self) -> bool:
        """A "Thinking" section is shown: there is reasoning, and the user has not hidden it."""
        reasoning = self.live.reasoning_pieces if self.live is not None else self._reasoning
        return self.show_thinking and bool(reasoning)

    @property
    def thinking_live(self) -> bool:
        return self.streaming and self.live is not None and self.live.thinking

    def thinking_label(self, now: float) -> str:
        arrow = "▾" if self.expanded else "▸"
        elapsed = self.live.thought_seconds(now) if self.live is not None else self.entry.reasoning_seconds
        if self.thinking_live:
            seconds = f"{elapsed or 0.0:.1f}"
            return f"{arrow} " + QCoreApplication.translate("Transcript", "Thinking… {seconds} s").format(
                seconds=seconds
            )
        if elapsed is None:
            return f"{arrow} " + QCoreApplication.translate("Transcript", "Thinking")
        seconds = f"{elapsed:.1f}" if elapsed < 10 else f"{elapsed:.0f}"
        return f"{arrow} " + QCoreApplication.translate("Transcript", "Thought for {seconds} s").format(
            seconds=seconds
        )

    @property
    def badge_text(self) -> str:
        badge = _tr(STATUS_BADGES[self.status]) if self.status in STATUS_BADGES else ""
        error = self.entry.error
        if error:
            badge = f"{badge}: {error}" if badge else error
        return badge

    @property
    def stats_text(self) -> str:
        return self.entry.stats.describe() if self.entry.stats else ""

    @property
    def note_text(self) -> str:
        note = self.entry.context_note
        return QCoreApplication.translate("Transcript", "Context: {note}").format(note=note) if note else ""

    @property
    def sibling_text(self) -> str:
        if self.entry.sibling_count <= 1:
            return ""
        return f"{self.entry.sibling_index}/{self.entry.sibling_count}"

    def actions(self) -> list[str]:
        if self.streaming:
            return []
        names: list[str] = []
        if self.entry.sibling_count > 1:
            names += ["previous", "sibling", "next"]
        names += ROLE_ACTIONS.get(self.role, ("copy",))
        return names

    def rendered_text(self) -> str:
        """What the row shows now, as plain text (nothing until it has been rendered)."""
        segments = self.segments or []
        pieces = [segment.plain_text() for segment in segments]
        if self._tail is not None:
            pieces.append(self._tail.plain_text())
        return "\n".join(pieces)

    def code_blocks(self) -> list[str]:
        return [
            code.text for segment in self.segments or [] for code in segment.code_blocks if not code.continued
        ]

    # -- rendering ---------------------------------------------------------------------------------

    def render(self, style: RenderStyle, deadline: float) -> None:
        """Create the documents: as many blocks as fit before `deadline`, the rest stay in the backlog."""
        if self.segments is not None:
            return
        text = self._taken_answer()
        self.geometry = None
        self.segments = []
        if self.role == "user":
            # What the user typed is shown as typed; only model output is read as Markdown.
            if text:
                self.segments.append(render_plain(text, style))
            return
        if self._splitter is not None:
            self._splitter = BlockSplitter()
            self._backlog.extend(self._splitter.feed(text))
            self._tail = None
            self._tail_stale = True
        else:
            self._backlog.extend(split_markdown(text))
        self._drain(style, deadline)

    @property
    def draining(self) -> bool:
        """Blocks settled but not rendered yet (a burst of text, or a long message shown in slices)."""
        return (
            bool(self._backlog)
            or self._cutting is not None
            or (self._tail_stale and self._splitter is not None)
        )

    def release(self, *, restyle: bool = False) -> None:
        """Drop the documents (the height stays valid for the width it was measured at). A streaming row
        keeps them, unless the style changed and they must be rendered again anyway."""
        if self.streaming and not restyle:
            return
        self.segments = None
        self.geometry = None
        self._backlog.clear()
        self._cutting = None
        self._tail = None
        self.thinking = None

    def answer_moved(self) -> None:
        """The model closed a thinking block it never opened: the live reply's answer so far moved into its
        reasoning (shown collapsed unless the user expands it), and the answer shown starts over."""
        self._answer_taken = 0
        self._reasoning_taken = 0
        self.thinking = None
        if self._splitter is not None:
            self._splitter = BlockSplitter()
        if self.segments is not None:
            self.segments = []
        self._backlog.clear()
        self._cutting = None
        self._tail = None
        self._tail_stale = False
        self.geometry = None
        self.measured_width = None

    def set_expanded(self, expanded: bool) -> None:
        self.expanded = expanded
        if not expanded:
            self.thinking = None
        self.geometry = None
        self.measured_width = None

    def set_thinking_display(self, display: str) -> None:
        self.show_thinking = display != "hidden"
        self.set_expanded(display == "expanded")

    def _ensure_thinking(self, style: RenderStyle) -> bool:
        """Render the reasoning when its section is open. Plain text, grown by appends while it streams:
        per-flush work stays proportional to the new text however long the model thinks."""
        if self.thinking is not None or not self.expanded or not self.has_thinking:
            return False
        # Only what was taken in: apply_pending appends the rest when it takes it.
        self.thinking = render_plain(self._taken_reasoning(), style)
        return True

    def apply_pending(self, style: RenderStyle, deadline: float) -> bool:
        """Move queued text into the documents: new settled blocks once each, then the tail.

        Rendering stops at `deadline`; what is left waits in the backlog for the next call.
        """
        changed = False
        live = self.live
        if live is not None and self._reasoning_taken < len(live.reasoning_pieces):
            reasoning = "".join(live.reasoning_pieces[self._reasoning_taken :])
            self._reasoning_taken = len(live.reasoning_pieces)
            changed = True
            if self.thinking is not None:
                append_plain(self.thinking, reasoning)
        if live is not None and self._answer_taken < len(live.answer_pieces):
            text = "".join(live.answer_pieces[self._answer_taken :])
            self._answer_taken = len(live.answer_pieces)
            changed = True
            if self.segments is not None and self._splitter is not None:
                settled = self._splitter.feed(text)
                if settled:
                    self._backlog.extend(settled)
                    # The old tail's text is in those blocks now; showing both would repeat it.
                    self._tail = None
                self._tail_stale = True
        if self.segments is None:
            return changed
        changed = self._ensure_thinking(style) or changed
        return self._drain(style, deadline) or changed

    def finish(self, style: RenderStyle, entry: TranscriptEntry, deadline: float) -> None:
        self.apply_pending(style, deadline)
        if self._splitter is not None and self.segments is not None:
            self._backlog.extend(self._splitter.finish())
        self._splitter = None
        self._tail = None
        self._tail_stale = False
        if self.live is not None:
            # Finished, the row holds the reply as any other: the text, and how long the model thought.
            self._content, self._reasoning = self.live.answer, self.live.reasoning
            entry = replace(entry, reasoning_seconds=self.live.thought_seconds(), live=None)
            self.live = None
        self.entry = replace(entry, content=self.text, reasoning=self.reasoning_text or None)
        if self.segments is not None:
            self._drain(style, deadline)
        self.geometry = None
        self.measured_width = None

    def _drain(self, style: RenderStyle, deadline: float) -> bool:
        assert self.segments is not None
        changed = False
        while self._backlog or self._cutting is not None:
            if self._cutting is None:
                self._cutting = split_block(self._backlog.popleft())
            item = next(self._cutting, None)
            if item is None:
                self._cutting = None
                continue
            if isinstance(item, str):
                segment = render_markdown(item, style)
                if self.geometry is not None:
                    segment.layout(self.content_width(self.geometry.width))
            else:
                # Made when first needed, and laid out where it is seen first (see `layout`).
                segment = render_piece(item, style)
                self.exact = False
            self.segments.append(segment)
            changed = True
            if time.perf_counter() >= deadline:
                return changed
        if self._splitter is not None and self._tail_stale:
            self._update_tail(style)
            self._tail_stale = False
            changed = True
        return changed

    def _update_tail(self, style: RenderStyle) -> None:
        assert self._splitter is not None
        pending = self._splitter.pending
        generation = self._splitter.settled_count
        if not pending.strip():
            self._tail = None
        elif len(pending) <= TAIL_MARKDOWN_LIMIT:
            self._tail = render_markdown(pending, style, settled=False)
            self._tail_plain = False
        elif self._tail is not None and self._tail_plain and generation == self._tail_generation:
            append_plain(self._tail, pending[len(self._tail.source) :])
        else:
            self._tail = render_plain(pending, style, monospace=self._splitter.in_fence)
            self._tail_plain = True
        self._tail_generation = generation
        if self._tail is not None and self.geometry is not None:
            self._tail.layout(self.content_width(self.geometry.width))

    # -- layout ------------------------------------------------------------------------------------

    @staticmethod
    def content_width(width: int) -> float:
        return float(max(40, width - 2 * ROW_PAD))

    def estimate(self, width: int, fonts: _Fonts) -> int:
        per_line = max(20.0, self.content_width(width) / fonts.average_char)
        text = self.text
        lines = text.count("\n") + len(text) / per_line + 1
        if self.has_thinking:
            lines += 1
            if self.expanded:
                reasoning = self.reasoning_text
                lines += reasoning.count("\n") + len(reasoning) / per_line
        return math.ceil(fonts.chrome + lines * fonts.line)

    def layout(
        self,
        width: int,
        style: RenderStyle,
        fonts: _Fonts,
        deadline: float,
        window: tuple[float, float] | None = None,
        pieces_until: float | None = None,
    ) -> int:
        """Geometry for `width`; renders first if needed (see `render`). Returns the height.

        The pieces of split blocks are laid out while there is time before `pieces_until` (by default
        `deadline`), those in `window` (row coordinates: what is in view) first; the rest keep an estimated
        height (`exact` is False) until a later call lays them out.
        """
        self.render(style, deadline)
        assert self.segments is not None
        self._ensure_thinking(style)
        content = self.content_width(width)
        role_h = QFontMetricsF(fonts.role).height()
        header = QRectF(ROW_PAD, ROW_PAD, content, role_h)
        thinking, thinking_top, body_top = self._place_thinking(content, header.bottom() + GAP, fonts)
        geometry = _Geometry(
            width, header, body_top, [], 0.0, None, None, None, [], 0, thinking, thinking_top
        )
        self.geometry = geometry
        self._place_segments(
            0, body_top, content, fonts, deadline if pieces_until is None else pieces_until, window
        )
        self._layout_footer(fonts)
        self.measured_width = width
        return self.height

    def _place_segments(
        self,
        first: int,
        y: float,
        content: float,
        fonts: _Fonts,
        deadline: float,
        window: tuple[float, float] | None,
    ) -> None:
        """Place the blocks from number `first` on, below `y` (the bottom of the one before), then the tail.

        Blocks not laid out at `content` width are laid out while there is time before `deadline`, those
        in `window` first; the others keep the height they had at another width, or an estimate.
        """
        geometry = self.geometry
        assert geometry is not None and self.segments is not None
        segments = self.segments
        for segment in segments[first:]:
            if segment.width < 0 and not segment.height:
                segment.height = self._estimate_segment(segment, content, fonts)
        budget = _Budget(deadline)
        laid_out = False
        if window is not None:
            self._place_tops(first, y)
            tops = geometry.seg_tops
            for index in range(max(first, bisect.bisect_right(tops, window[0]) - 1), len(segments)):
                if tops[index] >= window[1]:
                    break
                if segments[index].width != content and budget.allows():
                    laid_out |= budget.layout(segments[index], content)
        exact = True
        for segment in segments[first:]:
            if segment.width == content:
                continue
            # A block of its own is laid out at once, as it was rendered; only pieces wait their turn.
            if (not segment.lazy or budget.allows()) and budget.layout(segment, content):
                laid_out = True
            else:
                exact = False
        if laid_out or window is None:
            self._place_tops(first, y)
        y = geometry.seg_tops[-1] + segments[-1].height if geometry.seg_tops else geometry.body_top
        if self._tail is not None:
            if geometry.seg_tops:
                y += SEGMENT_GAP
            y += self._tail.layout(content)
        geometry.body_height = y - geometry.body_top
        self.exact = exact and all(segment.width == content for segment in segments[:first])

    def _place_tops(self, first: int, y: float) -> None:
        geometry = self.geometry
        assert geometry is not None and self.segments is not None
        tops = geometry.seg_tops
        del tops[first:]
        for segment in self.segments[first:]:
            if tops:
                y += -segment.overlap if segment.joined else SEGMENT_GAP
            tops.append(y)
            y += segment.height

    @staticmethod
    def _estimate_segment(segment: Segment, content: float, fonts: _Fonts) -> float:
        """A height for a block not laid out yet: whole pixels, like the pieces' real heights."""
        source = segment.source
        if segment.columns:
            # Table rows under the table's head, which only the first piece shows.
            rows = source.count("\n") - (2 if segment.joined else 1)
            return math.ceil(rows * (fonts.line + 2 * TABLE_CELL_PADDING + TABLE_BORDER))
        line = fonts.code_line if segment.code_blocks else fonts.line
        per_line = max(20.0, content / fonts.average_char)
        return math.ceil((source.count("\n") + len(source) / per_line + 1) * line)

    def exact_in(self, window: tuple[float, float]) -> bool:
        """Whether the blocks in `window` (row coordinates) are laid out at the row's width."""
        geometry = self.geometry
        if geometry is None or self.segments is None:
            return False
        if self.exact:
            return True
        content = self.content_width(geometry.width)
        return all(segment.width == content for _top, segment in self.segments_between(*window))

    def pin(self, y: float) -> tuple[int, float] | None:
        """Where row coordinate `y` is among the blocks: (block, fraction of it above `y`), to find the same
        place again (`unpin`) once blocks above it, or the width, changed."""
        geometry = self.geometry
        if geometry is None or not self.segments or not geometry.seg_tops or y < geometry.body_top:
            return None
        index = bisect.bisect_right(geometry.seg_tops, y) - 1
        return index, (y - geometry.seg_tops[index]) / max(1.0, self.segments[index].height)

    def unpin(self, pin: tuple[int, float]) -> float | None:
        geometry = self.geometry
        index, fraction = pin
        if geometry is None or self.segments is None or index >= len(geometry.seg_tops):
            return None
        return geometry.seg_tops[index] + fraction * self.segments[index].height

    def relayout_growth(self, fonts: _Fonts, deadline: float, window: tuple[float, float]) -> None:
        """After a flush: lay out only the new blocks (see `layout` for `deadline` and `window`) and the
        tail, then the footer."""
        geometry = self.geometry
        assert geometry is not None and self.segments is not None
        content = self.content_width(geometry.width)
        # The reasoning above the answer may have grown (or appeared): the answer's blocks move down.
        thinking, thinking_top, body_top = self._place_thinking(
            content, geometry.header.bottom() + GAP, fonts
        )
        shift = body_top - geometry.body_top
        if shift:
            geometry.seg_tops = [top + shift for top in geometry.seg_tops]
        geometry.thinking, geometry.thinking_top, geometry.body_top = thinking, thinking_top, body_top
        first = len(geometry.seg_tops)
        y = geometry.body_top
        if first:
            y = geometry.seg_tops[first - 1] + self.segments[first - 1].height
        self._place_segments(first, y, content, fonts, deadline, window)
        self._layout_footer(fonts)

    def _place_thinking(
        self, content: float, top: float, fonts: _Fonts
    ) -> tuple[QRectF | None, float, float]:
        """(the "Thinking" line, the top of the reasoning, the top of the answer), the row's body starting
        at `top`."""
        if not self.has_thinking:
            return None, top, top
        line = QRectF(ROW_PAD, top, content, math.ceil(QFontMetricsF(fonts.small).height()) + 4)
        reasoning_top = line.bottom() + GAP
        y = reasoning_top
        if self.expanded and self.thinking is not None:
            y += self.thinking.layout(self._thinking_width(content)) + SEGMENT_GAP
        return line, reasoning_top, y

    @staticmethod
    def _thinking_width(content: float) -> float:
        return max(40.0, content - THINKING_INDENT)

    def _layout_footer(self, fonts: _Fonts) -> None:
        geometry = self.geometry
        assert geometry is not None
        content = self.content_width(geometry.width)
        y = geometry.body_top + geometry.body_height
        if self.streaming and not self.segments and self._tail is None:
            y += QFontMetricsF(fonts.body).lineSpacing()
        small = QFontMetricsF(fonts.small)
        flags = int(Qt.TextFlag.TextWordWrap)

        def block(text: str) -> QRectF | None:
            nonlocal y
            if not text:
                return None
            bounds = small.boundingRect(QRectF(0, 0, content, 1e6), flags, text)
            rect = QRectF(ROW_PAD, y + GAP, content, math.ceil(bounds.height()))
            y = rect.bottom()
            return rect

        geometry.badge = block(self.badge_text)
        geometry.note = block(self.note_text)
        geometry.stats = block(self.stats_text)
        geometry.actions = []
        names = self.actions()
        if names:
            metrics = QFontMetricsF(fonts.action)
            x = float(ROW_PAD) - ACTION_PAD
            top = y + GAP
            for name in names:
                label = self.sibling_text if name == "sibling" else self.action_label(name)
                w = metrics.horizontalAdvance(label) + 2 * ACTION_PAD
                geometry.actions.append((name, QRectF(x, top, w, ACTION_HEIGHT)))
                x += w + 2
            y = top + ACTION_HEIGHT
        geometry.height = math.ceil(y + ROW_PAD)
        self.height = geometry.height

    def action_label(self, name: str) -> str:
        if name == "copy" and self.copied == "message":
            return QCoreApplication.translate("Transcript", "Copied")
        return _tr(ACTION_LABELS[name]) if name in ACTION_LABELS else name

    def body_segments(self) -> list[tuple[float, Segment]]:
        """(top in row coordinates, segment) for each block, the live tail last."""
        geometry = self.geometry
        if geometry is None or self.segments is None:
            return []
        placed = list(zip(geometry.seg_tops, self.segments, strict=False))
        if self._tail is not None:
            placed.append((self._tail_top(), self._tail))
        return placed

    def segments_between(self, top: float, bottom: float) -> list[tuple[float, Segment]]:
        """The blocks intersecting [top, bottom) in row coordinates, found by bisection: painting a long
        reply costs the same at its end as at its start."""
        geometry = self.geometry
        if geometry is None or self.segments is None:
            return []
        tops = geometry.seg_tops
        found: list[tuple[float, Segment]] = []
        for index in range(max(0, bisect.bisect_right(tops, top) - 1), len(tops)):
            y = tops[index]
            if y >= bottom:
                return found
            segment = self.segments[index]
            if y + segment.height > top:
                found.append((y, segment))
        if self._tail is not None:
            y = self._tail_top()
            if y < bottom and y + self._tail.height > top:
                found.append((y, self._tail))
        return found

    def _tail_top(self) -> float:
        geometry = self.geometry
        assert geometry is not None and self.segments is not None
        tops = geometry.seg_tops
        if not tops:
            return geometry.body_top
        return tops[-1] + self.segments[len(tops) - 1].height + SEGMENT_GAP


class Transcript(QAbstractScrollArea):
    """Emits `actionTriggered(action, message_id)` for everything but copying, which it does itself."""

    actionTriggered = Signal(str, int)
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
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # Always there: a scroll bar that appears once the conversation outgrows the view would narrow
        # every row and make all of them lay out again.
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOn)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.viewport().setMouseTracking(True)
        self._confirm_open = confirm_open
        self._open_url = open_url
        self._theme: Theme = LIGHT
        self._style = self._make_style()
        self._fonts = self._make_fonts()
        self._rows: list[MessageRow] = []
        self._index: dict[int, int] = {}
        self._tops: list[int] = []
        self._tops_valid = False
        self._total = 0
        self._width = self._row_width()
        self._dirty: set[int] = set()
        self._editing_enabled = True
        self._hover: _Hit | None = None
        self._pressed: _Hit | None = None
        self._stick_to_bottom = True
        self._scrolling = False
        self._settling = False
        self._idle_queue: list[int] = []
        self._idle_next = 0
        self._idling = False
        self._thinking_display = "collapsed"
        # Per streaming row: what stops it hearing from its live reply.
        self._live_links: dict[int, Callable[[], None]] = {}

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
        self._piece_images = _PieceImages(PIECE_IMAGES_BYTES)
        # Fires once the events of the turn that started a budget are done: the next turn gets a new one.
        self._turn_timer = QTimer(self)
        self._turn_timer.setSingleShot(True)
        self._turn_timer.setInterval(0)
        self._turn_timer.timeout.connect(self._next_turn)
        self._feedback_timer = QTimer(self)
        self._feedback_timer.setSingleShot(True)
        self._feedback_timer.timeout.connect(self._clear_feedback)
        self._flash_timer = QTimer(self)
        self._flash_timer.setSingleShot(True)
        self._flash_timer.timeout.connect(self.viewport().update)
        self._thinking_timer = QTimer(self)
        self._thinking_timer.setInterval(THINKING_TICK_MS)
        self._thinking_timer.timeout.connect(self._tick_thinking)

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

    def _make_fonts(self) -> _Fonts:
        body = QFont(self.font())
        role = QFont(body)
        role.setBold(True)
        small = QFont(body)
        action = QFont(body)
        if body.pointSizeF() > 0:
            small.setPointSizeF(body.pointSizeF() * 0.86)
            action.setPointSizeF(body.pointSizeF() * 0.9)
        metrics = QFontMetricsF(body)
        chrome = 2 * ROW_PAD + QFontMetricsF(role).height() + GAP + ACTION_HEIGHT + 2 * GAP
        return _Fonts(
            body,
            self._style.code_font,
            role,
            small,
            action,
            max(1.0, metrics.averageCharWidth()),
            metrics.lineSpacing(),
            chrome,
            QFontMetricsF(self._style.code_font).lineSpacing(),
        )

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
        self._fonts = self._make_fonts()
        for row in self._rows:
            row.release(restyle=True)
        self._invalidate_layout()

    def _invalidate_layout(self) -> None:
        for row in self._rows:
            row.measured_width = None
            row.geometry = None
        self._relayout_all()

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
        self.clear()
        self._rows = [self._new_row(entry) for entry in entries]
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
        if row is None or row.streaming:
            return
        if (
            entry.content != row.text
            or entry.role != row.role
            or (entry.reasoning or "") != row.reasoning_text
        ):
            index = self._index[entry.message_id]
            self._rows[index] = self._new_row(entry)
            self._rows[index].height = row.height
            if row.has_thinking:
                self._rows[index].expanded = row.expanded
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

    def _reindex(self) -> None:
        self._index = {row.message_id: i for i, row in enumerate(self._rows)}

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

    def flush(self) -> None:
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

    def _after_growth(self) -> None:
        self._update_scroll_range()
        if self._stick_to_bottom:
            self._scroll_to(self.verticalScrollBar().maximum())
        self.viewport().update()

    # -- geometry -----------------------------------------------------------------------------------

    def _row_width(self) -> int:
        return max(120, self.viewport().width() - 2 * VIEW_MARGIN)

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

    # -- locating things (tests, accessibility) -----------------------------------------------------

    def _row_origin(self, index: int) -> QPointF:
        return QPointF(VIEW_MARGIN, self._top(index) - self.verticalScrollBar().value())

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

    def code_copy_rect(self, message_id: int, number: int = 0) -> QRect:
        """The Copy button of the message's `number`-th code block, in viewport coordinates."""
        index = self._index[message_id]
        self._measure_all(index)
        row = self._rows[index]
        blocks = [(y, s, c) for y, s in row.body_segments() for c in s.code_blocks if not c.continued]
        y, segment, code = blocks[number]
        button = self._copy_button(segment.code_rect(code)).translated(ROW_PAD, y)
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

    def row_top(self, message_id: int) -> int:
        """Where a message's row starts, in the coordinates the vertical scroll bar's value is in."""
        return self._top(self._index[message_id])

    def visible_message_ids(self) -> list[int]:
        value = self.verticalScrollBar().value()
        return [
            self._rows[i].message_id for i in self._visible_range(value, value + self.viewport().height())
        ]

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
        for index in self._visible_range(value + exposed.top(), value + exposed.bottom() + 1):
            row = self._rows[index]
            if row.geometry is None or row.measured_width != self._width:
                continue
            origin = self._row_origin(index)
            painter.save()
            painter.translate(origin)
            clip_top = value + exposed.top() - self._top(index)
            self._paint_row(painter, row, clip_top, clip_top + exposed.height(), now)
            painter.restore()
        painter.end()

    def _paint_row(self, painter: QPainter, row: MessageRow, top: float, bottom: float, now: float) -> None:
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
        painter.drawText(geometry.header, int(Qt.AlignmentFlag.AlignLeft), _tr(ROLE_LABELS.get(row.role, "")))
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
        hovered = self._hover == _Hit(row.message_id, "thinking", "toggle")
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
        palette = QPalette(self.palette())
        palette.setColor(QPalette.ColorRole.Text, QColor(theme.muted))
        context.palette = palette
        document.document.documentLayout().draw(painter, context)
        painter.restore()

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
        `_PieceImages`), painted on the bubble's `fill` once per layout."""
        painter.save()
        # A piece at whole pixels, as in its image: painted directly (too tall to keep) it looks the same.
        painter.translate(QPointF(at.x(), round(at.y())) if segment.lazy else at)
        ratio = self.viewport().devicePixelRatioF()
        size = QSize(math.ceil(segment.width * ratio), math.ceil(segment.height * ratio))
        if not segment.lazy or not self._piece_images.admits(size):
            self._paint_blocks(painter, segment, top, bottom)
            self._paint_copy_buttons(painter, row, segment, top, bottom)
            painter.restore()
            return
        key = (segment.width, segment.height, fill.rgba(), self._theme, ratio)
        image = self._piece_images.get(segment, key)
        if image is None:
            image = QPixmap(size)
            image.setDevicePixelRatio(ratio)
            image.fill(fill)
            image_painter = QPainter(image)
            image_painter.setRenderHint(QPainter.RenderHint.Antialiasing)
            self._paint_blocks(image_painter, segment, 0.0, segment.height)
            image_painter.end()
            self._piece_images.put(segment, key, image)
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
        palette = QPalette(self.palette())
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
            button = self._copy_button(segment.code_rect(code))
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

    def _copy_button(self, code_rect: QRectF) -> QRectF:
        width = (
            QFontMetricsF(self._fonts.small).horizontalAdvance(
                QCoreApplication.translate("Transcript", "Copied")
            )
            + 16
        )
        return QRectF(code_rect.right() - width - 4, code_rect.top() + 2, width, 18)

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
            enabled = self.action_enabled(row.message_id, name)
            hovered = enabled and self._hover == _Hit(row.message_id, "action", name)
            if hovered:
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(QColor(theme.list_hover))
                painter.drawRoundedRect(rect, 5, 5)
            colour = theme.text if hovered else theme.muted if enabled else theme.button_disabled_text
            painter.setPen(QColor(colour))
            painter.drawText(rect, int(Qt.AlignmentFlag.AlignCenter), row.action_label(name))

    # -- interaction --------------------------------------------------------------------------------

    def _hit(self, pos: QPoint) -> _Hit | None:
        value = self.verticalScrollBar().value()
        y = pos.y() + value
        for index in self._visible_range(y, y + 1):
            row = self._rows[index]
            if row.geometry is None:
                continue
            local = QPointF(pos.x() - VIEW_MARGIN, y - self._top(index))
            if row.geometry.thinking is not None and row.geometry.thinking.contains(local):
                return _Hit(row.message_id, "thinking", "toggle")
            for name, rect in row.geometry.actions:
                if rect.contains(local) and name != "sibling":
                    return _Hit(row.message_id, "action", name)
            for top, segment in row.segments_between(local.y(), local.y() + 1):
                inner = local - QPointF(ROW_PAD, top)
                for number, code in enumerate(segment.code_blocks):
                    if not code.continued and self._copy_button(segment.code_rect(code)).contains(inner):
                        return _Hit(row.message_id, "code", f"{id(segment)}:{number}")
                href = segment.document.documentLayout().anchorAt(inner)
                if href:
                    return _Hit(row.message_id, "link", href)
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

    def _activate(self, hit: _Hit) -> None:
        if hit.kind == "link":
            self._open_link(QUrl(hit.key))
        elif hit.kind == "thinking":
            self.toggle_thinking(hit.message_id)
        elif hit.kind == "code":
            self._copy_code(hit)
        elif self.action_enabled(hit.message_id, hit.key):
            self.trigger(hit.key, hit.message_id)

    def trigger(self, action: str, message_id: int) -> None:
        """Run a message action as if its button was clicked."""
        row = self.row(message_id)
        if row is None:
            return
        if action == "copy":
            QGuiApplication.clipboard().setText(row.text)
            self._show_copied(row, "message")
            self.copied.emit(row.text)
            return
        self.actionTriggered.emit(action, message_id)

    def _copy_code(self, hit: _Hit) -> None:
        row = self.row(hit.message_id)
        if row is None:
            return
        segment_id, number = hit.key.split(":")
        for segment in row.segments or []:
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
                QToolTip.showText(event.globalPos(), html.escape(_tr(ACTION_TIPS[hit.key])), self.viewport())
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
        for name in row.actions():
            if name == "sibling":
                continue
            action = menu.addAction(_tr(ACTION_TIPS[name]))
            action.setEnabled(self.action_enabled(row.message_id, name))
            action.triggered.connect(lambda _checked=False, n=name, m=row.message_id: self.trigger(n, m))
        if not menu.isEmpty():
            menu.exec(event.globalPos())

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
