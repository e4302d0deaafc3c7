"""The conversation transcript: one row per message, with cheap streaming into the last one."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QSizeF, Qt, QTimer
from PySide6.QtGui import QDesktopServices, QTextOption
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QScrollArea, QSizePolicy, QVBoxLayout, QWidget

from ui.safe_browser import ConfirmOpen, OpenUrl, SafeTextBrowser, confirm_open_url

# Deltas arriving faster than this are merged into one re-render of the streaming row.
FLUSH_INTERVAL_MS = 40
# Within this many pixels of the end counts as "at the bottom", so a rounding step does not unstick.
BOTTOM_SLACK_PX = 4

ROLE_LABELS = {"user": "You", "assistant": "Hearth", "system": "System"}
STATUS_BADGES = {
    "streaming": "Writing…",
    "stopped": "Stopped",
    "error": "Error",
    "interrupted": "Interrupted: Hearth closed before this reply finished",
}


@dataclass(frozen=True)
class ReplyStats:
    ttft_s: float | None
    tokens_per_second: float | None
    completion_tokens: int | None

    def describe(self) -> str:
        parts = []
        if self.ttft_s is not None:
            parts.append(f"TTFT {self.ttft_s:.2f} s")
        if self.tokens_per_second is not None:
            parts.append(f"{self.tokens_per_second:.1f} tok/s")
        if self.completion_tokens is not None:
            parts.append(f"{self.completion_tokens} tokens")
        return " · ".join(parts)


@dataclass(frozen=True)
class TranscriptEntry:
    message_id: int
    role: str
    content: str
    status: str = "complete"
    error: str | None = None
    stats: ReplyStats | None = None


def _plain_label(object_name: str) -> QLabel:
    # Plain text: badges and errors can carry model or file names, which must never be parsed as HTML.
    label = QLabel()
    label.setObjectName(object_name)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class MessageBody(SafeTextBrowser):
    """As tall as its text, so the transcript, not each message, scrolls."""

    def __init__(self, parent: QWidget, *, confirm_open: ConfirmOpen, open_url: OpenUrl) -> None:
        super().__init__(parent, confirm_open=confirm_open, open_url=open_url)
        self.setObjectName("messageBody")
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.document().documentLayout().documentSizeChanged.connect(self._fit_height)

    def _fit_height(self, size: QSizeF) -> None:
        self.setFixedHeight(math.ceil(size.height()) + 2 * self.frameWidth())


class MessageRow(QFrame):
    def __init__(
        self, entry: TranscriptEntry, parent: QWidget, *, confirm_open: ConfirmOpen, open_url: OpenUrl
    ) -> None:
        super().__init__(parent)
        self.setObjectName("messageRow")
        # Read by the style sheet (QFrame#messageRow[role="user"]).
        self.setProperty("role", entry.role)
        self.message_id = entry.message_id
        self.role = entry.role
        self._parts = [entry.content]

        self.role_label = _plain_label("roleLabel")
        self.role_label.setText(ROLE_LABELS.get(entry.role, entry.role))
        self.badge = _plain_label("statusBadge")
        self.body = MessageBody(self, confirm_open=confirm_open, open_url=open_url)
        self.stats_label = _plain_label("statsLine")

        header = QHBoxLayout()
        header.addWidget(self.role_label)
        header.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 8, 12, 8)
        layout.setSpacing(4)
        layout.addLayout(header)
        layout.addWidget(self.body)
        layout.addWidget(self.badge)
        layout.addWidget(self.stats_label)

        self.render_body()
        self.set_status(entry.status, entry.stats, entry.error)

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def status(self) -> str:
        return str(self.property("status"))

    def append(self, text: str) -> None:
        self._parts.append(text)

    def render_body(self) -> None:
        text = self.text
        # What the user typed is shown as typed; only model output is read as Markdown.
        if self.role == "user":
            self.body.setPlainText(text)
        else:
            self.body.set_markdown(text)

    def set_status(self, status: str, stats: ReplyStats | None = None, error: str | None = None) -> None:
        self.setProperty("status", status)
        badge = STATUS_BADGES.get(status, "")
        if error:
            badge = f"{badge}: {error}" if badge else error
        self.badge.setText(badge)
        self.badge.setVisible(bool(badge))
        self.badge.setProperty("status", status)
        # Re-polish so the style sheet's [status=...] selectors see the new value.
        self.badge.style().unpolish(self.badge)
        self.badge.style().polish(self.badge)
        described = stats.describe() if stats else ""
        self.stats_label.setText(described)
        self.stats_label.setVisible(bool(described))


class Transcript(QScrollArea):
    def __init__(
        self,
        parent: QWidget | None = None,
        *,
        confirm_open: ConfirmOpen = confirm_open_url,
        open_url: OpenUrl = QDesktopServices.openUrl,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("transcript")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self._confirm_open = confirm_open
        self._open_url = open_url
        self._rows: dict[int, MessageRow] = {}
        self._dirty: set[int] = set()

        self._container = QWidget()
        self._container.setObjectName("transcriptContainer")
        self._layout = QVBoxLayout(self._container)
        self._layout.setContentsMargins(16, 12, 16, 12)
        self._layout.setSpacing(10)
        self._layout.addStretch(1)
        self.setWidget(self._container)

        self._flush_timer = QTimer(self)
        self._flush_timer.setSingleShot(True)
        self._flush_timer.setInterval(FLUSH_INTERVAL_MS)
        self._flush_timer.timeout.connect(self.flush)

        self._stick_to_bottom = True
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(self._remember_position)
        bar.rangeChanged.connect(self._follow_growth)

    def row(self, message_id: int) -> MessageRow | None:
        return self._rows.get(message_id)

    def rows(self) -> list[MessageRow]:
        return list(self._rows.values())

    def clear(self) -> None:
        self._flush_timer.stop()
        self._dirty.clear()
        for row in self._rows.values():
            self._layout.removeWidget(row)
            row.deleteLater()
        self._rows.clear()
        self._stick_to_bottom = True

    def set_entries(self, entries: Sequence[TranscriptEntry]) -> None:
        self.clear()
        for entry in entries:
            self.add_entry(entry)

    def add_entry(self, entry: TranscriptEntry) -> MessageRow:
        row = MessageRow(entry, self._container, confirm_open=self._confirm_open, open_url=self._open_url)
        self._rows[entry.message_id] = row
        # Before the trailing stretch, which keeps a short conversation at the top.
        self._layout.insertWidget(self._layout.count() - 1, row)
        return row

    def append_delta(self, message_id: int, text: str) -> None:
        """Queue text for a streaming row; rendering waits for the next flush tick."""
        row = self._rows.get(message_id)
        if row is None:
            return
        row.append(text)
        self._dirty.add(message_id)
        if not self._flush_timer.isActive():
            self._flush_timer.start()

    def flush(self) -> None:
        for message_id in self._dirty:
            row = self._rows.get(message_id)
            if row is not None:
                row.render_body()
        self._dirty.clear()

    def finish(
        self, message_id: int, status: str, stats: ReplyStats | None = None, error: str | None = None
    ) -> None:
        row = self._rows.get(message_id)
        if row is None:
            return
        if message_id in self._dirty:
            self._dirty.discard(message_id)
            row.render_body()
        row.set_status(status, stats, error)

    def scroll_to_bottom(self) -> None:
        self._stick_to_bottom = True
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def is_at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - BOTTOM_SLACK_PX

    def _remember_position(self, _value: int) -> None:
        self._stick_to_bottom = self.is_at_bottom()

    def _follow_growth(self, _minimum: int, maximum: int) -> None:
        if self._stick_to_bottom:
            self.verticalScrollBar().setValue(maximum)
