"""What llama.cpp really allocated for a model: its own buffer reports, and NVML's view of the GPU.

llama.cpp logs every buffer it allocates ("CPU_Mapped model buffer size = 92.10 MiB", "CUDA0 KV buffer
size = …", "CPU compute buffer size = …"), and llama-cpp-python 0.3.36 has no API that returns them (the
C++ `llama_get_memory_breakdown` is not exported to C), so `LlamaLog` installs its own callback around the
load, keeps the text, and restores the previous callback afterwards. Warnings and errors go on to stderr
(the runner log).
"""

from __future__ import annotations

import ctypes
import re
import sys
from types import TracebackType
from typing import Any, Final, Self

from inference.hardware import MIB, probe_hardware

# "<buffer type> <kind> buffer size = <n> MiB": model (weights, one line per buffer type), KV (one per
# cache: two for sliding-window models), RS (recurrent state), compute (one per backend) and output (logits).
_BUFFER_LINE: Final = re.compile(
    r"(?P<buft>[A-Za-z][\w.-]*)\s+(?P<kind>model|KV|RS|compute|output) buffer size"
    r" =\s*(?P<mib>\d+(?:\.\d+)?) MiB"
)
# ggml-cpu's extra weight buffer whose name does not start with "CPU" (amx.cpp; repack and KleidiAI do).
_CPU_EXTRA_BUFFERS: Final = frozenset({"AMX"})
_KINDS: Final = {"model": "weights", "KV": "kv", "RS": "kv", "compute": "compute", "output": "compute"}
# ggml.h's enum ggml_log_level: DEBUG 1, INFO 2, WARN 3, ERROR 4; CONT (5) continues the previous message
# at its level. (llama-cpp-python's _logger still maps the older numbering, showing warnings, not errors.)
_LOG_WARN: Final = 3
_LOG_CONT: Final = 5


def parse_buffer_sizes(log_text: str) -> dict[str, int]:
    """Bytes by kind ("weights", "kv", "compute") and by place ("gpu", "ram") from llama.cpp's log. Host
    buffers (CPU, CPU_Mapped, CPU_REPACK, the CPU's AMX weight buffer, CUDA_Host) are system
    memory; any other buffer type is a device's. Empty when the log has no buffer lines."""
    sizes: dict[str, int] = {}
    for match in _BUFFER_LINE.finditer(log_text):
        n = round(float(match["mib"]) * MIB)
        buft = match["buft"]
        host = buft.startswith("CPU") or buft.endswith("_Host") or buft in _CPU_EXTRA_BUFFERS
        place = "ram" if host else "gpu"
        for key in (_KINDS[match["kind"]], place):
            sizes[key] = sizes.get(key, 0) + n
    if sizes:
        for key in ("weights", "kv", "compute", "gpu", "ram"):
            sizes.setdefault(key, 0)
    return sizes


class LlamaLog:
    """Collects llama.cpp's log while a model and context are created (or a model is quantized):

        with LlamaLog() as log:
            llm = Llama(...)
        log.buffer_sizes()

    Warnings and errors are echoed to stderr unless `echo` is False. llama.cpp's logger is process-global,
    so use it from the thread that loads, one load at a time."""

    def __init__(self, *, echo: bool = True) -> None:
        self._echo = echo
        self._chunks: list[str] = []
        self._last_level = 0
        self._callback: Any = None
        self._previous: Any = None
        self._previous_data = ctypes.c_void_p()

    def __enter__(self) -> Self:
        import llama_cpp

        self._previous = llama_cpp.llama_log_callback()
        llama_cpp.llama_log_get(ctypes.byref(self._previous), ctypes.byref(self._previous_data))
        # Held on self: ctypes frees the C thunk with the Python object, and llama.cpp would call freed code.
        self._callback = llama_cpp.llama_log_callback(self._on_log)
        llama_cpp.llama_log_set(self._callback, ctypes.c_void_p(0))
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        import llama_cpp

        llama_cpp.llama_log_set(self._previous, self._previous_data)

    @property
    def text(self) -> str:
        return "".join(self._chunks)

    def buffer_sizes(self) -> dict[str, int]:
        return parse_buffer_sizes(self.text)

    def _on_log(self, level: int, text: bytes | None, _user_data: object) -> None:
        message = (text or b"").decode("utf-8", errors="replace")
        self._chunks.append(message)
        if level != _LOG_CONT:
            self._last_level = level
        if self._echo and self._last_level >= _LOG_WARN:
            sys.stderr.write(message)


def gpu_used_bytes() -> int | None:
    """Memory in use on all NVIDIA GPUs together (NVML), or None without NVML or a GPU. Compared before and
    after a load it includes what no buffer report shows: the CUDA context and allocator slack."""
    report = probe_hardware()
    if not report.gpus:
        return None
    return sum(gpu.used_mib for gpu in report.gpus) * MIB
