"""Backup folders with real files: what a backup holds, a partial one, files the store had lost, a damaged
database kept with its files, and what a later Hearth wrote."""

from __future__ import annotations

import io
import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from app.cli.main import main as cli_main
from app.conversations.store import PartInput, ReplyProvenance
from app.core import Core
from app.errors import HearthError
from app.paths import HearthPaths, resolve_home
from app.storage.backup import (
    DATABASE_NAME,
    MANIFEST_NAME,
    create_backup,
    database_of,
    list_backups,
    restore_backup,
    verify_backup,
)
from app.storage.db import backup_name, copy_verified

REPLY = ReplyProvenance("m", "b" * 64, {}, None)


@pytest.fixture
def paths(hermetic_home: Path) -> HearthPaths:
    return resolve_home().ensure()


def converse_with(paths: HearthPaths, attached: Path) -> tuple[int, str]:
    core = Core.open(paths)
    try:
        stored = core.documents().attach(attached)
        part = PartInput("attachment", stored.name, stored.sha256, stored.mime_type, {"kind": stored.kind})
        turn = core.store.begin_turn(
            None, prompt="Read this", after=None, system_prompt=None, reply=REPLY, prompt_parts=[part]
        )
        return turn.conversation_id, stored.sha256
    finally:
        core.close()


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return cli_main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_a_backup_holds_the_database_its_files_and_a_description(paths: HearthPaths, tmp_path: Path) -> None:
    _conversation, sha = converse_with(paths, write(tmp_path / "notes.md", "# Notes\n\nKeep the lamp lit.\n"))
    backup = create_backup(paths)

    inside = sorted(str(p.relative_to(backup.path)) for p in backup.path.rglob("*") if p.is_file())
    assert inside == [f"attachments/{sha[:2]}/{sha}", MANIFEST_NAME, DATABASE_NAME]
    assert backup.database == database_of(backup.path) == backup.path / DATABASE_NAME
    manifest = json.loads((backup.path / MANIFEST_NAME).read_text(encoding="utf-8"))
    assert (manifest["format"], manifest["version"], manifest["lost"]) == ("hearth-backup", 1, [])
    assert [f.sha256 for f in backup.carried] == [sha] and backup.lost == ()
    assert [f.label for f in backup.files] == [f"notes.md ({sha[:12]})"]


def test_a_partial_backup_is_never_listed_or_overwritten(paths: HearthPaths, tmp_path: Path) -> None:
    converse_with(paths, write(tmp_path / "a.txt", "A.\n"))
    # What a backup killed half way leaves: its folder under the .partial name, without its description.
    interrupted = paths.backups_dir / (backup_name("manual").removesuffix(".sqlite3") + ".partial")
    interrupted.mkdir(parents=True)
    copy_verified(paths.db_path, interrupted / DATABASE_NAME)
    assert list_backups(paths) == []
    with pytest.raises(HearthError, match=r"is not a whole Hearth backup: it has no backup\.json"):
        verify_backup(interrupted)

    made = create_backup(paths)
    assert [b.path for b in list_backups(paths)] == [made.path]
    chosen = tmp_path / "mine"
    (tmp_path / "mine.partial").mkdir()
    code, out, err = run("backup", str(chosen))
    assert (code, out) == (3, "") and "mine.partial exists" in err and err.count("\n") == 1
    assert not chosen.exists()


def test_a_file_the_store_had_lost_is_named_and_the_rest_is_backed_up(
    paths: HearthPaths, tmp_path: Path
) -> None:
    _conversation, lost_sha = converse_with(paths, write(tmp_path / "lost.txt", "Deleted by hand.\n"))
    _other, kept_sha = converse_with(paths, write(tmp_path / "kept.txt", "Still here.\n"))
    (paths.attachments_dir / lost_sha[:2] / lost_sha).unlink()

    code, out, err = run("backup")
    backup = Path(out.strip())
    assert code == 0 and "1 attached file(s) were already missing" in err and "lost.txt" in err
    assert err.count("\n") == 1
    assert [entry["sha256"] for entry in json.loads((backup / MANIFEST_NAME).read_text())["lost"]] == [
        lost_sha
    ]
    # Whole as far as it goes: the file was lost before, not by the backup.
    verified = verify_backup(backup)
    assert [f.sha256 for f in verified.carried] == [kept_sha] and [f.sha256 for f in verified.lost] == [
        lost_sha
    ]
    assert run("backup", "--verify", str(backup))[1].endswith("1 attached file(s) verified\n")

    result = restore_backup(paths, backup)
    assert result.files_missing == (f"lost.txt ({lost_sha[:12]})",) and result.files_put_back == 0


def test_a_damaged_database_is_kept_with_the_files_it_holds(paths: HearthPaths, tmp_path: Path) -> None:
    converse_with(paths, write(tmp_path / "first.txt", "In the backup.\n"))
    backup = create_backup(paths).path
    _later, later_sha = converse_with(paths, write(tmp_path / "later.txt", "Only in the damaged one.\n"))
    # An index that no longer matches its table: the integrity check finds it; the files table still reads.
    with closing(sqlite3.connect(paths.db_path)) as conn:
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute(
            "UPDATE sqlite_master SET sql = 'CREATE INDEX ix_messages_parent_id ON messages (role)' "
            "WHERE name = 'ix_messages_parent_id'"
        )
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    damaged = paths.db_path.read_bytes()

    result = restore_backup(paths, backup)
    assert result.previous_damaged and result.previous is not None
    assert result.previous.name.endswith("-damaged")
    assert database_of(result.previous).read_bytes() == damaged
    kept = result.previous / "attachments" / later_sha[:2] / later_sha
    assert kept.read_text(encoding="utf-8") == "Only in the damaged one.\n"
    (listed,) = [b for b in list_backups(paths) if b.path == result.previous]
    assert listed.files == 2


def test_a_backup_from_a_later_hearth_is_refused(paths: HearthPaths, tmp_path: Path) -> None:
    converse_with(paths, write(tmp_path / "a.txt", "A.\n"))
    backup = create_backup(paths).path
    manifest = backup / MANIFEST_NAME
    manifest.write_text(json.dumps(json.loads(manifest.read_text()) | {"version": 2}), encoding="utf-8")
    code, out, err = run("restore", str(backup))
    assert (code, out) == (3, "") and "newer version of Hearth" in err and "Nothing was restored" in err
    assert err.count("\n") == 1


def test_backup_list_shows_folders_and_older_database_only_files(paths: HearthPaths, tmp_path: Path) -> None:
    converse_with(paths, write(tmp_path / "a.txt", "A.\n"))
    older = paths.backups_dir / backup_name("manual")
    paths.backups_dir.mkdir(exist_ok=True)
    copy_verified(paths.db_path, older)
    newer = create_backup(paths).path

    code, out, _ = run("backup", "--list", "--json")
    listed = json.loads(out)
    assert code == 0 and [(b["path"], b["attached_files"]) for b in listed] == [
        (str(newer), 1),
        (str(older), None),
    ]
    code, out, _ = run("backup", "--list")
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].endswith(f"1 attached file(s)  {newer}")
    assert lines[1].endswith(f"database only  {older}")
