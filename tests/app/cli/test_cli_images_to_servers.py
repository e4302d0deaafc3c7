"""`hearth chat --attach photo.jpg` with a server's model: the picture is stored as the user attached it, sent
prepared (upright, at most 2,048 px, as a data URL `image_url` part after the text, the shape vLLM and
llama.cpp's server take), sent again with a follow-up, listed in `conversations show --json`, and refused
before anything is stored when it is broken. A real local HTTP server records what was sent."""

from __future__ import annotations

import base64
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from app.cli.main import main
from app.errors import HearthError
from app.images.pdf_pages import MAX_PAGES, page_images
from app.paths import resolve_home
from app.settings import Settings, save_settings
from tests.helpers.document_files import pdf_bytes
from tests.helpers.images import png_claiming
from tests.helpers.openai_peer import FaultServer


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def sent_messages(server: FaultServer) -> list[dict[str, Any]]:
    [request] = [r for r in server.requests if r.path.endswith("/chat/completions")][-1:]
    assert request.body is not None
    messages: list[dict[str, Any]] = request.body["messages"]
    return messages


def decoded(part: dict[str, Any]) -> Image.Image:
    assert part["type"] == "image_url"
    url: str = part["image_url"]["url"]
    header, _, payload = url.partition(",")
    assert header in ("data:image/jpeg;base64", "data:image/png;base64"), header
    return Image.open(io.BytesIO(base64.b64decode(payload)))


def photo(path: Path, size: tuple[int, int], *, rotated: bool = False) -> Path:
    image = Image.effect_noise(size, 64).convert("RGB")
    exif = Image.Exif()
    if rotated:
        exif[0x0112] = 6  # the camera was turned: shown rotated 90° clockwise
    image.save(path, format="JPEG", exif=exif)
    return path


@pytest.fixture
def lab(fault_server: FaultServer) -> FaultServer:
    assert run("servers", "add", "lab", fault_server.url)[0] == 0
    return fault_server


def test_an_image_goes_to_the_server_prepared_and_is_stored_as_attached(
    lab: FaultServer, tmp_path: Path
) -> None:
    # 3,000 × 1,000, turned by the camera: the model sees it upright and at most 2,048 px long.
    original = photo(tmp_path / "whiteboard.jpg", (3000, 1000), rotated=True)
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nThe meeting is on Tuesday.\n", encoding="utf-8")
    code, out, err = run(
        "chat", "--model", "lab/echo", "--attach", str(notes), "--attach", str(original), "What is on it?"
    )
    assert code == 0, err

    [user] = sent_messages(lab)
    text, image = user["content"]
    assert text["type"] == "text" and text["text"].endswith("What is on it?") and "Tuesday" in text["text"]
    seen = decoded(image)
    assert seen.size == (683, 2048) and seen.mode == "RGB"

    conversation_id = int(err.split("conversation ")[1].split()[0])
    code, out, _ = run("conversations", "show", str(conversation_id), "--json")
    attachments = json.loads(out)["messages"][0]["attachments"]
    by_name = {a["name"]: a for a in attachments}
    assert by_name["whiteboard.jpg"]["kind"] == "image"
    assert by_name["whiteboard.jpg"]["mime_type"] == "image/jpeg"
    digest = hashlib.sha256(original.read_bytes()).hexdigest()
    assert by_name["whiteboard.jpg"]["sha256"] == digest
    # The file kept is the one attached, byte for byte, not the prepared copy.
    stored = resolve_home().attachments_dir / digest[:2] / digest
    assert stored.read_bytes() == original.read_bytes()

    # A follow-up is about the same picture: it goes again, with the earlier prompt.
    code, _, err = run("chat", "--model", "lab/echo", "--conversation", str(conversation_id), "And the date?")
    assert code == 0, err
    first, reply, second = sent_messages(lab)
    assert [m["role"] for m in (first, reply, second)] == ["user", "assistant", "user"]
    assert decoded(first["content"][1]).size == (683, 2048)
    assert second["content"] == "And the date?"


def test_a_text_only_prompt_is_sent_as_a_plain_string(lab: FaultServer) -> None:
    assert run("chat", "--model", "lab/echo", "Hello")[0] == 0
    assert sent_messages(lab) == [{"role": "user", "content": "Hello"}]


def test_a_broken_image_for_a_server_is_one_line_and_nothing_is_stored_or_sent(
    lab: FaultServer, tmp_path: Path
) -> None:
    bomb = tmp_path / "tiny.png"
    bomb.write_bytes(png_claiming(100_000, 100_000))
    code, out, err = run("chat", "--model", "lab/echo", "--attach", str(bomb), "What is this?")
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and "claims more than" in err, err
    assert not [r for r in lab.requests if r.path.endswith("/chat/completions")]
    assert json.loads(run("conversations", "list", "--json")[1])["conversations"] == []
    assert not any(p.is_file() for p in resolve_home().attachments_dir.rglob("*"))


def test_an_image_travels_with_its_conversation_through_export_and_import(
    lab: FaultServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = photo(tmp_path / "harbour.jpg", (800, 600))
    code, _, err = run("chat", "--model", "lab/echo", "--attach", str(original), "Which harbour is this?")
    assert code == 0, err
    conversation_id = err.split("conversation ")[1].split()[0]
    exported = tmp_path / "chat.json"
    assert (
        run("conversations", "export", conversation_id, "--format", "json", "--output", str(exported))[0] == 0
    )

    # Another Hearth home: the picture arrives with the conversation, byte for byte.
    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "other-home"))
    code, _, err = run("conversations", "import", str(exported), "--json")
    assert code == 0, err
    [imported] = json.loads(run("conversations", "list", "--json")[1])["conversations"]
    [prompt, _reply] = json.loads(run("conversations", "show", str(imported["id"]), "--json")[1])["messages"]
    [attachment] = prompt["attachments"]
    digest = hashlib.sha256(original.read_bytes()).hexdigest()
    assert (attachment["name"], attachment["kind"], attachment["sha256"]) == ("harbour.jpg", "image", digest)
    stored = resolve_home().attachments_dir / digest[:2] / digest
    assert stored.read_bytes() == original.read_bytes()


def test_pdf_pages_go_as_pictures_when_asked(lab: FaultServer, tmp_path: Path) -> None:
    report = tmp_path / "report.pdf"
    report.write_bytes(pdf_bytes([["Harbour lights", "Tide tables"], ["Storms"], ["Ferries"]]))
    code, _, err = run("chat", "--model", "lab/echo", "--attach", str(report), "Summarise it.")
    assert code == 0, err
    [plain] = sent_messages(lab)
    assert isinstance(plain["content"], str) and "Tide tables" in plain["content"]

    code, _, err = run(
        "chat", "--model", "lab/echo", "--attach", str(report), "--pdf-pages-as-images", "Summarise it."
    )
    assert code == 0, err
    [user] = sent_messages(lab)
    text, *pages = user["content"]
    assert text["type"] == "text" and "Tide tables" in text["text"]  # the text layer still goes in
    assert len(pages) == 3
    for page in pages:
        picture = decoded(page)
        assert max(picture.size) == 1024 and picture.mode == "RGB"


def test_pages_of_a_pdf_are_rendered_within_bounds(tmp_path: Path) -> None:
    pages = page_images(pdf_bytes([[f"Page {n}"] for n in range(12)]), "long.pdf")
    assert len(pages) == MAX_PAGES
    first = Image.open(io.BytesIO(pages[0].data))
    assert pages[0].mime_type == "image/png" and max(first.size) == 1024
    # White paper with black text: both are there.
    darkest, lightest = first.convert("L").getextrema()
    assert isinstance(darkest, int) and darkest < 100 and lightest == 255
    with pytest.raises(HearthError, match=r"broken\.pdf could not be rendered"):
        page_images(b"%PDF-1.7 not really", "broken.pdf")


def test_the_largest_side_a_model_is_given_is_a_setting(lab: FaultServer, tmp_path: Path) -> None:
    save_settings(resolve_home().settings_path, Settings(image_max_side=512))
    original = photo(tmp_path / "wide.jpg", (3000, 1000))
    assert run("chat", "--model", "lab/echo", "--attach", str(original), "What is it?")[0] == 0
    [user] = sent_messages(lab)
    assert decoded(user["content"][1]).size == (512, 171)
    # A value out of range is its default, as for every setting (and the log says so).
    save_settings(resolve_home().settings_path, Settings(image_max_side=10))
    assert run("chat", "--model", "lab/echo", "--attach", str(original), "What is it?")[0] == 0
    [user] = sent_messages(lab)
    assert decoded(user["content"][1]).size == (2048, 683)
