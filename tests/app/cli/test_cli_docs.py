"""Documents through the command line: `hearth chat --attach/--docs` and `hearth docs`, with the real starter
model and the real bundled embedding model."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from app.cli.main import main
from app.paths import resolve_home
from app.settings import Settings, save_settings
from tests.helpers.images import png_claiming

MODEL = "SmolLM2-135M-Instruct-Q4_1"
GREEDY = ("--temperature", "0", "--seed", "1", "--max-tokens", "8")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def show(conversation_id: int) -> list[dict[str, Any]]:
    code, out, _ = run("conversations", "show", str(conversation_id), "--json")
    assert code == 0
    messages: list[dict[str, Any]] = json.loads(out)["messages"]
    return messages


def stored_files() -> list[Path]:
    return sorted(p for p in resolve_home().attachments_dir.rglob("*") if p.is_file())


@pytest.mark.model
def test_an_attachment_that_fits_is_read_whole_and_kept_with_the_prompt(tmp_path: Path) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Trip\n\nThe train to Porto leaves at 07:15 from Santa Apolónia.\n", encoding="utf-8")
    code, _, err = run(
        "chat", "--model", MODEL, *GREEDY, "--attach", str(notes), "When does the train leave?"
    )
    assert code == 0, err
    conversation = int(err.split("conversation ")[1].split()[0])
    notes.unlink()  # the conversation keeps its own copy
    user, reply = show(conversation)
    (attachment,) = user["attachments"]
    assert attachment["name"] == "notes.md" and attachment["mode"] == "whole"
    assert attachment["mime_type"] == "text/markdown" and attachment["size"] > 0
    assert [p.name for p in stored_files()] == [attachment["sha256"]]
    assert reply["status"] == "complete" and "sources" not in reply
    assert user["content"] == "When does the train leave?"


@pytest.mark.parametrize(
    ("name", "content", "why"),
    [
        ("empty.txt", b"", r"empty\.txt is empty"),
        ("photo.txt", bytes(range(256)) * 64, r"photo\.txt"),
        ("missing.pdf", None, r"missing\.pdf does not exist"),
    ],
)
def test_a_bad_attachment_is_one_line_and_nothing_is_stored(
    tmp_path: Path, name: str, content: bytes | None, why: str
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    code, out, err = run("chat", "--model", MODEL, "--attach", str(path), "Summarise this.")
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and err.startswith("hearth: ")
    assert re.search(why, err), err
    code, out, _ = run("conversations", "list", "--json")
    assert json.loads(out)["conversations"] == []
    assert stored_files() == []


def _jpeg(size: tuple[int, int]) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.effect_noise(size, 64).convert("RGB").save(out, format="JPEG")
    return out.getvalue()


@pytest.mark.model
@pytest.mark.parametrize(
    ("content", "why"),
    [
        pytest.param(
            lambda: _jpeg((64, 48)),
            rf"{MODEL} can't see images \(photo\.jpg\): it is a text-only",
            id="photo",
        ),
        pytest.param(lambda: _jpeg((640, 480))[:3000], r"photo\.jpg is corrupt or truncated", id="truncated"),
        pytest.param(
            lambda: png_claiming(100_000, 100_000), r"photo\.jpg claims more than .* pixels", id="bomb"
        ),
    ],
)
def test_an_image_is_refused_for_a_text_only_model_before_anything_is_stored(
    tmp_path: Path, content: Any, why: str
) -> None:
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(content())
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nA document attached beside it.\n", encoding="utf-8")
    code, out, err = run(
        "chat", "--model", MODEL, "--attach", str(notes), "--attach", str(photo), "What is this?"
    )
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and re.search(why, err), err
    code, out, _ = run("conversations", "list", "--json")
    assert json.loads(out)["conversations"] == []
    assert stored_files() == []
    # A model that does not exist is named as that, not as blind.
    code, _, err = run("chat", "--model", "no-such-model", "--attach", str(photo), "What is this?")
    assert code == 3 and ("No installed model is named" in err or "pixels" in err or "truncated" in err), err


@pytest.mark.model
def test_a_long_attachment_is_searched_and_the_reply_lists_its_sources(tmp_path: Path) -> None:
    # A 1,024-token context: a document of ~3,000 tokens cannot go in whole.
    home = resolve_home().ensure()
    save_settings(home.settings_path, Settings(context_length=1024))
    filler = "The harbour master logs every ship that enters, with its cargo and its crew. " * 6
    paragraphs = [f"Section {n}. {filler}" for n in range(24)]
    paragraphs[17] = "Section 17. The spare key to the lighthouse is kept under the third blue flowerpot."
    report = tmp_path / "harbour.txt"
    report.write_text("\n\n".join(paragraphs), encoding="utf-8")
    code, _, err = run(
        "chat", "--model", MODEL, *GREEDY, "--attach", str(report), "Where is the lighthouse key?"
    )
    assert code == 0, err
    assert "note: harbour.txt is too long for the model's context" in err
    conversation = int(err.split("conversation ")[1].split()[0])
    user, reply = show(conversation)
    assert user["attachments"][0]["mode"] == "retrieved"
    sources = reply["sources"]
    assert isinstance(sources, list) and sources
    assert "third blue flowerpot" in sources[0]["text"]
    assert sources[0]["name"] == "harbour.txt" and sources[0]["sha256"] == user["attachments"][0]["sha256"]


@pytest.mark.model
def test_a_collection_is_indexed_searched_refreshed_and_removed(tmp_path: Path) -> None:
    folder = tmp_path / "handbook"
    (folder / "zh").mkdir(parents=True)
    (folder / "leave.md").write_text(
        "# Leave\n\nEvery employee gets twenty-five days of paid holiday a year.\n", encoding="utf-8"
    )
    (folder / "zh" / "报销.txt").write_text(
        "出差的火车票和酒店费用可以在一个月内报销，需要附上发票。\n", encoding="utf-8"
    )
    (folder / "broken.pdf").write_bytes(b"%PDF-1.7\n1 0 obj\n<<")
    code, _, err = run("docs", "add", "handbook", str(folder))
    assert code == 0, err
    assert "skipped" in err and "broken.pdf" in err

    code, out, _ = run("docs", "list", "--json")
    (summary,) = json.loads(out)["collections"]
    assert (
        summary["name"] == "handbook" and summary["files"]["indexed"] == 2 and summary["files"]["failed"] == 1
    )

    code, out, _ = run("docs", "show", "handbook", "--json")
    statuses = {Path(f["path"]).name: (f["status"], f["error"]) for f in json.loads(out)["files"]}
    assert statuses["leave.md"] == ("indexed", None)
    assert statuses["broken.pdf"][0] == "failed" and "broken.pdf" in statuses["broken.pdf"][1]

    code, out, _ = run("docs", "search", "handbook", "how many vacation days do I get", "--json")
    results = json.loads(out)["results"]
    assert Path(results[0]["path"]).name == "leave.md" and set(results[0]) == {
        "path",
        "text",
        "location",
        "score",
    }
    # A Chinese question, worded differently from the file (发票 / 报销 against "reimburse travel costs").
    code, out, _ = run("docs", "search", "handbook", "火车票怎么报销", "--json")
    assert Path(json.loads(out)["results"][0]["path"]).name == "报销.txt"

    (folder / "leave.md").write_text(
        "# Leave\n\nEvery employee gets thirty days of paid holiday.\n", encoding="utf-8"
    )
    code, _, err = run("docs", "refresh", "handbook")
    assert code == 0 and "1 indexed" in err

    code, _, _ = run("docs", "remove", "handbook", str(folder))
    code, out, _ = run("docs", "show", "handbook", "--json")
    assert json.loads(out)["files"] == []
    code, _, _ = run("docs", "remove", "handbook")
    code, out, _ = run("docs", "list", "--json")
    assert json.loads(out)["collections"] == []
    code, _, err = run("docs", "search", "handbook", "anything")
    assert code == 3 and "handbook" in err
