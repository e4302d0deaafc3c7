"""Conversations survive what happens to real processes and files: kill -9 mid-reply, a migration killed
half way, a damaged database, a full disk, deletes that must leave nothing behind."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import random
import signal
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

import app.chat.engine as engine_module
from app.chat.engine import ChatEngine, TurnCallbacks
from app.cli.main import main as cli_main
from app.conversations.store import ConversationStore
from app.core import Core
from app.errors import ReplyNotSaved
from app.paths import HearthPaths
from app.storage.backup import create_backup, list_backups
from app.storage.db import Database
from tests.helpers.ui_fixtures import GuiSessions, click
from tests.reliability.conftest import RecordFault, characters_missing, messages_missing

ROOT = Path(__file__).resolve().parents[2]
CATEGORY = "Conversations"

KILL_TRIALS = 100
# A new conversation every this many trials keeps the prompt (and so each trial) short.
TRIALS_PER_CONVERSATION = 5
# Room for a reply to stream for longer than the kill points reach even on a fast CPU (an AMX Xeon decodes
# the starter model at ~80 tokens/s): a trial that is killed ends there, so only the few that finish pay.
MAX_TOKENS = 256
TRIAL_TIMEOUT_S = 60.0
PHASES = ("load", "prompt", "streaming", "flush")

Row = tuple[int, str, str, str]  # id, role, content, status


@dataclass
class Chat:
    """What one killed (or finished) `hearth chat` process showed, and when."""

    out: bytes = b""
    err: bytes = b""
    killed: bool = False
    exit_status: int = 0
    reply_started: float | None = None
    first_text: float | None = None


class Zygote:
    """tests/reliability/chat_zygote.py: forks one real `hearth chat` process per trial."""

    def __init__(self, scratch: Path) -> None:
        self._scratch = scratch
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.chat_zygote"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def _answer(self) -> dict[str, int]:
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        assert line, "the chat zygote died"
        answer: dict[str, int] = json.loads(line)
        return answer

    def run_and_kill(self, argv: list[str], phase: str, rng: random.Random) -> Chat:
        event, amount = kill_condition(phase, rng)
        out, err = self._scratch / "stdout", self._scratch / "stderr"
        # Never read the last trial's output as this one's.
        out.unlink(missing_ok=True)
        err.unlink(missing_ok=True)
        assert self._process.stdin is not None
        request = {"argv": argv, "stdout": str(out), "stderr": str(err)}
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()
        started = time.monotonic()
        pid = self._answer()["pid"]
        chat = Chat()
        deadline = started + TRIAL_TIMEOUT_S
        while time.monotonic() < deadline:
            time.sleep(0.003)
            now = time.monotonic()
            chat.out = out.read_bytes() if out.exists() else b""
            chat.err = err.read_bytes() if err.exists() else b""
            if chat.reply_started is None and b"conversation " in chat.err:
                chat.reply_started = now
            if chat.first_text is None and chat.out:
                chat.first_text = now
            due = (
                (event == "spawn" and now - started >= amount)
                or (
                    event == "reply_started"
                    and chat.reply_started is not None
                    and now - chat.reply_started >= amount
                )
                or (event == "bytes" and len(chat.out) >= amount)
                or (event == "first_text" and chat.first_text is not None and now - chat.first_text >= amount)
            )
            if due:
                try:
                    os.killpg(pid, signal.SIGKILL)
                    chat.killed = True
                except ProcessLookupError:
                    pass  # it finished just before
                break
            if not alive(pid):
                break
        else:
            os.killpg(pid, signal.SIGKILL)
            pytest.fail(f"a trial did not reach its kill point ({phase}) in {TRIAL_TIMEOUT_S} s")
        chat.exit_status = self._answer()["status"]
        # A runner whose app finished on its own exits by itself; one left by a kill went with the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        # Whatever it wrote before dying is what the user saw.
        chat.out = out.read_bytes()
        chat.err = err.read_bytes()
        return chat

    def close(self) -> None:
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.close()
        self._process.wait(30)
        self._process.stdout.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def kill_condition(phase: str, rng: random.Random) -> tuple[str, float]:
    """What to wait for before the kill, and how long after it (or how many bytes of reply)."""
    if phase == "load":
        return "spawn", rng.uniform(0.01, 0.6)
    if phase == "prompt":
        return "reply_started", rng.uniform(0.0, 0.04)
    if phase == "streaming":
        return "bytes", float(rng.randint(1, 60))
    # Around the engine's 300 ms flush of the streaming text.
    return "first_text", rng.uniform(0.22, 0.4)


def rows(store: ConversationStore, conversation_id: int) -> list[Row]:
    return [(m.id, m.role, m.content, m.status) for m in store.list_messages(conversation_id)]


@pytest.fixture
def paths(hermetic_home: Path) -> HearthPaths:
    return HearthPaths(hermetic_home).ensure()


@pytest.fixture
def zygote(tmp_path: Path) -> Iterator[Zygote]:
    forks = Zygote(tmp_path)
    yield forks
    forks.close()


@pytest.mark.model
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
# About 1 s a trial on an idle 2-core machine; several times that when it is shared.
@pytest.mark.timeout(900)
def test_kill_9_at_random_moments_while_streaming(
    paths: HearthPaths, starter_model: Path, zygote: Zygote, fault: RecordFault
) -> None:
    core = Core.open(paths)
    model = core.library.list_models()[0].name
    core.close()
    rng = random.Random(20261129)
    expected: dict[int, list[Row]] = {}
    trials: list[dict[str, int | str]] = []
    earlier_missing = 0
    try:
        conversation_id = 0
        for trial in range(KILL_TRIALS):
            if trial % TRIALS_PER_CONVERSATION == 0:
                core = Core.open(paths)
                conversation_id = core.store.create_conversation(f"Kill trials from {trial}").id
                core.close()
                expected[conversation_id] = []
            phase = PHASES[trial % len(PHASES)]
            thing = rng.choice(["fruit", "colour", "river", "tool"])
            # Long enough an answer that most kills land while it streams.
            prompt = f"Trial {trial}: describe a {thing} in detail, in several paragraphs."
            argv = ["chat", "--home", str(paths.home), "--model", model]
            argv += ["--conversation", str(conversation_id), "--max-tokens", str(MAX_TOKENS)]
            argv += ["--seed", str(rng.randint(0, 999)), prompt]
            chat = zygote.run_and_kill(argv, phase, rng)

            # A fresh start, as after a crash: the check, marking the cut-off reply, then what the user sees.
            core = Core.open(paths)
            try:
                check = core.db.quick_check()
                now = {other: rows(core.store, other) for other in expected}
            finally:
                core.close()
            earlier_missing += sum(messages_missing(before, now[other]) for other, before in expected.items())
            new = now[conversation_id][len(expected[conversation_id]) :]
            # What the user saw: stdout up to the kill, less a character cut in half and the newline the
            # command prints after a finished reply.
            shown = chat.out.decode("utf-8", errors="ignore")
            stored, status = (new[1][2], new[1][3]) if len(new) == 2 else ("", "")
            if status == "complete" and shown == stored + "\n":
                shown = stored
            trials.append(
                {"trial": trial, "kill point": phase, "killed": "yes" if chat.killed else "no",
                 "outcome": kill_outcome(new, shown), "shown": len(shown), "stored": len(stored),
                 "lost": characters_missing(shown, stored)}
            )  # fmt: skip

            assert check == "ok", f"trial {trial} ({phase})"
            for other, before in expected.items():
                assert now[other][: len(before)] == before, (
                    f"trial {trial} ({phase}) changed earlier messages"
                )
                if other != conversation_id:
                    assert now[other] == before
            assert len(new) <= 2, new
            if chat.reply_started is not None:
                assert [r[1] for r in new] == ["user", "assistant"], f"trial {trial} ({phase}): {new}"
            if new:
                assert new[0][1:] == ("user", prompt, "complete")
            # Saved from what was streamed, never other text. Text is written before it is shown, so a kill
            # between the two leaves the database ahead of the screen by that one delta.
            assert shown.startswith(stored) or stored.startswith(shown), (
                f"trial {trial}: {stored!r} vs {shown!r}"
            )
            if status == "complete":
                # Saved whole before the kill, or the process finished first.
                assert shown == stored, f"trial {trial}: {stored!r} vs {shown!r}"
            elif len(new) == 2:
                assert chat.killed and status == "interrupted", f"trial {trial} ({phase}): {status}"
            # The first text is stored before it is shown: a reply the user saw any of is never stored empty.
            assert stored or not shown, f"trial {trial} ({phase}): {shown!r} shown, nothing stored"
            expected[conversation_id] += new
    finally:
        if trials:
            record_kills(fault, trials, earlier_missing)
    outcomes = Counter(str(t["outcome"]) for t in trials)
    # Most kills must land while the reply streams, or the trial proves little.
    assert outcomes["partial reply kept"] >= 0.3 * KILL_TRIALS, outcomes
    assert earlier_missing == 0


def kill_outcome(new: list[Row], shown: str) -> str:
    if len(new) < 2:
        return "killed before the reply started"
    if new[1][3] == "complete":
        return "finished first"
    return "partial reply kept" if shown else "killed before the first token"


KILL_OUTCOMES = ("killed before the reply started", "killed before the first token", "partial reply kept")


def record_kills(fault: RecordFault, trials: list[dict[str, int | str]], earlier_missing: int) -> None:
    outcomes = Counter(str(t["outcome"]) for t in trials)
    summary = ", ".join(f"{outcomes[what]} {what}" for what in (*KILL_OUTCOMES, "finished first"))
    # Per kill that cut a reply short: what the user had seen of it that the database did not have.
    losses = [int(t["lost"]) for t in trials if t["outcome"] in KILL_OUTCOMES[1:]]
    fault(
        CATEGORY,
        "app killed (SIGKILL) at random moments while streaming",
        trials=len(trials),
        outcome=(
            f"earlier messages intact, quick_check ok ({summary}); characters shown but not stored per kill "
            f"mid-reply: median {statistics.median(losses or [0]):g}, max {max(losses, default=0)}"
        ),
        lost={"characters": sum(int(t["lost"]) for t in trials), "messages": earlier_missing},
        per_trial=trials,
    )


# -- migrations ---------------------------------------------------------------------------------------

MIGRATION_KILLS = 8


def message_texts(path: Path) -> dict[int, str]:
    """Read straight from the file, read-only: opening it through Hearth would finish the migration."""
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
        return dict(conn.execute("SELECT id, content FROM messages").fetchall())


def file_state(path: Path) -> tuple[str, str]:
    with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as conn:
        verdict = conn.execute("PRAGMA integrity_check").fetchone()[0]
        version = conn.execute("SELECT version_num FROM alembic_version").fetchone()[0]
    return str(verdict), str(version)


def migrate_in_a_process(path: Path, backups: Path) -> subprocess.Popen[bytes]:
    """Returns once the child has imported everything and is about to open (and migrate) the database."""
    code = (
        "import sys; from pathlib import Path; from app.storage.db import Database; "
        "print('ready', flush=True); "
        "Database.open(Path(sys.argv[1]), Path(sys.argv[2])).dispose()"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code, str(path), str(backups)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == b"ready\n"
    process.stdout.close()
    return process


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_migration_killed_at_random_moments_loses_nothing(tmp_path: Path, fault: RecordFault) -> None:
    from tests.app.storage.test_migration_0003 import HEAD, database_at_0002

    path, backups = tmp_path / "hearth.sqlite3", tmp_path / "backups"
    database_at_0002(path)
    original = message_texts(path)
    assert len(original) > 3000

    # How long a whole migration takes here, on a copy, so the kills land all along it.
    timing = tmp_path / "timing"
    timing.mkdir()
    copy = timing / "hearth.sqlite3"
    copy.write_bytes(path.read_bytes())
    whole = migrate_in_a_process(copy, timing / "backups")
    started = time.monotonic()
    assert whole.wait(120) == 0
    duration = time.monotonic() - started

    rng = random.Random(5)
    pristine = tmp_path / "pristine.sqlite3"
    pristine.write_bytes(path.read_bytes())
    states, missing = [], 0
    for _ in range(MIGRATION_KILLS):
        process = migrate_in_a_process(path, backups)
        time.sleep(rng.uniform(0.0, 1.0) * duration)
        process.kill()
        process.wait(30)
        verdict, version = file_state(path)
        assert verdict == "ok"
        # Either the old schema with every message, or (killed after the commit) the new one with them all.
        assert version in ("0002", HEAD)
        missing += messages_missing(original.items(), message_texts(path).items())
        states.append(version)
        if version == HEAD:
            # Finished before the kill: start the next trial from the old schema again.
            for side in ("-wal", "-shm"):
                Path(f"{path}{side}").unlink(missing_ok=True)
            path.write_bytes(pristine.read_bytes())

    database = Database.open(path, backups)
    try:
        store = ConversationStore(database)
        migrated = {
            m.id: m.content for c in store.list_conversations() for m in store.list_all_messages(c.id)
        }
    finally:
        database.dispose()
    missing += messages_missing(original.items(), migrated.items())
    taken = sorted(backups.iterdir())
    fault(
        CATEGORY,
        f"migration of {len(original)} messages killed (SIGKILL) at random moments",
        trials=len(states),
        outcome=(
            f"old or new schema, never half ({states.count('0002')} rolled back, "
            f"{len(states) - states.count('0002')} "
            f"finished first); all messages kept; {len(taken)} verified backups"
        ),
        lost={"messages": missing},
    )
    assert missing == 0
    assert migrated == original
    # Every attempt that got as far as migrating first left a verified backup of the old schema.
    assert taken
    for backup in taken:
        assert file_state(backup) == ("ok", "0002")
        assert message_texts(backup) == original


def test_a_migration_that_fails_after_committing_is_restored_from_its_backup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: RecordFault
) -> None:
    import app.storage.db as db_module
    from app.errors import DatabaseError
    from tests.app.storage.test_db import FAILS_AFTER_COMMITTING, migrations_with
    from tests.app.storage.test_migration_0003 import HEAD, database_at_0002

    path, backups = tmp_path / "hearth.sqlite3", tmp_path / "backups"
    database_at_0002(path)
    Database.open(path, tmp_path / "first-backups").dispose()
    original = message_texts(path)
    assert len(original) > 3000

    monkeypatch.setattr(
        db_module, "MIGRATIONS_DIR", migrations_with(tmp_path, "9001_broken.py", FAILS_AFTER_COMMITTING)
    )
    with pytest.raises(DatabaseError, match="restored from the backup"):
        Database.open(path, backups)
    missing = messages_missing(original.items(), message_texts(path).items())
    fault(
        CATEGORY,
        f"migration of {len(original)} messages failing after a partial commit",
        trials=1,
        outcome="restored from the verified backup taken first",
        lost={"messages": missing},
    )
    assert missing == 0
    assert file_state(path) == ("ok", HEAD)
    assert message_texts(path) == original


# -- a damaged database ---------------------------------------------------------------------------------

DAMAGED_CONVERSATIONS = 5


def seed_then_damage(paths: HearthPaths) -> tuple[dict[int, list[str]], int]:
    """Conversations of long messages, then one page of the third one's messages overwritten on disk.

    Returns every conversation's texts and the id of the one whose page was destroyed.
    """
    db = Database.open(paths.db_path, paths.backups_dir)
    store = ConversationStore(db)
    texts: dict[int, list[str]] = {}
    for c in range(DAMAGED_CONVERSATIONS):
        conversation = store.create_conversation(f"Damaged test {c}")
        texts[conversation.id] = [f"conv{c}-message{m} " + "lorem ipsum " * 120 for m in range(6)]
        for m, text in enumerate(texts[conversation.id]):
            store.add_message(conversation.id, "user" if m % 2 == 0 else "assistant", text)
    db.dispose()
    create_backup(paths)
    victim = list(texts)[2]
    data = bytearray(paths.db_path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    marker = f"conv{DAMAGED_CONVERSATIONS // 2}-".encode()
    for offset in range(page_size, len(data), page_size):
        page = data[offset : offset + page_size]
        # A table leaf page (type 0x0d) holding only the victim's messages.
        if page[0] == 0x0D and marker in page and page.count(b"conv") == page.count(marker):
            data[offset : offset + page_size] = b"\xee" * page_size
            break
    else:
        pytest.fail("no page of the victim's messages found")
    paths.db_path.write_bytes(bytes(data))
    return texts, victim


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_a_damaged_database_is_read_only_on_the_command_line(
    paths: HearthPaths, tmp_path: Path, fault: RecordFault
) -> None:
    texts, victim = seed_then_damage(paths)
    before = digest(paths.db_path)

    code, out, err = run_cli("conversations", "list")
    assert code == 0 and "opened read-only" in err and "damaged" in err
    assert len(out.splitlines()) == DAMAGED_CONVERSATIONS

    folder = tmp_path / "salvaged"
    code, out, err = run_cli("conversations", "export", "--all", "--format", "json", "--output", str(folder))
    assert code == 0
    assert f"Could not read conversation {victim}" in out
    exported = {json.loads(p.read_text())["conversation"]["id"]: p for p in folder.iterdir()}
    assert set(exported) == set(texts) - {victim}
    for conversation_id, path in exported.items():
        messages = json.loads(path.read_text())["messages"]
        assert [m["content"] for m in messages] == texts[conversation_id]

    # Anything that would write refuses, with the way out in one line.
    code, out, err = run_cli("conversations", "import", str(next(iter(exported.values()))))
    assert code == 3 and "damaged" in err and "hearth restore" in err and err.count("\n") == 1
    assert digest(paths.db_path) == before
    # What the user still has: the conversations exported, and the backup taken before the damage.
    salvaged = [m["content"] for p in exported.values() for m in json.loads(p.read_text())["messages"]]
    backed_up = [t for b in list_backups(paths) for t in message_texts(b.database).values()]
    missing = messages_missing([t for ts in texts.values() for t in ts], salvaged + backed_up)
    fault(
        CATEGORY,
        "damaged database page (CLI)",
        trials=1,
        outcome="opened read-only, readable conversations exported, file unchanged",
        lost={"messages": missing},
    )
    assert missing == 0


@pytest.mark.gui
def test_a_damaged_database_opens_read_only_in_the_window_with_export_and_restore(
    qtbot: QtBot, gui: GuiSessions, paths: HearthPaths, tmp_path: Path, fault: RecordFault
) -> None:
    texts, victim = seed_then_damage(paths)
    damaged_bytes = paths.db_path.read_bytes()
    session = gui.open(paths, preload_model=False)
    window = session.window
    assert window.damagedBanner.isVisible()
    assert "damaged" in window.damagedLabel.text()
    assert not window.composer.isEnabled() and not window.sendButton.isEnabled()
    assert not window.newChatButton.isEnabled()
    qtbot.waitUntil(lambda: window.conversationList.count() == DAMAGED_CONVERSATIONS)

    session.answers.folder = tmp_path / "salvaged"
    click(window.salvageButton)
    qtbot.waitUntil(lambda: "Exported" in window.statusBar().currentMessage(), timeout=10_000)
    assert "1 could not be read" in window.statusBar().currentMessage()
    assert len(list((tmp_path / "salvaged").iterdir())) == DAMAGED_CONVERSATIONS - 1
    assert paths.db_path.read_bytes() == damaged_bytes

    session.answers.choice = 0
    click(window.restoreButton)
    qtbot.waitUntil(lambda: window.damagedLabel.text().startswith("Restored"), timeout=10_000)
    assert session.answers.choices and session.answers.confirmations
    session.close()

    # Nothing lost: the backup is back in place and the damaged file is kept beside the backups.
    db = Database.open(paths.db_path, paths.backups_dir)
    try:
        store = ConversationStore(db)
        restored = {c: [m.content for m in store.list_messages(c)] for c in texts}
    finally:
        db.dispose()
    missing = sum(messages_missing(expected, restored[c]) for c, expected in texts.items())
    fault(
        CATEGORY,
        "damaged database page (window)",
        trials=1,
        outcome="read-only with banner; export and restore from backup; nothing replaced silently",
        lost={"messages": missing},
    )
    assert missing == 0
    assert restored == texts
    kept = [p / "hearth.sqlite3" for p in paths.backups_dir.iterdir() if p.name.endswith("-damaged")]
    assert [p.read_bytes() for p in kept] == [damaged_bytes]
    assert victim in texts


# -- a full disk ----------------------------------------------------------------------------------------


class FullDisk:
    """A real full disk: Hearth's home on a small tmpfs, filled to the last byte by a ballast file."""

    def __init__(self, mount: Path) -> None:
        self._ballast = mount / "ballast"
        self.full = False

    def fill(self) -> None:
        chunk = b"\0" * 65536
        # Unbuffered, so the write that finds the disk full fails here and not later at close.
        with self._ballast.open("ab", buffering=0) as ballast:
            for size in (len(chunk), 1):
                with contextlib.suppress(OSError):
                    while True:
                        ballast.write(chunk[:size])
        self.full = True

    def free(self) -> None:
        self._ballast.unlink()
        self.full = False


@pytest.fixture
def tiny_home(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "tiny"
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


class FillsTheDisk(TurnCallbacks):
    """Fills the disk at the first token; frees it after `free_after` tokens (never, when None)."""

    def __init__(self, disk: FullDisk, free_after: int | None) -> None:
        self.disk, self.free_after = disk, free_after
        self.shown: list[str] = []
        self.tokens = 0

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        self.shown.append(text)
        self.tokens += n_tokens
        if len(self.shown) == 1:
            self.disk.fill()
        elif self.free_after is not None and self.tokens >= self.free_after and self.disk.full:
            self.disk.free()


@pytest.fixture
def core(tiny_home: Path, starter_model: Path) -> Iterator[Core]:
    opened = Core.open(HearthPaths(tiny_home / "home").ensure())
    yield opened
    opened.close()


def big_text(engine: ChatEngine) -> None:
    """Long replies, so the streaming text is written to the database several times while the disk is full."""
    engine.settings_store.update(max_tokens=150, temperature=0.0)


@pytest.mark.model
def test_disk_full_while_streaming_then_space_returns(
    core: Core,
    engine: ChatEngine,
    caplog: pytest.LogCaptureFixture,
    fault: RecordFault,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every token is written, so writes fail while the disk is full however fast this CPU generates the
    # 40 tokens (on an AMX Xeon they take less than one 0.3 s flush interval).
    monkeypatch.setattr(engine_module, "FLUSH_INTERVAL_S", 0.0)
    big_text(engine)
    model = engine.library.list_models()[0].name
    disk = FullDisk(core.paths.home.parent)
    callbacks = FillsTheDisk(disk, free_after=40)
    result = engine.run_turn("Write a long story about a lighthouse keeper.", model, callbacks=callbacks)
    saved = engine.store.get_message(result.assistant_message_id)
    missing = characters_missing("".join(callbacks.shown), saved.content)
    fault(
        CATEGORY,
        "disk full while streaming, space back before the end",
        trials=1,
        outcome="whole reply saved",
        lost={"characters": missing},
    )
    assert missing == 0
    assert not disk.full, "the reply ended before the disk was freed: make it longer"
    assert "could not save the streaming reply yet" in caplog.text
    assert (saved.status, saved.content) == (result.status, "".join(callbacks.shown))
    assert core.db.quick_check() == "ok"


@pytest.mark.model
def test_disk_full_at_the_end_of_a_reply_is_saved_when_space_returns(
    core: Core, engine: ChatEngine, monkeypatch: pytest.MonkeyPatch, fault: RecordFault
) -> None:
    monkeypatch.setattr(engine_module, "FINAL_WRITE_BACKOFF_S", 0.01)
    big_text(engine)
    model = engine.library.list_models()[0].name
    disk = FullDisk(core.paths.home.parent)
    callbacks = FillsTheDisk(disk, free_after=None)
    with pytest.raises(ReplyNotSaved, match="disk full") as caught:
        engine.run_turn("Write a long story about a lighthouse keeper.", model, callbacks=callbacks)
    assert "saves it as soon as the database can be written again" in str(caught.value)
    shown = "".join(callbacks.shown)
    conversation = engine.store.list_conversations()[0]
    reply = engine.store.list_messages(conversation.id)[-1]
    # The error names the reply, so the window keeps it (and the stored prompt) instead of handing the
    # prompt back to be sent twice.
    assert caught.value.assistant_message_id == reply.id
    # Only what was flushed before the disk filled is on disk so far.
    assert reply.status == "streaming" and shown.startswith(reply.content) and len(reply.content) < len(shown)

    disk.free()
    # The next turn writes the held-back reply first.
    engine.settings_store.update(max_tokens=4)
    engine.run_turn("Thanks.", model, conversation_id=conversation.id)
    saved = engine.store.get_message(reply.id)
    missing = characters_missing(shown, saved.content)
    fault(
        CATEGORY,
        "disk full while saving the finished reply",
        trials=1,
        outcome="clear error, text kept, saved once space returned",
        lost={"characters": missing},
    )
    assert missing == 0
    assert (saved.status, saved.content) == ("complete", shown)
    assert core.db.quick_check() == "ok"
