"""The library panel, driven like a user: the real window and services against the local hub server
serving real GGUF bytes (the starter model and quantizations derived from it)."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backend import KeyringBackend
from keyring.backends import fail
from PySide6.QtCore import QPoint, Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QLineEdit, QSpinBox, QTableWidget, QTableWidgetItem
from pytestqt.qtbot import QtBot

from app.cli.main import main as cli_main
from app.library.downloads import local_path
from app.logging_setup import configure_logging
from app.paths import HearthPaths
from app.settings import Settings, load_settings, save_settings
from tests.helpers.hubserver import HubServer, ServedFile, starter_file
from tests.helpers.model_shapes import deepseek_v2_lite_file
from tests.helpers.projectors import projector_bytes
from tests.helpers.ui_fixtures import (
    GuiSession,
    GuiSessions,
    Ticker,
    click,
    click_conversation,
    seed_conversation,
)
from ui.library_downloads import DownloadRow
from ui.library_panel import RECOMMENDED_ROLE, LibraryDialog, LibraryPanel
from ui.library_settings import HubSettingsPage
from ui.theme import resolve_theme

pytestmark = pytest.mark.gui

REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
GATED = "google/gemma-3-270m-it-GGUF"
TOKEN = "hf_LibraryPanelTokenLibraryPanel012345"
INSTALLED_NAME = "SmolLM2-135M-Instruct.Q4_1"
WAIT_MS = 30_000
LOAD_MS = 120_000
# The longest the GUI thread may go without running a 10 ms timer while the keyring hangs.
MAX_EVENT_LOOP_GAP_S = 0.5


@pytest.fixture
def home(hermetic_home: Path, hub: HubServer) -> HearthPaths:
    """A home whose Hub endpoint is the local server (one test sets it through the dialog instead)."""
    paths = HearthPaths(hermetic_home).ensure()
    save_settings(paths.settings_path, Settings(hf_endpoint=hub.url))
    return paths


@pytest.fixture
def starter_repo(hub: HubServer) -> ServedFile:
    starter = starter_file()
    hub.add_repo(REPO, [starter], downloads=1234, likes=7)
    return starter


# -- driving the panel ---------------------------------------------------------------------------


def open_library(qtbot: QtBot, session: GuiSession) -> LibraryPanel:
    session.window.modelsAction.trigger()
    dialog = session.window.findChild(LibraryDialog)
    assert dialog is not None
    qtbot.waitExposed(dialog)
    return dialog.panel


def type_into(widget: QLineEdit | QSpinBox, text: str) -> None:
    widget.setFocus()
    QTest.keyClick(widget, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    QTest.keyClicks(widget, text)


def click_row(table: QTableWidget, text: str) -> None:
    matches = table.findItems(text, Qt.MatchFlag.MatchExactly)
    assert matches, f"{text!r} is not in {table.objectName()}"
    table.scrollToItem(matches[0])
    point = table.visualItemRect(matches[0]).center()
    QTest.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point))


def cell(table: QTableWidget, row: int, index: int) -> QTableWidgetItem:
    item = table.item(row, index)
    assert item is not None, (table.objectName(), row, index)
    return item


def column(table: QTableWidget, index: int) -> list[str]:
    return [cell(table, row, index).text() for row in range(table.rowCount())]


def search(qtbot: QtBot, panel: LibraryPanel, query: str, expect: str) -> None:
    type_into(panel.searchBox, query)
    QTest.keyClick(panel.searchBox, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: expect in column(panel.resultsTable, 0), timeout=WAIT_MS)


def open_repo(qtbot: QtBot, panel: LibraryPanel, repo_id: str, rows: int) -> None:
    search(qtbot, panel, repo_id.split("/")[1], repo_id)
    click_row(panel.resultsTable, repo_id)
    qtbot.waitUntil(lambda: panel.quantTable.rowCount() == rows, timeout=WAIT_MS)


def plan_for(qtbot: QtBot, panel: LibraryPanel, *, vram: int, ram: int) -> None:
    type_into(panel.vramSpin, str(vram))
    type_into(panel.ramSpin, str(ram))
    qtbot.waitUntil(lambda: (panel.vramSpin.value(), panel.ramSpin.value()) == (vram, ram))


def download_row(qtbot: QtBot, panel: LibraryPanel, filename: str) -> DownloadRow:
    key = f"{REPO}/{filename}"
    qtbot.waitUntil(lambda: key in panel.downloads.rows, timeout=WAIT_MS)
    return panel.downloads.rows[key]


def wait_done(qtbot: QtBot, row: DownloadRow, at_least: int) -> int:
    qtbot.waitUntil(lambda: row.state.done >= at_least, timeout=WAIT_MS)
    return row.state.done


def wait_status(qtbot: QtBot, panel: LibraryPanel, text: str, timeout: int = WAIT_MS) -> None:
    qtbot.waitUntil(lambda: text in panel.statusLabel.text(), timeout=timeout)


def install_with_the_cli(hub: HubServer, *args: str) -> None:
    """Test set-up: the same back end the panel uses, without the clicks."""
    assert cli_main(["models", "download", REPO, *args, "--endpoint", hub.url]) == 0


def open_settings(qtbot: QtBot, panel: LibraryPanel) -> HubSettingsPage:
    click(panel.hubSettingsButton)
    dialog = panel.settings_dialog
    assert dialog is not None
    qtbot.waitExposed(dialog)
    return dialog.hubPage


def save_token(qtbot: QtBot, panel: LibraryPanel, token: str) -> None:
    """Save `token` from the library's settings page into the keyring, and close the page."""
    page = open_settings(qtbot, panel)
    type_into(page.tokenEdit, token)
    click(page.saveTokenButton)
    qtbot.waitUntil(lambda: "saved in the system keyring" in page.tokenStatus.text(), timeout=WAIT_MS)
    page.window().close()


def files_holding(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


# -- search and the quantization table -----------------------------------------------------------


def test_search_shows_downloads_likes_licence_and_gated_at_the_endpoint_set_in_settings(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, hermetic_home: Path, starter_repo: ServedFile
) -> None:
    hub.add_repo(GATED, [starter_file()], gated="manual", license="gemma", downloads=99, likes=3)
    paths = HearthPaths(hermetic_home)
    session = gui.open(paths, preload_model=False)
    QTest.keySequence(session.window, QKeySequence("Ctrl+Shift+M"))
    dialog = session.window.findChild(LibraryDialog)
    assert dialog is not None and dialog.isVisible()
    panel = dialog.panel

    page = open_settings(qtbot, panel)
    type_into(page.endpointEdit, "ftp://mirror.example")
    click(page.applyEndpointButton)
    assert "not an http(s) URL" in page.endpointStatus.text()
    type_into(page.endpointEdit, hub.url)
    click(page.applyEndpointButton)
    assert page.endpointStatus.text() == f"Searches and downloads use {hub.url}."
    qtbot.waitUntil(lambda: load_settings(paths.settings_path).hf_endpoint == hub.url)

    search(qtbot, panel, "gguf", REPO)
    table = panel.resultsTable
    assert [column(table, i) for i in range(5)] == [
        [REPO, GATED],
        ["1,234", "99"],
        ["7", "3"],
        ["apache-2.0", "gemma"],
        ["", "gated"],
    ]
    assert panel.searchStatus.text() == "2 repositories with GGUF files match “gguf”."
    assert len(hub.requests_to("/api/models")) == 1


def test_a_repo_shows_each_quantization_with_its_fit_and_highlights_the_one_recommended(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, variants: dict[str, Path]
) -> None:
    files = [starter_file(), *(ServedFile.from_path(p.name, p) for p in variants.values())]
    hub.add_repo(REPO, files)
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    plan_for(qtbot, panel, vram=0, ram=16_000)
    open_repo(qtbot, panel, REPO, rows=4)

    table = panel.quantTable
    assert sorted(column(table, 0)) == ["Q3_K_M", "Q4_1", "Q4_K_M", "Q8_0"]
    sizes = dict(zip(column(table, 0), column(table, 1), strict=True))
    assert sizes["Q4_1"] == "93.8 MiB" and sizes["Q8_0"] == "138.1 MiB"
    assert all(badge.startswith(("CPU only", "★ CPU only")) for badge in column(table, 2))
    # The context the load would get (the setting, 4,096), and the most that fits (the training length).
    assert set(column(table, 3)) == {"4,096 (max 8,192)"}
    assert all(memory.startswith("RAM ") for memory in column(table, 4))
    assert "no GPU (no GPU (what-if override))" in panel.repoLabel.text()
    assert "16,000 MiB of RAM" in panel.repoLabel.text()

    recommended = [row for row in range(table.rowCount()) if cell(table, row, 0).data(RECOMMENDED_ROLE)]
    assert [cell(table, row, 0).text() for row in recommended] == ["Q8_0"]
    highlight = resolve_theme(session.services.settings.theme).hit_bg
    for row in range(table.rowCount()):
        brushes = [cell(table, row, c).background() for c in range(table.columnCount())]
        if row in recommended:
            assert {b.color().name() for b in brushes} == {highlight} and cell(table, row, 0).font().bold()
        else:
            assert {b.style() for b in brushes} == {Qt.BrushStyle.NoBrush}
    assert cell(table, recommended[0], 2).text() == "★ CPU only · recommended"
    assert [item.row() for item in table.selectedItems()][:1] == recommended
    assert panel.downloadButton.isEnabled()
    assert panel.repoMessage.text().startswith("Recommended: Q8_0 runs in system memory")

    # What if this machine had a GPU with 8 GiB free: every file fits on it.
    plan_for(qtbot, panel, vram=8_000, ram=16_000)
    qtbot.waitUntil(lambda: set(column(table, 2)) >= {"Fits on the GPU"}, timeout=WAIT_MS)
    assert all(memory.startswith("GPU ") for memory in column(table, 4))
    assert "what-if GPU with 8,000 MiB free" in panel.repoLabel.text()

    # Too little memory anywhere: nothing recommended, and the panel says why before any download.
    plan_for(qtbot, panel, vram=0, ram=50)
    qtbot.waitUntil(lambda: set(column(table, 2)) == {"Too large"}, timeout=WAIT_MS)
    assert not any(cell(table, row, 0).data(RECOMMENDED_ROLE) for row in range(table.rowCount()))
    assert panel.repoMessage.text().startswith("No file fits in system memory (50 MiB available)")
    assert all(r.headers.get("range") for r in hub.requests_to("/resolve/"))


# -- downloads ------------------------------------------------------------------------------------


def test_a_mixture_of_experts_file_shows_the_faster_placement_with_its_experts_in_ram(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, tmp_path: Path
) -> None:
    path = deepseek_v2_lite_file(tmp_path)  # header only: 16 GB, sparse
    hub.add_repo(
        "deepseek/V2-Lite-GGUF", [ServedFile("V2-Lite-Q8_0.gguf", path.stat().st_size, "0" * 64, path=path)]
    )
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    plan_for(qtbot, panel, vram=6000, ram=64_000)
    open_repo(qtbot, panel, "deepseek/V2-Lite-GGUF", rows=1)

    table = panel.quantTable
    assert column(table, 2) == ["★ Partial: experts in system memory, ~17% speed · recommended"]
    assert column(table, 4)[0].startswith("GPU ")
    assert "against 12% with 6/27 whole layers on the GPU" in cell(table, 0, 2).toolTip()


def test_a_download_shows_live_progress_then_the_model_is_installed_and_in_the_picker(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, starter_repo: ServedFile
) -> None:
    hub.faults.rate_bps = 30_000_000
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    open_repo(qtbot, panel, REPO, rows=1)
    click(panel.downloadButton)
    row = download_row(qtbot, panel, starter_repo.filename)

    first = wait_done(qtbot, row, 10_000_000)
    qtbot.waitUntil(lambda: "MiB/s" in row.detail.text() and " left" in row.detail.text())
    seen = row.bar.value()
    assert 0 < seen < row.bar.maximum() and row.pauseButton.text() == "Pause"
    wait_done(qtbot, row, first + 10_000_000)
    assert row.bar.value() > seen

    qtbot.waitUntil(lambda: row.state.state == "installed", timeout=WAIT_MS)
    assert row.detail.text() == f"Verified (SHA-256) and installed as {INSTALLED_NAME}."
    assert row.bar.value() == row.bar.maximum() and not row.pauseButton.isVisible()
    qtbot.waitUntil(lambda: INSTALLED_NAME in column(panel.installedTable, 0))
    installed = column(panel.installedTable, 0).index(INSTALLED_NAME)
    assert cell(panel.installedTable, installed, 2).text() == "93.8 MiB"
    assert cell(panel.installedTable, installed, 3).text() == REPO
    qtbot.waitUntil(lambda: session.window.modelPicker.findData(INSTALLED_NAME) >= 0)
    qtbot.waitUntil(lambda: panel.diskLabel.text().startswith("Models use 93.8 MiB;"))


def test_pause_then_resume_completes_with_a_verified_file(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, starter_repo: ServedFile
) -> None:
    hub.faults.rate_bps = 20_000_000
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    open_repo(qtbot, panel, REPO, rows=1)
    click(panel.downloadButton)
    row = download_row(qtbot, panel, starter_repo.filename)
    wait_done(qtbot, row, 10_000_000)

    click(row.pauseButton)
    qtbot.waitUntil(lambda: row.state.state == "paused", timeout=WAIT_MS)
    assert row.pauseButton.text() == "Resume" and row.detail.text().startswith("Paused at ")
    target = local_path(home.models_dir, REPO, starter_repo.filename)
    kept = target.with_name(target.name + ".part").stat().st_size
    assert 10_000_000 <= kept < starter_repo.size and not target.exists()

    hub.faults.rate_bps = None
    click(row.pauseButton)
    qtbot.waitUntil(lambda: row.state.state == "installed", timeout=WAIT_MS)
    assert hub.requests_to("/resolve/")[-1].headers["range"] == f"bytes={kept}-"
    assert hashlib.sha256(target.read_bytes()).hexdigest() == starter_repo.sha256

    qtbot.waitUntil(lambda: INSTALLED_NAME in column(panel.installedTable, 0))
    click_row(panel.installedTable, INSTALLED_NAME)
    click(panel.verifyButton)
    wait_status(qtbot, panel, "OK, every byte matches")


def test_cancel_deletes_the_partial_download(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, starter_repo: ServedFile
) -> None:
    hub.faults.rate_bps = 10_000_000
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    open_repo(qtbot, panel, REPO, rows=1)
    click(panel.downloadButton)
    row = download_row(qtbot, panel, starter_repo.filename)
    wait_done(qtbot, row, 3_000_000)
    folder = local_path(home.models_dir, REPO, starter_repo.filename).parent
    assert any(p.name.endswith(".part") for p in folder.iterdir())

    click(row.cancelButton)
    qtbot.waitUntil(lambda: row.state.state == "cancelled", timeout=WAIT_MS)
    assert row.detail.text() == "Cancelled; the partial file was deleted."
    assert not row.pauseButton.isVisible() and not row.cancelButton.isVisible()
    assert [p.name for p in folder.iterdir()] == []
    assert INSTALLED_NAME not in column(panel.installedTable, 0)


def test_a_gated_repo_whose_licence_was_not_accepted_says_so(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths
) -> None:
    hub.add_repo(GATED, [starter_file()], gated="manual", license="gemma")
    hub.valid_tokens.add(TOKEN)
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    page = open_settings(qtbot, panel)
    type_into(page.tokenEdit, TOKEN)
    click(page.saveTokenButton)
    assert page.tokenEdit.text() == ""
    qtbot.waitUntil(lambda: "saved in the system keyring" in page.tokenStatus.text(), timeout=WAIT_MS)
    page.window().close()

    open_repo(qtbot, panel, GATED, rows=1)
    licence = f"Accept the licence on the model page {hub.url}/{GATED}"
    qtbot.waitUntil(lambda: licence in panel.repoMessage.text(), timeout=WAIT_MS)
    assert "HTTP 403" in panel.repoMessage.text()
    assert column(panel.quantTable, 2) == ["Header unreadable"]
    assert ", gated" in panel.repoLabel.text()

    click_row(panel.quantTable, "Q4_1")
    click(panel.downloadButton)
    row = panel.downloads.rows[f"{GATED}/{starter_file().filename}"]
    qtbot.waitUntil(lambda: row.state.state == "failed", timeout=WAIT_MS)
    assert licence in row.detail.text() and row.pauseButton.text() == "Retry"
    assert {r.authorization for r in hub.requests_to("/resolve/")} == {f"Bearer {TOKEN}"}


# -- installed models -----------------------------------------------------------------------------


def test_verify_says_ok_then_finds_a_flipped_byte(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, starter_repo: ServedFile
) -> None:
    install_with_the_cli(hub)
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    qtbot.waitUntil(lambda: INSTALLED_NAME in column(panel.installedTable, 0), timeout=WAIT_MS)
    click_row(panel.installedTable, INSTALLED_NAME)
    click(panel.verifyButton)
    assert panel.busyBar.isVisible() and not panel.verifyButton.isEnabled()
    wait_status(qtbot, panel, f"{INSTALLED_NAME}: OK, every byte matches the SHA-256 recorded at install.")
    assert not panel.busyBar.isVisible()

    path = local_path(home.models_dir, REPO, starter_repo.filename)
    with path.open("r+b") as file:
        file.seek(5000)
        byte = file.read(1)
        file.seek(5000)
        file.write(bytes([byte[0] ^ 0xFF]))
    click(panel.verifyButton)
    wait_status(qtbot, panel, f"{INSTALLED_NAME} is damaged or missing")


def test_delete_asks_first_then_removes_the_model_and_its_file(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, starter_repo: ServedFile
) -> None:
    install_with_the_cli(hub)
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    qtbot.waitUntil(lambda: INSTALLED_NAME in column(panel.installedTable, 0), timeout=WAIT_MS)
    assert session.window.modelPicker.findData(INSTALLED_NAME) >= 0
    path = local_path(home.models_dir, REPO, starter_repo.filename)
    click_row(panel.installedTable, INSTALLED_NAME)

    session.answers.confirm = False
    click(panel.deleteButton)
    assert session.answers.confirmations == [f"Delete {INSTALLED_NAME}? This frees 93.8 MiB."]
    assert path.exists() and INSTALLED_NAME in column(panel.installedTable, 0)

    session.answers.confirm = True
    click(panel.deleteButton)
    wait_status(qtbot, panel, f"Deleted {INSTALLED_NAME}; freed 93.8 MiB.")
    qtbot.waitUntil(lambda: INSTALLED_NAME not in column(panel.installedTable, 0))
    assert not path.exists() and not path.parent.exists()
    qtbot.waitUntil(lambda: session.window.modelPicker.findData(INSTALLED_NAME) < 0)
    qtbot.waitUntil(lambda: panel.diskLabel.text().startswith("Models use 0.0 MiB;"))


@pytest.mark.model
def test_switching_to_a_downloaded_model_loads_it_keeps_the_chat_and_reports_memory(
    qtbot: QtBot,
    gui: GuiSessions,
    hub: HubServer,
    home: HearthPaths,
    starter_model: Path,
    variants: dict[str, Path],
) -> None:
    q8 = ServedFile.from_path(variants["Q8_0"].name, variants["Q8_0"])
    hub.add_repo(REPO, [q8])
    session = gui.open(home)
    window, chat = session.window, session.services.chat
    qtbot.waitUntil(lambda: chat.current_status().state == "ready", timeout=LOAD_MS)
    seed_conversation(qtbot, session, "Packing list")
    click_conversation(qtbot, window, "Packing list")
    conversation = window.current_conversation_id

    panel = open_library(qtbot, session)
    # The model loaded at start-up already has its memory report.
    qtbot.waitUntil(
        lambda: panel.memoryLabel.text().startswith("SmolLM2-135M-Instruct-Q4_1: memory predicted ")
    )
    open_repo(qtbot, panel, REPO, rows=1)
    click(panel.downloadButton)
    row = download_row(qtbot, panel, q8.filename)
    qtbot.waitUntil(lambda: row.state.state == "installed", timeout=WAIT_MS)
    name = "SmolLM2-135M-Instruct.Q8_0"
    qtbot.waitUntil(lambda: name in column(panel.installedTable, 0), timeout=WAIT_MS)
    runner_pid = chat.engine.client.pid

    click_row(panel.installedTable, name)
    click(panel.loadButton)
    assert panel.busyBar.isVisible() and panel.statusLabel.text() == f"Loading {name}…"
    wait_status(qtbot, panel, f"{name} is loaded.", timeout=LOAD_MS)

    loaded = chat.engine.loaded
    assert loaded is not None and Path(loaded.model_path) == local_path(home.models_dir, REPO, q8.filename)
    assert chat.current_status().model_name == name
    assert panel.memoryLabel.text().startswith(f"{name}: memory predicted ")
    assert ", actual " in panel.memoryLabel.text()
    assert window.current_conversation_id == conversation
    current = window.conversationList.currentItem()
    assert current is not None and current.text() == "Packing list"
    qtbot.waitUntil(lambda: window.modelPicker.currentData() == name)
    assert session.services.settings.default_model == name
    # The app went on running throughout: same window, and the runner is still the one it started.
    assert chat.engine.client.pid == runner_pid


# -- the token ------------------------------------------------------------------------------------


def test_without_a_keyring_the_token_is_kept_for_the_session_and_the_window_says_why(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths
) -> None:
    hub.add_repo(REPO, [starter_file()], private=True)
    hub.valid_tokens.add(TOKEN)
    keyring.set_keyring(fail.Keyring())  # type: ignore[no-untyped-call]
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    page = open_settings(qtbot, panel)
    qtbot.waitUntil(lambda: "No system keyring" in page.tokenStatus.text(), timeout=WAIT_MS)
    assert page.tokenStatus.text().startswith("No token. The system keyring cannot be used:")

    type_into(page.tokenEdit, TOKEN)
    QTest.keyClick(page.tokenEdit, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: page.tokenStatus.text().startswith("Session only:"), timeout=WAIT_MS)
    assert "No system keyring is available" in page.tokenStatus.text()
    assert TOKEN not in page.tokenStatus.text() and page.tokenEdit.text() == ""

    # The session's token opens the private repo (pasting its id opens it: searches leave it out).
    page.window().close()
    type_into(panel.searchBox, REPO)
    QTest.keyClick(panel.searchBox, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: panel.quantTable.rowCount() == 1, timeout=WAIT_MS)
    assert hub.requests_to("/api/models/")[-1].authorization == f"Bearer {TOKEN}"
    assert files_holding(home.home, TOKEN) == []


class HangingKeyring(KeyringBackend):
    """A keyring that never answers (Secret Service waiting on an unlock prompt nobody sees)."""

    priority = 1

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.release = threading.Event()
        self.threads: list[str] = []

    def _hang(self) -> None:
        self.threads.append(threading.current_thread().name)
        self.release.wait()

    def get_password(self, service: str, username: str) -> str | None:
        self._hang()
        return None

    def set_password(self, service: str, username: str, password: str) -> None:
        self._hang()

    def delete_password(self, service: str, username: str) -> None:
        self._hang()


@pytest.fixture
def hanging_keyring() -> Iterator[HangingKeyring]:
    backend = HangingKeyring()
    keyring.set_keyring(backend)
    yield backend
    backend.release.set()


def test_a_hanging_keyring_never_blocks_the_window(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, hanging_keyring: HangingKeyring
) -> None:
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    ticker = Ticker()
    started = time.monotonic()
    page = open_settings(qtbot, panel)
    assert page.tokenStatus.text() == "Asking the system keyring…"
    type_into(page.tokenEdit, TOKEN)
    click(page.saveTokenButton)
    qtbot.waitUntil(lambda: page.tokenStatus.text().startswith("Session only:"), timeout=WAIT_MS)
    ended = time.monotonic()
    ticker.stop()
    assert "did not answer" in page.tokenStatus.text()
    gap = ticker.max_gap_between(started, ended)
    assert gap < MAX_EVENT_LOOP_GAP_S, f"the event loop stalled for {gap:.3f} s on the keyring"
    assert hanging_keyring.threads and "MainThread" not in hanging_keyring.threads


def test_the_token_never_reaches_a_file_or_a_log(
    qtbot: QtBot,
    gui: GuiSessions,
    hub: HubServer,
    home: HearthPaths,
    hearth_logger: logging.Logger,
    caplog: pytest.LogCaptureFixture,
) -> None:
    hub.add_repo(REPO, [starter_file()], private=True)
    hub.valid_tokens.add(TOKEN)
    configure_logging(home, verbose=True)
    caplog.set_level(logging.DEBUG)
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    save_token(qtbot, panel, TOKEN)

    type_into(panel.searchBox, REPO)
    QTest.keyClick(panel.searchBox, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: panel.downloadButton.isEnabled(), timeout=WAIT_MS)
    click(panel.downloadButton)
    row = download_row(qtbot, panel, starter_file().filename)
    qtbot.waitUntil(lambda: row.state.state == "installed", timeout=WAIT_MS)
    assert {r.authorization for r in hub.requests_to("/resolve/")} == {f"Bearer {TOKEN}"}

    session.close()
    for handler in hearth_logger.handlers:
        handler.flush()
    assert home.log_file.stat().st_size > 0
    assert files_holding(home.home, TOKEN) == []
    assert not [r for r in caplog.records if TOKEN in r.getMessage()]


def test_a_vision_model_shows_its_projector_downloads_with_it_and_is_marked_in_the_picker(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths
) -> None:
    projector = ServedFile.from_bytes("mmproj-F16.gguf", projector_bytes())
    hub.add_repo(REPO, [starter_file(), projector], downloads=1234)
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    open_repo(qtbot, panel, REPO, rows=1)
    files = cell(panel.quantTable, 0, 5)
    assert files.text() == f"{starter_file().filename} + vision projector mmproj-F16.gguf"
    assert "about 256 tokens of the context" in files.toolTip()

    click(panel.downloadButton)
    shown = f"{INSTALLED_NAME} · vision"
    qtbot.waitUntil(lambda: shown in column(panel.installedTable, 0), timeout=WAIT_MS)
    installed = session.services.library.get(INSTALLED_NAME)
    assert installed.projector is not None and installed.projector.sha256 == projector.sha256
    picker = session.window.modelPicker
    qtbot.waitUntil(lambda: picker.findData(INSTALLED_NAME) >= 0)
    index = picker.findData(INSTALLED_NAME)
    assert picker.itemText(index) == shown
    assert "mmproj-F16.gguf" in picker.itemData(index, Qt.ItemDataRole.ToolTipRole)
