"""The Documents panel in the window: collections of real files indexed off the GUI thread by the real
bundled embedding model, each file's status and reason, Cancel, changed files, removing paths and
collections, the errors a user can cause; and a chat answering from a chosen collection (the real starter
model), with its Sources."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from PySide6.QtCore import QItemSelectionModel, Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from app.documents.library import IndexProgress, RefreshReport
from app.paths import HearthPaths
from app.qt.documents_service import IndexingProgress
from app.settings import Settings, save_settings
from tests.helpers.collection_files import BROKEN, handbook, notes
from tests.helpers.ui_fixtures import GuiSession, GuiSessions, click, click_conversation, rows, titles
from ui.documents_panel import DocumentsPanel
from ui.main_window import MainWindow

pytestmark = pytest.mark.gui

INDEX_TIMEOUT_MS = 180_000
REPLY_TIMEOUT_MS = 180_000


@pytest.fixture
def home(hermetic_home: Path) -> HearthPaths:
    return HearthPaths(hermetic_home)


class Passes:
    """The passes the window's service ran: their progress, their reports, and the threads they ran on."""

    def __init__(self, session: GuiSession, monkeypatch: pytest.MonkeyPatch) -> None:
        self.steps: list[IndexingProgress] = []
        self.reports: list[RefreshReport | None] = []
        self.threads: list[threading.Thread] = []
        service = session.services.documents_service
        service.progressed.connect(self.steps.append)
        service.indexingFinished.connect(lambda _name, report: self.reports.append(report))
        library = session.services.documents
        real_refresh = library.refresh

        def refresh(
            name: str,
            progress: Callable[[IndexProgress], None] | None = None,
            cancel: threading.Event | None = None,
        ) -> RefreshReport:
            self.threads.append(threading.current_thread())
            return real_refresh(name, progress, cancel)

        monkeypatch.setattr(library, "refresh", refresh)

    def wait(self, qtbot: QtBot, count: int) -> RefreshReport:
        qtbot.waitUntil(lambda: len(self.reports) >= count, timeout=INDEX_TIMEOUT_MS)
        report = self.reports[count - 1]
        assert report is not None
        return report


def _open_panel(window: MainWindow) -> DocumentsPanel:
    window.documentsAction.trigger()
    dialog = window.open_documents()
    assert dialog.isVisible()
    return dialog.panel


def _new_collection(qtbot: QtBot, session: GuiSession, panel: DocumentsPanel, name: str) -> None:
    session.answers.text = name
    click(panel.newButton)
    qtbot.waitUntil(lambda: panel.selected() == name)


def _statuses(panel: DocumentsPanel) -> dict[str, tuple[str, str, str]]:
    """By file name: (status, passages, reason), as the table shows them."""
    return {
        Path(path).name: (status, passages, reason)
        for path, (_shown, status, passages, reason) in panel.file_rows().items()
    }


def _column(panel: DocumentsPanel) -> list[str]:
    """The status column, in the table's order (by path)."""
    return [status for status, _passages, _reason in _statuses(panel).values()]


def _collection_rows(panel: DocumentsPanel) -> list[tuple[str, str]]:
    items = [panel.collectionList.topLevelItem(i) for i in range(panel.collectionList.topLevelItemCount())]
    return [(item.text(0), item.text(1)) for item in items if item is not None]


def _status_text(window: MainWindow) -> str:
    return window.statusBar().currentMessage()


def _select_root(panel: DocumentsPanel, root: Path) -> None:
    (item,) = [
        panel.rootList.item(i)
        for i in range(panel.rootList.count())
        if panel.rootList.item(i).text() == str(root)
    ]
    panel.rootList.setCurrentItem(item, QItemSelectionModel.SelectionFlag.ClearAndSelect)


@pytest.mark.model
def test_a_folder_is_indexed_off_the_gui_thread_and_each_file_shows_its_status(
    qtbot: QtBot,
    gui: GuiSessions,
    home: HearthPaths,
    embedding_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = gui.open(home, preload_model=False)
    window = session.window
    passes = Passes(session, monkeypatch)
    folder = handbook(tmp_path / "handbook")
    panel = _open_panel(window)
    assert panel.emptyLabel.isVisible()
    _new_collection(qtbot, session, panel, "handbook")

    session.answers.folder = folder
    click(panel.addFolderButton)
    qtbot.waitUntil(lambda: panel.progressRow.isVisible(), timeout=INDEX_TIMEOUT_MS)
    assert panel.cancelButton.isEnabled()
    report = passes.wait(qtbot, 1)

    (thread,) = passes.threads
    assert thread is not threading.main_thread() and thread.name.startswith("hearth-indexing")
    assert report.indexed == 3 and len(report.failed) == 1
    final = passes.steps[-1]
    assert (final.done, final.total, final.path) == (4, 4, "")
    assert [s.done for s in passes.steps if s.total] == [0, 1, 2, 3, 4]
    qtbot.waitUntil(lambda: not panel.progressRow.isVisible())
    # The table is listed again after each file; the last listing comes after the pass.
    qtbot.waitUntil(lambda: _column(panel) == ["Failed", "Indexed", "Indexed", "Indexed"])
    shown = _statuses(panel)
    assert set(shown) == {"leave.docx", "tides.pdf", "lamp.md", BROKEN}
    for name in ("leave.docx", "tides.pdf", "lamp.md"):
        status, passages, reason = shown[name]
        assert (status, reason) == ("Indexed", "") and int(passages) >= 1, name
    status, passages, reason = shown[BROKEN]
    assert status == "Failed" and passages == "" and BROKEN in reason and "\n" not in reason
    # Files are listed under the folder they were found in.
    assert panel.file_rows()[str(folder / "lamp.md")][0] == str(Path("handbook", "lamp.md"))
    assert [panel.rootList.item(i).text() for i in range(panel.rootList.count())] == [str(folder)]
    assert "3 indexed" in panel.summaryLabel.text() and "1 failed" in panel.summaryLabel.text()
    assert "handbook" in panel.statusLabel.text() and "1 failed" in panel.statusLabel.text()
    # The collections are listed again after the pass.
    qtbot.waitUntil(lambda: _collection_rows(panel) == [("handbook", "3 of 4")])


@pytest.mark.model
def test_cancel_stops_indexing_midway_and_refresh_finishes_it(
    qtbot: QtBot,
    gui: GuiSessions,
    home: HearthPaths,
    embedding_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    count = 30
    session = gui.open(home, preload_model=False)
    window = session.window
    passes = Passes(session, monkeypatch)
    folder = notes(tmp_path / "ships", count)
    panel = _open_panel(window)
    _new_collection(qtbot, session, panel, "ships")
    session.answers.folder = folder
    click(panel.addFolderButton)
    qtbot.waitUntil(lambda: any(s.done >= 2 for s in passes.steps), timeout=INDEX_TIMEOUT_MS)
    assert panel.progressRow.isVisible() and panel.progressBar.maximum() == count
    click(panel.cancelButton)
    report = passes.wait(qtbot, 1)

    assert report.cancelled and 2 <= report.indexed < count
    qtbot.waitUntil(lambda: not panel.progressRow.isVisible())
    assert "cancelled" in panel.statusLabel.text()
    # Consistent: each file is indexed (with passages) or waiting (with none), and the counts agree.
    qtbot.waitUntil(
        lambda: _column(panel).count("Indexed") == report.indexed and "Indexing…" not in _column(panel)
    )
    shown = _statuses(panel)
    assert len(shown) == count
    assert {status for status, _p, _r in shown.values()} == {"Indexed", "Waiting"}
    assert all((passages != "") == (status == "Indexed") for status, passages, _r in shown.values())
    stored = session.services.documents.collections.files("ships")
    assert sum(f.status == "indexed" for f in stored) == report.indexed

    click(panel.refreshButton)
    again = passes.wait(qtbot, 2)
    assert not again.cancelled and again.indexed == count - report.indexed
    qtbot.waitUntil(lambda: set(_column(panel)) == {"Indexed"})
    assert all(t.name.startswith("hearth-indexing") for t in passes.threads)


@pytest.mark.model
def test_a_file_changed_on_disk_is_indexed_again_without_asking_and_refresh_still_works(
    qtbot: QtBot,
    gui: GuiSessions,
    home: HearthPaths,
    embedding_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = gui.open(home, preload_model=False)
    window = session.window
    passes = Passes(session, monkeypatch)
    folder = handbook(tmp_path / "handbook")
    panel = _open_panel(window)
    _new_collection(qtbot, session, panel, "handbook")
    session.answers.folder = folder
    click(panel.addFolderButton)
    passes.wait(qtbot, 1)
    qtbot.waitUntil(lambda: _column(panel) == ["Failed", "Indexed", "Indexed", "Indexed"])

    # The folder is watched while the app runs: an edit is indexed again by itself.
    (folder / "lamp.md").write_text(
        "# The lamp\n\nThe spare key now hangs on the hook by the door.\n\n## Oil\n\nFill it at dusk.\n",
        encoding="utf-8",
    )
    report = passes.wait(qtbot, 2)
    assert report.indexed == 1 and report.unchanged == 3
    qtbot.waitUntil(lambda: _column(panel) == ["Failed", "Indexed", "Indexed", "Indexed"])
    hits = session.services.documents.search_collection("handbook", "where does the spare key hang")
    assert "hook by the door" in hits[0].text

    click(panel.refreshButton)
    report = passes.wait(qtbot, 3)
    assert report.indexed == 0 and report.unchanged == 4


@pytest.mark.model
def test_what_changed_while_the_app_was_closed_is_indexed_when_it_opens(
    qtbot: QtBot,
    gui: GuiSessions,
    home: HearthPaths,
    embedding_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = handbook(tmp_path / "handbook")
    first = gui.open(home, preload_model=False)
    passes = Passes(first, monkeypatch)
    panel = _open_panel(first.window)
    _new_collection(qtbot, first, panel, "handbook")
    first.answers.folder = folder
    click(panel.addFolderButton)
    passes.wait(qtbot, 1)
    first.close()

    (folder / "tides.md").write_text("# Tides\n\nHigh water at the harbour is at noon.\n", encoding="utf-8")
    second = gui.open(home, preload_model=False)
    store = second.services.documents.collections

    def tides_indexed() -> bool:
        return {Path(f.path).name: f.status for f in store.files("handbook")}.get("tides.md") == "indexed"

    # Nobody asks: the pass runs as the window opens.
    qtbot.waitUntil(tides_indexed, timeout=INDEX_TIMEOUT_MS)
    hits = second.services.documents.search_collection("handbook", "when is high water")
    assert "noon" in hits[0].text


@pytest.mark.model
def test_removing_a_path_and_a_collection(
    qtbot: QtBot,
    gui: GuiSessions,
    home: HearthPaths,
    embedding_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    session = gui.open(home, preload_model=False)
    window, answers = session.window, session.answers
    passes = Passes(session, monkeypatch)
    folder = handbook(tmp_path / "handbook")
    memo = tmp_path / "memo.txt"
    memo.write_text("Bring the spare wick to the harbour office.\n", encoding="utf-8")
    panel = _open_panel(window)
    _new_collection(qtbot, session, panel, "harbour")
    answers.open_paths = [memo]
    click(panel.addFilesButton)
    passes.wait(qtbot, 1)
    answers.folder = folder
    click(panel.addFolderButton)
    passes.wait(qtbot, 2)
    qtbot.waitUntil(lambda: len(_statuses(panel)) == 5)
    assert not panel.removePathButton.isEnabled()

    _select_root(panel, folder)
    click(panel.removePathButton)
    qtbot.waitUntil(lambda: set(_statuses(panel)) == {"memo.txt"})
    assert [panel.rootList.item(i).text() for i in range(panel.rootList.count())] == [str(memo)]
    stored = session.services.documents.collections.files("harbour")
    assert [Path(f.path).name for f in stored] == ["memo.txt"]
    # The user's files stay where they are.
    assert (folder / "lamp.md").is_file()

    answers.confirm = False
    click(panel.deleteButton)
    assert len(answers.confirmations) == 1 and "harbour" in answers.confirmations[0]
    assert session.services.documents.collections.list() != []
    answers.confirm = True
    click(panel.deleteButton)
    qtbot.waitUntil(lambda: panel.emptyLabel.isVisible())
    assert session.services.documents.collections.list() == []
    assert panel.selected() is None and not panel.deleteButton.isEnabled()
    assert memo.is_file()


def test_errors_a_user_can_cause_are_one_line_in_the_status_bar(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths, tmp_path: Path
) -> None:
    session = gui.open(home, preload_model=False)
    window, answers = session.window, session.answers
    panel = _open_panel(window)
    _new_collection(qtbot, session, panel, "handbook")

    def fails(act: Callable[[], None], *expected: str) -> None:
        window.statusBar().clearMessage()
        act()
        qtbot.waitUntil(lambda: _status_text(window) != "")
        message = _status_text(window)
        assert all(part in message for part in expected), message
        assert "\n" not in message

    answers.text = "handbook"
    fails(lambda: click(panel.newButton), "already exists")
    answers.text = "bad\x07name"
    fails(lambda: click(panel.newButton), "control characters")
    answers.folder = tmp_path / "gone"
    fails(lambda: click(panel.addFolderButton), "No such file or folder", "gone")
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    answers.open_paths = [pipe]
    fails(lambda: click(panel.addFilesButton), "neither a file nor a folder")
    if os.geteuid() != 0:  # root reads every file whatever its permissions
        locked = tmp_path / "locked"
        locked.mkdir(mode=0)
        answers.folder = locked
        try:
            fails(lambda: click(panel.addFolderButton), "Cannot read", "permission denied")
        finally:
            locked.chmod(0o700)
    # Nothing was added, nothing is indexing.
    assert session.services.documents.collections.get("handbook").roots == ()
    assert not panel.progressRow.isVisible()
    # Cancelling the name question makes nothing.
    answers.text = None
    click(panel.newButton)
    assert [s.name for s in session.services.documents_service.collections()] == ["handbook"]


def test_the_panel_opens_from_the_menu_and_from_the_collections_menu(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths
) -> None:
    window = gui.open(home, preload_model=False).window
    assert window.documentsAction.shortcut().toString() == "Ctrl+Shift+D"
    picker = window.collectionPicker
    picker.fill_menu()
    labels = [action.text() for action in picker.menu.actions() if not action.isSeparator()]
    assert labels == ["No collections yet", "Manage collections…"]
    (manage,) = [a for a in picker.menu.actions() if a.objectName() == "manageCollectionsAction"]
    manage.trigger()
    dialog = window.open_documents()
    assert dialog.isVisible() and dialog.windowTitle() == "Documents"


@pytest.mark.model
def test_a_chat_answers_from_a_chosen_collection_and_lists_its_sources(
    qtbot: QtBot,
    gui: GuiSessions,
    home: HearthPaths,
    starter_model: Path,
    embedding_model: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    save_settings(home.settings_path, Settings(max_tokens=8, temperature=0.0))
    session = gui.open(home)
    window = session.window
    passes = Passes(session, monkeypatch)
    folder = handbook(tmp_path / "handbook")
    panel = _open_panel(window)
    _new_collection(qtbot, session, panel, "handbook")
    session.answers.folder = folder
    click(panel.addFolderButton)
    passes.wait(qtbot, 1)
    window.open_documents().reject()

    picker = window.collectionPicker
    picker.fill_menu()
    (choice,) = [a for a in picker.menu.actions() if a.text() == "handbook"]
    assert choice.isCheckable() and not choice.isChecked()
    choice.trigger()
    assert picker.chosen() == ("handbook",)
    assert [chip.label.text() for chip in picker.chips] == ["Collection: handbook"]

    window.composer.setPlainText("Where is the spare key to the lamp room?")
    # The meter counts what the collection's passages may take before Send.
    meter = window.contextMeter
    qtbot.waitUntil(
        lambda: meter.usage is not None and meter.usage.collections == ("handbook",), timeout=60_000
    )
    usage = meter.usage
    assert usage is not None and usage.document_tokens > 0 and usage.passage_tokens > 0
    assert (
        meter.documents.text()
        == f"Documents: up to {usage.document_tokens:,} tokens · passages from handbook"
    )
    assert "searched when you send: handbook." in meter.documents.toolTip()
    click(window.sendButton)
    qtbot.waitUntil(lambda: window.stopButton.isEnabled(), timeout=5000)
    qtbot.waitUntil(
        lambda: window.sendButton.isEnabled() and not window.stopButton.isEnabled(), timeout=REPLY_TIMEOUT_MS
    )
    conversation_id = window.current_conversation_id
    assert conversation_id is not None
    _prompt, reply = session.services.store.list_messages(conversation_id)
    assert reply.sources, "the reply was given no passages"
    assert {part.meta["collection"] for part in reply.sources} == {"handbook"}
    best = reply.sources[0]
    assert best.text is not None and "third blue flowerpot" in best.text
    assert best.name is not None and Path(best.name).name == "lamp.md"
    # The transcript lists them under the reply.
    qtbot.waitUntil(lambda: bool(rows(window, "assistant")[0].entry.sources))
    assert rows(window, "assistant")[0].entry.sources[0].name == reply.sources[0].name

    # The choice is the conversation's: a new chat starts with none, and it comes back with the chat.
    window.new_chat()
    assert picker.chosen() == ()
    click_conversation(qtbot, window, titles(window)[0])
    assert picker.chosen() == ("handbook",)
    # The chip's × stops answering from it.
    QTest.mouseClick(picker.chips[0].removeButton, Qt.MouseButton.LeftButton)
    assert picker.chosen() == () and window.session.collections == ()
