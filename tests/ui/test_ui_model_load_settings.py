"""The load settings window of an installed model, driven like a user: the real window and services, the
starter model's real header, and the settings stored in the library."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtWidgets import QComboBox
from pytestqt.qtbot import QtBot

from app.library.load_settings import DRAFT_MODEL_TOKENS, PROMPT_LOOKUP_TOKENS, ModelLoadSettings
from app.paths import HearthPaths
from inference.protocol import LoadPlan
from tests.helpers.ui_fixtures import GuiSession, GuiSessions, click
from tests.ui.test_ui_library import click_row, column, open_library
from ui.library_panel import LibraryPanel
from ui.model_load_settings import ModelLoadSettingsDialog

pytestmark = pytest.mark.gui

WAIT_MS = 30_000


def starter(session: GuiSession, starter_model: Path) -> str:
    (model,) = [m for m in session.services.library.list_models() if m.path == starter_model]
    return model.name


def open_settings(qtbot: QtBot, panel: LibraryPanel, name: str) -> ModelLoadSettingsDialog:
    qtbot.waitUntil(lambda: name in column(panel.installedTable, 0), timeout=WAIT_MS)
    click_row(panel.installedTable, name)
    click(panel.loadSettingsButton)
    dialog = panel.load_settings_dialog
    assert dialog is not None
    qtbot.waitExposed(dialog)
    assert dialog.model.name == name
    return dialog


def choose(combo: QComboBox, data: object) -> None:
    index = combo.findData(data)
    assert index >= 0, (combo.objectName(), data)
    combo.setCurrentIndex(index)


def planned(qtbot: QtBot, dialog: ModelLoadSettingsDialog) -> LoadPlan:
    qtbot.waitUntil(lambda: dialog.current_plan is not None, timeout=WAIT_MS)
    assert dialog.current_plan is not None
    return dialog.current_plan


def test_a_quantized_kv_cache_needs_flash_attention_then_saves_and_reopens_with_its_settings(
    qtbot: QtBot, gui: GuiSessions, hermetic_home: Path, starter_model: Path
) -> None:
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    name = starter(session, starter_model)
    panel = open_library(qtbot, session)
    assert not panel.loadSettingsButton.isEnabled()  # nothing selected yet
    dialog = open_settings(qtbot, panel, name)
    assert dialog.windowTitle() == f"Load settings: {name}"

    # Every control at Automatic, and the plan a load would use now.
    assert dialog.settings() == (ModelLoadSettings(), ())
    assert dialog.kvCombo.currentText() == "Automatic"
    assert dialog.gpuLayersSpin.text() == "Automatic"
    automatic = planned(qtbot, dialog)
    assert automatic.kv_type == "f16"
    assert "KV cache f16" in dialog.planLabel.text()
    assert dialog.reasonLabel.text() == f"Why: {automatic.reason}"
    assert dialog.saveButton.isEnabled()

    # This machine has no GPU: the GPU controls say so instead of offering choices.
    hardware = session.services.gpu_monitor.latest or session.services.hardware
    if not hardware.gpus:
        for widget in (dialog.mainGpuCombo, dialog.tensorSplitEdit):
            assert not widget.isEnabled()
            assert "No GPU was found" in widget.toolTip()
    else:
        assert dialog.mainGpuCombo.isEnabled() and dialog.tensorSplitEdit.isEnabled()

    choose(dialog.kvCombo, "q8_0")
    choose(dialog.flashCombo, "off")
    assert dialog.problemsLabel.isVisible()
    assert "A quantized V cache (q8_0) needs flash attention" in dialog.problemsLabel.text()
    assert not dialog.saveButton.isEnabled()
    assert dialog.current_plan is None

    choose(dialog.flashCombo, "on")
    assert not dialog.problemsLabel.isVisible()
    assert dialog.saveButton.isEnabled()
    quantized = planned(qtbot, dialog)
    assert quantized.kv_type == "q8_0" and quantized.flash_attn
    assert "KV cache q8_0" in dialog.planLabel.text()
    assert "flash attention on" in dialog.planLabel.text()
    assert quantized.predicted_bytes["kv"] < automatic.predicted_bytes["kv"]
    assert sum(quantized.predicted_bytes.values()) < sum(automatic.predicted_bytes.values())

    dialog.threadsSpin.setValue(1)
    assert planned(qtbot, dialog).n_threads == 1
    assert "Prompt lookup" not in dialog.planLabel.text()
    dialog.promptLookupCheck.setChecked(True)
    assert planned(qtbot, dialog).draft_tokens == PROMPT_LOOKUP_TOKENS
    assert f"Prompt lookup guesses up to {PROMPT_LOOKUP_TOKENS} tokens" in dialog.planLabel.text()
    click(dialog.saveButton)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=WAIT_MS)
    wanted = ModelLoadSettings(kv_cache_type="q8_0", flash_attention="on", threads=1, prompt_lookup=True)
    assert session.services.library.get(name).load_settings == wanted
    assert "loads with kv_cache_type=q8_0" in panel.statusLabel.text()

    # Reopened, the window shows what was saved.
    dialog = open_settings(qtbot, panel, name)
    assert dialog.kvCombo.currentData() == "q8_0"
    assert dialog.flashCombo.currentData() == "on"
    assert dialog.threadsSpin.value() == 1
    assert dialog.promptLookupCheck.isChecked()
    assert dialog.settings() == (wanted, ())
    assert planned(qtbot, dialog).kv_type == "q8_0"

    click(dialog.resetButton)
    assert dialog.settings() == (ModelLoadSettings(), ())
    assert dialog.kvCombo.currentText() == "Automatic"
    assert dialog.threadsSpin.text() == "Automatic"
    assert not dialog.promptLookupCheck.isChecked()
    assert planned(qtbot, dialog).kv_type == "f16"
    click(dialog.saveButton)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=WAIT_MS)
    assert session.services.library.get(name).load_settings.automatic


def test_more_gpu_layers_or_threads_than_there_are_is_a_problem(
    qtbot: QtBot, gui: GuiSessions, hermetic_home: Path, starter_model: Path
) -> None:
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    name = starter(session, starter_model)
    panel = open_library(qtbot, session)
    dialog = open_settings(qtbot, panel, name)
    model = session.services.library.get(name)
    assert model.n_layers
    # The spin box stops at the model's layers: all of them on the GPU is the most there is.
    assert dialog.gpuLayersSpin.maximum() == model.n_layers
    dialog.gpuLayersSpin.setValue(0)
    assert dialog.settings()[0].gpu_layers == 0
    assert planned(qtbot, dialog).n_gpu_layers == 0

    # A typed tensor split that is not numbers is reported, not saved.
    dialog.tensorSplitEdit.setText("three,one")
    assert "tensor_split must be numbers" in dialog.problemsLabel.text()
    assert not dialog.saveButton.isEnabled()
    dialog.tensorSplitEdit.setText("")
    assert dialog.saveButton.isEnabled()

    dialog.contextSpin.setValue(2048)
    assert planned(qtbot, dialog).n_ctx == 2048
    assert "2,048-token context" in dialog.planLabel.text()


def test_a_draft_model_is_chosen_from_the_library_and_one_that_cannot_guess_is_not_saved(
    qtbot: QtBot, gui: GuiSessions, hermetic_home: Path, starter_model: Path, variants: dict[str, Path]
) -> None:
    """The draft list holds the other installed models, smallest first; the starter's weights as Q8_0 (one
    vocabulary) guess for it, and the plan says so; with prompt lookup on too, the window says one of them
    must go."""
    session = gui.open(HearthPaths(hermetic_home), preload_model=False)
    name = starter(session, starter_model)
    copy = session.services.library.import_file(variants["Q8_0"], name="draft-copy")
    panel = open_library(qtbot, session)
    dialog = open_settings(qtbot, panel, name)
    qtbot.waitUntil(lambda: dialog.draftCombo.count() == 2, timeout=WAIT_MS)
    assert dialog.draftCombo.currentText() == "None"
    assert dialog.draftCombo.itemText(1).startswith("draft-copy (")

    choose(dialog.draftCombo, copy.name)
    plan = planned(qtbot, dialog)
    assert plan.draft_model_path == str(copy.path) and plan.draft_tokens == DRAFT_MODEL_TOKENS
    assert (
        f"The draft model {copy.path.name} guesses up to {DRAFT_MODEL_TOKENS} tokens"
        in dialog.planLabel.text()
    )
    assert plan.predicted_bytes["draft"] > 0

    dialog.promptLookupCheck.setChecked(True)
    assert "prompt_lookup and draft_model both guess" in dialog.problemsLabel.text()
    assert not dialog.saveButton.isEnabled()
    dialog.promptLookupCheck.setChecked(False)
    click(dialog.saveButton)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=WAIT_MS)
    assert session.services.library.get(name).load_settings == ModelLoadSettings(draft_model=copy.name)

    # The draft forgotten, the window still shows the stored name, marked, until it is changed.
    session.services.library.remove(copy.name, delete_file=True)
    dialog = open_settings(qtbot, panel, name)
    qtbot.waitUntil(lambda: dialog.draftCombo.currentText() == "draft-copy (not installed)", timeout=WAIT_MS)
    assert "draft model draft-copy not in the library, not used" in planned(qtbot, dialog).reason
    choose(dialog.draftCombo, None)
    click(dialog.saveButton)
    qtbot.waitUntil(lambda: not dialog.isVisible(), timeout=WAIT_MS)
    assert session.services.library.get(name).load_settings.automatic
