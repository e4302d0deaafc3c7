"""GGUF files and folders dropped on the window go to the library: copied in off the GUI thread, each one's
fate said in the import window (imported, already there, or why not); other files dropped with them are
attached as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QMimeData, QPointF, Qt, QUrl
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import QApplication
from pytestqt.qtbot import QtBot

from app.paths import HearthPaths
from tests.app.model_scan.layouts import tiny_model
from tests.conftest import starter_model_file
from tests.helpers.ui_fixtures import GuiSessions
from ui.main_window import MainWindow
from ui.model_import import ModelImportDialog

pytestmark = pytest.mark.gui
WAIT_MS = 30_000


def drop(window: MainWindow, *paths: Path) -> None:
    """As a file manager drops them on the transcript."""
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path)) for path in paths])
    viewport = window.transcript.viewport()
    at = QPointF(viewport.rect().center())
    copy, no_buttons, no_keys = (
        Qt.DropAction.CopyAction,
        Qt.MouseButton.NoButton,
        Qt.KeyboardModifier.NoModifier,
    )
    enter = QDragEnterEvent(at.toPoint(), copy, mime, no_buttons, no_keys)
    QApplication.sendEvent(viewport, enter)
    assert enter.isAccepted()
    QApplication.sendEvent(viewport, QDropEvent(at, copy, mime, no_buttons, no_keys))


def import_window(qtbot: QtBot, window: MainWindow) -> ModelImportDialog:
    dialog = window.findChild(ModelImportDialog)
    assert dialog is not None, "no import window"
    qtbot.waitUntil(lambda: not dialog.busy, timeout=WAIT_MS)
    return dialog


def test_a_dropped_model_is_imported_and_a_file_beside_it_attached(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path, tmp_path: Path
) -> None:
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    window = session.window
    model = tiny_model(tmp_path / "downloads" / "Tiny-Q4_0.gguf", "Tiny")
    notes = tmp_path / "notes.txt"
    notes.write_text("tides at six", encoding="utf-8")
    drop(window, model, notes)

    dialog = import_window(qtbot, window)
    assert dialog.outcomesLabel.text() == "Imported Tiny-Q4_0."
    assert dialog.button.text() == "Close"
    library = session.services.library
    imported = library.get("Tiny-Q4_0")
    assert imported.path.parent == library.models_dir and model.is_file(), "copied, the original left"
    # The picker lists it once the library was read again.
    qtbot.waitUntil(lambda: window.modelPicker.findData("Tiny-Q4_0") >= 0, timeout=WAIT_MS)
    qtbot.waitUntil(lambda: not window.chatArea.attachments.reading, timeout=WAIT_MS)
    assert [chip.label.text().split(" · ")[0] for chip in window.chatArea.attachments.chips] == ["notes.txt"]

    # The same file again: said to be there already, under its name, and not copied twice.
    drop(window, model)
    dialog = import_window(qtbot, window)
    assert dialog.outcomesLabel.text() == "Tiny-Q4_0.gguf is already in the library as Tiny-Q4_0."
    assert [m.name for m in library.list_models() if m.name.startswith("Tiny")] == ["Tiny-Q4_0"]


def test_a_dropped_folder_imports_its_models_and_says_why_a_file_was_not(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path, tmp_path: Path
) -> None:
    window = gui.open(HearthPaths(hermetic_home), preload_model=False).window
    folder = tmp_path / "models"
    tiny_model(folder / "a" / "Alpha.gguf", "Alpha")
    tiny_model(folder / "Beta.gguf", "Beta")
    (folder / "Broken.gguf").write_bytes(b"GGUF but not really" * 10)
    drop(window, folder)

    dialog = import_window(qtbot, window)
    lines = dialog.outcomesLabel.text().splitlines()
    assert "Imported Alpha." in lines and "Imported Beta." in lines
    [broken] = [line for line in lines if line.startswith("Broken.gguf")]
    assert broken.startswith("Broken.gguf was not imported: ")
    assert not any(p.name.startswith("Broken") for p in (hermetic_home / "models").glob("*")), "nothing kept"

    # Nothing that is a model: said so.
    empty = tmp_path / "empty"
    empty.mkdir()
    drop(window, empty)
    dialog = import_window(qtbot, window)
    assert dialog.outcomesLabel.text() == "Nothing to import: no GGUF models among what was dropped."


def test_a_cancelled_import_keeps_nothing_of_the_file(
    gui: GuiSessions, qtbot: QtBot, hermetic_home: Path, tmp_path: Path
) -> None:
    """The starter model (98 MB) is copied in 4 MB chunks; Cancel is pressed as the first chunk is done."""
    starter = starter_model_file()
    if starter is None:
        pytest.skip("the starter model package is not installed")
    dropped = tmp_path / "Starter copy.gguf"
    dropped.hardlink_to(starter)
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    window = session.window
    library = session.services.library
    before = {m.name for m in library.list_models()}
    dialog = window.import_models([dropped])
    assert dialog is not None
    importer = dialog.importer
    # On the copy's own thread, so the very next chunk sees it: no race with the GUI thread.
    importer.progress.connect(lambda *_: importer.cancel(), Qt.ConnectionType.DirectConnection)
    dialog = import_window(qtbot, window)
    assert (
        dialog.outcomesLabel.text()
        == "Cancelled: Starter copy.gguf was not imported, and nothing of it was kept."
    )
    assert {m.name for m in library.list_models()} == before
    assert not [p.name for p in library.models_dir.iterdir() if p.name.startswith("Starter copy")]
