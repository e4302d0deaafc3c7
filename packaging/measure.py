"""Sizes of the Linux installers and the frozen app's start-up time against running from source, side by
side in one run (the README's "Installers" figures come from here).

    .venv/bin/python packaging/measure.py [--dist dist] [--rounds 7]

Needs packaging/build_linux.sh to have run. Start-up: each round runs, interleaved so that both see the
same machine load, the frozen `dist/hearth/hearth` and `python -m app` from this checkout's venv:
`--help` (interpreter and imports only), `gui --smoke-test` with a fresh --home (first start: creates the
database, registers the starter model after hashing it, opens the window offscreen, quits) and with the
home of the previous round (a later start). Prints medians and the fastest run, as a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def tree_bytes(path: Path, skip: str | None = None) -> int:
    """Bytes of the files under `path` as they lie on disk in a package (symlinks counted as links)."""
    total = 0
    for item in path.rglob("*"):
        if skip and skip in item.parts:
            continue
        if item.is_symlink():
            total += len(str(item.readlink()))
        elif item.is_file():
            total += item.stat().st_size
    return total


def deb_installed_kib(deb: Path) -> int:
    out = subprocess.run(["dpkg-deb", "-f", str(deb), "Installed-Size"], capture_output=True, text=True)
    return int(out.stdout.strip())


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({result.returncode}): {result.stderr[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    bundle = args.dist / "hearth"
    deb = args.dist / f"hearth_{version}_amd64.deb"
    tarball = args.dist / f"Hearth-{version}-linux-x86_64.tar.gz"
    frozen = bundle / "hearth"
    for needed in (frozen, deb, tarball):
        if not needed.exists():
            sys.exit(f"{needed} is missing: run packaging/build_linux.sh first")

    model = tree_bytes(bundle / "_internal" / "models")
    print("| what | size |")
    print("|---|---|")
    whole = tree_bytes(bundle)
    print(f"| bundle `dist/hearth/` | {whole / MIB:.0f} MiB ({model / MIB:.0f} MiB: starter model) |")
    print(f"| installed (.deb `Installed-Size`) | {deb_installed_kib(deb) / 1024:.0f} MiB |")
    print(f"| `.deb` ({deb.name}) | {deb.stat().st_size / MIB:.0f} MiB |")
    print(f"| `.tar.gz` ({tarball.name}) | {tarball.stat().st_size / MIB:.0f} MiB |")
    print()

    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env |= {"QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1"}
    source = [sys.executable, "-m", "app"]
    runs: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        homes = {"frozen": Path(tmp) / "frozen-later", "source": Path(tmp) / "source-later"}
        for round_no in range(args.rounds):
            for name, command in (("frozen", [str(frozen)]), ("source", source)):
                runs.setdefault((name, "--help"), []).append(timed([*command, "--help"], env))
                fresh = Path(tmp) / f"{name}-{round_no}"
                first = [*command, "gui", "--smoke-test", "--home", str(fresh)]
                runs.setdefault((name, "first"), []).append(timed(first, env))
                later = [*command, "gui", "--smoke-test", "--home", str(homes[name])]
                if round_no == 0:
                    timed(later, env)  # creates that home; not counted
                runs.setdefault((name, "later"), []).append(timed(later, env))

    rows = (
        ("`hearth --help`", "--help"),
        ("`hearth gui --smoke-test`, fresh `--home` (first start)", "first"),
        ("`hearth gui --smoke-test`, existing `--home`", "later"),
    )
    print(f"| start-up, median (fastest) of {args.rounds} | frozen | from source | frozen / source |")
    print("|---|---|---|---|")
    for label, key in rows:
        frozen_s, source_s = runs[("frozen", key)], runs[("source", key)]
        ratio = statistics.median(frozen_s) / statistics.median(source_s)
        print(
            f"| {label} | {statistics.median(frozen_s):.2f} s ({min(frozen_s):.2f}) "
            f"| {statistics.median(source_s):.2f} s ({min(source_s):.2f}) | {ratio:.2f} |"
        )


if __name__ == "__main__":
    main()
