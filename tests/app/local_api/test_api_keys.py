"""The local API's named keys: made, listed and revoked, secrets only in the keyring, and what running
servers accept, here and in another instance (another process's view of the same home and keyring)."""

from __future__ import annotations

import http.client
import json
import logging
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backends.fail import Keyring as FailKeyring

from app.chat.engine import ChatEngine
from app.errors import HearthError
from app.local_api.api_keys import (
    KEYS_FILE,
    LEGACY_SECRET_ENTRY,
    MAX_KEYS,
    PREFIX_CHARS,
    SECRET_ENTRY,
    ApiKeys,
    iso_time,
)
from app.local_api.server import LocalServer
from tests.conftest import MemoryKeyring
from tests.helpers.waiting import wait_until

SERVICE = "Hearth"


def memory() -> MemoryKeyring:
    backend = keyring.get_keyring()
    assert isinstance(backend, MemoryKeyring)
    return backend


def status(server: LocalServer, key: str, *, anthropic: bool = False) -> int:
    """The status of a request with `key`: 401 when it is refused."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        if anthropic:
            body = json.dumps(
                {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
            )
            connection.request(
                "POST",
                "/v1/messages",
                body=body,
                headers={"x-api-key": key, "Content-Type": "application/json"},
            )
        else:
            connection.request("GET", "/v1/models", headers={"Authorization": f"Bearer {key}"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


@pytest.fixture
def home(hermetic_home: Path) -> Path:
    hermetic_home.mkdir(parents=True, exist_ok=True)
    return hermetic_home


@pytest.fixture
def serve(engine: ChatEngine) -> Iterator[Callable[[ApiKeys], LocalServer]]:
    servers: list[LocalServer] = []

    def start(keys: ApiKeys) -> LocalServer:
        server = LocalServer(engine, keys=keys.accepted(poll_s=0.05), port=0)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def snapshot(home: Path) -> tuple[bytes | None, dict[tuple[str, str], str]]:
    path = home / KEYS_FILE
    return (path.read_bytes() if path.exists() else None), dict(memory().entries)


# -- made, listed, revoked -------------------------------------------------------------------------------


def test_keys_are_made_listed_and_revoked_with_the_secrets_only_in_the_keyring(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    keys = ApiKeys(home)
    editor = keys.create("editor")
    agent = keys.create("Agent.2")
    assert editor.secret.startswith("hearth-") and len(editor.secret) > 40 and not editor.reason
    assert editor.secret != agent.secret
    assert editor.info.prefix == editor.secret[:PREFIX_CHARS] and editor.info.last_used_at is None
    assert "***" in repr(editor) and editor.secret not in repr(editor)
    assert keyring.get_password(SERVICE, SECRET_ENTRY + "editor") == editor.secret

    # Another instance (a `hearth` command) sees the same keys, without their secrets.
    listed = ApiKeys(home).list_keys()
    assert [(k.name, k.prefix, k.created_at) for k in listed] == [
        ("Agent.2", agent.info.prefix, agent.info.created_at),
        ("editor", editor.info.prefix, editor.info.created_at),
    ]
    path = home / KEYS_FILE
    text = path.read_text()
    assert editor.secret not in text and agent.secret not in text
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = json.loads(text)
    assert data["schema_version"] == 1
    assert data["keys"][1]["created_at"] == iso_time(editor.info.created_at)

    revoked, deleted = ApiKeys(home).revoke("EDITOR")  # names are told apart without case
    assert revoked.name == "editor" and deleted.persisted
    assert [k.name for k in keys.list_keys()] == ["Agent.2"]
    assert keyring.get_password(SERVICE, SECRET_ENTRY + "editor") is None
    assert editor.secret not in caplog.text and agent.secret not in caplog.text


def test_a_bad_or_taken_name_an_unknown_one_and_a_full_set_are_refused_changing_nothing(home: Path) -> None:
    keys = ApiKeys(home)
    keys.create("editor")
    before = snapshot(home)
    for bad in ["", "  ", "two words", "-dash-first", "slash/y", "naïve", "x" * 41, "semi;colon"]:
        with pytest.raises(HearthError, match="cannot name an API key"):
            keys.create(bad)
    with pytest.raises(HearthError, match="already an API key named “editor”"):
        keys.create("Editor")
    with pytest.raises(HearthError, match="no API key named “nobody”"):
        keys.revoke("nobody")
    assert snapshot(home) == before

    for n in range(MAX_KEYS - 1):
        keys.create(f"key-{n}")
    full = snapshot(home)
    with pytest.raises(HearthError, match=f"There are {MAX_KEYS} API keys"):
        ApiKeys(home).create("one-more")
    assert snapshot(home) == full and len(keys.list_keys()) == MAX_KEYS


def test_the_key_of_an_older_hearth_becomes_default_and_is_still_accepted(
    home: Path, serve: Callable[[ApiKeys], LocalServer]
) -> None:
    old = "hearth-" + "o" * 43
    keyring.set_password(SERVICE, LEGACY_SECRET_ENTRY, old)
    keys = ApiKeys(home)
    (default,) = keys.list_keys()
    assert default.name == "default" and default.prefix == old[:PREFIX_CHARS]
    assert keyring.get_password(SERVICE, SECRET_ENTRY + "default") == old
    assert keyring.get_password(SERVICE, LEGACY_SECRET_ENTRY) is None
    assert old not in (home / KEYS_FILE).read_text()
    server = serve(ApiKeys(home))
    assert status(server, old) == 200
    assert status(server, "hearth-" + "w" * 43) == 401
    # Moved once: a later Hearth finds the file and leaves the keyring alone.
    assert [k.id for k in ApiKeys(home).list_keys()] == [default.id]


def test_serve_makes_a_default_key_only_in_a_home_that_never_had_one(home: Path) -> None:
    keys = ApiKeys(home)
    made = keys.ensure_default()
    assert made is not None and made.info.name == "default" and not made.reason
    assert keys.ensure_default() is None and ApiKeys(home).ensure_default() is None
    keys.revoke("default")
    # Every key revoked is the user's choice: none is made behind their back.
    assert ApiKeys(home).ensure_default() is None and ApiKeys(home).list_keys() == []


def test_without_a_keyring_a_key_works_for_this_session_and_says_it_will_not_last(
    home: Path, serve: Callable[[ApiKeys], LocalServer]
) -> None:
    keyring.set_keyring(FailKeyring())  # type: ignore[no-untyped-call]
    keys = ApiKeys(home)
    with pytest.raises(HearthError, match="keyring cannot keep API keys, so none was made"):
        keys.create("script", session_ok=False)
    assert not (home / KEYS_FILE).exists() and keys.list_keys() == []

    server = serve(keys)
    made = keys.create("editor")
    assert not made.info.persisted and "works until this Hearth closes" in made.reason
    assert "No system keyring" in made.reason
    assert [(k.name, k.persisted) for k in keys.list_keys()] == [("editor", False)]
    assert not (home / KEYS_FILE).exists(), "a key kept for the session is never written"
    assert status(server, made.secret) == 200
    # A server started later in this session takes it too; after a restart it is gone.
    assert status(serve(keys), made.secret) == 200
    assert ApiKeys(home).list_keys() == []
    keys.revoke("editor")
    assert status(server, made.secret) == 401


# -- what running servers accept ---------------------------------------------------------------------------


def test_a_server_accepts_each_key_and_refuses_one_revoked_from_the_next_request(
    home: Path, serve: Callable[[ApiKeys], LocalServer]
) -> None:
    keys = ApiKeys(home)
    editor, agent = keys.create("editor"), keys.create("agent")
    server = serve(keys)
    assert status(server, editor.secret) == 200 and status(server, agent.secret) == 200
    # Anthropic's clients send it as x-api-key: any key works there too (no model: not a 401).
    assert status(server, agent.secret, anthropic=True) != 401
    assert status(server, editor.secret[:-1]) == 401 and status(server, "") == 401
    assert sorted(server.keys.names) == ["agent", "editor"]

    keys.revoke("editor")
    assert status(server, editor.secret) == 401
    assert status(server, editor.secret, anthropic=True) == 401
    assert status(server, agent.secret) == 200
    later = keys.create("later")
    assert status(server, later.secret) == 200  # made in this process: told at once


def test_a_key_revoked_or_made_by_another_process_is_seen_by_a_running_server(
    home: Path, serve: Callable[[ApiKeys], LocalServer]
) -> None:
    window = ApiKeys(home)
    editor = window.create("editor")
    server = serve(window)
    assert status(server, editor.secret) == 200

    command = ApiKeys(home)  # `hearth api-keys` in another process: its own view of the file
    command.revoke("editor")
    # No wait: the server looks at the file before it checks a key.
    assert status(server, editor.secret) == 401

    laptop = command.create("laptop")
    # Its secret is in the keyring, which the server reads off the request thread.
    wait_until(lambda: status(server, laptop.secret) == 200, "a key made elsewhere to be accepted")
    # A key made again under a revoked name is a new key: the old secret stays refused.
    again = command.create("editor")
    wait_until(lambda: status(server, again.secret) == 200, "the new editor key")
    assert status(server, editor.secret) == 401


def test_last_use_is_noted_at_once_and_written_every_interval_and_when_the_server_stops(
    home: Path, engine: ChatEngine
) -> None:
    now = [1_750_000_000.0]
    keys = ApiKeys(home, clock=lambda: now[0])
    editor, idle = keys.create("editor"), keys.create("idle")

    def stored_use(name: str) -> str | None:
        data = json.loads((home / KEYS_FILE).read_text())
        used: str | None = next(k["last_used_at"] for k in data["keys"] if k["name"] == name)
        return used

    server = LocalServer(engine, keys=keys.accepted(poll_s=0.05, flush_s=3600), port=0)
    server.start()
    try:
        now[0] += 60
        assert status(server, editor.secret) == 200
        used = {k.name: k.last_used_at for k in keys.list_keys()}
        assert used == {"editor": int(now[0]), "idle": None}
        assert stored_use("editor") is None  # the request did not wait for a write
    finally:
        server.stop()
    assert stored_use("editor") == iso_time(int(now[0])) and stored_use("idle") is None
    assert ApiKeys(home).get("editor").last_used_at == int(now[0])

    server = LocalServer(engine, keys=keys.accepted(poll_s=0.05, flush_s=0.1), port=0)
    server.start()
    try:
        now[0] += 60
        assert status(server, idle.secret) == 200
        wait_until(lambda: stored_use("idle") == iso_time(int(now[0])), "the last use to be written")
    finally:
        server.stop()


def test_writing_last_use_never_brings_back_a_key_revoked_elsewhere(
    home: Path, serve: Callable[[ApiKeys], LocalServer]
) -> None:
    window = ApiKeys(home)
    editor, agent = window.create("editor"), window.create("agent")
    server = serve(window)
    assert status(server, editor.secret) == 200 and status(server, agent.secret) == 200
    ApiKeys(home).revoke("editor")
    window.flush_use()
    server.stop()
    assert [k.name for k in ApiKeys(home).list_keys()] == ["agent"]
    assert ApiKeys(home).get("agent").last_used_at is not None


def test_a_damaged_keys_file_makes_a_running_server_refuse_the_stored_keys(
    home: Path, serve: Callable[[ApiKeys], LocalServer]
) -> None:
    keys = ApiKeys(home)
    editor = keys.create("editor")
    server = serve(keys)
    assert status(server, editor.secret) == 200
    (home / KEYS_FILE).write_text("{not json")
    assert status(server, editor.secret) == 401
