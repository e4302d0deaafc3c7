"""Questions the window asks the user. MainWindow takes them as parameters so tests can answer them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFileDialog, QInputDialog, QLineEdit, QMessageBox, QWidget

ConfirmAction = Callable[[QWidget, str, str, str], bool]
AskText = Callable[[QWidget, str, str, str], str | None]
# (parent, title, suggested file name, name filter) → the chosen path, or None when cancelled.
AskSavePath = Callable[[QWidget, str, str, str], Path | None]
# (parent, title, name filter) → the chosen file, or None.
AskOpenPath = Callable[[QWidget, str, str], Path | None]
# (parent, title) → the chosen files (none when cancelled).
AskOpenPaths = Callable[[QWidget, str], list[Path]]
# (parent, title) → the chosen folder, or None.
AskDirectory = Callable[[QWidget, str], Path | None]
# (parent, title, label, items) → the index of the chosen item, or None.
AskChoice = Callable[[QWidget, str, str, list[str]], int | None]


def confirm_action(parent: QWidget, title: str, text: str, action: str) -> bool:
    """A yes/no question whose safe answer (Cancel) is the default."""
    box = QMessageBox(parent)
    box.setIcon(QMessageBox.Icon.Warning)
    box.setWindowTitle(title)
    # Plain text: the question quotes conversation titles, which come from user and model text.
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setText(text)
    accept = box.addButton(action, QMessageBox.ButtonRole.DestructiveRole)
    cancel = box.addButton(QMessageBox.StandardButton.Cancel)
    box.setDefaultButton(cancel)
    box.exec()
    return box.clickedButton() is accept


def ask_text(parent: QWidget, title: str, label: str, initial: str) -> str | None:
    text, accepted = QInputDialog.getText(parent, title, label, QLineEdit.EchoMode.Normal, initial)
    return text if accepted else None


def ask_save_path(parent: QWidget, title: str, suggested: str, name_filter: str) -> Path | None:
    chosen, _ = QFileDialog.getSaveFileName(parent, title, str(Path.home() / suggested), name_filter)
    return Path(chosen) if chosen else None


def ask_open_path(parent: QWidget, title: str, name_filter: str) -> Path | None:
    chosen, _ = QFileDialog.getOpenFileName(parent, title, str(Path.home()), name_filter)
    return Path(chosen) if chosen else None


def ask_open_paths(parent: QWidget, title: str) -> list[Path]:
    chosen, _ = QFileDialog.getOpenFileNames(parent, title, str(Path.home()))
    return [Path(name) for name in chosen]


def ask_directory(parent: QWidget, title: str) -> Path | None:
    chosen = QFileDialog.getExistingDirectory(parent, title, str(Path.home()))
    return Path(chosen) if chosen else None


def ask_choice(parent: QWidget, title: str, label: str, items: list[str]) -> int | None:
    chosen, accepted = QInputDialog.getItem(parent, title, label, items, 0, False)
    return items.index(chosen) if accepted and chosen in items else None


@dataclass(frozen=True)
class Dialogs:
    """The questions the window's parts ask, answered by the real dialogs unless a test answers them."""

    confirm: ConfirmAction = confirm_action
    ask: AskText = ask_text
    ask_save: AskSavePath = ask_save_path
    ask_open: AskOpenPath = ask_open_path
    ask_folder: AskDirectory = ask_directory
    ask_choice: AskChoice = ask_choice
    ask_open_many: AskOpenPaths = ask_open_paths
