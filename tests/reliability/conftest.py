"""The fault-injection suite records what it tried; `scripts/reliability_report.sh` turns that into
docs/reliability.md.

A test takes the `fault` fixture and calls it once per kind of fault it injects, with what the fault cost
the user as the test measured it, in one or more of the units in `UNITS`:

    fault("Downloads", "connection dropped mid-transfer", trials=20, outcome="verified file after resume",
          lost={"bytes downloaded again": downloaded_again(hub)})

A test records before it asserts that nothing was lost, so a regression shows in the report as the figure
it measured on a failing row. Only tests that pass are reported as passing; a failing test's faults appear
with its failure, and a skipped test as a SKIPPED row, so the report can never claim an outcome the run did
not show. With HEARTH_RELIABILITY_RECORD set, the run also records the commit it ran on, whether the
code under test had uncommitted changes, and whether it was the whole suite.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections import Counter
from collections.abc import Callable, Generator, Hashable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pytest
from pluggy import Result

REPORT_ENV = "HEARTH_RELIABILITY_RECORD"
SUITE = Path(__file__).resolve().parent
ROOT = SUITE.parents[1]
# What the report is about: a change here makes it stale.
CODE_UNDER_TEST = ("app", "inference", "ui", "tests/reliability")

UNITS: dict[str, str] = {
    "messages": "stored messages missing or changed afterwards",
    "characters": "characters of a reply lost between the screen and the database (shown but not stored, "
    "or stored but not shown as written)",
    "bytes": "bytes of a file that are gone",
    "bytes downloaded again": "bytes of a download that came again because of the fault",
    "models": "installed models gone or no longer matching their SHA-256",
    "secrets": "Hub tokens the user entered that the app no longer has",
}


@dataclass(frozen=True)
class FaultRecord:
    category: str
    fault: str
    trials: int
    outcome: str
    lost: dict[str, int]
    test: str
    result: str = "passed"  # "passed", "failed" or "skipped"
    # One row per trial where a test keeps them (the kill -9 trials: what was shown and what was stored).
    per_trial: list[dict[str, int | str]] = field(default_factory=list)


RecordFault = Callable[..., None]

_records: list[FaultRecord] = []
_pending: dict[str, list[FaultRecord]] = {}
_finished: set[str] = set()
_deselected: list[str] = []


def messages_missing(before: Iterable[Hashable], after: Iterable[Hashable]) -> int:
    """How many of the messages in `before` (repeats counted) are not among `after`: a message whose text
    changed counts as missing."""
    return sum((Counter(before) - Counter(after)).values())


def _common_prefix(a: str | bytes, b: str | bytes) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def characters_missing(shown: str, stored: str) -> int:
    """Characters of what the user was shown that the stored text does not have: everything from the first
    difference on."""
    return len(shown) - _common_prefix(shown, stored)


def bytes_missing(before: bytes, after: bytes) -> int:
    """Bytes of a file's content before that its content after does not have, from the first difference on."""
    return len(before) - _common_prefix(before, after)


@pytest.fixture
def fault(request: pytest.FixtureRequest) -> Iterator[RecordFault]:
    nodeid = request.node.nodeid
    recorded = _pending.setdefault(nodeid, [])

    def record(
        category: str,
        fault: str,
        *,
        trials: int,
        outcome: str,
        lost: Mapping[str, int],
        per_trial: list[dict[str, int | str]] | None = None,
    ) -> None:
        assert trials >= 1, "a fault that was not tried is not reported"
        assert lost, "every fault says what it cost, in at least one unit"
        unknown = set(lost) - set(UNITS)
        assert not unknown, f"unknown units {sorted(unknown)}: use {sorted(UNITS)}"
        assert all(n >= 0 for n in lost.values()), lost
        recorded.append(
            FaultRecord(category, fault, trials, outcome, dict(lost), nodeid, per_trial=per_trial or [])
        )

    yield record


def _category(item: pytest.Item) -> str:
    module = getattr(item, "module", None)
    return str(getattr(module, "CATEGORY", "Uncategorised"))


def _skip_reason(report: pytest.TestReport) -> str:
    if isinstance(report.longrepr, tuple):
        return str(report.longrepr[2]).removeprefix("Skipped: ")
    return str(report.longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.skipped and report.when in ("setup", "call"):
        _finished.add(item.nodeid)
        # Whatever a fault test recorded before skipping was not shown to hold: one SKIPPED row instead.
        _pending.pop(item.nodeid, None)
        if "fault" in getattr(item, "fixturenames", ()):
            _records.append(
                FaultRecord(
                    _category(item),
                    f"not tried: {item.name}",
                    0,
                    _skip_reason(report),
                    {},
                    item.nodeid,
                    result="skipped",
                )
            )
        return
    if report.when == "call" or (report.when == "setup" and report.failed):
        _finished.add(item.nodeid)
        recorded = _pending.pop(item.nodeid, [])
        result = "passed" if report.passed else "failed"
        for record in recorded:
            _records.append(FaultRecord(**{**asdict(record), "result": result}))
        if report.failed and not recorded:
            # A test that failed before recording anything still shows in the report, as a failure.
            _records.append(
                FaultRecord(
                    _category(item),
                    f"not recorded: {item.name}",
                    0,
                    "the test failed before recording its faults",
                    {},
                    item.nodeid,
                    result="failed",
                )
            )


def pytest_deselected(items: list[pytest.Item]) -> None:
    _deselected.extend(item.nodeid for item in items)


def _git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def _tree() -> dict[str, object]:
    """The commit the suite ran on, and uncommitted changes to the code under test (untracked included)."""
    try:
        head = _git("rev-parse", "HEAD")
        status = _git("status", "--porcelain", "--untracked-files=all", "--", *CODE_UNDER_TEST)
    except OSError:
        return {"commit": "unknown", "changes": []}
    if head.returncode != 0 or status.returncode != 0:
        return {"commit": "unknown", "changes": []}
    # The code's git trees identify what was tested even where a clone has no history to compare commits in.
    trees = {path: _git("rev-parse", f"HEAD:{path}").stdout.strip() for path in CODE_UNDER_TEST}
    return {"commit": head.stdout.strip(), "changes": status.stdout.splitlines(), "trees": trees}


# Taken when the suite's modules are imported, before any test runs: the code the run tested.
_TREE = _tree() if os.environ.get(REPORT_ENV) else {}


def _subset(session: pytest.Session) -> str | None:
    """Why this run was not the whole suite, or None when it was."""
    config = session.config
    if config.option.keyword:
        return f"tests chosen with -k {config.option.keyword!r}"
    if config.option.markexpr:
        return f"tests chosen with -m {config.option.markexpr!r}"
    if _deselected:
        return f"{len(_deselected)} tests deselected"
    here = config.invocation_params.dir
    if not any("::" not in arg and SUITE.is_relative_to((here / arg).resolve()) for arg in config.args):
        return f"only {' '.join(config.args)} of tests/reliability"
    suite_items = [item.nodeid for item in session.items if item.path.is_relative_to(SUITE)]
    not_run = [nodeid for nodeid in suite_items if nodeid not in _finished]
    if not_run:
        return f"{len(not_run)} of {len(suite_items)} tests did not run (the run stopped early)"
    return None


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get(REPORT_ENV)
    if target:
        run = {**_TREE, "subset": _subset(session), "pytest_args": list(session.config.args)}
        document = {"run": run, "units": UNITS, "records": [asdict(r) for r in _records]}
        Path(target).write_text(json.dumps(document, indent=1), encoding="utf-8")
