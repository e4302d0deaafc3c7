"""The README's measured figures are generated: every block is what its docs/bench JSON renders to, and no
table or figure in the Performance and Installers sections stands outside one (bench/results.py)."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from bench.results import (
    BLOCK,
    README,
    Session,
    blocks,
    load_results,
    pending,
    regenerate,
    render,
    stale_blocks,
)

UNIT = r"(?:ms|s|min|h|seconds?|minutes?|KiB|MiB|GiB|KB|MB|GB|tok/s|tokens/s|×|x)"
# A number with a unit of time, size or rate, or a percentage: what only a measurement can say.
MEASURED = re.compile(rf"\d[\d,]*(?:\.\d+)?\s?{UNIT}(?!\w)|\d\s?%")
# In the Performance section also any decimal number: a ratio, a target, a version that varies by machine.
DECIMAL = re.compile(r"\d\.\d")


def section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def outside_blocks(text: str) -> list[str]:
    return BLOCK.sub("", text).splitlines()


def test_every_block_is_what_its_results_render_to() -> None:
    stale = stale_blocks(README.read_text(encoding="utf-8"), load_results())
    assert not stale, f"run `python -m bench.results` (or the benchmark) to regenerate: {stale}"


def test_every_result_has_a_block_and_every_block_a_result_or_says_it_has_none() -> None:
    current = blocks(README.read_text(encoding="utf-8"))
    assert set(load_results()) <= set(current)
    for name in set(current) - set(load_results()):
        assert current[name] == pending(name), name
        assert callable(getattr(importlib.import_module(f"bench.{name}"), "render_table", None)), name


def test_no_table_or_figure_in_the_performance_section_outside_a_block() -> None:
    lines = outside_blocks(section(README.read_text(encoding="utf-8"), "Performance"))
    tables = [line for line in lines if line.lstrip().startswith("|")]
    figures = [line for line in lines if MEASURED.search(line) or DECIMAL.search(line)]
    assert not tables, tables
    assert not figures, figures


def test_no_measured_figure_in_the_installers_section_outside_a_block() -> None:
    lines = outside_blocks(section(README.read_text(encoding="utf-8"), "Installers"))
    assert not [line for line in lines if MEASURED.search(line)]


def test_the_figure_checks_catch_hand_typed_figures() -> None:
    hand_typed = (
        "| delete a conversation | 1.25 s |",
        "69 ms (2.4% of the first)",
        "adds 610 MB",
        "≥ 0.97",
        "986 MiB/s",
    )
    for line in hand_typed:
        assert MEASURED.search(line) or DECIMAL.search(line), line
    for line in ("SmolLM2-135M Q4_1, 2 threads", "Llama-3-8B and Gemma-3-1B", "bars P1 to P13", "SHA-256"):
        assert not MEASURED.search(line) and not DECIMAL.search(line), line


def _readme(tmp_path: Path, *names: str) -> Path:
    readme = tmp_path / "README.md"
    readme.write_text(
        "# Title\n\n" + "".join(f"<!-- bench:{n} -->\nold\n<!-- /bench:{n} -->\n\nprose\n" for n in names),
        encoding="utf-8",
    )
    return readme


def test_publish_writes_the_results_and_renders_the_block_from_them(tmp_path: Path) -> None:
    readme, directory = _readme(tmp_path, "cuda_bundle"), tmp_path / "bench"
    session = Session("cuda_bundle", "python -m bench.cuda_bundle", {"dist": "dist"})
    out = session.publish({"wheel": None, "bundle": None}, readme=readme, directory=directory)

    measured = json.loads(out.read_text(encoding="utf-8"))
    assert measured["command"] == "python -m bench.cuda_bundle"
    assert measured["options"] == {"dist": "dist"}
    assert len(measured["machine"]["load_average_start"]) == 3
    body = blocks(readme.read_text(encoding="utf-8"))["cuda_bundle"]
    assert body == render(measured)
    assert "not measured on this commit" in body
    assert f"at {measured['commit']} on" in body
    assert readme.read_text(encoding="utf-8").endswith("-->\n\nprose\n")


def test_regenerate_rewrites_a_stale_block_from_its_results(tmp_path: Path) -> None:
    readme, directory = _readme(tmp_path, "cuda_bundle"), tmp_path / "bench"
    session = Session("cuda_bundle", "python -m bench.cuda_bundle", {})
    session.publish({"wheel": None, "bundle": None}, readme=readme, directory=directory)
    results = directory / "cuda_bundle.json"
    measured = json.loads(results.read_text(encoding="utf-8"))
    measured["wheel"] = {
        "name": "w.whl",
        "size": 45 << 20,
        "libggml_cuda": 58 << 20,
        "architectures": ["sm_90"],
    }
    results.write_text(json.dumps(measured), encoding="utf-8")

    assert regenerate(readme, directory) == ["cuda_bundle"]
    assert "| `w.whl` | 45 MiB | 58 MiB | sm_90 |" in readme.read_text(encoding="utf-8")
    assert regenerate(readme, directory) == []


def test_results_without_a_block_in_the_readme_are_refused(tmp_path: Path) -> None:
    readme, directory = _readme(tmp_path), tmp_path / "bench"
    with pytest.raises(ValueError, match="no block <!-- bench:cuda_bundle -->"):
        Session("cuda_bundle", "python -m bench.cuda_bundle", {}).publish(
            {"wheel": None, "bundle": None}, readme=readme, directory=directory
        )


def test_a_pending_block_is_stale_once_anything_else_is_in_it() -> None:
    text = "<!-- bench:retrieval -->\n" + pending("retrieval") + "<!-- /bench:retrieval -->\n"
    assert stale_blocks(text, {}) == []
    assert stale_blocks(text.replace("Not measured", "Measured"), {}) == ["retrieval"]
