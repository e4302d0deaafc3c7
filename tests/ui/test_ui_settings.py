"""Per-chat settings and presets, the context meter, themes, translations and the GPU status line."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from PySide6.QtCore import QCoreApplication, QLocale, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QDoubleSpinBox, QLabel
from pytestqt.qtbot import QtBot

from app.chat.engine import ContextUsage
from app.chat.presets import list_presets
from app.paths import HearthPaths
from app.qt.gpu_monitor import GpuMonitor
from app.remote.registry import ContextSource
from app.settings import GENERATION_KEYS, clean_generation_settings
from inference.hardware import GpuInfo, HardwareReport
from inference.protocol import SAMPLING_SETTINGS
from tests.helpers.ui_fixtures import GuiSession, GuiSessions, click, click_conversation, seed_conversation
from ui.context_meter import ContextMeter
from ui.i18n import Translations, resolve_language
from ui.settings_panel import SettingsPanel
from ui.status_line import describe_gpu
from ui.theme import DARK, LIGHT

pytestmark = pytest.mark.gui

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(hermetic_home: Path) -> HearthPaths:
    return HearthPaths(hermetic_home)


@pytest.fixture
def session(gui: GuiSessions, home: HearthPaths) -> GuiSession:
    return gui.open(home, preload_model=False)


def temperature(panel: SettingsPanel) -> QDoubleSpinBox:
    spin = panel.fields["temperature"]
    assert isinstance(spin, QDoubleSpinBox)
    return spin


def test_settings_are_saved_for_the_open_chat(qtbot: QtBot, session: GuiSession) -> None:
    window, store = session.window, session.services.store
    conversation_id = seed_conversation(qtbot, session, "Tuned")
    click_conversation(qtbot, window, "Tuned")
    click(window.settingsButton)
    panel = window.settingsPanel
    assert panel.isVisible()
    qtbot.waitUntil(lambda: "follows the defaults" in panel.scope.text())

    panel.systemPrompt.setPlainText("Answer like a pirate.")
    temperature(panel).setValue(0.3)
    panel.fields["seed"].setValue(1234)
    qtbot.waitUntil(lambda: store.get_conversation(conversation_id).settings is not None, timeout=3000)
    conversation = store.get_conversation(conversation_id)
    assert conversation.system_prompt == "Answer like a pirate."
    assert conversation.settings is not None
    assert conversation.settings["temperature"] == 0.3
    assert conversation.settings["seed"] == 1234

    # Another chat shows its own (default) settings; coming back shows these again.
    seed_conversation(qtbot, session, "Plain")
    click_conversation(qtbot, window, "Plain")
    qtbot.waitUntil(lambda: panel.systemPrompt.toPlainText() == "")
    click_conversation(qtbot, window, "Tuned")
    qtbot.waitUntil(lambda: panel.systemPrompt.toPlainText() == "Answer like a pirate.")
    assert temperature(panel).value() == pytest.approx(0.3)
    assert panel.scope.text() == "This chat's own settings."

    click(panel.resetButton)
    qtbot.waitUntil(lambda: store.get_conversation(conversation_id).settings is None, timeout=3000)
    assert store.get_conversation(conversation_id).system_prompt is None


def test_settings_for_a_new_chat_create_it(qtbot: QtBot, session: GuiSession) -> None:
    window, store = session.window, session.services.store
    click(window.settingsButton)
    window.settingsPanel.fields["max_tokens"].setValue(77)
    qtbot.waitUntil(lambda: window.current_conversation_id is not None, timeout=3000)
    conversation = store.get_conversation(window.current_conversation_id)  # type: ignore[arg-type]
    assert conversation.settings is not None and conversation.settings["max_tokens"] == 77


def test_presets_apply_save_and_delete(qtbot: QtBot, session: GuiSession) -> None:
    window, answers, home = session.window, session.answers, session.services.paths.home
    conversation_id = seed_conversation(qtbot, session, "Preset chat")
    click_conversation(qtbot, window, "Preset chat")
    click(window.settingsButton)
    panel = window.settingsPanel
    qtbot.waitUntil(
        lambda: [p.name for p in panel.presets()][:4] == ["Balanced", "Precise", "Creative", "Code"]
    )
    assert not panel.deletePreset.isEnabled(), "shipped presets cannot be deleted"

    panel.presetPicker.setCurrentIndex(panel.presetPicker.findText("Code"))
    click(panel.applyPreset)
    assert panel.fields["repeat_penalty"].value() == pytest.approx(1.0)
    assert panel.systemPrompt.toPlainText().startswith("You are a careful programming assistant")
    store = session.services.store
    qtbot.waitUntil(
        lambda: (store.get_conversation(conversation_id).settings or {}).get("repeat_penalty") == 1.0
    )

    temperature(panel).setValue(1.25)
    answers.text = "My preset"
    click(panel.savePreset)
    qtbot.waitUntil(lambda: "My preset" in [p.name for p in panel.presets()], timeout=3000)
    saved = next(p for p in list_presets(home) if p.name == "My preset")
    assert saved.sampling.temperature == pytest.approx(1.25)

    panel.presetPicker.setCurrentIndex(panel.presetPicker.findText("My preset"))
    assert panel.deletePreset.isEnabled()
    click(panel.deletePreset)
    assert answers.confirmations[-1] == "Delete the preset “My preset”?"
    qtbot.waitUntil(lambda: "My preset" not in [p.name for p in panel.presets()], timeout=3000)
    assert "My preset" not in [p.name for p in list_presets(home)]


def test_every_sampling_setting_has_a_labelled_control_within_its_range(qtbot: QtBot) -> None:
    panel = SettingsPanel()
    qtbot.addWidget(panel)
    assert list(panel.fields) == list(GENERATION_KEYS)
    for name, setting in SAMPLING_SETTINGS.items():
        spin = panel.fields[name]
        label = panel.form.labelForField(spin)
        assert isinstance(label, QLabel) and label.text(), name
        assert spin.maximum() == setting.spin[1]
        least = spin.minimum() + 1 if setting.nullable else spin.minimum()
        assert least == setting.spin[0] and setting.allows(least) and setting.allows(spin.maximum()), name

    # Unset (no seed) and out-of-range values come back as what the settings accept.
    panel.load("", None, {"seed": None, "top_k": 10**12}, "drop_oldest")
    values = panel.values()
    assert values["seed"] is None and values["top_k"] == 1000
    assert panel.fields["seed"].text() == "Random"
    assert clean_generation_settings(values) == values
    panel.load("", None, {"seed": 7}, "drop_oldest")
    assert panel.values()["seed"] == 7


def test_model_defaults_and_the_overflow_policy_are_saved(qtbot: QtBot, session: GuiSession) -> None:
    window, services = session.window, session.services
    click(window.settingsButton)
    panel = window.settingsPanel
    model = window.modelPicker.currentData()
    assert isinstance(model, str)
    panel.systemPrompt.setPlainText("Be brief.")
    panel.fields["top_k"].setValue(12)
    click(panel.saveDefaults)
    defaults = services.settings.model_defaults[model]
    assert defaults["top_k"] == 12 and defaults["system_prompt"] == "Be brief."

    combo = panel.overflowPolicy
    combo.setCurrentIndex(combo.findData("refuse"))
    combo.activated.emit(combo.currentIndex())
    assert services.settings.overflow_policy == "refuse"
    assert window.contextMeter.policy.text() == "When full: refuse to send"


def _usage(
    used_tokens: int, context_tokens: int, would_drop_messages: int = 0, policy: str = "drop_oldest"
) -> ContextUsage:
    return ContextUsage(used_tokens, context_tokens, would_drop_messages, policy)


def test_the_context_meter_turns_amber_then_red(qtbot: QtBot) -> None:
    meter = ContextMeter()
    qtbot.addWidget(meter)
    assert meter.level == "unknown"
    meter.set_usage(_usage(1000, 4096))
    assert (meter.level, meter.tokens.text()) == ("ok", "1,000 / 4,096 tokens")
    meter.set_usage(_usage(3200, 4096))
    assert meter.level == "warn"
    meter.set_usage(_usage(3900, 4096))
    assert meter.level == "full"
    meter.set_usage(_usage(5000, 4096, would_drop_messages=3))
    assert meter.level == "full"
    assert meter.warning.text() == "3 oldest message(s) will be left out"
    meter.set_usage(_usage(5000, 4096, policy="refuse"))
    assert meter.warning.text() == "Too long for the context window: Hearth will refuse to send"
    with qtbot.waitSignal(meter.policyClicked):
        QTest.mouseClick(meter.policy, Qt.MouseButton.LeftButton)


def test_the_context_meter_says_what_documents_take_and_when_it_only_estimates(qtbot: QtBot) -> None:
    meter = ContextMeter()
    qtbot.addWidget(meter)
    meter.show()
    searched = ContextUsage(
        3000,
        4096,
        0,
        "drop_oldest",
        512,
        document_tokens=2500,
        searched=("<b>big</b>.pdf",),
        passage_tokens=2200,
    )
    meter.set_usage(searched)
    assert meter.documents.text() == "Documents: up to 2,500 tokens · 1 file(s) searched, not sent whole"
    # A file's name is shown as written, never as markup.
    assert (
        "&lt;b&gt;big&lt;/b&gt;.pdf" in meter.documents.toolTip()
        and "<b>big" not in meter.documents.toolTip()
    )
    meter.set_usage(ContextUsage(3000, 4096, 0, "drop_oldest", 512, document_tokens=900))
    assert meter.documents.text() == "Documents: 900 tokens" and meter.documents.isVisible()
    meter.set_usage(_usage(1000, 4096))
    assert not meter.documents.isVisible() and meter.tokens.toolTip() == ""

    # A server's model: an estimate, said to be one, against the context it reports or 8,192.
    remote = ContextUsage(7900, 8192, 0, "refuse", 512, fits=False, context_source=ContextSource.DEFAULT)
    meter.set_usage(remote)
    assert meter.tokens.text() == "≈ 7,900 / 8,192 tokens (estimate)"
    assert meter.level == "full"
    assert meter.warning.text() == "Probably too long for the server's context: it may refuse it"
    assert "does not report its context length, so 8,192 tokens is assumed" in meter.tokens.toolTip()


def test_theme_follows_the_system_until_the_user_picks_one(
    qtbot: QtBot, session: GuiSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    window, services = session.window, session.services
    assert window.theme == LIGHT  # the offscreen platform reports no colour scheme

    hints = QGuiApplication.styleHints()
    monkeypatch.setattr(type(hints), "colorScheme", lambda _self: Qt.ColorScheme.Dark)
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert window.theme == DARK
    assert window.transcript.theme == DARK
    assert DARK.window in window.styleSheet()

    light = next(a for a in window.themeMenu.actions() if a.data() == "light")
    light.trigger()
    assert window.theme == LIGHT and services.settings.theme == "light"
    hints.colorSchemeChanged.emit(Qt.ColorScheme.Dark)
    assert window.theme == LIGHT, "an explicit choice wins over the system"
    next(a for a in window.themeMenu.actions() if a.data() == "dark").trigger()
    assert window.theme == DARK and LIGHT.window not in window.styleSheet()


def test_simplified_chinese_loads_and_switches_live(
    qtbot: QtBot, gui: GuiSessions, home: HearthPaths
) -> None:
    translations = Translations()
    try:
        assert translations.install("zh_CN") == "zh_CN"
        window = gui.open(home, preload_model=False).window
        assert window.newChatButton.text() == "新对话"
        assert window.sendButton.text() == "发送"
        assert window.fileMenu.title() == "文件(&F)"
        assert QCoreApplication.translate("Transcript", "Regenerate") == "重新生成"
        assert QCoreApplication.translate("SearchPanel", "%n result(s)", "", 3) == "3 条结果"
    finally:
        translations.remove()
    qtbot.waitUntil(lambda: window.newChatButton.text() == "New chat")

    window.set_language("zh_CN")
    assert window.newChatButton.text() == "新对话"
    window.set_language("en")
    assert window.newChatButton.text() == "New chat"


def test_language_follows_the_system_locale() -> None:
    assert resolve_language("system", QLocale("zh_CN")) == "zh_CN"
    assert resolve_language("system", QLocale("zh_SG")) == "zh_CN"
    assert resolve_language("system", QLocale("zh_TW")) == "en"
    assert resolve_language("system", QLocale("de_DE")) == "en"
    assert resolve_language("en", QLocale("zh_CN")) == "en"


@pytest.mark.skipif(
    shutil.which("pyside6-lupdate", path=str(Path(sys.executable).parent)) is None, reason="no lupdate"
)
def test_every_interface_string_is_translated(tmp_path: Path) -> None:
    """The shipped .ts covers the code, and the shipped .qm was compiled from it."""
    bin_dir = Path(sys.executable).parent
    shipped = ROOT / "resources" / "i18n" / "hearth_zh_CN.ts"
    fresh = tmp_path / "fresh.ts"
    shutil.copy(shipped, fresh)
    subprocess.run(
        [
            bin_dir / "pyside6-lupdate",
            *sorted(str(p) for p in (ROOT / "ui").glob("*.py")),
            "-ts",
            str(fresh),
            "-no-obsolete",
            "-locations",
            "none",
        ],
        check=True,
        capture_output=True,
    )

    def messages(path: Path) -> dict[tuple[str, str], str]:
        found = {}
        for context in ET.parse(path).getroot().iter("context"):
            name = context.findtext("name") or ""
            for message in context.iter("message"):
                translation = message.find("translation")
                assert translation is not None
                text = translation.text or "".join(form.text or "" for form in translation)
                found[(name, message.findtext("source") or "")] = "" if translation.get("type") else text
        return found

    current = messages(fresh)
    assert current.keys() == messages(shipped).keys(), "run scripts/update_translations.sh"
    untranslated = [key for key, text in current.items() if not text]
    assert untranslated == []

    compiled = tmp_path / "fresh.qm"
    subprocess.run(
        [bin_dir / "pyside6-lrelease", str(shipped), "-qm", str(compiled)], check=True, capture_output=True
    )
    assert compiled.read_bytes() == (ROOT / "resources" / "i18n" / "hearth_zh_CN.qm").read_bytes()


def test_gpu_monitor_probes_off_the_gui_thread_about_once_a_second(qtbot: QtBot) -> None:
    threads: list[int] = []
    report = HardwareReport(
        (GpuInfo(0, "Test GPU", 24_576, 20_480, 4_096, "550.1", "12.4"),), "", 64_000, 32_000, 8, 16
    )

    def probe() -> HardwareReport:
        threads.append(threading.get_ident())
        return report

    monitor = GpuMonitor(probe, interval_ms=100)
    seen: list[HardwareReport] = []
    monitor.status.connect(seen.append)
    monitor.start()
    try:
        qtbot.waitUntil(lambda: len(seen) >= 3, timeout=3000)
    finally:
        monitor.stop()
    assert threading.get_ident() not in threads
    assert seen[0] == report and monitor.latest == report
    text, detail = describe_gpu(report)
    assert text == "VRAM 4.0 GiB used · 20.0 GiB free"
    assert "Test GPU" in detail and "CUDA 12.4" in detail


def test_the_status_line_says_why_there_is_no_gpu(qtbot: QtBot, session: GuiSession) -> None:
    window = session.window
    no_nvml = HardwareReport(
        (), "NVIDIA driver not found (NVML library not available)", 64_000, 32_000, 8, 16
    )
    session.services.gpu_monitor.status.emit(no_nvml)
    assert window.statusGpu.text() == "No GPU: NVIDIA driver not found (NVML library not available)"
    # The real monitor runs: whatever this machine has, the line is filled in within about a second.
    monitor = session.services.gpu_monitor
    before = monitor.probe_count
    qtbot.waitUntil(lambda: monitor.probe_count > before, timeout=5000)
    assert monitor.running
    real_text, _ = describe_gpu(monitor.latest)  # type: ignore[arg-type]
    qtbot.waitUntil(lambda: window.statusGpu.text() == real_text, timeout=3000)
