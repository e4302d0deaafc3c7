"""Keep a mixture-of-experts model's routed experts in system memory while the rest is offloaded (llama.cpp's
`--cpu-moe`).

llama.cpp does this with tensor buffer-type overrides: a NULL-terminated array of (regex, buffer type) in
`llama_model_params.tensor_buft_overrides`, read while the model loads. llama-cpp-python 0.3.36's `Llama()`
has no parameter for it and declares the field as a bare pointer, but it builds its params by calling
`llama_model_default_params()` from its bindings module at load time. `experts_in_system_memory` swaps that
function for one that fills the field, for the duration of one load in the runner process.
"""

from __future__ import annotations

import ctypes
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

# common.h's LLM_FFN_EXPS_REGEX, the pattern behind --cpu-moe: the routed experts only, so shared experts
# (`*_shexp`) and the router stay with their layer on the GPU. inference.estimator sizes the same tensors.
EXPERT_TENSOR_PATTERN: Final = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
# What llama.cpp logs (at debug level) for each tensor an override placed.
_OVERRIDDEN_LINE: Final = re.compile(r"^tensor (\S+) \(.*\) buffer type overridden to (\S+)$", re.MULTILINE)


class _BufferTypeOverride(ctypes.Structure):
    # struct llama_model_tensor_buft_override { const char * pattern; ggml_backend_buffer_type_t buft; }
    _fields_ = [("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p)]


@contextmanager
def experts_in_system_memory() -> Iterator[None]:
    """Models loaded by `llama_cpp.Llama()` inside this block keep their routed-expert tensors in host
    buffers. Not thread-safe: the runner loads one model at a time on one thread."""
    import llama_cpp.llama_cpp as bindings

    # In libggml-base, which libllama links against: a lookup through libllama's handle finds it, wherever
    # the wheel or the frozen bundle put the libraries. llama.cpp compares buffer types by address, so this
    # must be the very object the loader sees, not a copy from a second load of the library.
    cpu_buffer_type = bindings._lib.ggml_backend_cpu_buffer_type
    cpu_buffer_type.argtypes = []
    cpu_buffer_type.restype = ctypes.c_void_p
    overrides = (_BufferTypeOverride * 2)()
    overrides[0] = _BufferTypeOverride(EXPERT_TENSOR_PATTERN.encode(), cpu_buffer_type())
    overrides[1] = _BufferTypeOverride(None, None)  # the terminator

    default_params = bindings.llama_model_default_params

    def params_with_overrides() -> bindings.llama_model_params:
        params: bindings.llama_model_params = default_params()
        # The binding's type hints promise an array; the field it really declares is a void pointer.
        params.tensor_buft_overrides = ctypes.cast(overrides, ctypes.c_void_p)  # type: ignore[assignment]
        return params

    bindings.llama_model_default_params = params_with_overrides
    try:
        yield  # `overrides` lives until here, past the load that reads it
    finally:
        bindings.llama_model_default_params = default_params


def overridden_tensors(log_text: str) -> dict[str, str]:
    """Tensor name → buffer type for every tensor a buffer-type override placed, from llama.cpp's log."""
    return {match[1]: match[2] for match in _OVERRIDDEN_LINE.finditer(log_text)}
