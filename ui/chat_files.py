"""Chats in and out of files: export (one chat or all of them), import, and for a damaged database the
salvage export and the restore from a backup."""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QWidget

from app.conversations.store import ExportReport, ImportReport, export_filename
from app.storage.backup import BackupInfo, RestoreResult, list_backups, restore_backup
from ui.window_context import WindowContext

CHAT_FILES = "JSON (*.json);;All files (*)"


class ChatFiles(QObject):
    """`openRequested(conversation_id)` for the first chat an import brought in; `restored(backup name)` once
    a backup replaced the damaged database."""

    openRequested = Signal(int)
    restored = Signal(str)

    def __init__(self, context: WindowContext, window: QWidget) -> None:
        super().__init__(window)
        self._context = context
        # The dialogs' parent.
        self._window = window

    def export_current(self, fmt: str) -> None:
        conversation_id = self._context.session.current_id
        if conversation_id is None:
            self._context.show_error(self.tr("Open a chat to export it."))
            return
        self.export_conversation(conversation_id, fmt)

    def export_conversation(self, conversation_id: int, fmt: str) -> None:
        conversation = self._context.session.conversations.get(conversation_id)
        suggested = export_filename(conversation, fmt) if conversation else f"chat-{conversation_id}.{fmt}"
        name_filter = self.tr("Markdown (*.md)") if fmt == "md" else self.tr("JSON (*.json)")
        path = self._context.dialogs.ask_save(self._window, self.tr("Export chat"), suggested, name_filter)
        if path is None:
            return
        services = self._context.services
        self._context.run(
            lambda: services.export_conversation(conversation_id, path, fmt),
            lambda written: self._context.show_info(self.tr("Exported to {path}").format(path=written)),
        )

    def export_all(self, fmt: str) -> None:
        folder = self._context.dialogs.ask_folder(self._window, self.tr("Export all chats to a folder"))
        if folder is None:
            return
        store = self._context.services.store

        def done(report: ExportReport) -> None:
            message = self.tr("Exported %n chat(s) to {folder}", "", len(report.written)).format(
                folder=folder
            )
            if report.unreadable:
                message += " · " + self.tr("%n could not be read", "", len(report.unreadable))
            self._context.show_info(message)

        self._context.run(lambda: store.export_all(folder, fmt), done)

    def import_chats(self) -> None:
        path = self._context.dialogs.ask_open(
            self._window, self.tr("Import chats (Hearth JSON or ChatGPT conversations.json)"), CHAT_FILES
        )
        if path is None:
            return
        store = self._context.services.store
        self._context.run(lambda: store.import_file(path), self._imported)

    def _imported(self, report: ImportReport) -> None:
        source = self.tr("ChatGPT export") if report.source == "chatgpt" else self.tr("Hearth export")
        message = self.tr("Imported %n chat(s) from the {source}", "", report.conversations).format(
            source=source
        )
        if report.skipped:
            message += " · " + self.tr("%n message(s) left out (system, tool or empty)", "", report.skipped)
        self._context.show_info(message)
        self._context.session.refresh_conversations()
        if report.conversation_ids:
            self.openRequested.emit(report.conversation_ids[0])

    # -- a damaged database -----------------------------------------------------------------------

    def salvage_export(self) -> None:
        """Export every conversation that can still be read from the damaged database, as JSON."""
        folder = self._context.dialogs.ask_folder(
            self._window, self.tr("Export all conversations to a folder")
        )
        if folder is None:
            return
        store = self._context.services.store
        self._context.run(lambda: store.export_all(folder, "json"), self._salvaged)

    def _salvaged(self, report: ExportReport) -> None:
        message = self.tr("Exported %n conversation(s)", "", len(report.written))
        if report.unreadable:
            message += " · " + self.tr("%n could not be read", "", len(report.unreadable))
        self._context.show_info(message)

    def restore_from_backup(self) -> None:
        paths = self._context.services.paths
        self._context.run(lambda: list_backups(paths), self._choose_backup)

    def _choose_backup(self, backups: list[BackupInfo]) -> None:
        dialogs = self._context.dialogs
        if not backups:
            folder = self._context.services.paths.backups_dir
            self._context.show_error(self.tr("There are no backups in {folder}.").format(folder=folder))
            return
        names = [
            f"{b.created.astimezone():%Y-%m-%d %H:%M} · {b.path.name} · {self._carried(b)}" for b in backups
        ]
        index = dialogs.ask_choice(
            self._window, self.tr("Restore from backup"), self.tr("Backup to restore:"), names
        )
        if index is None:
            return
        question = self.tr(
            "Replace the damaged database with this backup? The damaged file is kept in the backups folder."
        )
        if not dialogs.confirm(self._window, self.tr("Restore from backup"), question, self.tr("Restore")):
            return
        services, chosen = self._context.services, backups[index].path

        def restore() -> RestoreResult:
            # Its read-only connections let go of the file before it is moved aside.
            services.core.db.dispose()
            return restore_backup(services.paths, chosen, lock_held=True)

        def done(result: RestoreResult) -> None:
            self.restored.emit(result.restored_from.name)
            self._context.session.refresh_conversations()
            if result.files_missing:
                self._context.show_error(
                    self.tr(
                        "%n attached file(s) were in neither the backup nor the file store: their messages "
                        "show them as no longer stored.",
                        "",
                        len(result.files_missing),
                    )
                )

        self._context.run(restore, done)

    def _carried(self, backup: BackupInfo) -> str:
        if backup.files is None:
            return self.tr("database only")
        return self.tr("%n attached file(s)", "", backup.files)
