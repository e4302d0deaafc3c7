"""Enter sends, Shift+Enter starts a new line."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from pytestqt.qtbot import QtBot

from ui.composer import Composer

pytestmark = pytest.mark.gui


@pytest.fixture
def composer(qtbot: QtBot) -> Composer:
    widget = Composer()
    qtbot.addWidget(widget)
    widget.show()
    qtbot.waitExposed(widget)
    widget.setFocus()
    return widget


def test_shift_enter_adds_a_line_without_sending(qtbot: QtBot, composer: Composer) -> None:
    with qtbot.assertNotEmitted(composer.submitted):
        QTest.keyClicks(composer, "first line")
        QTest.keyClick(composer, Qt.Key.Key_Return, Qt.KeyboardModifier.ShiftModifier)
        QTest.keyClicks(composer, "second line")

    assert composer.toPlainText() == "first line\nsecond line"


@pytest.mark.parametrize(
    ("key", "modifier"),
    [
        (Qt.Key.Key_Return, Qt.KeyboardModifier.NoModifier),
        (Qt.Key.Key_Enter, Qt.KeyboardModifier.KeypadModifier),
        (Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier),
    ],
)
def test_enter_and_ctrl_enter_send(
    qtbot: QtBot, composer: Composer, key: Qt.Key, modifier: Qt.KeyboardModifier
) -> None:
    QTest.keyClicks(composer, "hello")
    with qtbot.waitSignal(composer.submitted, timeout=1000):
        QTest.keyClick(composer, key, modifier)

    assert composer.toPlainText() == "hello", "sending is the window's job, and so is clearing"
