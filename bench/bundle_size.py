"""The Linux installers' sizes, what the bundle is made of, and the frozen app's start-up time against
running from source, side by side in one run.

    .venv/bin/python -m bench.bundle_size [--dist dist] [--rounds 7] [--no-publish]

Needs packaging/build_linux.sh to have run (its dist/). Sizes: the bundle `dist/hearth/` as its files lie
in a package (symlinks counted as links), its largest parts under `_internal/`, the `.deb`'s
Installed-Size, the `.deb` and the tarball. Start-up: each round runs, interleaved so that both see the
same machine load, the frozen `dist/hearth/hearth` and `python -m app` from this checkout's venv: `--help`
(interpreter and imports only), `gui --smoke-test` with a fresh --home (first start: creates the
database, registers the starter model after hashing it, opens the window offscreen, quits) and with the
home of the previous round (a later start). Writes docs/bench/bundle_size.json and the README's tables
(bench/results.py).
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
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import results

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
PARTS_SHOWN = 8
STARTUP = (
    ("`hearth --help`", "help"),
    ("`hearth gui --smoke-test`, fresh `--home` (first start)", "first"),
    ("`hearth gui --smoke-test`, existing `--home`", "later"),
)


def tree_bytes(path: Path) -> int:
    """Bytes of the files under `path` as they lie on disk in a package (symlinks counted as links)."""
    if path.is_symlink():
        return len(str(path.readlink()))
    if path.is_file():
        return path.stat().st_size
    total = 0
    for item in path.rglob("*"):
        if item.is_symlink():
            total += len(str(item.readlink()))
        elif item.is_file():
            total += item.stat().st_size
    return total


def deb_installed_kib(deb: Path) -> int:
    out = subprocess.run(
        ["dpkg-deb", "-f", str(deb), "Installed-Size"], capture_output=True, text=True, check=True
    )
    return int(out.stdout.strip())


def installer_sizes(dist: Path, package: str, suffix: str) -> dict[str, Any]:
    """Sizes of what packaging/build_linux.sh wrote for `package` (hearth, hearth-cuda), in bytes."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    bundle = dist / package
    deb = next(dist.glob(f"{package}_{version}_*.deb"), dist / f"{package}_{version}.deb")
    tarball = dist / f"Hearth-{version}-linux-{os.uname().machine}{suffix}.tar.gz"
    for needed in (bundle / "hearth", deb, tarball):
        if not needed.exists():
            sys.exit(f"{needed} is missing: run packaging/build_linux.sh first")
    internal = bundle / "_internal"
    parts = sorted(((tree_bytes(p), p.name) for p in internal.iterdir()), reverse=True)
    return {
        "bundle": tree_bytes(bundle),
        "parts": {name: size for size, name in parts},
        "installed": deb_installed_kib(deb) * 1024,
        "deb": deb.stat().st_size,
        "deb_name": deb.name,
        "tarball": tarball.stat().st_size,
        "tarball_name": tarball.name,
        "built": datetime.fromtimestamp(deb.stat().st_mtime, UTC).isoformat(timespec="seconds"),
    }


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    result = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed ({result.returncode}): {result.stderr[-2000:]}")
    return elapsed


def startup(frozen: Path, rounds: int) -> dict[str, dict[str, list[float]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEARTH_")}
    env |= {"QT_QPA_PLATFORM": "offscreen", "HF_HUB_OFFLINE": "1"}
    commands = {"frozen": [str(frozen)], "source": [sys.executable, "-m", "app"]}
    runs: dict[str, dict[str, list[float]]] = {side: {key: [] for _, key in STARTUP} for side in commands}
    with tempfile.TemporaryDirectory() as tmp:
        homes = {side: Path(tmp) / f"{side}-later" for side in commands}
        for round_no in range(rounds):
            for side, command in commands.items():
                runs[side]["help"].append(timed([*command, "--help"], env))
                fresh = Path(tmp) / f"{side}-{round_no}"
                runs[side]["first"].append(
                    timed([*command, "gui", "--smoke-test", "--home", str(fresh)], env)
                )
                later = [*command, "gui", "--smoke-test", "--home", str(homes[side])]
                if round_no == 0:
                    timed(later, env)  # creates that home; not counted
                runs[side]["later"].append(timed(later, env))
            print(f"round {round_no + 1} of {rounds}", flush=True)
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--rounds", type=int, default=7)
    results.add_publish_option(parser)
    args = parser.parse_args(argv)
    session = results.begin("bundle_size", args, argv)
    sizes = installer_sizes(args.dist, "hearth", "")
    data = {"sizes": sizes, "startup": startup(args.dist / "hearth" / "hearth", args.rounds)}
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    return 0


def mib(size: float) -> str:
    return f"{size / MIB:,.0f} MiB"


def size_rows(sizes: Mapping[str, Any], bundle_label: str) -> list[str]:
    parts = list(sizes["parts"].items())
    shown = ", ".join(f"`{name}` {mib(size)}" for name, size in parts[:PARTS_SHOWN])
    rest = sum(size for _, size in parts[PARTS_SHOWN:])
    return [
        "| what | size |",
        "|---|---|",
        f"| {bundle_label} | {mib(sizes['bundle'])} |",
        f"| its largest parts in `_internal/` | {shown}; the other {len(parts) - PARTS_SHOWN} entries "
        f"{mib(rest)} |",
        f"| installed (`.deb` Installed-Size) | {mib(sizes['installed'])} |",
        f"| `{sizes['deb_name']}` | {mib(sizes['deb'])} |",
        f"| `{sizes['tarball_name']}` | {mib(sizes['tarball'])} |",
    ]


def render_table(data: Mapping[str, Any]) -> str:
    sizes, runs = data["sizes"], data["startup"]
    rounds = len(runs["frozen"]["help"])
    rows = [
        *size_rows(sizes, "bundle `dist/hearth/`"),
        "",
        f"| start-up, median (fastest) of {rounds} | frozen | from source | frozen / source |",
        "|---|---|---|---|",
    ]
    for label, key in STARTUP:
        frozen, source = runs["frozen"][key], runs["source"][key]
        ratio = statistics.median(frozen) / statistics.median(source)
        rows.append(
            f"| {label} | {statistics.median(frozen):.2f} s ({min(frozen):.2f}) "
            f"| {statistics.median(source):.2f} s ({min(source):.2f}) | {ratio:.2f} |"
        )
    model = sizes["parts"].get("models", 0)
    return "\n".join(
        [
            *rows,
            "",
            f"The installers measured were built {sizes['built'][:16].replace('T', ' ')} UTC. `models` is "
            f"the starter model: `HEARTH_BUNDLE_STARTER=0` leaves those {mib(model)} out.",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
