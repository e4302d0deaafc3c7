"""SecretStore against the keyring this machine really has (none), fakes that work, fail, lock or hang,
and the promise that the token never shows up in logs, reprs or reasons."""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import keyring
import keyring.backend
import keyring.core
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail
from keyring.errors import InitError, KeyringLocked, NoKeyringError, PasswordDeleteError, PasswordSetError

from app.secret_store import KeyringStatus, SecretResult, SecretStore, keyring_report

SERVICE = "Hearth-test"
FAST_TIMEOUT_S = 0.3


def fresh_token() -> str:
    return f"hf_{secrets.token_hex(17)}"


class DictKeyring(KeyringBackend):
    """Works, and like real backends raises PasswordDeleteError for a missing entry. No `priority`, so
    keyring's own backend detection never picks it."""

    # KeyringBackend.__init__ only reads KEYRING_PROPERTY_* variables, which none of these fakes use.
    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        try:
            del self.entries[(service, username)]
        except KeyError:
            raise PasswordDeleteError("Password not found") from None


class RaisingKeyring(KeyringBackend):
    def __init__(self, error: Exception) -> None:
        self.error = error

    def get_password(self, service: str, username: str) -> str | None:
        raise self.error

    def set_password(self, service: str, username: str, password: str) -> None:
        raise self.error

    def delete_password(self, service: str, username: str) -> None:
        raise self.error


class ReadOnlyKeyring(DictKeyring):
    """Reads work; writes fail with an error text that echoes the secret, as a careless backend might."""

    def set_password(self, service: str, username: str, password: str) -> None:
        raise PasswordSetError(f"cannot store {password!r} for {username}")


class HangingKeyring(DictKeyring):
    """Blocks every call until released, like Secret Service waiting on an unlock prompt nobody sees."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.calls = 0

    def _block(self) -> None:
        self.calls += 1
        self.release.wait()

    def get_password(self, service: str, username: str) -> str | None:
        self._block()
        return super().get_password(service, username)

    def set_password(self, service: str, username: str, password: str) -> None:
        self._block()
        super().set_password(service, username, password)


def fail_keyring() -> KeyringBackend:
    # keyring's constructors are untyped.
    return fail.Keyring()  # type: ignore[no-untyped-call]


def keyring_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "hearth-keyring"]


@pytest.fixture(autouse=True)
def no_keyring_threads_left() -> Iterator[None]:
    yield
    for thread in keyring_threads():
        thread.join(timeout=5)
    assert not [t for t in keyring_threads() if t.is_alive()]


@pytest.fixture
def hanging() -> Iterator[HangingKeyring]:
    backend = HangingKeyring()
    yield backend
    backend.release.set()


@pytest.fixture
def detected_keyring(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> KeyringBackend:
    """Run keyring's own backend detection as the app would, with config and data dirs kept in tmp_path."""
    monkeypatch.delenv("PYTHON_KEYRING_BACKEND", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setattr(keyring.backend, "_limit", keyring.backend._limit)
    # Test doubles subclass KeyringBackend and so register themselves as candidates; leave them out.
    keyring.core.init_backend(limit=lambda backend: not type(backend).__module__.startswith("tests."))
    return keyring.get_keyring()


def test_this_machines_keyring_is_unusable_and_the_token_stays_for_the_session(
    detected_keyring: KeyringBackend,
) -> None:
    if not isinstance(detected_keyring, fail.Keyring):
        pytest.skip(
            f"this machine has a keyring backend ({detected_keyring}); covered with fail.Keyring below"
        )
    token = fresh_token()
    store = SecretStore(SERVICE)

    status = store.status()
    stored = store.set("hf_token", token)
    read = store.get("hf_token")

    assert status.backend_name == "keyring.backends.fail.Keyring"
    assert not status.usable
    assert status.reason.startswith("No system keyring is available (No recommended backend")
    assert (stored.value, stored.persisted) == (token, False)
    assert stored.reason.endswith("; the token is kept for this session only.")
    assert stored.reason.startswith("No system keyring is available (")
    assert (read.value, read.persisted, read.reason) == (token, False, stored.reason)
    assert SecretStore(SERVICE).get("hf_token").value is None
    assert keyring_report() == KeyringStatus("keyring.backends.fail.Keyring", False, status.reason)


def test_fail_backend_falls_back_to_session_memory() -> None:
    token = fresh_token()
    store = SecretStore(SERVICE, backend=fail_keyring())

    stored = store.set("hf_token", token)
    deleted = store.delete("hf_token")

    assert (stored.value, stored.persisted) == (token, False)
    assert "No system keyring is available" in stored.reason
    assert (deleted.value, deleted.persisted) == (None, False)
    assert deleted.reason.endswith("; a saved token could not be removed.")
    after = store.get("hf_token")
    assert (after.value, after.persisted) == (None, False)
    assert after.reason.endswith("; a saved token cannot be read.")


def test_working_backend_round_trip() -> None:
    backend = DictKeyring()
    store = SecretStore(SERVICE, backend=backend)
    token = fresh_token()

    assert store.get("hf_token") == SecretResult(None, persisted=True)
    assert store.set("hf_token", token) == SecretResult(token, persisted=True)
    assert backend.entries == {(SERVICE, "hf_token"): token}
    assert SecretStore(SERVICE, backend=backend).get("hf_token") == SecretResult(token, persisted=True)
    assert store.status() == KeyringStatus(f"{__name__}.DictKeyring", True, "")
    assert store.delete("hf_token") == SecretResult(None, persisted=True)
    assert backend.entries == {}
    # Deleting what is not there is not an error.
    assert store.delete("hf_token") == SecretResult(None, persisted=True)


def test_default_backend_is_the_one_keyring_resolves() -> None:
    token = fresh_token()
    store = SecretStore(SERVICE)

    assert store.set("hf_token", token).persisted
    assert keyring.get_password(SERVICE, "hf_token") == token
    assert store.status().backend_name == f"{type(keyring.get_keyring()).__module__}.MemoryKeyring"


def test_keyring_report_round_trip_leaves_nothing_behind() -> None:
    backend = DictKeyring()

    report = keyring_report(backend=backend)

    assert report == KeyringStatus(f"{__name__}.DictKeyring", True, "")
    assert backend.entries == {}


def test_keyring_report_catches_a_backend_that_loses_values() -> None:
    class ForgetfulKeyring(DictKeyring):
        def get_password(self, service: str, username: str) -> str | None:
            return None

    report = keyring_report(backend=ForgetfulKeyring())

    assert not report.usable
    assert "returned a different value" in report.reason


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (NoKeyringError("no backend"), "No system keyring is available (no backend)"),
        (KeyringLocked("Failed to unlock the collection!"), "The system keyring is locked (Failed to unlock"),
        (
            InitError("Failed to create the collection"),
            "The system keyring could not be opened (Failed to create",
        ),
        (PasswordSetError("denied"), "The system keyring refused to store the secret (denied)"),
        (OSError("D-Bus connection closed"), "The system keyring failed (OSError: D-Bus connection closed)"),
        (RuntimeError(), "The system keyring failed (RuntimeError: RuntimeError)"),
    ],
)
def test_backend_errors_become_reasons_and_session_fallback(error: Exception, expected: str) -> None:
    token = fresh_token()
    store = SecretStore(SERVICE, backend=RaisingKeyring(error))

    status = store.status()
    stored = store.set("hf_token", token)

    assert not status.usable
    assert status.reason.startswith(expected)
    assert stored.reason.startswith(expected)
    assert (stored.value, stored.persisted) == (token, False)
    assert store.get("hf_token") == stored


def test_locked_keyring_keeps_the_token_for_the_session() -> None:
    token = fresh_token()
    store = SecretStore(SERVICE, backend=RaisingKeyring(KeyringLocked("Failed to unlock the item!")))

    stored = store.set("hf_token", token)

    assert stored == SecretResult(token, False, stored.reason)
    assert "locked" in stored.reason
    assert "session only" in stored.reason
    assert store.get("hf_token").value == token


def test_session_value_wins_over_an_older_keyring_value_and_is_cleared_by_delete() -> None:
    backend = ReadOnlyKeyring()
    old, new = fresh_token(), fresh_token()
    backend.entries[(SERVICE, "hf_token")] = old
    store = SecretStore(SERVICE, backend=backend)

    stored = store.set("hf_token", new)

    assert not stored.persisted
    assert store.get("hf_token").value == new
    assert store.delete("hf_token").persisted
    assert store.get("hf_token") == SecretResult(None, persisted=True)


def test_hanging_keyring_times_out_falls_back_and_recovers(hanging: HangingKeyring) -> None:
    token = fresh_token()
    store = SecretStore(SERVICE, backend=hanging, timeout_s=FAST_TIMEOUT_S)

    started = time.monotonic()
    stored = store.set("hf_token", token)
    first_wait = time.monotonic() - started

    assert FAST_TIMEOUT_S * 0.9 <= first_wait < FAST_TIMEOUT_S + 1.0
    assert (stored.value, stored.persisted) == (token, False)
    assert stored.reason == (
        f"The system keyring did not answer within {FAST_TIMEOUT_S:g} s "
        "(it may be waiting for an unlock prompt); the token is kept for this session only."
    )
    assert store.get("hf_token").value == token

    # While the first call is stuck, later ones fail at once instead of piling up threads.
    started = time.monotonic()
    status = store.status()
    assert time.monotonic() - started < FAST_TIMEOUT_S / 2
    assert not status.usable
    assert hanging.calls == 1
    assert len(keyring_threads()) == 1

    # The user answers the prompt: the stuck call finishes and the keyring works again.
    hanging.release.set()
    for thread in keyring_threads():
        thread.join(timeout=5)
    assert store.status().usable


def test_hanging_backend_detection_is_bounded_too(monkeypatch: pytest.MonkeyPatch) -> None:
    release = threading.Event()

    def slow_detection() -> KeyringBackend:
        release.wait()
        return DictKeyring()

    monkeypatch.setattr(keyring, "get_keyring", slow_detection)
    try:
        started = time.monotonic()
        status = SecretStore(SERVICE, timeout_s=FAST_TIMEOUT_S).status()
        assert time.monotonic() - started < FAST_TIMEOUT_S + 1.0
        assert status == KeyringStatus(
            "unknown",
            False,
            f"The system keyring did not answer within {FAST_TIMEOUT_S:g} s "
            "(it may be waiting for an unlock prompt)",
        )
    finally:
        release.set()


def test_a_second_caller_waits_for_a_slow_but_not_stuck_call() -> None:
    class SlowKeyring(DictKeyring):
        def get_password(self, service: str, username: str) -> str | None:
            time.sleep(0.1)
            return super().get_password(service, username)

    store = SecretStore(SERVICE, backend=SlowKeyring(), timeout_s=2.0)
    results: list[KeyringStatus] = []
    callers = [threading.Thread(target=lambda: results.append(store.status())) for _ in range(3)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=10)

    assert [status.usable for status in results] == [True, True, True]


def test_thread_start_failure_is_a_reason_and_does_not_wedge_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = SecretStore(SERVICE, backend=DictKeyring())

    def refuse(self: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with monkeypatch.context() as patch:
        patch.setattr(threading.Thread, "start", refuse)
        status = store.status()

    assert status.reason == "The system keyring failed (RuntimeError: can't start new thread)"
    assert store.status().usable


def test_secret_result_repr_and_str_mask_the_value() -> None:
    token = fresh_token()
    result = SecretResult(token, persisted=True)

    for text in (repr(result), str(result), f"{result}", f"{result!r}", repr([result])):
        assert token not in text
        assert "'***'" in text
    assert repr(SecretResult(None, False, "why")) == "SecretResult(value=None, persisted=False, reason='why')"


def test_token_never_reaches_logs_reasons_or_reprs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, hanging: HangingKeyring
) -> None:
    token = fresh_token()
    log_file = tmp_path / "everything.log"
    # A plain handler without redaction: the token must never be logged at all, not merely masked.
    file_handler = logging.FileHandler(log_file, encoding="utf-8")
    file_handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(file_handler)
    results: list[SecretResult | KeyringStatus] = []
    try:
        with caplog.at_level(logging.DEBUG):
            for backend in (
                fail_keyring(),
                DictKeyring(),
                ReadOnlyKeyring(),
                RaisingKeyring(KeyringLocked(f"locked while storing {token}")),
                hanging,
            ):
                store = SecretStore(SERVICE, backend=backend, timeout_s=FAST_TIMEOUT_S)
                results += [store.set("hf_token", token), store.get("hf_token"), store.status()]
                results += [store.delete("hf_token"), store.get("hf_token")]
            results.append(keyring_report(backend=RaisingKeyring(PasswordSetError(token))))
    finally:
        root.removeHandler(file_handler)
        file_handler.close()

    assert any(isinstance(r, SecretResult) and r.value == token for r in results)
    assert any(not r.persisted for r in results if isinstance(r, SecretResult))
    for result in results:
        assert token not in repr(result)
        assert token not in str(result)
        assert token not in result.reason
    assert caplog.records, "the failing backends should have logged warnings"
    for record in caplog.records:
        assert token not in record.getMessage()
        assert token not in (record.exc_text or "")
    assert token not in caplog.text
    assert token not in log_file.read_text(encoding="utf-8")
