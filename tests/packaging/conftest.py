"""Packaging tests: `packaging`-marked ones build the installers and run the frozen app (minutes, not
seconds), so they run only when HEARTH_PACKAGING_TESTS=1 — scripts/bootstrap.sh test sets it for a full run,
which is what CI runs. The unmarked ones here are fast and always run."""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "packaging: builds the installers and runs the frozen app (slow)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("HEARTH_PACKAGING_TESTS") == "1":
        return
    skip = pytest.mark.skip(reason="builds the installers; HEARTH_PACKAGING_TESTS=1 turns it on")
    for item in items:
        if item.get_closest_marker("packaging") is not None:
            item.add_marker(skip)
