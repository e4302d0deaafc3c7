"""Where benchmarks put what they measured, so no figure in the README is typed by hand.

Each benchmark `bench/NAME.py` measures, then calls `Session.publish()`: that writes `docs/bench/NAME.json`
(the command line and options, the commit, the machine and its load, every round's raw numbers and the
summaries) and regenerates the README's block between `<!-- bench:NAME -->` and `<!-- /bench:NAME -->`
from it with the module's own `render_table(data) -> str`. The prose around a block says how a figure is
measured, never what it came to: the table and the sentences under it are all rendered from the JSON.

    .venv/bin/python -m bench.results            # regenerate every README block from docs/bench/*.json
    .venv/bin/python -m bench.results --check    # exit 1 if a block differs from what its JSON renders to

A block whose benchmark has not published yet holds only `pending(name)`, which says so and how to run it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, cast

from inference.ggml_backends import cpu_model

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "bench"
BLOCK = re.compile(r"<!-- bench:(?P<name>[a-z0-9_]+) -->\n(?P<body>.*?)<!-- /bench:(?P=name) -->", re.DOTALL)


class Renderer(Protocol):
    def render_table(self, data: Mapping[str, Any]) -> str: ...


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


def _plain(value: object) -> object:
    """Option values as JSON holds them (paths as strings)."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


@dataclass
class Session:
    """One run of a benchmark: what was asked for and how busy the machine was when it began."""

    name: str
    command: str
    options: dict[str, object]
    # Taken before measuring: the code that ran, even if the tree changes while a long run goes on.
    revision: str = field(default_factory=commit)
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    load_at_start: tuple[float, float, float] = field(default_factory=os.getloadavg)

    def publish(self, data: Mapping[str, Any], *, readme: Path = README, directory: Path = RESULTS) -> Path:
        """Write the results and regenerate the README's block for this benchmark from them."""
        measured = {
            "benchmark": self.name,
            "command": self.command,
            "options": self.options,
            "commit": self.revision,
            "date": self.started.isoformat(timespec="seconds"),
            "machine": {
                "cpu": cpu_model(),
                "cores": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
                "load_average_start": [round(v, 2) for v in self.load_at_start],
                "load_average_end": [round(v, 2) for v in os.getloadavg()],
            },
            **data,
        }
        # Rendered first: results the README has no place for are refused before anything is written.
        text = replace_block(readme.read_text(encoding="utf-8"), self.name, render(measured))
        out = directory / f"{self.name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(measured, indent=2) + "\n", encoding="utf-8")
        readme.write_text(text, encoding="utf-8")
        return out


def begin(name: str, args: argparse.Namespace, argv: Sequence[str] | None = None) -> Session:
    """Call before measuring: the load average is taken now, the command line as given."""
    given = sys.argv[1:] if argv is None else list(argv)
    command = shlex.join(["python", "-m", f"bench.{name}", *given])
    options = {key: _plain(value) for key, value in sorted(vars(args).items())}
    return Session(name, command, options)


def add_publish_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-publish", action="store_true", help="print only; leave docs/ and README alone")


def footer(measured: Mapping[str, Any]) -> str:
    machine = measured["machine"]
    start, end = machine["load_average_start"][0], machine["load_average_end"][0]
    return (
        f"_Written by `{measured['command']}` at {measured['commit']} on {machine['cpu']} "
        f"({machine['cores']} cores; 1-minute load average {start:.1f} at the start, {end:.1f} at the end), "
        f"{measured['date'][:10]}._"
    )


def render(measured: Mapping[str, Any]) -> str:
    """The block's body: the benchmark's own rendering of its JSON, then where it came from."""
    module = cast(Renderer, importlib.import_module(f"bench.{measured['benchmark']}"))
    return f"{module.render_table(measured).strip()}\n\n{footer(measured)}\n"


def pending(name: str) -> str:
    """The body of a block whose benchmark has not been run for the README yet."""
    return f"Not measured yet: `.venv/bin/python -m bench.{name}` measures it and writes this table.\n"


def stale_blocks(text: str, results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The names of the blocks that are not what their JSON renders to, or the placeholder when there is none
    (and of the results that have no block)."""
    current = blocks(text)
    stale = [name for name, data in results.items() if current.get(name) != render(data)]
    return stale + [name for name, body in current.items() if name not in results and body != pending(name)]


def blocks(text: str) -> dict[str, str]:
    """The README's generated blocks by name: their bodies as they stand."""
    found: dict[str, str] = {}
    for match in BLOCK.finditer(text):
        if match["name"] in found:
            raise ValueError(f"the README has two blocks named {match['name']}")
        found[match["name"]] = match["body"]
    return found


def replace_block(text: str, name: str, body: str) -> str:
    start, end = f"<!-- bench:{name} -->\n", f"<!-- /bench:{name} -->"
    if name not in blocks(text):
        raise ValueError(f"the README has no block {start.strip()} … {end}: add one where the table goes")
    before, rest = text.split(start, 1)
    return f"{before}{start}{body}{end}{rest.split(end, 1)[1]}"


def load_results(directory: Path = RESULTS) -> dict[str, dict[str, Any]]:
    return {
        path.stem: json.loads(path.read_text(encoding="utf-8")) for path in sorted(directory.glob("*.json"))
    }


def regenerate(readme: Path = README, directory: Path = RESULTS) -> list[str]:
    """Rewrite every block from its JSON; returns the names whose block changed."""
    text = original = readme.read_text(encoding="utf-8")
    current = blocks(text)
    changed = []
    for name, measured in load_results(directory).items():
        body = render(measured)
        if current.get(name) != body:
            changed.append(name)
        text = replace_block(text, name, body)
    if text != original:
        readme.write_text(text, encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a block is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_blocks(README.read_text(encoding="utf-8"), load_results())
        print("\n".join(f"stale: {name}" for name in stale) or "every block matches its JSON")
        return 1 if stale else 0
    changed = regenerate()
    print("\n".join(f"regenerated: {name}" for name in changed) or "nothing to regenerate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
