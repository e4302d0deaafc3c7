"""Sizes of the CUDA build: the llama-cpp-python CUDA wheel and the `hearth-cuda` installers made from it.

    .venv/bin/python -m bench.cuda_bundle [--wheel FILE] [--dist dist] [--no-publish]

The wheel (default: the newest in the wheel cache's CUDA folder, where packaging/build_llama_cuda.sh puts
it): its size, its `libggml-cuda` and the GPU architectures that library carries code for (with
`cuobjdump` from a CUDA toolkit, when there is one). The installers (`HEARTH_BACKEND=cuda
packaging/build_linux.sh`, in --dist): the bundle and its CUDA runtime libraries, the `.deb`'s
Installed-Size, the `.deb` and the tarball. What is not there is recorded as not measured, with the
commands that make it; nothing is carried over from an earlier run. Writes docs/bench/cuda_bundle.json and
the README's table (bench/results.py).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench import results
from bench.bundle_size import ROOT, installer_sizes, mib, size_rows, tree_bytes

BUILD_WHEEL = "HEARTH_CUDA_ARCHS=90 packaging/build_llama_cuda.sh"
BUILD_BUNDLE = "HEARTH_BACKEND=cuda packaging/build_linux.sh"
# The CUDA libraries next to libggml-cuda in the bundle, as packaging/build_linux.sh puts them there.
RUNTIME = re.compile(r"^lib(cudart|cublas|cublasLt|ggml-cuda)\.so")


def default_wheel() -> Path | None:
    flavour = subprocess.run(
        [sys.executable, str(ROOT / "packaging" / "llama_build.py"), "flavour", "cuda"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "hearth" / "wheels" / flavour
    wheels = sorted(folder.glob("llama_cpp_python-*.whl"), key=lambda p: p.stat().st_mtime)
    return wheels[-1] if wheels else None


def architectures(library: Path) -> list[str] | None:
    """The SASS architectures in `library`, or None without a cuobjdump to list them."""
    candidates = [
        shutil.which("cuobjdump"),
        os.environ.get("CUDA_HOME", "/usr/local/cuda") + "/bin/cuobjdump",
    ]
    tool = next((c for c in candidates if c and Path(c).is_file()), None)
    if tool is None:
        return None
    listing = subprocess.run([tool, "--list-elf", str(library)], capture_output=True, text=True, check=False)
    return sorted(set(re.findall(r"sm_\d+\w?", listing.stdout)))


def wheel_sizes(wheel: Path) -> dict[str, Any]:
    with zipfile.ZipFile(wheel) as z, tempfile.TemporaryDirectory() as tmp:
        names = [n for n in z.namelist() if n.startswith("llama_cpp/lib/libggml-cuda")]
        if not names:
            sys.exit(f"{wheel} has no libggml-cuda: it is not a CUDA build")
        library = Path(tmp) / "libggml-cuda.so"
        library.write_bytes(z.read(names[0]))
        return {
            "name": wheel.name,
            "size": wheel.stat().st_size,
            "libggml_cuda": library.stat().st_size,
            "architectures": architectures(library),
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--wheel", type=Path, default=None, help="a CUDA build of llama-cpp-python")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    results.add_publish_option(parser)
    args = parser.parse_args(argv)
    session = results.begin("cuda_bundle", args, argv)
    wheel = args.wheel or default_wheel()
    data: dict[str, Any] = {"wheel": wheel_sizes(wheel) if wheel else None, "bundle": None}
    if (args.dist / "hearth-cuda" / "hearth").exists():
        sizes = installer_sizes(args.dist, "hearth-cuda", "-cuda")
        lib = args.dist / "hearth-cuda" / "_internal" / "llama_cpp" / "lib"
        sizes["runtime"] = {p.name: tree_bytes(p) for p in sorted(lib.iterdir()) if RUNTIME.match(p.name)}
        data["bundle"] = sizes
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    return 0


def render_table(data: Mapping[str, Any]) -> str:
    wheel, bundle = data["wheel"], data["bundle"]
    out: list[str] = []
    if wheel is None:
        out.append(
            f"The CUDA wheel was not measured on this commit (none was built here): `{BUILD_WHEEL}` builds "
            "one, then `python -m bench.cuda_bundle` measures it."
        )
    else:
        archs = ", ".join(wheel["architectures"]) if wheel["architectures"] else "not listed (no cuobjdump)"
        out += [
            "| CUDA wheel | size | `libggml-cuda` | GPU architectures (SASS) |",
            "|---|---|---|---|",
            f"| `{wheel['name']}` | {mib(wheel['size'])} | {mib(wheel['libggml_cuda'])} | {archs} |",
        ]
    out.append("")
    if bundle is None:
        out.append(
            f"The CUDA installers were not measured on this commit (none were built here): `{BUILD_BUNDLE}` "
            "builds them from that wheel, then `python -m bench.cuda_bundle` measures them."
        )
    else:
        runtime = ", ".join(f"`{name}` {mib(size)}" for name, size in bundle["runtime"].items())
        out += [
            *size_rows(bundle, "bundle `dist/hearth-cuda/`"),
            f"| CUDA libraries in the bundle | {runtime} |",
        ]
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
