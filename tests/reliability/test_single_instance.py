"""A second `hearth` start hands over to the running window; a killed window never blocks the next start."""

from __future__ import annotations

import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from filelock import FileLock, Timeout

from app.cli.main import main as cli_main
from app.core import Core
from app.paths import HearthPaths
from app.storage.backup import create_backup
from tests.reliability.conftest import RecordFault, messages_missing

pytestmark = pytest.mark.gui

CATEGORY = "Conversations"

ROOT = Path(__file__).resolve().parents[2]
HANDED_OVER = "another start asked for this window"
START_TIMEOUT_S = 60.0


class Windows:
    """`hearth` GUI processes, each in its own process group so its runner goes with it."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.started: list[subprocess.Popen[bytes]] = []
        self.stderr = home.parent / "windows-stderr.txt"

    def start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
        with self.stderr.open("ab") as stderr:
            process = subprocess.Popen(
                [sys.executable, "-m", "app", "gui", "--home", str(self.home)],
                cwd=ROOT,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                start_new_session=True,
            )
        self.started.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(30)

    def close_all(self) -> None:
        for process in self.started:
            self.kill(process)


@pytest.fixture
def windows(hermetic_home: Path) -> Iterator[Windows]:
    started = Windows(hermetic_home)
    yield started
    started.close_all()


def wait_until_holding_the_lock(
    windows: Windows, paths: HearthPaths, process: subprocess.Popen[bytes]
) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    probe = FileLock(paths.instance_lock)
    while time.monotonic() < deadline:
        assert process.poll() is None, windows.stderr.read_text(errors="replace")
        try:
            probe.acquire(timeout=0)
        except Timeout:
            return
        probe.release()
        time.sleep(0.05)
    pytest.fail("the window never took the instance lock")


def handovers(paths: HearthPaths) -> int:
    return paths.log_file.read_text(encoding="utf-8").count(HANDED_OVER) if paths.log_file.exists() else 0


def every_message(paths: HearthPaths) -> list[tuple[int, str]]:
    """Read-only, straight from the file, beside the window that has it open."""
    with closing(sqlite3.connect(f"{paths.db_path.as_uri()}?mode=ro", uri=True)) as conn:
        return conn.execute("SELECT id, content FROM messages ORDER BY id").fetchall()


def test_a_second_start_hands_over_and_a_killed_window_does_not_block(
    windows: Windows, hermetic_home: Path, fault: RecordFault
) -> None:
    paths = HearthPaths(hermetic_home).ensure()
    core = Core.open(paths)
    conversation = core.store.create_conversation("Before the windows")
    for text in ("one", "two", "three"):
        core.store.add_message(conversation.id, "user", text)
    core.close()
    before = every_message(paths)
    first = windows.start()
    wait_until_holding_the_lock(windows, paths, first)

    second = windows.start()
    assert second.wait(START_TIMEOUT_S) == 0
    assert handovers(paths) == 1
    assert first.poll() is None, "the first window must keep running"

    # The window's lock also keeps a restore from replacing the database under it.
    create_backup(paths)
    backup = sorted(paths.backups_dir.iterdir())[-1]
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["restore", str(backup)], out=out, err=err) == 3
    assert "Hearth is running" in err.getvalue()

    handed_over = messages_missing(before, every_message(paths))

    # Killed: no clean-up ran, the socket file is stale; the next start must simply take over.
    windows.kill(first)
    third = windows.start()
    wait_until_holding_the_lock(windows, paths, third)
    fourth = windows.start()
    assert fourth.wait(START_TIMEOUT_S) == 0
    after_kill = messages_missing(before, every_message(paths))
    fault(
        CATEGORY,
        "second instance started",
        trials=2,
        outcome="handed over to the first, exit 0",
        lost={"messages": handed_over},
    )
    fault(
        CATEGORY,
        "stale lock after SIGKILL of the window",
        trials=1,
        outcome="next start runs",
        lost={"messages": after_kill},
    )
    assert handed_over == 0 and after_kill == 0
    assert handovers(paths) == 2
    assert third.poll() is None
