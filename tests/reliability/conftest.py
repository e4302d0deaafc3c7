"""The fault-injection suite records what it tried; `scripts/reliability_report.sh` turns that into
docs/reliability.md.

A test takes the `fault` fixture and calls it once per kind of fault it injects:

    fault("Downloads", "connection dropped mid-transfer", trials=20, outcome="verified file after resume")

Only tests that pass are reported as passing; a failing test's faults appear with its failure, so the
report can never claim an outcome the run did not show. `data_lost` is what the test measured (0 when it
asserted that every earlier byte and message survived).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Generator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
from pluggy import Result

REPORT_ENV = "HEARTH_RELIABILITY_RECORD"


@dataclass(frozen=True)
class FaultRecord:
    category: str
    fault: str
    trials: int
    outcome: str
    data_lost: int
    test: str
    passed: bool = True


_records: list[FaultRecord] = []
_pending: dict[str, list[FaultRecord]] = {}

RecordFault = Callable[..., None]


@pytest.fixture
def fault(request: pytest.FixtureRequest) -> Iterator[RecordFault]:
    nodeid = request.node.nodeid
    recorded = _pending.setdefault(nodeid, [])

    def record(category: str, fault: str, *, trials: int, outcome: str, data_lost: int = 0) -> None:
        assert trials >= 1, "a fault that was not tried is not reported"
        recorded.append(FaultRecord(category, fault, trials, outcome, data_lost, nodeid))

    yield record


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, Result[pytest.TestReport], None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" or (report.when == "setup" and report.failed):
        recorded = _pending.pop(item.nodeid, [])
        for record in recorded:
            _records.append(FaultRecord(**{**asdict(record), "passed": report.passed}))
        if report.failed and not recorded:
            # A test that failed before recording anything still shows in the report, as a failure.
            _records.append(
                FaultRecord(
                    "Not recorded",
                    "the test failed before recording its faults",
                    0,
                    "failed",
                    0,
                    item.nodeid,
                    passed=False,
                )
            )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    target = os.environ.get(REPORT_ENV)
    if target:
        Path(target).write_text(json.dumps([asdict(r) for r in _records], indent=1), encoding="utf-8")
