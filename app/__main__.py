"""Entry point for `hearth`, `python -m app` and the frozen executable."""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

from app.paths import HearthPaths


def _run_gui(paths: HearthPaths, smoke_test: bool) -> int:
    from ui.main import run_gui

    return run_gui(paths, smoke_test=smoke_test)


def _ensure_std_streams() -> None:
    """A windowed build (Hearth.exe, pythonw) starts with sys.stdout and sys.stderr set to None; writing a
    line to them must not crash the app, so they go to the null device instead."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, Path(os.devnull).open("w", encoding="utf-8"))  # noqa: SIM115


def main(argv: list[str] | None = None) -> int:
    from app.cli.main import main as cli_main

    _ensure_std_streams()
    return cli_main(argv, gui=_run_gui, crash_handlers=True)


def gui_main() -> int:
    return main(["gui", *sys.argv[1:]])


if __name__ == "__main__":
    # The runner is a spawned process; a frozen executable must dispatch to it instead of re-running main.
    multiprocessing.freeze_support()
    sys.exit(main())
