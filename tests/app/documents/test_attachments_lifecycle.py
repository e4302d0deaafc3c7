"""An attached file lives as long as a message holds it: stored once, kept across branches, deleted (bytes,
text and passages) with the last conversation that holds it; and while it waits to be sent, kept whatever
else is deleted meanwhile."""

from __future__ import annotations

import base64
import io
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from filelock import FileLock

from app.cli.main import main as cli_main
from app.conversations.store import PartInput, ReplyProvenance
from app.core import Core
from app.documents.library import Attachment, DocumentLibrary
from app.errors import HearthError
from app.paths import resolve_home

REPLY = ReplyProvenance("m", "b" * 64, {}, None)


@pytest.fixture
def core() -> Iterator[Core]:
    opened = Core.open(resolve_home())
    yield opened
    opened.close()


def attachment_part(a: Attachment) -> PartInput:
    return PartInput("attachment", a.name, a.sha256, a.mime_type, {"kind": a.kind, "mode": "whole"})


def rows(core: Core, table: str) -> int:
    with closing(sqlite3.connect(core.paths.db_path)) as conn:
        count: int = conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        return count


def stored(core: Core) -> list[Path]:
    return sorted(p for p in core.paths.attachments_dir.rglob("*") if p.is_file())


def send(core: Core, documents: DocumentLibrary, path: Path) -> int:
    attached = documents.attach(path)
    turn = core.store.begin_turn(
        None,
        prompt="Summarise",
        after=None,
        system_prompt=None,
        reply=REPLY,
        prompt_parts=[attachment_part(attached)],
    )
    return turn.conversation_id


def test_the_last_conversation_holding_a_file_takes_it_along(core: Core, tmp_path: Path) -> None:
    report = tmp_path / "report.md"
    report.write_text("# Q3\n\nRevenue rose 12% on the year.\n", encoding="utf-8")
    documents = core.documents()
    first = send(core, documents, report)
    second = send(core, documents, report)
    assert len(stored(core)) == 1 and rows(core, "files") == 1 and rows(core, "document_texts") == 1
    (user, _reply) = core.store.list_messages(first)
    assert [p.name for p in user.attachments] == ["report.md"] and user.attachments[
        0
    ].size_bytes == report.stat().st_size

    core.store.delete_conversation(first)
    assert len(stored(core)) == 1  # the second conversation still holds it
    core.store.delete_conversation(second)
    assert stored(core) == [] and rows(core, "files") == 0 and rows(core, "document_texts") == 0
    with closing(sqlite3.connect(core.paths.db_path)) as conn:
        assert conn.execute("SELECT count(*) FROM message_parts").fetchone()[0] == 0


def test_a_file_attached_but_never_sent_is_gone_after_a_restart(tmp_path: Path) -> None:
    report = tmp_path / "draft.txt"
    report.write_text("An unsent attachment.\n", encoding="utf-8")
    opened = Core.open(resolve_home())
    try:
        opened.documents().attach(report)
        assert len(stored(opened)) == 1
    finally:
        opened.close()
    reopened = Core.open(resolve_home())
    try:
        assert stored(reopened) == [] and rows(reopened, "files") == 0
    finally:
        reopened.close()


def test_an_export_carries_its_attachments_to_another_home(
    core: Core, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "minutes.md"
    report.write_text("# Minutes\n\n会议决定下周三发布新版本。\n", encoding="utf-8")
    documents = core.documents()
    conversation = send(core, documents, report)
    exported = core.store.export_json(conversation)
    assert exported["version"] == 3 and list(exported["files"]) == [documents.attach(report).sha256]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(exported), encoding="utf-8")

    monkeypatch.setenv("HEARTH_HOME", str(tmp_path / "elsewhere"))
    other = Core.open(resolve_home())
    try:
        (imported,) = other.store.import_file(path).conversation_ids
        user, _reply = other.store.list_messages(imported)
        (part,) = user.attachments
        assert (part.name, part.meta["mode"], part.size_bytes) == (
            "minutes.md",
            "whole",
            report.stat().st_size,
        )
        # Its text is read from the imported file the first time a prompt needs it.
        text = other.documents().attached_text(part.name or "", part.file_sha256 or "").text
        assert "会议决定下周三发布新版本" in text
    finally:
        other.close()


def test_an_export_whose_file_was_tampered_with_imports_nothing(core: Core, tmp_path: Path) -> None:
    report = tmp_path / "plan.txt"
    report.write_text("The plan.\n", encoding="utf-8")
    conversation = send(core, core.documents(), report)
    exported = core.store.export_json(conversation)
    (sha,) = exported["files"]
    exported["files"][sha]["data"] = base64.b64encode(b"Another plan.\n").decode()
    path = tmp_path / "tampered.json"
    path.write_text(json.dumps(exported), encoding="utf-8")
    before = core.store.list_conversations()
    with pytest.raises(HearthError, match=r"does not match its SHA-256.*Nothing was imported"):
        core.store.import_file(path)
    assert core.store.list_conversations() == before


def test_a_file_waiting_to_be_sent_survives_deleting_another_conversation(core: Core, tmp_path: Path) -> None:
    documents = core.documents()
    shared = tmp_path / "budget.csv"
    shared.write_text("item,cost\nlamp oil,12\n", encoding="utf-8")
    older = send(core, documents, shared)
    unrelated = send(core, documents, write(tmp_path / "old.txt", "An old note.\n"))
    # In the composer, not sent yet: one file new to the store, one whose bytes the older chat holds too.
    waiting = documents.attach(write(tmp_path / "draft.md", "# Draft\n\nThe keeper is called Maren.\n"))
    again = documents.attach(shared)

    core.store.delete_conversation(unrelated)
    core.store.delete_conversation(older)
    assert {p.name for p in stored(core)} == {waiting.sha256, again.sha256}
    assert rows(core, "files") == rows(core, "document_texts") == 2

    turn = core.store.begin_turn(
        None,
        prompt="Who is the keeper?",
        after=None,
        system_prompt=None,
        reply=REPLY,
        prompt_parts=[attachment_part(waiting), attachment_part(again)],
    )
    assert "Maren" in documents.attached_text(waiting.name, waiting.sha256).text
    # Sent, the files are the message's: they go with its conversation, as any other.
    core.store.delete_conversation(turn.conversation_id)
    assert stored(core) == [] and rows(core, "files") == 0


def test_a_file_taken_off_the_message_goes_with_the_next_release(core: Core, tmp_path: Path) -> None:
    documents = core.documents()
    dropped = documents.attach(write(tmp_path / "wrong.txt", "Not this one.\n"))
    kept = documents.attach(write(tmp_path / "right.txt", "This one.\n"))
    # What the chip's × does.
    core.files.unpin([dropped.sha256])
    core.store.delete_conversation(core.store.create_conversation("Scratch").id)
    assert [p.name for p in stored(core)] == [kept.sha256]


def test_a_command_run_while_the_window_is_open_leaves_the_files_waiting_in_it(tmp_path: Path) -> None:
    paths = resolve_home()
    lock = FileLock(paths.instance_lock)
    lock.acquire()
    window = Core.open(paths, window=True)
    try:
        waiting = window.documents().attach(write(tmp_path / "draft.txt", "Still being written.\n"))
        # Every command opens the core, whose start releases what nothing holds: not while a window runs.
        assert cli_main(["conversations", "list"], out=io.StringIO(), err=io.StringIO()) == 0
        assert [p.name for p in stored(window)] == [waiting.sha256]
    finally:
        window.close()
        lock.release()
    # The window is gone and the file was never sent: the next start deletes it, as always.
    assert cli_main(["conversations", "list"], out=io.StringIO(), err=io.StringIO()) == 0
    assert not (paths.attachments_dir / waiting.sha256[:2] / waiting.sha256).exists()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path
