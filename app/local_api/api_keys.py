"""The local API's keys: several, each with a name, made, listed and revoked on its own.

What is known about a key besides its secret (its name, when it was made and last used, and its first
characters, to recognise it by) is in `local-api-keys.json` in the Hearth home, written atomically and
owner-only:

    {"schema_version": 1, "keys": [{"id": "…", "name": "default", "prefix": "hearth-Ab3xY",
                                    "created_at": "2025-01-02T03:04:05Z", "last_used_at": null}]}

The secret itself is only in the OS keyring, one entry per key ("local-api-key:NAME"), never in a file or
a log. `id` tells a key apart from a later one of the same name. A key the keyring would not take is kept
by the process that made it, for its session only, and is not in the file.

Several processes use the file at once: the window's server, `hearth serve`, `hearth api-keys`. Changes
are made under a lock file beside it (read, change, write), so none is lost and a server recording when a
key was last used cannot bring back one revoked meanwhile. A running server notices changes made
elsewhere from the file's stat(), once per request: a key revoked anywhere is refused from the next
request on. Revoking needs only the file, so it never waits for the keyring; a key made elsewhere needs
its secret, which a background thread fetches from the keyring, so it works there within about a second.
Requests themselves never wait for the keyring, nor for a write: last use is noted in memory and written
every FLUSH_INTERVAL_S, and when the server stops.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import json
import logging
import re
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from secrets import token_urlsafe
from typing import Final

from filelock import FileLock, Timeout

from app.errors import HearthError
from app.fsutil import PRIVATE_FILE_MODE
from app.secret_store import SecretResult, SecretStore
from app.settings import read_section, write_text_atomically

log = logging.getLogger("hearth.local_server.keys")

KEYS_FILE: Final = "local-api-keys.json"
SCHEMA_VERSION: Final = 1
# Each key is compared with every request's, so their number is bounded; one per program is the idea.
MAX_KEYS: Final = 32
MAX_NAME_CHARS: Final = 40
# "hearth-" and 5 random characters: enough to tell a user's keys apart, far too little to guess one.
PREFIX_CHARS: Final = 12
DEFAULT_KEY_NAME: Final = "default"
KEY_NOUN: Final = "API key"  # how keyring failures name the secret to the user
SECRET_ENTRY: Final = "local-api-key:"
# The one key of Hearths before named keys; it becomes the key named "default".
LEGACY_SECRET_ENTRY: Final = "local-server-api-key"
# Longer than the keyring's own timeout, which a change may wait for while holding the lock.
LOCK_TIMEOUT_S: Final = 10.0
FLUSH_INTERVAL_S: Final = 60.0
POLL_INTERVAL_S: Final = 0.5
# Read the file again even when its stat() looks the same: a file system with coarse timestamps could give
# two writes in a row the same one.
REREAD_INTERVAL_S: Final = 5.0
# A key whose secret the keyring would not give is asked for again this long after.
RETRY_FETCH_S: Final = 30.0
MAX_FILE_BYTES: Final = 1 << 20
# A request could repeat the key headers; more than this many candidates is no real client.
MAX_CANDIDATES: Final = 4
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_TIME_FORMAT: Final = "%Y-%m-%dT%H:%M:%SZ"


def new_api_key() -> str:
    return "hearth-" + token_urlsafe(32)


def check_key_name(name: str) -> str:
    cleaned = name.strip()
    if not cleaned or len(cleaned) > MAX_NAME_CHARS or not _NAME.fullmatch(cleaned):
        raise HearthError(
            f"“{name}” cannot name an API key: use up to {MAX_NAME_CHARS} letters, digits, dots, dashes and "
            "underscores, starting with a letter or digit."
        )
    return cleaned


def iso_time(timestamp: int) -> str:
    return time.strftime(_TIME_FORMAT, time.gmtime(timestamp))


def _parse_time(text: object) -> int:
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a time")
    return calendar.timegm(time.strptime(text, _TIME_FORMAT))


@dataclass(frozen=True)
class ApiKeyInfo:
    """A key without its secret: what lists show."""

    id: str
    name: str
    prefix: str  # the key's first PREFIX_CHARS characters
    created_at: int  # seconds since the epoch
    last_used_at: int | None = None
    persisted: bool = True  # False: the keyring would not take it, so it lasts for this session only


@dataclass(frozen=True, repr=False)
class CreatedKey:
    """A key just made: the only time its secret is shown."""

    info: ApiKeyInfo
    secret: str
    reason: str = ""  # why it is kept for this session only; "" when the keyring has it

    def __repr__(self) -> str:
        return f"CreatedKey(info={self.info!r}, secret='***', reason={self.reason!r})"


class ApiKeys:
    """The keys in one Hearth home. Thread-safe; keep one per process: keys kept for this session live in
    it, and the servers made from it (`accepted`) hear of its changes at once."""

    def __init__(
        self, home: Path, secrets: SecretStore | None = None, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._path = Path(home) / KEYS_FILE
        self._file_lock = FileLock(self._path.with_name(KEYS_FILE + ".lock"), mode=PRIVATE_FILE_MODE)
        self._secrets = secrets if secrets is not None else SecretStore()
        self._clock = clock
        # Held for a change's whole read-change-write, inside the process as the file lock is across them.
        self._changing_lock = threading.Lock()
        self._migration_lock = threading.Lock()
        self._migration_checked = False
        self._state = threading.Lock()
        self._session: dict[str, tuple[ApiKeyInfo, str]] = {}  # by id: keys the keyring would not take
        self._used: dict[str, int] = {}  # by id: last use seen by this process's servers
        self._unsaved: set[str] = set()  # ids whose last use is not in the file yet
        self._servers: weakref.WeakSet[AcceptedKeys] = weakref.WeakSet()

    @property
    def path(self) -> Path:
        return self._path

    def list_keys(self) -> list[ApiKeyInfo]:
        """By name. Blocking: the file (and once, the keyring, for the key of an older Hearth)."""
        self._migrate_once()
        stored = self._read()
        with self._state:
            keys = stored + [info for info, _secret in self._session.values()]
            used = dict(self._used)
        return sorted((_with_use(key, used.get(key.id)) for key in keys), key=lambda k: k.name.casefold())

    def get(self, name: str) -> ApiKeyInfo:
        found = _find(self.list_keys(), name)
        if found is None:
            raise _unknown(name)
        return found

    def create(self, name: str, *, session_ok: bool = True) -> CreatedKey:
        """Make a key and store its secret in the keyring. Blocking (the keyring).

        Raises HearthError, changing nothing, for a bad or taken name, when MAX_KEYS exist, and, unless
        `session_ok`, when the keyring will not take the key (else it is kept for this session only).
        """
        name = check_key_name(name)
        self._migrate_once()
        secret = new_api_key()
        with self._changing():
            stored = self._read()
            with self._state:
                existing = stored + [info for info, _secret in self._session.values()]
            taken = _find(existing, name)
            if taken is not None:
                raise HearthError(
                    f"There is already an API key named “{taken.name}”: choose another name, or revoke it "
                    "first."
                )
            if len(existing) >= MAX_KEYS:
                raise HearthError(
                    f"There are {len(existing)} API keys, the most Hearth keeps: revoke one first."
                )
            info = ApiKeyInfo(uuid.uuid4().hex, name, secret[:PREFIX_CHARS], int(self._clock()))
            stored_secret = self._secrets.set(_entry(name), secret, noun=KEY_NOUN, keep_for_session=False)
            reason = ""
            if stored_secret.persisted:
                try:
                    self._write([*stored, info])
                except HearthError:
                    self._secrets.delete(_entry(name), noun=KEY_NOUN)
                    raise
            elif not session_ok:
                raise HearthError(
                    f"The system keyring cannot keep API keys, so none was made: {stored_secret.reason}"
                )
            else:
                reason = f"{stored_secret.reason}; the key works until this Hearth closes."
                info = replace(info, persisted=False)
                with self._state:
                    self._session[info.id] = (info, secret)
            for server in self._live_servers():
                server.learn(info, secret)
        return CreatedKey(info, secret, reason)

    def revoke(self, name: str) -> tuple[ApiKeyInfo, SecretResult]:
        """Remove a key: every server refuses it from its next request on. Blocking (the keyring).

        Returns the key and how deleting its secret went (not `persisted`: the keyring still holds it,
        though nothing accepts it any more). Raises HearthError for an unknown name, changing nothing.
        """
        self._migrate_once()
        with self._changing():
            stored = self._read()
            found = _find(stored, name)
            if found is not None:
                self._write([key for key in stored if key.id != found.id])
            else:
                with self._state:
                    found = _find([info for info, _secret in self._session.values()], name)
                    if found is None:
                        raise _unknown(name)
                    del self._session[found.id]
            for server in self._live_servers():
                server.forget(found.id)
            with self._state:
                self._used.pop(found.id, None)
                self._unsaved.discard(found.id)
            if not found.persisted:
                return found, SecretResult(None, persisted=True)
            # Under the lock: a key of the same name made meanwhile elsewhere must keep its secret.
            return found, self._secrets.delete(_entry(found.name), noun=KEY_NOUN)

    def ensure_default(self) -> CreatedKey | None:
        """For `hearth serve`: the key named "default", made when no key was ever made in this home (no
        file, nothing kept for this session), so that serving works from the first run. None otherwise:
        once the user has keys, or revoked them all, none is made behind their back. Blocking."""
        self._migrate_once()
        with self._state:
            if self._session:
                return None
        if self._path.exists():
            return None
        try:
            return self.create(DEFAULT_KEY_NAME)
        except HearthError:
            # Made meanwhile by another process; the file now says so.
            if self._path.exists():
                return None
            raise

    def accepted(self, *, poll_s: float = POLL_INTERVAL_S, flush_s: float = FLUSH_INTERVAL_S) -> AcceptedKeys:
        """What a server accepts: every key now, and those made or revoked later, here or elsewhere.
        Blocking: the keyring, for each key's secret."""
        self._migrate_once()
        keys = AcceptedKeys(self, poll_s=poll_s, flush_s=flush_s)
        with self._state:
            session = list(self._session.values())
            self._servers.add(keys)
        for info, secret in session:
            keys.learn(info, secret, fixed=True)
        keys.refresh()
        return keys

    def secret_of(self, info: ApiKeyInfo) -> SecretResult:
        """Blocking: the keyring."""
        return self._secrets.get(_entry(info.name), noun=KEY_NOUN)

    def note_use(self, key_id: str) -> None:
        """On the request thread: memory only."""
        now = int(self._clock())
        with self._state:
            self._used[key_id] = now
            self._unsaved.add(key_id)

    def flush_use(self) -> None:
        """Write the last uses noted since the last flush. Blocking (the file); never raises."""
        with self._state:
            pending = {key_id: self._used[key_id] for key_id in self._unsaved}
        if not pending:
            return
        try:
            with self._changing():
                stored = self._read()
                updated = [
                    _with_use(key, pending.get(key.id)) if key.id in pending else key for key in stored
                ]
                if updated != stored:
                    self._write(updated)
        except HearthError as exc:
            log.warning("could not save when the API keys were last used: %s", exc)
            return
        with self._state:
            for key_id, when in pending.items():
                if self._used.get(key_id) == when:
                    self._unsaved.discard(key_id)

    # -- the file -----------------------------------------------------------------------------------

    @contextmanager
    def _changing(self) -> Iterator[None]:
        with self._changing_lock:
            try:
                self._file_lock.acquire(timeout=LOCK_TIMEOUT_S)
            except Timeout:
                raise HearthError(
                    "Another Hearth is changing the API keys and has not finished; try again."
                ) from None
            try:
                yield
            finally:
                self._file_lock.release()

    def _read(self) -> list[ApiKeyInfo]:
        entries = read_section(self._path, "keys", list, "API keys")
        return _keys(entries or [], self._path)

    def _write(self, keys: list[ApiKeyInfo]) -> None:
        try:
            write_text_atomically(self._path, _dump(keys))
        except OSError as exc:
            raise HearthError(f"Could not save the API keys in {self._path}: {exc.strerror or exc}.") from exc

    def _live_servers(self) -> list[AcceptedKeys]:
        with self._state:
            return list(self._servers)

    def _migrate_once(self) -> None:
        """The key of a Hearth before named keys becomes the key named "default", so its programs keep
        working. Tried once per process, before anything else."""
        with self._migration_lock:
            if self._migration_checked:
                return
            self._migration_checked = True
            if self._path.exists():
                return
            legacy = self._secrets.get(LEGACY_SECRET_ENTRY, noun=KEY_NOUN)
            if not legacy.value:
                return
            with self._changing():
                if self._path.exists():
                    return  # another process moved it meanwhile
                info = ApiKeyInfo(
                    uuid.uuid4().hex, DEFAULT_KEY_NAME, legacy.value[:PREFIX_CHARS], int(self._clock())
                )
                moved = self._secrets.set(
                    _entry(DEFAULT_KEY_NAME), legacy.value, noun=KEY_NOUN, keep_for_session=False
                )
                if moved.persisted:
                    self._write([info])
                    self._secrets.delete(LEGACY_SECRET_ENTRY, noun=KEY_NOUN)
                    log.info("the local API's key is now the key named %r", DEFAULT_KEY_NAME)
                else:
                    # Read but not rewritten: it still works for this session, and is moved next time.
                    with self._state:
                        self._session[info.id] = (replace(info, persisted=False), legacy.value)


class AcceptedKeys:
    """The keys one running server accepts, as SHA-256 digests of their secrets (equal lengths, so each
    comparison takes the same time), by key id.

    `match` runs on request threads and never waits for the keyring or a write: it stat()s the keys file
    and, only when that changed, reads it (small), dropping the keys gone from it at once. A background
    thread (`start`) fetches the secrets of keys made elsewhere and writes last uses.
    """

    def __init__(
        self,
        store: ApiKeys | None,
        *,
        poll_s: float = POLL_INTERVAL_S,
        flush_s: float = FLUSH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self._poll_s = poll_s
        self._flush_s = flush_s
        self._clock = clock
        self._lock = threading.Lock()
        self._live: dict[str, tuple[str, bytes]] = {}  # id → (name, digest)
        self._fixed: set[str] = set()  # ids not in the file (this session's keys): the file cannot drop them
        self._listed: dict[str, ApiKeyInfo] = {}  # the file's keys as last read, by id
        self._unavailable: dict[str, str] = {}  # name → why the keyring did not give its secret
        self._failed_at: dict[str, float] = {}  # id → when fetching its secret last failed
        # One reader of the file at a time; the signature is that of the file the listing came from.
        self._read_lock = threading.Lock()
        self._signature: tuple[int, ...] | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def fixed(cls, secret: str, name: str = DEFAULT_KEY_NAME) -> AcceptedKeys:
        """Just this key, in memory (for a server given one key)."""
        if not secret:
            raise ValueError("the API key must not be empty")
        keys = cls(None)
        keys.learn(ApiKeyInfo("fixed", name, secret[:PREFIX_CHARS], 0), secret, fixed=True)
        return keys

    @property
    def names(self) -> list[str]:
        with self._lock:
            return sorted((name for name, _digest in self._live.values()), key=str.casefold)

    @property
    def unavailable(self) -> dict[str, str]:
        """Keys in the file whose secret the keyring would not give (name → why): refused until it does."""
        with self._lock:
            return dict(self._unavailable)

    def match(self, candidates: Sequence[bytes]) -> str | None:
        """The name of the key among `candidates` (what the request sent), or None. Each candidate is
        compared with every key, so how long it takes says nothing about which one matched."""
        self._check_file()
        digests = [hashlib.sha256(value).digest() for value in candidates[:MAX_CANDIDATES]]
        with self._lock:
            live = list(self._live.items())
        found: tuple[str, str] | None = None
        for key_id, (name, digest) in live:
            for given in digests:
                if hmac.compare_digest(given, digest) and found is None:
                    found = (key_id, name)
        if found is None:
            return None
        if self._store is not None:
            self._store.note_use(found[0])
        return found[1]

    def learn(self, info: ApiKeyInfo, secret: str, *, fixed: bool = False) -> None:
        digest = hashlib.sha256(secret.encode("utf-8")).digest()
        with self._lock:
            self._live[info.id] = (info.name, digest)
            self._unavailable.pop(info.name, None)
            if fixed or not info.persisted:
                self._fixed.add(info.id)
            else:
                self._listed[info.id] = info

    def forget(self, key_id: str) -> None:
        with self._lock:
            entry = self._live.pop(key_id, None)
            self._fixed.discard(key_id)
            info = self._listed.pop(key_id, None)
            if info is not None:
                self._unavailable.pop(info.name, None)
            elif entry is not None:
                self._unavailable.pop(entry[0], None)

    def refresh(self) -> None:
        """Blocking (the keyring): read the file and fetch the secrets of keys not accepted yet."""
        self._check_file()
        self._fetch_missing(retry_all=True)

    def start(self) -> None:
        if self._store is None or self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._watch, name="hearth-local-server-keys", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop watching and write the last uses not written yet. Blocking (the file)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            self._wake.set()
            thread.join()
        if self._store is not None:
            self._store.flush_use()

    def _watch(self) -> None:
        assert self._store is not None
        next_flush = self._clock() + self._flush_s
        next_reread = self._clock() + REREAD_INTERVAL_S
        while not self._stop.is_set():
            self._wake.wait(self._poll_s)
            self._wake.clear()
            if self._stop.is_set():
                break
            now = self._clock()
            if now >= next_reread:
                next_reread = now + REREAD_INTERVAL_S
                with self._read_lock:
                    self._signature = None
            try:
                self._check_file()
                self._fetch_missing(retry_all=False)
                if now >= next_flush:
                    next_flush = now + self._flush_s
                    self._store.flush_use()
            except Exception:
                # The thread must outlive one bad turn, or keys made elsewhere would never be accepted.
                log.exception("watching the API keys failed")

    def _check_file(self) -> None:
        store = self._store
        if store is None:
            return
        if _signature(store.path) == self._signature:
            return
        with self._read_lock:
            # Stat before reading: a change after the stat is seen by the next one.
            signature = _signature(store.path)
            if signature == self._signature:
                return
            listed = _read_quietly(store.path)
            self._signature = signature
        with self._lock:
            self._listed = {key.id: key for key in listed}
            for key_id in [key_id for key_id in self._live if key_id not in self._fixed]:
                if key_id not in self._listed:
                    del self._live[key_id]
            self._unavailable = {
                name: why
                for name, why in self._unavailable.items()
                if any(key.name == name for key in listed)
            }
            missing = any(key_id not in self._live for key_id in self._listed)
        if missing:
            self._wake.set()

    def _fetch_missing(self, *, retry_all: bool) -> None:
        store = self._store
        if store is None:
            return
        now = self._clock()
        with self._lock:
            missing = [
                info
                for key_id, info in self._listed.items()
                if key_id not in self._live
                and (retry_all or now - self._failed_at.get(key_id, -RETRY_FETCH_S) >= RETRY_FETCH_S)
            ]
        for info in missing:
            result = store.secret_of(info)
            with self._lock:
                if info.id not in self._listed:
                    continue  # revoked while the keyring was asked
                # A secret left by an earlier key of this name is not this key's.
                if result.value and result.value.startswith(info.prefix):
                    self._live[info.id] = (info.name, hashlib.sha256(result.value.encode("utf-8")).digest())
                    self._unavailable.pop(info.name, None)
                    self._failed_at.pop(info.id, None)
                    continue
                self._failed_at[info.id] = now
                why = result.reason or "the system keyring does not hold its secret"
                told = self._unavailable.get(info.name) == why
                self._unavailable[info.name] = why
            if not told:
                log.warning("the API key %r cannot be accepted: %s", info.name, why)


def _entry(name: str) -> str:
    return SECRET_ENTRY + name


def _find(keys: Sequence[ApiKeyInfo], name: str) -> ApiKeyInfo | None:
    wanted = name.strip().casefold()
    return next((key for key in keys if key.name.casefold() == wanted), None)


def _unknown(name: str) -> HearthError:
    return HearthError(f"There is no API key named “{name}”; `hearth api-keys list` shows them.")


def _with_use(key: ApiKeyInfo, used: int | None) -> ApiKeyInfo:
    if used is None or (key.last_used_at is not None and key.last_used_at >= used):
        return key
    return replace(key, last_used_at=used)


def _signature(path: Path) -> tuple[int, ...] | None:
    """What changes whenever the file is replaced (each write is a new file renamed over the old)."""
    try:
        info = path.stat()
    except OSError:
        return None
    return (info.st_ino, info.st_dev, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def _read_quietly(path: Path) -> list[ApiKeyInfo]:
    """The file's keys for a server: a missing or damaged file lists none (so a server refuses rather than
    accepts what it cannot check), and is left where it is for the commands and the window to set aside."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        return []
    except OSError as exc:
        log.warning("could not read %s (%s): no stored API key is accepted", path, exc)
        return []
    try:
        if len(raw) > MAX_FILE_BYTES:
            raise ValueError("too large")
        data = json.loads(raw)
    except (ValueError, RecursionError):
        data = None
    entries = data.get("keys") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        log.warning("%s is damaged: no stored API key is accepted", path)
        return []
    return _keys(entries, path)


def _keys(entries: list[object], path: Path) -> list[ApiKeyInfo]:
    keys: list[ApiKeyInfo] = []
    for index, entry in enumerate(entries):
        try:
            key = _key(entry)
        except (HearthError, ValueError) as exc:
            # One bad entry (a hand edit) should not take the others with it.
            log.warning("API key %d in %s is left out: %s", index + 1, path, exc)
            continue
        if _find(keys, key.name) is None and all(other.id != key.id for other in keys):
            keys.append(key)
    return keys


def _key(entry: object) -> ApiKeyInfo:
    if not isinstance(entry, dict):
        raise ValueError("it is not an object")
    key_id, name, prefix = entry.get("id"), entry.get("name"), entry.get("prefix")
    if not isinstance(key_id, str) or not key_id or not isinstance(name, str) or not isinstance(prefix, str):
        raise ValueError("it has no id, name or prefix")
    used = entry.get("last_used_at")
    return ApiKeyInfo(
        key_id,
        check_key_name(name),
        prefix,
        _parse_time(entry.get("created_at")),
        None if used is None else _parse_time(used),
    )


def _dump(keys: list[ApiKeyInfo]) -> str:
    data = {
        "schema_version": SCHEMA_VERSION,
        "keys": [
            {
                "id": key.id,
                "name": key.name,
                "prefix": key.prefix,
                "created_at": iso_time(key.created_at),
                "last_used_at": None if key.last_used_at is None else iso_time(key.last_used_at),
            }
            for key in sorted(keys, key=lambda k: k.name.casefold())
        ],
    }
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"
