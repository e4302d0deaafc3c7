"""`hearth backup` and `hearth restore` against real files: verified copies, refusals, nothing lost."""

from __future__ import annotations

import hashlib
import io
import os
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import pytest
from filelock import FileLock

from app.cli.main import main as cli_main
from app.conversations.store import ConversationStore
from app.errors import HearthError
from app.paths import HearthPaths
from app.storage.backup import create_backup, list_backups, restore_backup
from app.storage.db import Database
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
    assert backup.parent == paths.backups_dir and integrity(backup) == "ok"
    assert [b.path for b in list_backups(paths)] == [backup]

    db = Database.open(paths.db_path, paths.backups_dir)
    ConversationStore(db).add_message(conversation_id, "user", "written after the backup")
    db.dispose()
    before = texts_in(paths.db_path)

    code, out, err = run("restore", str(backup))
    assert (code, err) == (0, ""), err
    # The database the restore replaced was itself backed up first: nothing is lost either way.
    replaced = [b.path for b in list_backups(paths) if "pre-restore" in b.path.name]
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
    assert len(replaced) == 1 and str(replaced[0]) in out
    assert integrity(replaced[0]) == "ok"
    with closing(sqlite3.connect(replaced[0])) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == len(texts) + 1


def test_backup_to_a_chosen_file_or_folder(paths: HearthPaths, tmp_path: Path) -> None:
    seed(paths, ["one", "two"])
    chosen = tmp_path / "mine.sqlite3"
    assert run("backup", str(chosen))[:2] == (0, f"{chosen}\n")
    assert integrity(chosen) == "ok"
    code, out, _ = run("backup", str(tmp_path))
    assert code == 0 and Path(out.strip()).parent == tmp_path
    code, _, err = run("backup", str(chosen))
    assert code == 3 and "already exists" in err and err.count("\n") == 1


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
            copies.append((create_backup(paths), before))
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
    damaged = tmp_path / "damaged.sqlite3"
    create_backup(paths, damaged)
    damage(damaged)
    foreign = tmp_path / "foreign.sqlite3"
    with closing(sqlite3.connect(foreign)) as conn:
        conn.execute("CREATE TABLE notes (x)")
    newer = tmp_path / "newer.sqlite3"
    create_backup(paths, newer)
    with closing(sqlite3.connect(newer)) as conn, conn:
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
    backup = create_backup(paths)
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
    backup = create_backup(paths)
    damage(paths.db_path)
    damaged_bytes = paths.db_path.read_bytes()
    with pytest.raises(HearthError, match="damaged"):
        create_backup(paths)
    result = restore_backup(paths, backup)
    missing = messages_missing(["saved", "in the backup"], contents(paths, conversation_id))
    # Never deleted: the damaged file is kept whole for whatever can still be salvaged from it.
    kept = result.previous.read_bytes() if result.previous is not None else b""
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
    assert result.previous.read_bytes() == damaged_bytes
    assert contents(paths, conversation_id) == ["saved", "in the backup"]
