"""Models from other apps in the library panel, driven like a user: the real window and services over an
Ollama store and a user folder laid out under the test's home."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTableWidget
from pytestqt.qtbot import QtBot

from app.model_scan import add_folder
from app.paths import HearthPaths
from app.settings import load_settings
from tests.app.model_scan.layouts import isolate_app_folders, ollama_model, tiny_model
from tests.helpers.ui_fixtures import GuiSessions, click
from tests.ui.test_ui_library import open_library
from ui.library_panel import LibraryPanel
from ui.library_scan import ModelScanDialog

pytestmark = pytest.mark.gui

WAIT_MS = 30_000


@pytest.fixture(autouse=True)
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return isolate_app_folders(monkeypatch, tmp_path / "user-home")


@pytest.fixture
def home(hermetic_home: Path) -> HearthPaths:
    return HearthPaths(hermetic_home).ensure()


@pytest.fixture
def ollama_blob(user_home: Path, tmp_path: Path) -> Path:
    return ollama_model(
        user_home / ".ollama" / "models",
        "registry.ollama.ai/library/tiny:1b",
        tiny_model(tmp_path / "t.gguf", "T"),
    )


def names(table: QTableWidget) -> list[str]:
    return [item.text() for row in range(table.rowCount()) if (item := table.item(row, 0)) is not None]


def wait_scan_dialog(qtbot: QtBot, panel: LibraryPanel) -> ModelScanDialog:
    qtbot.waitUntil(lambda: panel.scan_dialog is not None and panel.scan_dialog.isVisible(), timeout=WAIT_MS)
    dialog = panel.scan_dialog
    assert dialog is not None
    return dialog


def add_all(qtbot: QtBot, dialog: ModelScanDialog) -> None:
    qtbot.waitUntil(lambda: dialog.addButton.isEnabled(), timeout=WAIT_MS)
    click(dialog.addButton)
    qtbot.waitUntil(lambda: "Added" in dialog.statusLabel.text(), timeout=WAIT_MS)


def test_the_first_open_shows_what_other_apps_have_and_adds_it_in_place(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, ollama_blob: Path
) -> None:
    before = ollama_blob.stat()
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)

    dialog = wait_scan_dialog(qtbot, panel)
    qtbot.waitUntil(lambda: names(dialog.table) == ["tiny:1b"], timeout=WAIT_MS)
    state = dialog.table.item(0, 3)
    assert state is not None and state.text() == "New: adds as tiny-1b"
    first = dialog.table.item(0, 0)
    assert first is not None and first.checkState() == Qt.CheckState.Checked
    qtbot.waitUntil(lambda: load_settings(home.settings_path).models_scan_offered, timeout=WAIT_MS)

    add_all(qtbot, dialog)
    assert "Added 1 models to the library, where they are." in dialog.statusLabel.text()
    qtbot.waitUntil(lambda: "tiny-1b" in names(panel.installedTable), timeout=WAIT_MS)
    state = dialog.table.item(0, 3)
    assert state is not None and state.text() == "In the library as tiny-1b"
    after = ollama_blob.stat()
    assert (after.st_ino, after.st_nlink, after.st_mtime_ns) == (
        before.st_ino,
        before.st_nlink,
        before.st_mtime_ns,
    )
    assert not any(p.is_file() for p in home.models_dir.rglob("*"))
    dialog.close()


def test_it_is_shown_once(qtbot: QtBot, gui: GuiSessions, home: HearthPaths, ollama_blob: Path) -> None:
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    wait_scan_dialog(qtbot, panel).close()
    session.close()

    again = gui.open(home, preload_model=False)
    panel = open_library(qtbot, again)
    qtbot.wait(300)
    assert panel.scan_dialog is None
    # The button still finds them.
    click(panel.scanButton)
    dialog = wait_scan_dialog(qtbot, panel)
    qtbot.waitUntil(lambda: names(dialog.table) == ["tiny:1b"], timeout=WAIT_MS)
    dialog.close()


def test_nothing_is_shown_when_no_app_has_models(qtbot: QtBot, gui: GuiSessions, home: HearthPaths) -> None:
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    qtbot.wait(300)
    assert panel.scan_dialog is None
    assert not load_settings(home.settings_path).models_scan_offered

    click(panel.scanButton)
    dialog = wait_scan_dialog(qtbot, panel)
    qtbot.waitUntil(lambda: "No GGUF models found" in dialog.statusLabel.text(), timeout=WAIT_MS)
    assert dialog.table.rowCount() == 0 and not dialog.addButton.isEnabled()
    dialog.close()


def test_a_file_that_disappears_shows_as_missing_and_remove_only_forgets(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, ollama_blob: Path, tmp_path: Path
) -> None:
    folder_model = tiny_model(tmp_path / "my-models" / "mine.gguf", "Mine")
    add_folder(home.home, tmp_path / "my-models")
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    dialog = wait_scan_dialog(qtbot, panel)
    qtbot.waitUntil(lambda: sorted(names(dialog.table)) == ["mine", "tiny:1b"], timeout=WAIT_MS)
    add_all(qtbot, dialog)
    dialog.close()
    qtbot.waitUntil(lambda: {"mine", "tiny-1b"} <= set(names(panel.installedTable)), timeout=WAIT_MS)

    folder_model.unlink()
    session.services.library_service.refresh()
    qtbot.waitUntil(lambda: "mine · missing" in names(panel.installedTable), timeout=WAIT_MS)
    row = names(panel.installedTable).index("mine · missing")
    panel.installedTable.selectRow(row)
    assert not panel.loadButton.isEnabled()
    assert panel.deleteButton.isEnabled()

    row = names(panel.installedTable).index("tiny-1b")
    panel.installedTable.selectRow(row)
    click(panel.deleteButton)
    assert session.answers.confirmations[-1] == (
        f"Remove tiny-1b from the library? Its file stays where it is, in {ollama_blob.parent}."
    )
    qtbot.waitUntil(lambda: "tiny-1b" not in names(panel.installedTable), timeout=WAIT_MS)
    assert ollama_blob.is_file()
