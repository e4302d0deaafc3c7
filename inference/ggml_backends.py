"""Which ggml backends run llama.cpp in this process: CUDA when built and usable, and this CPU's kernels.

Hearth's llama.cpp is built with `GGML_BACKEND_DL` and `GGML_CPU_ALL_VARIANTS` (packaging/llama_build.py):
the CPU backend exists once per x86-64 micro-architecture (`libggml-cpu-haswell.so`, `-skylakex`,
`-sapphirerapids`, `-zen4`, ...) and nothing is linked in. Each variant exports `ggml_backend_score()`,
which answers 0 when this CPU lacks one of the instructions the variant was compiled for and otherwise a
number that grows with the features it uses; ggml's own `ggml_backend_load_all()` loads the highest.
Hearth does the same ranking itself, because it must know which variant runs (`hearth doctor`, the status
bar) and be able to choose a safer one after a crash (`CpuKernelMemory`, used by inference.client).

Every process that calls into llama.cpp calls `load_backends()` first, once; later calls return the first
answer. A build without variants (older wheels, other platforms' builds) has its CPU backend built in and
reports the variant as `built-in`.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import logging
import os
import platform
import re
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

log = logging.getLogger("hearth.backends")

# Forces a CPU variant by name (tests, benchmarks, and a user working around a bad variant by hand).
VARIANT_ENV = "HEARTH_CPU_VARIANT"
BUILT_IN = "built-in"
BEST_REASON = "best for this CPU"
_VARIANT_FILE = re.compile(r"(?:lib)?ggml-cpu-(.+?)\.(?:so|dll|dylib)")


@dataclass(frozen=True)
class CpuVariant:
    name: str
    path: Path
    score: int


@dataclass(frozen=True)
class CpuKernels:
    """The CPU variant this process runs llama.cpp's CPU work on, and why that one."""

    variant: str
    reason: str


def llama_lib_dir() -> Path | None:
    """llama_cpp's `lib` folder, found without importing llama_cpp (which loads libllama)."""
    imported = sys.modules.get("llama_cpp")
    if imported is not None and getattr(imported, "__file__", None):
        return Path(str(imported.__file__)).parent / "lib"
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "lib"


def _variant_files(lib_dir: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for path in sorted(lib_dir.iterdir()) if lib_dir.is_dir() else ():
        match = _VARIANT_FILE.fullmatch(path.name)
        # A wheel holds each library once (packaging/llama_libs.py), a fresh pip build also as
        # libggml-cpu-x.so.0.9.7: the unversioned name is what ggml itself loads.
        if match and path.is_file():
            files.setdefault(match.group(1), path)
    return files


def _score(path: Path) -> int:
    """ggml_backend_score() of one variant, as ggml's loader asks it: load, call, unload."""
    try:
        library = ctypes.CDLL(str(path), mode=os.RTLD_LOCAL if hasattr(os, "RTLD_LOCAL") else 0)
    except OSError as exc:
        log.warning("CPU variant %s does not load: %s", path.name, exc)
        return 0
    try:
        score_fn = library.ggml_backend_score
        score_fn.restype = ctypes.c_int
        score_fn.argtypes = []
        return int(score_fn())
    except AttributeError:
        return 0
    finally:
        _unload(library)


def _unload(library: ctypes.CDLL) -> None:
    # ctypes never unloads; ggml's loader does, so that only the chosen variant stays in the process.
    import _ctypes

    close = getattr(_ctypes, "dlclose", None) or getattr(_ctypes, "FreeLibrary", None)
    if close is not None:
        close(library._handle)


_ranked: dict[Path, tuple[CpuVariant, ...]] = {}
_ranked_lock = threading.Lock()


def ranked_variants(lib_dir: Path | None = None) -> tuple[CpuVariant, ...]:
    """The variants this CPU can run, best first; empty for a build without variants."""
    lib_dir = lib_dir or llama_lib_dir()
    if lib_dir is None:
        return ()
    with _ranked_lock:
        if lib_dir not in _ranked:
            scored = [CpuVariant(name, path, _score(path)) for name, path in _variant_files(lib_dir).items()]
            _ranked[lib_dir] = tuple(sorted((v for v in scored if v.score > 0), key=lambda v: -v.score))
        return _ranked[lib_dir]


def safer_than(variant: str, lib_dir: Path | None = None) -> str | None:
    """The next variant down the ranking: fewer instruction-set extensions, so less that can go wrong."""
    names = [v.name for v in ranked_variants(lib_dir)]
    if variant not in names:
        return None
    index = names.index(variant)
    return names[index + 1] if index + 1 < len(names) else None


_loaded: CpuKernels | None = None
_load_lock = threading.Lock()


def load_backends(variant: str | None = None, reason: str = "") -> CpuKernels:
    """Registers ggml's backends in this process, once: CUDA when its library is there, then one CPU variant.

    `variant` (else $HEARTH_CPU_VARIANT) names the CPU variant to use; without one, or when this CPU cannot
    run the named one, the best for this CPU is used. `reason` says why `variant` was chosen.
    """
    global _loaded
    with _load_lock:
        if _loaded is not None:
            return _loaded
        lib_dir = llama_lib_dir()
        if lib_dir is None:
            raise RuntimeError("llama-cpp-python is not installed")
        import llama_cpp  # noqa: F401  # loads libllama, and with it libggml and libggml-base

        ggml = _registry_library(lib_dir)
        ggml.ggml_backend_load.restype = ctypes.c_void_p
        ggml.ggml_backend_load.argtypes = [ctypes.c_char_p]
        ggml.ggml_backend_reg_by_name.restype = ctypes.c_void_p
        ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
        if ggml.ggml_backend_reg_by_name(b"CPU"):
            _loaded = CpuKernels(BUILT_IN, "this llama.cpp build has one CPU backend, built in")
            return _loaded
        # The GPU first, as ggml_backend_load_all() does: llama.cpp prefers devices in registration order.
        cuda = next(iter(sorted(lib_dir.glob("*ggml-cuda*"))), None)
        if cuda is not None and not ggml.ggml_backend_load(str(cuda).encode()):
            log.info("the CUDA backend did not load (no CUDA runtime or driver): llama.cpp runs on the CPU")
        _loaded = _load_cpu_variant(ggml, lib_dir, variant or os.environ.get(VARIANT_ENV) or None, reason)
        log.info("CPU kernels: %s (%s)", _loaded.variant, _loaded.reason)
        return _loaded


def _load_cpu_variant(ggml: ctypes.CDLL, lib_dir: Path, wanted: str | None, reason: str) -> CpuKernels:
    ranked = ranked_variants(lib_dir)
    if not ranked:
        raise RuntimeError(
            f"no CPU backend in {lib_dir} runs on this CPU ({cpu_model()}): llama-cpp-python was built "
            "without ggml's CPU variants; run scripts/bootstrap.sh again to rebuild it"
        )
    chosen, why = ranked[0], BEST_REASON
    if wanted:
        match = next((v for v in ranked if v.name == wanted), None)
        if match is None:
            log.warning(
                "CPU variant %r is not available or not supported by this CPU; using %s", wanted, chosen.name
            )
        else:
            chosen = match
            if match is not ranked[0]:
                why = reason or f"set by {VARIANT_ENV}"
    if not ggml.ggml_backend_load(str(chosen.path).encode()):
        raise RuntimeError(f"ggml could not load its CPU backend {chosen.path.name}")
    return CpuKernels(chosen.name, why)


def _registry_library(lib_dir: Path) -> ctypes.CDLL:
    """The libggml whose backend registry llama.cpp reads.

    A wheel cannot hold symlinks, so it carries `libggml.so` and `libggml.so.0` as two files: opening the
    first would load a second copy of ggml, with an empty registry of its own, beside the one libllama
    links. On POSIX a symbol looked up through libllama's handle comes from the libraries libllama links;
    Windows DLLs have one name each.
    """
    if sys.platform == "win32":
        return ctypes.CDLL(str(_library(lib_dir, "ggml")))
    return ctypes.CDLL(str(_library(lib_dir, "llama")))


def _library(lib_dir: Path, name: str) -> Path:
    for candidate in (f"lib{name}.so", f"lib{name}.dylib", f"{name}.dll", f"lib{name}.dll"):
        if (lib_dir / candidate).exists():
            return lib_dir / candidate
    raise RuntimeError(f"no {name} library in {lib_dir}")


def cpu_model() -> str:
    """The CPU's marketing name: the same on every boot of one machine, different after a VM moves host."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def llama_cpp_version() -> str:
    try:
        return metadata.version("llama-cpp-python")
    except metadata.PackageNotFoundError:
        return "unknown"


@dataclass(frozen=True)
class RememberedFallback:
    """A safer CPU variant chosen after a crash, for one CPU and one llama.cpp version."""

    variant: str
    crashed: str
    signal: str
    cpu: str
    llama_cpp: str
    at: str

    @property
    def reason(self) -> str:
        return f"fallback: {self.crashed} crashed with {self.signal} on this CPU ({self.at[:10]})"


class CpuKernelMemory:
    """What Hearth learned about this machine's CPU variants, in a small JSON file in the Hearth home.

    Keyed by CPU model and llama.cpp version: a new CPU (a VM moved to another host) or a new llama.cpp
    starts from the best variant again.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def recall(self) -> RememberedFallback | None:
        if self.path is None:
            return None
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
            remembered = RememberedFallback(
                **{k: str(data[k]) for k in RememberedFallback.__dataclass_fields__}
            )
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring %s: %s", self.path, exc)
            return None
        if remembered.cpu != cpu_model() or remembered.llama_cpp != llama_cpp_version():
            return None
        return remembered

    def remember(self, variant: str, crashed: str, signal: str) -> RememberedFallback:
        remembered = RememberedFallback(
            variant=variant,
            crashed=crashed,
            signal=signal,
            cpu=cpu_model(),
            llama_cpp=llama_cpp_version(),
            at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=".cpu-kernels-", dir=self.path.parent)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump(asdict(remembered), fh, indent=2)
                Path(tmp).replace(self.path)
            except OSError as exc:
                # Not remembering costs one more crash and retry at the next start, nothing else.
                log.warning("could not save the CPU variant choice to %s: %s", self.path, exc)
        return remembered


# ggml's x86 variants built with AMX (ggml/src/ggml-cpu/CMakeLists.txt: AMX_TILE, AMX_INT8 for
# sapphirerapids only).
AMX_VARIANTS = frozenset({"sapphirerapids"})


def amx_kernels() -> bool:
    """Whether llama.cpp's CPU work runs ggml's AMX kernels: in this process once it loaded its backends,
    else in a new runner (the best variant for this CPU, or the one $HEARTH_CPU_VARIANT names). A fallback
    remembered after a crash (CpuKernelMemory) is not looked up here; an estimate made with AMX counts
    copies a safer variant does not make, so it errs towards more memory."""
    if _loaded is not None:
        return _loaded.variant in AMX_VARIANTS
    names = [v.name for v in ranked_variants()]
    forced = os.environ.get(VARIANT_ENV)
    chosen = forced if forced in names else next(iter(names), None)
    return chosen in AMX_VARIANTS


def kernels_for_this_machine(memory: CpuKernelMemory) -> CpuKernels:
    """The variant a new runner will use, and why, without loading anything into this process but the
    variants' score functions: for `hearth doctor`."""
    ranked = ranked_variants()
    if not ranked:
        return CpuKernels(BUILT_IN, "this llama.cpp build has one CPU backend, built in")
    forced = os.environ.get(VARIANT_ENV)
    names = [v.name for v in ranked]
    if forced in names:
        return CpuKernels(forced, BEST_REASON if forced == names[0] else f"set by {VARIANT_ENV}")
    remembered = memory.recall()
    if remembered is not None and remembered.variant in names:
        return CpuKernels(remembered.variant, remembered.reason)
    return CpuKernels(names[0], BEST_REASON)
