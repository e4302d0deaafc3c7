"""Secrets (the Hugging Face token, later API keys) in the OS keyring, never in files or logs.

Keyring backends can hang (Secret Service waits for an unlock prompt nobody sees) or be missing entirely,
so every call runs on a daemon thread with a timeout and failures fall back to memory for this session.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import keyring
from keyring.backend import KeyringBackend
from keyring.errors import InitError, KeyringLocked, NoKeyringError, PasswordDeleteError, PasswordSetError

from app.logging_setup import REDACTED, redact, register_secret

log = logging.getLogger("hearth.secrets")

DEFAULT_SERVICE = "Hearth"
DEFAULT_TIMEOUT_S = 3.0
# Reading an entry that does not exist tells us whether the keyring answers, without writing anything.
_PROBE_NAME = "hearth-keyring-probe"
_DOCTOR_SERVICE = "Hearth doctor probe"

T = TypeVar("T")


@dataclass(frozen=True)
class KeyringStatus:
    backend_name: str
    usable: bool
    reason: str


@dataclass(frozen=True)
class SecretStatus:
    """What a settings page says about one stored secret (never the secret itself)."""

    present: bool
    persisted: bool  # False: kept for this session only, or the keyring could not be asked
    backend: str
    reason: str


@dataclass(frozen=True, repr=False)
class SecretResult:
    """`persisted` is True when the keyring holds this entry's current state (stored, absent or deleted);
    False when the value lives only in this session's memory or the keyring could not be asked."""

    value: str | None
    persisted: bool
    reason: str = ""

    def __repr__(self) -> str:
        shown = "None" if self.value is None else "'***'"
        return f"SecretResult(value={shown}, persisted={self.persisted}, reason={self.reason!r})"


@dataclass(frozen=True)
class _Outcome(Generic[T]):
    value: T | None
    reason: str
    # No keyring backend exists at all: nothing can have been saved, so failing to read or delete is no news.
    no_backend: bool = False

    @property
    def ok(self) -> bool:
        return not self.reason


class _Call(Generic[T]):
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: T | None = None
        self.error: BaseException | None = None


def _qualified_name(backend: KeyringBackend) -> str:
    # Every backend class is called "Keyring"; only the module says which one it is.
    return f"{type(backend).__module__}.{type(backend).__qualname__}"


def _describe(exc: BaseException) -> str:
    detail = str(exc) or type(exc).__name__
    if isinstance(exc, NoKeyringError):
        return f"No system keyring is available ({detail})"
    if isinstance(exc, KeyringLocked):
        return f"The system keyring is locked ({detail})"
    if isinstance(exc, InitError):
        return f"The system keyring could not be opened ({detail})"
    if isinstance(exc, PasswordSetError):
        return f"The system keyring refused to store the secret ({detail})"
    return f"The system keyring failed ({type(exc).__name__}: {detail})"


class _KeyringCaller:
    """Runs one keyring operation at a time on a daemon thread and gives up after `timeout_s`.

    A timed-out call keeps its thread (a blocked native call cannot be interrupted); while it is stuck,
    later calls fail at once instead of stacking more stuck threads.
    """

    def __init__(self, backend: KeyringBackend | None, timeout_s: float) -> None:
        self._backend = backend
        self._timeout_s = timeout_s
        # Held by the worker thread, not the caller, so a stuck call keeps the keyring marked busy.
        self._slot = threading.Lock()
        self._state = threading.Lock()
        self._stalled = False
        self.backend_name = _qualified_name(backend) if backend is not None else "unknown"

    def call(self, op: Callable[[KeyringBackend], T], *, secret: str | None = None) -> _Outcome[T]:
        deadline = time.monotonic() + self._timeout_s
        if not self._slot.acquire(blocking=False) and (
            self._stalled or not self._slot.acquire(timeout=self._timeout_s)
        ):
            return _Outcome(None, self._timeout_reason())
        call: _Call[T] = _Call()
        try:
            threading.Thread(target=self._work, args=(op, call), name="hearth-keyring", daemon=True).start()
        except RuntimeError as exc:
            self._slot.release()
            return _Outcome(None, self._clean(_describe(exc), secret))
        if not call.done.wait(max(0.0, deadline - time.monotonic())):
            with self._state:
                if not call.done.is_set():
                    self._stalled = True
                    return _Outcome(None, self._timeout_reason())
        if call.error is not None:
            no_backend = isinstance(call.error, NoKeyringError)
            return _Outcome(None, self._clean(_describe(call.error), secret), no_backend)
        return _Outcome(call.value, "")

    def _work(self, op: Callable[[KeyringBackend], T], call: _Call[T]) -> None:
        try:
            # Backend detection can itself import D-Bus modules and block, so it happens here too.
            backend = self._backend if self._backend is not None else keyring.get_keyring()
            self.backend_name = _qualified_name(backend)
            call.value = op(backend)
        except BaseException as exc:
            # Anything a backend raises becomes a reason string; nothing escapes the thread.
            call.error = exc
        finally:
            with self._state:
                self._stalled = False
                call.done.set()
            self._slot.release()

    def _timeout_reason(self) -> str:
        return (
            f"The system keyring did not answer within {self._timeout_s:g} s "
            "(it may be waiting for an unlock prompt)"
        )

    @staticmethod
    def _clean(reason: str, secret: str | None) -> str:
        # A backend's error text is not ours to trust: it could echo what it was asked to store.
        reason = redact(reason)
        return reason.replace(secret, REDACTED) if secret else reason


class SecretStore:
    """Named secrets for one keyring service, with a session-only fallback when the keyring is unusable."""

    def __init__(
        self,
        service: str = DEFAULT_SERVICE,
        *,
        backend: KeyringBackend | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._service = service
        self._caller = _KeyringCaller(backend, timeout_s)
        self._lock = threading.Lock()
        self._session: dict[str, str] = {}
        self._session_reasons: dict[str, str] = {}

    def get(self, name: str, *, noun: str = "token") -> SecretResult:
        """`noun` is what the user calls the secret, for the reason given when the keyring fails."""
        with self._lock:
            # A value the user gave this session is newer than anything the keyring may hold.
            if name in self._session:
                return SecretResult(self._session[name], persisted=False, reason=self._session_reasons[name])
        outcome = self._caller.call(lambda backend: backend.get_password(self._service, name))
        if not outcome.ok:
            reason = f"{outcome.reason}; a saved {noun} cannot be read."
            # Said where it matters: when the user saves a secret, and by `hearth doctor`.
            log.log(
                logging.DEBUG if outcome.no_backend else logging.WARNING,
                "Could not read secret %r: %s",
                name,
                reason,
            )
            return SecretResult(None, persisted=False, reason=reason)
        if outcome.value is not None:
            register_secret(outcome.value)
        return SecretResult(outcome.value, persisted=True)

    def set(
        self, name: str, value: str, *, noun: str = "token", keep_for_session: bool = True
    ) -> SecretResult:
        """`keep_for_session=False`: when the keyring refuses, nothing is kept here either (for a caller
        that keeps such a value itself, or refuses it); the reason is then the keyring's alone."""
        register_secret(value)
        outcome = self._caller.call(
            lambda backend: backend.set_password(self._service, name, value), secret=value
        )
        with self._lock:
            if outcome.ok:
                self._session.pop(name, None)
                self._session_reasons.pop(name, None)
                return SecretResult(value, persisted=True)
            if not keep_for_session:
                log.warning("Could not store secret %r: %s", name, outcome.reason)
                return SecretResult(value, persisted=False, reason=outcome.reason)
            reason = f"{outcome.reason}; the {noun} is kept for this session only."
            self._session[name] = value
            self._session_reasons[name] = reason
        log.warning("Could not store secret %r: %s", name, reason)
        return SecretResult(value, persisted=False, reason=reason)

    def delete(self, name: str, *, noun: str = "token") -> SecretResult:
        with self._lock:
            self._session.pop(name, None)
            self._session_reasons.pop(name, None)
        outcome = self._caller.call(lambda backend: _delete_if_present(backend, self._service, name))
        if not outcome.ok:
            reason = f"{outcome.reason}; a saved {noun} could not be removed."
            level = logging.DEBUG if outcome.no_backend else logging.WARNING
            log.log(level, "Could not delete secret %r: %s", name, reason)
            return SecretResult(None, persisted=False, reason=reason)
        return SecretResult(None, persisted=True)

    def status(self) -> KeyringStatus:
        outcome = self._caller.call(lambda backend: backend.get_password(self._service, _PROBE_NAME))
        return KeyringStatus(self._caller.backend_name, outcome.ok, outcome.reason)

    def status_of(self, name: str, *, noun: str = "token") -> SecretStatus:
        """Blocking (the keyring, up to its timeout, twice): whether `name` is set and where it is kept."""
        result = self.get(name, noun=noun)
        keyring = self.status()
        reason = result.reason or keyring.reason
        return SecretStatus(result.value is not None, result.persisted, keyring.backend_name, reason)


def _delete_if_present(backend: KeyringBackend, service: str, name: str) -> None:
    # Backends report "nothing to delete" as PasswordDeleteError; for us that is success.
    try:
        backend.delete_password(service, name)
    except PasswordDeleteError:
        if backend.get_password(service, name) is not None:
            raise


def keyring_report(
    *, backend: KeyringBackend | None = None, timeout_s: float = DEFAULT_TIMEOUT_S
) -> KeyringStatus:
    """For `hearth doctor`: which backend is active and whether a throwaway entry survives a round trip."""
    caller = _KeyringCaller(backend, timeout_s)
    username = f"probe-{uuid.uuid4().hex}"
    probe_value = uuid.uuid4().hex

    def round_trip(active: KeyringBackend) -> None:
        active.set_password(_DOCTOR_SERVICE, username, probe_value)
        try:
            if active.get_password(_DOCTOR_SERVICE, username) != probe_value:
                raise RuntimeError("the keyring returned a different value than was stored")
        finally:
            active.delete_password(_DOCTOR_SERVICE, username)

    outcome = caller.call(round_trip)
    return KeyringStatus(caller.backend_name, outcome.ok, outcome.reason)
