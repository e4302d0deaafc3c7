"""The `hearth` command, driven as a user or a script would."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli.main import main

REPO = Path(__file__).resolve().parents[3]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def run_process(*argv: str, home: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    return subprocess.run(
        [sys.executable, "-m", "app", *argv, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=env,
        check=False,
    )


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["no-such-command"])
    assert info.value.code == 2
    with pytest.raises(SystemExit) as info:
        main(["chat", "hello"])  # --model is required
    assert info.value.code == 2


@pytest.mark.model
def test_models_list_json_shows_the_starter_model(starter_model: Path) -> None:
    code, out, _ = run("models", "list", "--json")
    assert code == 0
    (model,) = json.loads(out)["models"]
    assert model["name"] == "SmolLM2-135M-Instruct-Q4_1"
    assert model["sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert model["architecture"] == "llama"
    assert model["quantization"] == "Q4_1"
    assert model["size_bytes"] == starter_model.stat().st_size


def test_import_of_a_malformed_file_exits_3_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "evil.gguf"
    bad.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + (2**40).to_bytes(8, "little") + b"\0" * 16)
    code, out, err = run("models", "import", str(bad))
    assert code == 3
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("hearth: ")
    code, out, _ = run("models", "list", "--json")
    assert all(m["name"] != "evil" for m in json.loads(out)["models"])


def test_unknown_conversation_and_model_exit_3() -> None:
    code, _, err = run("conversations", "show", "999")
    assert code == 3 and "999" in err
    code, _, err = run("chat", "--model", "no-such-model", "hi")
    assert code == 3 and "no-such-model" in err


@pytest.mark.model
def test_chat_streams_stores_and_continues(starter_model: Path) -> None:
    code, out, err = run(
        "chat", "--model", "SmolLM2-135M-Instruct-Q4_1", "--temperature", "0", "--seed", "3",
        "--max-tokens", "24", "--system", "You answer briefly.", "What is the capital of France?",
    )  # fmt: skip
    assert code == 0, err
    assert out.strip()
    conversation_id = int(err.split("conversation ")[1].split()[0])

    code, _, err2 = run(
        "chat", "--model", "SmolLM2-135M-Instruct-Q4_1", "--conversation", str(conversation_id),
        "--max-tokens", "16", "And of Italy?",
    )  # fmt: skip
    assert code == 0, err2

    code, shown, _ = run("conversations", "show", str(conversation_id), "--json")
    data = json.loads(shown)
    assert data["id"] == conversation_id
    assert data["system_prompt"] == "You answer briefly."
    assert [m["role"] for m in data["messages"]] == ["user", "assistant", "user", "assistant"]
    assert data["messages"][1]["content"].strip() == out.strip()
    assert data["messages"][1]["seed"] == 3
    assert all(m["status"] == "complete" for m in data["messages"])

    code, listed, _ = run("conversations", "list", "--json")
    (conversation,) = json.loads(listed)["conversations"]
    assert conversation["message_count"] == 4 and conversation["collections"] == []
    assert conversation["title"].startswith("What is the capital of France")

    code, md, _ = run("conversations", "export", str(conversation_id), "--format", "md")
    assert code == 0 and "What is the capital of France?" in md and "And of Italy?" in md
    code, exported, _ = run("conversations", "export", str(conversation_id), "--format", "json")
    assert json.loads(exported)["format"] == "hearth.conversation"


def test_doctor_json_reports_cpu_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, _ = run("doctor", "--json")
    assert code == 0
    report = json.loads(out)
    for key in ("backend", "gpus", "gpu_reason", "ram", "keyring", "data_dir", "database"):
        assert key in report
    assert report["backend"]["name"] in ("CPU", "CUDA")
    if not report["gpus"]:
        assert report["gpu_reason"]
    assert report["ram"]["total_mib"] > 0
    assert report["keyring"]["usable"] is True  # the test suite's in-memory backend
    assert report["database"]["ok"] is True
    assert report["data_dir"] == os.environ["HEARTH_HOME"]


def test_doctor_reports_a_missing_keyring_backend() -> None:
    import keyring
    from keyring.backends import fail

    keyring.set_keyring(fail.Keyring())  # type: ignore[no-untyped-call]
    code, out, _ = run("doctor", "--json")
    assert code == 0
    assert json.loads(out)["keyring"]["usable"] is False
    assert json.loads(out)["keyring"]["reason"]


def test_home_flag_wins_over_environment(tmp_path: Path) -> None:
    chosen = tmp_path / "chosen"
    code, out, _ = run("doctor", "--json", "--home", str(chosen))
    assert code == 0
    assert json.loads(out)["data_dir"] == str(chosen.resolve())


@pytest.mark.gui
def test_gui_smoke_test_exits_0(tmp_path: Path) -> None:
    result = run_process("gui", "--smoke-test", home=tmp_path / "smoke")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr


def test_importing_an_installed_file_again_says_under_which_name(tmp_path: Path, starter_model: Path) -> None:
    from app.library.installed import STARTER_NAME

    # The starter model is registered when Hearth first opens its library: importing the file again adds
    # nothing, and says so.
    code, out, err = run("models", "import", str(starter_model), "--name", "other")
    assert code == 0, err
    assert out.startswith(f"{starter_model} is already installed as {STARTER_NAME} (sha256 ")
    assert "--name 'other' was not applied" in out
    code, out, _ = run("models", "list", "--json")
    assert [m["name"] for m in json.loads(out)["models"]] == [STARTER_NAME]
