"""Small pieces the library panel, its download rows and the Models & Hub settings page share."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QPushButton


def plain_label(object_name: str) -> QLabel:
    label = QLabel()
    label.setObjectName(object_name)
    # Repo ids, licences, file names, keyring and server messages: never rich text.
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    return label


def push_button(object_name: str) -> QPushButton:
    button = QPushButton()
    button.setObjectName(object_name)
    # In a dialog, Enter in a text field would also press an auto-default button: searching twice, or
    # pausing a download while typing a token.
    button.setAutoDefault(False)
    return button


def format_bytes(n: int) -> str:
    if n >= 1 << 30:
        return f"{n / (1 << 30):.2f} GiB"
    return f"{n / (1 << 20):.1f} MiB"
