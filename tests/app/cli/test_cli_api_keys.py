"""`hearth api-keys`: create, list, revoke, each refusal one line with nothing changed, and a revoke from
a real `hearth` process taking effect on a server running in another."""

from __future__ import annotations

import http.client
import io
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backends.fail import Keyring as FailKeyring

from app.chat.engine import ChatEngine
from app.cli.main import main
from app.cli.serve import tell_keys
from app.local_api.api_keys import KEYS_FILE, MAX_KEYS, SECRET_ENTRY, ApiKeys
from app.local_api.server import LocalServer
from tests.helpers.file_keyring import ENV as KEYRING_FILE_ENV
from tests.helpers.file_keyring import FileKeyring

REPO = Path(__file__).resolve().parents[3]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def refused_in_one_line(code: int, err: str, text: str) -> bool:
    return code == 3 and err.count("\n") == 1 and err.startswith("hearth: ") and text in err


def state(home: Path) -> tuple[bytes | None, object]:
    path = home / KEYS_FILE
    return (path.read_bytes() if path.exists() else None), dict(getattr(keyring.get_keyring(), "entries", {}))


def test_create_prints_the_key_once_list_never_shows_it_and_revoke_removes_it(hermetic_home: Path) -> None:
    code, out, err = run("api-keys", "create", "editor")
    assert code == 0
    secret = out.strip()
    assert out == f"{secret}\n" and secret.startswith("hearth-")
    assert "shown only now" in err and secret not in err
    assert keyring.get_password("Hearth", SECRET_ENTRY + "editor") == secret

    code, out, _ = run("api-keys", "list")
    assert code == 0 and secret not in out
    header, row = out.splitlines()
    assert header == "NAME\tKEY\tCREATED\tLAST USED"
    name, prefix, _created, used = row.split("\t")
    assert (name, used) == ("editor", "never") and prefix == secret[:12] + "…"

    code, out, _ = run("api-keys", "list", "--json")
    assert code == 0 and secret not in out
    (listed,) = json.loads(out)["keys"]
    assert listed.keys() == {"name", "prefix", "created_at", "last_used_at"}
    assert listed["name"] == "editor" and listed["last_used_at"] is None

    code, out, _ = run("api-keys", "revoke", "editor")
    assert code == 0 and "Revoked editor" in out
    assert keyring.get_password("Hearth", SECRET_ENTRY + "editor") is None
    assert run("api-keys", "list") == (0, "No API keys; make one with `hearth api-keys create NAME`.\n", "")
    assert json.loads(run("api-keys", "list", "--json")[1]) == {"keys": []}
    logs = "".join(p.read_text(errors="replace") for p in (hermetic_home / "logs").glob("*.log*"))
    assert secret not in logs


def test_each_refusal_is_one_line_with_nothing_changed(hermetic_home: Path) -> None:
    assert run("api-keys", "create", "editor")[0] == 0
    before = state(hermetic_home)
    code, out, err = run("api-keys", "create", "EDITOR")
    assert refused_in_one_line(code, err, "already an API key named “editor”") and out == ""
    code, _, err = run("api-keys", "create", "my key")
    assert refused_in_one_line(code, err, "“my key” cannot name an API key")
    code, _, err = run("api-keys", "revoke", "nobody")
    assert refused_in_one_line(code, err, "no API key named “nobody”")
    assert state(hermetic_home) == before

    keys = ApiKeys(hermetic_home)
    for n in range(MAX_KEYS - 1):
        keys.create(f"key-{n}")
    full = state(hermetic_home)
    code, out, err = run("api-keys", "create", "one-more")
    assert refused_in_one_line(code, err, f"There are {MAX_KEYS} API keys") and out == ""
    assert state(hermetic_home) == full


def test_without_a_keyring_create_refuses_as_the_key_would_end_with_it(hermetic_home: Path) -> None:
    keyring.set_keyring(FailKeyring())  # type: ignore[no-untyped-call]
    code, out, err = run("api-keys", "create", "editor")
    assert refused_in_one_line(code, err, "keyring cannot keep API keys, so none was made") and out == ""
    assert not (hermetic_home / KEYS_FILE).exists()


# -- two processes -----------------------------------------------------------------------------------------


@pytest.fixture
def shared_keyring(tmp_path: Path) -> Iterator[dict[str, str]]:
    """One keyring for this process and a `hearth` child, as the system's would be."""
    path = tmp_path / "keyring.json"
    keyring.set_keyring(FileKeyring(path))
    yield {
        **os.environ,
        "PYTHON_KEYRING_BACKEND": "tests.helpers.file_keyring.FileKeyring",
        KEYRING_FILE_ENV: str(path),
    }


def hearth(env: dict[str, str], home: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *argv, "--home", str(home)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def status(server: LocalServer, key: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        connection.request("GET", "/v1/models", headers={"Authorization": f"Bearer {key}"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_keys_made_and_revoked_by_a_command_take_effect_on_a_server_running_in_another_process(
    hermetic_home: Path, shared_keyring: dict[str, str], engine: ChatEngine
) -> None:
    keys = ApiKeys(hermetic_home)  # the window's
    editor = keys.create("editor")
    server = LocalServer(engine, keys=keys.accepted(), port=0)
    server.start()
    try:
        made = hearth(shared_keyring, hermetic_home, "api-keys", "create", "laptop")
        assert made.returncode == 0, made.stderr
        laptop = made.stdout.strip()
        deadline = time.monotonic() + 20
        while status(server, laptop) != 200:
            assert time.monotonic() < deadline, "the key made by the command was never accepted"
            time.sleep(0.05)

        revoked = hearth(shared_keyring, hermetic_home, "api-keys", "revoke", "laptop")
        assert revoked.returncode == 0, revoked.stderr
        assert status(server, laptop) == 401  # from the very next request
        assert status(server, editor.secret) == 200
        keys.flush_use()
        listed = hearth(shared_keyring, hermetic_home, "api-keys", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        (row,) = json.loads(listed.stdout)["keys"]
        assert row["name"] == "editor" and row["last_used_at"] is not None
        assert editor.secret not in listed.stdout and laptop not in listed.stdout
    finally:
        server.stop()


def test_serve_shows_a_key_only_when_it_makes_it_and_otherwise_names_those_it_takes(
    hermetic_home: Path,
) -> None:
    keys = ApiKeys(hermetic_home)
    made = keys.ensure_default()
    assert made is not None
    said = io.StringIO()
    tell_keys(made, keys.accepted(), said)
    first, second = said.getvalue().splitlines()
    assert first == f"API key: {made.secret}" and "named default, shown only now" in second

    keys.create("editor")
    said = io.StringIO()
    tell_keys(ApiKeys(hermetic_home).ensure_default(), ApiKeys(hermetic_home).accepted(), said)
    assert said.getvalue() == "API keys accepted: default, editor (`hearth api-keys list` lists them)\n"

    # The keyring gone: the keys are listed but their secrets cannot be read, and serve says so.
    keyring.set_keyring(FailKeyring())  # type: ignore[no-untyped-call]
    later = ApiKeys(hermetic_home)
    said = io.StringIO()
    tell_keys(later.ensure_default(), later.accepted(), said)
    lines = said.getvalue().splitlines()
    assert lines[0].startswith("No API key is accepted yet: `hearth api-keys create NAME` makes one")
    assert [line.split(":")[0] for line in lines[1:]] == [
        "The API key default is refused for now",
        "The API key editor is refused for now",
    ]
    assert made.secret not in said.getvalue()


@pytest.mark.model
def test_serve_that_cannot_take_its_port_makes_no_key(starter_model: Path, hermetic_home: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        code, _, err = run("serve", "--port", str(taken.getsockname()[1]))
    assert code == 3 and "already in use" in err and "API key" not in err
    # The key it would have made is made by the next serve that starts, and shown there.
    assert not (hermetic_home / KEYS_FILE).exists()
