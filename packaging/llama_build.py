"""Build llama-cpp-python the one way Hearth ships it: CPU kernels chosen at run time, Hearth's patches in.

llama-cpp-python ships only as source, and a plain `pip install` compiles ggml for the build machine's CPU
(`-march=native`): the wheel then dies with SIGILL on any older CPU, including the same machine's VM moved to
another host. Like llama.cpp's own releases and Ollama, Hearth builds ggml's CPU backend once per x86-64
micro-architecture (`GGML_BACKEND_DL` + `GGML_CPU_ALL_VARIANTS`: `libggml-cpu-haswell.so`,
`libggml-cpu-skylakex.so`, `libggml-cpu-sapphirerapids.so`, ...) and picks the best one for the CPU at load
(`inference/cpu_backend.py`).

    python packaging/llama_build.py flavour cpu|cuda        # the wheel cache's folder name for this build
    python packaging/llama_build.py version                 # the llama-cpp-python version Hearth builds
    python packaging/llama_build.py installed-flavour [--set FLAVOUR]   # the flavour pip installed
    python packaging/llama_build.py wheel cpu|cuda OUT_DIR  # download, patch, build, check, into OUT_DIR
    python packaging/llama_build.py check LIB_DIR           # the CPU variants are there and AMX code is sound

The flavour names the version, the CMake options (Hearth's, and the user's in HEARTH_CMAKE_ARGS), the
CUDA architectures and the patches, so a wheel built another way (the native wheels of earlier Hearth
versions, a build without a patch) is never taken from the cache again.

`wheel cuda` builds only the common part: packaging/build_llama_cuda.sh assembles the toolkit and passes
the CUDA options in HEARTH_EXTRA_CMAKE_ARGS (not part of the flavour: they name a temporary folder).
Standard library only, like packaging/llama_libs.py.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import shlex
import shutil
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from dataclasses import dataclass
from importlib import metadata
from importlib.metadata import Distribution
from pathlib import Path

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
PATCHES = Path(__file__).resolve().parent / "llama_patches"

# GGML_NATIVE=OFF is required by GGML_CPU_ALL_VARIANTS, and named so that no build falls back to
# -march=native. ggml installs backend modules to CMAKE_INSTALL_BINDIR, and llama_cpp looks for its
# libraries in llama_cpp/lib: the variants must sit beside libggml.so. $ORIGIN lets each one find
# libggml-base.so there without relying on it being loaded already.
COMMON_CMAKE_ARGS = (
    "-DGGML_NATIVE=OFF",
    "-DGGML_BACKEND_DL=ON",
    "-DGGML_CPU_ALL_VARIANTS=ON",
    "-DCMAKE_INSTALL_BINDIR=llama_cpp/lib",
    "-DCMAKE_INSTALL_RPATH=$ORIGIN",
)
BACKEND_CMAKE_ARGS = {"cpu": ("-DGGML_CUDA=OFF",), "cuda": ("-DGGML_CUDA=ON",)}

# ggml's x86-64 variants that every supported compiler builds (GCC >= 12); the rest depend on the compiler.
# A wheel without them is a single-variant build, which is what this module exists to prevent.
REQUIRED_X86_VARIANTS = ("x64", "sse42", "sandybridge", "haswell", "skylakex", "icelake", "alderlake")

_TILE_CONFIG_SIZE = 64
# packaging/build_llama_cuda.sh's default: RTX 30xx/A10/A40, RTX 40xx/L4/L40, H100/H200.
DEFAULT_CUDA_ARCHS = "86;89;90"
FLAVOUR_FILE = "HEARTH_FLAVOUR"


def user_cmake_args() -> list[str]:
    return shlex.split(os.environ.get("HEARTH_CMAKE_ARGS", ""))


def installed_flavour(new: str | None = None, distribution: Distribution | None = None) -> str | None:
    """The flavour recorded for the installed llama-cpp-python; with NEW, record that one.

    The record sits in its .dist-info beside a digest of pip's RECORD there. pip reinstalling the package
    (`pip install --force-reinstall llama-cpp-python==<same version>` builds it from source, natively)
    leaves a file it did not install in place, so the flavour alone would go on vouching for a build it
    never described; the new build's RECORD has other hashes, so the digest tells."""
    if distribution is None:
        distribution = metadata.distribution("llama-cpp-python")
    installed = hashlib.sha256((distribution.read_text("RECORD") or "").encode("utf-8")).hexdigest()
    if new is not None:
        folder = f"{distribution.name.replace('-', '_')}-{distribution.version}.dist-info"
        info = Path(str(distribution.locate_file(folder)))
        (info / FLAVOUR_FILE).write_text(f"{new} {installed}\n", encoding="utf-8")
        return new
    recorded, _, digest = (distribution.read_text(FLAVOUR_FILE) or "").strip().partition(" ")
    return recorded if recorded and digest == installed else None


def flavour(backend: str) -> str:
    """The cache folder for a wheel built with these options and patches, e.g. `cpu-dl-1a2b3c4d5e6f`."""
    digest = hashlib.sha256()
    digest.update(LLAMA_CPP_PYTHON_VERSION.encode())
    for arg in (*COMMON_CMAKE_ARGS, *BACKEND_CMAKE_ARGS[backend], *user_cmake_args()):
        digest.update(b"\0" + arg.encode())
    if backend == "cuda":
        digest.update(b"\0archs=" + os.environ.get("HEARTH_CUDA_ARCHS", DEFAULT_CUDA_ARCHS).encode())
    for patch in sorted(PATCHES.glob("*.patch")):
        digest.update(b"\0" + patch.name.encode() + b"\0" + patch.read_bytes())
    return f"{backend}-dl-{digest.hexdigest()[:12]}"


def patched_source(python: str, work: Path) -> Path:
    """The llama-cpp-python sdist, downloaded from PyPI, unpacked in WORK and patched."""
    subprocess.run(
        [python, "-m", "pip", "download", "--disable-pip-version-check", "--quiet", "--no-deps",
         "--no-binary", ":all:", "-d", str(work), f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"],
        check=True,
    )  # fmt: skip
    sdist = next(work.glob("llama_cpp_python-*.tar.gz"))
    with tarfile.open(sdist) as archive:
        archive.extractall(work, filter="data")
    source = work / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}"
    for patch in sorted(PATCHES.glob("*.patch")):
        # A patch that no longer applies stops the build instead of being skipped. git apply works outside a
        # repository too, for machines without patch (Windows).
        if shutil.which("patch"):
            command = ["patch", "-p1", "--forward", "--batch", "--quiet", "-i", str(patch)]
        else:
            command = ["git", "apply", "-p1", str(patch)]
        subprocess.run(command, cwd=source, check=True)
        print(f"applied {patch.name}")
    return source


def build_wheel(backend: str, out: Path, python: str = sys.executable) -> Path:
    extra = shlex.split(os.environ.get("HEARTH_EXTRA_CMAKE_ARGS", ""))
    cmake_args = [*COMMON_CMAKE_ARGS, *BACKEND_CMAKE_ARGS[backend], *user_cmake_args(), *extra]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hearth-llama-") as tmp:
        work = Path(tmp)
        source = patched_source(python, work)
        env = dict(os.environ)
        env["CMAKE_ARGS"] = shlex.join(cmake_args)
        env.setdefault("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        built = work / "wheel"
        subprocess.run(
            [python, "-m", "pip", "wheel", "--disable-pip-version-check", "--no-deps", "--no-cache-dir",
             "-w", str(built), str(source)],
            check=True, env=env,
        )  # fmt: skip
        wheel = next(built.glob("llama_cpp_python-*.whl"))
        subprocess.run(
            [python, str(Path(__file__).with_name("llama_libs.py")), "dedupe-wheel", str(wheel)], check=True
        )
        with zipfile.ZipFile(wheel) as z:
            z.extractall(work / "unpacked", [n for n in z.namelist() if n.startswith("llama_cpp/lib/")])
        problems = check_libraries(work / "unpacked" / "llama_cpp" / "lib")
        if problems:
            sys.exit("the llama-cpp-python build is not what Hearth ships:\n  " + "\n  ".join(problems))
        out.mkdir(parents=True, exist_ok=True)
        target = out / wheel.name
        wheel.replace(target)
    print(
        f"{target}: {target.stat().st_size / 2**20:.0f} MiB, "
        f"built in {(time.monotonic() - started) / 60:.1f} min"
    )
    return target


def cpu_variants(lib_dir: Path) -> list[str]:
    """The CPU variants in a llama_cpp/lib folder (`haswell`, `zen4`, ...), as ggml names them."""
    pattern = re.compile(r"(?:lib)?ggml-cpu-(.+?)\.(?:so|dll|dylib)(?:\.[0-9.]+)?")
    names = {pattern.fullmatch(p.name) for p in lib_dir.iterdir()}
    return sorted({m.group(1) for m in names if m})


@dataclass(frozen=True)
class TileConfigLoad:
    """One `ldtilecfg` instruction in a library, and the tile configuration it loads when that is static."""

    library: str
    address: int
    operand: str
    config: bytes | None  # the 64 bytes at a RIP-relative operand; None when the operand is not static

    def problem(self) -> str | None:
        where = f"{self.library} at {self.address:#x}"
        if self.config is None:
            return (
                f"{where}: ldtilecfg {self.operand} loads a tile config built at run time, which GCC 12 "
                "compiles to zeros (is packaging/llama_patches/0001-amx-tile-config-in-rodata.patch in?)"
            )
        palette, _start_row = self.config[0], self.config[1]
        colsb = struct.unpack_from("<16H", self.config, 16)
        rows = self.config[48:64]
        used = [i for i in range(16) if rows[i] or colsb[i]]
        if palette != 1 or not used or any(not (rows[i] and colsb[i]) for i in used):
            shape = f"palette {palette}, rows {list(rows)}, colsb {list(colsb)}"
            return f"{where}: the tile config is not valid ({shape})"
        return None


def tile_config_loads(library: Path) -> list[TileConfigLoad]:
    """Every ldtilecfg in LIBRARY, with the bytes it loads when its operand is RIP-relative (in .rodata).

    ELF files only: the defect is GCC's, and objdump is a Linux tool.
    """
    if library.read_bytes()[:4] != b"\x7fELF":
        return []
    listing = subprocess.run(
        ["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True, text=True, check=True
    ).stdout
    data = library.read_bytes()
    loads = []
    for match in re.finditer(r"^\s*([0-9a-f]+):\s+ldtilecfg\s+(\S+)(?:\s+#\s+([0-9a-f]+))?", listing, re.M):
        address, operand, target = int(match.group(1), 16), match.group(2), match.group(3)
        config = None
        if operand.endswith("(%rip)") and target:
            offset = _file_offset(data, int(target, 16))
            if offset is not None:
                config = data[offset : offset + _TILE_CONFIG_SIZE]
        loads.append(TileConfigLoad(library.name, address, operand, config))
    return loads


def _file_offset(elf: bytes, vaddr: int) -> int | None:
    """The file offset of a virtual address in a 64-bit little-endian ELF file, from its PT_LOAD segments."""
    phoff = struct.unpack_from("<Q", elf, 0x20)[0]
    phentsize, phnum = struct.unpack_from("<HH", elf, 0x36)
    for i in range(phnum):
        p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz = struct.unpack_from(
            "<IIQQQQ", elf, phoff + i * phentsize
        )
        if p_type == 1 and p_vaddr <= vaddr and vaddr + _TILE_CONFIG_SIZE <= p_vaddr + p_filesz:
            return int(p_offset + vaddr - p_vaddr)
    return None


def check_libraries(lib_dir: Path) -> list[str]:
    """What is wrong with a llama_cpp/lib folder for Hearth: missing CPU variants, unsound AMX code."""
    problems = []
    variants = cpu_variants(lib_dir)
    if (lib_dir / "libggml-cpu.so").exists() and not variants:
        problems.append("a single-variant CPU backend (libggml-cpu.so): built without GGML_CPU_ALL_VARIANTS")
    if platform.machine().lower() in ("x86_64", "amd64"):
        missing = [v for v in REQUIRED_X86_VARIANTS if v not in variants]
        if missing:
            problems.append(
                f"CPU variants missing: {', '.join(missing)} (found: {', '.join(variants) or 'none'})"
            )
    amx_loads = 0
    for variant in variants:
        library = next(lib_dir.glob(f"*ggml-cpu-{variant}.*"))
        for load in tile_config_loads(library):
            amx_loads += 1
            problem = load.problem()
            if problem:
                problems.append(problem)
    elf_x86 = sys.platform.startswith("linux") and platform.machine() == "x86_64"
    if elf_x86 and "sapphirerapids" in variants and amx_loads == 0:
        problems.append("libggml-cpu-sapphirerapids has no AMX code (ldtilecfg): AMX was not compiled in")
    return problems


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "flavour" and argv[1] in BACKEND_CMAKE_ARGS:
        print(flavour(argv[1]))
        return 0
    if argv == ["version"]:
        print(LLAMA_CPP_PYTHON_VERSION)
        return 0
    if argv[:1] == ["installed-flavour"] and len(argv) in (1, 3) and argv[1:2] in ([], ["--set"]):
        found = installed_flavour(argv[2] if len(argv) == 3 else None)
        if found:
            print(found)
        return 0 if found else 1
    if len(argv) == 3 and argv[0] == "wheel" and argv[1] in BACKEND_CMAKE_ARGS:
        build_wheel(argv[1], Path(argv[2]))
        return 0
    if len(argv) == 2 and argv[0] == "check":
        lib_dir = Path(argv[1])
        problems = check_libraries(lib_dir)
        for problem in problems:
            print(problem, file=sys.stderr)
        if not problems:
            print(f"{lib_dir}: CPU variants {', '.join(cpu_variants(lib_dir))}; AMX tile configs sound")
        return 1 if problems else 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
