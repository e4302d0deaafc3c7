"""Bar P13: the window with a pathological reply (a 182 KB Markdown table, a 50,000-line code block).

    .venv/bin/python -m bench.gui_pathological [--rows 2000] [--lines 50000] [--resizes 90] [--no-publish]

What runs for real: the main window over the real services, with each reply stored in its own
conversation of the SQLite store and opened the way the user opens it (the conversation list's
`open_conversation`). Nothing is synthetic but the replies themselves: a 2,000-row, six-column table of
about 182 KB, and a fenced Python block of 50,000 lines (1.6 MB).

Measured on the GUI thread with a 1 ms precise timer (a stall is the gap between two of its ticks):
- idle: the same window before anything is opened (the baseline);
- showing: from opening the conversation until every piece of the reply is laid out (the view shows the
  reply's end first; the rest is laid out in the background);
- resizing: the window's width changes every 33 ms (a drag at 30 Hz, between 900 and 1,300 px), and
  then until the reply is laid out at the final width.
Also: how long until the reply's end is on screen, and until all of it is laid out.

Targets (docs/performance.md, P13, as P2): p99 ≤ 16 ms, max ≤ 50 ms, also while resizing.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.results import add_publish_option, begin

if TYPE_CHECKING:
    from ui.message_row import MessageRow
    from ui.transcript import Transcript

IDLE_SECONDS = 2.0
RESIZE_EVERY_MS = 33
WIDTHS = (900, 1300)
HEIGHT = 800
TICK_MS = 1
TIMEOUT_MS = 600_000

WORDS = ("harbour", "lamp", "keeper", "reef", "signal", "channel", "storm", "beacon", "tide", "pilot",
         "anchor", "lantern", "cliff", "current", "shoal", "buoy", "mast", "rope", "gale", "fog")  # fmt: skip
STATUSES = ("lit", "dark", "under repair", "automated", "manned by a keeper")


def table_reply(rng: random.Random, rows: int) -> str:
    """A table the way a model writes one when asked to list everything: six columns, `rows` rows."""
    lines = [
        "Here is every lighthouse in the register:",
        "",
        "| # | Name | Region | Height (m) | Status | Last inspection |",
        "|---:|---|---|---:|---|---|",
    ]
    for number in range(1, rows + 1):
        name = f"{rng.choice(WORDS).capitalize()} {rng.choice(WORDS)} lighthouse"
        region = f"{rng.choice(WORDS)} and {rng.choice(WORDS)} coast"
        when = f"20{rng.randint(10, 24)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        height = rng.uniform(8, 60)
        lines.append(f"| {number} | {name} | {region} | {height:.1f} | {rng.choice(STATUSES)} | {when} |")
    lines += ["", "All of them are listed above."]
    return "\n".join(lines) + "\n"


def code_reply(rng: random.Random, lines: int) -> str:
    """A fenced Python block of `lines` lines: functions with comments, strings and numbers."""
    out = ["The whole module:", "", "```python"]
    while len(out) - 3 < lines:
        index = len(out)
        word = rng.choice(WORDS)
        out += [
            f"def {word}_{index}(level: int, name: str = {word!r}) -> float:",
            f"    # Beacon {index}: how bright the {word} lamp burns at this level.",
            f"    value = level * {rng.uniform(0, 10):.3f} + len(name)",
            "    return value if value > 0 else 0.0",
            "",
        ]
    out = out[: lines + 3]
    out += ["```", "", "That is all of it."]
    return "\n".join(out) + "\n"


@dataclass
class Phase:
    gaps_ms: list[float]
    seconds: float

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.gaps_ms)
        return {
            "p50_ms": statistics.median(ordered),
            "p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))],
            "max_ms": ordered[-1],
            "ticks": len(ordered),
            "seconds": self.seconds,
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2_000, help="rows of the table")
    parser.add_argument("--lines", type=int, default=50_000, help="lines of the code block")
    parser.add_argument("--resizes", type=int, default=90, help="width changes, 33 ms apart")
    parser.add_argument("--seed", type=int, default=13)
    add_publish_option(parser)
    args = parser.parse_args(argv)
    session = begin("gui_pathological", args, argv)

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QDeadlineTimer, QEventLoop, Qt, QTimer

    from app.paths import HearthPaths
    from app.qt.services import AppServices
    from ui.main import create_application
    from ui.main_window import MainWindow

    rng = random.Random(args.seed)
    # A short reply first: what resizing this window costs whatever it shows (the baseline for resizing).
    replies = {
        "short": "The lamp is lit at dusk and put out at dawn.\n",
        "table": table_reply(rng, args.rows),
        "code": code_reply(rng, args.lines),
    }
    labels = {
        "short": "a one-line reply (baseline)",
        "table": f"{len(replies['table'].encode()) / 1000:,.0f} KB table ({args.rows:,} rows × 6 columns)",
        "code": f"{args.lines:,}-line code block ({len(replies['code'].encode()) / 1e6:.1f} MB)",
    }

    create_application([sys.argv[0]])
    loop = QEventLoop()

    def wait(condition: Callable[[], bool], timeout_ms: int) -> bool:
        deadline = QDeadlineTimer(timeout_ms)
        # An event loop object, not QApplication.processEvents (PySide6 6.12.0 leaks None per call).
        while not condition() and not deadline.hasExpired():
            loop.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 20)
        return condition()

    results: dict[str, dict[str, Any]] = {}
    intact: dict[str, bool] = {}
    with tempfile.TemporaryDirectory(prefix="hearth-gui-pathological-") as home:
        services = AppServices.start(HearthPaths(Path(home)))
        store = services.store
        conversations = {}
        for kind, reply in replies.items():
            conversation = store.create_conversation(f"A pathological {kind}")
            store.add_message(conversation.id, "user", f"Show me the whole {kind}.")
            store.add_message(conversation.id, "assistant", reply)
            conversations[kind] = conversation.id

        window = MainWindow(services, preload_model=False)
        window.resize(WIDTHS[0], HEIGHT)
        window.show()
        # Let start-up work (the background thread warming lexers, the conversation list) finish first.
        quiet: list[bool] = []
        services.background.call(lambda: None, lambda _none: quiet.append(True))
        wait(lambda: bool(quiet), 30_000)
        wait(lambda: False, 500)

        ticks: list[float] = []
        ticker = QTimer()
        ticker.setTimerType(Qt.TimerType.PreciseTimer)
        ticker.setInterval(TICK_MS)
        ticker.timeout.connect(lambda: ticks.append(time.perf_counter()))
        ticker.start()

        def phase(run: Callable[[], object]) -> Phase:
            first = len(ticks)
            started = time.perf_counter()
            run()
            seconds = time.perf_counter() - started
            window_ticks = ticks[first:]
            return Phase([(b - a) * 1000 for a, b in itertools.pairwise(window_ticks)], seconds)

        idle = phase(lambda: wait(lambda: False, int(IDLE_SECONDS * 1000)))
        transcript = window.transcript

        def reply_row(kind: str) -> MessageRow | None:
            rows = [row for row in transcript.rows() if row.role == "assistant"]
            return rows[0] if rows and rows[0].text == replies[kind] else None

        def laid_out(kind: str) -> bool:
            row = reply_row(kind)
            return row is not None and row.segments is not None and not row.draining and row.exact

        def end_shown(kind: str) -> bool:
            row = reply_row(kind)
            if row is None or not row.segments or row.measured_width is None:
                return False
            return row.segments[-1].width > 0 and transcript.is_at_bottom()

        for kind in replies:
            window.resize(WIDTHS[0], HEIGHT)
            wait(lambda: False, 300)
            timings: dict[str, float] = {}

            def show(kind: str = kind, timings: dict[str, float] = timings) -> None:
                opened = time.perf_counter()
                window.open_conversation(conversations[kind])
                if not wait(lambda: end_shown(kind), TIMEOUT_MS):
                    raise SystemExit(f"the {kind} reply's end never showed")
                timings["end_on_screen_s"] = time.perf_counter() - opened
                if not wait(lambda: laid_out(kind), TIMEOUT_MS):
                    raise SystemExit(f"the {kind} reply was never laid out")
                timings["laid_out_s"] = time.perf_counter() - opened

            def resize(kind: str = kind, timings: dict[str, float] = timings) -> None:
                low, high = WIDTHS
                widths = itertools.cycle([*range(low, high, 40), *range(high, low, -40)])
                for _ in range(args.resizes):
                    window.resize(next(widths), HEIGHT)
                    wait(lambda: False, RESIZE_EVERY_MS)
                stopped = time.perf_counter()
                if not wait(lambda: laid_out(kind), TIMEOUT_MS):
                    raise SystemExit(f"the {kind} reply was never laid out again")
                timings["laid_out_after_resizing_s"] = time.perf_counter() - stopped

            showing = phase(show)
            resizing = phase(resize)
            row = reply_row(kind)
            assert row is not None
            results[kind] = {
                "reply_chars": len(replies[kind]),
                "pieces": len(row.segments or []),
                "showing": showing.summary(),
                "resizing": resizing.summary(),
                **timings,
            }
            intact[kind] = shown_intact(kind, transcript, row, replies[kind])
        ticker.stop()
        window.close()
        services.shutdown()

    data = {
        "rows": args.rows,
        "lines": args.lines,
        "resizes": args.resizes,
        "resize_every_ms": RESIZE_EVERY_MS,
        "widths": WIDTHS,
        "labels": labels,
        "idle": idle.summary(),
        "replies": results,
        "shown_intact": intact,
    }
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    return 0 if all(intact.values()) else 1


def render_table(data: Mapping[str, Any]) -> str:
    """The README block, from the results alone."""
    idle, replies, labels = data["idle"], data["replies"], data["labels"]
    met = all(
        replies[kind][name]["p99_ms"] <= 16 and replies[kind][name]["max_ms"] <= 50
        for kind in ("table", "code")
        for name in ("showing", "resizing")
    )
    rows = [
        f"| idle window (baseline) | {idle['p50_ms']:.2f} ms | {idle['p99_ms']:.2f} ms "
        f"| {idle['max_ms']:.2f} ms | |"
    ]
    for kind, measured in replies.items():
        shown, resized = measured["showing"], measured["resizing"]
        rows.append(
            f"| {labels[kind]}: showing it | {shown['p50_ms']:.2f} ms | {shown['p99_ms']:.2f} ms "
            f"| {shown['max_ms']:.2f} ms "
            f"| its end on screen after {measured['end_on_screen_s'] * 1000:,.0f} ms, all of it "
            f"({measured['pieces']} blocks) laid out after {measured['laid_out_s']:.1f} s |"
        )
        rows.append(
            f"| {labels[kind]}: resizing ({data['resizes']} widths, {data['resize_every_ms']} ms apart) "
            f"| {resized['p50_ms']:.2f} ms | {resized['p99_ms']:.2f} ms | {resized['max_ms']:.2f} ms "
            f"| laid out again {measured['laid_out_after_resizing_s']:.1f} s after the last |"
        )
    intact = all(data["shown_intact"].values())
    return "\n".join(
        [
            "| event-loop gap | p50 | p99 | max | |",
            "|---|---|---|---|---|",
            *rows,
            "",
            f"Targets (p99 ≤ 16 ms, max ≤ 50 ms, showing and resizing): {'met' if met else 'not met'}; "
            f"replies shown intact: {'yes' if intact else 'NO'}.",
        ]
    )


def shown_intact(kind: str, transcript: Transcript, row: MessageRow, reply: str) -> bool:
    """Everything the model wrote is there to read and to copy: the table's every cell, in order, and
    its Markdown from the message's Copy; the code's every line, exactly, and all of it from the code
    block's Copy button."""
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtTest import QTest

    shown = row.rendered_text()
    clipboard = QGuiApplication.clipboard()
    if kind == "short":
        return shown.strip() == reply.strip()
    if kind == "code":
        code = reply.split("```python\n", 1)[1].split("\n```", 1)[0]
        button = transcript.code_copy_rect(row.message_id, 0).center()
        QTest.mouseClick(transcript.viewport(), Qt.MouseButton.LeftButton, pos=button)
        return code in shown and clipboard.text() == code
    position = 0
    for line in reply.splitlines():
        if not line.startswith("| ") or line.startswith("|---"):
            continue
        for cell in line.strip("| ").split(" | "):
            position = shown.find(cell, position)
            if position < 0:
                return False
    transcript.trigger("copy", row.message_id)
    return clipboard.text() == reply


if __name__ == "__main__":
    sys.exit(main())
