"""Bar P6: download throughput with SHA-256 computed while downloading vs `curl`, same server, same run.

    .venv/bin/python -m bench.download_throughput [--size-mib 400] [--rounds 5] [--no-publish]

A GGUF file of --size-mib (random tensor bytes, written to a temporary folder, never committed) is served
by the test hub server (tests/helpers/hubserver.py, sendfile on 127.0.0.1). Hearth's path is the whole
`Downloader.download` call: huggingface_hub's HTTP session, the `.part` file, streaming SHA-256, fsync,
atomic rename and the library registration. The baseline is `curl -o FILE` of the same URL into the same
folder (no hashing). Rounds alternate between the two. Printed and written to
docs/bench/download_throughput.json (bench/results.py): every round, the best round of each, and the
median of the per-round ratios (each Hearth download against the curl run right after it), which holds up
better when other work shares the machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import results

REPO = "bench/throughput-GGUF"
FILENAME = "throughput-F32.gguf"
MIB = 1 << 20
TARGET = 0.90  # bar P6


def make_gguf(path: Path, size_mib: int) -> None:
    from tests.helpers.gguf_factory import TensorSpec, write_gguf

    rows = size_mib * MIB // (1024 * 4)
    write_gguf(path, {"general.architecture": "llama"}, [TensorSpec("blk.0.ffn_up.weight", (1024, rows), 0)])
    # Random bytes in place of the hole the factory leaves: nothing along the way can compress them.
    with path.open("r+b") as file:
        file.seek(path.stat().st_size - rows * 1024 * 4)
        left = rows * 1024 * 4
        while left:
            block = os.urandom(min(left, 16 * MIB))
            file.write(block)
            left -= len(block)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--size-mib", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=5)
    results.add_publish_option(parser)
    args = parser.parse_args()
    session = results.begin("download_throughput", args)
    curl = shutil.which("curl")
    if curl is None:
        sys.exit("curl is not installed (apt-get install -y curl)")

    os.environ.pop("HF_HUB_OFFLINE", None)
    from app.library.downloads import Downloader
    from app.library.hub import HubClient
    from app.library.installed import ModelLibrary
    from app.storage.db import Database
    from tests.helpers.hubserver import HubServer, ServedFile

    with tempfile.TemporaryDirectory(prefix="hearth-p6-") as tmp:
        root = Path(tmp)
        source = root / FILENAME
        make_gguf(source, args.size_mib)
        size = source.stat().st_size
        server = HubServer().start()
        try:
            repo = server.add_repo(REPO, [ServedFile.from_path(FILENAME, source)])
            client = HubClient(server.url)
            url = client.file_url(REPO, repo.head, FILENAME)
            listing = client.list_files(REPO)
            db = Database.open(root / "home" / "hearth.sqlite3", root / "home" / "backups")
            library = ModelLibrary(db, root / "home" / "models")
            hearth_times: list[float] = []
            curl_times: list[float] = []
            for _ in range(args.rounds):
                began = time.perf_counter()
                model = Downloader(client, library).download(listing, listing.models[0])
                hearth_times.append(time.perf_counter() - began)
                library.remove(model.name, delete_file=True)

                target = root / "home" / "models" / "curl.gguf"
                began = time.perf_counter()
                subprocess.run([curl, "-sS", "--fail", "-o", str(target), url], check=True)
                curl_times.append(time.perf_counter() - began)
                target.unlink()
            db.dispose()
        finally:
            server.stop()

    data = {
        "size_mib": size / MIB,
        "target": TARGET,
        "hearth_s": hearth_times,
        "curl_s": curl_times,
        "hearth_best_mib_s": size / min(hearth_times) / MIB,
        "curl_best_mib_s": size / min(curl_times) / MIB,
        "ratio_of_best": min(curl_times) / min(hearth_times),
        "median_ratio": statistics.median(c / h for h, c in zip(hearth_times, curl_times, strict=True)),
    }
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")


def render_table(data: Mapping[str, Any]) -> str:
    size = data["size_mib"] * MIB
    hearth = [size / t / MIB for t in data["hearth_s"]]
    curl = [size / t / MIB for t in data["curl_s"]]
    ratios = [h / c for h, c in zip(hearth, curl, strict=True)]
    median, best, target = data["median_ratio"], data["ratio_of_best"], data["target"]
    verdict = "met" if median >= target else "not met"
    return "\n".join(
        [
            "| | MiB/s per round | best round |",
            "|---|---|---|",
            f"| Hearth: download + SHA-256 + fsync + register | {', '.join(f'{v:,.0f}' for v in hearth)} "
            f"| {data['hearth_best_mib_s']:,.0f} |",
            f"| `curl -o` (no hashing) | {', '.join(f'{v:,.0f}' for v in curl)} "
            f"| {data['curl_best_mib_s']:,.0f} |",
            f"| ratio Hearth / curl | {', '.join(f'{v:.2f}' for v in ratios)} | {best:.2f} (best / best) |",
            "",
            f"A {data['size_mib']:,.0f} MiB file, {len(hearth)} rounds. Median of the per-round ratios "
            f"{median:.2f} (target ≥ {target:.2f}: {verdict}).",
        ]
    )


if __name__ == "__main__":
    main()
