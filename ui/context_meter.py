"""How much of the context window the conversation, the draft and its files use, and what happens when it
is full.

Fed by `ChatService.contextUsage` (tokens counted by the model's own tokenizer with its real chat
template, the draft's files planned as the turn plans them; estimated for a server's model). Amber from
WARN_AT, red from FULL_AT or as soon as the overflow policy would act.
"""

from __future__ import annotations

from typing import Protocol

from PySide6.QtCore import QRectF, Qt, Signal
from PySide6.QtGui import QColor, QMouseEvent, QPainter, QPaintEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QWidget

from app.remote.registry import ContextSource
from ui.servers_panel import plain_tooltip
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
    @property
    def fits(self) -> bool: ...
    @property
    def document_tokens(self) -> int: ...
    @property
    def searched(self) -> tuple[str, ...]: ...
    @property
    def passage_tokens(self) -> int: ...
    @property
    def collections(self) -> tuple[str, ...]: ...
    @property
    def tool_tokens(self) -> int: ...
    @property
    def estimated(self) -> bool: ...
    @property
    def context_source(self) -> ContextSource | None: ...


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
        # What the documents take of it, and which files would be searched rather than sent whole.
        self.documents = QLabel()
        self.documents.setObjectName("contextDocuments")
        self.documents.setTextFormat(Qt.TextFormat.PlainText)
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
        layout.addWidget(self.documents)
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
            self.documents.clear()
            self.documents.hide()
            self._explain("")
        else:
            fraction = usage.used_tokens / usage.context_tokens
            used, total = f"{usage.used_tokens:,}", f"{usage.context_tokens:,}"
            if usage.estimated:
                self.tokens.setText(
                    self.tr("≈ {used} / {total} tokens (estimate)").format(used=used, total=total)
                )
            else:
                self.tokens.setText(self.tr("{used} / {total} tokens").format(used=used, total=total))
            self.documents.setText(self._documents_text(usage))
            self.documents.setVisible(bool(self.documents.text()))
            self._explain(self._explanation(usage))
            self.bar.fraction = fraction
            over = usage.would_drop_messages > 0 or usage.used_tokens > usage.context_tokens
            # A server is sent everything: it refuses a prompt that leaves no room for the whole reply.
            over = over or (usage.estimated and not usage.fits)
            # Passages of a searched file take what the context has left, by design: filling it that way is
            # no reason for amber or red.
            filled = (usage.used_tokens - usage.passage_tokens) / usage.context_tokens
            if over or filled >= FULL_AT:
                self.level = "full"
            elif filled >= WARN_AT:
                self.level = "warn"
            else:
                self.level = "ok"
            if over and usage.estimated:
                self.warning.setText(self.tr("Probably too long for the server's context: it may refuse it"))
            elif over and usage.policy == "refuse":
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
        self.documents.setStyleSheet(f"color: {theme.muted};")
        self.bar.update()

    def _documents_text(self, usage: Usage) -> str:
        tokens = f"{usage.document_tokens:,}"
        if usage.searched:
            searched = self.tr(
                "Documents: up to {tokens} tokens · %n file(s) searched, not sent whole",
                "",
                len(usage.searched),
            )
            return searched.format(tokens=tokens)
        if usage.collections:
            return self.tr("Documents: up to {tokens} tokens · passages from {names}").format(
                tokens=tokens, names=", ".join(usage.collections)
            )
        if usage.document_tokens > 0:
            return self.tr("Documents: {tokens} tokens").format(tokens=tokens)
        return ""

    def _explanation(self, usage: Usage) -> str:
        lines = []
        if usage.document_tokens > 0:
            lines.append(
                self.tr("Documents take {tokens} of these tokens.").format(
                    tokens=f"{usage.document_tokens:,}"
                )
            )
        if usage.tool_tokens > 0:
            lines.append(
                self.tr(
                    "The definitions of the tools this chat may call take {tokens} of these tokens."
                ).format(tokens=f"{usage.tool_tokens:,}")
            )
        if usage.searched:
            lines.append(
                self.tr(
                    "Too long to send whole, so searched when you send: {names}. Only the passages most "
                    "relevant to your message go in, up to {tokens} tokens."
                ).format(names=", ".join(usage.searched), tokens=f"{usage.passage_tokens:,}")
            )
        if usage.collections:
            lines.append(
                self.tr(
                    "The collections this chat answers from are searched when you send: {names}. The "
                    "passages most relevant to your message go in, up to {tokens} tokens."
                ).format(names=", ".join(usage.collections), tokens=f"{usage.passage_tokens:,}")
            )
        if usage.estimated:
            total = f"{usage.context_tokens:,}"
            lines.append(
                self.tr("Estimated at about four characters a token: the server's own tokenizer is not here.")
            )
            if usage.context_source is ContextSource.SETTING:
                lines.append(
                    self.tr("The {total}-token context is this server's setting.").format(total=total)
                )
            elif usage.context_source is ContextSource.SERVER:
                lines.append(
                    self.tr("The {total}-token context is what the server reports for this model.").format(
                        total=total
                    )
                )
            else:
                lines.append(
                    self.tr(
                        "The server does not report its context length, so {total} tokens is assumed: set "
                        "the real one in Manage servers."
                    ).format(total=total)
                )
        return "\n".join(lines)

    def _explain(self, text: str) -> None:
        # File names are the user's, not markup: shown as written.
        tooltip = plain_tooltip(text)
        for label in (self.tokens, self.documents, self.bar):
            label.setToolTip(tooltip)
