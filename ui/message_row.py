"""One message of the transcript: its text, its rendered blocks and where each thing sits in it.

A row is data plus cached documents (`ui.row_view` decides when they are made and dropped):

- A streaming reply is settled blocks (each rendered once, code highlighted when its fence closes) plus a
  live tail re-rendered on each flush; a tail too long to re-render cheaply grows by plain appends until
  it settles.
- A table or code block too big for one document (a 2,000-row table, a 50,000-line listing) comes as
  pieces (`ui.markdown.split_block`) that make their documents when first needed. `layout` lays out those
  in view first, within the time it is given; the rest keep an estimated height until a later call.
- Geometry is in row coordinates; blocks are found by bisection, so finding what is in view costs the same
  at the end of a long reply as at its start.
- The tool calls a reply made, or a tool message's result, are cards below the text (`ui.row_tools`):
  collapsed, a header line; expanded, their text is blocks like the answer's, laid out the same way.

The labels here are translated in the "Transcript" context, like the rest of the transcript's strings.
"""

from __future__ import annotations

import bisect
import math
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication, QPointF, QRectF, Qt
from PySide6.QtGui import QFont, QFontMetricsF

from app.chat.live_reply import LiveReply
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
from ui.row_documents import DocumentsGeometry, FileRef, SourceRef, hit_documents, layout_documents
from ui.row_tools import CARD_GAP, CARD_INSET, CardGeometry, ToolCard, elided_preview, header_height

# The live tail is re-rendered as Markdown up to this size; past it, new text is appended as plain
# text until the block settles, so per-flush work stays bounded for an endless paragraph or code block.
TAIL_MARKDOWN_LIMIT = 3_000

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
    "tool": QT_TRANSLATE_NOOP("Transcript", "Tool"),
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
    "tool": ("copy", "delete"),
}
TOOL_CALLED = QT_TRANSLATE_NOOP("Transcript", "Called {tool}")
TOOL_RETURNED = QT_TRANSLATE_NOOP("Transcript", "{tool} returned")
TOOL_FAILED = QT_TRANSLATE_NOOP("Transcript", "{tool} failed")


def translated(text: object) -> str:
    # `text` is a QT_TRANSLATE_NOOP marker (typed `object` by PySide6) or a plain string.
    return QCoreApplication.translate(CONTEXT, str(text))


def card_heading(card: ToolCard, tool: str | None = None) -> str:
    """The card's heading ("Called add", "add returned", "add failed"); `tool`: how to write the tool's
    name (by default, as it is)."""
    if tool is None:
        tool = card.tool or translated(ROLE_LABELS["tool"])
    label = TOOL_CALLED if card.kind == "call" else TOOL_FAILED if card.failed else TOOL_RETURNED
    return translated(label).format(tool=tool)


def card_markdown(card: ToolCard) -> str:
    """A card as "Copy as Markdown" gives it: its heading, then its text in a code block."""
    return f"{card_heading(card, f'`{card.tool}`' if card.tool else None)}\n\n{card.block}"


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
    # A prompt's attached files; a reply's source passages.
    files: tuple[FileRef, ...] = ()
    sources: tuple[SourceRef, ...] = ()
    # The calls a reply made, or a tool message's result (its `content` is then empty): a card each.
    tools: tuple[ToolCard, ...] = ()


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
    documents: DocumentsGeometry | None = None
    # One per tool card, below the text.
    cards: list[CardGeometry] = field(default_factory=list)


@dataclass(frozen=True)
class Hit:
    message_id: int
    kind: str  # "thinking" | "tool" | "action" | "code" | "link" | "file" | "sources" | "source"
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


@dataclass(frozen=True)
class RowFonts:
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

    @classmethod
    def for_font(cls, font: QFont, code: QFont) -> RowFonts:
        """The fonts of rows whose text is in `font` and whose code is in `code`."""
        body = QFont(font)
        role = QFont(body)
        role.setBold(True)
        small = QFont(body)
        action = QFont(body)
        if body.pointSizeF() > 0:
            small.setPointSizeF(body.pointSizeF() * 0.86)
            action.setPointSizeF(body.pointSizeF() * 0.9)
        metrics = QFontMetricsF(body)
        chrome = 2 * ROW_PAD + QFontMetricsF(role).height() + GAP + ACTION_HEIGHT + 2 * GAP
        return cls(
            body,
            code,
            role,
            small,
            action,
            max(1.0, metrics.averageCharWidth()),
            metrics.lineSpacing(),
            chrome,
            QFontMetricsF(code).lineSpacing(),
        )


def copy_button(code_rect: QRectF, fonts: RowFonts) -> QRectF:
    """Where the Copy button of the code block at `code_rect` is (in the same coordinates)."""
    width = (
        QFontMetricsF(fonts.small).horizontalAdvance(QCoreApplication.translate("Transcript", "Copied")) + 16
    )
    return QRectF(code_rect.right() - width - 4, code_rect.top() + 2, width, 18)


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
        # The reply's Sources block lists its passages (collapsed: one line saying how many).
        self.sources_expanded = False
        # The tool cards shown expanded (by their index in `entry.tools`), and the blocks of their text:
        # only while expanded and the row is rendered.
        self.cards_expanded: set[int] = set()
        self._card_blocks: dict[int, list[Segment]] = {}
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

    @property
    def cards(self) -> tuple[ToolCard, ...]:
        return self.entry.tools

    @property
    def copy_text(self) -> str:
        """What "Copy" copies: the message's Markdown, and each tool card's heading and text after it."""
        parts = [self.text] if self.text else []
        return "\n\n".join(parts + [card_markdown(card) for card in self.cards])

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
        badge = translated(STATUS_BADGES[self.status]) if self.status in STATUS_BADGES else ""
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
        """What the row shows now, as plain text (nothing until it has been rendered): a tool card as its
        heading and preview (collapsed, as elided to fit) or its heading and text (expanded)."""
        if self.segments is None:
            return ""
        pieces = [segment.plain_text() for segment in self.segments]
        if self._tail is not None:
            pieces.append(self._tail.plain_text())
        placed = self.geometry.cards if self.geometry is not None else []
        for index, card in enumerate(self.cards):
            preview = placed[index].preview if index < len(placed) else card.preview
            pieces.append(f"{card_heading(card)} {preview}" if preview else card_heading(card))
            pieces += [block.plain_text() for block in self._card_blocks.get(index, [])]
        return "\n".join(pieces)

    def code_blocks(self) -> list[str]:
        return [
            code.text
            for _top, segment in self.body_segments()
            for code in segment.code_blocks
            if not code.continued
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
        self._card_blocks = {}

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

    def set_sources_expanded(self, expanded: bool) -> None:
        self.sources_expanded = expanded
        self.geometry = None
        self.measured_width = None

    def set_thinking_display(self, display: str) -> None:
        self.show_thinking = display != "hidden"
        self.set_expanded(display == "expanded")

    def set_card_expanded(self, index: int, expanded: bool) -> None:
        if expanded:
            self.cards_expanded.add(index)
        else:
            self.cards_expanded.discard(index)
            self._card_blocks.pop(index, None)
        self.geometry = None
        self.measured_width = None

    def _ensure_cards(self, style: RenderStyle) -> None:
        """Render the text of the expanded cards: a code block, cut into pieces when big, which are made and
        laid out where they are seen first, like the answer's (expanding a 32,000-line result costs what a
        screenful of it does)."""
        for index in self.cards_expanded:
            if index in self._card_blocks or index >= len(self.cards):
                continue
            self._card_blocks[index] = [
                render_markdown(item, style) if isinstance(item, str) else render_piece(item, style)
                for item in split_block(self.cards[index].block)
            ]

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

    def estimate(self, width: int, fonts: RowFonts) -> int:
        per_line = max(20.0, self.content_width(width) / fonts.average_char)
        text = self.text
        lines = text.count("\n") + len(text) / per_line + 1
        if self.entry.files:
            lines += 1
        if self.entry.sources:
            lines += 1 + (len(self.entry.sources) if self.sources_expanded else 0)
        if self.has_thinking:
            lines += 1
            if self.expanded:
                reasoning = self.reasoning_text
                lines += reasoning.count("\n") + len(reasoning) / per_line
        for index, card in enumerate(self.cards):
            lines += 1.5
            if index in self.cards_expanded:
                code_lines = card.text.count("\n") + len(card.text) / per_line + 3
                lines += code_lines * fonts.code_line / fonts.line
        return math.ceil(fonts.chrome + lines * fonts.line)

    def layout(
        self,
        width: int,
        style: RenderStyle,
        fonts: RowFonts,
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
        self._ensure_cards(style)
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
        fonts: RowFonts,
        deadline: float,
        window: tuple[float, float] | None,
    ) -> None:
        """Place the blocks from number `first` on, below `y` (the bottom of the one before), then the tail
        and the tool cards.

        Blocks not laid out at `content` width (the answer's from `first` on, the expanded cards') are laid
        out while there is time before `deadline`, those in `window` first; the others keep the height they
        had at another width, or an estimate.
        """
        geometry = self.geometry
        assert geometry is not None and self.segments is not None
        segments = self.segments
        waiting = segments[first:] + [
            block for index in sorted(self._card_blocks) for block in self._card_blocks[index]
        ]
        for segment in waiting:
            if segment.width < 0 and not segment.height:
                segment.height = self._estimate_segment(segment, content, fonts)
        budget = _Budget(deadline)
        laid_out = False
        if window is not None:
            self._place_tops(first, y, content, fonts)
            placed = {id(segment) for segment in waiting}
            for _top, segment in self.segments_between(*window):
                if id(segment) in placed and segment.width != content and budget.allows():
                    laid_out |= budget.layout(segment, content)
        exact = True
        for segment in waiting:
            if segment.width == content:
                continue
            # A block of its own is laid out at once, as it was rendered; only pieces wait their turn.
            if (not segment.lazy or budget.allows()) and budget.layout(segment, content):
                laid_out = True
            else:
                exact = False
        if laid_out or window is None:
            self._place_tops(first, y, content, fonts)
        self.exact = exact and all(segment.width == content for segment in segments[:first])

    def _place_tops(self, first: int, y: float, content: float, fonts: RowFonts) -> None:
        """The tops of the blocks from number `first` on, below `y`; then the tail and the cards below them,
        which is where the body ends."""
        geometry = self.geometry
        assert geometry is not None and self.segments is not None
        tops = geometry.seg_tops
        del tops[first:]
        for segment in self.segments[first:]:
            if tops:
                y += -segment.overlap if segment.joined else SEGMENT_GAP
            tops.append(y)
            y += segment.height
        if self._tail is not None:
            if tops:
                y += SEGMENT_GAP
            y += self._tail.layout(content)
        geometry.body_height = self._place_cards(y, content, fonts) - geometry.body_top

    def _place_cards(self, y: float, content: float, fonts: RowFonts) -> float:
        """Place the tool cards below `y` (a header each, and an expanded card's blocks under it); returns
        their bottom."""
        geometry = self.geometry
        assert geometry is not None
        geometry.cards = []
        if not self.cards:
            return y
        if geometry.seg_tops or self._tail is not None:
            y += SEGMENT_GAP
        height = header_height(fonts.small, fonts.code)
        for index, card in enumerate(self.cards):
            if index:
                y += CARD_GAP
            top = y
            header = QRectF(ROW_PAD - CARD_INSET, top, content + 2 * CARD_INSET, height)
            expanded = index in self.cards_expanded
            # Collapsed, the header previews the text; expanded, the text is right under it.
            preview = ""
            if not expanded:
                preview = elided_preview(
                    card.preview, self.card_label(index), header, fonts.small, fonts.code
                )
            placed = CardGeometry(header, header, preview)
            y = header.bottom()
            blocks = self._card_blocks.get(index, [])
            for block in blocks:
                if placed.tops:
                    y += -block.overlap if block.joined else SEGMENT_GAP
                placed.tops.append(y)
                y += block.height
            if blocks:
                y += CARD_INSET
            placed.frame = QRectF(header.left(), top, header.width(), y - top)
            geometry.cards.append(placed)
        return y

    def card_label(self, index: int) -> str:
        """A card's header: its disclosure triangle and heading."""
        return f"{'▾' if index in self.cards_expanded else '▸'} {card_heading(self.cards[index])}"

    def _block_runs(self) -> list[tuple[list[float], list[Segment]]]:
        """(tops, blocks) of the answer, then of each expanded card, top to bottom (the tail not included)."""
        geometry = self.geometry
        assert geometry is not None and self.segments is not None
        runs = [(geometry.seg_tops, self.segments)]
        for index, placed in enumerate(geometry.cards):
            if placed.tops:
                runs.append((placed.tops, self._card_blocks.get(index, [])))
        return runs

    @staticmethod
    def _estimate_segment(segment: Segment, content: float, fonts: RowFonts) -> float:
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
        place again (`unpin`) once blocks above it, or the width, changed. Blocks are counted through the
        answer, then the expanded tool cards."""
        geometry = self.geometry
        if geometry is None or self.segments is None or y < geometry.body_top:
            return None
        found = None
        passed = 0
        for tops, blocks in self._block_runs():
            if tops and y >= tops[0]:
                index = bisect.bisect_right(tops, y) - 1
                found = passed + index, (y - tops[index]) / max(1.0, blocks[index].height)
            passed += len(tops)
        return found

    def unpin(self, pin: tuple[int, float]) -> float | None:
        geometry = self.geometry
        index, fraction = pin
        if geometry is None or self.segments is None:
            return None
        for tops, blocks in self._block_runs():
            if index < min(len(tops), len(blocks)):
                return tops[index] + fraction * blocks[index].height
            index -= len(tops)
        return None

    def relayout_growth(self, fonts: RowFonts, deadline: float, window: tuple[float, float]) -> None:
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
        self, content: float, top: float, fonts: RowFonts
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

    def _layout_footer(self, fonts: RowFonts) -> None:
        geometry = self.geometry
        assert geometry is not None
        content = self.content_width(geometry.width)
        y = geometry.body_top + geometry.body_height
        if self.streaming and not self.segments and self._tail is None:
            y += QFontMetricsF(fonts.body).lineSpacing()
        geometry.documents = layout_documents(
            self.entry.files,
            self.entry.sources,
            self.sources_expanded,
            fonts.small,
            ROW_PAD,
            content,
            y + GAP,
        )
        if geometry.documents is not None:
            y = geometry.documents.bottom
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
        return translated(ACTION_LABELS[name]) if name in ACTION_LABELS else name

    def body_segments(self) -> list[tuple[float, Segment]]:
        """(top in row coordinates, segment) for each block: the answer's, the live tail, the cards'."""
        geometry = self.geometry
        if geometry is None or self.segments is None:
            return []
        runs = self._block_runs()
        placed = list(zip(geometry.seg_tops, self.segments, strict=False))
        if self._tail is not None:
            placed.append((self._tail_top(), self._tail))
        for tops, blocks in runs[1:]:
            placed += zip(tops, blocks, strict=False)
        return placed

    def segments_between(self, top: float, bottom: float) -> list[tuple[float, Segment]]:
        """The blocks intersecting [top, bottom) in row coordinates, found by bisection: painting a long
        reply costs the same at its end as at its start."""
        geometry = self.geometry
        if geometry is None or self.segments is None:
            return []
        runs = self._block_runs()
        found = _blocks_between(*runs[0], top, bottom)
        if self._tail is not None:
            y = self._tail_top()
            if y < bottom and y + self._tail.height > top:
                found.append((y, self._tail))
        for tops, blocks in runs[1:]:
            found += _blocks_between(tops, blocks, top, bottom)
        return found

    def _tail_top(self) -> float:
        geometry = self.geometry
        assert geometry is not None and self.segments is not None
        tops = geometry.seg_tops
        if not tops:
            return geometry.body_top
        return tops[-1] + self.segments[len(tops) - 1].height + SEGMENT_GAP

    def hit(self, point: QPointF, fonts: RowFonts) -> Hit | None:
        """What can be clicked at `point` (row coordinates), if anything."""
        geometry = self.geometry
        if geometry is None:
            return None
        if geometry.thinking is not None and geometry.thinking.contains(point):
            return Hit(self.message_id, "thinking", "toggle")
        for index, placed in enumerate(geometry.cards):
            if placed.header.contains(point):
                return Hit(self.message_id, "tool", str(index))
        for name, rect in geometry.actions:
            if rect.contains(point) and name != "sibling":
                return Hit(self.message_id, "action", name)
        if geometry.documents is not None:
            found = hit_documents(geometry.documents, point.x(), point.y())
            if found is not None:
                return Hit(self.message_id, *found)
        for top, segment in self.segments_between(point.y(), point.y() + 1):
            inner = point - QPointF(ROW_PAD, top)
            for number, code in enumerate(segment.code_blocks):
                if not code.continued and copy_button(segment.code_rect(code), fonts).contains(inner):
                    return Hit(self.message_id, "code", f"{id(segment)}:{number}")
            href = segment.document.documentLayout().anchorAt(inner)
            if href:
                return Hit(self.message_id, "link", href)
        return None


def _blocks_between(
    tops: list[float], blocks: list[Segment], top: float, bottom: float
) -> list[tuple[float, Segment]]:
    """The blocks intersecting [top, bottom), found by bisection of their `tops`."""
    found: list[tuple[float, Segment]] = []
    for index in range(max(0, bisect.bisect_right(tops, top) - 1), min(len(tops), len(blocks))):
        y = tops[index]
        if y >= bottom:
            break
        if y + blocks[index].height > top:
            found.append((y, blocks[index]))
    return found
