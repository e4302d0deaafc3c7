"""The GUI's handle on the model library and the Hub: blocking work on worker threads, results as signals.

Four pools of workers, so nothing waits behind something unrelated:
- Hub requests (search, listings with every remote header) on two threads: a new search need not wait for
  a slow listing;
- downloads on threads of their own (MAX_DOWNLOADS at once, the rest queue), so a multi-gigabyte transfer
  never holds up a search, a verify or chat (which has its own thread in ChatService); a model's update is a
  download too (its row in the downloads list has the key `update_key(name)`), while checking for updates is
  Hub requests;
- library reads, verify and delete on one thread, which keeps them in the order they were asked for;
- keyring calls on one thread: a keyring can hang for seconds (app.secret_store gives up after a timeout).
Signals are emitted from those threads; Qt queues them to receivers on the GUI thread. A call that fails
reaches the GUI thread through the pool's one error path, as `failed` or as a failed download.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from PySide6.QtCore import QObject, Qt, Signal

from app.chat.engine import ModelState, ModelStatus
from app.core import Core
from app.errors import HearthError
from app.library.downloads import (
    PART_SUFFIX,
    STATE_SUFFIX,
    DownloadCancelled,
    DownloadControl,
    Downloader,
    DownloadPaused,
    DownloadProgress,
    pending_downloads,
    repo_dir,
)
from app.library.hub import HubClient, RemoteFile, RemoteModel, RepoListing
from app.library.hub_token import HubToken
from app.library.installed import InstalledModel
from app.library.model_ops import assess_listing as assess
from app.library.model_ops import disk_usage, remove_installed
from app.library.recommended import RecommendedFits, RecommendedModel, load_recommended
from app.library.updates import (
    UPDATES_DIR,
    UpdateReport,
    check_updates,
    daily_check_due,
    forget_update,
    load_report,
    save_report,
    update_model,
)
from app.qt.background import Background, describe
from app.qt.chat_service import ChatService
from inference.estimator import describe_prediction

log = logging.getLogger("hearth.library")

MAX_DOWNLOADS: Final = 2
SEARCH_LIMIT: Final = 30
HUB_WORKERS: Final = 2


class DownloadPhase(enum.StrEnum):
    """Where one download is (DownloadState.state)."""

    QUEUED = "queued"
    DOWNLOADING = "downloading"
    PAUSED = "paused"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INSTALLED = "installed"


@dataclass(frozen=True)
class DownloadState:
    """One download as the GUI shows it; a new value on every change."""

    key: str  # "repo/file": one job at a time downloads a given file of a repo
    repo_id: str
    filename: str
    state: DownloadPhase
    done: int = 0
    total: int = 0
    progress: DownloadProgress | None = None  # the latest report while it runs
    message: str = ""  # why it stopped
    installed: InstalledModel | None = None

    @property
    def running(self) -> bool:
        return self.state in (DownloadPhase.QUEUED, DownloadPhase.DOWNLOADING)

    @property
    def resumable(self) -> bool:
        """Paused, or stopped by a failure: resuming retries, from the partial file if one was kept."""
        return self.state in (DownloadPhase.PAUSED, DownloadPhase.FAILED)


@dataclass
class _Download:
    state: DownloadState
    commit: str
    # None for a partial download found on disk until resuming lists its repo at the pinned commit.
    listing: RepoListing | None
    model: RemoteModel | None
    control: DownloadControl
    future: Future[None] | None = None  # the queued or running job


@dataclass
class _Update:
    """One model's update, shown as a download (its key is `update_key(name)`)."""

    name: str
    state: DownloadState
    control: DownloadControl
    commit: str  # the upstream commit the last check saw ("" when unknown): where its partial files are
    future: Future[None] | None = None


class UpdateOutcome(enum.StrEnum):
    """How one update ended (LibraryService.updateFinished)."""

    UPDATED = "updated"
    CURRENT = "current"  # main has the installed bytes already
    PAUSED = "paused"
    CANCELLED = "cancelled"
    FAILED = "failed"  # the old model is as it was


def download_key(repo_id: str, filename: str) -> str:
    return f"{repo_id}/{filename}"


def update_key(name: str) -> str:
    # Never a download's key: a repo id has no colon.
    return f"update:{name}"


class LibraryService(QObject):
    # (query, list[RepoSummary]); only the latest search is answered.
    searchFinished = Signal(str, object)
    # An app.library.model_ops.RepoAssessment; only the latest repo opened is answered.
    repoAssessed = Signal(object)
    # (operation, message): "search", "repo", "download", "verify", "remove", "models", "token", "switch",
    # "recommended".
    failed = Signal(str, str)
    # list[InstalledModel], after every change to the library; on the GUI thread, never after shutdown
    # (the window answers it by loading the default model through the chat service).
    modelsChanged = Signal(object)
    _listed = Signal(object)
    # An app.library.model_ops.DiskUsage.
    diskUsage = Signal(object)
    # A DownloadState.
    downloadChanged = Signal(object)
    # (model name, intact)
    verified = Signal(str, bool)
    # (model name, bytes freed: 0 when its file was outside the models folder)
    removed = Signal(str, int)
    # An app.secret_store.SecretStatus; never the token itself.
    tokenChanged = Signal(object)
    # (model name)
    switchStarted = Signal(str)
    # (model name, loaded, the memory report or why it failed)
    switchFinished = Signal(str, bool, str)
    # (model name, predicted vs actual memory), after every load, whoever asked for it.
    loadReport = Signal(str, str)
    # (app.library.updates.UpdateReport, fresh): fresh when the Hub was just asked, else the saved last check
    # (read when a panel opens, or changed by an update). A check that cannot reach the Hub is `failed`
    # with "updates".
    updatesChecked = Signal(object, bool)
    # (model name, UpdateOutcome, detail): the new commit when updated, why it stopped otherwise.
    updateFinished = Signal(str, str, str)
    # tuple[RecommendedModel, ...]: the list shipped with Hearth, read without the network.
    recommendedListed = Signal(object)
    # (tuple[RecommendedFit, ...], (vram_mib, ram_mib), complete): the fits for that what-if plan, of the
    # whole list (complete: the answer to check_recommended) or of the one recommended repo just opened. A
    # check that cannot start is `failed` with "recommended".
    recommendedChecked = Signal(object, object, bool)

    def __init__(self, core: Core, chat: ChatService, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._core = core
        self._library = core.library
        self._chat = chat
        # One for the session: a token the keyring would not take is kept here for this session only.
        self._token = HubToken()
        self._hub_pool = Background("hub", HUB_WORKERS, self)
        self._download_pool = Background("download", MAX_DOWNLOADS, self)
        self._disk = Background("library", parent=self)
        self._keyring = Background("token", parent=self)
        self._pools = (self._hub_pool, self._download_pool, self._disk, self._keyring)
        for pool in self._pools:
            pool.failed.connect(self._failed)
        self._lock = threading.Lock()
        self._downloads: dict[str, _Download] = {}
        self._updates: dict[str, _Update] = {}
        self._last_report: UpdateReport | None = None
        self._checking = False
        self._search_generation = 0
        self._repo_generation = 0
        self._recommended: tuple[RecommendedModel, ...] | None = None
        self._recommended_fits = RecommendedFits()
        # Why the last load of each model failed: written on the inference thread, cleared by a new switch.
        self._load_failures: dict[str, str] = {}
        # (model name, predicted vs actual memory) of the latest load, for a panel opened after it.
        self.last_load_report: tuple[str, str] | None = None
        self._closed = False
        self._listed.connect(self._publish_models, Qt.ConnectionType.QueuedConnection)
        # Direct: the handler runs on the inference thread that loaded the model, the only thread that
        # may read the runner's state.
        chat.modelStatus.connect(self._on_model_status, Qt.ConnectionType.DirectConnection)

    # -- the Hub ----------------------------------------------------------------------------------

    def search(self, query: str) -> None:
        self._search_generation += 1
        generation = self._search_generation

        def work() -> None:
            results = self._hub().search(query, limit=SEARCH_LIMIT)
            if generation == self._search_generation:
                self.searchFinished.emit(query, results)

        self._submit(self._hub_pool, "search", work)

    def open_repo(self, repo_id: str, *, vram_mib: int | None = None, ram_mib: int | None = None) -> None:
        """List a repo's GGUF models and assess each for this machine, or for the what-if one given."""
        self._repo_generation += 1
        generation = self._repo_generation

        def work() -> None:
            hub = self._hub()
            listing = hub.list_files(repo_id)
            context = self._core.settings.context_length
            assessment = assess(hub, listing, context=context, vram_mib=vram_mib, ram_mib=ram_mib)
            if generation == self._repo_generation:
                self.repoAssessed.emit(assessment)
            # Opening a recommended repo answers for its entry in the list too.
            found = self._recommended_fits.remember(
                hub.endpoint, self._recommended or (), assessment, vram_mib=vram_mib, ram_mib=ram_mib
            )
            if found is not None:
                self.recommendedChecked.emit((found,), (vram_mib, ram_mib), False)

        self._submit(self._hub_pool, "repo", work)

    def load_recommended(self) -> None:
        """Report the recommended models shipped with Hearth (read once a session; no network)."""

        def work() -> None:
            if self._recommended is None:
                self._recommended = load_recommended()
            self.recommendedListed.emit(self._recommended)

        self._submit(self._disk, "recommended", work)

    def check_recommended(self, *, vram_mib: int | None = None, ram_mib: int | None = None) -> None:
        """The size and fit of every recommended model's suggested file, from the Hub (the remote headers),
        for this machine or the what-if one given; what this session already found is not asked again."""

        def work() -> None:
            entries = self._recommended
            if entries is None:
                entries = self._recommended = load_recommended()
            fits = self._recommended_fits.check(
                self._hub(),
                entries,
                context=self._core.settings.context_length,
                vram_mib=vram_mib,
                ram_mib=ram_mib,
            )
            self.recommendedChecked.emit(fits, (vram_mib, ram_mib), True)

        self._submit(self._hub_pool, "recommended", work)

    # -- downloads --------------------------------------------------------------------------------

    def download(self, listing: RepoListing, model: RemoteModel) -> str:
        """Start (or queue) a download of `model` at the listing's commit; returns its key."""
        key = download_key(listing.repo_id, model.filename)
        with self._lock:
            record = self._downloads.get(key)
            if record is not None and record.state.running:
                return key
            state = DownloadState(
                key, listing.repo_id, model.filename, DownloadPhase.QUEUED, total=model.size or 0
            )
            self._downloads[key] = _Download(state, listing.commit, listing, model, DownloadControl())
        self.downloadChanged.emit(state)
        self._start(key)
        return key

    def pause(self, key: str) -> None:
        if key in self._updates:
            self._pause_update(key)
            return
        with self._lock:
            record = self._downloads.get(key)
        if record is None or not record.state.running:
            return
        if record.future is not None and record.future.cancel():
            # It was still waiting for a download thread: nothing to stop.
            self._stopped(key, DownloadPhase.PAUSED, "")
        else:
            record.control.pause()

    def resume(self, key: str) -> None:
        if key in self._updates:
            self._resume_update(key)
            return
        with self._lock:
            record = self._downloads.get(key)
            if record is None or not record.state.resumable:
                return
            record.control = DownloadControl()
            record.state = replace(record.state, state=DownloadPhase.QUEUED, message="")
            state = record.state
        self.downloadChanged.emit(state)
        self._start(key)

    def cancel(self, key: str) -> None:
        """Stop a download and delete its partial file."""
        if key in self._updates:
            self._cancel_update(key)
            return
        with self._lock:
            record = self._downloads.get(key)
        if record is None:
            return
        taken_back = record.state.running and record.future is not None and record.future.cancel()
        if record.state.running and not taken_back:
            # The download thread deletes the partial file and reports CANCELLED.
            record.control.cancel()
        elif record.state.running or record.state.resumable:
            # Paused, failed or never started: what an earlier attempt left is deleted here.
            self._submit(self._disk, "download", lambda: self._discard(key))

    def downloads(self) -> list[DownloadState]:
        """Every download of this session and every partial one found on disk, for a panel opening now."""
        with self._lock:
            return [r.state for r in self._downloads.values()] + [r.state for r in self._updates.values()]

    def _start(self, key: str) -> None:
        future = self._submit(
            self._download_pool,
            f"download of {key}",
            lambda: self._run_download(key),
            lambda error: self._stopped(key, DownloadPhase.FAILED, describe(error)),
        )
        with self._lock:
            self._downloads[key].future = future

    def _run_download(self, key: str) -> None:
        with self._lock:
            record = self._downloads[key]
            control = record.control
        self._set(key, lambda s: replace(s, state=DownloadPhase.DOWNLOADING))
        try:
            hub = self._hub()
            listing, model = self._resolve(hub, record)
            installed = Downloader(hub, self._library).download(
                listing, model, control=control, progress=lambda p: self._progress(key, p)
            )
        except (DownloadPaused, DownloadCancelled) as exc:
            self._stopped(
                key,
                DownloadPhase.CANCELLED if isinstance(exc, DownloadCancelled) else DownloadPhase.PAUSED,
                str(exc),
            )
            self.diskUsage.emit(disk_usage(self._library))
        else:
            self._set(key, lambda s: replace(s, state=DownloadPhase.INSTALLED, installed=installed))
            self._refresh()

    def _resolve(self, hub: HubClient, record: _Download) -> tuple[RepoListing, RemoteModel]:
        """The listing and model to download; for a partial download found on disk, its repo at the commit
        it was pinned to, and the model holding the file."""
        if record.listing is not None and record.model is not None:
            return record.listing, record.model
        repo_id, filename = record.state.repo_id, record.state.filename
        listing = hub.list_files(repo_id, record.commit)
        for model in listing.models:
            if any(part.filename == filename for part in model.files):
                with self._lock:
                    record.listing, record.model = listing, model
                return listing, model
        raise HearthError(f"{repo_id} no longer lists {filename} at commit {record.commit[:12]}.")

    def _discard(self, key: str) -> None:
        with self._lock:
            record = self._downloads[key]
            model = record.model or _partial_model(record.state)
        # Discarding makes no request: the client only names the files' places.
        Downloader(HubClient(self._core.settings.hf_endpoint), self._library).discard(
            record.state.repo_id, model
        )
        self._stopped(key, DownloadPhase.CANCELLED, "The partial download was deleted.")
        self.diskUsage.emit(disk_usage(self._library))

    def _progress(self, key: str, p: DownloadProgress) -> None:
        self._set(
            key, lambda s: replace(s, state=DownloadPhase.DOWNLOADING, done=p.done, total=p.total, progress=p)
        )

    def _stopped(self, key: str, state: DownloadPhase, message: str) -> None:
        self._set(key, lambda s: replace(s, state=state, message=message))

    def _set(self, key: str, change: Callable[[DownloadState], DownloadState]) -> None:
        with self._lock:
            record = self._downloads[key]
            record.state = change(record.state)
            state = record.state
        self.downloadChanged.emit(state)

    # -- updates from the Hub ---------------------------------------------------------------------

    def load_updates(self, *, check_if_due: bool = True) -> None:
        """Report the saved last check (no network), then check the Hub if the daily check is due."""

        def work() -> None:
            home = self._core.paths.home
            report = load_report(home)
            if report is not None:
                with self._lock:
                    self._last_report = report
                self.updatesChecked.emit(report, False)
            if check_if_due and daily_check_due(home, self._core.settings.check_updates_daily):
                self.check_updates()

        self._submit(self._disk, "updates", work)

    def check_updates(self) -> bool:
        """Ask the Hub whether main has other bytes for every Hub model; False when a check is running."""
        with self._lock:
            if self._checking:
                return False
            self._checking = True

        def work() -> None:
            try:
                report = check_updates(self._library, self._hub())
                with self._lock:
                    self._last_report = report
            finally:
                with self._lock:
                    self._checking = False
            try:
                save_report(self._core.paths.home, report)
            except HearthError:
                # Shown all the same; the failure to keep it is said through `failed`.
                self.updatesChecked.emit(report, True)
                raise
            self.updatesChecked.emit(report, True)

        if self._submit(self._hub_pool, "updates", work) is None:
            with self._lock:
                self._checking = False
            return False
        return True

    @property
    def checking_updates(self) -> bool:
        with self._lock:
            return self._checking

    def last_update_report(self) -> UpdateReport | None:
        """The latest check this session read or made, for a panel opening now."""
        with self._lock:
            return self._last_report

    def update(self, name: str) -> str:
        """Download the model's new file(s) from main and switch it to them; returns the download row's key.
        Until the switch the old model stays as it was, and it still does if the update fails."""
        key = update_key(name)
        with self._lock:
            record = self._updates.get(key)
            if record is not None and record.state.running:
                return key
            found = self._last_report.update_for(name) if self._last_report is not None else None
            state = DownloadState(
                key,
                found.repo if found is not None else "",
                found.file if found is not None else name,
                DownloadPhase.QUEUED,
            )
            self._updates[key] = _Update(
                name, state, DownloadControl(), found.upstream_commit if found is not None else ""
            )
        self.downloadChanged.emit(state)
        self._start_update(key)
        return key

    def _start_update(self, key: str) -> None:
        future = self._submit(
            self._download_pool,
            f"update of {key}",
            lambda: self._run_update(key),
            lambda error: self._update_stopped(key, UpdateOutcome.FAILED, describe(error)),
        )
        with self._lock:
            self._updates[key].future = future

    def _run_update(self, key: str) -> None:
        with self._lock:
            record = self._updates[key]
            name, control = record.name, record.control
        self._set_update(key, lambda s: replace(s, state=DownloadPhase.DOWNLOADING))
        try:
            result = update_model(
                self._library,
                self._hub(),
                name,
                control=control,
                progress=lambda p: self._set_update(
                    key,
                    lambda s: replace(
                        s, state=DownloadPhase.DOWNLOADING, done=p.done, total=p.total, progress=p
                    ),
                ),
            )
        except DownloadCancelled as exc:
            self._update_stopped(key, UpdateOutcome.CANCELLED, str(exc))
            return
        except DownloadPaused as exc:
            self._update_stopped(key, UpdateOutcome.PAUSED, str(exc))
            return
        model = result.model if result is not None else self._library.get(name)
        self._refresh()
        self._forget_update(name)
        self._set_update(key, lambda s: replace(s, state=DownloadPhase.INSTALLED, installed=model))
        if result is None:
            self.updateFinished.emit(name, UpdateOutcome.CURRENT.value, "")
        else:
            self.updateFinished.emit(name, UpdateOutcome.UPDATED.value, (model.revision or "")[:12])

    def _forget_update(self, name: str) -> None:
        """The model is on main's bytes now: the last check no longer lists it (saved, and said)."""
        with self._lock:
            report = self._last_report
            if report is not None:
                report = report.without(name)
                self._last_report = report
        if report is not None:
            self.updatesChecked.emit(report, False)
        try:
            forget_update(self._core.paths.home, name)
        except HearthError as exc:
            # The model is updated all the same; the next check finds it current.
            log.warning("%s", exc)

    def _update_stopped(self, key: str, outcome: UpdateOutcome, message: str) -> None:
        phase = {
            UpdateOutcome.PAUSED: DownloadPhase.PAUSED,
            UpdateOutcome.CANCELLED: DownloadPhase.CANCELLED,
        }.get(outcome, DownloadPhase.FAILED)
        self._set_update(key, lambda s: replace(s, state=phase, message=message))
        with self._lock:
            name = self._updates[key].name
        self.updateFinished.emit(name, outcome.value, message)
        self.diskUsage.emit(disk_usage(self._library))

    def _set_update(self, key: str, change: Callable[[DownloadState], DownloadState]) -> None:
        with self._lock:
            record = self._updates[key]
            record.state = change(record.state)
            state = record.state
        self.downloadChanged.emit(state)

    def _pause_update(self, key: str) -> None:
        record = self._updates[key]
        if not record.state.running:
            return
        if record.future is not None and record.future.cancel():
            self._update_stopped(key, UpdateOutcome.PAUSED, "")
        else:
            record.control.pause()

    def _resume_update(self, key: str) -> None:
        with self._lock:
            record = self._updates[key]
            if not record.state.resumable:
                return
            record.control = DownloadControl()
            record.state = replace(record.state, state=DownloadPhase.QUEUED, message="")
            state = record.state
        self.downloadChanged.emit(state)
        self._start_update(key)

    def _cancel_update(self, key: str) -> None:
        record = self._updates[key]
        taken_back = record.state.running and record.future is not None and record.future.cancel()
        if record.state.running and not taken_back:
            # The download thread deletes the partial file and reports CANCELLED.
            record.control.cancel()
        elif record.state.running or record.state.resumable:

            def discard() -> None:
                self._discard_update(record)
                self._update_stopped(key, UpdateOutcome.CANCELLED, "The partial download was deleted.")

            self._submit(self._disk, "download", discard)

    def _discard_update(self, record: _Update) -> None:
        """Delete the partial files a paused or failed update left (never a finished file: a finished
        update lives in the same folder)."""
        if not record.commit or not record.state.repo_id:
            return
        staging = Path(self._library.models_dir) / UPDATES_DIR / record.commit[:12]
        folder = repo_dir(staging, record.state.repo_id)
        if not folder.is_dir():
            return
        for path in folder.rglob("*"):
            if path.is_file() and path.name.endswith((PART_SUFFIX, STATE_SUFFIX)):
                path.unlink(missing_ok=True)

    # -- installed models -------------------------------------------------------------------------

    def refresh(self) -> None:
        """Report the installed models, the disk they use and partial downloads left on disk."""
        self._submit(self._disk, "models", self._refresh)

    def verify(self, name: str) -> None:
        self._submit(self._disk, "verify", lambda: self.verified.emit(name, self._library.verify(name)))

    def remove(self, name: str) -> None:
        def work() -> None:
            engine = self._chat.engine
            if engine.release_model(self._library.get(name).path):
                self._chat.modelStatus.emit(engine.status())
            model, deleted = remove_installed(self._library, name)
            self.removed.emit(name, model.total_size_bytes if deleted else 0)
            self._refresh()

        self._submit(self._disk, "remove", work)

    def switch_model(self, name: str) -> None:
        """Load `name` in the runner (the one already running is replaced), without touching chats."""
        self.switchStarted.emit(name)
        self._load_failures.pop(name, None)
        self._chat.preload(name).add_done_callback(lambda future: self._switched(name, future))
        # The window's model picker follows the default model, which whoever switched has just set.
        self.refresh()

    def _switched(self, name: str, future: Future[None]) -> None:
        # Runs on the inference thread right after the load, or wherever the future was cancelled.
        if future.cancelled():
            return
        # An unexpected load error reaches _load_failures later (through the GUI thread); the future has it.
        error = future.exception()
        # Not the status's model name: a model with the same bytes as the loaded one is not loaded again.
        failure = self._load_failures.get(name) or (repr(error) if error is not None else None)
        loaded = self._chat.engine.loaded
        if failure is None and loaded is not None:
            report = describe_prediction(loaded.predicted_bytes, loaded.memory_bytes)
            self.switchFinished.emit(name, True, report)
        else:
            self.switchFinished.emit(name, False, failure or self._chat.engine.status().detail)

    def _on_model_status(self, status: ModelStatus) -> None:
        if status.model_name is None:
            return
        if status.state is ModelState.FAILED:
            self._load_failures[status.model_name] = status.detail or status.summary
        elif status.state is ModelState.READY:
            loaded = self._chat.engine.loaded
            if loaded is not None:
                report = describe_prediction(loaded.predicted_bytes, loaded.memory_bytes)
                log.info("loaded %s: %s", status.model_name, report)
                self.last_load_report = (status.model_name, report)
                self.loadReport.emit(status.model_name, report)

    def _publish_models(self, models: list[InstalledModel]) -> None:
        if not self._closed:
            self.modelsChanged.emit(models)

    def _refresh(self) -> None:
        self._listed.emit(self._library.list_models())
        pending = pending_downloads(self._library.models_dir)
        found: list[DownloadState] = []
        with self._lock:
            known = {
                (r.state.repo_id, part)
                for r in self._downloads.values()
                for part in (
                    [p.filename for p in r.model.files] if r.model is not None else [r.state.filename]
                )
            }
            for partial in pending:
                if (partial.repo_id, partial.filename) in known:
                    continue
                key = download_key(partial.repo_id, partial.filename)
                state = DownloadState(
                    key,
                    partial.repo_id,
                    partial.filename,
                    DownloadPhase.PAUSED,
                    done=partial.done,
                    total=partial.size,
                )
                self._downloads[key] = _Download(state, partial.commit, None, None, DownloadControl())
                found.append(state)
        for state in found:
            self.downloadChanged.emit(state)
        self.diskUsage.emit(disk_usage(self._library))

    # -- the token --------------------------------------------------------------------------------

    def token_status(self) -> None:
        self._submit(self._keyring, "token", self._report_token)

    def set_token(self, text: str) -> None:
        """Store the token in the keyring, or for this session only when the keyring cannot take it."""

        def work() -> None:
            self._token.set(text)
            self._report_token()

        self._submit(self._keyring, "token", work)

    def clear_token(self) -> None:
        def work() -> None:
            self._token.clear()
            self._report_token()

        self._submit(self._keyring, "token", work)

    def _report_token(self) -> None:
        self.tokenChanged.emit(self._token.status())

    # -- plumbing ---------------------------------------------------------------------------------

    def _hub(self) -> HubClient:
        # Blocking: reads the token from the keyring (up to its timeout).
        return HubClient(self._core.settings.hf_endpoint, self._token.get())

    def _submit(
        self,
        pool: Background,
        operation: str,
        work: Callable[[], None],
        on_error: Callable[[Exception], None] | None = None,
    ) -> Future[None] | None:
        """Without `on_error`, a failure is answered by `failed` with the operation's name."""
        if self._closed:
            return None
        return pool.call(work, on_error=on_error, operation=operation)

    def _failed(self, operation: str, error: Exception) -> None:
        self.failed.emit(operation, describe(error))

    def shutdown(self) -> None:
        """Pause running downloads (they resume next time) and wait for every worker."""
        self._closed = True
        with self._lock:
            for record in self._downloads.values():
                record.control.pause()
        for pool in self._pools:
            pool.shutdown(cancel_pending=True)


def _partial_model(state: DownloadState) -> RemoteModel:
    """The one file a partial download found on disk is known by, enough to delete what it left."""
    return RemoteModel(state.filename, None, (RemoteFile(state.filename, state.total, None),))
