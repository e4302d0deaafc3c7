"""`hearth models search|files|download|verify|remove` and `hearth token`, against the local hub server."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.errors import NoKeyringError

from app.cli.main import main
from app.library.downloads import local_path
from app.library.installed import STARTER_NAME
from tests.helpers.hubserver import HubServer, ServedFile, starter_file

REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
TOKEN = "hf_CliTokenCliTokenCliToken0123456"
REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def quants_repo(hub: HubServer, variants: dict[str, Path]) -> HubServer:
    files = [starter_file(), *(ServedFile.from_path(p.name, p) for p in variants.values())]
    hub.add_repo(REPO, files, downloads=1000)
    return hub


def run(*argv: str, stdin: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    previous = sys.stdin
    if stdin is not None:
        sys.stdin = io.StringIO(stdin)
    try:
        code = main(list(argv), out=out, err=err)
    finally:
        sys.stdin = previous
    return code, out.getvalue(), err.getvalue()


def one_line_error(code: int, err: str) -> str:
    assert code == 3
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hearth: "), err
    return lines[0]


def test_search_json_and_text(hub: HubServer) -> None:
    hub.add_repo(REPO, [starter_file()], downloads=1234, likes=7, gated="auto")
    code, out, _ = run("models", "search", "smollm2", "--limit", "3", "--json", "--endpoint", hub.url)
    assert code == 0
    data = json.loads(out)
    assert data["endpoint"] == hub.url and data["query"] == "smollm2"
    assert data["results"] == [
        {
            "repo_id": REPO,
            "downloads": 1234,
            "likes": 7,
            "license": "apache-2.0",
            "gated": True,
            "last_modified": "2025-06-01T12:00:00+00:00",
        }
    ]
    code, out, _ = run("models", "search", "smollm2", "--endpoint", hub.url)
    assert code == 0 and out.startswith(f"{REPO}\t1234 downloads\t7 likes\tapache-2.0\t2025-06-01\tgated")


def test_endpoint_comes_from_the_option_then_the_setting_then_hf_endpoint(
    hub: HubServer, hermetic_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hub.add_repo(REPO, [starter_file()])
    mirror = HubServer().start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        assert json.loads(run("models", "search", "smol", "--json")[1])["endpoint"] == hub.url
        hermetic_home.mkdir(parents=True, exist_ok=True)
        (hermetic_home / "settings.json").write_text(json.dumps({"hf_endpoint": mirror.url}))
        assert json.loads(run("models", "search", "smol", "--json")[1])["endpoint"] == mirror.url
        assert len(mirror.requests_to("/api/models")) == 1
        code, out, _ = run("--endpoint", hub.url, "models", "search", "smol", "--json")
        assert code == 0 and json.loads(out)["results"][0]["repo_id"] == REPO
    finally:
        mirror.stop()


def test_files_lists_every_quantization_with_its_fit_and_one_recommendation(quants_repo: HubServer) -> None:
    code, out, err = run(
        "models", "files", REPO, "--json", "--vram", "0", "--ram", "16000", "--context", "2048",
        "--endpoint", quants_repo.url,
    )  # fmt: skip
    assert code == 0, err
    data = json.loads(out)
    assert data["commit"] == quants_repo.repos[REPO].head and data["context"] == 2048
    rows = {row["quantization"]: row for row in data["files"]}
    assert set(rows) == {"Q3_K_M", "Q4_1", "Q4_K_M", "Q8_0"}
    for label, row in rows.items():
        assert row["verdict"] == "cpu" and row["n_gpu_layers"] == 0 and row["n_layers"] == 30
        assert row["ram_bytes"] > row["size_bytes"] * 0.8 and row["max_context"] >= 2048
        assert len(row["sha256"]) == 64 and row["error"] is None
        assert label in row["filename"]
    assert [row["quantization"] for row in data["files"] if row["recommended"]] == ["Q8_0"]
    assert data["recommendation"]["filename"] == rows["Q8_0"]["filename"]

    code, out, _ = run("models", "files", REPO, "--vram", "8000", "--endpoint", quants_repo.url)
    assert code == 0
    assert "gpu\t30/30 layers" in out and "*recommended" in out and "Recommendation:" in out


def test_too_little_memory_is_said_before_the_download(quants_repo: HubServer) -> None:
    code, out, _ = run(
        "models", "files", REPO, "--json", "--vram", "0", "--ram", "50", "--endpoint", quants_repo.url
    )
    assert code == 0
    data = json.loads(out)
    assert {row["verdict"] for row in data["files"]} == {"too_large"}
    assert data["recommendation"]["filename"] is None
    code, _, err = run("models", "download", REPO, "--recommended", "--vram", "0", "--ram", "50",
                       "--endpoint", quants_repo.url)  # fmt: skip
    assert "Nothing in" in one_line_error(code, err)
    # Only headers were read (range requests), never a whole file.
    assert all(r.headers.get("range") for r in quants_repo.requests_to("/resolve/"))


def test_download_by_quant_shows_progress_and_installs(quants_repo: HubServer) -> None:
    code, out, err = run("models", "download", REPO, "--quant", "q4_k_m", "--endpoint", quants_repo.url)
    assert code == 0, err
    assert out.startswith("Installed SmolLM2-135M-Instruct.Q4_K_M (Q4_K_M, ")
    assert "100.0%" in err and "MiB/s" in err
    [model] = json.loads(run("models", "list", "--json")[1])["models"][1:] or [None]
    assert model is not None and model["quantization"] == "Q4_K_M"
    assert model["source"].startswith(f"hub:{REPO}@{quants_repo.repos[REPO].head}/")


def test_download_recommended_picks_the_recommended_file(quants_repo: HubServer) -> None:
    code, out, err = run(
        "models",
        "download",
        REPO,
        "--recommended",
        "--vram",
        "0",
        "--ram",
        "16000",
        "--endpoint",
        quants_repo.url,
    )
    assert code == 0, err
    assert "Q8_0" in out


def test_download_needs_a_choice_when_there_are_several(quants_repo: HubServer) -> None:
    code, _, err = run("models", "download", REPO, "--endpoint", quants_repo.url)
    assert "choose one with FILE, --quant Q or --recommended" in one_line_error(code, err)
    code, _, err = run("models", "download", REPO, "nope.gguf", "--endpoint", quants_repo.url)
    assert "no GGUF file 'nope.gguf'" in one_line_error(code, err)
    code, _, err = run("models", "download", REPO, "--quant", "IQ1_S", "--endpoint", quants_repo.url)
    assert "no IQ1_S file" in one_line_error(code, err)
    with pytest.raises(SystemExit) as info:
        main(["models", "download", REPO, "file.gguf", "--quant", "Q8_0"])
    assert info.value.code == 2


def test_private_repo_without_a_token_is_explained(hub: HubServer) -> None:
    hub.add_repo(REPO, [starter_file()], private=True)
    code, _, err = run("models", "files", REPO, "--endpoint", hub.url)
    assert "token is missing or invalid" in one_line_error(code, err)


def test_verify_and_remove(hub: HubServer, hermetic_home: Path) -> None:
    starter = starter_file()
    hub.add_repo(REPO, [starter])
    assert run("models", "download", REPO, "--endpoint", hub.url)[0] == 0
    name = "SmolLM2-135M-Instruct.Q4_1"
    code, out, _ = run("models", "verify", name)
    assert code == 0 and out == f"{name}: intact (sha256 {starter.sha256})\n"
    code, out, _ = run("models", "verify", name, "--check-hub", "--json", "--endpoint", hub.url)
    assert code == 0
    assert json.loads(out)["hub"]["changed"] is False

    path = local_path(hermetic_home / "models", REPO, starter.filename)
    with path.open("r+b") as file:
        file.seek(5000)
        file.write(b"\xff")
    code, _, err = run("models", "verify", name)
    assert "damaged or missing" in one_line_error(code, err)

    code, out, _ = run("models", "remove", name)
    assert code == 0 and out == f"Removed {name}; freed 93.8 MiB\n"
    assert not path.exists() and not path.parent.exists()
    code, _, err = run("models", "remove", STARTER_NAME)
    assert "starter model" in one_line_error(code, err)


class NoKeyring(KeyringBackend):
    priority = 1

    def get_password(self, service: str, username: str) -> str | None:
        raise NoKeyringError("no backend")

    def set_password(self, service: str, username: str, password: str) -> None:
        raise NoKeyringError("no backend")

    def delete_password(self, service: str, username: str) -> None:
        raise NoKeyringError("no backend")


def test_token_set_status_clear_reads_stdin_and_stays_in_the_keyring(hermetic_home: Path) -> None:
    assert run("token", "status")[1].startswith("Token: not set")
    code, out, _ = run("token", "set", stdin=f"  {TOKEN}\n")
    assert code == 0
    assert out == "Token saved in the system keyring; it is sent to https://huggingface.co only.\n"
    assert keyring.get_keyring().get_password("Hearth", "huggingface-token") == TOKEN
    code, out, _ = run("token", "status")
    assert code == 0 and out.startswith("Token: set (in the system keyring") and TOKEN not in out
    assert run("token", "clear")[1] == "Token removed.\n"
    assert keyring.get_keyring().get_password("Hearth", "huggingface-token") is None
    code, _, err = run("token", "set", stdin="has a space\n")
    assert "does not look like" in one_line_error(code, err) and "space" not in err.split(":", 1)[0]
    assert not any(TOKEN.encode() in p.read_bytes() for p in hermetic_home.rglob("*") if p.is_file())


def test_token_set_without_a_keyring_says_it_was_not_saved() -> None:
    keyring.set_keyring(NoKeyring())  # type: ignore[no-untyped-call]
    code, _, err = run("token", "set", stdin=TOKEN)
    line = one_line_error(code, err)
    assert "not saved" in line and "No system keyring" in line and TOKEN not in err


def test_ctrl_c_keeps_the_partial_and_the_same_command_resumes(hub: HubServer, hermetic_home: Path) -> None:
    starter = starter_file()
    hub.add_repo(REPO, [starter])
    hub.faults.rate_bps = 25_000_000
    part = local_path(hermetic_home / "models", REPO, starter.filename).with_name(starter.filename + ".part")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    command = [sys.executable, "-m", "app", "models", "download", REPO, "--endpoint", hub.url,
               "--home", str(hermetic_home)]  # fmt: skip
    child = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 60
    while not (part.exists() and part.stat().st_size > 10_000_000):
        assert child.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=30)
    assert child.returncode == 130
    assert "partial download is kept: run the same command to resume" in err
    kept = part.stat().st_size
    assert 10_000_000 < kept < starter.size

    hub.faults.rate_bps = None
    code, _, err = run("models", "download", REPO, "--endpoint", hub.url)
    assert code == 0, err
    assert hub.requests_to("/resolve/")[-1].headers["range"] == f"bytes={kept}-"


def test_hub_commands_without_a_keyring_do_not_warn_about_it(
    hub: HubServer, caplog: pytest.LogCaptureFixture
) -> None:
    from keyring.backends import fail

    hub.add_repo(REPO, [starter_file()], downloads=1234)
    keyring.set_keyring(fail.Keyring())  # type: ignore[no-untyped-call]
    with caplog.at_level("WARNING", logger="hearth"):
        code, out, err = run("models", "search", "smollm2", "--endpoint", hub.url)
    assert code == 0, err
    assert REPO in out
    assert [r.getMessage() for r in caplog.records if r.name.startswith("hearth.secrets")] == []
