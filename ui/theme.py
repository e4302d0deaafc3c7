"""Light and dark colours, chosen by the user or following the system's colour scheme.

One `Theme` feeds three consumers that must agree: the style sheet (widgets), the application palette
(what Qt's own text documents and standard dialogs draw with) and the transcript's painter (message
bubbles, code blocks, syntax highlighting).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, fields

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette

from ui.assets import stylesheet_template

THEME_CHOICES = ("system", "light", "dark")


@dataclass(frozen=True)
class Theme:
    name: str
    window: str
    sidebar: str
    border: str
    text: str
    muted: str
    accent: str
    accent_hover: str
    accent_text: str
    accent_disabled: str
    button: str
    button_hover: str
    button_disabled_text: str
    input: str
    focus: str
    selection: str
    list_hover: str
    list_selected: str
    assistant_bubble: str
    assistant_border: str
    user_bubble: str
    user_border: str
    role: str
    error: str
    warning: str
    link: str
    flash: str
    code_bg: str
    code_header: str
    inline_code_bg: str
    hit_bg: str
    # Syntax highlighting, by token family.
    syn_keyword: str
    syn_string: str
    syn_comment: str
    syn_number: str
    syn_function: str
    syn_type: str
    syn_operator: str
    syn_builtin: str

    def color(self, name: str) -> QColor:
        return QColor(str(getattr(self, name)))


LIGHT = Theme(
    name="light",
    window="#faf7f2",
    sidebar="#f1ebe3",
    border="#e2d9cd",
    text="#2b2724",
    muted="#7b6f64",
    accent="#c8553d",
    accent_hover="#b24a34",
    accent_text="#ffffff",
    accent_disabled="#e4b7ab",
    button="#ffffff",
    button_hover="#f6f0e8",
    button_disabled_text="#aaa096",
    input="#ffffff",
    focus="#d9a08a",
    selection="#f2c9a0",
    list_hover="#e9e0d4",
    list_selected="#e3d3c2",
    assistant_bubble="#fffdf9",
    assistant_border="#eee5da",
    user_bubble="#f3ece3",
    user_border="#e6dbcd",
    role="#8a5a44",
    error="#a1301c",
    warning="#b7791f",
    link="#a3472f",
    flash="#fbe3c8",
    code_bg="#f5f0e9",
    code_header="#ebe3d8",
    inline_code_bg="#efe8de",
    hit_bg="#f7d58b",
    syn_keyword="#8c3b9e",
    syn_string="#3f7d2c",
    syn_comment="#8c8177",
    syn_number="#b0532a",
    syn_function="#1f5fa8",
    syn_type="#a3620a",
    syn_operator="#5b524b",
    syn_builtin="#0b7a75",
)

DARK = Theme(
    name="dark",
    window="#1f1c1a",
    sidebar="#26221f",
    border="#3a342f",
    text="#ece6df",
    muted="#a59a8f",
    accent="#d9694f",
    accent_hover="#e57b61",
    accent_text="#ffffff",
    accent_disabled="#6b4036",
    button="#2e2925",
    button_hover="#3a342f",
    button_disabled_text="#6f665e",
    input="#2a2623",
    focus="#b9745e",
    selection="#7a4b35",
    list_hover="#332d29",
    list_selected="#47392f",
    assistant_bubble="#27231f",
    assistant_border="#3a342f",
    user_bubble="#332b25",
    user_border="#44392f",
    role="#e0a083",
    error="#ff8a73",
    warning="#e3b455",
    link="#f0a283",
    flash="#5a4330",
    code_bg="#191715",
    code_header="#2c2825",
    inline_code_bg="#35302b",
    hit_bg="#7a5a12",
    syn_keyword="#d7a0f0",
    syn_string="#a5d68a",
    syn_comment="#8d8378",
    syn_number="#f2a57a",
    syn_function="#8cc2ff",
    syn_type="#f0c674",
    syn_operator="#cfc6bd",
    syn_builtin="#6fd3cb",
)


def system_is_dark(scheme: Qt.ColorScheme | None = None) -> bool:
    if scheme is None:
        scheme = QGuiApplication.styleHints().colorScheme()
    return scheme == Qt.ColorScheme.Dark


def resolve_theme(choice: str, scheme: Qt.ColorScheme | None = None) -> Theme:
    """`choice` is a THEME_CHOICES value; "system" follows the platform (light when it does not say)."""
    if choice == "dark" or (choice not in ("light", "dark") and system_is_dark(scheme)):
        return DARK
    return LIGHT


def stylesheet(theme: Theme) -> str:
    values = {f.name: str(getattr(theme, f.name)) for f in fields(theme)}
    return string.Template(stylesheet_template()).substitute(values)


def palette(theme: Theme) -> QPalette:
    """The colours Qt draws text documents and standard widgets with, matching the style sheet."""
    p = QPalette()
    roles = {
        QPalette.ColorRole.Window: theme.window,
        QPalette.ColorRole.WindowText: theme.text,
        QPalette.ColorRole.Base: theme.input,
        QPalette.ColorRole.AlternateBase: theme.sidebar,
        QPalette.ColorRole.Text: theme.text,
        QPalette.ColorRole.Button: theme.button,
        QPalette.ColorRole.ButtonText: theme.text,
        QPalette.ColorRole.Highlight: theme.selection,
        QPalette.ColorRole.HighlightedText: theme.text,
        QPalette.ColorRole.Link: theme.link,
        QPalette.ColorRole.LinkVisited: theme.link,
        QPalette.ColorRole.ToolTipBase: theme.input,
        QPalette.ColorRole.ToolTipText: theme.text,
        QPalette.ColorRole.PlaceholderText: theme.muted,
    }
    for role, colour in roles.items():
        p.setColor(role, QColor(colour))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor(theme.button_disabled_text))
    p.setColor(
        QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor(theme.button_disabled_text)
    )
    p.setColor(
        QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText, QColor(theme.button_disabled_text)
    )
    return p
