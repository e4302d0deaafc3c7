"""`hearth servers …` and `hearth chat --model SERVER/MODEL`, driven as a user or a script would."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import keyring
import pytest
from keyring.errors import KeyringLocked

from app.cli.main import main
from tests.helpers.openai_peer import FaultServer, LlamaPeer, serve_faults

KEY = "sk-cli-key-7e31f0a9b2"


def run(
    *argv: str, stdin: str | None = None, monkeypatch: pytest.MonkeyPatch | None = None
) -> tuple[int, str, str]:
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def files_containing(home: Path, secret: str) -> list[Path]:
    return [p for p in home.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_add_list_and_remove_a_server(monkeypatch: pytest.MonkeyPatch, hermetic_home: Path) -> None:
    code, out, err = run(
        "servers",
        "add",
        "lab",
        "http://127.0.0.1:9/",
        "--api-key-from-stdin",
        stdin=f"{KEY}\n",
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    assert "Added lab: http://127.0.0.1:9/v1; its models are lab/MODEL." in out
    code, out, _ = run("servers", "list", "--json")
    assert code == 0
    (row,) = json.loads(out)["servers"]
    assert row["name"] == "lab" and row["url"] == "http://127.0.0.1:9/v1" and row["ca_bundle"] is None
    assert row["api_key"]["stored"] is True and row["api_key"]["where"] == "keyring"
    assert row["problem"] is None
    code, out, _ = run("servers", "list")
    assert out == "lab\thttp://127.0.0.1:9/v1\tkey in the keyring\n"
    code, out, _ = run("servers", "remove", "lab")
    assert code == 0 and "Removed lab" in out
    assert json.loads(run("servers", "list", "--json")[1]) == {"servers": []}
    assert files_containing(hermetic_home, KEY) == []


def test_usage_mistakes_and_unknown_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SystemExit) as info:
        main(["servers", "add", "lab"])
    assert info.value.code == 2
    for argv in (
        ("servers", "add", "lab/x", "http://127.0.0.1:9"),
        ("servers", "add", "lab", "gpu-box:8000"),
        ("servers", "add", "lab", "https://gpu-box", "--ca-bundle", "/no/such/bundle.pem"),
        ("servers", "remove", "nothing"),
        ("servers", "models", "nothing"),
        ("chat", "--model", "nothing/model", "hi"),
    ):
        code, _, err = run(*argv)
        assert code == 3, argv
        assert err.startswith("hearth: ") and len(err.strip().splitlines()) == 1
    code, _, err = run(
        "servers",
        "add",
        "lab",
        "http://127.0.0.1:9",
        "--api-key-from-stdin",
        stdin="\n",
        monkeypatch=monkeypatch,
    )
    assert code == 3 and "No API key was given" in err


def test_chat_through_llama_cpp_server_records_the_server(
    monkeypatch: pytest.MonkeyPatch, hermetic_home: Path, llama_peer: LlamaPeer
) -> None:
    code, _, err = run(
        "servers",
        "add",
        "peer",
        llama_peer.url,
        "--api-key-from-stdin",
        stdin=llama_peer.api_key,
        monkeypatch=monkeypatch,
    )
    assert code == 0, err
    code, out, _ = run("servers", "models", "peer", "--json")
    assert code == 0
    assert f"peer/{llama_peer.model_id}" in [m["name"] for m in json.loads(out)["models"]]

    model = f"peer/{llama_peer.model_id}"
    code, out, err = run(
        "-v", "chat", "--model", model, "--temperature", "0", "--max-tokens", "16", "Say hi."
    )
    assert code == 0, err
    assert out.strip()
    conversation_id = int(err.split("conversation ")[1].split()[0])
    code, shown, _ = run("conversations", "show", str(conversation_id), "--json")
    reply = json.loads(shown)["messages"][-1]
    assert reply["status"] == "complete"
    assert (reply["model_name"], reply["server_name"], reply["server_url"]) == (model, "peer", llama_peer.url)
    assert reply["content"].strip() == out.strip()
    assert reply["ttft_ms"] > 0 and reply["completion_tokens"] > 0

    # A wrong key: one clear line, exit 3, nothing stored; and the key is in no file Hearth wrote.
    wrong = "sk-wrong-key-5d5d5d5d5d"
    run(
        "servers", "add", "peer", llama_peer.url, "--api-key-from-stdin", stdin=wrong, monkeypatch=monkeypatch
    )
    code, out, err = run("-v", "chat", "--model", model, "Hello again")
    assert (
        code == 3 and err.startswith("hearth: peer refused the API key (401") and len(err.splitlines()) == 1
    )
    assert wrong not in err
    assert len(json.loads(run("conversations", "list", "--json")[1])["conversations"]) == 1
    assert (
        f"POST {llama_peer.url}/chat/completions: 401" in (hermetic_home / "logs" / "hearth.log").read_text()
    )
    assert files_containing(hermetic_home, llama_peer.api_key) == []
    assert files_containing(hermetic_home, wrong) == []


def test_a_reply_cut_mid_stream_exits_1_with_the_partial_reply_saved(fault_server: FaultServer) -> None:
    assert run("servers", "add", "lab", fault_server.url)[0] == 0
    code, out, err = run("chat", "--model", "lab/cut", "Hi")
    assert code == 1
    assert out == "Hello, world\n"
    assert "the reply failed (error): The connection to lab was lost while streaming the reply" in err
    conversation_id = int(err.split("conversation ")[1].split()[0])
    reply = json.loads(run("conversations", "show", str(conversation_id), "--json")[1])["messages"][-1]
    assert (reply["status"], reply["content"], reply["server_name"]) == ("error", "Hello, world", "lab")
    code, _, err = run("chat", "--model", "lab/status-503", "Hi")
    assert code == 3 and "lab failed with a server error (503" in err


def test_removing_a_server_whose_key_the_keyring_keeps_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = ("servers", "add", "lab", "http://127.0.0.1:9", "--api-key-from-stdin")
    code, _, err = run(*argv, stdin=KEY, monkeypatch=monkeypatch)
    assert code == 0, err

    def locked(self: object, service: str, username: str) -> None:
        raise KeyringLocked("the collection is locked")

    monkeypatch.setattr(type(keyring.get_keyring()), "delete_password", locked)
    code, out, err = run("servers", "remove", "lab")
    assert code == 3 and out == ""
    assert err.startswith("hearth: removed lab, but not its API key: The system keyring is locked")
    assert len(err.splitlines()) == 1 and KEY not in err
    assert json.loads(run("servers", "list", "--json")[1]) == {"servers": []}


def test_without_a_keyring_adding_a_server_without_a_key_warns_of_nothing(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from keyring.backends import fail

    keyring.set_keyring(fail.Keyring())  # type: ignore[no-untyped-call]
    with caplog.at_level("WARNING", logger="hearth"):
        code, out, err = run("servers", "add", "lab", "http://127.0.0.1:9/")
        assert code == 0, err
        code, out, err = run("servers", "list")
    assert code == 0 and out.startswith("lab\thttp://127.0.0.1:9/v1\tno key")
    assert [r.getMessage() for r in caplog.records if r.name.startswith("hearth.secrets")] == []
    # Saving a key is where a missing keyring matters, and there it is said.
    add = ("servers", "add", "keyed", "http://127.0.0.1:9/", "--api-key-from-stdin")
    code, _, err = run(*add, stdin=f"{KEY}\n", monkeypatch=monkeypatch)
    assert code == 3 and "the API key was not saved: No system keyring is available" in err


def test_replacing_a_server_without_a_key_removes_the_old_key(monkeypatch: pytest.MonkeyPatch) -> None:
    add = ("servers", "add", "lab", "http://127.0.0.1:9/", "--api-key-from-stdin")
    code, _, err = run(*add, stdin=f"{KEY}\n", monkeypatch=monkeypatch)
    assert code == 0, err
    assert keyring.get_password("Hearth", "server-api-key:lab") == KEY
    code, _, err = run("servers", "add", "lab", "http://127.0.0.1:8/")
    assert code == 0, err
    assert keyring.get_password("Hearth", "server-api-key:lab") is None


def test_a_servers_context_is_set_on_add_changed_with_edit_and_reported_by_models() -> None:
    with serve_faults(max_model_len={"echo": 4096}) as server:
        code, _, err = run("servers", "add", "lab", server.url, "--context", "16,384")
        assert code == 0, err
        (row,) = json.loads(run("servers", "list", "--json")[1])["servers"]
        assert row["context_tokens"] == 16384
        assert run("servers", "list")[1] == f"lab\t{server.url}\tno key\tcontext 16,384\n"
        models = {m["id"]: m for m in json.loads(run("servers", "models", "lab", "--json")[1])["models"]}
        assert (models["echo"]["context_tokens"], models["echo"]["context_source"]) == (16384, "setting")

        code, out, _ = run("servers", "edit", "lab", "--context", "auto")
        assert (
            code == 0 and out == "lab's models are planned for the context it reports, else 8,192 tokens.\n"
        )
        models = {m["id"]: m for m in json.loads(run("servers", "models", "lab", "--json")[1])["models"]}
        assert (models["echo"]["context_tokens"], models["echo"]["context_source"]) == (4096, "server")
        assert (models["usage"]["context_tokens"], models["usage"]["context_source"]) == (8192, "default")

        code, out, _ = run("servers", "edit", "lab", "--context", "32768")
        assert code == 0 and out == "lab's models are planned for 32,768 tokens.\n"
        assert json.loads(run("servers", "list", "--json")[1])["servers"][0]["context_tokens"] == 32768


@pytest.mark.parametrize("value", ["0", "-5", "abc", "12.5", "100", "99999999999"])
def test_a_bad_context_is_refused_in_one_line_and_changes_nothing(value: str) -> None:
    assert run("servers", "add", "lab", "http://127.0.0.1:9", "--context", "8192")[0] == 0
    for argv in (
        ("servers", "add", "lab", "http://127.0.0.1:9", "--context", value),
        ("servers", "add", "other", "http://127.0.0.1:9", f"--context={value}"),
        ("servers", "edit", "lab", "--context", value),
    ):
        code, out, err = run(*argv)
        assert code == 3 and out == "", argv
        assert err.startswith("hearth: ") and len(err.splitlines()) == 1, err
        assert "context length" in err
    (row,) = json.loads(run("servers", "list", "--json")[1])["servers"]
    assert (row["name"], row["context_tokens"]) == ("lab", 8192)
    code, _, err = run("servers", "edit", "nothing", "--context", "4096")
    assert code == 3 and "no server named" in err
    with pytest.raises(SystemExit) as info:
        main(["servers", "edit", "lab"])
    assert info.value.code == 2
