"""Choose load parameters deliberately instead of llama-cpp-python's defaults (n_ctx=512, CPU only)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from inference.gguf import GGUFHeader
from inference.hardware import HardwareReport
from inference.protocol import LoadPlan

MIB = 1024 * 1024
# llama.cpp's own fitter keeps 1 GiB of VRAM free; the CUDA context and compute buffers come out of it.
VRAM_MARGIN_BYTES = 1024 * MIB
COMPUTE_BUFFER_BYTES = 512 * MIB
# Leave the OS and the GUI room to breathe when the model lives in system memory.
RAM_MARGIN_BYTES = 1024 * MIB
MIN_CONTEXT = 512
CONTEXT_STEP = 256
_BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class ModelFootprint:
    n_layers: int
    layer_bytes: tuple[int, ...]
    other_bytes: int
    kv_bytes_per_token: int

    @property
    def weight_bytes(self) -> int:
        return sum(self.layer_bytes) + self.other_bytes


def footprint(header: GGUFHeader, kv_bytes_per_element: float = 2.0) -> ModelFootprint:
    n_layers = header.block_count or 0
    layers = [0] * n_layers
    other = 0
    for tensor in header.tensors:
        match = _BLOCK.match(tensor.name)
        if match and int(match.group(1)) < n_layers:
            layers[int(match.group(1))] += tensor.n_bytes
        else:
            other += tensor.n_bytes
    kv_heads = header.head_count_kv
    per_layer_heads = list(kv_heads) if isinstance(kv_heads, list | tuple) else [kv_heads or 0] * n_layers
    head_k = header.key_length or 0
    head_v = header.value_length or 0
    kv_per_token = int(sum(h * (head_k + head_v) for h in per_layer_heads) * kv_bytes_per_element)
    return ModelFootprint(n_layers, tuple(layers), other, kv_per_token)


def _round_context(n: int) -> int:
    return max(MIN_CONTEXT, n // CONTEXT_STEP * CONTEXT_STEP)


def plan_load(
    model_path: str,
    header: GGUFHeader,
    hardware: HardwareReport,
    *,
    context_length: int,
    gpu_layers: str | int,
    n_threads: int | None,
    gpu_offload_supported: bool,
) -> LoadPlan:
    fp = footprint(header)
    trained = header.context_length or context_length
    n_ctx = min(context_length, trained)
    notes: list[str] = []
    if n_ctx < context_length:
        notes.append(f"context capped at the model's training length ({trained})")
    threads = n_threads or hardware.cpu_count_physical or 1

    gpu = max(hardware.gpus, key=lambda g: g.free_mib, default=None)
    if not gpu_offload_supported or gpu is None or gpu_layers == 0:
        why = (
            "llama.cpp was built without GPU support"
            if not gpu_offload_supported
            else hardware.gpu_reason or "GPU offload disabled in settings"
        )
        if gpu_layers == 0 and gpu_offload_supported and gpu is not None:
            why = "GPU offload disabled in settings"
        room = hardware.ram_available_mib * MIB - fp.weight_bytes - RAM_MARGIN_BYTES
        n_ctx = _cap_by_memory(n_ctx, room, fp, notes, "system memory")
        return LoadPlan(
            model_path=model_path,
            n_ctx=n_ctx,
            n_gpu_layers=0,
            n_layers=fp.n_layers,
            flash_attn=False,
            n_threads=threads,
            reason="; ".join([f"CPU · {why}", *notes]),
        )

    free = gpu.free_mib * MIB - VRAM_MARGIN_BYTES - COMPUTE_BUFFER_BYTES
    if isinstance(gpu_layers, int) and gpu_layers > 0:
        layers = min(gpu_layers, fp.n_layers)
    elif fp.weight_bytes + fp.kv_bytes_per_token * n_ctx <= free:
        layers = fp.n_layers
    else:
        # Keep the KV cache for the whole context on the GPU (offload_kqv) and fill the rest with layers.
        kv_total = fp.kv_bytes_per_token * n_ctx
        per_layer = max(fp.layer_bytes, default=1) or 1
        layers = max(0, min(fp.n_layers, (free - kv_total) // per_layer))
    # The output matrix joins the GPU only at full offload; llama.cpp counts it as one more "layer".
    n_gpu_layers = fp.n_layers + 1 if layers >= fp.n_layers else int(layers)
    if n_gpu_layers == 0:
        room = hardware.ram_available_mib * MIB - fp.weight_bytes - RAM_MARGIN_BYTES
        n_ctx = _cap_by_memory(n_ctx, room, fp, notes, "system memory")
        summary = f"CPU · model does not fit in {gpu.name}'s free memory ({gpu.free_mib} MiB)"
    else:
        shown = min(n_gpu_layers, fp.n_layers)
        summary = f"CUDA · {shown}/{fp.n_layers} layers on {gpu.name}"
    return LoadPlan(
        model_path=model_path,
        n_ctx=n_ctx,
        n_gpu_layers=n_gpu_layers,
        n_layers=fp.n_layers,
        flash_attn=n_gpu_layers > 0,
        n_threads=threads,
        reason="; ".join([summary, *notes]),
    )


def _cap_by_memory(n_ctx: int, room: int, fp: ModelFootprint, notes: list[str], where: str) -> int:
    if fp.kv_bytes_per_token <= 0 or fp.kv_bytes_per_token * n_ctx <= room:
        return n_ctx
    capped = _round_context(room // fp.kv_bytes_per_token if room > 0 else 0)
    if capped < n_ctx:
        notes.append(f"context reduced to {capped} tokens to fit {where}")
        return capped
    return n_ctx
