"""docs/reliability.md: fresh (generated on a commit no older than the last change to the code it is
about), rendered from what the fault-injection suite recorded, and never from part of the suite."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.reliability import conftest as suite

ROOT = Path(__file__).resolve().parents[2]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "reliability_report", ROOT / "scripts" / "reliability_report.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first: dataclasses look their module up while the class is made.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


report = _load_script()


def git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)


def test_the_committed_report_is_not_older_than_the_code_it_is_about() -> None:
    if shutil.which("git") is None or git("rev-parse", "--is-inside-work-tree").stdout.strip() != "true":
        pytest.skip("not a git checkout: the report's commit cannot be checked")
    text = report.REPORT.read_text(encoding="utf-8")
    commit = report.commit_of(text)
    regenerate = "regenerate it with scripts/reliability_report.sh and commit it"
    assert commit is not None, f"docs/reliability.md names no commit: {regenerate}"
    # The code's trees are compared first: that works in a shallow clone too.
    recorded = report.code_trees_of(text)
    assert set(recorded) == set(suite.CODE_UNDER_TEST), (
        f"docs/reliability.md names no code trees: {regenerate}"
    )
    changed = [
        path for path, tree in recorded.items() if git("rev-parse", f"HEAD:{path}").stdout.strip() != tree
    ]
    assert not changed, (
        f"docs/reliability.md was generated on {commit[:12]}, but {', '.join(changed)} changed since: "
        f"{regenerate}"
    )
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0:
        last = git("log", "-1", "--format=%H", "--", *suite.CODE_UNDER_TEST).stdout.strip()
        ancestor = git("merge-base", "--is-ancestor", last, commit)
        assert ancestor.returncode == 0, (
            f"docs/reliability.md was generated on {commit[:12]}, but {last[:12]} changed "
            f"{', '.join(suite.CODE_UNDER_TEST)} after it (or on another branch): {regenerate}"
        )
    assert report.tree_was_clean(text), (
        f"docs/reliability.md does not say the code under test was committed when it ran: {regenerate}"
    )


def test_the_script_and_the_suite_agree_on_the_code_under_test() -> None:
    assert report.CODE_UNDER_TEST == suite.CODE_UNDER_TEST


def record(result: str = "passed", lost: dict[str, int] | None = None, **fields: object) -> Any:
    values: dict[str, object] = {
        "category": "Conversations",
        "fault": "app killed",
        "trials": 1,
        "outcome": "kept",
        "lost": {"messages": 0} if lost is None else lost,
        "test": "tests/reliability/test_x.py::test_y",
        "result": result,
    }
    return report.Record(**(values | fields))


def run(records: list[Any], **fields: object) -> Any:
    values: dict[str, object] = {
        "commit": "a" * 40,
        "changes": [],
        "trees": {path: f"{i}" * 40 for i, path in enumerate(suite.CODE_UNDER_TEST)},
        "subset": None,
        "units": suite.UNITS,
        "records": records,
    }
    return report.Run(**(values | fields))


WHEN = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def test_the_report_names_the_trees_of_the_code_it_tested_and_refuses_without_them() -> None:
    tested = run([record()])
    assert report.code_trees_of(report.render(tested, when=WHEN, pytest_status=0)) == tested.trees
    assert report.refusals(tested) == []
    assert report.refusals(run([record()], trees={})) == ["the git trees of the code under test are unknown"]


def test_losses_are_totalled_per_unit_and_skipped_tests_are_rows() -> None:
    records = [
        record(lost={"messages": 2}),
        record(lost={"characters": 5, "messages": 1}, fault="disk full"),
        record(lost={"bytes downloaded again": 7_000_000}, category="Downloads", fault="Range ignored"),
        record("skipped", {}, fault="not tried: test_z", trials=0, outcome="needs root"),
    ]
    text = report.render(run(records), when=WHEN, pytest_status=0)
    assert (
        "- **Data lost: 3 messages, 5 characters, 0 bytes, 7,000,000 bytes downloaded again, 0 models, "
        "0 secrets**"
    ) in text
    assert "| Conversations | disk full | 1 | kept | 5 characters, 1 messages | pass |" in text
    assert "| Conversations | not tried: test_z | 0 | needs root | — | SKIPPED |" in text
    assert "- Result: all that ran passed; 1 SKIPPED (3 of 4 faults passed, 0 failed, 1 skipped" in text
    assert f"- Commit: `{'a' * 40}`" in text and report.commit_of(text) == "a" * 40
    assert report.tree_was_clean(text) and "- Run: the whole suite" in text
    # Every unit is explained where the total is.
    for unit, meaning in suite.UNITS.items():
        assert f"- {unit}: {meaning}" in text


def test_a_failure_anywhere_is_the_verdict() -> None:
    text = report.render(run([record(), record("failed", fault="x")]), when=WHEN, pytest_status=1)
    assert "- Result: FAILURES (1 of 2 faults passed, 1 failed" in text and "| **FAIL** |" in text


def test_per_trial_rows_are_kept_under_their_fault() -> None:
    trials = [{"trial": 0, "outcome": "partial reply kept", "shown": 40, "stored": 31, "lost": 9}]
    text = report.render(run([record(per_trial=trials)]), when=WHEN, pytest_status=0)
    assert "| trial | outcome | shown | stored | lost |" in text
    assert "| 0 | partial reply kept | 40 | 31 | 9 |" in text


def write_record(path: Path, **run_fields: object) -> Path:
    document = {
        "run": {"commit": "b" * 40, "changes": [], "subset": None} | run_fields,
        "units": suite.UNITS,
        "records": [record().__dict__],
    }
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("run_fields", "reason"),
    [
        (
            {"subset": "tests chosen with -k 'kill'"},
            "it ran a subset of the suite (tests chosen with -k 'kill')",
        ),
        ({"changes": [" M app/chat/engine.py"]}, "uncommitted changes (app/chat/engine.py)"),
        ({"commit": "unknown"}, "the commit it ran on is unknown"),
    ],
)
def test_the_committed_report_is_never_written_from_part_of_the_suite_or_uncommitted_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], run_fields: dict[str, object], reason: str
) -> None:
    recorded = write_record(tmp_path / "record.json", **run_fields)
    before = report.REPORT.read_bytes()
    assert report.main([str(recorded), str(report.REPORT)]) == 2
    assert report.REPORT.read_bytes() == before
    assert reason in capsys.readouterr().err
    # Any other file gets the report, which says what the run was.
    elsewhere = tmp_path / "report.md"
    assert report.main([str(recorded), str(elsewhere)]) == 0
    text = elsewhere.read_text(encoding="utf-8")
    assert not (report.commit_of(text) and report.tree_was_clean(text) and "- Run: the whole suite" in text)


SUITE_PART = """
    import pytest

    def test_recorded(fault):
        fault("Backups", "one", trials=1, outcome="fine", lost={"messages": 0})

    @pytest.mark.skipif(True, reason="skipped by a marker")
    def test_skipped_by_a_marker(fault):
        pass

    @pytest.fixture
    def unavailable():
        pytest.skip("skipped in a fixture")

    def test_skipped_in_setup(unavailable, fault):
        pass

    def test_skipped_after_recording(fault):
        fault("Backups", "two", trials=1, outcome="never shown", lost={"messages": 0})
        pytest.skip("skipped in the test")

    def test_not_a_fault_test():
        pytest.skip("not reported")
"""


def run_suite_hooks(tmp_path: Path, *args: str) -> dict[str, object]:
    """The suite's recording hooks around a few tests of our own, in a pytest of its own."""
    tests = tmp_path / "test_part.py"
    tests.write_text(textwrap.dedent(SUITE_PART), encoding="utf-8")
    recorded = tmp_path / "record.json"
    env = {**os.environ, suite.REPORT_ENV: str(recorded), "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.reliability.conftest",
         "--rootdir", str(tmp_path), *args, str(tests)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    document: dict[str, object] = json.loads(recorded.read_text(encoding="utf-8"))
    return document


def test_skipped_fault_tests_are_recorded_as_skipped_and_a_subset_says_so(tmp_path: Path) -> None:
    document = run_suite_hooks(tmp_path)
    records = document["records"]
    assert isinstance(records, list)
    rows = {(r["fault"], r["result"], r["outcome"]) for r in records}
    assert rows == {
        ("one", "passed", "fine"),
        ("not tried: test_skipped_by_a_marker", "skipped", "skipped by a marker"),
        ("not tried: test_skipped_in_setup", "skipped", "skipped in a fixture"),
        ("not tried: test_skipped_after_recording", "skipped", "skipped in the test"),
    }
    run = document["run"]
    assert isinstance(run, dict)
    assert run["subset"] == f"only {tmp_path / 'test_part.py'} of tests/reliability"

    chosen = run_suite_hooks(tmp_path, "-k", "recorded")["run"]
    assert isinstance(chosen, dict) and chosen["subset"] == "tests chosen with -k 'recorded'"
