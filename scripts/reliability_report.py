"""Turn the fault records of a tests/reliability run (HEARTH_RELIABILITY_RECORD) into docs/reliability.md.

Every number in the report is computed from the records; nothing is typed in. Run through
scripts/reliability_report.sh, which runs the suite first. docs/reliability.md is written only from a run
of the whole suite on a commit without uncommitted changes to the code under test; any other run can be
rendered to another file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORT = ROOT / "docs" / "reliability.md"
CODE_UNDER_TEST = ("app", "inference", "ui", "tests/reliability")
_COMMIT_LINE = re.compile(r"^- Commit: `([0-9a-f]{40})`$", re.MULTILINE)
_CLEAN_TREE_LINE = re.compile(r"^- Tree: clean\b", re.MULTILINE)
_CODE_LINE = re.compile(r"^- Code under test: (.+)$", re.MULTILINE)
_CODE_TREE = re.compile(r"`([^`]+)/` `([0-9a-f]{40})`")


@dataclass(frozen=True)
class Record:
    category: str
    fault: str
    trials: int
    outcome: str
    lost: dict[str, int]
    test: str
    result: str
    per_trial: list[dict[str, int | str]] = field(default_factory=list)


@dataclass(frozen=True)
class Run:
    """What the suite recorded about itself: the commit, uncommitted changes, and why it was not whole."""

    commit: str
    changes: list[str]
    trees: dict[str, str]
    subset: str | None
    units: dict[str, str]
    records: list[Record]


def load(path: Path) -> Run:
    document = json.loads(path.read_text(encoding="utf-8"))
    run = document["run"]
    return Run(
        commit=run.get("commit", "unknown"),
        changes=list(run.get("changes", [])),
        trees=dict(run.get("trees", {})),
        subset=run.get("subset"),
        units=dict(document["units"]),
        records=[Record(**item) for item in document["records"]],
    )


def refusals(run: Run) -> list[str]:
    """Why this run may not become docs/reliability.md (none: it may)."""
    reasons = []
    if run.subset is not None:
        reasons.append(f"it ran a subset of the suite ({run.subset})")
    if run.changes:
        listed = ", ".join(line[3:] for line in run.changes[:5]) + (", …" if len(run.changes) > 5 else "")
        reasons.append(f"the code under test had uncommitted changes ({listed})")
    if len(run.trees) != len(CODE_UNDER_TEST) or not all(run.trees.values()):
        reasons.append("the git trees of the code under test are unknown")
    if run.commit == "unknown":
        reasons.append("the commit it ran on is unknown (not a git checkout)")
    return reasons


def commit_of(report: str) -> str | None:
    """The commit a report was generated on, as written in it."""
    match = _COMMIT_LINE.search(report)
    return match.group(1) if match else None


def code_trees_of(report: str) -> dict[str, str]:
    """The git tree of each folder of the code under test when the report was generated, as written in it."""
    match = _CODE_LINE.search(report)
    return dict(_CODE_TREE.findall(match.group(1))) if match else {}


def tree_was_clean(report: str) -> bool:
    """Whether a report says the code under test had no uncommitted changes when it was generated."""
    return _CLEAN_TREE_LINE.search(report) is not None


def _dirs() -> str:
    return ", ".join(f"{d}/" for d in CODE_UNDER_TEST)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _amount(lost: Mapping[str, int]) -> str:
    return ", ".join(f"{n:,} {unit}" for unit, n in lost.items()) if lost else "—"


def _totals(records: Sequence[Record], units: Mapping[str, str]) -> dict[str, int]:
    totals = dict.fromkeys(units, 0)
    for record in records:
        for unit, n in record.lost.items():
            totals[unit] = totals.get(unit, 0) + n
    return totals


_RESULT = {"passed": "pass", "failed": "**FAIL**", "skipped": "SKIPPED"}


def _where(test: str) -> str:
    parts = test.split("::")
    return f"`{Path(parts[0]).name}::{parts[-1]}`" if len(parts) > 1 else f"`{test}`"


def _per_trial(record: Record) -> list[str]:
    """A record's trials as a table, folded away under its outcome."""
    rows = record.per_trial
    columns = list(dict.fromkeys(key for row in rows for key in row))
    lines = [
        f"### {record.fault}",
        "",
        f"{record.outcome}.",
        "",
        f"<details><summary>{len(rows)} trials</summary>",
        "",
        "| " + " | ".join(columns) + " |",
        "|" + "---|" * len(columns),
    ]
    lines += ["| " + " | ".join(_cell(str(row.get(c, ""))) for c in columns) + " |" for row in rows]
    return [*lines, "", "</details>", ""]


def render(run: Run, *, when: datetime, pytest_status: int | None) -> str:
    records = run.records
    order = {name: i for i, name in enumerate(dict.fromkeys(r.category for r in records))}
    rows = sorted(records, key=lambda r: (order[r.category], r.test, r.fault))
    counts = {result: sum(r.result == result for r in rows) for result in _RESULT}
    trials = sum(r.trials for r in rows)
    totals = _totals(rows, run.units)
    if counts["failed"] or pytest_status not in (0, None):
        verdict = "FAILURES"
    elif counts["skipped"]:
        verdict = f"all that ran passed; {counts['skipped']} SKIPPED"
    else:
        verdict = "all passed"
    if run.changes:
        changed = ", ".join(f"`{line[3:]}`" for line in run.changes)
        tree = f"**{len(run.changes)} uncommitted changes** to the code under test: {changed}"
    else:
        tree = f"clean (no uncommitted changes to {_dirs()})"
    lines = [
        "# Reliability report",
        "",
        "Generated by `scripts/reliability_report.sh` from a run of the fault-injection suite "
        "(`tests/reliability`); do not edit by hand. Each row is a fault the suite injected for real, "
        "how many times, what the user was left with, what it cost them as the test measured it, and "
        "whether the test that tried it passed.",
        "",
        f"- Date: {when:%Y-%m-%d %H:%M} UTC",
        f"- Commit: `{run.commit}`",
        f"- Tree: {tree}",
        "- Code under test: " + ", ".join(f"`{path}/` `{tree}`" for path, tree in run.trees.items()),
        "- Run: the whole suite" if run.subset is None else f"- Run: **a subset**: {run.subset}",
        f"- Result: {verdict} ({counts['passed']} of {len(rows)} faults passed, {counts['failed']} failed, "
        f"{counts['skipped']} skipped"
        + (f"; pytest exit status {pytest_status}" if pytest_status is not None else "")
        + ")",
        f"- Trials: {trials:,}",
        f"- **Data lost: {_amount(totals)}**",
        "",
        "Data lost, by unit:",
        "",
        *(f"- {unit}: {meaning}" for unit, meaning in run.units.items()),
        "",
        "| Category | Fault | Trials | Outcome | Data lost | Result | Test |",
        "|---|---|---:|---|---:|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {_cell(r.category)} | {_cell(r.fault)} | {r.trials} | {_cell(r.outcome)} | {_amount(r.lost)} "
            f"| {_RESULT[r.result]} | {_where(r.test)} |"
        )
    lines += [
        "",
        f"Totals: {len(rows)} faults, {trials:,} trials, {counts['failed']} failed, "
        f"{counts['skipped']} skipped, data lost: {_amount(totals)}.",
        "",
    ]
    detailed = [r for r in rows if r.per_trial]
    if detailed:
        lines += ["## Trial by trial", ""]
        for record in detailed:
            lines += _per_trial(record)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("record", type=Path, help="the JSON written by the suite (HEARTH_RELIABILITY_RECORD)")
    parser.add_argument("output", type=Path, help="the Markdown file to write")
    parser.add_argument("--pytest-status", type=int, default=None, help="pytest's exit status, if known")
    args = parser.parse_args(argv)
    empty = not args.record.exists() or not args.record.read_text(encoding="utf-8").strip()
    run = None if empty else load(args.record)
    if run is None or not run.records:
        print(f"{args.record}: no faults were recorded; the report was not written", file=sys.stderr)
        return 1
    if args.output.resolve() == REPORT:
        refused = refusals(run)
        if refused:
            print(
                f"{REPORT.relative_to(ROOT)} was not written: {'; '.join(refused)}. It comes only from the "
                "whole suite (scripts/reliability_report.sh without arguments) on a commit with no "
                f"uncommitted changes to {_dirs()}; set HEARTH_RELIABILITY_REPORT to write this run's "
                "report elsewhere.",
                file=sys.stderr,
            )
            return 2
    report = render(run, when=datetime.now(UTC), pytest_status=args.pytest_status)
    args.output.write_text(report, encoding="utf-8")
    print(f"wrote {args.output}: {len(run.records)} faults")
    return 0


if __name__ == "__main__":
    sys.exit(main())
