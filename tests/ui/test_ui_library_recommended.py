"""The library's place to start, driven like a user: the recommended models shipped with Hearth before any
search, their sizes and fits read from the local hub server (every curated repo served with real GGUF
bytes: quantizations of the starter model, and an 8B-shaped header for the Llama entry) when asked for."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem
from pytestqt.qtbot import QtBot

from app.library.recommended import RecommendedModel, load_recommended
from app.paths import HearthPaths
from app.settings import Settings, save_settings
from tests.helpers.hubserver import HubServer, ServedFile
from tests.helpers.model_shapes import llama3_8b_file
from tests.helpers.ui_fixtures import GuiSessions, click
from tests.ui.test_ui_library import open_library
from ui.library_panel import LibraryPanel
from ui.library_widgets import format_bytes

pytestmark = pytest.mark.gui

WAIT_MS = 30_000
LLAMA = "bartowski/Meta-Llama-3.1-8B-Instruct-GGUF"
SMOL = "HuggingFaceTB/SmolLM2-1.7B-Instruct-GGUF"
UNCHECKED = "Sizes and fit not checked yet"


@pytest.fixture
def home(hermetic_home: Path, hub: HubServer) -> HearthPaths:
    paths = HearthPaths(hermetic_home).ensure()
    save_settings(paths.settings_path, Settings(hf_endpoint=hub.url))
    return paths


@pytest.fixture
def entries() -> tuple[RecommendedModel, ...]:
    shipped = load_recommended()
    assert {LLAMA, SMOL} <= {e.repo_id for e in shipped}
    return shipped


@pytest.fixture
def curated(
    hub: HubServer, variants: dict[str, Path], tmp_path: Path, entries: tuple[RecommendedModel, ...]
) -> dict[str, ServedFile]:
    """Every shipped entry's repo, with its suggested file (SmolLM2-1.7B with a Q8_0 beside it)."""
    suggested: dict[str, ServedFile] = {}
    for entry in entries:
        name = entry.repo_id.split("/")[1].removesuffix("-GGUF")
        if entry.repo_id == LLAMA:
            path = llama3_8b_file(tmp_path, "Q4_K_M")
            file = ServedFile(f"{name}-Q4_K_M.gguf", path.stat().st_size, "0" * 64, path=path)
        else:
            file = ServedFile.from_path(f"{name}-{entry.quantization}.gguf", variants["Q4_K_M"])
        extra = [ServedFile.from_path(f"{name}-Q8_0.gguf", variants["Q8_0"])] if entry.repo_id == SMOL else []
        hub.add_repo(entry.repo_id, [file, *extra])
        suggested[entry.repo_id] = file
    return suggested


# -- driving the panel ---------------------------------------------------------------------------


def groups(tree: QTreeWidget) -> dict[str, list[str]]:
    """Each group's heading and its entries' repo ids, as shown."""
    shown: dict[str, list[str]] = {}
    for index in range(tree.topLevelItemCount()):
        heading = tree.topLevelItem(index)
        assert heading is not None
        children = [heading.child(i) for i in range(heading.childCount())]
        shown[heading.text(0)] = [child.text(0) for child in children if child is not None]
    return shown


def row(tree: QTreeWidget, repo_id: str) -> QTreeWidgetItem:
    matches = tree.findItems(repo_id, Qt.MatchFlag.MatchExactly | Qt.MatchFlag.MatchRecursive)
    assert len(matches) == 1, repo_id
    return matches[0]


def click_entry(tree: QTreeWidget, repo_id: str) -> None:
    item = row(tree, repo_id)
    tree.scrollToItem(item)
    # The name's own cell: the whole row is wider than the view (descriptions are long).
    point = tree.visualRect(tree.indexFromItem(item, 0)).center()
    QTest.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=QPoint(point))


def set_spin(qtbot: QtBot, panel: LibraryPanel, *, vram: int, ram: int) -> None:
    for spin, value in ((panel.vramSpin, vram), (panel.ramSpin, ram)):
        spin.setFocus()
        QTest.keyClick(spin, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
        QTest.keyClicks(spin, str(value))
    qtbot.waitUntil(lambda: (panel.vramSpin.value(), panel.ramSpin.value()) == (vram, ram))


def check(qtbot: QtBot, panel: LibraryPanel) -> None:
    view = panel.recommended
    click(view.checkButton)
    qtbot.waitUntil(lambda: view.checkButton.isEnabled() and not view.checking, timeout=WAIT_MS)


def shown_list(qtbot: QtBot, panel: LibraryPanel, count: int) -> QTreeWidget:
    tree = panel.recommended.tree
    qtbot.waitUntil(lambda: sum(len(v) for v in groups(tree).values()) == count, timeout=WAIT_MS)
    return tree


# -- the tests -----------------------------------------------------------------------------------


def test_the_recommended_list_shows_offline_then_groups_by_the_fit_read_from_the_hub_and_opens_like_a_result(
    qtbot: QtBot,
    gui: GuiSessions,
    hub: HubServer,
    home: HearthPaths,
    entries: tuple[RecommendedModel, ...],
    curated: dict[str, ServedFile],
) -> None:
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    tree = shown_list(qtbot, panel, len(entries))
    repos = [e.repo_id for e in entries]

    # Before any search: the shipped list, names, descriptions and licences, and not one request.
    assert panel.searchStack.currentWidget() is panel.recommended
    assert groups(tree) == {f"{UNCHECKED} ({len(entries)})": repos}
    for entry in entries:
        item = row(tree, entry.repo_id)
        assert [item.text(c) for c in range(1, 5)] == [
            entry.description,
            "Not checked",
            entry.quantization,
            entry.license,
        ]
    assert panel.recommended.checkButton.text() == "Check sizes and fit"
    assert hub.requests == []

    # A machine with no GPU and 2,000 MiB of RAM: the small models run in system memory, 8B does not fit.
    set_spin(qtbot, panel, vram=0, ram=2000)
    check(qtbot, panel)
    small = [r for r in repos if r != LLAMA]
    assert groups(tree) == {
        f"Runs in system memory (CPU only) ({len(small)})": small,
        "Too large for this machine (1)": [LLAMA],
    }
    assert panel.recommended.status.text() == f"Checked all {len(entries)} suggested files."
    smol = row(tree, SMOL)
    assert smol.text(2) == "CPU only"
    assert smol.text(3) == f"Q4_K_M · {format_bytes(curated[SMOL].size)}"
    assert row(tree, LLAMA).text(2) == "Too large"
    assert row(tree, LLAMA).text(3) == f"Q4_K_M · {format_bytes(curated[LLAMA].size)}"
    # The headers were read by range request, and only the suggested files' (never the Q8_0 beside one).
    reads = hub.requests_to("/resolve/")
    assert reads and all(r.headers.get("range") for r in reads)
    assert not [r for r in reads if r.path.endswith("Q8_0.gguf")]

    # Asked again for the same machine: the session's answers, no request.
    asked = len(hub.requests)
    check(qtbot, panel)
    assert len(hub.requests) == asked and len(groups(tree)) == 2

    # Planning for a 3,000 MiB GPU: the fits were for another machine until checked again.
    set_spin(qtbot, panel, vram=3000, ram=32_000)
    qtbot.waitUntil(lambda: list(groups(tree)) == [f"{UNCHECKED} ({len(entries)})"], timeout=WAIT_MS)
    check(qtbot, panel)
    assert groups(tree) == {f"Fits on the GPU ({len(small)})": small, "Partly on the GPU (1)": [LLAMA]}
    assert row(tree, LLAMA).text(2).startswith("Partial: ")

    # Opening an entry shows its quantizations, as a search result would.
    click_entry(tree, SMOL)
    qtbot.waitUntil(lambda: panel.quantTable.rowCount() == 2, timeout=WAIT_MS)
    assert panel.repoLabel.text().startswith(f"{SMOL} at ")
    assert panel.downloadButton.isEnabled()
    assert row(tree, SMOL).isSelected() and row(tree, SMOL).text(2) == "Fits on the GPU"

    # A search replaces the list; clearing the search brings it back as it was.
    panel.searchBox.setFocus()
    QTest.keyClicks(panel.searchBox, "SmolLM2")
    QTest.keyClick(panel.searchBox, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: panel.resultsTable.rowCount() == 1, timeout=WAIT_MS)
    assert panel.searchStack.currentWidget() is panel.resultsTable
    QTest.keyClick(panel.searchBox, Qt.Key.Key_A, Qt.KeyboardModifier.ControlModifier)
    QTest.keyClick(panel.searchBox, Qt.Key.Key_Backspace)
    assert panel.searchStack.currentWidget() is panel.recommended
    assert panel.searchStatus.text() == ""
    assert len(groups(tree)) == 2


def test_an_opened_recommended_repo_places_its_entry_without_checking_the_rest(
    qtbot: QtBot,
    gui: GuiSessions,
    hub: HubServer,
    home: HearthPaths,
    entries: tuple[RecommendedModel, ...],
    curated: dict[str, ServedFile],
) -> None:
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    tree = shown_list(qtbot, panel, len(entries))
    set_spin(qtbot, panel, vram=0, ram=2000)
    click_entry(tree, LLAMA)
    qtbot.waitUntil(lambda: "Too large for this machine (1)" in groups(tree), timeout=WAIT_MS)
    assert groups(tree)["Too large for this machine (1)"] == [LLAMA]
    assert groups(tree)[f"Fit not known ({len(entries) - 1})"] == [
        e.repo_id for e in entries if e.repo_id != LLAMA
    ]
    assert panel.quantTable.rowCount() == 1
    # Only the opened repo was asked for.
    assert {r.path.split("/resolve/")[0].lstrip("/") for r in hub.requests_to("/resolve/")} == {LLAMA}


def test_a_hub_that_is_down_says_so_and_keeps_the_list(
    qtbot: QtBot, gui: GuiSessions, hub: HubServer, home: HearthPaths, entries: tuple[RecommendedModel, ...]
) -> None:
    session = gui.open(home, preload_model=False)
    panel = open_library(qtbot, session)
    tree = shown_list(qtbot, panel, len(entries))
    hub.stop()
    check(qtbot, panel)

    reason = f"Could not reach the Hub at {hub.url}: could not connect."
    assert panel.recommended.status.text() == (
        f"Could not check sizes and fit: {reason} The list is still here; try again later."
    )
    assert groups(tree) == {f"Fit not known ({len(entries)})": [e.repo_id for e in entries]}
    for entry in entries:
        item = row(tree, entry.repo_id)
        assert item.text(1) == entry.description and item.text(2) == "Could not check"
        assert reason in item.toolTip(2)
    assert panel.recommended.checkButton.isEnabled()
