"""`hearth backup` and `hearth restore` against real files: verified copies of the database and its attached
files, refusals, a full disk, nothing lost."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import io
import os
import shutil
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from filelock import FileLock
from pytestqt.qtbot import QtBot

import app.storage.backup as backup_module
from app.attachments import files as attached_files
from app.attachments.files import FileStore
from app.cli.main import main as cli_main
from app.conversations.store import ConversationStore, PartInput, ReplyProvenance
from app.core import Core
from app.errors import HearthError
from app.fsutil import make_private_dir
from app.paths import HearthPaths
from app.storage.backup import create_backup, database_of, list_backups, restore_backup
from app.storage.db import Database, backup_name, copy_verified, known_revisions
from tests.helpers.document_files import pdf_bytes, write
from tests.helpers.ui_fixtures import GuiSessions, click
from tests.reliability.conftest import RecordFault, bytes_missing, messages_missing

CATEGORY = "Backups"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def paths(hermetic_home: Path) -> HearthPaths:
    return HearthPaths(hermetic_home).ensure()


def seed(paths: HearthPaths, texts: list[str]) -> int:
    db = Database.open(paths.db_path, paths.backups_dir)
    try:
        store = ConversationStore(db)
        conversation = store.create_conversation("Backed up")
        for i, text in enumerate(texts):
            store.add_message(conversation.id, "user" if i % 2 == 0 else "assistant", text)
        return conversation.id
    finally:
        db.dispose()


def contents(paths: HearthPaths, conversation_id: int) -> list[str]:
    db = Database.open(paths.db_path, paths.backups_dir)
    try:
        return [m.content for m in ConversationStore(db).list_messages(conversation_id)]
    finally:
        db.dispose()


def texts_in(path: Path) -> list[str]:
    """Every message's text in a database file, read-only."""
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
        return [row[0] for row in conn.execute("SELECT content FROM messages ORDER BY id")]


def integrity(path: Path) -> str:
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def damage(path: Path) -> None:
    """Overwrite the b-tree header of the messages table's root page (a really damaged file)."""
    with closing(sqlite3.connect(path)) as conn:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'messages'").fetchone()[0]
        conn.execute("PRAGMA journal_mode=DELETE")
    data = bytearray(path.read_bytes())
    offset = (root - 1) * page_size
    data[offset : offset + 64] = b"\xee" * 64
    path.write_bytes(bytes(data))


def test_backup_and_restore_round_trip_keeps_the_replaced_database(
    paths: HearthPaths, fault: RecordFault
) -> None:
    texts = [f"message {i} " + "x" * (i * 300) for i in range(40)]
    conversation_id = seed(paths, texts)

    code, out, err = run("backup")
    assert (code, err) == (0, "")
    backup = Path(out.strip())
    assert backup.parent == paths.backups_dir and integrity(database_of(backup)) == "ok"
    assert [b.path for b in list_backups(paths)] == [backup]

    db = Database.open(paths.db_path, paths.backups_dir)
    ConversationStore(db).add_message(conversation_id, "user", "written after the backup")
    db.dispose()
    before = texts_in(paths.db_path)

    code, out, err = run("restore", str(backup))
    assert (code, err) == (0, ""), err
    # The database the restore replaced was itself backed up first: nothing is lost either way.
    replaced = [b.database for b in list_backups(paths) if "pre-restore" in b.path.name]
    missing = messages_missing(before, [t for p in replaced for t in texts_in(p)])
    fault(
        CATEGORY,
        "restore over a newer database",
        trials=1,
        outcome="backup restored, replaced DB kept",
        lost={"messages": missing},
    )
    assert missing == 0
    assert contents(paths, conversation_id) == texts
    assert len(replaced) == 1 and str(replaced[0].parent) in out
    assert integrity(replaced[0]) == "ok"
    with closing(sqlite3.connect(replaced[0])) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == len(texts) + 1


def test_backup_to_a_chosen_folder_or_a_new_one(paths: HearthPaths, tmp_path: Path) -> None:
    seed(paths, ["one", "two"])
    chosen = tmp_path / "mine"
    assert run("backup", str(chosen))[:2] == (0, f"{chosen}\n")
    assert integrity(chosen / "hearth.sqlite3") == "ok"
    code, out, _ = run("backup", str(tmp_path))
    assert code == 0 and Path(out.strip()).parent == tmp_path
    code, _, err = run("backup", str(chosen))
    assert code == 3 and "already exists" in err and err.count("\n") == 1
    # A backup is a folder now: a name that asks for a lone database file is refused, not half obeyed.
    code, _, err = run("backup", str(tmp_path / "mine.sqlite3"))
    assert code == 3 and "is a folder" in err and err.count("\n") == 1
    assert not (tmp_path / "mine.sqlite3").exists()


def test_backup_while_a_reply_is_being_written_is_consistent(paths: HearthPaths, fault: RecordFault) -> None:
    """The online backup API copies a consistent snapshot while another connection keeps committing."""
    conversation_id = seed(paths, ["start"])
    db = Database.open(paths.db_path, paths.backups_dir)
    store = ConversationStore(db)
    stop = threading.Event()
    committed = ["start"]

    def write() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            text = f"concurrent {n} " + "y" * 2000
            store.add_message(conversation_id, "user", text)
            committed.append(text)

    writer = threading.Thread(target=write)
    writer.start()
    # Each copy with the messages committed before it began: all of them must be in it.
    copies: list[tuple[Path, list[str]]] = []
    try:
        for _ in range(10):
            before = list(committed)
            copies.append((create_backup(paths).database, before))
    finally:
        stop.set()
        writer.join()
        db.dispose()
    missing = sum(messages_missing(before, texts_in(copy)) for copy, before in copies)
    fault(
        CATEGORY,
        "backup during continuous writes",
        trials=len(copies),
        outcome="consistent, verified copy",
        lost={"messages": missing},
    )
    assert missing == 0
    for copy, _ in copies:
        assert integrity(copy) == "ok"
        rows = texts_in(copy)
        # A prefix of what was written: whole messages only, none torn.
        assert rows == committed[: len(rows)]


def make_bad_backups(paths: HearthPaths, tmp_path: Path) -> dict[str, Path]:
    garbage = tmp_path / "garbage.sqlite3"
    garbage.write_bytes(os.urandom(8192))
    damaged = create_backup(paths, tmp_path / "damaged").path
    damage(database_of(damaged))
    foreign = tmp_path / "foreign.sqlite3"
    with closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE notes (x)")
    newer = create_backup(paths, tmp_path / "newer").path
    with closing(sqlite3.connect(database_of(newer))) as conn, conn:
        conn.execute("UPDATE alembic_version SET version_num = '9999'")
    return {
        "not a database": garbage,
        "a damaged page": damaged,
        "not Hearth's": foreign,
        "a newer schema": newer,
        "missing": tmp_path / "missing.sqlite3",
    }


def test_bad_backups_are_refused_with_exit_3_and_change_nothing(
    paths: HearthPaths, tmp_path: Path, fault: RecordFault
) -> None:
    conversation_id = seed(paths, ["keep", "me"])
    before = digest(paths.db_path)
    expected = {
        "not a database": "not a readable SQLite database",
        "a damaged page": "damaged",
        "not Hearth's": "not a Hearth conversation database",
        "a newer schema": "newer version of Hearth",
        "missing": "does not exist",
    }
    bad = make_bad_backups(paths, tmp_path)
    listed = list_backups(paths)
    answers = {kind: run("restore", str(path)) for kind, path in bad.items()}
    missing = messages_missing(["keep", "me"], contents(paths, conversation_id))
    fault(
        CATEGORY,
        "restore of a bad backup (5 kinds)",
        trials=len(bad),
        outcome="exit 3, database unchanged",
        lost={"messages": missing},
    )
    assert missing == 0
    for kind, (code, out, err) in answers.items():
        assert (code, out) == (3, ""), kind
        assert expected[kind] in err and err.count("\n") == 1, (kind, err)
    assert digest(paths.db_path) == before
    assert list_backups(paths) == listed
    assert contents(paths, conversation_id) == ["keep", "me"]


def test_restore_refuses_while_the_window_holds_the_lock(paths: HearthPaths, fault: RecordFault) -> None:
    conversation_id = seed(paths, ["before"])
    backup = create_backup(paths).path
    db = Database.open(paths.db_path, paths.backups_dir)
    ConversationStore(db).add_message(conversation_id, "user", "after")
    db.dispose()
    window_lock = FileLock(paths.instance_lock)
    with window_lock:
        code, _, err = run("restore", str(backup))
    missing = messages_missing(["before", "after"], contents(paths, conversation_id))
    fault(
        CATEGORY,
        "restore while the window runs",
        trials=1,
        outcome="refused, exit 3",
        lost={"messages": missing},
    )
    assert missing == 0
    assert code == 3 and "Hearth is running" in err
    assert contents(paths, conversation_id) == ["before", "after"]
    assert run("restore", str(backup))[0] == 0
    assert contents(paths, conversation_id) == ["before"]


def test_restore_over_a_damaged_database_moves_it_aside(paths: HearthPaths, fault: RecordFault) -> None:
    conversation_id = seed(paths, ["saved", "in the backup"])
    backup = create_backup(paths).path
    damage(paths.db_path)
    damaged_bytes = paths.db_path.read_bytes()
    with pytest.raises(HearthError, match="damaged"):
        create_backup(paths)
    result = restore_backup(paths, backup)
    missing = messages_missing(["saved", "in the backup"], contents(paths, conversation_id))
    # Never deleted: the damaged file is kept whole for whatever can still be salvaged from it.
    kept = database_of(result.previous).read_bytes() if result.previous is not None else b""
    gone = bytes_missing(damaged_bytes, kept)
    fault(
        CATEGORY,
        "restore over a damaged database",
        trials=1,
        outcome="restored; damaged file kept",
        lost={"messages": missing, "bytes": gone},
    )
    assert missing == 0 and gone == 0
    assert result.previous_damaged and result.previous is not None
    assert database_of(result.previous).read_bytes() == damaged_bytes
    assert contents(paths, conversation_id) == ["saved", "in the backup"]


# -- attached files --------------------------------------------------------------------------------------

REPLY = ReplyProvenance("m", "b" * 64, {}, None)


def converse_with(paths: HearthPaths, attached: Path) -> tuple[int, str]:
    """A conversation whose prompt holds `attached`, stored as the window stores one; returns its id and the
    file's SHA-256."""
    core = Core.open(paths)
    try:
        stored = core.documents().attach(attached)
        turn = core.store.begin_turn(
            None,
            prompt=f"What does {attached.name} say?",
            after=None,
            system_prompt=None,
            reply=REPLY,
            prompt_parts=[
                PartInput(
                    "attachment",
                    stored.name,
                    stored.sha256,
                    stored.mime_type,
                    {"kind": stored.kind, "mode": "whole"},
                )
            ],
        )
        core.store.finish_message(turn.reply.id, content="It says what it says.", status="complete")
        return turn.conversation_id, stored.sha256
    finally:
        core.close()


def delete_conversation(paths: HearthPaths, conversation_id: int) -> None:
    core = Core.open(paths)
    try:
        core.store.delete_conversation(conversation_id)
    finally:
        core.close()


def stored_files(paths: HearthPaths) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in FileStore(paths.attachments_dir).stored()}


def head_revision() -> str:
    return known_revisions()[0]


def test_a_backup_carries_the_attached_files_and_a_restore_puts_them_back(
    paths: HearthPaths, tmp_path: Path, fault: RecordFault
) -> None:
    report = write(tmp_path / "harbour.pdf", pdf_bytes([["Harbour lights"], ["Tide tables for March"]]))
    conversation, sha = converse_with(paths, report)

    code, out, err = run("backup")
    assert (code, err) == (0, "")
    backup = Path(out.strip())
    # A copy, not a link: deleting the conversation overwrites the store's bytes in place.
    carried = backup / "attachments" / sha[:2] / sha
    assert carried.read_bytes() == report.read_bytes() and carried.stat().st_nlink == 1
    assert run("backup", "--verify", str(backup)) == (
        0,
        f"{backup}: intact, schema {head_revision()}, 1 attached file(s) verified\n",
        "",
    )
    (listed,) = list_backups(paths)
    assert (listed.path, listed.files) == (backup, 1)

    delete_conversation(paths, conversation)
    assert stored_files(paths) == {} and carried.read_bytes() == report.read_bytes()

    code, out, err = run("restore", str(backup))
    assert (code, err) == (0, ""), err
    assert "Put back 1 attached file(s)" in out
    # Opened as after a restart: the restored database holds the file, so the start's release keeps it.
    core = Core.open(paths)
    try:
        (prompt, _reply) = core.store.list_messages(conversation)
        (part,) = prompt.attachments
        exported = base64.b64decode(core.store.export_json(conversation)["files"][sha]["data"])
        text = core.documents().attached_text(part.name or "", sha).text
    finally:
        core.close()
    lost = bytes_missing(report.read_bytes(), exported)
    fault(
        CATEGORY,
        "restore after the attached file was deleted",
        trials=1,
        outcome="file put back, verified; exported and read again",
        lost={"bytes": lost},
    )
    assert lost == 0 and exported == report.read_bytes()
    assert (part.name, part.file_sha256) == ("harbour.pdf", sha)
    assert "Tide tables for March" in text


def test_a_backup_missing_a_file_or_holding_a_changed_one_is_refused_and_nothing_is_replaced(
    paths: HearthPaths, tmp_path: Path, fault: RecordFault
) -> None:
    minutes = write(tmp_path / "minutes.md", "# Minutes\n\n会议决定下周三发布新版本。\n".encode())
    _conversation, sha = converse_with(paths, minutes)
    backup = create_backup(paths).path
    missing = Path(shutil.copytree(backup, tmp_path / "missing-file"))
    (missing / "attachments" / sha[:2] / sha).unlink()
    changed = Path(shutil.copytree(backup, tmp_path / "changed-file"))
    tampered = changed / "attachments" / sha[:2] / sha
    tampered.write_bytes(tampered.read_bytes().replace("周三".encode(), "周四".encode()))
    # What a restore would replace: a second conversation, with a file of its own.
    converse_with(paths, write(tmp_path / "plan.txt", b"The plan.\n"))
    texts_before, db_before, files_before = (
        texts_in(paths.db_path),
        digest(paths.db_path),
        stored_files(paths),
    )
    listed = list_backups(paths)

    expected = {
        missing: "is incomplete: the attached file minutes.md",
        changed: "is damaged: the attached file",
    }
    restores = {bad: run("restore", str(bad)) for bad in expected}
    verifies = {bad: run("backup", "--verify", str(bad)) for bad in expected}
    gone = messages_missing(texts_before, texts_in(paths.db_path))
    fault(
        CATEGORY,
        "restore of a backup with an attached file missing or changed",
        trials=len(restores),
        outcome="exit 3 naming the file, nothing replaced",
        lost={"messages": gone},
    )
    assert gone == 0
    for bad, (code, out, err) in restores.items():
        assert (code, out) == (3, ""), err
        assert expected[bad] in err and sha[:12] in err and "Nothing was restored" in err, err
        assert err.count("\n") == 1
        code, out, err = verifies[bad]
        assert (code, out) == (3, "") and expected[bad] in err and err.count("\n") == 1
    assert "does not match its SHA-256" in restores[changed][2]
    assert digest(paths.db_path) == db_before and stored_files(paths) == files_before
    assert list_backups(paths) == listed


def test_undoing_a_restore_brings_back_the_files_the_start_released(
    paths: HearthPaths, tmp_path: Path
) -> None:
    """The database a restore replaces is backed up with its files: the next start releases the files the
    restored database does not hold, and restoring that backup brings them back."""
    first, _ = converse_with(paths, write(tmp_path / "first.txt", b"In the backup.\n"))
    backup = create_backup(paths).path
    later = write(tmp_path / "later.txt", b"Attached after the backup.\n")
    second, later_sha = converse_with(paths, later)

    result = restore_backup(paths, backup)
    assert result.previous is not None and not result.previous_damaged
    Core.open(paths).close()
    assert later_sha not in stored_files(paths)

    undone = restore_backup(paths, result.previous)
    assert undone.files_put_back == 1 and undone.files_missing == ()
    assert stored_files(paths)[later_sha] == later.read_bytes()
    assert contents(paths, second)[0] == "What does later.txt say?"
    assert contents(paths, first)[0] == "What does first.txt say?"


def test_an_older_database_only_backup_still_lists_verifies_and_restores(
    paths: HearthPaths, tmp_path: Path, fault: RecordFault
) -> None:
    kept, kept_sha = converse_with(paths, write(tmp_path / "kept.txt", b"Still in the store.\n"))
    gone, gone_sha = converse_with(paths, write(tmp_path / "gone.txt", b"Deleted after the backup.\n"))
    # As an earlier Hearth wrote backups (and Hearth still does before a migration): the database alone.
    old = paths.backups_dir / backup_name("manual")
    make_private_dir(paths.backups_dir)
    assert copy_verified(paths.db_path, old) == "ok"
    delete_conversation(paths, gone)
    expected = {c: contents(paths, c) for c in (kept,)} | {gone: texts_in(old)[-2:]}

    (listed,) = list_backups(paths)
    assert (listed.path, listed.database, listed.files) == (old, old, None)
    assert run("backup", "--list")[1].rstrip().endswith(f"database only  {old}")
    assert run("backup", "--verify", str(old)) == (
        0,
        f"{old}: intact, schema {head_revision()}, database only\n",
        "",
    )
    code, out, err = run("restore", str(old))
    restored = {c: contents(paths, c) for c in expected}
    missing = sum(messages_missing(expected[c], restored[c]) for c in expected)
    fault(
        CATEGORY,
        "restore of an older backup that holds no files",
        trials=1,
        outcome="restored; the file deleted since is named",
        lost={"messages": missing},
    )
    assert missing == 0
    assert code == 0 and f"Restored {paths.db_path} from {old}" in out
    # One line naming what the store no longer has; the rest of the conversation is back.
    assert "gone.txt" in err and gone_sha[:12] in err and err.count("\n") == 1
    assert set(stored_files(paths)) == {kept_sha}


@pytest.mark.gui
@pytest.mark.parametrize("chosen", ["with its files", "an older one of the database only"])
def test_the_window_restores_a_backup_over_a_damaged_database(
    qtbot: QtBot, gui: GuiSessions, paths: HearthPaths, tmp_path: Path, fault: RecordFault, chosen: str
) -> None:
    report = write(tmp_path / "rota.md", b"# Rota\n\nMaren keeps the lamp on Tuesdays.\n")
    conversation, sha = converse_with(paths, report)
    older = paths.backups_dir / backup_name("manual")
    make_private_dir(paths.backups_dir)
    copy_verified(paths.db_path, older)
    backup = create_backup(paths).path
    delete_conversation(paths, conversation)
    damage(paths.db_path)
    damaged_bytes = paths.db_path.read_bytes()

    session = gui.open(paths, preload_model=False)
    window = session.window
    assert window.damagedBanner.isVisible()
    session.answers.choice = 0 if chosen == "with its files" else 1
    click(window.restoreButton)
    qtbot.waitUntil(lambda: window.damagedLabel.text().startswith("Restored"), timeout=10_000)
    (offered,) = session.answers.choices
    # Newest first, each saying what it holds.
    assert offered[0].endswith(f"{backup.name} · 1 attached file(s)"), offered
    assert offered[1].endswith(f"{older.name} · database only"), offered
    if chosen != "with its files":
        # The older backup never held the file, and the store no longer has it: said, not hidden.
        qtbot.waitUntil(lambda: "1 attached file(s) were in neither" in window.statusBar().currentMessage())
    session.close()

    core = Core.open(paths)
    try:
        (prompt, _reply) = core.store.list_messages(conversation)
        carried = core.store.export_json(conversation).get("files", {})
    finally:
        core.close()
    restored = base64.b64decode(carried[sha]["data"]) if sha in carried else b""
    expected = texts_in(database_of(backup if chosen == "with its files" else older))
    lost = {"messages": messages_missing(expected, texts_in(paths.db_path))}
    if chosen == "with its files":
        lost["bytes"] = bytes_missing(report.read_bytes(), restored)
    fault(
        CATEGORY,
        f"restore from the window over a damaged database ({chosen})",
        trials=1,
        outcome="restored, file put back" if chosen == "with its files" else "restored, missing file named",
        lost=lost,
    )
    assert set(lost.values()) == {0}
    assert [p.file_sha256 for p in prompt.attachments] == [sha]
    # The older backup never held the file, which was deleted since.
    assert restored == (report.read_bytes() if chosen == "with its files" else b"")
    (kept,) = [b for b in list_backups(paths) if b.path.name.endswith("-damaged")]
    assert kept.database.read_bytes() == damaged_bytes


# -- a full disk ------------------------------------------------------------------------------------------


class Ballast:
    """Fills a small file system to the last byte, as another program writing to it would."""

    def __init__(self, mount: Path) -> None:
        self.path = mount / "ballast"

    def fill(self, leave: int = 0) -> None:
        chunk = b"\0" * 65536
        # Unbuffered, so the write that finds the disk full fails here and not later at close.
        with self.path.open("ab", buffering=0) as ballast:
            for size in (len(chunk), 1):
                with contextlib.suppress(OSError):
                    while shutil.disk_usage(self.path.parent).free > leave:
                        ballast.write(chunk[:size])

    def free(self) -> None:
        self.path.unlink()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 16 MB file system (a USB stick, say): a tmpfs, which needs root to mount."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def big_text(path: Path, megabytes: int) -> Path:
    """Text that does not compress away, so it takes its size on any file system."""
    words = [os.urandom(6).hex() for _ in range(megabytes * 1_000_000 // 13)]
    return write(path, " ".join(words).encode())


def test_a_disk_that_fills_up_during_a_backup_leaves_no_backup(
    paths: HearthPaths, tmp_path: Path, small_disk: Path, monkeypatch: pytest.MonkeyPatch, fault: RecordFault
) -> None:
    converse_with(paths, big_text(tmp_path / "log-a.txt", 2))
    converse_with(paths, big_text(tmp_path / "log-b.txt", 2))
    files_before = stored_files(paths)
    ballast = Ballast(small_disk)

    # Too little room from the start: refused before anything is written.
    ballast.fill(leave=2_000_000)
    code, out, err = run("backup", str(small_disk))
    assert (code, out) == (3, "") and "Not enough disk space" in err and "it needs" in err, err
    assert err.count("\n") == 1
    assert [p.name for p in small_disk.iterdir()] == ["ballast"]
    ballast.free()

    # Room at the start, then another program fills the disk while the files are copied.
    real_copy = attached_files.copy_checked

    def disk_fills_meanwhile(source: Path, target: Path, sha256: str) -> bool:
        if not ballast.path.exists():
            ballast.fill()
        return real_copy(source, target, sha256)

    monkeypatch.setattr(backup_module, "copy_checked", disk_fills_meanwhile)
    code, out, err = run("backup", str(small_disk))
    left = [p.name for p in small_disk.iterdir() if p.name != "ballast"]
    files_after = stored_files(paths)
    gone = sum(bytes_missing(data, files_after.get(sha, b"")) for sha, data in files_before.items())
    fault(
        CATEGORY,
        "disk full part way through a backup (a 16 MB stick)",
        trials=1,
        outcome="exit 3, no partial backup left",
        lost={"bytes": gone},
    )
    assert gone == 0
    assert (code, out) == (3, "") and "Not enough disk space" in err and "nothing was kept" in err, err
    assert err.count("\n") == 1
    assert left == []

    ballast.free()
    monkeypatch.setattr(backup_module, "copy_checked", real_copy)
    code, out, err = run("backup", str(small_disk))
    assert (code, err) == (0, "")
    assert run("backup", "--verify", out.strip())[0] == 0


def test_a_restore_that_cannot_fit_is_refused_before_anything_is_replaced(
    tmp_path: Path, small_disk: Path, fault: RecordFault
) -> None:
    paths = HearthPaths(small_disk / "home").ensure()
    conversation, sha = converse_with(paths, big_text(tmp_path / "notes.txt", 2))
    backup = create_backup(paths, tmp_path / "elsewhere").path
    delete_conversation(paths, conversation)
    seed(paths, ["written after the backup"])
    texts_before, db_before = texts_in(paths.db_path), digest(paths.db_path)
    ballast = Ballast(small_disk)
    ballast.fill(leave=1_000_000)

    code, out, err = run("--home", str(paths.home), "restore", str(backup))
    missing = messages_missing(texts_before, texts_in(paths.db_path))
    fault(
        CATEGORY,
        "restore onto a disk without room for its files",
        trials=1,
        outcome="exit 3 before anything is replaced",
        lost={"messages": missing},
    )
    assert missing == 0
    assert (code, out) == (3, "") and "Not enough disk space" in err and "nothing was replaced" in err, err
    assert err.count("\n") == 1 and digest(paths.db_path) == db_before
    assert list_backups(paths) == [] and stored_files(paths) == {}

    ballast.free()
    code, out, err = run("--home", str(paths.home), "restore", str(backup))
    assert (code, err) == (0, "")
    assert sha in stored_files(paths)
    # What the restore replaced is in its backup, the conversation written after the backup included.
    (replaced,) = [b for b in list_backups(paths) if b.path.name.endswith("-pre-restore")]
    assert "written after the backup" in texts_in(replaced.database)
