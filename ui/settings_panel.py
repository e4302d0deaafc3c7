"""Settings for the current chat: system prompt, sampling, context length; presets; model defaults.

The panel only edits values and says what the user asked for; the window saves them through the
store (per conversation), the presets module or the settings (per model, overflow policy).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.images.pdf_pages import MAX_PAGES
from app.settings import GENERATION_KEYS, Settings
from inference.protocol import SAMPLING_SETTINGS, SamplingParams, SamplingSetting
from ui.dialogs import AskText

# Saving waits until the user pauses, so dragging a spin box writes once.
SAVE_DELAY_MS = 500
# A context length is not a sampling parameter: its control is made here.
CONTEXT_SPIN = (512, 1_048_576, 512)
_NULLABLE = {name for name, setting in SAMPLING_SETTINGS.items() if setting.nullable}
_DEFAULTS: dict[str, Any] = {
    **{name: getattr(SamplingParams(), name) for name in SAMPLING_SETTINGS},
    "context_length": Settings().context_length,
}


@dataclass(frozen=True)
class PresetChoice:
    name: str
    builtin: bool
    system_prompt: str | None
    values: Mapping[str, Any]


class SettingsPanel(QWidget):
    """Signals carry (system prompt or None, generation settings as app.settings.GENERATION_KEYS)."""

    changed = Signal(object, object)
    presetSaveRequested = Signal(str, object, object)
    presetDeleteRequested = Signal(str)
    modelDefaultsRequested = Signal(object, object)
    resetRequested = Signal()
    overflowPolicyChanged = Signal(str)
    # How replies' reasoning is shown, for every chat: "collapsed", "expanded" or "hidden".
    thinkingDisplayChanged = Signal(str)
    # bool: whether attached PDFs also go as pictures of their pages to a model that can see.
    pdfPagesChanged = Signal(bool)
    closeRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("settingsPanel")
        self._loading = False
        self._presets: list[PresetChoice] = []

        self.title = QLabel()
        self.title.setObjectName("panelTitle")
        self.closeButton = QPushButton("×")
        self.closeButton.setObjectName("closeSettings")
        self.closeButton.setFlat(True)
        self.closeButton.clicked.connect(self.closeRequested)
        self.scope = QLabel()
        self.scope.setObjectName("hint")
        self.scope.setTextFormat(Qt.TextFormat.PlainText)
        self.scope.setWordWrap(True)

        self.presetPicker = QComboBox()
        self.presetPicker.setObjectName("presetPicker")
        self.applyPreset = QPushButton()
        self.applyPreset.setObjectName("applyPreset")
        self.savePreset = QPushButton()
        self.savePreset.setObjectName("savePreset")
        self.deletePreset = QPushButton()
        self.deletePreset.setObjectName("deletePreset")

        self.systemPrompt = QPlainTextEdit()
        self.systemPrompt.setObjectName("systemPrompt")
        self.systemPrompt.setTabChangesFocus(True)
        self.systemPrompt.setMaximumHeight(110)
        # One control per generation setting (app.settings.GENERATION_KEYS), by name.
        self.fields: dict[str, QSpinBox | QDoubleSpinBox] = {
            name: _spin(name, setting) for name, setting in SAMPLING_SETTINGS.items()
        }
        self.fields["context_length"] = _int_spin("context_length", *CONTEXT_SPIN)
        self.overflowPolicy = QComboBox()
        self.overflowPolicy.setObjectName("overflowPolicy")
        self.overflowPolicy.addItem("", "drop_oldest")
        self.overflowPolicy.addItem("", "refuse")
        self.thinkingDisplay = QComboBox()
        self.thinkingDisplay.setObjectName("thinkingDisplay")
        for display in ("collapsed", "expanded", "hidden"):
            self.thinkingDisplay.addItem("", display)

        self.pdfPages = QCheckBox()
        self.pdfPages.setObjectName("pdfPagesAsImages")

        self.saveDefaults = QPushButton()
        self.saveDefaults.setObjectName("saveModelDefaults")
        self.resetButton = QPushButton()
        self.resetButton.setObjectName("resetSettings")

        head = QHBoxLayout()
        head.addWidget(self.title, 1)
        head.addWidget(self.closeButton)
        presets = QHBoxLayout()
        presets.addWidget(self.presetPicker, 1)
        presets.addWidget(self.applyPreset)
        preset_buttons = QHBoxLayout()
        preset_buttons.addWidget(self.savePreset)
        preset_buttons.addWidget(self.deletePreset)
        self.form = QFormLayout()
        self.form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
        self._labels = {name: QLabel() for name in _FIELD_NAMES}
        fields: list[QWidget] = [*self.fields.values(), self.overflowPolicy, self.thinkingDisplay]
        for name, widget in zip(_FIELD_NAMES, fields, strict=True):
            self._labels[name].setBuddy(widget)
            self.form.addRow(self._labels[name], widget)
        self.contextNote = QLabel()
        self.contextNote.setObjectName("hint")
        self.contextNote.setWordWrap(True)
        self.systemLabel = QLabel()
        self.systemLabel.setBuddy(self.systemPrompt)
        self.presetLabel = QLabel()
        self.presetLabel.setBuddy(self.presetPicker)
        bottom = QHBoxLayout()
        bottom.addWidget(self.saveDefaults)
        bottom.addWidget(self.resetButton)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 10, 12, 10)
        layout.addLayout(head)
        layout.addWidget(self.scope)
        layout.addWidget(self.presetLabel)
        layout.addLayout(presets)
        layout.addLayout(preset_buttons)
        layout.addWidget(self.systemLabel)
        layout.addWidget(self.systemPrompt)
        layout.addLayout(self.form)
        layout.addWidget(self.pdfPages)
        layout.addWidget(self.contextNote)
        layout.addLayout(bottom)
        layout.addStretch(1)

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(SAVE_DELAY_MS)
        self._timer.timeout.connect(self._emit_changed)
        self.systemPrompt.textChanged.connect(self._edited)
        for spin in self.fields.values():
            spin.valueChanged.connect(self._edited)
        self.applyPreset.clicked.connect(self._apply_preset)
        self.savePreset.clicked.connect(self._save_preset)
        self.deletePreset.clicked.connect(self._delete_preset)
        self.presetPicker.currentIndexChanged.connect(self._update_preset_buttons)
        self.saveDefaults.clicked.connect(self._save_defaults)
        self.resetButton.clicked.connect(self.resetRequested)
        self.overflowPolicy.activated.connect(self._policy_picked)
        self.thinkingDisplay.activated.connect(self._thinking_picked)
        self.pdfPages.clicked.connect(self.pdfPagesChanged)
        self.preset_name_asker: AskText | None = None
        self.retranslate()

    def retranslate(self) -> None:
        self.title.setText(self.tr("Chat settings"))
        self.presetLabel.setText(self.tr("Preset"))
        self.applyPreset.setText(self.tr("Apply"))
        self.savePreset.setText(self.tr("Save as preset…"))
        self.deletePreset.setText(self.tr("Delete preset"))
        self.systemLabel.setText(self.tr("System prompt"))
        self.systemPrompt.setPlaceholderText(self.tr("Optional: how the model should behave in this chat"))
        labels = {
            "temperature": self.tr("Temperature"),
            "top_p": self.tr("Top-p"),
            "top_k": self.tr("Top-k"),
            "min_p": self.tr("Min-p"),
            "repeat_penalty": self.tr("Repeat penalty"),
            "seed": self.tr("Seed"),
            "max_tokens": self.tr("Max tokens"),
            "context_length": self.tr("Context length"),
            "overflow_policy": self.tr("When full"),
            "show_thinking": self.tr("Thinking"),
        }
        for name, text in labels.items():
            self._labels[name].setText(text)
        self.fields["seed"].setSpecialValueText(self.tr("Random"))
        self.overflowPolicy.setItemText(0, self.tr("Leave out the oldest turns"))
        self.overflowPolicy.setItemText(1, self.tr("Refuse to send"))
        self.overflowPolicy.setToolTip(
            self.tr("For every chat: the system prompt is always kept, and the reply says what was left out")
        )
        self.thinkingDisplay.setItemText(0, self.tr("Collapsed"))
        self.thinkingDisplay.setItemText(1, self.tr("Expanded"))
        self.thinkingDisplay.setItemText(2, self.tr("Hidden"))
        self.thinkingDisplay.setToolTip(
            self.tr("For every chat: how a reasoning model's thinking is first shown above its answer")
        )
        self.pdfPages.setText(self.tr("Send PDF pages as pictures to models that can see"))
        self.pdfPages.setToolTip(
            self.tr(
                "For every chat: an attached PDF's first {n} pages also go as pictures to a vision model, "
                "for charts, scans and forms; each page takes hundreds of tokens of the context"
            ).format(n=MAX_PAGES)
        )
        self.contextNote.setText(self.tr("A new context length applies when the model is next loaded."))
        self.saveDefaults.setText(self.tr("Use for this model"))
        self.saveDefaults.setToolTip(self.tr("New chats with this model start from these settings"))
        self.resetButton.setText(self.tr("Reset"))
        self.resetButton.setToolTip(self.tr("Go back to this model's defaults"))

    # -- values ---------------------------------------------------------------------------------

    def load(self, scope: str, system_prompt: str | None, values: Mapping[str, Any], policy: str) -> None:
        """Show these values without treating it as an edit. `scope` says whose settings they are."""
        self._timer.stop()
        self._loading = True
        try:
            self.scope.setText(scope)
            self.systemPrompt.setPlainText(system_prompt or "")
            for name, spin in self.fields.items():
                value = values.get(name, _DEFAULTS[name])
                # None (unset) is the least value, which _spin made one below what the setting allows.
                if isinstance(spin, QDoubleSpinBox):
                    spin.setValue(spin.minimum() if value is None else float(value))
                else:
                    spin.setValue(spin.minimum() if value is None else min(int(value), spin.maximum()))
            self.set_policy(policy)
        finally:
            self._loading = False

    def set_policy(self, policy: str) -> None:
        index = self.overflowPolicy.findData(policy)
        self.overflowPolicy.setCurrentIndex(max(0, index))

    def set_pdf_pages(self, enabled: bool) -> None:
        self.pdfPages.setChecked(enabled)

    def set_thinking_display(self, display: str) -> None:
        self.thinkingDisplay.setCurrentIndex(max(0, self.thinkingDisplay.findData(display)))

    def values(self) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for name, spin in self.fields.items():
            if name in _NULLABLE and spin.value() == spin.minimum():
                values[name] = None
            elif isinstance(spin, QDoubleSpinBox):
                values[name] = round(spin.value(), 4)
            else:
                values[name] = spin.value()
        return values

    def system_prompt(self) -> str | None:
        text = self.systemPrompt.toPlainText()
        return text if text.strip() else None

    def _edited(self) -> None:
        if not self._loading:
            self._timer.start()

    def save_now(self) -> None:
        """Emit an edit still waiting for the pause, at once (before sending, so the reply uses it)."""
        if self._timer.isActive():
            self._timer.stop()
            self._emit_changed()

    def _emit_changed(self) -> None:
        self.changed.emit(self.system_prompt(), self.values())

    @property
    def has_unsaved_edit(self) -> bool:
        return self._timer.isActive()

    # -- presets --------------------------------------------------------------------------------

    def set_presets(self, presets: Sequence[PresetChoice]) -> None:
        current = self.presetPicker.currentText()
        self._presets = list(presets)
        self.presetPicker.blockSignals(True)
        try:
            self.presetPicker.clear()
            for preset in self._presets:
                self.presetPicker.addItem(preset.name, preset.name)
            index = self.presetPicker.findText(current)
            self.presetPicker.setCurrentIndex(max(0, index))
        finally:
            self.presetPicker.blockSignals(False)
        self._update_preset_buttons()

    def presets(self) -> list[PresetChoice]:
        return list(self._presets)

    def _selected_preset(self) -> PresetChoice | None:
        index = self.presetPicker.currentIndex()
        return self._presets[index] if 0 <= index < len(self._presets) else None

    def _update_preset_buttons(self, _index: int = 0) -> None:
        preset = self._selected_preset()
        self.applyPreset.setEnabled(preset is not None)
        self.deletePreset.setEnabled(preset is not None and not preset.builtin)

    def _apply_preset(self) -> None:
        preset = self._selected_preset()
        if preset is None:
            return
        values = {**self.values(), **preset.values}
        self.load(self.scope.text(), preset.system_prompt, values, self.overflowPolicy.currentData())
        self.changed.emit(self.system_prompt(), self.values())

    def _save_preset(self) -> None:
        ask = self.preset_name_asker
        name = ask(self, self.tr("Save preset"), self.tr("Preset name:"), "") if ask is not None else None
        if name and name.strip():
            self.presetSaveRequested.emit(name.strip(), self.system_prompt(), self.values())

    def _delete_preset(self) -> None:
        preset = self._selected_preset()
        if preset is not None and not preset.builtin:
            self.presetDeleteRequested.emit(preset.name)

    def _save_defaults(self) -> None:
        self.modelDefaultsRequested.emit(self.system_prompt(), self.values())

    def _policy_picked(self, _index: int) -> None:
        self.overflowPolicyChanged.emit(str(self.overflowPolicy.currentData()))

    def _thinking_picked(self, _index: int) -> None:
        self.thinkingDisplayChanged.emit(str(self.thinkingDisplay.currentData()))


def _spin(name: str, setting: SamplingSetting) -> QSpinBox | QDoubleSpinBox:
    low, high, step = setting.spin
    if not setting.integer:
        spin = QDoubleSpinBox()
        spin.setObjectName(_object_name(name))
        spin.setRange(low, high)
        spin.setSingleStep(step)
        spin.setDecimals(2)
        spin.setKeyboardTracking(False)
        spin.setCorrectionMode(QAbstractSpinBox.CorrectionMode.CorrectToNearestValue)
        return spin
    # Unset (None) is the value one below the least, shown as the special value text retranslate gives.
    return _int_spin(name, int(low) - 1 if setting.nullable else int(low), int(high), int(step))


def _int_spin(name: str, low: int, high: int, step: int) -> QSpinBox:
    spin = QSpinBox()
    spin.setObjectName(_object_name(name))
    spin.setRange(low, high)
    spin.setSingleStep(step)
    spin.setKeyboardTracking(False)
    spin.setGroupSeparatorShown(True)
    return spin


def _object_name(name: str) -> str:
    first, *rest = name.split("_")
    return first + "".join(part.capitalize() for part in rest)


_FIELD_NAMES = (*GENERATION_KEYS, "overflow_policy", "show_thinking")
