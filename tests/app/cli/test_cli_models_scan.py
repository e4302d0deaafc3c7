"""`hearth models scan [--add] [--json]`, `hearth models folders` and what `models list` and `models
remove` say about models added in place, through the real CLI entry point."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from app.cli.main import main
from tests.app.model_scan.layouts import hf_cached, isolate_app_folders, ollama_model, sha256_of, tiny_model

COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.fixture(autouse=True)
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolate_app_folders(monkeypatch, tmp_path / "user-home")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def scan_json(*extra: str) -> dict[str, Any]:
    code, out, err = run("models", "scan", "--json", *extra)
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def listed() -> dict[str, dict[str, Any]]:
    code, out, _ = run("models", "list", "--json")
    assert code == 0
    return {m["name"]: m for m in json.loads(out)["models"]}


@pytest.fixture
def apps(user_home: Path, tmp_path: Path) -> dict[str, Path]:
    """A model in Ollama's store, one in LM Studio's folder and one in the Hugging Face cache."""
    blob = ollama_model(
        user_home / ".ollama" / "models",
        "registry.ollama.ai/library/tiny:1b",
        tiny_model(tmp_path / "o.gguf", "O"),
    )
    lmstudio = tiny_model(user_home / ".lmstudio" / "models" / "pub" / "Tiny-GGUF" / "Tiny-Q4_K_M.gguf", "L")
    snapshot = hf_cached(
        user_home / ".cache" / "huggingface" / "hub",
        "org/Cached-GGUF",
        COMMIT,
        {"Cached-Q8_0.gguf": tiny_model(tmp_path / "h.gguf", "H")},
    )
    return {"ollama": blob, "lmstudio": lmstudio, "hf-cache": snapshot / "Cached-Q8_0.gguf"}


def test_scan_json_lists_every_app_and_where_it_looked(apps: dict[str, Path]) -> None:
    data = scan_json()
    models = {m["app"]: m for m in data["models"]}
    assert set(models) == {"ollama", "lmstudio", "hf-cache"}
    ollama = models["ollama"]
    assert ollama["name"] == "tiny:1b" and ollama["add_as"] == "tiny-1b"
    assert (ollama["usable"], ollama["in_library"], ollama["library_name"], ollama["problem"]) == (
        True,
        False,
        None,
        None,
    )
    assert ollama["path"] == str(apps["ollama"]) and ollama["sha256"] == sha256_of(apps["ollama"])
    assert models["hf-cache"]["repo_id"] == "org/Cached-GGUF" and models["hf-cache"]["revision"] == COMMIT
    assert models["lmstudio"]["size_bytes"] == apps["lmstudio"].stat().st_size
    searched = {(s["app"], s["path"]): s for s in data["searched"]}
    assert searched[("ollama", str(apps["ollama"].parents[1]))]["found"] == 1
    assert "added" not in data


def test_scan_add_registers_in_place(apps: dict[str, Path], hermetic_home: Path) -> None:
    inodes = {app: path.stat().st_ino for app, path in apps.items()}
    code, out, err = run("models", "scan", "--add")
    assert code == 0, err
    assert "Added tiny-1b in place from ollama" in out
    assert "Hashing tiny:1b" in err

    installed = listed()
    for name, app in (("tiny-1b", "ollama"), ("Tiny-Q4_K_M", "lmstudio"), ("Cached-Q8_0", "hf-cache")):
        assert installed[name]["source"] == f"scan:{app}"
        assert installed[name]["path"] == str(apps[app].resolve())
        assert installed[name]["missing"] is False
    assert {app: path.stat().st_ino for app, path in apps.items()} == inodes
    models_dir = hermetic_home / "models"
    assert not any(p.suffix == ".gguf" for p in models_dir.rglob("*")), list(models_dir.rglob("*"))

    again = scan_json()
    assert all(m["in_library"] for m in again["models"])
    code, out, _ = run("models", "scan")
    assert code == 0 and "in the library as tiny-1b" in out


def test_scan_add_json_reports_what_was_added(apps: dict[str, Path]) -> None:
    data = scan_json("--add")
    assert sorted((a["library_name"], a["added"], a["error"]) for a in data["added"]) == [
        ("Cached-Q8_0", True, None),
        ("Tiny-Q4_K_M", True, None),
        ("tiny-1b", True, None),
    ]


def test_a_damaged_ollama_blob_is_refused_with_a_clear_message(user_home: Path, tmp_path: Path) -> None:
    ollama_model(
        user_home / ".ollama" / "models",
        "registry.ollama.ai/library/bad:latest",
        tiny_model(tmp_path / "b.gguf"),
        digest="cd" * 32,
    )
    code, _, err = run("models", "scan", "--add")
    assert code == 3
    assert "hearth: bad:latest (ollama) was not added: Ollama's blob sha256-" + "cd" * 32 in err
    assert "does not hold what its name promises" in err and "ollama pull bad:latest" in err
    assert "bad-latest" not in listed()


def test_broken_files_are_listed_as_unusable(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "broken.gguf").write_bytes(b"\x00" * 4096)
    assert run("models", "folders", "add", str(folder))[0] == 0

    code, out, _ = run("models", "scan")
    assert code == 0
    assert "folder\tbroken\t" in out and "unusable: broken.gguf is not a usable GGUF model" in out
    [entry] = scan_json()["models"]
    assert (entry["usable"], entry["in_library"]) == (False, False)


def test_a_model_whose_file_disappears_shows_as_missing(apps: dict[str, Path]) -> None:
    assert run("models", "scan", "--add")[0] == 0
    apps["lmstudio"].unlink()

    assert listed()["Tiny-Q4_K_M"]["missing"] is True
    assert listed()["tiny-1b"]["missing"] is False
    code, out, err = run("models", "list")
    assert code == 0 and err == ""
    [line] = [line for line in out.splitlines() if line.startswith("Tiny-Q4_K_M\t")]
    assert line.endswith("\tmissing")
    assert run("models", "scan")[0] == 0


def test_remove_only_forgets_a_model_added_in_place(apps: dict[str, Path]) -> None:
    assert run("models", "scan", "--add")[0] == 0
    code, out, err = run("models", "remove", "tiny-1b")
    assert (code, err) == (0, "")
    assert f"its file was left where it is: {apps['ollama'].resolve()}" in out
    assert apps["ollama"].is_file()
    assert "tiny-1b" not in listed()


def test_folders_add_list_remove(tmp_path: Path) -> None:
    folder = tmp_path / "my models"
    tiny_model(folder / "sub" / "mine.gguf", "Mine")

    code, out, _ = run("models", "folders", "list")
    assert code == 0 and "No model folders added" in out
    code, out, _ = run("models", "folders", "add", str(folder))
    assert code == 0 and str(folder.resolve()) in out
    code, out, _ = run("models", "folders", "list", "--json")
    assert json.loads(out) == {"folders": [str(folder.resolve())]}
    assert [(m["app"], m["name"]) for m in scan_json()["models"]] == [("folder", "mine")]

    code, out, _ = run("models", "folders", "remove", str(folder))
    assert code == 0 and "nothing in it was touched" in out
    assert (folder / "sub" / "mine.gguf").is_file()
    assert scan_json()["models"] == []
    code, _, err = run("models", "folders", "remove", str(folder))
    assert code == 3 and "is not one of the model folders" in err
    code, _, err = run("models", "folders", "add", str(tmp_path / "nope"))
    assert code == 3 and "is not a folder" in err
