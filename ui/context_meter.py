"""How much of the context window the conversation and the draft use, and what happens when it is full.

Fed by `ChatService.contextUsage` (tokens counted by the model's own tokenizer with its real chat
template). Amber from WARN_AT, red from FULL_AT or as soon as the overflow policy would act.
"""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QWidget

from ui.theme import LIGHT, Theme

WARN_AT = 0.75
FULL_AT = 0.90


class Usage(Protocol):
    """What the meter reads from app.chat.engine's ContextUsage."""

    @property
    def used_tokens(self) -> int: ...
    @property
    def context_tokens(self) -> int: ...
    @property
    def would_drop_messages(self) -> int: ...
    @property
    def policy(self) -> str: ...


class _Bar(QWidget):
    def __init__(self, parent: QWidget) -> None:
        super().__init__(parent)
        self.fraction = 0.0
        self.colour = QColor(LIGHT.accent)
        self.track = QColor(LIGHT.border)
        self.setFixedHeight(6)
        self.setMinimumWidth(80)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setPen(Qt.PenStyle.NoPen)
        rect = QRectF(self.rect())
        painter.setBrush(self.track)
        painter.drawRoundedRect(rect, 3, 3)
        if self.fraction > 0:
            painter.setBrush(self.colour)
            painter.drawRoundedRect(QRectF(0, 0, rect.width() * min(1.0, self.fraction), rect.height()), 3, 3)
        painter.end()


class ContextMeter(QWidget):
    """`policyClicked` when the user clicks the policy text (the window opens the setting)."""

    policyClicked = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("contextMeter")
        self._theme: Theme = LIGHT
        self.level = "unknown"
        self.usage: Usage | None = None
        self._policy = "drop_oldest"
        self.bar = _Bar(self)
        self.tokens = QLabel()
        self.tokens.setObjectName("contextTokens")
        self.tokens.setTextFormat(Qt.TextFormat.PlainText)
        self.warning = QLabel()
        self.warning.setObjectName("contextWarning")
        self.warning.setTextFormat(Qt.TextFormat.PlainText)
        self.policy = QLabel()
        self.policy.setObjectName("contextPolicy")
        self.policy.setTextFormat(Qt.TextFormat.PlainText)
        self.policy.setCursor(Qt.CursorShape.PointingHandCursor)
        self.policy.mouseReleaseEvent = self._policy_clicked  # type: ignore[method-assign]
        layout = QHBoxLayout(self)
        layout.setContentsMargins(2, 0, 2, 0)
        layout.setSpacing(10)
        layout.addWidget(self.tokens)
        layout.addWidget(self.bar, 1)
        layout.addWidget(self.warning)
        layout.addWidget(self.policy)
        self._render()

    def _policy_clicked(self, event: QMouseEvent) -> None:
        if event.button() == Qt.MouseButton.LeftButton:
            self.policyClicked.emit()

    def set_theme(self, theme: Theme) -> None:
        self._theme = theme
        self._render()

    def set_policy(self, policy: str) -> None:
        self._policy = policy
        self._render()

    def set_usage(self, usage: Usage | None) -> None:
        self.usage = usage
        if usage is not None:
            self._policy = usage.policy
        self._render()

    def retranslate(self) -> None:
        self._render()

    def _render(self) -> None:
        theme = self._theme
        usage = self.usage
        if self._policy == "refuse":
            self.policy.setText(self.tr("When full: refuse to send"))
        else:
            self.policy.setText(self.tr("When full: leave out the oldest turns (system prompt kept)"))
        self.policy.setToolTip(self.tr("Change what happens when a chat no longer fits the context window"))
        if usage is None or usage.context_tokens <= 0:
            self.level = "unknown"
            self.tokens.setText(self.tr("Context: not measured yet"))
            self.bar.fraction = 0.0
            self.warning.clear()
            self.warning.hide()
        else:
            fraction = usage.used_tokens / usage.context_tokens
            self.tokens.setText(
                self.tr("{used} / {total} tokens").format(
                    used=f"{usage.used_tokens:,}", total=f"{usage.context_tokens:,}"
                )
            )
            self.bar.fraction = fraction
            over = usage.would_drop_messages > 0 or usage.used_tokens > usage.context_tokens
            if over or fraction >= FULL_AT:
                self.level = "full"
            elif fraction >= WARN_AT:
                self.level = "warn"
            else:
                self.level = "ok"
            if over and usage.policy == "refuse":
                self.warning.setText(self.tr("Too long for the context window: Hearth will refuse to send"))
            elif usage.would_drop_messages > 0:
                self.warning.setText(
                    self.tr("%n oldest message(s) will be left out", "", usage.would_drop_messages)
                )
            else:
                self.warning.clear()
            self.warning.setVisible(bool(self.warning.text()))
        colour = {"full": theme.error, "warn": theme.warning}.get(self.level, theme.accent)
        self.bar.colour = QColor(colour)
        self.bar.track = QColor(theme.border)
        self.tokens.setStyleSheet(f"color: {colour if self.level in ('full', 'warn') else theme.muted};")
        self.warning.setStyleSheet(f"color: {theme.error};")
        self.bar.update()
