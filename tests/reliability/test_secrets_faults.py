"""The Hugging Face token with keyrings that are missing, locked or hung, and a search of every file Hearth
wrote for the token after a session that tried hard to leak it."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail
from keyring.errors import KeyringLocked
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.cli.main import main as cli_main
from app.library.hub_token import HubToken
from app.logging_setup import configure_logging
from app.paths import HearthPaths
from app.settings import Settings, save_settings
from tests.helpers.hubserver import HubServer, starter_file
from tests.helpers.ui_fixtures import GuiSessions, Ticker, click
from tests.reliability.conftest import RecordFault
from tests.ui.test_ui_library import (
    HangingKeyring,
    files_holding,
    open_library,
    open_settings,
    save_token,
    type_into,
)

pytestmark = pytest.mark.gui

CATEGORY = "Secrets"

ROOT = Path(__file__).resolve().parents[2]
REPO = "someone/Private-GGUF"
TOKEN = "hf_ReliabilitySuiteTokenNeverWritten0123456789"
WAIT_MS = 30_000
MAX_EVENT_LOOP_GAP_S = 0.5


class LockedKeyring(KeyringBackend):
    """A keyring whose collection stays locked (the user dismissed the unlock prompt)."""

    priority = 1

    def get_password(self, service: str, username: str) -> str | None:
        raise KeyringLocked("the collection is locked")

    def set_password(self, service: str, username: str, password: str) -> None:
        raise KeyringLocked("the collection is locked")

    def delete_password(self, service: str, username: str) -> None:
        raise KeyringLocked("the collection is locked")


KEYRINGS: dict[str, tuple[str, Callable[[], KeyringBackend]]] = {
    "no keyring backend": ("No system keyring", fail.Keyring),
    "locked keyring": ("locked", LockedKeyring),
    "keyring that hangs": ("did not answer", HangingKeyring),
}


@pytest.fixture
def home(hermetic_home: Path, hub: HubServer) -> HearthPaths:
    paths = HearthPaths(hermetic_home).ensure()
    save_settings(paths.settings_path, Settings(hf_endpoint=hub.url))
    hub.add_repo(REPO, [starter_file()], private=True)
    return paths


@pytest.fixture(params=list(KEYRINGS))
def broken_keyring(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    reason, factory = KEYRINGS[request.param]
    backend = factory()
    keyring.set_keyring(backend)
    yield request.param, reason
    if isinstance(backend, HangingKeyring):
        backend.release.set()


def test_an_unusable_keyring_never_blocks_and_the_token_lives_for_the_session(
    qtbot: QtBot,
    gui: GuiSessions,
    hub: HubServer,
    home: HearthPaths,
    broken_keyring: tuple[str, str],
    fault: RecordFault,
) -> None:
    kind, reason = broken_keyring
    hub.valid_tokens.add(TOKEN)
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    ticker = Ticker()
    started = time.monotonic()
    page = open_settings(qtbot, panel)
    type_into(page.tokenEdit, TOKEN)
    click(page.saveTokenButton)
    qtbot.waitUntil(lambda: page.tokenStatus.text().startswith("Session only:"), timeout=WAIT_MS)
    ended = time.monotonic()
    ticker.stop()
    # The user is told, in the window, why the token will not outlive this session.
    assert reason in page.tokenStatus.text()
    assert TOKEN not in page.tokenStatus.text()
    gap = ticker.max_gap_between(started, ended)
    assert gap < MAX_EVENT_LOOP_GAP_S, f"the event loop stalled for {gap:.3f} s on the keyring"

    # The session's token still opens the private repository.
    page.window().close()
    type_into(panel.searchBox, REPO)
    QTest.keyClick(panel.searchBox, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: panel.quantTable.rowCount() == 1, timeout=WAIT_MS)
    # Kept: the token the user typed is the one the session's requests carry.
    lost = int(hub.requests_to("/api/models/")[-1].authorization != f"Bearer {TOKEN}")
    fault(
        CATEGORY,
        kind,
        trials=1,
        outcome="window responsive, token kept for the session, user told",
        lost={"secrets": lost},
    )
    assert lost == 0
    assert files_holding(home.home, TOKEN) == []


CRASHING_SESSION = """
    import sys, threading
    from keyring.backends import fail
    import keyring
    from app.logging_setup import configure_logging, install_crash_handlers
    from app.paths import resolve_home
    from app.library.hub_token import HubToken

    keyring.set_keyring(fail.Keyring())
    paths = resolve_home().ensure()
    configure_logging(paths, verbose=True)
    install_crash_handlers(paths)
    token = sys.stdin.readline().strip()
    HubToken().set(token)  # session only: no keyring here
    worker = threading.Thread(target=lambda: (_ for _ in ()).throw(RuntimeError(f"worker saw {token}")))
    worker.start()
    worker.join()
    raise RuntimeError(f"the main thread saw {token}")
"""


def every_file_under(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("*") if p.is_file()]


def test_the_token_appears_in_no_file_log_crash_report_or_error(
    qtbot: QtBot,
    gui: GuiSessions,
    hub: HubServer,
    home: HearthPaths,
    tmp_path: Path,
    hearth_logger: logging.Logger,
    fault: RecordFault,
) -> None:
    configure_logging(home, verbose=True)
    # The window stores the token (in the in-memory test keyring) and uses it; the Hub refuses it (401).
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    save_token(qtbot, panel, TOKEN)
    type_into(panel.searchBox, REPO)
    QTest.keyClick(panel.searchBox, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: bool(hub.requests_to("/api/models/")), timeout=WAIT_MS)

    def shown_now() -> list[str]:
        return [
            panel.repoMessage.text(),
            panel.searchStatus.text(),
            session.window.statusBar().currentMessage(),
        ]

    # "Searching…" shows first; the refusal replaces it once the answer is in.
    qtbot.waitUntil(
        lambda: "401" in " ".join(shown_now()) or "token" in " ".join(shown_now()).lower(), timeout=WAIT_MS
    )
    shown = shown_now()
    session.close()

    # The command line, with the same stored token, against the same refusal.
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["models", "files", REPO], out=out, err=err) == 3
    assert err.getvalue().count("\n") == 1
    shown += [out.getvalue(), err.getvalue()]
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["token", "status"], out=out, err=err) == 0
    shown += [out.getvalue(), err.getvalue()]
    assert all(r.authorization == f"Bearer {TOKEN}" for r in hub.requests_to("/api/models/"))

    # A process that dies of uncaught exceptions whose text holds the token (main thread and a worker).
    crashed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CRASHING_SESSION)],
        input=TOKEN + "\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert crashed.returncode != 0
    shown += [crashed.stdout, crashed.stderr]
    for handler in hearth_logger.handlers:
        handler.flush()
    log_text = "".join(p.read_text(errors="replace") for p in home.logs_dir.iterdir())
    assert "worker saw [REDACTED]" in log_text and "main thread saw [REDACTED]" in log_text

    for text in shown:
        assert TOKEN not in text
    # Every file under the temporary root: Hearth's home, its logs, settings and crash log, and the user's
    # home (where huggingface_hub's own token file would be).
    written = every_file_under(tmp_path)
    # Refused by the Hub, the stored token stays where the user put it.
    lost = int(HubToken().get() != TOKEN)
    fault(
        CATEGORY,
        "token leak search after GUI, CLI, 401 and uncaught exceptions",
        trials=len(written),
        outcome="token in no file, log, crash report, message or exception text; the stored token kept",
        lost={"secrets": lost},
    )
    assert lost == 0
    assert home.settings_path in written and home.log_file in written
    assert files_holding(tmp_path, TOKEN) == []
