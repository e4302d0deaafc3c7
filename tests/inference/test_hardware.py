"""Hardware probe: the real machine (no NVML here), a fake NVML module, and the what-if overrides."""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from inference.hardware import (
    MIB,
    NO_DRIVER_REASON,
    NO_GPU_REASON,
    WHAT_IF_GPU_NAME,
    GpuInfo,
    llama_backend,
    probe_hardware,
)

GIB = 1024 * MIB


class FakeNVMLError(Exception):
    """Shaped like pynvml.NVMLError: an integer `value` and the NVML error string as text."""

    def __init__(self, message: str, value: int) -> None:
        super().__init__(message)
        self.value = value


@dataclass(frozen=True)
class FakeMemory:
    total: int
    free: int
    used: int


@dataclass
class FakeDevice:
    name: str | bytes
    memory: FakeMemory
    error: Exception | None = None


@dataclass
class FakeNvml:
    devices: list[FakeDevice] = field(default_factory=list)
    init_error: Exception | None = None
    count_error: Exception | None = None
    cuda_error: Exception | None = None
    shutdown_error: Exception | None = None
    driver: str | bytes = "550.54.14"
    cuda: int = 12040
    calls: list[str] = field(default_factory=list)

    def nvmlInit(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.calls.append("shutdown")
        if self.shutdown_error is not None:
            raise self.shutdown_error

    def nvmlDeviceGetCount(self) -> int:
        if self.count_error is not None:
            raise self.count_error
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, index: int, /) -> FakeDevice:
        device = self.devices[index]
        if device.error is not None:
            raise device.error
        return device

    def nvmlDeviceGetName(self, handle: Any, /) -> str | bytes:
        name: str | bytes = handle.name
        return name

    def nvmlDeviceGetMemoryInfo(self, handle: Any, /) -> FakeMemory:
        memory: FakeMemory = handle.memory
        return memory

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        if self.cuda_error is not None:
            raise self.cuda_error
        return self.cuda


def two_gpus(name_type: type[str] | type[bytes]) -> FakeNvml:
    def name(text: str) -> str | bytes:
        return text.encode() if name_type is bytes else text

    return FakeNvml(
        devices=[
            FakeDevice(name("NVIDIA GeForce RTX 4090"), FakeMemory(24 * GIB, 20 * GIB, 4 * GIB)),
            FakeDevice(name("NVIDIA RTX A2000"), FakeMemory(12 * GIB, 11 * GIB + 512 * MIB, 512 * MIB)),
        ],
        driver=name("550.54.14"),
    )


def test_real_machine_reports_ram_cpus_and_gpus_or_a_reason() -> None:
    report = probe_hardware()

    assert report.ram_total_mib > 0
    assert 0 < report.ram_available_mib <= report.ram_total_mib
    assert 1 <= report.cpu_count_physical <= report.cpu_count_logical
    if report.gpus:
        assert report.gpu_reason == ""
        assert all(gpu.total_mib > 0 for gpu in report.gpus)
    else:
        assert "NVML" in report.gpu_reason or "NVIDIA" in report.gpu_reason


def test_real_pynvml_library_not_found_error_means_no_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    def init() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", init)

    report = probe_hardware()

    assert report.gpus == ()
    assert report.gpu_reason == NO_DRIVER_REASON


@pytest.mark.parametrize("name_type", [bytes, str])
def test_two_gpus_from_nvml(name_type: type[str] | type[bytes]) -> None:
    nvml = two_gpus(name_type)

    report = probe_hardware(nvml=nvml)

    assert report.gpu_reason == ""
    assert report.gpus == (
        GpuInfo(0, "NVIDIA GeForce RTX 4090", 24 * 1024, 20 * 1024, 4 * 1024, "550.54.14", "12.4"),
        GpuInfo(1, "NVIDIA RTX A2000", 12 * 1024, 11 * 1024 + 512, 512, "550.54.14", "12.4"),
    )
    assert nvml.calls == ["init", "shutdown"]


def test_memory_is_reported_in_whole_mib() -> None:
    nvml = FakeNvml(devices=[FakeDevice("GPU", FakeMemory(8 * GIB + 123, 3 * MIB - 1, 5 * MIB + 7))])

    (gpu,) = probe_hardware(nvml=nvml).gpus

    assert (gpu.total_mib, gpu.free_mib, gpu.used_mib) == (8 * 1024, 2, 5)


def test_nvml_library_missing_is_reported_as_no_driver() -> None:
    nvml = FakeNvml(init_error=FakeNVMLError("NVML Shared Library Not Found", value=12))

    report = probe_hardware(nvml=nvml)

    assert (report.gpus, report.gpu_reason) == ((), NO_DRIVER_REASON)
    assert nvml.calls == ["init"]


def test_nvml_init_failure_gives_its_reason_and_skips_shutdown() -> None:
    nvml = FakeNvml(init_error=FakeNVMLError("Driver Not Loaded", value=9))

    report = probe_hardware(nvml=nvml)

    assert report.gpus == ()
    assert report.gpu_reason == "NVML failed to initialise: Driver Not Loaded"
    assert nvml.calls == ["init"]


def test_zero_devices() -> None:
    nvml = FakeNvml()

    report = probe_hardware(nvml=nvml)

    assert (report.gpus, report.gpu_reason) == ((), NO_GPU_REASON)
    assert nvml.calls == ["init", "shutdown"]


def test_device_count_failure_still_shuts_nvml_down() -> None:
    nvml = FakeNvml(count_error=FakeNVMLError("Unknown Error", value=999))

    report = probe_hardware(nvml=nvml)

    assert report.gpus == ()
    assert report.gpu_reason == "NVML failed to list GPUs: Unknown Error"
    assert nvml.calls == ["init", "shutdown"]


def test_a_lost_gpu_does_not_hide_the_others() -> None:
    nvml = two_gpus(str)
    nvml.devices[0].error = FakeNVMLError("GPU is lost", value=15)

    report = probe_hardware(nvml=nvml)

    assert [gpu.index for gpu in report.gpus] == [1]
    assert report.gpu_reason == ""


def test_all_gpus_failing_gives_a_reason() -> None:
    nvml = two_gpus(str)
    for device in nvml.devices:
        device.error = FakeNVMLError("GPU is lost", value=15)

    report = probe_hardware(nvml=nvml)

    assert report.gpus == ()
    assert report.gpu_reason == "NVML could not query any GPU (GPU 0: GPU is lost; GPU 1: GPU is lost)"


def test_old_driver_without_cuda_version_and_failing_shutdown() -> None:
    nvml = two_gpus(bytes)
    nvml.cuda_error = FakeNVMLError("Function Not Found", value=13)
    nvml.shutdown_error = FakeNVMLError("Uninitialized", value=1)

    report = probe_hardware(nvml=nvml)

    assert len(report.gpus) == 2
    assert all(gpu.cuda_driver_version is None for gpu in report.gpus)


def test_vram_override_replaces_real_gpus_without_touching_nvml() -> None:
    nvml = two_gpus(str)

    report = probe_hardware(nvml=nvml, vram_override_mib=6144)

    assert report.gpus == (GpuInfo(0, WHAT_IF_GPU_NAME, 6144, 6144, 0, "what-if", None),)
    assert report.gpu_reason == ""
    assert nvml.calls == []


def test_zero_vram_override_plans_for_a_machine_without_gpu() -> None:
    report = probe_hardware(nvml=two_gpus(str), vram_override_mib=0)

    assert report.gpus == ()
    assert report.gpu_reason == "no GPU (what-if override)"


@pytest.mark.parametrize("ram_mib", [1024, 10_000_000])
def test_ram_override_replaces_available_ram(ram_mib: int) -> None:
    real = probe_hardware(nvml=FakeNvml())

    report = probe_hardware(nvml=FakeNvml(), ram_override_mib=ram_mib)

    assert report.ram_available_mib == ram_mib
    assert report.ram_total_mib == max(real.ram_total_mib, ram_mib)


def test_llama_backend_of_the_installed_build() -> None:
    kind, detail = llama_backend()

    assert kind in {"CPU", "CUDA"}, detail
    assert detail.startswith("llama-cpp-python 0.3.")


def fake_llama_module(tmp_path: Path, *, offload: bool, libraries: list[str]) -> types.ModuleType:
    package = tmp_path / "llama_cpp"
    (package / "lib").mkdir(parents=True)
    for library in libraries:
        (package / "lib" / library).touch()
    module = types.ModuleType("llama_cpp")
    module.__file__ = str(package / "__init__.py")
    module.__dict__["__version__"] = "9.9.9"
    module.__dict__["llama_supports_gpu_offload"] = lambda: offload
    return module


@pytest.mark.parametrize(
    ("offload", "libraries", "expected"),
    [
        (True, ["libggml-cuda.so"], ("CUDA", "llama-cpp-python 9.9.9 with GPU offload")),
        (
            False,
            ["libggml-cpu.so", "libggml-cuda.so"],
            ("CPU", "llama-cpp-python 9.9.9 has CUDA support but found no usable GPU or driver"),
        ),
        (
            False,
            ["ggml-cuda.dll"],
            ("CPU", "llama-cpp-python 9.9.9 has CUDA support but found no usable GPU or driver"),
        ),
        (False, ["libggml-cpu.so"], ("CPU", "llama-cpp-python 9.9.9 is a CPU-only build")),
    ],
)
def test_llama_backend_variants(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    offload: bool,
    libraries: list[str],
    expected: tuple[str, str],
) -> None:
    monkeypatch.setitem(
        sys.modules, "llama_cpp", fake_llama_module(tmp_path, offload=offload, libraries=libraries)
    )

    assert llama_backend() == expected


def test_llama_backend_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail exactly like a missing package.
    monkeypatch.setitem(sys.modules, "llama_cpp", None)

    assert llama_backend() == ("unavailable", "llama-cpp-python is not installed")


@pytest.mark.parametrize(
    ("init_source", "expected"),
    [
        (
            "raise RuntimeError(\n"
            "    \"Failed to load shared library 'libllama.so': libcudart.so.12: cannot open\"\n"
            ")\n",
            "llama-cpp-python failed to load: Failed to load shared library 'libllama.so': "
            "libcudart.so.12: cannot open",
        ),
        (
            "import hearth_missing_dependency\n",
            "llama-cpp-python failed to load: No module named 'hearth_missing_dependency'",
        ),
    ],
)
def test_llama_backend_broken_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, init_source: str, expected: str
) -> None:
    package = tmp_path / "llama_cpp"
    package.mkdir()
    (package / "__init__.py").write_text(init_source, encoding="utf-8")
    monkeypatch.delitem(sys.modules, "llama_cpp", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))

    assert llama_backend() == ("unavailable", expected)


def test_llama_backend_query_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = fake_llama_module(tmp_path, offload=False, libraries=[])

    def broken() -> bool:
        raise OSError("undefined symbol: llama_supports_gpu_offload")

    module.__dict__["llama_supports_gpu_offload"] = broken
    monkeypatch.setitem(sys.modules, "llama_cpp", module)

    assert llama_backend() == (
        "unavailable",
        "llama-cpp-python 9.9.9 could not report GPU support: undefined symbol: llama_supports_gpu_offload",
    )
