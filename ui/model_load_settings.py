"""How one installed model is loaded: the library panel's "Load settings…" window.

Every control starts at Automatic, which leaves the choice to inference.planner. While the user changes
them, a line shows the plan the next load would use (context, GPU layers, KV cache, flash attention,
threads, the memory it is predicted to take and whether that fits, and the planner's reason). Planning
reads the model's GGUF header, so it runs on the services' background worker, a moment after the last
change; an answer for settings changed since is dropped. Saving runs there too. Model names, paths,
reasons and problems come from files: every label is plain text and every tooltip is escaped.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path

from PySide6.QtCore import QEvent, QTimer, Signal
from PySide6.QtGui import QHideEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.errors import HearthError
from app.library.installed import InstalledModel
from app.library.load_settings import (
    KV_CACHE_CHOICES,
    MAX_CONTEXT_LENGTH,
    MAX_THREADS,
    ModelLoadSettings,
    load_settings_problems,
    parse_value,
    predicted_total_bytes,
    with_values,
)
from app.library.model_ops import installed_load_plan
from app.qt.background import describe
from app.qt.services import AppServices
from inference.hardware import HardwareReport
from inference.protocol import LoadPlan
from ui.library_widgets import format_bytes, plain_label, push_button
from ui.theme import resolve_theme

# Planning waits until the user stops changing the settings.
PLAN_DELAY_MS = 250
# Each spin box's lowest value stands for Automatic.
AUTOMATIC_LAYERS = -1
AUTOMATIC = 0
# When the header did not say how many layers the model has.
MAX_LAYERS = 1024
# What the planner's reason says when the estimate does not fit (inference.planner.plan_load).
MAY_NOT_FIT = "may not fit"


def _tooltip(text: str) -> str:
    # Qt treats a tooltip that looks like HTML as rich text; this one is always escaped rich text.
    return f"<p>{html.escape(text)}</p>" if text else ""


class ModelLoadSettingsDialog(QDialog):
    """One installed model's load settings; Save stores them, and its next load uses them."""

    # The model as stored after Save (an InstalledModel).
    saved = Signal(object)

    def __init__(self, services: AppServices, model: InstalledModel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("modelLoadSettingsDialog")
        self._services = services
        self._model = model
        # Bumped by every change: a plan computed for older settings is dropped.
        self._generation = 0
        self._saving = False
        self._problems: tuple[str, ...] = ()
        self._drafts_listed = False  # whether the draft model choices are the installed models yet
        # The latest plan shown, for the settings now in the controls (None while one is computed).
        self.current_plan: LoadPlan | None = None
        self._build()
        self._connect()
        self.retranslate()
        self.show_model(model)

    # -- construction ---------------------------------------------------------------------------

    def _build(self) -> None:
        self.modelLabel = plain_label("loadSettingsModel")
        self.kvCombo = QComboBox()
        self.kvCombo.setObjectName("kvCacheType")
        self.kvCombo.addItem("", None)
        for kv_type in KV_CACHE_CHOICES:
            self.kvCombo.addItem(kv_type, kv_type)
        self.flashCombo = QComboBox()
        self.flashCombo.setObjectName("flashAttention")
        for choice in ("auto", "on", "off"):
            self.flashCombo.addItem("", choice)
        self.gpuLayersSpin = self._spin("gpuLayers", AUTOMATIC_LAYERS, MAX_LAYERS)
        self.mainGpuCombo = QComboBox()
        self.mainGpuCombo.setObjectName("mainGpu")
        self.tensorSplitEdit = QLineEdit()
        self.tensorSplitEdit.setObjectName("tensorSplit")
        self.threadsSpin = self._spin("threads", AUTOMATIC, MAX_THREADS)
        self.mlockCheck = QCheckBox()
        self.mlockCheck.setObjectName("mlock")
        self.promptLookupCheck = QCheckBox()
        self.promptLookupCheck.setObjectName("promptLookup")
        self.contextSpin = self._spin("contextLength", AUTOMATIC, MAX_CONTEXT_LENGTH)
        self.contextSpin.setSingleStep(1024)
        self.draftCombo = QComboBox()
        self.draftCombo.setObjectName("draftModel")
        self.draftCombo.addItem("", None)

        self.form = QFormLayout()
        self._labels: dict[str, QLabel] = {}
        for key, widget in (
            ("kv", self.kvCombo),
            ("flash", self.flashCombo),
            ("layers", self.gpuLayersSpin),
            ("main_gpu", self.mainGpuCombo),
            ("split", self.tensorSplitEdit),
            ("threads", self.threadsSpin),
            ("mlock", self.mlockCheck),
            ("context", self.contextSpin),
            ("lookup", self.promptLookupCheck),
            ("draft", self.draftCombo),
        ):
            label = QLabel()
            label.setBuddy(widget)
            self._labels[key] = label
            self.form.addRow(label, widget)

        self.problemsLabel = plain_label("loadSettingsProblems")
        self.problemsLabel.setStyleSheet(f"color: {resolve_theme(self._services.settings.theme).error}")
        self.problemsLabel.hide()
        self.planLabel = plain_label("loadPlan")
        self.reasonLabel = plain_label("loadPlanReason")
        self.statusLabel = plain_label("loadSettingsStatus")
        self.resetButton = push_button("resetLoadSettings")
        self.saveButton = push_button("saveLoadSettings")
        self.closeButton = push_button("closeLoadSettings")
        buttons = QHBoxLayout()
        buttons.addWidget(self.resetButton)
        buttons.addStretch(1)
        buttons.addWidget(self.saveButton)
        buttons.addWidget(self.closeButton)
        layout = QVBoxLayout(self)
        layout.addWidget(self.modelLabel)
        layout.addLayout(self.form)
        layout.addWidget(self.problemsLabel)
        layout.addWidget(self.planLabel)
        layout.addWidget(self.reasonLabel)
        layout.addWidget(self.statusLabel)
        layout.addLayout(buttons)
        self.resize(560, 460)

        self._plan_timer = QTimer(self)
        self._plan_timer.setSingleShot(True)
        self._plan_timer.setInterval(PLAN_DELAY_MS)

    @staticmethod
    def _spin(object_name: str, lowest: int, highest: int) -> QSpinBox:
        spin = QSpinBox()
        spin.setObjectName(object_name)
        spin.setRange(lowest, highest)
        spin.setValue(lowest)
        return spin

    def _connect(self) -> None:
        self.kvCombo.currentIndexChanged.connect(self._changed)
        self.flashCombo.currentIndexChanged.connect(self._changed)
        self.gpuLayersSpin.valueChanged.connect(self._changed)
        self.mainGpuCombo.currentIndexChanged.connect(self._changed)
        self.tensorSplitEdit.textChanged.connect(self._changed)
        self.threadsSpin.valueChanged.connect(self._changed)
        self.mlockCheck.toggled.connect(self._changed)
        self.promptLookupCheck.toggled.connect(self._changed)
        self.draftCombo.currentIndexChanged.connect(self._changed)
        self.contextSpin.valueChanged.connect(self._changed)
        self._plan_timer.timeout.connect(self._plan)
        self.resetButton.clicked.connect(self.reset)
        self.saveButton.clicked.connect(self.save)
        self.closeButton.clicked.connect(self.close)

    def retranslate(self) -> None:
        self._show_name()
        labels = {
            "kv": self.tr("&KV cache type"),
            "flash": self.tr("&Flash attention"),
            "layers": self.tr("&GPU layers"),
            "main_gpu": self.tr("&Main GPU"),
            "split": self.tr("&Tensor split"),
            "threads": self.tr("T&hreads"),
            "mlock": self.tr("Memory &lock"),
            "context": self.tr("&Context length"),
            "lookup": self.tr("&Prompt lookup"),
            "draft": self.tr("&Draft model"),
        }
        for key, text in labels.items():
            self._labels[key].setText(text)
        self.kvCombo.setItemText(0, self.tr("Automatic"))
        self.kvCombo.setToolTip(
            self.tr(
                "Automatic: f16, or q8_0 when that makes the model fit. A quantized cache takes less memory "
                "and needs flash attention."
            )
        )
        for index, text in enumerate((self.tr("Auto"), self.tr("On"), self.tr("Off"))):
            self.flashCombo.setItemText(index, text)
        self.flashCombo.setToolTip(self.tr("Auto: on with a GPU or a quantized KV cache"))
        self.gpuLayersSpin.setSpecialValueText(self.tr("Automatic"))
        self.gpuLayersSpin.setToolTip(self.tr("Layers on the GPU; 0 runs the model on the CPU only"))
        self.threadsSpin.setSpecialValueText(self.tr("Automatic"))
        self.threadsSpin.setToolTip(
            self.tr("CPU threads; Automatic: the global setting, else the physical cores")
        )
        self.mlockCheck.setText(self.tr("Keep the weights in RAM, never paged out"))
        self.promptLookupCheck.setText(self.tr("Guess the next words from the conversation"))
        self.promptLookupCheck.setToolTip(
            self.tr(
                "Speculative decoding: words the reply repeats from the conversation (code given back with "
                "a change, quotes, names) are checked several at a time, which is faster where a batch costs "
                "little more than one token (a GPU, a large model). Guesses shorten or stop when they do "
                "not pay. Replies stay the model's own, up to the rounding of batched arithmetic. Turns "
                "flash attention on when it is Auto."
            )
        )
        self.draftCombo.setItemText(0, self.tr("None"))
        self.draftCombo.setToolTip(
            self.tr(
                "Speculative decoding with a small model of the same family (the same vocabulary): it "
                "guesses the next words, and this model checks several at a time, which is faster where a "
                "batch costs little more than one token (a GPU, a large model). Replies stay the model's "
                "own, up to the rounding of batched arithmetic. Not with prompt lookup."
            )
        )
        self.contextSpin.setSpecialValueText(self.tr("Automatic"))
        self.contextSpin.setSuffix(self.tr(" tokens"))
        self.contextSpin.setToolTip(self.tr("A conversation's own context length still wins"))
        self.tensorSplitEdit.setPlaceholderText(
            self.tr("Automatic (e.g. 3,1: each GPU's share of the layers)")
        )
        self.resetButton.setText(self.tr("Reset to automatic"))
        self.saveButton.setText(self.tr("Save"))
        self.saveButton.setToolTip(self.tr("The model is loaded with these settings at its next turn"))
        self.closeButton.setText(self.tr("Close"))
        self._fill_gpus(self._selected_main_gpu())
        self._refresh()

    def changeEvent(self, event: QEvent) -> None:
        if event.type() == QEvent.Type.LanguageChange:
            self.retranslate()
        super().changeEvent(event)

    def hideEvent(self, event: QHideEvent) -> None:
        # A plan asked for just before Save or Close is not wanted any more, and the window may be closing
        # with the app, whose background workers are gone by the time the timer fires.
        self._plan_timer.stop()
        super().hideEvent(event)

    # -- the model and its settings -------------------------------------------------------------

    @property
    def model(self) -> InstalledModel:
        return self._model

    def show_model(self, model: InstalledModel) -> None:
        """Show `model`'s stored settings (the dialog is reused for each model opened)."""
        self._model = model
        self.statusLabel.setText("")
        self._show_name()
        # The other installed models are listed anew for this one (the list held it, or not, for the last).
        self._drafts_listed = False
        self.draftCombo.blockSignals(True)
        while self.draftCombo.count() > 1:
            self.draftCombo.removeItem(1)
        self.draftCombo.blockSignals(False)
        self._show_settings(model.load_settings)
        self._services.background.call(
            self._services.library.list_models,
            self._fill_drafts,
            lambda error: self.statusLabel.setText(
                self.tr("The installed models could not be listed: {error}").format(error=describe(error))
            ),
            operation="list draft models",
        )

    def _fill_drafts(self, models: list[InstalledModel]) -> None:
        """The draft model choices: None and every other installed model, smallest first (a draft is
        much smaller than its model); a stored one that is no longer installed stays, marked."""
        combo, current = self.draftCombo, self._selected_draft()
        self._drafts_listed = True
        combo.blockSignals(True)
        try:
            while combo.count() > 1:
                combo.removeItem(1)
            for other in sorted(models, key=lambda m: m.size_bytes):
                if other.id != self._model.id:
                    combo.addItem(f"{other.name} ({format_bytes(other.size_bytes)})", other.name)
            self._select_draft(current)
        finally:
            combo.blockSignals(False)

    def _select_draft(self, name: str | None) -> None:
        combo = self.draftCombo
        if name is not None and combo.findData(name) < 0:
            # Before the installed models are listed, a stored name is shown as it is.
            missing = self._drafts_listed
            combo.addItem(self.tr("{name} (not installed)").format(name=name) if missing else name, name)
        combo.setCurrentIndex(max(0, combo.findData(name)) if name is not None else 0)

    def _selected_draft(self) -> str | None:
        data = self.draftCombo.currentData()
        return data if isinstance(data, str) else None

    def _show_name(self) -> None:
        name = self._model.name
        self.setWindowTitle(self.tr("Load settings: {name}").format(name=name))
        self.modelLabel.setText(
            self.tr("How {name} is loaded. Automatic leaves each choice to Hearth.").format(name=name)
        )

    def reset(self) -> None:
        """Every control back to Automatic (saved only by Save)."""
        self._show_settings(ModelLoadSettings())

    def _hardware(self) -> HardwareReport:
        # The monitor's latest probe has today's free memory; the start-up one until it answers.
        return self._services.gpu_monitor.latest or self._services.hardware

    def _show_settings(self, settings: ModelLoadSettings) -> None:
        widgets = (
            self.kvCombo,
            self.flashCombo,
            self.gpuLayersSpin,
            self.mainGpuCombo,
            self.tensorSplitEdit,
            self.threadsSpin,
            self.mlockCheck,
            self.contextSpin,
            self.promptLookupCheck,
            self.draftCombo,
        )
        for widget in widgets:
            widget.blockSignals(True)
        try:
            self.kvCombo.setCurrentIndex(max(0, self.kvCombo.findData(settings.kv_cache_type)))
            self.flashCombo.setCurrentIndex(max(0, self.flashCombo.findData(settings.flash_attention)))
            layers = settings.gpu_layers if isinstance(settings.gpu_layers, int) else None
            # A stored value above the model's layers stays visible (and is reported as a problem).
            self.gpuLayersSpin.setMaximum(max(self._model.n_layers or MAX_LAYERS, layers or 0))
            self.gpuLayersSpin.setValue(AUTOMATIC_LAYERS if layers is None else layers)
            self._fill_gpus(settings.main_gpu)
            split = settings.tensor_split
            self.tensorSplitEdit.setText(",".join(f"{share:g}" for share in split) if split else "")
            logical = self._hardware().cpu_count_logical or MAX_THREADS
            self.threadsSpin.setMaximum(max(logical, settings.threads or 0))
            self.threadsSpin.setValue(settings.threads or AUTOMATIC)
            self.mlockCheck.setChecked(settings.mlock)
            self.promptLookupCheck.setChecked(settings.prompt_lookup)
            self._select_draft(settings.draft_model)
            self.contextSpin.setValue(settings.context_length or AUTOMATIC)
        finally:
            for widget in widgets:
                widget.blockSignals(False)
        self._changed()

    def _fill_gpus(self, main_gpu: int | None) -> None:
        """The main GPU choices: Automatic and every GPU found (and a stored one that is not found)."""
        hardware = self._hardware()
        combo = self.mainGpuCombo
        combo.blockSignals(True)
        try:
            combo.clear()
            combo.addItem(self.tr("Automatic"), None)
            for gpu in hardware.gpus:
                combo.addItem(f"{gpu.index}: {gpu.name}", gpu.index)
            if main_gpu is not None and combo.findData(main_gpu) < 0:
                combo.addItem(self.tr("GPU {index} (not found)").format(index=main_gpu), main_gpu)
            combo.setCurrentIndex(max(0, combo.findData(main_gpu)) if main_gpu is not None else 0)
        finally:
            combo.blockSignals(False)
        has_gpus = bool(hardware.gpus)
        combo.setEnabled(has_gpus)
        self.tensorSplitEdit.setEnabled(has_gpus)
        if has_gpus:
            combo.setToolTip(_tooltip(self.tr("The GPU that holds the whole model")))
            self.tensorSplitEdit.setToolTip(
                _tooltip(
                    self.tr("Each GPU's share of the layers, in this order: {gpus}").format(
                        gpus=", ".join(f"{g.index}: {g.name}" for g in hardware.gpus)
                    )
                )
            )
        else:
            reason = hardware.gpu_reason
            tip = (
                self.tr("No GPU was found: {reason}").format(reason=reason)
                if reason
                else self.tr("No GPU was found")
            )
            combo.setToolTip(_tooltip(tip))
            self.tensorSplitEdit.setToolTip(_tooltip(tip))

    def _selected_main_gpu(self) -> int | None:
        data = self.mainGpuCombo.currentData()
        return data if isinstance(data, int) else None

    def settings(self) -> tuple[ModelLoadSettings, tuple[str, ...]]:
        """The settings in the controls, and why they cannot be used (empty when they can)."""
        values: Mapping[str, object] = {
            "kv_cache_type": self.kvCombo.currentData(),
            "flash_attention": self.flashCombo.currentData(),
            "gpu_layers": "auto"
            if self.gpuLayersSpin.value() == AUTOMATIC_LAYERS
            else self.gpuLayersSpin.value(),
            "main_gpu": self._selected_main_gpu(),
            "threads": self.threadsSpin.value() or None,
            "mlock": self.mlockCheck.isChecked(),
            "context_length": self.contextSpin.value() or None,
            "prompt_lookup": self.promptLookupCheck.isChecked(),
            "draft_model": self._selected_draft(),
        }
        try:
            settings = with_values(ModelLoadSettings(), values)
        except HearthError as exc:
            return ModelLoadSettings(), (str(exc),)
        try:
            split = parse_value("tensor_split", self.tensorSplitEdit.text())
            settings = with_values(settings, {"tensor_split": split})
        except HearthError as exc:
            return settings, (str(exc),)
        return settings, load_settings_problems(
            settings, n_layers=self._model.n_layers, hardware=self._hardware()
        )

    # -- the live plan ----------------------------------------------------------------------------

    def _changed(self) -> None:
        self._generation += 1
        self.current_plan = None
        self._refresh()
        if self._problems:
            self._plan_timer.stop()
            self.planLabel.setText(self.tr("The next load's plan is shown once these settings can be used."))
            self.reasonLabel.setText("")
        else:
            self.planLabel.setText(self.tr("Planning the next load…"))
            self._plan_timer.start()

    def _refresh(self) -> None:
        """The problems line and the buttons, for the settings in the controls."""
        _settings, self._problems = self.settings()
        self.problemsLabel.setText("\n".join(self._problems))
        self.problemsLabel.setVisible(bool(self._problems))
        self.saveButton.setEnabled(not self._problems and not self._saving)
        self.resetButton.setEnabled(not self._saving)

    def _plan(self) -> None:
        settings, problems = self.settings()
        if problems:
            return
        generation = self._generation
        model, app_settings, hardware = self._model, self._services.settings, self._hardware()
        library = self._services.library
        self._services.background.call(
            lambda: installed_load_plan(model, settings, app_settings, hardware, library=library),
            lambda plan: self._show_plan(generation, plan),
            lambda error: self._plan_failed(generation, error),
            operation="load plan",
        )

    def _show_plan(self, generation: int, plan: LoadPlan) -> None:
        if generation != self._generation:
            return  # planned for settings changed since
        self.current_plan = plan
        flash = self.tr("on") if plan.flash_attn else self.tr("off")
        fits = MAY_NOT_FIT not in plan.reason
        warning = resolve_theme(self._services.settings.theme).warning
        self.planLabel.setStyleSheet("" if fits else f"color: {warning}")
        self.planLabel.setText(
            self.tr(
                "Next load: {context}-token context, {layers}/{n_layers} layers on the GPU, KV cache {kv}, "
                "flash attention {flash}, {threads} threads; predicted {total} (KV cache {kv_bytes}): {fit}."
            ).format(
                context=f"{plan.n_ctx:,}",
                layers=min(plan.n_gpu_layers, plan.n_layers),
                n_layers=plan.n_layers,
                kv=plan.kv_type,
                flash=flash,
                threads=plan.n_threads,
                total=format_bytes(predicted_total_bytes(plan)),
                kv_bytes=format_bytes(plan.predicted_bytes.get("kv", 0)),
                fit=self.tr("fits") if fits else self.tr("may not fit"),
            )
            + self._guesses(plan)
        )
        self.reasonLabel.setText(self.tr("Why: {reason}").format(reason=plan.reason))

    def _guesses(self, plan: LoadPlan) -> str:
        if not plan.draft_tokens:
            return ""
        if plan.draft_model_path is not None:
            return self.tr(" The draft model {name} guesses up to {count} tokens at a time.").format(
                name=Path(plan.draft_model_path).name, count=plan.draft_tokens
            )
        return self.tr(" Prompt lookup guesses up to {count} tokens at a time.").format(
            count=plan.draft_tokens
        )

    def _plan_failed(self, generation: int, error: Exception) -> None:
        if generation != self._generation:
            return
        self.planLabel.setStyleSheet("")
        self.planLabel.setText(self.tr("No plan: {error}").format(error=describe(error)))
        self.reasonLabel.setText("")

    # -- saving -----------------------------------------------------------------------------------

    def save(self) -> None:
        settings, problems = self.settings()
        if problems or self._saving:
            return
        self._saving = True
        self._refresh()
        self.statusLabel.setText(self.tr("Saving…"))
        name, library, hardware = self._model.name, self._services.library, self._hardware()
        self._services.background.call(
            lambda: library.set_load_settings(name, settings, hardware),
            self._saved,
            self._save_failed,
            operation="save load settings",
        )

    def _saved(self, model: InstalledModel) -> None:
        self._saving = False
        self._model = model
        self.statusLabel.setText(
            self.tr("Saved: {name} is loaded with {settings} from its next turn.").format(
                name=model.name, settings=model.load_settings.describe()
            )
        )
        self._refresh()
        self.saved.emit(model)
        self.accept()

    def _save_failed(self, error: Exception) -> None:
        self._saving = False
        self.statusLabel.setText(self.tr("Not saved: {error}").format(error=describe(error)))
        self._refresh()
