"""Downloads from the Hub that survive anything: resumable, verified, atomic. No Qt.

huggingface_hub stopped resuming interrupted downloads in 1.18 (its `hf_hub_download` restarts from zero),
and a multi-gigabyte GGUF on a flaky connection then never finishes. So Hearth owns the transfer loop and
uses huggingface_hub only for metadata and its HTTP session:

- bytes go to `<file>.part` in the models folder, with a `<file>.download.json` sidecar naming the repo,
  pinned commit, file, size and expected SHA-256, so a later run (after pause, Ctrl-C, a lost connection,
  a crash or a kill) resumes with `Range: bytes=N-` after hashing the N bytes it already has;
- a server that ignores Range (200 instead of 206) restarts the file cleanly from zero;
- SHA-256 is computed while downloading and compared with the Hub's LFS SHA-256 for the pinned commit
  (no second pass over the file); wrong bytes are deleted and never registered;
- stalls (no byte for `stall_timeout_s`) and dropped connections are retried with backoff, resuming;
- the finished file is fsynced and renamed into place atomically; every part of a split model has its
  header validated as soon as it is in place (llama.cpp opens parts 2..N itself, so each one is checked),
  and only a model whose every part passed is registered in the library; a vision model's projector is
  downloaded the same way after the model and checked against it before anything is registered.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import logging
import os
import queue
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Final

import filelock
import httpx2

from app.errors import HearthError, InvalidModelFile
from app.fsutil import fsync_directory
from app.library.hub import (
    HubClient,
    HubError,
    HubRateLimited,
    HubUnreachable,
    RemoteFile,
    RemoteModel,
    RepoListing,
    check_repo_filename,
    check_repo_id,
)
from app.library.installed import (
    CHUNK_BYTES,
    InstalledModel,
    ModelLibrary,
    ModelPart,
    check_model_name,
    check_model_part,
    check_projector,
)

log = logging.getLogger("hearth.downloads")

PART_SUFFIX: Final = ".part"
STATE_SUFFIX: Final = ".download.json"
LOCK_SUFFIX: Final = ".lock"
STATE_FORMAT: Final = "hearth.download"
# Room left free beyond the download itself, so finishing a model never fills the disk to the last byte.
FREE_SPACE_MARGIN: Final = 64 << 20
_PROGRESS_INTERVAL_S: Final = 0.1
# Received bytes are handed to the hashing and writing threads in blocks of about this size.
_BLOCK_BYTES: Final = 1 << 20
_QUEUED_BLOCKS: Final = 8
_SPEED_WINDOW_S: Final = 3.0


@dataclass(frozen=True)
class RetryPolicy:
    stall_timeout_s: float = 30.0  # no byte for this long: the connection is treated as dropped
    connect_timeout_s: float = 15.0
    # Failures in a row without a single new byte before giving up (progress resets the count).
    max_failures_without_progress: int = 6
    max_attempts: int = 200
    base_delay_s: float = 1.0
    max_delay_s: float = 30.0
    max_retry_after_s: float = 120.0


@dataclass(frozen=True)
class DownloadProgress:
    filename: str  # the part being downloaded
    part: int  # 1-based
    parts: int
    done: int  # bytes of the whole model (all parts)
    total: int
    speed_bps: float
    eta_s: float | None


@dataclass(frozen=True)
class PendingDownload:
    """A partial download left by pause, Ctrl-C, a lost connection or a crash; the same call resumes it."""

    repo_id: str
    commit: str
    filename: str
    size: int
    done: int
    part_path: Path


class DownloadPaused(HearthError):
    pass


class DownloadCancelled(HearthError):
    pass


class DownloadIntegrityError(HearthError):
    """The bytes did not match the Hub's SHA-256; the file was deleted."""


class DownloadControl:
    """Pause or cancel a running download from another thread; it stops at the next chunk or retry wait."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._cancel = False

    def pause(self) -> None:
        self._stop.set()

    def cancel(self) -> None:
        self._cancel = True
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def cancelled(self) -> bool:
        return self._cancel

    def wait(self, seconds: float) -> bool:
        """Sleep up to `seconds`; True when pause or cancel interrupted the sleep."""
        return self._stop.wait(seconds)


ProgressCallback = Callable[[DownloadProgress], None]


def _write_chunk(target: BinaryIO, data: bytes | bytearray) -> None:
    """Every downloaded byte goes through here (tests inject disk-full errors at this point)."""
    target.write(data)


def _free_bytes(directory: Path) -> int:
    return shutil.disk_usage(directory).free


def repo_dir(models_dir: Path, repo_id: str) -> Path:
    """Where a repo's files go: `hub/owner--name` (repo ids cannot contain `--`, so this is unambiguous)."""
    return Path(models_dir) / "hub" / check_repo_id(repo_id).replace("/", "--")


def local_path(models_dir: Path, repo_id: str, filename: str) -> Path:
    target = repo_dir(models_dir, repo_id).joinpath(*PurePosixPath(check_repo_filename(filename)).parts)
    # check_repo_filename already rules out escapes; this is the belt to its braces.
    if not target.resolve().is_relative_to(Path(models_dir).resolve()):
        raise HearthError(f"{filename!r} would be written outside the models folder.")
    return target


def _sidecar(final: Path, suffix: str) -> Path:
    return final.with_name(final.name + suffix)


def pending_downloads(models_dir: Path) -> list[PendingDownload]:
    """Partial downloads that a download call for the same repo and file would resume."""
    pending: list[PendingDownload] = []
    hub_dir = Path(models_dir) / "hub"
    if not hub_dir.is_dir():
        return pending
    for state_path in sorted(hub_dir.rglob(f"*{STATE_SUFFIX}")):
        state = _State.read(state_path)
        if state is None or state.complete:
            continue
        final = state_path.with_name(state_path.name.removesuffix(STATE_SUFFIX))
        part = _sidecar(final, PART_SUFFIX)
        pending.append(
            PendingDownload(
                repo_id=state.repo_id,
                commit=state.commit,
                filename=state.filename,
                size=state.size,
                done=part.stat().st_size if part.exists() else 0,
                part_path=part,
            )
        )
    return pending


@dataclass(frozen=True)
class _State:
    """The sidecar next to a partial download: what its bytes are a prefix of."""

    repo_id: str
    commit: str
    filename: str
    size: int
    sha256: str
    complete: bool = False

    @classmethod
    def read(cls, path: Path) -> _State | None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            return None
        try:
            state = cls(
                repo_id=data["repo_id"],
                commit=data["commit"],
                filename=data["filename"],
                size=data["size"],
                sha256=data["sha256"],
                complete=data.get("complete", False),
            )
        except KeyError:
            return None
        strings = (state.repo_id, state.commit, state.filename, state.sha256)
        if not all(isinstance(v, str) for v in strings) or not isinstance(state.size, int):
            return None
        return state

    def write(self, path: Path) -> None:
        data = {"format": STATE_FORMAT, "version": 1, **dataclasses.asdict(self)}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
        tmp.replace(path)

    def describes_same_bytes(self, other: _State) -> bool:
        return (self.filename, self.size, self.sha256) == (other.filename, other.size, other.sha256)


class _Meter:
    """Progress for the whole model, at most every _PROGRESS_INTERVAL_S, with speed over a short window."""

    def __init__(self, callback: ProgressCallback | None, total: int, parts: int) -> None:
        self._callback = callback
        self._total = total
        self._parts = parts
        self._base = 0  # bytes of earlier parts
        self._samples: deque[tuple[float, int]] = deque()
        self._last_report = 0.0

    def next_part(self, done_before: int) -> None:
        self._base = done_before

    def update(self, filename: str, part: int, part_done: int, *, force: bool = False) -> None:
        if self._callback is None:
            return
        now = time.monotonic()
        if not force and now - self._last_report < _PROGRESS_INTERVAL_S:
            return
        self._last_report = now
        done = self._base + part_done
        self._samples.append((now, done))
        while len(self._samples) > 2 and now - self._samples[0][0] > _SPEED_WINDOW_S:
            self._samples.popleft()
        first_t, first_done = self._samples[0]
        speed = (done - first_done) / (now - first_t) if now > first_t and done >= first_done else 0.0
        eta = (self._total - done) / speed if speed > 0 else None
        self._callback(DownloadProgress(filename, part, self._parts, done, self._total, speed, eta))

    def restart_window(self) -> None:
        # A resume or a retry is not a burst of speed: bytes read from disk must not count.
        self._samples.clear()


class Downloader:
    """Downloads Hub files into the library. One call downloads one model (every part of a split GGUF).

    Blocking: run it on a worker thread. Pause and cancel through a DownloadControl.
    """

    def __init__(self, hub: HubClient, library: ModelLibrary, *, policy: RetryPolicy | None = None) -> None:
        self._hub = hub
        self._library = library
        self._policy = policy or RetryPolicy()

    @property
    def models_dir(self) -> Path:
        return self._library.models_dir

    def download(
        self,
        listing: RepoListing,
        model: RemoteModel,
        *,
        name: str | None = None,
        control: DownloadControl | None = None,
        progress: ProgressCallback | None = None,
    ) -> InstalledModel:
        """Download (or resume) `model` at the listing's commit, verify it and register it; a vision
        model's projector is downloaded, verified and checked against the model with it.

        Returns the installed model; an identical model already installed is returned without a download.
        Raises DownloadPaused / DownloadCancelled when asked to stop (a pause keeps the partial file, a
        cancel deletes it), DownloadIntegrityError for wrong bytes (deleted), HubError subclasses for what
        the Hub refused, and HearthError for the rest (disk full, connection lost: partial file kept).
        """
        control = control or DownloadControl()
        parts = self._checked_parts(listing, model.parts)
        # The projector goes last, fetched and checked once the model is in place: its part and where it goes.
        projector: tuple[_Part, Path] | None = None
        if model.projector is not None:
            [projector_part] = self._checked_parts(listing, (model.projector,))
            projector = (
                projector_part,
                local_path(self.models_dir, listing.repo_id, projector_part.filename),
            )
        existing = self._library.find_hub_file(listing.repo_id, model.filename)
        if existing is not None:
            installed_shas = [p.sha256 for p in existing.parts] or [existing.sha256]
            if installed_shas == [p.sha256 for p in parts]:
                log.info("%s/%s is already installed as %s", listing.repo_id, model.filename, existing.name)
                return existing
            raise HearthError(
                f"{existing.name} is installed from commit {(existing.revision or '?')[:12]} of "
                f"{listing.repo_id}, and the file has changed since. Remove it with "
                f"`hearth models remove {existing.name}`, then download it again."
            )
        name = self._available_name(name, listing.repo_id, model)
        targets = [local_path(self.models_dir, listing.repo_id, p.filename) for p in parts]
        files = [*parts, *([projector[0]] if projector else [])]
        file_targets = [*targets, *([projector[1]] if projector else [])]
        self._check_free_space(files, file_targets)

        meter = _Meter(progress, sum(p.size for p in files), len(files))
        done_before = 0
        header = None
        for index, (part, target) in enumerate(zip(parts, targets, strict=True), start=1):
            meter.next_part(done_before)
            self._fetch(listing, part, target, index, control, meter)
            try:
                # Before the next part is fetched: a hostile part 2 costs no download of parts 3..N.
                checked = check_model_part(target, index, len(parts))
            except InvalidModelFile as exc:
                self._delete(targets)
                raise InvalidModelFile(
                    f"{listing.repo_id}: {exc} Its download was deleted and nothing was installed."
                ) from exc
            header = header or checked
            done_before += part.size
        if projector is not None:
            assert header is not None  # a model has at least one part
            meter.next_part(done_before)
            self._fetch(listing, projector[0], projector[1], len(files), control, meter)
            try:
                check_projector(projector[1], header)
            except InvalidModelFile as exc:
                self._delete(targets + self._unshared([projector[1]]))
                raise InvalidModelFile(
                    f"{listing.repo_id}: {exc} The download was deleted and nothing was installed."
                ) from exc
        meter.update(files[-1].filename, len(files), files[-1].size, force=True)

        model_parts = (
            tuple(ModelPart(p.filename, t, p.size, p.sha256) for p, t in zip(parts, targets, strict=True))
            if len(parts) > 1
            else ()
        )
        try:
            installed = self._library.register_download(
                targets[0],
                name=name,
                sha256=parts[0].sha256,
                repo_id=listing.repo_id,
                revision=listing.commit,
                filename=model.filename,
                parts=model_parts,
                projector=(
                    ModelPart(projector[0].filename, projector[1], projector[0].size, projector[0].sha256)
                    if projector is not None
                    else None
                ),
            )
        except InvalidModelFile:
            # The Hub vouched for these bytes, but they are not a model llama.cpp should be given.
            self._delete(targets + self._unshared(file_targets[len(targets) :]))
            raise
        for target in file_targets:
            _sidecar(target, STATE_SUFFIX).unlink(missing_ok=True)
            _sidecar(target, LOCK_SUFFIX).unlink(missing_ok=True)
        return installed

    def discard(self, repo_id: str, model: RemoteModel) -> None:
        """Delete what a paused or failed download of `model` left behind (nothing installed is touched)."""
        for part in model.files:
            target = local_path(self.models_dir, repo_id, part.filename)
            with self._locked(target):
                for suffix in (PART_SUFFIX, STATE_SUFFIX):
                    _sidecar(target, suffix).unlink(missing_ok=True)
                if self._library.find_hub_file(repo_id, model.filename) is None and self._unshared([target]):
                    target.unlink(missing_ok=True)

    def _unshared(self, projectors: list[Path]) -> list[Path]:
        """Those of these projector files no installed model is loaded with."""
        return [p for p in projectors if not self._library.projector_in_use(p)]

    def _checked_parts(self, listing: RepoListing, files: Sequence[RemoteFile]) -> list[_Part]:
        parts: list[_Part] = []
        for file in files:
            if file.sha256 is None or file.size is None:
                raise HubError(
                    f"The Hub gives no SHA-256 or size for {listing.repo_id}/{file.filename} at commit "
                    f"{listing.commit[:12]}, so a download could not be verified; Hearth will not start it."
                )
            parts.append(_Part(check_repo_filename(file.filename), file.size, file.sha256))
        return parts

    def _available_name(self, name: str | None, repo_id: str, model: RemoteModel) -> str:
        taken = {m.name for m in self._library.list_models()}
        if name is not None:
            name = check_model_name(name)
            if name in taken:
                raise HearthError(f"A model named {name!r} is already installed; choose another name.")
            return name
        base = _safe_name(model.name)
        owner = repo_id.split("/")[0]
        for candidate in (base, f"{base} ({owner})"):
            if candidate not in taken:
                return check_model_name(candidate)
        raise HearthError(f"A model named {base!r} is already installed; choose another name for this one.")

    def _check_free_space(self, parts: list[_Part], targets: list[Path]) -> None:
        needed = 0
        for part, target in zip(parts, targets, strict=True):
            if target.exists():
                continue
            partial = _sidecar(target, PART_SUFFIX)
            needed += part.size - (partial.stat().st_size if partial.exists() else 0)
        directory = targets[0].parent
        directory.mkdir(parents=True, exist_ok=True)
        free = _free_bytes(directory)
        if needed > 0 and free < needed + FREE_SPACE_MARGIN:
            raise HearthError(
                f"Not enough disk space in {directory}: the download needs {_mib(needed)} more "
                f"but only {_mib(free)} is free."
            )

    @staticmethod
    @contextmanager
    def _locked(target: Path) -> Iterator[None]:
        # Two downloads of one file (the window and a `hearth` command) would interleave their bytes.
        lock_path = _sidecar(target, LOCK_SUFFIX)
        lock = filelock.FileLock(lock_path, timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout:
            raise HearthError(
                f"{target.name} is already being downloaded by another Hearth window or command."
            ) from None
        try:
            yield
        finally:
            # Nothing left to resume: the lock file goes too (removed while still held).
            if not any(_sidecar(target, s).exists() for s in (PART_SUFFIX, STATE_SUFFIX)):
                # Windows refuses to delete a file that is open; the lock file then simply stays.
                with suppress(OSError):
                    lock_path.unlink(missing_ok=True)
            lock.release()

    def _fetch(
        self,
        listing: RepoListing,
        part: _Part,
        target: Path,
        index: int,
        control: DownloadControl,
        meter: _Meter,
    ) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        state_path = _sidecar(target, STATE_SUFFIX)
        state = _State(listing.repo_id, listing.commit, part.filename, part.size, part.sha256)
        with self._locked(target):
            saved = _State.read(state_path)
            if target.exists() and self._already_complete(target, state, saved):
                meter.update(part.filename, index, part.size, force=True)
                return
            if saved is None or not saved.describes_same_bytes(state):
                # Someone else's bytes, or another version of the file: not a prefix of this one.
                _sidecar(target, PART_SUFFIX).unlink(missing_ok=True)
            state.write(state_path)
            partial = _sidecar(target, PART_SUFFIX)
            try:
                _Transfer(self._hub, self._policy, listing, part, target, index, control, meter).run()
            except BaseException:
                # A download refused before its first byte (401, 403, a full disk) leaves nothing to resume.
                if partial.exists() and partial.stat().st_size == 0:
                    partial.unlink()
                    state_path.unlink(missing_ok=True)
                raise
            dataclasses.replace(state, complete=True).write(state_path)

    @staticmethod
    def _already_complete(target: Path, part: _State, saved: _State | None) -> bool:
        """A finished part of a split model from an earlier run (it was verified before its rename)."""
        if target.stat().st_size != part.size:
            target.unlink()
            return False
        if saved is not None and saved.complete and saved.describes_same_bytes(part):
            return True
        # Not known to be ours: trust it only if its bytes are right.
        digest = hashlib.sha256()
        with target.open("rb") as file:
            while chunk := file.read(CHUNK_BYTES):
                digest.update(chunk)
        if digest.hexdigest() == part.sha256:
            return True
        target.unlink()
        return False

    @staticmethod
    def _delete(targets: list[Path]) -> None:
        for target in targets:
            for path in (target, *(_sidecar(target, s) for s in (PART_SUFFIX, STATE_SUFFIX, LOCK_SUFFIX))):
                path.unlink(missing_ok=True)


@dataclass(frozen=True)
class _Part:
    filename: str
    size: int
    sha256: str


class _Transfer:
    """One file's bytes into `<target>.part`, resuming, retrying and hashing as it goes."""

    def __init__(
        self,
        hub: HubClient,
        policy: RetryPolicy,
        listing: RepoListing,
        part: _Part,
        target: Path,
        index: int,
        control: DownloadControl,
        meter: _Meter,
    ) -> None:
        self._hub = hub
        self._policy = policy
        self._listing = listing
        self._part = part
        self._target = target
        self._partial = _sidecar(target, PART_SUFFIX)
        self._index = index
        self._control = control
        self._meter = meter
        self._url = hub.file_url(listing.repo_id, listing.commit, part.filename)
        self._timeout = httpx2.Timeout(
            connect=policy.connect_timeout_s, read=policy.stall_timeout_s, write=30.0, pool=30.0
        )
        self._digest = hashlib.sha256()
        self._done = 0

    @property
    def _what(self) -> str:
        return f"{self._listing.repo_id}/{self._part.filename}"

    def run(self) -> None:
        fd = os.open(self._partial, os.O_RDWR | os.O_CREAT, 0o644)
        with os.fdopen(fd, "r+b") as file:
            try:
                self._hash_existing(file)
                self._loop(file)
                file.flush()
                os.fsync(file.fileno())
            except DownloadCancelled:
                file.close()
                self._partial.unlink(missing_ok=True)
                _sidecar(self._target, STATE_SUFFIX).unlink(missing_ok=True)
                raise
            except OSError as exc:
                raise self._disk_error(exc) from exc
        actual = self._digest.hexdigest()
        if actual != self._part.sha256:
            self._partial.unlink(missing_ok=True)
            _sidecar(self._target, STATE_SUFFIX).unlink(missing_ok=True)
            raise DownloadIntegrityError(
                f"{self._what} arrived with SHA-256 {actual}, but the Hub lists {self._part.sha256} for "
                f"commit {self._listing.commit[:12]}: the bytes were damaged or are not the published file. "
                f"The download was deleted; run the same command to download it again."
            )
        # Atomic: the model file never exists half-written.
        self._partial.replace(self._target)
        fsync_directory(self._target.parent)
        log.info("downloaded %s at %s (sha256 %s)", self._what, self._listing.commit, actual)

    def _hash_existing(self, file: BinaryIO) -> None:
        """Resume: hash the bytes a previous run left, so the final hash needs no second pass."""
        size = os.fstat(file.fileno()).st_size
        if size > self._part.size:
            file.truncate(0)
            size = 0
        while self._done < size:
            if self._control.stopping:
                self._stop()
            chunk = file.read(min(CHUNK_BYTES, size - self._done))
            if not chunk:
                break
            self._digest.update(chunk)
            self._done += len(chunk)
            self._meter.update(self._part.filename, self._index, self._done)
        if self._done:
            log.info("resuming %s at byte %d of %d", self._what, self._done, self._part.size)
        self._meter.restart_window()

    def _restart_from_zero(self, file: BinaryIO) -> None:
        file.seek(0)
        file.truncate(0)
        self._digest = hashlib.sha256()
        self._done = 0
        self._meter.restart_window()

    def _stop(self) -> None:
        if self._control.cancelled:
            raise DownloadCancelled(
                f"The download of {self._what} was cancelled; its partial file was deleted."
            )
        raise DownloadPaused(
            f"The download of {self._what} is paused at {_mib(self._done)} of {_mib(self._part.size)}; "
            f"download it again to resume."
        )

    def _loop(self, file: BinaryIO) -> None:
        failures = 0  # in a row, without progress
        attempts = 0
        delay = self._policy.base_delay_s
        while self._done < self._part.size or attempts == 0:
            if self._control.stopping:
                self._stop()
            attempts += 1
            before = self._done
            wait: float | None = None
            try:
                self._request(file)
                if self._done >= self._part.size:
                    return
                raise HubUnreachable(f"The server ended {self._what} early.")
            except HubRateLimited as exc:
                wait = min(exc.retry_after_s or delay, self._policy.max_retry_after_s)
                error: HearthError = exc
            except HubUnreachable as exc:
                error = exc
            except httpx2.TransportError as exc:
                error = HubUnreachable(self._lost_message(exc))
                log.warning("download of %s interrupted at byte %d: %r", self._what, self._done, exc)
            if self._done > before:
                failures, delay = 0, self._policy.base_delay_s
            failures += 1
            if failures > self._policy.max_failures_without_progress or attempts >= self._policy.max_attempts:
                raise error
            pause = wait if wait is not None else delay
            delay = min(delay * 2, self._policy.max_delay_s)
            log.info("retrying %s in %.1f s (attempt %d)", self._what, pause, attempts + 1)
            if self._control.wait(pause):
                self._stop()
            self._meter.restart_window()

    def _request(self, file: BinaryIO) -> None:
        start = self._done if self._done > 0 else None
        with self._hub.open_file(self._url, start=start, timeout=self._timeout) as response:
            status = response.status_code
            if status == 416 and self._done == self._part.size:
                return
            if status == 200 and self._done > 0:
                log.warning(
                    "%s ignored the Range header; restarting %s from zero", _host(response), self._what
                )
                self._restart_from_zero(file)
            elif status == 206:
                self._check_range(response.headers.get("content-range"))
            elif status != 200:
                raise self._hub.refused(
                    status, response.headers, self._what, self._hub.model_page(self._listing.repo_id)
                )
            encoding = response.headers.get("content-encoding", "identity").lower()
            if encoding != "identity":
                raise HubError(
                    f"The server sent {self._what} {encoding}-encoded; Hearth asked for raw bytes."
                )
            file.seek(self._done)
            file.truncate(self._done)
            sink = _Sink(file, self._digest)
            try:
                self._receive(response, sink)
            finally:
                sink.close()

    def _receive(self, response: httpx2.Response, sink: _Sink) -> None:
        size = self._part.size
        block = bytearray()
        try:
            for chunk in response.iter_raw():
                if self._done + len(block) + len(chunk) > size:
                    raise HubError(
                        f"The server sent more than the {size} bytes the Hub lists for {self._what}."
                    )
                block += chunk
                if len(block) >= _BLOCK_BYTES:
                    self._put(sink, block)
                    block = bytearray()
                    if self._control.stopping:
                        self._stop()
        except httpx2.TransportError:
            # What arrived before the connection broke is a good prefix: keep it for the resume.
            self._put(sink, block)
            raise
        self._put(sink, block)

    def _put(self, sink: _Sink, block: bytearray) -> None:
        """Hands `block` over to the sink, which owns it from now on (no copy)."""
        if not block:
            return
        sink.put(block)
        self._done += len(block)
        self._meter.update(self._part.filename, self._index, self._done)

    def _check_range(self, content_range: str | None) -> None:
        expected = f"bytes {self._done}-{self._part.size - 1}/{self._part.size}"
        if (content_range or "").strip() != expected:
            raise HubError(
                f"The server answered the resume of {self._what} with the wrong range "
                f"({content_range!r} instead of {expected!r})."
            )

    def _lost_message(self, exc: httpx2.TransportError) -> str:
        reason = (
            f"no data for {self._policy.stall_timeout_s:g} s"
            if isinstance(exc, httpx2.ReadTimeout)
            else "the connection failed"
            if isinstance(exc, httpx2.ConnectError)
            else "the connection was lost"
        )
        return (
            f"Downloading {self._what} from {_host_of(self._url)} failed ({reason}); the "
            f"{_mib(self._done)} downloaded so far are kept: run the same command to resume."
        )

    def _disk_error(self, exc: OSError) -> HearthError:
        if exc.errno == errno.ENOSPC:
            return HearthError(
                f"Not enough disk space in {self._partial.parent} to download {self._part.filename}: the "
                f"{_mib(self._done)} downloaded so far are kept. Free up "
                f"{_mib(self._part.size - self._done)} and run the same command to resume."
            )
        return HearthError(f"Could not write {self._partial}: {exc.strerror or exc}.")


class _Sink:
    """Hashes and writes blocks on two worker threads while the caller keeps reading the socket.

    hashlib and file writes release the GIL, so receiving, hashing and writing overlap instead of taking
    turns; done serially they cost more than half of curl's speed on a fast link (bar P6). A write error
    (a full disk) is raised by the next `put` or by `close`, which always waits for both threads.
    """

    def __init__(self, file: BinaryIO, digest: hashlib._Hash) -> None:
        self._to_hash: queue.Queue[bytearray | None] = queue.Queue(_QUEUED_BLOCKS)
        self._to_write: queue.Queue[bytearray | None] = queue.Queue(_QUEUED_BLOCKS)
        self._error: OSError | None = None
        self._threads = (
            threading.Thread(target=self._hash, args=(digest,), name="hearth-download-hash", daemon=True),
            threading.Thread(target=self._write, args=(file,), name="hearth-download-write", daemon=True),
        )
        for thread in self._threads:
            thread.start()

    def put(self, block: bytearray) -> None:
        if self._error is not None:
            raise self._error
        self._to_hash.put(block)
        self._to_write.put(block)

    def close(self) -> None:
        self._to_hash.put(None)
        self._to_write.put(None)
        for thread in self._threads:
            thread.join()
        if self._error is not None:
            raise self._error

    def _hash(self, digest: hashlib._Hash) -> None:
        while (block := self._to_hash.get()) is not None:
            digest.update(block)

    def _write(self, file: BinaryIO) -> None:
        while (block := self._to_write.get()) is not None:
            # After an error the queue is still drained, so `put` never blocks on a dead writer.
            if self._error is None:
                try:
                    _write_chunk(file, block)
                except OSError as exc:
                    self._error = exc


def _safe_name(name: str) -> str:
    """A library name from a Hub file name: the characters a model name allows, the rest as '-'."""
    cleaned = "".join(c if c.isalnum() or c in " ._-+()[]" else "-" for c in name).strip(" .-")
    return cleaned[:200] or "model"


def _host(response: httpx2.Response) -> str:
    return response.url.netloc.decode("ascii", "replace")


def _host_of(url: str) -> str:
    return httpx2.URL(url).netloc.decode("ascii", "replace")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"
