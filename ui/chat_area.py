"""The window's middle column: the model bar, the transcript of the open chat, and the composer.

It shows what the chat session holds (the branch, the reply being written, the message being edited) and
tells the session what the user does with it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import shiboken6
from PySide6.QtCore import Qt, QTimer, QUrl, Signal
from PySide6.QtWidgets import QDialog, QFrame, QHBoxLayout, QPushButton, QVBoxLayout, QWidget

from app.attachments.files import FileStore
from app.chat.documents import TurnDocuments, prompt_attachments
from app.chat.session import (
    BranchChanged,
    BranchLoaded,
    ReplyBegan,
    ReplyFailed,
    ReplyFinished,
    StreamingReply,
)
from app.conversations.store import Message
from app.documents.library import Attachment
from app.errors import HearthError
from app.model_scan.dropped import is_model_drop
from app.remote.registry import split_model_name
from app.tools.config import ToolServerRegistry
from ui.attachments import AttachmentTray, FileDrops, PassageDialog, forget_opened_copies, openable_copy
from ui.collection_picker import CollectionPicker
from ui.composer import Composer
from ui.context_meter import ContextMeter
from ui.message_row import ReplyStats, TranscriptEntry
from ui.model_bar import ModelBar
from ui.provenance import ProvenanceDialog
from ui.row_documents import FileRef, SourceRef
from ui.row_tools import ToolCard
from ui.safe_browser import ConfirmOpen, OpenUrl
from ui.status_line import plain_label
from ui.thumbnails import Thumbnails
from ui.tool_widgets import ToolApprovalCard, ToolsPicker
from ui.transcript import Transcript
from ui.undo_bar import UndoBar
from ui.window_context import WindowContext

log = logging.getLogger("hearth.ui")

# The context meter is re-measured this long after the user stops typing.
MEASURE_DELAY_MS = 400


def tool_cards(message: Message) -> tuple[ToolCard, ...]:
    """A reply's calls, or a tool message's result: shown as cards, their text as data (never Markdown)."""
    if message.role == "tool":
        return (ToolCard.of_result(message.tool_result, message.content),)
    return tuple(ToolCard.of_call(call) for call in message.tool_calls)


def entry_for(message: Message) -> TranscriptEntry:
    stats = None
    if message.role == "assistant" and (
        message.ttft_ms is not None or message.tokens_per_second is not None or message.completion_tokens
    ):
        stats = ReplyStats(
            message.ttft_ms / 1000.0 if message.ttft_ms is not None else None,
            message.tokens_per_second,
            message.completion_tokens,
            message.prompt_tokens,
        )
    return TranscriptEntry(
        message.id,
        message.role,
        # A tool message's text is its result, which its card shows.
        "" if message.role == "tool" else message.content,
        message.status,
        message.error,
        stats,
        message.sibling_index,
        message.sibling_count,
        message.context_note,
        reasoning=message.reasoning,
        reasoning_seconds=message.reasoning_seconds,
        files=tuple(FileRef.of_part(part) for part in message.attachments),
        sources=tuple(SourceRef.of_part(part) for part in message.sources),
        tools=tool_cards(message),
    )


class ChatArea(QWidget):
    """`aboutToSend` before a message goes out: a settings edit still waiting to be saved applies to it."""

    aboutToSend = Signal()
    # list[pathlib.Path]: GGUF files or folders dropped on the chat, for the library to import.
    modelsDropped = Signal(list)

    def __init__(
        self,
        context: WindowContext,
        confirm_open: ConfirmOpen,
        open_url: OpenUrl,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._context = context
        self._session = context.session
        # A search hit in a reply's thinking: that reply opens with its Thinking section expanded.
        self._thinking_hit: int | None = None
        self._dialogs: list[QDialog] = []
        self._open_url = open_url
        # While a message is edited, the tray shows its files; those attached for the next new message wait
        # here (None: nothing is being edited).
        self._held_back: tuple[Attachment, ...] | None = None

        self.modelBar = ModelBar(context)
        self.undoBar = UndoBar()
        self.damagedBanner = QFrame()
        self.damagedBanner.setObjectName("damagedBanner")
        self.damagedLabel = plain_label("damagedLabel")
        self.damagedLabel.setWordWrap(True)
        self.salvageButton = QPushButton()
        self.salvageButton.setObjectName("salvageButton")
        self.restoreButton = QPushButton()
        self.restoreButton.setObjectName("restoreButton")
        damaged = QHBoxLayout(self.damagedBanner)
        damaged.setContentsMargins(10, 4, 6, 4)
        damaged.addWidget(self.damagedLabel, 1)
        damaged.addWidget(self.salvageButton)
        damaged.addWidget(self.restoreButton)
        self.damagedBanner.setVisible(context.read_only)
        self.transcript = Transcript(confirm_open=confirm_open, open_url=open_url)
        self.transcript.set_thinking_display(context.services.settings.show_thinking)
        self.thumbnails = Thumbnails(
            context.services.documents.files, context.services.documents_worker, self
        )
        self.transcript.set_thumbnails(self.thumbnails)
        self.editBanner = QFrame()
        self.editBanner.setObjectName("editBanner")
        self.editLabel = plain_label("editLabel")
        self.editLabel.setWordWrap(True)
        self.cancelEditButton = QPushButton()
        self.cancelEditButton.setObjectName("cancelEditButton")
        banner = QHBoxLayout(self.editBanner)
        banner.setContentsMargins(10, 4, 6, 4)
        banner.addWidget(self.editLabel, 1)
        banner.addWidget(self.cancelEditButton)
        self.editBanner.hide()
        self.contextMeter = ContextMeter()
        self.composer = Composer()
        services = context.services
        self.attachments = AttachmentTray(
            services.documents,
            services.documents_worker,
            context.show_error,
            images_refused=self.modelBar.images_refused,
        )
        self.collectionPicker = CollectionPicker(context.session, services.documents_service)
        self.toolsPicker = ToolsPicker(context.session, ToolServerRegistry(services.paths.home))
        self.toolApproval = ToolApprovalCard()
        services.chat.toolApprovalRequested.connect(self.toolApproval.ask)
        services.chat.toolApprovalEnded.connect(self.toolApproval.ended)
        documents = QHBoxLayout()
        documents.addWidget(self.attachments, 1)
        documents.addWidget(self.collectionPicker)
        documents.addWidget(self.toolsPicker)
        self.sendButton = QPushButton()
        self.sendButton.setObjectName("sendButton")
        self.stopButton = QPushButton()
        self.stopButton.setObjectName("stopButton")
        self.stopButton.setEnabled(False)
        buttons = QVBoxLayout()
        buttons.addWidget(self.sendButton)
        buttons.addWidget(self.stopButton)
        buttons.addStretch(1)
        compose = QHBoxLayout()
        compose.addWidget(self.composer, 1)
        compose.addLayout(buttons)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 10)
        layout.addWidget(self.modelBar)
        layout.addWidget(self.undoBar)
        layout.addWidget(self.damagedBanner)
        layout.addWidget(self.transcript, 1)
        layout.addWidget(self.editBanner)
        layout.addWidget(self.toolApproval)
        layout.addWidget(self.contextMeter)
        layout.addLayout(documents)
        layout.addLayout(compose)

        self._measure_timer = QTimer(self)
        self._measure_timer.setSingleShot(True)
        self._measure_timer.setInterval(MEASURE_DELAY_MS)
        self._measure_timer.timeout.connect(self._measure_context)

        self.sendButton.clicked.connect(self.send)
        self.composer.submitted.connect(self.send)
        self.composer.textChanged.connect(self.schedule_measure)
        self.composer.filesDropped.connect(self._files_dropped)
        self.composer.imagePasted.connect(self.attachments.attach_image)
        # Whether images can be attached follows the model chosen, and what the library says of it.
        self.modelBar.modelPicker.currentIndexChanged.connect(
            lambda _i: self.attachments.show_image_support()
        )
        self.modelBar.listed.connect(lambda _has: self.attachments.show_image_support())
        self.attachments.changed.connect(self.update_controls)
        # What the files cost is on the meter before Send.
        self.attachments.changed.connect(self.schedule_measure)
        self._session.collections_changed.connect(lambda _chosen: self.schedule_measure())
        self._session.tools_changed.connect(lambda _chosen: self.schedule_measure())
        self._opened_dir = services.paths.home / "opened"
        if not context.read_only:
            opened_dir = self._opened_dir
            context.run(lambda: forget_opened_copies(opened_dir), lambda _none: None)
        self._drops = FileDrops(self._files_dropped, self)
        self.transcript.viewport().setAcceptDrops(True)
        self.transcript.viewport().installEventFilter(self._drops)
        self.stopButton.clicked.connect(self.stop)
        self.cancelEditButton.clicked.connect(self._session.cancel_edit)
        self.transcript.actionTriggered.connect(self._on_message_action)
        self.transcript.fileClicked.connect(self._open_attached_file)
        self.transcript.sourceClicked.connect(self._show_source)
        context.services.chat.contextUsage.connect(self.contextMeter.set_usage)
        services.servers_service.changed.connect(self._servers_changed)

        session = self._session
        session.branch_loaded.connect(self._show_branch)
        session.branch_synced.connect(self._sync_branch)
        session.branch_changed.connect(self._show_changed_branch)
        session.editing_changed.connect(self._show_editing)
        session.reply_began.connect(self._show_reply_began)
        session.reply_noted.connect(self._show_note)
        session.reply_finished.connect(self._show_reply_finished)
        session.reply_failed.connect(self._show_reply_failed)

    def retranslate(self) -> None:
        self.modelBar.retranslate()
        self.editLabel.setText(
            self.tr("Editing your message. Sending makes a new version; the original stays one click away.")
        )
        self.cancelEditButton.setText(self.tr("Cancel"))
        self.damagedLabel.setText(
            self.tr(
                "The conversation database is damaged, so Hearth opened it read-only and changed nothing. "
                "Export your conversations, or restore a backup."
            )
        )
        self.salvageButton.setText(self.tr("Export all conversations…"))
        self.restoreButton.setText(self.tr("Restore from backup…"))
        self.composer.setPlaceholderText(
            self.tr("Message Hearth… (Enter to send, Shift+Enter for a new line)")
        )
        self.sendButton.setText(self.tr("Send"))
        self.attachments.retranslate()
        self.collectionPicker.retranslate()
        self.toolsPicker.retranslate()
        self.toolApproval.retranslate()
        self.update_controls()
        self.stopButton.setText(self.tr("Stop"))
        self.contextMeter.retranslate()
        self.undoBar.retranslate()

    def update_controls(self) -> None:
        busy = self._context.services.chat.busy
        writable = not self._context.read_only
        reading = self.attachments.reading
        self.sendButton.setEnabled(self._session.model is not None and not busy and writable and not reading)
        self.sendButton.setToolTip(
            self.tr("Waiting for the attached files to be read") if reading and not busy else ""
        )
        self.attachments.attachButton.setEnabled(writable)
        self.attachments.show_image_support()
        self.collectionPicker.button.setEnabled(writable)
        self.stopButton.setEnabled(busy)
        # Enabled without models too: "Add server…" is in it.
        self.modelBar.modelPicker.setEnabled(not busy and writable)
        self.composer.setEnabled(writable)
        self.transcript.set_editing_enabled(not busy and writable)

    def show_restored(self, backup_name: str) -> None:
        self.damagedLabel.setText(
            self.tr("Restored from {name}. Start Hearth again to continue writing.").format(name=backup_name)
        )
        self.restoreButton.setEnabled(False)

    # -- the branch shown -------------------------------------------------------------------------

    def clear(self) -> None:
        self.transcript.clear()

    def expect_thinking_hit(self, message_id: int | None) -> None:
        """The search hit about to be opened is in this reply's thinking (None: it is not)."""
        self._thinking_hit = message_id

    def _show_branch(self, loaded: BranchLoaded) -> None:
        entries = [entry_for(message) for message in loaded.messages]
        if loaded.live is not None:
            entries = self._with_live_reply(entries, loaded.live)
        self.transcript.set_entries(entries)
        focus = loaded.focus
        if focus is not None and focus in self._session.messages:
            if focus == self._thinking_hit:
                self.transcript.expand_thinking(focus)
            elif self._session.messages[focus].role == "tool":
                # A search hit in a tool's result: the words are in its card.
                self.transcript.set_cards_expanded(focus, True)
            self.transcript.scroll_to_message(focus, flash=True)
        else:
            self.transcript.scroll_to_bottom()
        self._thinking_hit = None
        self.schedule_measure()

    @staticmethod
    def _with_live_reply(entries: list[TranscriptEntry], live: StreamingReply) -> list[TranscriptEntry]:
        """The database holds the reply as of its last flush; the live reply in the session is newer."""
        ids = [entry.message_id for entry in entries]
        if live.user_id not in ids and live.user_text is not None:
            entries.append(TranscriptEntry(live.user_id, "user", live.user_text))
        streaming = TranscriptEntry(
            live.assistant_id, "assistant", "", "streaming", context_note=live.note, live=live.text
        )
        return [entry for entry in entries if entry.message_id != live.assistant_id] + [streaming]

    def _sync_branch(self, messages: Sequence[Message]) -> None:
        """Sibling counts and provenance, without re-rendering unchanged rows."""
        self.transcript.sync_entries([entry_for(m) for m in messages])

    def _show_changed_branch(self, changed: BranchChanged) -> None:
        self.transcript.sync_entries([entry_for(m) for m in changed.messages])
        if changed.focus is not None and changed.focus in self._session.messages:
            self.transcript.scroll_to_message(changed.focus)
        self.schedule_measure()

    # -- asking -----------------------------------------------------------------------------------

    def send(self) -> None:
        session = self._session
        prompt = self.composer.toPlainText()
        if not session.can_send(prompt) or self.attachments.reading:
            return
        if session.model is None:
            self._context.show_error(self.tr("Install a model before sending a message."))
            return
        self.aboutToSend.emit()
        if session.creating:
            session.after_creation(self.send)
            return
        self.composer.clear()
        # While editing, the tray holds the edited message's files as the user left them: they go with the
        # new version (and the files held back come back once the edit ends, in _show_editing).
        attachments = self.attachments.attachments()
        self.attachments.clear()
        session.send(prompt, attachments)

    def stop(self) -> None:
        # Escape works anywhere in the window; with nothing running there is nothing to cancel.
        if self._context.services.chat.busy:
            self._context.services.chat.stop()

    def _show_editing(self, message: Message | None) -> None:
        tray = self.attachments
        if message is None:
            self.editBanner.hide()
            self.composer.clear()
            held, self._held_back = self._held_back, None
            if held is not None:
                tray.set_attachments(held)
            return
        if self._held_back is None:
            self._held_back = tray.attachments()
        # The edited message's files, to keep, take off or add to.
        tray.set_attachments(prompt_attachments(message))
        self.composer.setPlainText(message.content)
        self.editBanner.show()
        self.composer.setFocus()

    def _on_message_action(self, action: str, message_id: int) -> None:
        session = self._session
        if action == "regenerate":
            session.regenerate(message_id)
        elif action == "edit":
            session.begin_edit(message_id)
        elif action == "delete":
            self._delete_message(message_id)
        elif action in ("previous", "next"):
            session.switch_sibling(message_id, -1 if action == "previous" else 1)
        elif action == "info":
            self._show_provenance(message_id)

    def _delete_message(self, message_id: int) -> None:
        if not self._session.can_delete_message(message_id):
            return
        question = self.tr("Delete this message and everything after it on this branch? Other versions stay.")
        if self._context.dialogs.confirm(self, self.tr("Delete message"), question, self.tr("Delete")):
            self._session.delete_message(message_id)

    def _files_dropped(self, paths: Sequence[Path]) -> None:
        """Files to attach, except GGUF models and folders: those go to the library."""
        models = [path for path in paths if is_model_drop(path)]
        attached = [path for path in paths if path not in models]
        if attached:
            self.attachments.attach_paths(attached)
        if models:
            self.modelsDropped.emit(models)

    def _open_attached_file(self, message_id: int, index: int) -> None:
        row = self.transcript.row(message_id)
        if row is None or index >= len(row.entry.files):
            return
        self.open_stored_file(row.entry.files[index].name, row.entry.files[index].sha256)

    def open_stored_file(self, name: str, sha256: str | None) -> None:
        """Open an attachment with the system's application for it (see `openable_copy` for why a copy)."""
        if sha256 is None:
            return
        paths = self._context.services.paths
        stored = FileStore(paths.attachments_dir).path(sha256)

        def copy() -> Path | None:
            try:
                return openable_copy(stored, name, self._opened_dir)
            except FileNotFoundError:
                return None

        def open_copy(copied: Path | None) -> None:
            if copied is None:
                self._context.show_error(
                    self.tr("{name} is no longer stored; attach it again to open it.").format(name=name)
                )
            elif not self._open_url(QUrl.fromLocalFile(str(copied))):
                self._context.show_error(self.tr("No application could open {name}.").format(name=name))

        self._context.run(copy, open_copy)

    def _show_source(self, message_id: int, index: int) -> None:
        row = self.transcript.row(message_id)
        if row is None or index >= len(row.entry.sources):
            return
        source = row.entry.sources[index]
        sha256 = source.sha256
        opener = (lambda: self.open_stored_file(source.name, sha256)) if sha256 is not None else None
        dialog = PassageDialog(source.name, source.location, source.text, opener, self.window())
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self._dialogs = [d for d in self._dialogs if shiboken6.isValid(d)] + [dialog]
        dialog.open()

    def _show_provenance(self, message_id: int) -> None:
        message = self._session.messages.get(message_id)
        if message is None:
            return
        library = self._context.services.library

        def model_file() -> str | None:
            if not message.model_name:
                return None
            try:
                return library.get(message.model_name).path.name
            except HearthError:
                # Removed from the library since: the dialog says "not recorded".
                return None

        def show(file_name: str | None) -> None:
            dialog = ProvenanceDialog(message, file_name, self.window())
            dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            self._dialogs = [d for d in self._dialogs if shiboken6.isValid(d)] + [dialog]
            dialog.open()

        self._context.run(model_file, show)

    # -- the reply being written ------------------------------------------------------------------

    def _show_reply_began(self, began: ReplyBegan) -> None:
        if not began.shown:
            return
        reply, request = began.reply, began.request
        if request.kind in ("regenerate", "edit") and request.target is not None:
            self.transcript.remove_from(request.target)
        if reply.user_text is not None:
            files = tuple(FileRef.of_attachment(a) for a in request.attachments)
            self.transcript.add_entry(TranscriptEntry(reply.user_id, "user", reply.user_text, files=files))
        self.transcript.add_entry(
            TranscriptEntry(reply.assistant_id, "assistant", "", "streaming", live=reply.text)
        )
        self.transcript.scroll_to_bottom()

    def _show_note(self, reply: StreamingReply) -> None:
        self.transcript.annotate(reply.assistant_id, reply.note)

    def _show_reply_finished(self, finished: ReplyFinished) -> None:
        stats = finished.stats
        reply_stats = ReplyStats(
            stats.time_to_first_token_s, stats.tokens_per_second, stats.completion_tokens, stats.prompt_tokens
        )
        self.transcript.finish(
            finished.assistant_id, finished.status, reply_stats, context_note=finished.note
        )
        self.schedule_measure()

    def _show_reply_failed(self, failed: ReplyFailed) -> None:
        log.info("reply failed (%s): %s", failed.kind, failed.message)
        self._context.show_error(failed.message)
        request = failed.request
        if failed.assistant_id >= 0:
            self.transcript.finish(failed.assistant_id, "error", error=failed.message)
        elif request is not None and request.text and not self.composer.toPlainText():
            # The reply never started; hand the prompt back so nothing typed is lost.
            editing = False
            if request.kind == "edit" and request.target is not None:
                self._session.begin_edit(request.target)
                editing = self._session.editing == request.target
            self.composer.setPlainText(request.text)
            if editing:
                # The files as the user left them, not the edited message's.
                self.attachments.set_attachments(request.attachments)
            else:
                self.attachments.restore(request.attachments)
        self.schedule_measure()

    # -- the context budget -----------------------------------------------------------------------

    def schedule_measure(self) -> None:
        self._measure_timer.start()

    def _servers_changed(self) -> None:
        # The chosen server's context may be known (its models listed) or set now.
        model = self._session.model
        if model is not None and split_model_name(model) is not None:
            self.schedule_measure()

    def _measure_context(self) -> None:
        context, session = self._context, self._session
        model = session.model
        # Measuring loads the model; a window told not to preload (the smoke test) leaves it alone.
        if model is None or not context.preload_model or context.is_closed() or session.creating:
            return
        attachments, collections = self.attachments.attachments(), session.collections
        context.services.chat.measure_context(
            session.current_id,
            self.composer.toPlainText(),
            model,
            documents=TurnDocuments(attachments, collections) if attachments or collections else None,
            replacing=session.editing,
            tools=session.tools,
        )
