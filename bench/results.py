"""Where benchmarks put what they measured: `docs/bench/NAME.json` (with the commit and the machine) and the
README table between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`, so no figure there is typed by hand."""

from __future__ import annotations

import json
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inference.ggml_backends import cpu_model

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def commit() -> str:
    """The commit measured, with `+dirty` when the tree had uncommitted changes (other than the results
    themselves: the README's tables and docs/bench/ from an earlier run)."""
    head = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!README.md", ":!docs/bench"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def publish(name: str, data: dict[str, Any], table: str) -> Path:
    """Write the results and replace the README's block for NAME with `table` (Markdown)."""
    measured = {
        "commit": commit(),
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"cpu": cpu_model(), "platform": platform.platform()},
        **data,
    }
    out = ROOT / "docs" / "bench" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(measured, indent=2) + "\n", encoding="utf-8")
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = README.read_text(encoding="utf-8")
    if start in text and end in text:
        before, rest = text.split(start, 1)
        after = rest.split(end, 1)[1]
        where = f"at {measured['commit']} on {measured['machine']['cpu']}"
        source = f"\n\n_Written by `bench/{name}.py` {where}._\n"
        README.write_text(f"{before}{start}\n{table.strip()}{source}{end}{after}", encoding="utf-8")
    return out
