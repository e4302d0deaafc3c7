"""What this machine offers for inference: NVIDIA GPUs through NVML, system RAM, CPU cores.

Every probe degrades to a human-readable reason instead of raising: `hearth doctor` and the load planner
must work on machines without a GPU, a driver, or NVML.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import psutil

from inference.ggml_backends import amx_kernels, load_backends

log = logging.getLogger("hearth.hardware")

MIB = 1024 * 1024
# nvml.h: NVML_ERROR_LIBRARY_NOT_FOUND, raised by nvmlInit when libnvidia-ml / nvml.dll cannot be loaded.
_NVML_ERROR_LIBRARY_NOT_FOUND = 12

NO_DRIVER_REASON = "NVIDIA driver not found (NVML library not available)"
NO_GPU_REASON = "no NVIDIA GPU found"
WHAT_IF_GPU_NAME = "what-if GPU"


class NvmlMemoryInfo(Protocol):
    @property
    def total(self) -> int: ...
    @property
    def free(self) -> int: ...
    @property
    def used(self) -> int: ...


class NvmlLike(Protocol):
    """The part of the `pynvml` module (from nvidia-ml-py) that the probe uses."""

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any, /) -> str | bytes: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any, /) -> NvmlMemoryInfo: ...
    def nvmlSystemGetDriverVersion(self) -> str | bytes: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...


@dataclass(frozen=True)
class GpuInfo:
    index: int
    name: str
    total_mib: int
    free_mib: int
    used_mib: int
    driver_version: str
    cuda_driver_version: str | None


@dataclass(frozen=True)
class HardwareReport:
    gpus: tuple[GpuInfo, ...]
    gpu_reason: str
    ram_total_mib: int
    ram_available_mib: int
    cpu_count_physical: int
    cpu_count_logical: int
    # llama.cpp's CPU side runs ggml's AMX kernels here (inference.ggml_backends.amx_kernels), which keep
    # packed copies of weights beside the mapped file.
    cpu_amx: bool = False


def probe_hardware(
    *,
    nvml: NvmlLike | None = None,
    vram_override_mib: int | None = None,
    ram_override_mib: int | None = None,
) -> HardwareReport:
    """Never raises. The overrides plan for another machine: `vram_override_mib` replaces the real GPUs with
    one "what-if GPU" with that much free VRAM (0 means no GPU); `ram_override_mib` replaces available RAM."""
    if vram_override_mib is not None:
        gpus, gpu_reason = _what_if_gpus(vram_override_mib)
    else:
        gpus, gpu_reason = _probe_gpus(nvml)
    ram_total, ram_available = _probe_ram()
    if ram_override_mib is not None:
        ram_available = max(0, ram_override_mib)
        ram_total = max(ram_total, ram_available)
    physical, logical = _probe_cpus()
    return HardwareReport(
        gpus=gpus,
        gpu_reason=gpu_reason,
        ram_total_mib=ram_total,
        ram_available_mib=ram_available,
        cpu_count_physical=physical,
        cpu_count_logical=logical,
        cpu_amx=amx_kernels(),
    )


def _what_if_gpus(vram_mib: int) -> tuple[tuple[GpuInfo, ...], str]:
    if vram_mib <= 0:
        return (), "no GPU (what-if override)"
    gpu = GpuInfo(
        index=0,
        name=WHAT_IF_GPU_NAME,
        total_mib=vram_mib,
        free_mib=vram_mib,
        used_mib=0,
        driver_version="what-if",
        cuda_driver_version=None,
    )
    return (gpu,), ""


def _import_nvml() -> NvmlLike | None:
    try:
        import pynvml
    except ImportError:
        return None
    nvml: NvmlLike = pynvml
    return nvml


def _probe_gpus(nvml: NvmlLike | None) -> tuple[tuple[GpuInfo, ...], str]:
    if nvml is None:
        nvml = _import_nvml()
        if nvml is None:
            return (), "NVML Python bindings (nvidia-ml-py) are not installed"
    try:
        nvml.nvmlInit()
    except Exception as exc:
        if getattr(exc, "value", None) == _NVML_ERROR_LIBRARY_NOT_FOUND:
            return (), NO_DRIVER_REASON
        return (), f"NVML failed to initialise: {_error_text(exc)}"
    try:
        return _query_gpus(nvml)
    except Exception as exc:
        return (), f"NVML failed to list GPUs: {_error_text(exc)}"
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception as exc:
            log.debug("nvmlShutdown failed: %s", _error_text(exc))


def _query_gpus(nvml: NvmlLike) -> tuple[tuple[GpuInfo, ...], str]:
    count = nvml.nvmlDeviceGetCount()
    if count <= 0:
        return (), NO_GPU_REASON
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    cuda = _cuda_driver_version(nvml)
    gpus: list[GpuInfo] = []
    failures: list[str] = []
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(nvml.nvmlDeviceGetName(handle))
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        except Exception as exc:
            # One lost or misbehaving GPU should not hide the others.
            failures.append(f"GPU {index}: {_error_text(exc)}")
            continue
        gpus.append(
            GpuInfo(
                index=index,
                name=name,
                total_mib=memory.total // MIB,
                free_mib=memory.free // MIB,
                used_mib=memory.used // MIB,
                driver_version=driver,
                cuda_driver_version=cuda,
            )
        )
    if failures:
        log.warning("NVML could not query %s", "; ".join(failures))
    if not gpus:
        return (), f"NVML could not query any GPU ({'; '.join(failures)})"
    return tuple(gpus), ""


def _cuda_driver_version(nvml: NvmlLike) -> str | None:
    try:
        version = nvml.nvmlSystemGetCudaDriverVersion()
    except Exception as exc:
        # Drivers older than CUDA 10.1 lack the call; the rest of the report is still useful.
        log.debug("CUDA driver version unavailable: %s", _error_text(exc))
        return None
    # NVML encodes 12.4 as 12040.
    return f"{version // 1000}.{version % 1000 // 10}"


def _probe_ram() -> tuple[int, int]:
    try:
        memory = psutil.virtual_memory()
    except Exception as exc:
        log.warning("Could not read system memory: %s", exc)
        return 0, 0
    return memory.total // MIB, memory.available // MIB


def _probe_cpus() -> tuple[int, int]:
    logical = psutil.cpu_count(logical=True) or os.cpu_count() or 1
    # psutil returns None where the OS does not report cores; logical count is the safe thread budget then.
    physical = psutil.cpu_count(logical=False) or logical
    return physical, logical


def _text(value: str | bytes) -> str:
    # pynvml returned bytes before 11.5 and str since; accept both.
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def _error_text(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def llama_backend() -> tuple[str, str]:
    """("CUDA" | "CPU" | "unavailable", detail) for the installed llama-cpp-python; cheap, for doctor."""
    try:
        import llama_cpp
    except Exception as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "llama_cpp":
            return "unavailable", "llama-cpp-python is not installed"
        # A CUDA build on a machine without the CUDA runtime fails here, inside the native library load.
        return "unavailable", f"llama-cpp-python failed to load: {_error_text(exc)}"
    version = getattr(llama_cpp, "__version__", "(unknown version)")
    try:
        # Built with GGML_BACKEND_DL, llama.cpp knows of no device, GPU or CPU, until they are loaded.
        load_backends()
    except Exception as exc:
        return "unavailable", f"llama-cpp-python {version} could not load its backends: {_error_text(exc)}"
    try:
        offload = bool(llama_cpp.llama_supports_gpu_offload())
    except Exception as exc:
        return "unavailable", f"llama-cpp-python {version} could not report GPU support: {_error_text(exc)}"
    if offload:
        return "CUDA", f"llama-cpp-python {version} with GPU offload"
    # llama.cpp answers "no offload" both for CPU-only builds and for GPU builds that find no usable GPU;
    # the shipped backend library tells the two apart.
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    if any(lib_dir.glob("*ggml-cuda*")):
        return "CPU", f"llama-cpp-python {version} has CUDA support but found no usable GPU or driver"
    return "CPU", f"llama-cpp-python {version} is a CPU-only build"
