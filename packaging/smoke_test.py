"""Smoke-test a frozen Hearth the same way on Linux, Windows and macOS (CI and the build scripts use it).

    python packaging/smoke_test.py EXE [--gui-exe GUI_EXE] [--backend CPU|CUDA|Metal|any]

EXE is the console executable (Linux `dist/hearth/hearth`, Windows `hearth-cli.exe`, macOS
`Hearth.app/Contents/MacOS/Hearth`); GUI_EXE the one a double-click starts (Windows `Hearth.exe`, which
has no console; default EXE). Each step gets a fresh --home, no proxy and HF_HUB_OFFLINE=1:

1. `EXE --help`
2. `GUI_EXE gui --smoke-test` with QT_QPA_PLATFORM=offscreen: exit 0 and "smoke test passed" in the log
3. `EXE doctor --json`: the version, the backend, and a reason when no GPU is used
4. `EXE chat --model SmolLM2-135M-Instruct-Q4_1 --max-tokens 16 hi` with the bundled starter model: a
   reply on stdout, stored as complete

Standard library only, so any Python runs it. Prints one line per step; exits 1 on the first failure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STARTER = "SmolLM2-135M-Instruct-Q4_1"
TIMEOUT_S = 300


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and not k.startswith("HEARTH_")}
    env |= {"HF_HUB_OFFLINE": "1", "QT_QPA_PLATFORM": "offscreen", "PYTHONIOENCODING": "utf-8"}
    for name in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(name, None)
    return env


def _run(args: list[str], step: str) -> subprocess.CompletedProcess[str]:
    started = time.perf_counter()
    result = subprocess.run(
        args,
        env=_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        timeout=TIMEOUT_S,
        check=False,
    )
    print(f"{step}: exit {result.returncode} in {time.perf_counter() - started:.2f} s", flush=True)
    return result


def _fail(message: str, result: subprocess.CompletedProcess[str] | None = None) -> int:
    print(f"FAILED: {message}", file=sys.stderr)
    if result is not None:
        print(f"--- stdout\n{result.stdout[-2000:]}\n--- stderr\n{result.stderr[-4000:]}", file=sys.stderr)
    return 1


def smoke(exe: Path, gui_exe: Path, backend: str, work: Path) -> int:
    result = _run([str(exe), "--help"], "help")
    if result.returncode != 0 or "usage: hearth" not in result.stdout:
        return _fail("--help", result)

    home = work / "gui"
    result = _run([str(gui_exe), "gui", "--smoke-test", "--home", str(home)], "gui --smoke-test")
    log = home / "logs" / "hearth.log"
    if result.returncode != 0 or not log.is_file() or "smoke test passed" not in log.read_text("utf-8"):
        tail = log.read_text("utf-8")[-3000:] if log.is_file() else "(no log)"
        return _fail(f"gui --smoke-test; log:\n{tail}", result)

    result = _run([str(exe), "doctor", "--json", "--home", str(work / "doctor")], "doctor --json")
    if result.returncode != 0:
        return _fail("doctor", result)
    report = json.loads(result.stdout)
    print(f"  backend {report['backend']['name']}: {report['backend']['detail']}")
    print(f"  gpus {[g['name'] for g in report['gpus']]}; gpu_reason {report['gpu_reason']!r}")
    if backend != "any" and report["backend"]["name"] != backend:
        return _fail(f"backend {report['backend']['name']}, expected {backend}")
    if not report["gpus"] and not report["gpu_reason"]:
        return _fail("no GPU and no reason given")
    if not report["version"] or not report["llama_cpp_python"]:
        return _fail("doctor does not know the versions (metadata missing from the bundle)")

    home = work / "chat"
    args = [str(exe), "chat", "--home", str(home), "--model", STARTER, "--max-tokens", "16", "hi"]
    result = _run(args, "chat")
    if result.returncode != 0 or not result.stdout.strip():
        runner_log = home / "logs" / "runner.log"
        tail = runner_log.read_text("utf-8", "replace")[-3000:] if runner_log.is_file() else "(no log)"
        return _fail(f"chat; runner log:\n{tail}", result)
    print(f"  reply: {result.stdout.strip()[:80]!r}")
    show = [str(exe), "conversations", "show", "1", "--json", "--home", str(home)]
    shown = _run(show, "conversations show")
    messages = json.loads(shown.stdout)["messages"] if shown.returncode == 0 else []
    if len(messages) != 2 or messages[1]["status"] != "complete":
        return _fail("the reply was not stored as complete", shown)
    print("smoke test passed")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("exe", type=Path)
    parser.add_argument("--gui-exe", type=Path)
    parser.add_argument("--backend", default="any", help="expected `doctor` backend name (default: any)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="hearth-smoke-") as work:
        return smoke(args.exe.resolve(), (args.gui_exe or args.exe).resolve(), args.backend, Path(work))


if __name__ == "__main__":
    sys.exit(main())
