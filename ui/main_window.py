"""Hearth's main window: conversations on the left, the transcript and composer on the right.

Widgets only. Every read or write of conversations and models goes through
`services.background` or the chat service, so the event loop never waits on the database or the model.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

import shiboken6
from PySide6.QtCore import Qt
from PySide6.QtGui import QCloseEvent, QDesktopServices, QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMainWindow,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from app.conversations import Conversation, Message
from app.engine import ModelStatus
from app.library import InstalledModel
from app.services import AppServices
from inference.protocol import GenerationStats
from ui.composer import Composer
from ui.dialogs import AskText, ConfirmAction, ask_text, confirm_action
from ui.safe_browser import ConfirmOpen, OpenUrl, confirm_open_url
from ui.transcript import ReplyStats, Transcript, TranscriptEntry

log = logging.getLogger("hearth.ui")

T = TypeVar("T")

ERROR_MESSAGE_MS = 15_000


def _entry(message: Message) -> TranscriptEntry:
    stats = None
    if message.role == "assistant" and (message.ttft_ms is not None or message.tokens_per_second is not None):
        stats = ReplyStats(
            message.ttft_ms / 1000.0 if message.ttft_ms is not None else None,
            message.tokens_per_second,
            message.completion_tokens,
        )
    return TranscriptEntry(message.id, message.role, message.content, message.status, message.error, stats)


def _plain_label(object_name: str) -> QLabel:
    label = QLabel()
    label.setObjectName(object_name)
    # Model names and backend notes come from GGUF metadata: never let a label parse them as HTML.
    label.setTextFormat(Qt.TextFormat.PlainText)
    return label


class MainWindow(QMainWindow):
    def __init__(
        self,
        services: AppServices,
        *,
        confirm: ConfirmAction = confirm_action,
        ask: AskText = ask_text,
        confirm_open: ConfirmOpen = confirm_open_url,
        open_url: OpenUrl = QDesktopServices.openUrl,
        preload_model: bool = True,
    ) -> None:
        super().__init__()
        self._services = services
        self._chat = services.chat
        self._confirm = confirm
        self._ask = ask
        self._preload_model = preload_model

        self._current_id: int | None = None
        # Bumped on every conversation switch so a slow load for a previous one is dropped.
        self._load_generation = 0
        # The prompt between Send and replyStarted, and where it was sent from (None: a new chat).
        self._pending_prompt: str | None = None
        self._pending_conversation: int | None = None
        # The reply in flight: ids and all text so far, to rebuild the view after switching away and back.
        self._streaming_conversation: int | None = None
        self._streaming_user: tuple[int, str] | None = None
        self._streaming_message: int | None = None
        self._live_parts: list[str] = []
        self._models_loaded = False
        self._conversations_loaded = False
        self._status_known = False
        # Once closed, no new background work: the services may already be shutting down.
        self._closed = False

        self.setWindowTitle("Hearth")
        self.resize(1100, 700)
        self._build(confirm_open, open_url)
        self._connect()

        self.refresh_conversations()
        self._run(services.library.list_models, self._show_models)
        self._run(self._chat.current_status, self._on_model_status)
        self.composer.setFocus()

    # -- construction ---------------------------------------------------------------------------

    def _build(self, confirm_open: ConfirmOpen, open_url: OpenUrl) -> None:
        self.newChatButton = QPushButton("New chat")
        self.newChatButton.setObjectName("newChatButton")
        self.conversationList = QListWidget()
        self.conversationList.setObjectName("conversationList")
        self.conversationList.setUniformItemSizes(True)
        # Long titles are elided rather than scrolled sideways.
        self.conversationList.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.conversationList.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.renameButton = QPushButton("Rename")
        self.renameButton.setObjectName("renameButton")
        self.deleteButton = QPushButton("Delete")
        self.deleteButton.setObjectName("deleteButton")

        sidebar = QWidget()
        sidebar.setObjectName("sidebar")
        sidebar_layout = QVBoxLayout(sidebar)
        sidebar_layout.setContentsMargins(10, 10, 10, 10)
        sidebar_layout.addWidget(self.newChatButton)
        sidebar_layout.addWidget(self.conversationList, 1)
        manage = QHBoxLayout()
        manage.addWidget(self.renameButton)
        manage.addWidget(self.deleteButton)
        sidebar_layout.addLayout(manage)

        self.modelPicker = QComboBox()
        self.modelPicker.setObjectName("modelPicker")
        self.modelPicker.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        model_label = QLabel("Model")
        model_label.setBuddy(self.modelPicker)
        top = QHBoxLayout()
        top.addWidget(model_label)
        top.addWidget(self.modelPicker)
        top.addStretch(1)

        self.transcript = Transcript(confirm_open=confirm_open, open_url=open_url)
        self.composer = Composer()
        self.sendButton = QPushButton("Send")
        self.sendButton.setObjectName("sendButton")
        self.stopButton = QPushButton("Stop")
        self.stopButton.setObjectName("stopButton")
        self.stopButton.setEnabled(False)
        buttons = QVBoxLayout()
        buttons.addWidget(self.sendButton)
        buttons.addWidget(self.stopButton)
        buttons.addStretch(1)
        compose = QHBoxLayout()
        compose.addWidget(self.composer, 1)
        compose.addLayout(buttons)

        chat = QWidget()
        chat_layout = QVBoxLayout(chat)
        chat_layout.setContentsMargins(12, 10, 12, 10)
        chat_layout.addLayout(top)
        chat_layout.addWidget(self.transcript, 1)
        chat_layout.addLayout(compose)

        splitter = QSplitter(Qt.Orientation.Horizontal)
        splitter.addWidget(sidebar)
        splitter.addWidget(chat)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([250, 850])
        splitter.setChildrenCollapsible(False)
        self.setCentralWidget(splitter)

        self.statusBackend = _plain_label("statusBackend")
        self.statusStats = _plain_label("statusStats")
        self.statusBar().addPermanentWidget(self.statusBackend)
        self.statusBar().addPermanentWidget(self.statusStats)

        self._update_controls()

    def _connect(self) -> None:
        self.newChatButton.clicked.connect(self.new_chat)
        self.renameButton.clicked.connect(self._rename_selected)
        self.deleteButton.clicked.connect(self._delete_selected)
        self.conversationList.currentItemChanged.connect(self._on_conversation_picked)
        self.sendButton.clicked.connect(self._send)
        self.composer.submitted.connect(self._send)
        self.stopButton.clicked.connect(self._stop)
        self.modelPicker.activated.connect(self._on_model_picked)
        QShortcut(QKeySequence.StandardKey.New, self, self.new_chat)
        QShortcut(QKeySequence(Qt.Key.Key_Escape), self, self._stop)

        chat = self._chat
        chat.replyStarted.connect(self._on_reply_started)
        chat.replyDelta.connect(self._on_reply_delta)
        chat.replyFinished.connect(self._on_reply_finished)
        chat.replyFailed.connect(self._on_reply_failed)
        chat.modelStatus.connect(self._on_model_status)
        chat.busyChanged.connect(self._update_controls)
        chat.conversationsChanged.connect(self.refresh_conversations)

    # -- state the tests and the smoke test look at -----------------------------------------------

    @property
    def current_conversation_id(self) -> int | None:
        return self._current_id

    @property
    def initial_load_done(self) -> bool:
        return self._models_loaded and self._conversations_loaded and self._status_known

    # -- background plumbing ----------------------------------------------------------------------

    def _run(self, fn: Callable[[], T], on_done: Callable[[T], None]) -> None:
        """Run `fn` off the GUI thread; deliver its result here unless the window is gone by then."""

        if self._closed:
            return

        def done(result: T) -> None:
            if shiboken6.isValid(self) and not self._closed:
                on_done(result)

        def failed(error: Exception) -> None:
            if shiboken6.isValid(self) and not self._closed:
                self._show_error(str(error))

        self._services.background.call(fn, done, failed)

    def _show_error(self, message: str) -> None:
        self.statusBar().showMessage(message, ERROR_MESSAGE_MS)

    # -- conversations ----------------------------------------------------------------------------

    def refresh_conversations(self) -> None:
        self._run(self._services.store.list_conversations, self._show_conversations)

    def _show_conversations(self, conversations: Sequence[Conversation]) -> None:
        # The current conversation may be missing from a list read just before the chat service
        # created it; it stays current (only deleting it here ends it) and is selected next time.
        self._conversations_loaded = True
        # Rebuilding the list must not look like the user picking a conversation.
        self.conversationList.blockSignals(True)
        try:
            self.conversationList.clear()
            for conversation in conversations:
                item = QListWidgetItem(conversation.title)
                item.setData(Qt.ItemDataRole.UserRole, conversation.id)
                self.conversationList.addItem(item)
                if conversation.id == self._current_id:
                    self.conversationList.setCurrentItem(item)
        finally:
            self.conversationList.blockSignals(False)
        self._update_controls()

    def _selected_conversation(self) -> tuple[int, str] | None:
        item = self.conversationList.currentItem()
        if item is None:
            return None
        return int(item.data(Qt.ItemDataRole.UserRole)), item.text()

    def new_chat(self) -> None:
        self._current_id = None
        self._load_generation += 1
        self.conversationList.blockSignals(True)
        self.conversationList.setCurrentRow(-1)
        self.conversationList.blockSignals(False)
        self.transcript.clear()
        self._update_controls()
        self.composer.setFocus()

    def _on_conversation_picked(
        self, item: QListWidgetItem | None, _previous: QListWidgetItem | None
    ) -> None:
        if item is None:
            return
        self.open_conversation(int(item.data(Qt.ItemDataRole.UserRole)))

    def open_conversation(self, conversation_id: int) -> None:
        self._current_id = conversation_id
        self._load_generation += 1
        generation = self._load_generation
        self.transcript.clear()
        self._update_controls()
        store = self._services.store
        self._run(
            lambda: store.list_messages(conversation_id),
            lambda messages: self._show_messages(generation, conversation_id, messages),
        )

    def _show_messages(self, generation: int, conversation_id: int, messages: Sequence[Message]) -> None:
        if generation != self._load_generation:
            return
        entries = [_entry(message) for message in messages]
        if conversation_id == self._streaming_conversation:
            entries = self._with_live_reply(entries)
        self.transcript.set_entries(entries)
        self.transcript.scroll_to_bottom()

    def _with_live_reply(self, entries: list[TranscriptEntry]) -> list[TranscriptEntry]:
        """The database holds the reply as of its last flush; the text in memory is newer."""
        ids = {entry.message_id for entry in entries}
        if self._streaming_user is not None and self._streaming_user[0] not in ids:
            user_id, prompt = self._streaming_user
            entries.append(TranscriptEntry(user_id, "user", prompt))
        if self._streaming_message is None:
            return entries
        live = TranscriptEntry(self._streaming_message, "assistant", "".join(self._live_parts), "streaming")
        return [entry for entry in entries if entry.message_id != live.message_id] + [live]

    def _rename_selected(self) -> None:
        selected = self._selected_conversation()
        if selected is None:
            return
        conversation_id, title = selected
        new_title = self._ask(self, "Rename chat", "New name:", title)
        if new_title is None or not new_title.strip():
            return
        store = self._services.store
        self._run(
            lambda: store.rename_conversation(conversation_id, new_title.strip()),
            lambda _renamed: self.refresh_conversations(),
        )

    def _delete_selected(self) -> None:
        selected = self._selected_conversation()
        if selected is None:
            return
        conversation_id, title = selected
        if self._chat.busy and conversation_id == self._streaming_conversation:
            self._show_error("Stop the reply before deleting this chat.")
            return
        question = f"Delete “{title}” and all its messages? This cannot be undone."
        if not self._confirm(self, "Delete chat", question, "Delete"):
            return
        if conversation_id == self._current_id:
            self.new_chat()
        store = self._services.store
        self._run(
            lambda: store.delete_conversation(conversation_id), lambda _none: self.refresh_conversations()
        )

    # -- models -----------------------------------------------------------------------------------

    def _show_models(self, models: Sequence[InstalledModel]) -> None:
        self._models_loaded = True
        self.modelPicker.clear()
        for model in models:
            self.modelPicker.addItem(model.name, model.name)
        if not models:
            self.modelPicker.setPlaceholderText("No models installed")
            self._update_controls()
            return
        preferred = self.modelPicker.findData(self._services.settings.default_model)
        self.modelPicker.setCurrentIndex(max(preferred, 0))
        self._update_controls()
        chosen = models[self.modelPicker.currentIndex()]
        # A model that crashed the runner last time waits for the user to ask for it again.
        if self._preload_model and not chosen.last_load_error:
            self._chat.preload(chosen.name)

    def _selected_model(self) -> str | None:
        name = self.modelPicker.currentData()
        return name if isinstance(name, str) else None

    def _on_model_picked(self, _index: int) -> None:
        model = self._selected_model()
        if model is not None and model != self._services.settings.default_model:
            self._services.update_settings(default_model=model)
        if model is not None and self._preload_model and not self._chat.busy:
            self._chat.preload(model)

    def _on_model_status(self, status: ModelStatus) -> None:
        self._status_known = True
        self.statusBackend.setText(status.summary)
        # Tooltips are rich text when they look like HTML, so the detail is escaped first.
        self.statusBackend.setToolTip(f"<p>{html.escape(status.detail)}</p>" if status.detail else "")
        if status.state == "failed" or (status.state == "ready" and status.detail):
            self.statusBar().showMessage(status.detail or status.summary, ERROR_MESSAGE_MS)

    # -- sending and streaming --------------------------------------------------------------------

    def _send(self) -> None:
        prompt = self.composer.toPlainText()
        model = self._selected_model()
        if not prompt.strip() or self._chat.busy:
            return
        if model is None:
            self._show_error("Install a model before sending a message.")
            return
        self.composer.clear()
        self._pending_prompt = prompt
        self._pending_conversation = self._current_id
        self._chat.send(self._current_id, prompt, model)

    def _stop(self) -> None:
        # Escape works anywhere in the window; with nothing running there is nothing to cancel.
        if self._chat.busy:
            self._chat.stop()

    def _on_reply_started(
        self, conversation_id: int, user_message_id: int, assistant_message_id: int
    ) -> None:
        prompt = self._pending_prompt or ""
        self._pending_prompt = None
        self._streaming_conversation = conversation_id
        self._streaming_user = (user_message_id, prompt)
        self._streaming_message = assistant_message_id
        self._live_parts = []
        if self._current_id is None and self._pending_conversation is None:
            # Sent from "New chat": the window follows the conversation the service just created.
            self._current_id = conversation_id
            self._load_generation += 1
        if conversation_id != self._current_id:
            return
        self.transcript.add_entry(TranscriptEntry(user_message_id, "user", prompt))
        self.transcript.add_entry(TranscriptEntry(assistant_message_id, "assistant", "", "streaming"))
        self.transcript.scroll_to_bottom()
        self._update_controls()

    def _on_reply_delta(self, assistant_message_id: int, text: str) -> None:
        if assistant_message_id != self._streaming_message:
            return
        self._live_parts.append(text)
        self.transcript.append_delta(assistant_message_id, text)

    def _on_reply_finished(self, assistant_message_id: int, stats: GenerationStats, status: str) -> None:
        reply_stats = ReplyStats(
            stats.time_to_first_token_s, stats.tokens_per_second, stats.completion_tokens
        )
        self.transcript.finish(assistant_message_id, status, reply_stats)
        self.statusStats.setText(
            f"Last reply: TTFT {stats.time_to_first_token_s:.2f} s · {stats.tokens_per_second:.1f} tok/s"
        )
        self._end_stream()

    def _on_reply_failed(self, assistant_message_id: int, kind: str, message: str) -> None:
        log.info("reply failed (%s): %s", kind, message)
        self._show_error(message)
        if assistant_message_id >= 0:
            self.transcript.finish(assistant_message_id, "error", error=message)
        elif self._pending_prompt is not None and not self.composer.toPlainText():
            # The reply never started; hand the prompt back so nothing typed is lost.
            self.composer.setPlainText(self._pending_prompt)
        self._pending_prompt = None
        self._end_stream()
        if self._current_id is not None:
            # The store is the truth about what was kept (an error vs an interrupted reply).
            self.open_conversation(self._current_id)

    def _end_stream(self) -> None:
        self._streaming_conversation = None
        self._streaming_user = None
        self._streaming_message = None
        self._live_parts = []

    def _update_controls(self, _busy: bool | None = None) -> None:
        busy = self._chat.busy
        has_model = self._selected_model() is not None
        selected = self.conversationList.currentItem() is not None
        self.sendButton.setEnabled(has_model and not busy)
        self.stopButton.setEnabled(busy)
        self.modelPicker.setEnabled(has_model and not busy)
        self.renameButton.setEnabled(selected)
        self.deleteButton.setEnabled(selected)

    def closeEvent(self, event: QCloseEvent) -> None:
        self._closed = True
        super().closeEvent(event)
