"""`hearth models import --mmproj`, `models list` and `models files` for vision models, and what `hearth chat
--attach photo.jpg` says about which model can see, through the real CLI entry point."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from app.cli.main import main
from tests.helpers.hubserver import HubServer, ServedFile, starter_file, starter_model_file
from tests.helpers.model_files import with_chat_template
from tests.helpers.projectors import projector_bytes, write_projector
from tests.helpers.tiny_vision import write_tiny_projector

REPO = "ggml-org/SmolLM2-Vision-GGUF"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def listed() -> dict[str, dict[str, object]]:
    code, out, _ = run("models", "list", "--json")
    assert code == 0
    return {m["name"]: m for m in json.loads(out)["models"]}


@pytest.fixture
def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "downloads"
    folder.mkdir()
    # Not the starter's bytes (installed already): the same model with another template.
    with_chat_template(starter_model_file(), folder / "SmolVision.gguf", "{{ messages[0]['content'] }}")
    return folder


def test_import_with_a_projector_makes_a_vision_model(model_folder: Path) -> None:
    projector = write_projector(model_folder / "vision-tower.gguf")
    code, out, err = run(
        "models", "import", str(model_folder / "SmolVision.gguf"), "--mmproj", str(projector)
    )
    assert (code, err) == (0, ""), err
    assert "with its vision projector vision-tower.gguf" in out and "it can see images" in out
    model = listed()["SmolVision"]
    assert model["vision"] is True
    assert isinstance(model["projector"], dict) and model["projector"]["filename"] == "vision-tower.gguf"
    code, out, _ = run("models", "list")
    [line] = [line for line in out.splitlines() if line.startswith("SmolVision\t")]
    assert line.endswith("\tvision")


def test_the_projector_can_come_after_the_model(tmp_path: Path) -> None:
    """The starter model is installed already: importing its file again with a projector makes it see."""
    starter = "SmolLM2-135M-Instruct-Q4_1"
    projector = write_projector(tmp_path / "mmproj-F16.gguf")
    code, out, err = run("models", "import", str(starter_model_file()), "--mmproj", str(projector))
    assert code == 0, err
    assert f"already installed as {starter}" in out and "with its vision projector mmproj-F16.gguf" in out
    assert listed()[starter]["vision"] is True
    # Once more: nothing new to say, nothing copied again.
    code, out, _ = run("models", "import", str(starter_model_file()), "--mmproj", str(projector))
    assert code == 0 and "projector" not in out


def test_a_projector_of_another_model_is_one_line_and_nothing_is_imported(model_folder: Path) -> None:
    before = set(listed())
    projector = write_projector(model_folder / "mmproj-7b-F16.gguf", 4096)
    code, out, err = run(
        "models", "import", str(model_folder / "SmolVision.gguf"), "--mmproj", str(projector)
    )
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and "4096 wide" in err and "belongs to another model" in err, err
    assert set(listed()) == before


def test_files_shows_the_projector_counted_in_the_fit(hub: HubServer) -> None:
    hub.add_repo(REPO, [starter_file(), ServedFile.from_bytes("mmproj-F16.gguf", projector_bytes())])
    code, out, err = run("models", "files", REPO, "--json", "--endpoint", hub.url)
    assert code == 0, err
    [file] = json.loads(out)["files"]
    assert file["vision"] is True
    assert file["projector"]["filename"] == "mmproj-F16.gguf"
    assert file["projector"]["image_tokens"] == 256 and file["projector"]["projector_type"] == "gemma3"
    code, out, _ = run("models", "files", REPO, "--endpoint", hub.url)
    assert "+ vision projector mmproj-F16.gguf" in out and "about 256 tokens of context per image" in out


def _photo(path: Path) -> Path:
    from PIL import Image

    Image.effect_noise((64, 48), 64).convert("RGB").save(path, format="JPEG")
    return path


@pytest.mark.model
def test_a_local_vision_model_sees_the_image_and_a_text_model_names_the_one_that_can(
    model_folder: Path, tmp_path: Path
) -> None:
    # A real, loadable projector (random weights: what the model says about the picture is noise).
    write_tiny_projector(model_folder / "mmproj-F16.gguf")
    assert run("models", "import", str(model_folder / "SmolVision.gguf"))[0] == 0
    photo = _photo(tmp_path / "photo.jpg")
    code, out, err = run("chat", "--model", "SmolLM2-135M-Instruct-Q4_1", "--attach", str(photo), "What?")
    assert code == 3 and out == ""
    assert "text-only model (installed models that can see: SmolVision)" in err, err
    assert json.loads(run("conversations", "list", "--json")[1])["conversations"] == []

    code, out, err = run(
        "chat",
        "--model",
        "SmolVision",
        "--attach",
        str(photo),
        "--max-tokens",
        "6",
        "--temperature",
        "0",
        "What?",
    )
    assert code == 0 and out, err
    conversation_id = int(err.split("conversation ")[1].split()[0])
    prompt, reply = json.loads(run("conversations", "show", str(conversation_id), "--json")[1])["messages"]
    [attachment] = prompt["attachments"]
    assert (attachment["name"], attachment["kind"]) == ("photo.jpg", "image")
    assert reply["status"] == "complete" and reply["content"] == out.strip("\n")
