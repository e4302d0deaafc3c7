"""Icons and styles from the `resources` package, read through importlib so frozen builds find them."""

from __future__ import annotations

from importlib.resources import files

from PySide6.QtGui import QIcon, QPixmap


def _read(*parts: str) -> bytes:
    path = files("resources")
    # One part at a time: in a frozen build on Python 3.11 this is a MultiplexedPath, whose joinpath
    # takes a single name.
    for part in parts:
        path = path.joinpath(part)
    return path.read_bytes()


def app_icon() -> QIcon:
    pixmap = QPixmap()
    # The PNG, not the SVG: it needs no image-format plugin, which frozen builds may leave out.
    pixmap.loadFromData(_read("icons", "hearth.png"), "PNG")
    return QIcon(pixmap)


def stylesheet_template() -> str:
    """The style sheet with `${colour}` placeholders that `ui.theme.stylesheet` fills in."""
    return _read("styles", "hearth.qss").decode("utf-8")


def translation(name: str) -> bytes | None:
    """A compiled Qt translation (`.qm`) shipped under resources/i18n, or None if there is none."""
    try:
        return _read("i18n", name)
    except FileNotFoundError:
        return None
