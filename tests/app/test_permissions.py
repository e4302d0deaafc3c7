"""The Hearth home is its user's alone: folders 0700, files 0600, whatever the umask, created through the real
code paths (Core.open, backups, restores, logging), and a home an older Hearth left readable is tightened."""

from __future__ import annotations

import logging
import logging.handlers
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core import Core
from app.logging_setup import configure_logging
from app.paths import HearthPaths, resolve_home
from app.remote.registry import ServerRegistry
from app.settings import save_settings
from app.storage.backup import create_backup, restore_backup
from app.storage.db import backup_name, copy_verified

pytestmark = pytest.mark.skipif(
    os.name != "posix", reason="mode bits are POSIX; on Windows the per-user profile's ACLs apply"
)

REPO = Path(__file__).resolve().parents[2]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """The usual umask, and the loosest one: the modes must come from Hearth, not from the umask."""
    previous = os.umask(request.param)
    yield int(request.param)
    os.umask(previous)


def test_core_open_creates_a_private_home(umask: int, hearth_logger: logging.Logger) -> None:
    paths = resolve_home()
    assert not paths.home.exists()
    core = Core.open(paths)
    try:
        # The engine keeps a connection that has written (interrupted replies are marked at start), so the
        # WAL and its index exist now.
        database_files = sorted(paths.home.glob("hearth.sqlite3*"))
        names = {p.name for p in database_files}
        assert names >= {"hearth.sqlite3", "hearth.sqlite3-wal", "hearth.sqlite3-shm"}
        save_settings(paths.settings_path, core.settings)
        ServerRegistry(paths.home).add("peer", "http://127.0.0.1:9")
        configure_logging(paths)
        hearth_logger.info("a line, so the log file has been written")
        for directory in (paths.home, paths.models_dir, paths.logs_dir):
            assert mode(directory) == 0o700, directory
        for file in (*database_files, paths.settings_path, paths.home / "servers.json", paths.log_file):
            assert mode(file) == 0o600, file
    finally:
        core.close()


def test_backups_and_restores_are_private(umask: int, tmp_path: Path) -> None:
    paths = resolve_home()
    core = Core.open(paths)
    notes = tmp_path / "notes.txt"
    notes.write_text("Attached, so the backups carry a file.\n", encoding="utf-8")
    core.documents().attach(notes)
    core.close()
    mine = paths.home.parent / "my-backups"
    mine.mkdir(mode=0o755)

    made = create_backup(paths)
    chosen = create_backup(paths, mine)
    result = restore_backup(paths, made.path)

    assert mode(paths.backups_dir) == 0o700
    assert result.previous is not None
    for backup in (made.path, chosen.path, result.previous):
        inside = list(backup.rglob("*"))
        assert any(p.parent.parent.name == "attachments" for p in inside), inside
        for path in (backup, *inside):
            assert mode(path) == (0o700 if path.is_dir() else 0o600), path
    assert mode(paths.db_path) == 0o600
    assert mode(mine) == 0o755 & ~umask, "a folder the user chose keeps the mode they gave it"


def test_a_rotated_log_and_its_successor_are_private(umask: int, hearth_logger: logging.Logger) -> None:
    paths = resolve_home()
    configure_logging(paths)
    hearth_logger.info("before the rollover")
    (handler,) = [h for h in hearth_logger.handlers if isinstance(h, logging.handlers.RotatingFileHandler)]
    handler.doRollover()
    hearth_logger.info("after the rollover")

    assert mode(paths.home) == mode(paths.logs_dir) == 0o700
    assert mode(paths.log_file) == mode(paths.logs_dir / "hearth.log.1") == 0o600


def test_the_crash_log_is_private(tmp_path: Path) -> None:
    # In a child: the crash handlers replace process-wide hooks and faulthandler's file.
    home = tmp_path / "crash-home"
    script = """
        import os, sys
        from pathlib import Path
        from app.logging_setup import install_crash_handlers
        from app.paths import HearthPaths

        os.umask(0)
        install_crash_handlers(HearthPaths(Path(sys.argv[1])))
    """
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), str(home)], cwd=REPO, check=True, timeout=60
    )
    assert mode(home) == mode(home / "logs") == 0o700
    assert mode(home / "logs" / "crash.log") == 0o600


def _loosen(paths: HearthPaths) -> list[Path]:
    """What an older Hearth left: every folder 0755 and every file 0644."""
    loosened: list[Path] = []
    for path in [paths.home, *paths.home.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
        loosened.append(path)
    return loosened


def test_a_home_an_older_hearth_left_readable_is_tightened_at_start(hearth_logger: logging.Logger) -> None:
    paths = resolve_home()
    core = Core.open(paths)
    save_settings(paths.settings_path, core.settings)
    core.close()
    # An older Hearth's backup: the database alone, in a file directly in the backups folder.
    paths.backups_dir.mkdir(exist_ok=True)
    copy_verified(paths.db_path, paths.backups_dir / backup_name("manual"))
    configure_logging(paths)
    hearth_logger.info("written by the older version")
    for handler in list(hearth_logger.handlers):
        handler.close()
    loosened = _loosen(paths)
    assert paths.backups_dir in loosened and paths.log_file in loosened

    resolve_home().ensure()

    for path in loosened:
        assert mode(path) == (0o700 if path.is_dir() else 0o600), path
    Core.open(paths).close()
    assert all(mode(p) == 0o600 for p in paths.home.glob("hearth.sqlite3*"))


def test_a_link_in_the_home_is_not_followed(tmp_path: Path) -> None:
    outside = tmp_path / "not-hearths.txt"
    outside.write_text("someone else's file")
    outside.chmod(0o644)
    paths = resolve_home().ensure()
    (paths.home / "link.txt").symlink_to(outside)

    resolve_home().ensure()

    assert mode(outside) == 0o644
