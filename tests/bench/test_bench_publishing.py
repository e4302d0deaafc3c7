"""The P10 and P11 benchmarks publish through bench/results.py: run for real at a tiny size, each writes its
JSON and replaces its README block (here in a copy of the README) with what that JSON renders to."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtWidgets import QApplication

from bench import results, retrieval, ttft_attachment
from bench.results import README, blocks, pending, render


@pytest.fixture
def published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """Publishing goes to a copy of the README and a results folder in tmp_path."""
    readme, directory = tmp_path / "README.md", tmp_path / "bench"
    readme.write_text(README.read_text(encoding="utf-8"), encoding="utf-8")
    publish: Callable[..., Path] = results.Session.publish

    def to_tmp(self: results.Session, data: Mapping[str, Any], **_: object) -> Path:
        return publish(self, data, readme=readme, directory=directory)

    monkeypatch.setattr(results.Session, "publish", to_tmp)
    return readme, directory


def check(name: str, readme: Path, directory: Path) -> str:
    measured = json.loads((directory / f"{name}.json").read_text(encoding="utf-8"))
    body = blocks(readme.read_text(encoding="utf-8"))[name]
    assert body == render(measured) != pending(name)
    # Everything else in the README is as it was.
    original = README.read_text(encoding="utf-8")
    assert readme.read_text(encoding="utf-8").replace(body, "") == original.replace(
        blocks(original)[name], ""
    )
    return body


def test_the_retrieval_benchmark_publishes_its_table(published: tuple[Path, Path]) -> None:
    assert retrieval.main(["--sizes", "300", "600", "--queries", "4"]) == 0
    body = check("retrieval", *published)
    assert "| 300 | exact |" in body and "| 600 | exact |" in body
    assert "p95 at the largest over p95 at the smallest" in body


@pytest.mark.model
@pytest.mark.timeout(900)
def test_the_attachment_ttft_benchmark_publishes_its_table(
    published: tuple[Path, Path], qapp: QApplication
) -> None:
    # pytest-qt's application first: the bench would make a QCoreApplication, which the GUI tests after
    # this one cannot use (a process has one application object).
    assert ttft_attachment.main(["--pages", "1", "--words-per-page", "60", "--rounds", "1"]) == 0
    body = check("ttft_attachment", *published)
    assert "A 1-page PDF" in body and "Send extracted no file and embedded no passage" in body
