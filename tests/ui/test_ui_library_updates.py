"""Model updates in the library panel, driven like a user: a model downloaded from the local hub server, its
upstream file replaced by a new commit on main (`ServedRepo.replace_upstream`), then "Check for updates" and
"Update" with the real services and Downloader."""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.cli.main import main as cli_main
from app.library.installed import InstalledModel
from app.library.updates import ModelUpdate, UpdateReport, load_report, save_report
from app.paths import HearthPaths
from app.settings import Settings, load_settings, save_settings
from tests.helpers.gguf_factory import TensorSpec, gguf_bytes
from tests.helpers.hubserver import HubServer, ServedFile, ServedRepo
from tests.helpers.ui_fixtures import GuiSession, GuiSessions, click
from tests.ui.test_ui_library import open_library
from ui.library_panel import DATA_ROLE, LibraryPanel
from ui.theme import resolve_theme

pytestmark = pytest.mark.gui

REPO = "someone/tiny-GGUF"
FILENAME = "tiny-Q8_0.gguf"
WAIT_MS = 30_000


def tiny_model() -> ServedFile:
    """A small valid GGUF model; random tensor bytes make every call a different file."""
    data = gguf_bytes(
        {"general.architecture": "llama", "llama.block_count": 2},
        [TensorSpec("blk.0.attn_q.weight", (256, 64), 0, data=os.urandom(256 * 64 * 4))],
    )
    return ServedFile.from_bytes(FILENAME, data)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def home(hermetic_home: Path, hub: HubServer) -> HearthPaths:
    paths = HearthPaths(hermetic_home).ensure()
    save_settings(paths.settings_path, Settings(hf_endpoint=hub.url))
    return paths


@pytest.fixture
def repo(hub: HubServer) -> ServedRepo:
    served = hub.add_repo(REPO, [tiny_model()])
    assert cli_main(["models", "download", REPO, "--endpoint", hub.url]) == 0
    return served


def installed(session: GuiSession) -> InstalledModel:
    [model] = [m for m in session.services.library.list_models() if m.repo_id == REPO]
    return model


def row_of(panel: LibraryPanel, name: str) -> int:
    table = panel.installedTable
    for row in range(table.rowCount()):
        item = table.item(row, 0)
        if item is not None and item.data(DATA_ROLE) == name:
            return row
    return -1


def name_cell(panel: LibraryPanel, name: str) -> str:
    row = row_of(panel, name)
    item = panel.installedTable.item(row, 0) if row >= 0 else None
    return item.text() if item is not None else ""


def select(qtbot: QtBot, panel: LibraryPanel, name: str) -> None:
    qtbot.waitUntil(lambda: row_of(panel, name) >= 0, timeout=WAIT_MS)
    panel.installedTable.selectRow(row_of(panel, name))


def wait_badge(qtbot: QtBot, panel: LibraryPanel, name: str) -> None:
    qtbot.waitUntil(lambda: name_cell(panel, name) == f"{name} · update available", timeout=WAIT_MS)


def listing_requests(hub: HubServer) -> int:
    return len(hub.requests_to(f"/api/models/{REPO}"))


def test_check_shows_the_badge_and_update_switches_to_the_upstream_bytes(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, repo: ServedRepo
) -> None:
    session = gui.open(home, preload_model=False)
    before = installed(session)
    panel = open_library(qtbot, session)
    select(qtbot, panel, before.name)
    assert not panel.updateButton.isEnabled()

    new = tiny_model()
    commit = repo.replace_upstream(new)
    click(panel.checkUpdatesButton)
    wait_badge(qtbot, panel, before.name)
    assert "Updates available for 1 of 1 models from the Hub." in panel.statusLabel.text()
    item = panel.installedTable.item(row_of(panel, before.name), 0)
    assert item is not None
    assert item.foreground().color() == QColor(resolve_theme(session.services.settings.theme).accent)
    tooltip = item.toolTip()
    assert REPO in tooltip and FILENAME in tooltip and commit[:12] in tooltip
    assert "another app" not in tooltip
    saved = load_report(home.home)
    assert saved is not None and [u.upstream_sha256 for u in saved.updates] == [new.sha256]

    select(qtbot, panel, before.name)
    qtbot.waitUntil(panel.updateButton.isEnabled, timeout=WAIT_MS)
    click(panel.updateButton)
    qtbot.waitUntil(
        lambda: f"Updated {before.name} to commit {commit[:12]}" in panel.statusLabel.text(), timeout=WAIT_MS
    )
    after = installed(session)
    assert after.id == before.id and after.sha256 == new.sha256 and sha256(after.path) == new.sha256
    assert not before.path.exists()
    qtbot.waitUntil(lambda: name_cell(panel, before.name) == before.name, timeout=WAIT_MS)
    assert not panel.updateButton.isEnabled()
    row = panel.downloads.rows[f"update:{before.name}"]
    assert row.state.installed is not None and row.state.installed.sha256 == new.sha256
    saved = load_report(home.home)
    assert saved is not None and saved.updates == ()


def test_wrong_bytes_from_the_server_say_why_and_leave_the_old_model_intact(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, repo: ServedRepo
) -> None:
    session = gui.open(home, preload_model=False)
    before = installed(session)
    panel = open_library(qtbot, session)
    repo.replace_upstream(tiny_model())
    click(panel.checkUpdatesButton)
    wait_badge(qtbot, panel, before.name)
    hub.faults.flip_byte_at = 1000

    select(qtbot, panel, before.name)
    click(panel.updateButton)
    qtbot.waitUntil(lambda: f"{before.name} was not updated" in panel.statusLabel.text(), timeout=WAIT_MS)
    status = panel.statusLabel.text()
    assert "SHA-256" in status and "is unchanged" in status
    assert installed(session) == before
    assert before.path.exists() and sha256(before.path) == before.sha256
    # Still listed as updatable: the user may try again.
    assert name_cell(panel, before.name) == f"{before.name} · update available"
    assert panel.updateButton.isEnabled()


def test_the_saved_report_badges_at_open_without_the_network(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, repo: ServedRepo
) -> None:
    session = gui.open(home, preload_model=False)
    model = installed(session)
    update = ModelUpdate(model.name, REPO, FILENAME, model.sha256, "b" * 64, "c" * 40, True)
    save_report(home.home, UpdateReport((update,), 2, (), datetime.now(UTC)))
    hub.stop()

    panel = open_library(qtbot, session)
    wait_badge(qtbot, panel, model.name)
    tooltip = panel.installedTable.item(row_of(panel, model.name), 0).toolTip()  # type: ignore[union-attr]
    assert "c" * 12 in tooltip and "Hearth&#x27;s own models folder" in tooltip
    assert not session.services.library_service.checking_updates


def test_a_saved_report_s_errors_show_in_the_status_line(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, repo: ServedRepo
) -> None:
    from app.library.updates import UpdateProblem

    save_report(home.home, UpdateReport((), 1, (UpdateProblem("gone", "not on main"),), datetime.now(UTC)))
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    qtbot.waitUntil(lambda: "could not check 1 models" in panel.statusLabel.text(), timeout=WAIT_MS)
    assert "gone: not on main" in panel.statusLabel.toolTip()


@pytest.mark.parametrize("enabled", [False, True])
def test_the_daily_check_runs_at_open_only_when_the_setting_is_on(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, repo: ServedRepo, enabled: bool
) -> None:
    save_settings(home.settings_path, Settings(hf_endpoint=hub.url, check_updates_daily=enabled))
    repo.replace_upstream(tiny_model())
    session = gui.open(home, preload_model=False)
    name = installed(session).name
    requests = listing_requests(hub)
    panel = open_library(qtbot, session)
    if enabled:
        wait_badge(qtbot, panel, name)
        assert load_report(home.home) is not None
    else:
        qtbot.wait(1000)
        assert name_cell(panel, name) == name
        assert listing_requests(hub) == requests and load_report(home.home) is None


def test_the_daily_check_toggle_is_saved(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths
) -> None:
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    click(panel.hubSettingsButton)
    dialog = panel.settings_dialog
    assert dialog is not None
    box = dialog.hubPage.checkUpdatesDaily
    assert not box.isChecked()
    QTest.mouseClick(box, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: load_settings(home.settings_path).check_updates_daily, timeout=WAIT_MS)
    assert session.services.settings.check_updates_daily
    QTest.mouseClick(box, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not load_settings(home.settings_path).check_updates_daily, timeout=WAIT_MS)
