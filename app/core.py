"""The composition root's Qt-free half: what the CLI and the GUI both need, opened in one place."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from filelock import FileLock, Timeout

from app.attachments.files import FileStore
from app.conversations.store import ConversationStore
from app.errors import DamagedDatabase
from app.library.installed import ModelLibrary
from app.paths import HearthPaths
from app.settings import Settings, SettingsStore, load_settings
from app.storage.db import Database
from app.storage.stored_files import delete_unlisted

if TYPE_CHECKING:
    from app.documents.embedding import RunnerEmbedder
    from app.documents.library import DocumentLibrary

log = logging.getLogger("hearth.core")


@dataclass
class Core:
    paths: HearthPaths
    # The one holder of the settings: the engine and the services read them from here.
    settings_store: SettingsStore
    db: Database
    store: ConversationStore
    library: ModelLibrary
    # The one file store of this process: files waiting in the composer are pinned in it, and every release
    # of unreferenced files (a conversation deleted, a collection removed) goes through it and leaves them.
    files: FileStore
    # Why the database is open read-only (it failed its check at start-up), or None.
    damaged: str | None = None
    _embedder: RunnerEmbedder | None = field(default=None, init=False, repr=False)

    @property
    def settings(self) -> Settings:
        return self.settings_store.current

    @classmethod
    def open(cls, paths: HearthPaths, *, allow_damaged: bool = False, window: bool = False) -> Core:
        """With `allow_damaged`, a database that fails its check opens read-only instead of raising.
        `window`: the caller is the window, which holds the instance lock (app.qt.single_instance)."""
        paths.ensure()
        settings = SettingsStore(load_settings(paths.settings_path))
        files = FileStore(paths.attachments_dir)
        try:
            db = Database.open(paths.db_path, paths.backups_dir)
        except DamagedDatabase as exc:
            if not allow_damaged:
                raise
            log.error("opening the damaged database read-only: %s", exc)
            db = Database.open_read_only(paths.db_path)
            library = ModelLibrary(db, paths.models_dir)
            store = ConversationStore(db, files=files)
            return cls(paths, settings, db, store, library, files, damaged=str(exc))
        store = ConversationStore(db, files=files, on_release=lambda: _release_documents(db, files))
        # A reply still marked streaming was cut off by a crash or a kill: say so instead of pretending.
        interrupted = store.mark_interrupted_streaming()
        if interrupted:
            log.warning("%d reply(ies) were interrupted by the previous session ending", interrupted)
        library = ModelLibrary(db, paths.models_dir)
        # The starter model ships as a Python package so a new user can chat offline right away.
        library.register_starter()
        # Files attached to a prompt that was never sent, left by a crash between deletions, or that a
        # restored database does not hold. The files a running window's composer holds are pinned in that
        # window's memory, not here: while one runs, only it releases (at its own start it holds the
        # instance lock, and nothing is pinned yet).
        if window:
            _release_at_start(db, files)
        else:
            _release_unless_a_window_runs(paths, db, files)
        return cls(paths, settings, db, store, library, files)

    def documents(self) -> DocumentLibrary:
        """Attachments and collections on this home. The embedding runner starts only when something has
        to be searched; close the library to stop it."""
        from app.documents.library import DocumentLibrary

        embedder = self.embedder()
        return DocumentLibrary(self.db, self.files, (lambda: embedder) if embedder else None)

    def embedder(self) -> RunnerEmbedder | None:
        """The bundled embedding model, None when this installation has none. One per Core, shared by the
        documents and the local API, so that both using it costs one runner process, not two. Made here,
        it has no process yet: the first text to embed starts one (and after close(), the next does)."""
        from app.documents.embedding import RunnerEmbedder
        from app.paths import bundled_embedding_model

        model = bundled_embedding_model()
        if model is None:
            return None
        if self._embedder is None or self._embedder.model_path != model:
            if self._embedder is not None:
                self._embedder.close()  # HEARTH_EMBEDDING_MODEL changed: its runner holds the old file
            self._embedder = RunnerEmbedder(model, log_path=self.paths.runner_log_file)
        return self._embedder

    def close(self) -> None:
        if self._embedder is not None:
            self._embedder.close()
        self.db.dispose()


def _release_documents(db: Database, files: FileStore) -> None:
    from app.documents.library import release_unreferenced

    release_unreferenced(db, files)


def _release_at_start(db: Database, files: FileStore) -> None:
    _release_documents(db, files)
    # Files no row lists are released only here, before anything in this process stores one.
    delete_unlisted(db, files)


def _release_unless_a_window_runs(paths: HearthPaths, db: Database, files: FileStore) -> None:
    lock = FileLock(paths.instance_lock)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.info("a Hearth window is running: unreferenced files are left for it to release")
        return
    try:
        _release_at_start(db, files)
    finally:
        lock.release()
