"""Choose load parameters deliberately instead of llama-cpp-python's defaults (n_ctx=512, CPU only).

The numbers come from inference.estimator, the same model that rates files before download, so what the
library promised is what the load does: full offload when it fits, an f16 KV cache unless quantizing it is
what makes the model fit, and a context capped by the training length and by memory.
"""

from __future__ import annotations

from dataclasses import replace

from inference.estimator import (
    DEFAULT_UBATCH,
    Fit,
    FitEstimate,
    fit_with_policy,
    predict_memory,
    profile_model,
    with_projector,
)
from inference.gguf import GGUFHeader
from inference.hardware import GpuInfo, HardwareReport
from inference.protocol import LoadPlan

MIB = 1024 * 1024
# A model that fits nowhere still gets a plan (the load then reports the real failure); this is its context.
MIN_CONTEXT = 512
# llama.cpp's default, kept on purpose. A windowed cache (False) would need several times less KV memory
# for Gemma 2/3 at long contexts, but llama-cpp-python's generate() would then reuse a KV prefix whose
# window llama.cpp has already overwritten: unlike llama-server it does not check llama_memory_seq_pos_min.
# The estimator models both; switching needs that check in the runner first.
SWA_FULL = True
EXPERTS_IN_RAM = ", experts in system memory"


def plan_load(
    model_path: str,
    header: GGUFHeader,
    hardware: HardwareReport,
    *,
    context_length: int,
    gpu_layers: str | int,
    n_threads: int | None,
    gpu_offload_supported: bool,
    mmproj_path: str | None = None,
    projector_bytes: int = 0,
    kv_type: str | None = None,
    flash_attn: bool | None = None,
    main_gpu: int | None = None,
    tensor_split: tuple[float, ...] | None = None,
    use_mlock: bool = False,
) -> LoadPlan:
    """`gpu_layers` is "auto" (the estimator decides), 0 (CPU only) or a number of layers to offload.
    `mmproj_path`: a vision model's projector of `projector_bytes`, counted in the fit (llama.cpp's own
    buffer report, which `predicted_bytes` is compared with, leaves it out, so the prediction does too).
    `kv_type` and `flash_attn` fix what the estimator would otherwise choose (None: it chooses); `main_gpu`
    puts the whole model on that GPU, `tensor_split` spreads it over every GPU; both are dropped, with a
    note, when the GPUs they name are not there."""
    text_only = profile_model(header)
    profile = with_projector(text_only, projector_bytes)
    threads = n_threads or hardware.cpu_count_physical or 1
    placement_notes: list[str] = []
    chosen = next((g for g in hardware.gpus if g.index == main_gpu), None)
    if main_gpu is not None and chosen is None:
        placement_notes.append(f"main GPU {main_gpu} not found, so llama.cpp places the model")
        main_gpu = None
    if tensor_split is not None and len(tensor_split) != len(hardware.gpus):
        placement_notes.append(
            f"GPU split of {len(tensor_split)} not used: {len(hardware.gpus)} GPU(s) found"
        )
        tensor_split = None
    elif tensor_split is not None:
        placement_notes.append("the estimate counts the GPU with the most free memory alone, not the split")
    if chosen is not None:
        # The estimator fits the GPU with the most free memory; with main_gpu, that is the only one used.
        hardware = replace(hardware, gpus=(chosen,))
    gpu = max(hardware.gpus, key=lambda g: g.free_mib, default=None)
    use_gpu = gpu_offload_supported and gpu is not None and gpu_layers != 0

    # A number in the settings fixes the placement (as llama.cpp counts: the layer count or more is full
    # offload); the estimator then only fits the KV cache type and the context to it.
    forced = gpu_layers if isinstance(gpu_layers, int) and gpu_layers > 0 and use_gpu else None
    if forced is not None:
        forced = profile.n_layers + 1 if forced >= profile.n_layers else forced
    estimate = fit_with_policy(
        profile,
        hardware,
        context=context_length,
        swa_full=SWA_FULL,
        gpu_offload=use_gpu,
        n_gpu_layers=forced,
        kv_type=kv_type,
        flash_attn=flash_attn,
    )
    if estimate.verdict is Fit.TOO_LARGE:
        # Below MIN_RECOMMENDED_CONTEXT a chat is cramped, but it beats not loading at all.
        estimate = fit_with_policy(
            profile,
            hardware,
            context=context_length,
            min_context=MIN_CONTEXT,
            swa_full=SWA_FULL,
            gpu_offload=use_gpu,
            n_gpu_layers=forced,
            kv_type=kv_type,
            flash_attn=flash_attn,
        )
    estimate = estimate.best_placement
    experts_on_cpu = estimate.verdict is Fit.EXPERTS_CPU
    notes = [*estimate.notes, *placement_notes]
    n_ctx = estimate.context
    n_gpu_layers = estimate.llama_n_gpu_layers if forced is None else forced
    if estimate.verdict is Fit.TOO_LARGE:
        n_ctx = min(n_ctx, MIN_CONTEXT)
        notes.append(f"may not fit: the estimate needs {_memory_needed(estimate)}")

    if n_gpu_layers > 0 and gpu is not None:
        summary = f"CUDA · {min(n_gpu_layers, profile.n_layers)}/{profile.n_layers} layers on {gpu.name}"
        summary += EXPERTS_IN_RAM if experts_on_cpu else ""
    else:
        summary = f"CPU · {_cpu_reason(hardware, gpu, gpu_layers, gpu_offload_supported)}"
    predicted = predict_memory(
        text_only,
        context=n_ctx,
        n_gpu_layers=n_gpu_layers,
        kv_type=estimate.kv_type,
        flash_attn=estimate.flash_attn,
        n_ubatch=DEFAULT_UBATCH,
        swa_full=SWA_FULL,
        experts_on_cpu=experts_on_cpu,
        amx=hardware.cpu_amx,
    )
    return LoadPlan(
        model_path=model_path,
        n_ctx=n_ctx,
        n_gpu_layers=n_gpu_layers,
        n_layers=profile.n_layers,
        flash_attn=estimate.flash_attn,
        n_threads=threads,
        n_batch=DEFAULT_UBATCH,
        reason="; ".join([summary, *notes]),
        kv_type=estimate.kv_type,
        swa_full=SWA_FULL,
        experts_on_cpu=experts_on_cpu,
        cpu_amx=hardware.cpu_amx,
        predicted_bytes=predicted.as_dict(),
        mmproj_path=mmproj_path,
        main_gpu=main_gpu,
        tensor_split=tensor_split,
        use_mlock=use_mlock,
    )


def _memory_needed(estimate: FitEstimate) -> str:
    if estimate.gpu_bytes:
        return f"{_mib(estimate.gpu_bytes)} of VRAM and {_mib(estimate.ram_bytes)} of system memory"
    return f"{_mib(estimate.ram_bytes)} of system memory"


def _cpu_reason(
    hardware: HardwareReport, gpu: GpuInfo | None, gpu_layers: str | int, gpu_offload_supported: bool
) -> str:
    if not gpu_offload_supported:
        return "llama.cpp was built without GPU support"
    if gpu is None:
        return hardware.gpu_reason or "no GPU found"
    if gpu_layers == 0:
        return "GPU offload disabled in settings"
    return f"model does not fit in {gpu.name}'s free memory ({gpu.free_mib} MiB)"


def _mib(n: int) -> str:
    return f"{n // MIB:,} MiB"


def smaller_plan(plan: LoadPlan, header: GGUFHeader) -> LoadPlan | None:
    """What to try after `plan` ran out of memory at load, or None when there is nothing left to give up.

    GPU layers go first, half at a time (the estimate was for free VRAM, which another program may have
    taken since), then the context halves down to MIN_CONTEXT: each step frees the most memory the user
    would miss least. The caller says which configuration finally loaded.
    """
    if plan.n_gpu_layers > 0:
        layers, n_ctx = min(plan.n_gpu_layers, plan.n_layers) // 2, plan.n_ctx
        if layers:
            summary = f"CUDA · {layers}/{plan.n_layers} layers on the GPU"
            summary += EXPERTS_IN_RAM if plan.experts_on_cpu else ""
        else:
            summary = "CPU · not enough GPU memory"
    elif plan.n_ctx > MIN_CONTEXT:
        layers, n_ctx = 0, max(plan.n_ctx // 2, MIN_CONTEXT)
        summary = plan.reason.split(";")[0]
    else:
        return None
    experts_on_cpu = plan.experts_on_cpu and layers > 0
    predicted = predict_memory(
        header,
        context=n_ctx,
        n_gpu_layers=layers,
        kv_type=plan.kv_type,
        flash_attn=plan.flash_attn,
        n_ubatch=plan.n_batch,
        swa_full=plan.swa_full,
        experts_on_cpu=experts_on_cpu,
        amx=plan.cpu_amx,
    )
    return replace(
        plan,
        n_ctx=n_ctx,
        n_gpu_layers=layers,
        experts_on_cpu=experts_on_cpu,
        reason=f"{summary}; {n_ctx:,}-token context after running out of memory",
        predicted_bytes=predicted.as_dict(),
    )
