"""The GUI-facing services: the only package in app/ that may import PySide6. Each service wraps a
Qt-free part of app/ in signals and runs its blocking work off the GUI thread."""
