"""Real quantized GGUF files for tests, written by llama.cpp's own quantizer from a model on disk."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

# llama_ftype values (llama.h) for llama_model_quantize.
FTYPES = {"F16": 1, "Q4_0": 2, "Q8_0": 7, "Q3_K_M": 12, "Q4_K_M": 15, "Q6_K": 18}


def quantize(source: Path, target: Path, ftype: str) -> Path:
    """`source` (F32, or already quantized: the starter model is Q4_1) quantized by llama.cpp to `ftype`, a
    key of FTYPES; returns `target`."""
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.allow_requantize = True
    params.nthread = os.cpu_count() or 1
    if llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(), ctypes.byref(params)):
        raise RuntimeError(f"llama.cpp could not quantize {source.name} to {ftype}")
    return target
