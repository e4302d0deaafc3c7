"""Memory a GGUF model will take under llama.cpp, predicted from its header alone (no weights needed).

The same model answers three questions: which quantization to download (`recommend`), whether and how one
file fits this machine (`estimate_fit`), and how to load it (`inference.planner`). Design notes and sources
are in ../shared/design/performance.md ("Memory estimation"); every constant below says where it comes
from. Figures marked "measured here" were taken from llama.cpp's own buffer reports (llama-cpp-python
0.3.36, CPU build, x86-64 with AVX-512) and are checked again by bench/memory_estimate.py (bar P7).

What llama.cpp allocates, and how it is modelled here:
- Weights: per layer from the tensor table. `token_embd` is only ever read row by row (get_rows), so it stays
  in system memory even at full offload; the output matrix joins the GPU only when every layer is offloaded
  (llama.cpp's `n_gpu_layers > n_layer`). A model without `output.weight` ties it to `token_embd`: on the
  CPU the two are one mapping, at full offload the GPU holds a duplicate (TENSOR_DUPLICATED in
  llama-model.cpp). llama.cpp offloads the *last* n layers (`i_gpu_start = n_layer - n_gpu_layers`).
- CPU weight repacking: on x86-64 with AVX2 (and ARM with NEON) llama.cpp copies Q4_0/Q4_K/IQ4_NL matrices
  of CPU-resident layers into an interleaved CPU_REPACK buffer, on top of the mapped file. With ggml's AMX
  kernels (a Xeon with AMX) most matmul weights (Q4_0, Q4_1, Q8_0, K-quants, IQ4_XS, F16) are copied
  instead into an AMX buffer, packed for the tile instructions and a little larger. llama.cpp reports these
  buffers beside the mapping, so they count as weights; the mapped pages of copied matrices are read once and
  are clean page cache after that, so they do not count towards the RAM a placement needs.
- KV cache: per layer, cells × n_kv_head(layer) × (key_length + value_length) × bytes per element. Cells are
  the context padded to 256. Sliding-window layers hold only window + n_ubatch cells
  (llama_kv_cache_iswa), unless llama.cpp is asked for a full-size SWA cache (`swa_full`, its default).
- Multi-head latent attention (DeepSeek V2/V3 `deepseek2` files converted since llama.cpp's MLA support, which
  carry `attention.key_length_mla` / `value_length_mla`): llama.cpp builds the attention with the absorbed
  weights as one shared "head" (src/models/deepseek2.cpp: `is_mla` → `build_attn_inp_k()`), so the cache holds
  only K: the compressed latent plus the rope part, `key_length` = kv_lora_rank + rope dims (576 for
  DeepSeek-V2), and V is a view of it. Measured here with llama-cpp-python 0.3.36 (no_alloc dry run of a
  DeepSeek-V2-Lite-shaped file at 4096 cells): "K (f16): 121.50 MiB, V (f16): 0.00 MiB" = 4096 × 27 × 576 × 2.
  Older files without the *_mla keys keep full heads (head_count_kv = n_head, key 192, value 128) and are
  sized by the general rule.
- Mixture of experts: the routed-expert tensors (`ffn_{gate,up,down}_exps`, one 3-D tensor per layer holding
  every expert) may stay in system memory while everything else is offloaded: llama.cpp's
  `--override-tensor exps=CPU` / `--cpu-moe`, whose pattern (inference.tensor_overrides, which the runner
  loads with) leaves shared experts (`*_shexp`) and the router on the GPU. Only
  expert_used_count of expert_count experts are read per token, so that placement keeps much of the
  full-offload speed; inference.planner takes it when it is faster than offloading whole layers.
- Compute buffers: the worst-case graph llama.cpp reserves for one ubatch. Its peak is whichever is larger
  of the output step (logits for every token of the ubatch) and the attention step (without flash
  attention the KQ matrix n_kv × n_ubatch × n_head in f32, plus its mask). Checked against llama.cpp's own
  sizing (a no_alloc dry run) for Llama-3-8B and Gemma-3-1B shapes: within 3%, except where ggml-alloc
  packs a graph less tightly (Gemma-3-1B at 32k with a windowed cache: 7% more, 40 MiB).
- Runtime: the CUDA context on the GPU and the runner process in system memory, plus the margins below.
"""

from __future__ import annotations

import enum
import functools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from inference.gguf import GGML_TYPES, ArraySummary, GGUFHeader, GGUFTensorInfo, check_hyperparameters
from inference.hardware import GpuInfo, HardwareReport
from inference.tensor_overrides import EXPERT_TENSOR_PATTERN

MIB: Final = 1 << 20

# llama.cpp pads n_ctx, and so the KV cells, to a multiple of 256 (measured here: n_ctx 1000 → 1024 cells).
CONTEXT_PAD: Final = 256
DEFAULT_UBATCH: Final = 512
# CUDA context and cuBLAS workspace per process: 107–555 MiB depending on the GPU (performance.md); 300 MiB
# is typical for a recent consumer card.
CUDA_CONTEXT_BYTES: Final = 300 * MIB
# llama.cpp's own fitter (`--fit`, PR #16653) leaves 1,024 MiB of VRAM free; on Windows the driver would
# otherwise spill to system memory silently instead of failing.
VRAM_MARGIN_BYTES: Final = 1024 * MIB
# Room left for the OS, the GUI and the page cache when a model lives in system memory.
RAM_MARGIN_BYTES: Final = 1024 * MIB
# The runner process besides llama.cpp's buffers: Python, llama.cpp and numpy (~60 MiB RSS measured here)
# with headroom for tokenizer caches and the decode loop.
RUNNER_RAM_BYTES: Final = 256 * MIB
# Host memory the CUDA runtime and cuBLAS take in a process that uses the GPU (pinned staging, kernels).
CUDA_HOST_RAM_BYTES: Final = 512 * MIB
# Generation at batch 1 reads every weight once per token, so its speed is set by memory bandwidth: a
# current GPU has about ten times the bandwidth of dual-channel desktop RAM (RTX 4090 1,008 GB/s vs
# DDR5-6000 ~90 GB/s; RTX 3060 360 GB/s vs DDR4-3200 ~50 GB/s).
GPU_TO_CPU_BANDWIDTH: Final = 10.0
# Context is never reduced below this (or below what was asked for, if less) to make a file fit.
MIN_RECOMMENDED_CONTEXT: Final = 4096
# llama.cpp takes 4-byte floats for every activation in the compute graph.
_F32: Final = 4


class Fit(enum.StrEnum):
    """Where a file fits (FitEstimate.verdict): every layer on the GPU, some of them, every layer but the
    routed experts (FitEstimate.experts_on_cpu), in system memory only, or nowhere."""

    GPU = "gpu"
    PARTIAL = "partial"
    EXPERTS_CPU = "experts_cpu"
    CPU = "cpu"
    TOO_LARGE = "too_large"


_VERDICT_RANK: Final[Mapping[Fit, int]] = {Fit.GPU: 3, Fit.PARTIAL: 2, Fit.CPU: 1, Fit.TOO_LARGE: 0}
# What may be given up to reach each placement, in order: nothing, then KV precision (q8_0 costs ~0.005
# perplexity), then context. A few layers on the GPU are not worth a shorter context, so partial offload
# never reduces it.
_LADDER: Final[Mapping[Fit, tuple[str, ...]]] = {
    Fit.GPU: ("f16", "q8_0", "reduced"),
    Fit.PARTIAL: ("f16", "q8_0"),
    Fit.CPU: ("f16", "q8_0", "reduced"),
}


@dataclass(frozen=True)
class KvCacheType:
    name: str
    ggml_type: int  # enum ggml_type, as llama-cpp-python's `type_k` / `type_v` take it
    block_bytes: int
    block_elements: int


# Quantized V needs flash attention in llama.cpp; K does not, but Hearth quantizes both together.
KV_CACHE_TYPES: Final[Mapping[str, KvCacheType]] = {
    "f16": KvCacheType("f16", 1, 2, 1),
    "q8_0": KvCacheType("q8_0", 8, 34, 32),
    "q4_0": KvCacheType("q4_0", 2, 18, 32),
}

# ggml-cpu's repack.cpp (ggml_repack_get_optimal_repack_type): these types get an interleaved copy when the
# matrix has a multiple of 8 rows. Measured here: Q4_0 and Q4_K matrices repacked, Q5_0/Q6_K/Q8_0 not.
_REPACKED_TYPES: Final = frozenset({2, 12, 20})  # Q4_0, Q4_K, IQ4_NL
_REPACK_ROWS: Final = 8
# ggml-cpu's AMX buffer (ggml/src/ggml-cpu/amx/, in the sapphirerapids kernels only), which comes before
# CPU_REPACK in the CPU's buffer list: a 2-D matmul weight of these types whose rows come in multiples of
# 2 × TILE_N (amx.cpp's supports_op) is copied into it, packed for the tile instructions. The copy takes
# the type's blocks plus, per block, the bytes below (mmq.cpp's get_row_size: Q8_0's int32 compensation,
# Q4_K/Q5_K's unpacked scales, IQ4_XS's); F16 is copied as it is. Other types fall to the CPU_REPACK rule.
_AMX_EXTRA_BYTES_PER_BLOCK: Final[Mapping[int, int]] = {
    1: 0,  # F16 (its alignment, 16 elements, is a row length every real model has)
    2: 0,  # Q4_0
    3: 0,  # Q4_1
    8: 4,  # Q8_0
    12: 4,  # Q4_K
    13: 4,  # Q5_K
    14: 0,  # Q6_K
    23: 2,  # IQ4_XS
}
_AMX_ROWS: Final = 32

# Sliding-window layer pattern per architecture: llama.cpp's `hparams.set_swa_pattern(period)` in
# src/llama-model.cpp (llm_load_hparams): layer il uses the window when `il % period < period - 1`, so
# Gemma 3 has five windowed layers then one global layer. A GGUF `attention.sliding_window_pattern` overrides
# the period (an integer) or lists the windowed layers (an array of booleans). The second value is the window
# llama.cpp assumes when the file has none (Gemma 2: 4096); None means it needs the file's value.
_SWA_PATTERNS: Final[Mapping[str, tuple[int, int | None]]] = {
    "gemma2": (2, 4096),
    "gemma3": (6, None),
    "cohere2": (4, None),
    "gpt-oss": (2, None),
}

_BLOCK: Final = re.compile(r"^blk\.(\d+)\.")
_EXPERT_TENSOR: Final = re.compile(EXPERT_TENSOR_PATTERN)
# Tensors llama.cpp keeps with the input layer (always in system memory).
_INPUT_TENSOR_PREFIXES: Final = ("token_embd", "position_embd", "token_types", "per_layer_token_embd")

# Quantization families for the policy in performance.md. Unquantized files rank below Q8_0: they cost
# twice the memory and bandwidth for no measurable quality.
_GOOD_QUANTS: Final = frozenset(
    {"Q8_0", "Q6_K", "Q5_K_M", "Q5_K_S", "Q5_1", "Q5_0", "Q5_K", "Q4_K_M", "Q4_K", "MXFP4_MOE", "MXFP4"}
)
_UNQUANTIZED: Final = frozenset({"F32", "F16", "BF16"})
_LOW_QUANT_PREFIXES: Final = ("Q3", "IQ3", "Q2", "IQ2", "IQ1", "TQ", "Q1")
# Llama-3-8B wikitext-2 perplexity increase per quantization (performance.md), quoted in warnings.
_PPL_INCREASE: Final[Mapping[str, str]] = {"Q3_K_M": "+10.5%", "Q3_K_S": "+26%", "Q2_K": "+56%"}
# 7–8B models lose too much at Q2 (Llama-3-8B: +56% perplexity); performance.md says avoid it there.
_AVOID_Q2_PARAMS: Final = (6_500_000_000, 9_500_000_000)


@dataclass(frozen=True)
class WeightCopies:
    """Weights llama.cpp copies out of the mapped file into a CPU buffer of its own (CPU_REPACK, AMX), per
    layer (or one entry for the output matrix): the copies' bytes, and the bytes of the file they were made
    from (clean page cache once copied)."""

    copy_bytes: tuple[int, ...]
    source_bytes: tuple[int, ...]

    def upto(self, end: int) -> tuple[int, int]:
        """Copy and source bytes of the entries before `end`."""
        return sum(self.copy_bytes[:end]), sum(self.source_bytes[:end])


@dataclass(frozen=True)
class ModelProfile:
    """Everything the estimate needs from a GGUF header, gathered once."""

    architecture: str
    quantization: str
    n_layers: int
    n_ctx_train: int
    n_params: int
    bits_per_weight: float
    layer_bytes: tuple[int, ...]
    # The CPU's copies of weights beside the mapped file, with the kernels most CPUs run (CPU_REPACK) and
    # with AMX (sapphirerapids kernels on a CPU that has it): for the layers, then for the output matrix.
    layer_copies: WeightCopies
    layer_copies_amx: WeightCopies
    input_bytes: int  # token embeddings: system memory always
    output_bytes: int  # the output tensors in the file (matrix, norm): GPU at full offload only
    output_copies: WeightCopies
    output_copies_amx: WeightCopies
    token_embd_bytes: int
    tied_output: bool  # no output matrix in the file: llama.cpp uses token_embd
    n_embd: int
    n_vocab: int
    n_ff: int
    n_head: int
    kv_heads: tuple[int, ...]  # per layer; 0 for layers without attention
    key_length: int
    value_length: int
    swa_layers: tuple[bool, ...]
    n_swa: int
    notes: tuple[str, ...]
    kv_k_only: bool  # MLA: the cache stores K (latent + rope) only; V is a view of it
    expert_bytes: tuple[int, ...]  # per layer: routed-expert tensors (`*_exps`)
    max_expert_tensor_bytes: int
    n_expert: int
    n_expert_used: int
    # A vision model's multimodal projector: loaded beside the weights, on the GPU whenever the model uses one
    # (mtmd's use_gpu follows the model's placement in Hearth's runner).
    projector_bytes: int = 0


@dataclass(frozen=True)
class MemoryBreakdown:
    """Predicted bytes, split by kind and by where they live. RAM includes mmap'd weights."""

    gpu_weights: int = 0
    gpu_kv: int = 0
    gpu_compute: int = 0
    gpu_runtime: int = 0
    ram_weights: int = 0  # mapped file and repacked copies, as llama.cpp reports its model buffers
    ram_kv: int = 0
    ram_compute: int = 0
    ram_runtime: int = 0
    ram_reclaimable: int = 0  # mapped pages of repacked matrices: clean page cache once copied

    @property
    def weights(self) -> int:
        return self.gpu_weights + self.ram_weights

    @property
    def kv(self) -> int:
        return self.gpu_kv + self.ram_kv

    @property
    def compute(self) -> int:
        return self.gpu_compute + self.ram_compute

    @property
    def gpu_total(self) -> int:
        return self.gpu_weights + self.gpu_kv + self.gpu_compute + self.gpu_runtime

    @property
    def ram_total(self) -> int:
        """System memory the placement needs: what llama.cpp allocates and maps, less reclaimable pages."""
        return self.ram_weights + self.ram_kv + self.ram_compute + self.ram_runtime - self.ram_reclaimable

    def as_dict(self) -> dict[str, int]:
        """The keys `Loaded.memory_bytes` uses for what llama.cpp reported, so the two compare directly.
        "gpu" and "ram" leave out the runtime overheads, which llama.cpp does not report as buffers."""
        return {
            "weights": self.weights,
            "kv": self.kv,
            "compute": self.compute,
            "gpu": self.gpu_weights + self.gpu_kv + self.gpu_compute,
            "ram": self.ram_weights + self.ram_kv + self.ram_compute,
            "gpu_total": self.gpu_total,
        }


@dataclass(frozen=True)
class FitEstimate:
    verdict: Fit  # EXPERTS_CPU only for `experts_on_cpu` (and `best_placement` when that is the one)
    n_gpu_layers: int  # layers offloaded (0 for cpu)
    n_layers: int
    context: int  # context the estimate is for
    max_context: int  # largest context that fits with this placement (0 if none)
    kv_type: str  # "f16" | "q8_0" | "q4_0"
    gpu_bytes: int  # total predicted VRAM
    ram_bytes: int  # total predicted system RAM
    expected_speed_ratio: float | None  # vs full offload, for partial
    notes: tuple[str, ...]
    quantization: str = ""
    gpu_name: str | None = None
    flash_attn: bool = False
    # For a mixture-of-experts model that does not fit fully on the GPU: the placement (verdict EXPERTS_CPU)
    # that offloads everything but the routed experts, when that fits.
    experts_on_cpu: FitEstimate | None = None

    @property
    def best_placement(self) -> FitEstimate:
        """What a load uses (inference.planner) and the library shows: this placement, or the experts in
        system memory when that is estimated faster (CPU only counts as slower than any offload)."""
        alternative = self.experts_on_cpu
        if alternative is not None and _faster(alternative, self):
            # With the notes made choosing it: the comparison, a capped context, a quantized KV cache.
            return replace(alternative, notes=self.notes)
        return self

    @property
    def llama_n_gpu_layers(self) -> int:
        """The value for llama.cpp's `n_gpu_layers`: one more than the layer count puts the output matrix on
        the GPU too, which is what full offload means."""
        return self.n_layers + 1 if self.verdict in (Fit.GPU, Fit.EXPERTS_CPU) else self.n_gpu_layers


@dataclass(frozen=True)
class Recommendation:
    index: int | None  # index into candidates of the recommended file, None if nothing fits
    estimate: FitEstimate | None
    reason: str
    warnings: tuple[str, ...]


def profile_model(header: GGUFHeader) -> ModelProfile:
    # parse_header has checked these already; a header built by hand must not size the lists below either.
    check_hyperparameters(header.metadata)
    arch = header.architecture or "unknown"
    n_layers = header.block_count or 0
    notes: list[str] = []
    layer_bytes = [0] * n_layers
    # The tensors a CPU copy may be made of, with their slot: a layer, or n_layers for the output matrix.
    copyable: list[tuple[int, GGUFTensorInfo]] = []
    expert_bytes = [0] * n_layers
    max_expert_tensor = 0
    input_bytes = output_bytes = 0
    token_embd_bytes = 0
    tied = True
    n_vocab = 0
    token_embd: GGUFTensorInfo | None = None
    n_params = 0
    for tensor in header.tensors:
        n_params += math.prod(tensor.shape)
        match = _BLOCK.match(tensor.name)
        slot = n_layers
        if match and int(match.group(1)) < n_layers:
            slot = int(match.group(1))
            layer_bytes[slot] += tensor.n_bytes
            if _EXPERT_TENSOR.search(tensor.name):
                expert_bytes[slot] += tensor.n_bytes
                max_expert_tensor = max(max_expert_tensor, tensor.n_bytes)
        elif tensor.name.startswith(_INPUT_TENSOR_PREFIXES):
            input_bytes += tensor.n_bytes
            if tensor.name == "token_embd.weight":
                token_embd_bytes = tensor.n_bytes
                token_embd = tensor
                n_vocab = tensor.shape[1] if len(tensor.shape) > 1 else 0
            # Only ever read row by row (get_rows), which no copy serves.
            continue
        else:
            output_bytes += tensor.n_bytes
            if tensor.name == "output.weight":
                tied = False
        copyable.append((slot, tensor))
    if tied and token_embd is not None:
        # The duplicated output matrix is placed like any matmul weight, so on the CPU it may be copied.
        copyable.append((n_layers, token_embd))
    layer_copies, output_copies = _weight_copies(copyable, n_layers, amx=False)
    layer_copies_amx, output_copies_amx = _weight_copies(copyable, n_layers, amx=True)
    n_embd = header.embedding_length or 0
    heads = header.head_count
    n_head = max(heads) if isinstance(heads, list) and heads else (heads if isinstance(heads, int) else 0)
    kv_heads = _per_layer(header.head_count_kv, n_layers, default=n_head)
    swa_layers, n_swa = _sliding_window(header, arch, n_layers, notes)
    if any(key.startswith((f"{arch}.ssm.", f"{arch}.wkv.")) for key in header.metadata):
        notes.append("recurrent state is not modelled precisely")
    # llama_hparams::is_mla(): both MLA head sizes present and non-zero.
    mla_keys = (f"{arch}.attention.key_length_mla", f"{arch}.attention.value_length_mla")
    kv_k_only = all(_count(header.metadata.get(key)) for key in mla_keys)
    total_bytes = header.tensor_bytes_total
    return ModelProfile(
        architecture=arch,
        quantization=_quantization_label(header),
        n_layers=n_layers,
        n_ctx_train=header.context_length or 0,
        n_params=n_params,
        bits_per_weight=8 * total_bytes / n_params if n_params else 0.0,
        layer_bytes=tuple(layer_bytes),
        layer_copies=layer_copies,
        layer_copies_amx=layer_copies_amx,
        input_bytes=input_bytes,
        output_bytes=output_bytes,
        output_copies=output_copies,
        output_copies_amx=output_copies_amx,
        token_embd_bytes=token_embd_bytes,
        tied_output=tied,
        n_embd=n_embd,
        n_vocab=n_vocab or vocab_size(header),
        n_ff=max(_per_layer(header.metadata.get(f"{arch}.feed_forward_length"), 1, default=4 * n_embd)),
        n_head=n_head,
        kv_heads=kv_heads,
        key_length=header.key_length or 0,
        value_length=header.value_length or 0,
        swa_layers=swa_layers,
        n_swa=n_swa,
        notes=tuple(notes),
        kv_k_only=kv_k_only,
        expert_bytes=tuple(expert_bytes),
        max_expert_tensor_bytes=max_expert_tensor,
        n_expert=_count(header.metadata.get(f"{arch}.expert_count")),
        n_expert_used=_count(header.metadata.get(f"{arch}.expert_used_count")),
    )


def with_projector(profile: ModelProfile, projector_bytes: int) -> ModelProfile:
    """The profile of the model loaded together with a multimodal projector of `projector_bytes`."""
    return replace(profile, projector_bytes=projector_bytes) if projector_bytes else profile


def combine_split_headers(shards: Sequence[GGUFHeader]) -> GGUFHeader:
    """One header for a model split across files (`…-00001-of-00003.gguf`): metadata from the first shard
    (the others carry only `split.*` keys), the tensor tables of all of them, the sizes added up. Tensor
    offsets stay relative to their own shard; the estimate never reads them."""
    if not shards:
        raise ValueError("no shards given")
    first = shards[0]
    return replace(
        first,
        tensors=tuple(t for shard in shards for t in shard.tensors),
        file_size=sum(shard.file_size for shard in shards),
    )


def predict_memory(
    model: GGUFHeader | ModelProfile,
    *,
    context: int,
    n_gpu_layers: int,
    kv_type: str = "f16",
    flash_attn: bool = False,
    n_ubatch: int = DEFAULT_UBATCH,
    swa_full: bool = True,
    cuda: bool | None = None,
    experts_on_cpu: bool = False,
    amx: bool = False,
) -> MemoryBreakdown:
    """What llama.cpp will allocate for one placement. `n_gpu_layers` has llama.cpp's meaning (more than the
    layer count also offloads the output matrix); `cuda` says whether the process uses a GPU at all
    (default: when any layer is offloaded). `experts_on_cpu` keeps the routed-expert tensors of offloaded
    layers in system memory, as `--override-tensor exps=CPU` does. `amx`: the CPU side runs ggml's AMX
    kernels (HardwareReport.cpu_amx), which keep packed copies of most CPU-resident weights."""
    p = model if isinstance(model, ModelProfile) else profile_model(model)
    kv = KV_CACHE_TYPES[kv_type]
    n = p.n_layers
    on_gpu = max(0, min(n_gpu_layers, n))
    first_gpu = n - on_gpu
    full = n_gpu_layers > n
    uses_cuda = on_gpu > 0 if cuda is None else cuda
    cells = _pad(context)
    swa_cells = min(cells, _pad(p.n_swa + n_ubatch)) if p.n_swa and not swa_full else cells
    widest = swa_cells if p.swa_layers and all(p.swa_layers) else cells

    gpu_kv = ram_kv = 0
    for il in range(n):
        layer_cells = swa_cells if p.swa_layers[il] else cells
        head_dims = p.key_length if p.kv_k_only else p.key_length + p.value_length
        size = _kv_layer_bytes(layer_cells, p.kv_heads[il], head_dims, kv)
        if il >= first_gpu:
            gpu_kv += size
        else:
            ram_kv += size

    # A tied output matrix is token_embd itself in system memory (one mapping) and a copy on the GPU.
    gpu_weights = sum(p.layer_bytes[first_gpu:])
    # Experts kept on the CPU are not repacked in this model: llama.cpp repacks 2-D matrices only here.
    host_experts = sum(p.expert_bytes[first_gpu:]) if experts_on_cpu else 0
    gpu_weights -= host_experts
    if full:
        gpu_weights += p.output_bytes + (p.token_embd_bytes if p.tied_output else 0)
    layer_copies, output_copies = (
        (p.layer_copies_amx, p.output_copies_amx) if amx else (p.layer_copies, p.output_copies)
    )
    copied, copied_from = layer_copies.upto(first_gpu)
    if not full:
        output_copied, output_copied_from = output_copies.upto(1)
        copied, copied_from = copied + output_copied, copied_from + output_copied_from
    ram_weights = p.input_bytes + sum(p.layer_bytes[:first_gpu]) + (0 if full else p.output_bytes) + copied
    ram_weights += host_experts
    if uses_cuda:
        gpu_weights += p.projector_bytes
    else:
        ram_weights += p.projector_bytes

    output_step = n_ubatch * (p.n_vocab + 3 * p.n_embd) * _F32
    attention_step = _attention_step_bytes(p, widest, n_ubatch, flash_attn)
    graph = max(output_step, attention_step)
    # One row of logits stays readable after each decode (llama_context's output buffer).
    logits = p.n_vocab * _F32
    if not uses_cuda:
        gpu_compute, ram_compute = 0, graph + logits
    elif full:
        # The graph runs on the GPU; the host keeps the embeddings gathered from token_embd and the mask.
        gpu_compute = graph
        ram_compute = n_ubatch * (p.n_embd + widest) * _F32 + logits
        if host_experts:
            # Prompt batches run the expert matmuls (MUL_MAT_ID) on the GPU too (op_offload: ggml-cuda takes
            # ops of 32+ tokens), copying one host expert tensor at a time into the GPU's compute buffer; the
            # expert matmuls of single-token decoding run on the CPU from the host copy.
            gpu_compute += p.max_expert_tensor_bytes
            # The CPU's share of the graph (the expert matmuls), bounded here by the whole graph.
            ram_compute += graph
    else:
        # Partial offload: for prompt batches llama.cpp's scheduler runs CPU-resident matmuls on the GPU too
        # (op_offload), copying the weights over, so the GPU buffer must also hold the largest of those.
        cpu_matrices = [*p.layer_bytes[:first_gpu], _output_matrix_bytes(p)]
        gpu_compute = graph + max(cpu_matrices)
        ram_compute = graph + logits
    return MemoryBreakdown(
        gpu_weights=gpu_weights,
        gpu_kv=gpu_kv,
        gpu_compute=gpu_compute,
        gpu_runtime=CUDA_CONTEXT_BYTES if uses_cuda else 0,
        ram_weights=ram_weights,
        ram_kv=ram_kv,
        ram_compute=ram_compute,
        ram_runtime=RUNNER_RAM_BYTES + (CUDA_HOST_RAM_BYTES if uses_cuda else 0),
        ram_reclaimable=copied_from,
    )


def estimate_fit(
    header: GGUFHeader | ModelProfile,
    hardware: HardwareReport,
    *,
    context: int,
    kv_type: str = "f16",
    n_ubatch: int = DEFAULT_UBATCH,
    swa_full: bool = True,
    gpu_offload: bool = True,
    n_gpu_layers: int | None = None,
    flash_attn: bool | None = None,
) -> FitEstimate:
    """Where this file fits at `context` tokens: fully on the GPU with the most free memory, k of its layers
    there, in system memory only, or nowhere. `gpu_offload=False` plans for a llama.cpp build without GPU
    support. `n_gpu_layers` (llama.cpp's meaning) checks one fixed placement instead of choosing: the verdict
    is then that placement's, or TOO_LARGE. Flash attention (`flash_attn` None) is assumed on the GPU and
    whenever the KV cache is quantized (llama.cpp needs it for a quantized V cache), off otherwise, as
    inference.planner loads models; a model's load settings may fix it either way."""
    if context < 1:
        raise ValueError("context must be at least 1 token")
    if kv_type not in KV_CACHE_TYPES:
        raise ValueError(f"unknown KV cache type {kv_type!r}; expected one of {', '.join(KV_CACHE_TYPES)}")
    p = header if isinstance(header, ModelProfile) else profile_model(header)
    notes = list(p.notes)
    ctx = context
    if p.n_ctx_train and context > p.n_ctx_train:
        ctx = p.n_ctx_train
        notes.append(f"context capped at the model's training length ({p.n_ctx_train})")
    gpu = _best_gpu(hardware) if gpu_offload else None
    fit = _Fitter(p, hardware, gpu, kv_type, n_ubatch, swa_full, flash_attn)
    if p.n_layers <= 0 or p.n_embd <= 0:
        notes.append("the header lacks layer or embedding sizes; estimate from tensor bytes only")

    if gpu is not None and n_gpu_layers is not None and n_gpu_layers > 0:
        layers = min(n_gpu_layers, p.n_layers + 1)
        fixed = fit.placement(ctx, layers)
        if not fit.fits(fixed):
            return fit.result(Fit.TOO_LARGE, min(layers, p.n_layers), ctx, fixed, None, notes)
        if layers > p.n_layers:
            return fit.result(Fit.GPU, p.n_layers, ctx, fixed, 1.0, notes)
        return fit.result(Fit.PARTIAL, layers, ctx, fixed, fit.speed_ratio(layers), notes)
    alternative: FitEstimate | None = None
    if gpu is not None and n_gpu_layers is None:
        full = fit.placement(ctx, p.n_layers + 1)
        if fit.fits(full):
            return fit.result(Fit.GPU, p.n_layers, ctx, full, 1.0, notes)
        alternative = _experts_on_cpu(fit, ctx)
        # More layers on the GPU never need less VRAM, so the largest k that fits is found by bisection.
        k = _largest(0, p.n_layers, lambda layers: fit.gpu_fits(fit.placement(ctx, layers)))
        if k > 0:
            partial = fit.placement(ctx, k)
            if fit.ram_fits(partial):
                return _offer(
                    fit.result(Fit.PARTIAL, k, ctx, partial, fit.speed_ratio(k), notes), alternative
                )
    cpu = fit.placement(ctx, 0)
    if fit.ram_fits(cpu):
        if gpu is None and hardware.gpu_reason and gpu_offload:
            notes.append(f"no GPU: {hardware.gpu_reason}")
        return _offer(fit.result(Fit.CPU, 0, ctx, cpu, None, notes), alternative)
    return _offer(fit.result(Fit.TOO_LARGE, 0, ctx, cpu, None, notes), alternative)


def _faster(a: FitEstimate, b: FitEstimate) -> bool:
    return (a.expected_speed_ratio or 0.0) > (b.expected_speed_ratio or 0.0)


def _offer(estimate: FitEstimate, alternative: FitEstimate | None) -> FitEstimate:
    """`estimate` with the experts-in-system-memory placement attached, and a note comparing the two."""
    if alternative is None:
        return estimate
    speed = f"about {alternative.expected_speed_ratio or 0.0:.0%} of full-offload speed"
    experts = "experts in system memory (llama.cpp's --cpu-moe)"
    if estimate.verdict is Fit.PARTIAL:
        layers = (
            f"{estimate.expected_speed_ratio or 0.0:.0%} with {estimate.n_gpu_layers}/{estimate.n_layers} "
            "whole layers on the GPU"
        )
        verb = "" if _faster(alternative, estimate) else "would give "
        note = f"{experts}: {verb}{speed}, against {layers}"
    elif estimate.verdict is Fit.CPU:
        note = f"{experts}: {speed}, faster than the CPU alone"
    else:
        note = f"{experts}: {speed}, the only placement that fits"
    return replace(estimate, experts_on_cpu=alternative, notes=(*estimate.notes, note))


def _experts_on_cpu(fit: _Fitter, ctx: int) -> FitEstimate | None:
    """Every layer on the GPU except the routed experts, if the model has any and that fits."""
    p = fit.p
    if not any(p.expert_bytes):
        return None
    placement = fit.placement(ctx, p.n_layers + 1, experts_on_cpu=True)
    if not fit.fits(placement):
        return None
    speed = fit.speed_ratio(p.n_layers + 1, experts_on_cpu=True)
    return fit.result(Fit.EXPERTS_CPU, p.n_layers, ctx, placement, speed, [])


def fit_with_policy(
    header: GGUFHeader | ModelProfile,
    hardware: HardwareReport,
    *,
    context: int,
    min_context: int | None = None,
    swa_full: bool = True,
    gpu_offload: bool = True,
    n_gpu_layers: int | None = None,
    kv_type: str | None = None,
    flash_attn: bool | None = None,
) -> FitEstimate:
    """The best way to run one file, by performance.md's policy: the best placement this machine allows
    (fully on the GPU, else partly, else on the CPU), keeping the requested context and an f16 KV cache if
    possible, else quantizing the KV cache to q8_0 (~0.005 perplexity), else reducing the context — never
    below `min_context` (default: the smaller of the request and MIN_RECOMMENDED_CONTEXT). With
    `n_gpu_layers` the placement is fixed and only the KV cache type and the context give way. A `kv_type`
    (or flash attention turned off, which rules out a quantized cache) fixes the cache type: then only the
    context gives way. `flash_attn` None chooses it as estimate_fit does."""
    floor = min(context, MIN_RECOMMENDED_CONTEXT) if min_context is None else min(context, min_context)
    p = header if isinstance(header, ModelProfile) else profile_model(header)
    fixed_kv = "f16" if kv_type is None and flash_attn is False else kv_type

    def estimate(ctx: int, kv: str) -> FitEstimate:
        return estimate_fit(
            p,
            hardware,
            context=ctx,
            kv_type=fixed_kv or kv,
            swa_full=swa_full,
            gpu_offload=gpu_offload,
            n_gpu_layers=n_gpu_layers,
            flash_attn=flash_attn,
        )

    first = estimate(context, "f16")
    has_gpu = gpu_offload and _best_gpu(hardware) is not None
    goals: tuple[Fit, ...] = (Fit.GPU, Fit.PARTIAL, Fit.CPU) if has_gpu else (Fit.CPU,)
    ladder = _LADDER
    if has_gpu and n_gpu_layers is not None and n_gpu_layers > 0:
        goals = (Fit.GPU,) if n_gpu_layers > p.n_layers else (Fit.PARTIAL,)
        ladder = {goal: _LADDER[Fit.GPU] for goal in goals}
    if fixed_kv is not None:
        # The "q8_0" rung would only repeat the first estimate under a note that is not true.
        ladder = {goal: tuple(step for step in ladder[goal] if step != "q8_0") for goal in goals}
    for goal in goals:
        for step in ladder[goal]:
            found = _ladder_step(estimate, first, goal, floor, step)
            if found is not None:
                return found
    return first


def recommend(
    candidates: Sequence[GGUFHeader],
    hardware: HardwareReport,
    *,
    context: int,
    swa_full: bool = True,
    gpu_offload: bool = True,
    projector_bytes: Sequence[int] | None = None,
) -> Recommendation:
    """Pick one file by performance.md's policy: the best of Q8_0 > Q6_K > Q5_K_M > Q4_K_M that fits fully
    (on the GPU, or in RAM on a machine without one) at `context`; then the same with a q8_0 KV cache; then
    with the context reduced (not below the smaller of `context` and MIN_RECOMMENDED_CONTEXT); only then
    files below Q4_K_M, with a warning at Q3 and below and never Q2 on a 7–8B model. When nothing fits
    fully, partial offload of the fastest good file, saying how many layers and the expected speed.
    `projector_bytes` (one per candidate): the vision projector each one is loaded with."""
    if not candidates:
        return Recommendation(None, None, "No GGUF files to choose from.", ())
    extra = projector_bytes if projector_bytes is not None else [0] * len(candidates)
    profiles = [
        with_projector(profile_model(header), size) for header, size in zip(candidates, extra, strict=True)
    ]
    floor = min(context, MIN_RECOMMENDED_CONTEXT)
    has_gpu = gpu_offload and _best_gpu(hardware) is not None
    goal = Fit.GPU if has_gpu else Fit.CPU

    def estimate(i: int, ctx: int, kv_type: str) -> FitEstimate:
        return estimate_fit(
            profiles[i], hardware, context=ctx, kv_type=kv_type, swa_full=swa_full, gpu_offload=gpu_offload
        )

    first = [estimate(i, context, "f16") for i in range(len(profiles))]
    tiers = _tiers(profiles)
    usable = [i for tier in tiers for i in tier]
    for tier in tiers:
        for step in _LADDER[goal]:
            for i in tier:
                found = _ladder_step(functools.partial(estimate, i), first[i], goal, floor, step)
                if found is not None:
                    return _recommended(i, found, profiles[i], hardware, context)
    if has_gpu:
        # Nothing fits fully: the fastest good file wins, since every layer (or expert) left on the CPU
        # costs speed.
        placed = [estimate.best_placement for estimate in first]
        for tier in tiers:
            partial = [i for i in tier if placed[i].verdict in (Fit.PARTIAL, Fit.EXPERTS_CPU)]
            if partial:
                best = max(partial, key=lambda i: (placed[i].expected_speed_ratio or 0.0, -tier.index(i)))
                return _recommended(best, placed[best], profiles[best], hardware, context)
        for tier in tiers:
            cpu = [i for i in tier if first[i].verdict is Fit.CPU]
            if cpu:
                return _recommended(cpu[0], first[cpu[0]], profiles[cpu[0]], hardware, context)
    if any(first[i].verdict is not Fit.TOO_LARGE for i in range(len(profiles)) if i not in usable):
        why = (
            "Only Q2 files fit here, and at 7–8B parameters they lose too much quality "
            "(Q2_K: +56% perplexity on Llama-3-8B)."
        )
        return Recommendation(None, None, why, ())
    return Recommendation(None, None, _too_large_reason(hardware, has_gpu, context), ())


def describe_prediction(predicted: Mapping[str, int], measured: Mapping[str, int]) -> str:
    """One line for the status bar or log: "predicted 1,234 MiB, actual 1,200 MiB (Δ +2.8%)" over weights,
    KV cache and compute buffers, plus NVML's view of the GPU when the runner measured it."""
    keys = ("weights", "kv", "compute")
    if not predicted or not all(k in predicted and k in measured for k in keys):
        return "memory prediction unavailable"
    want = sum(predicted[k] for k in keys)
    got = sum(measured[k] for k in keys)
    line = f"predicted {_mib(want)}, actual {_mib(got)} ({_delta(want, got)})"
    if "gpu_used" in measured and "gpu_total" in predicted:
        gpu_want, gpu_got = predicted["gpu_total"], measured["gpu_used"]
        line += f"; GPU predicted {_mib(gpu_want)}, NVML {_mib(gpu_got)} ({_delta(gpu_want, gpu_got)})"
    return line


def within_bar(predicted: int, measured: int) -> bool:
    """Bar P7 in performance.md: within 5% or 150 MiB, whichever is more lenient."""
    return abs(predicted - measured) <= max(0.05 * measured, 150 * MIB)


class _Fitter:
    """Placements of one model on one machine, and whether they fit."""

    def __init__(
        self,
        p: ModelProfile,
        hardware: HardwareReport,
        gpu: GpuInfo | None,
        kv_type: str,
        n_ubatch: int,
        swa_full: bool,
        flash_attn: bool | None = None,
    ) -> None:
        self.p = p
        self.hardware = hardware
        self.gpu = gpu
        self.kv_type = kv_type
        self.n_ubatch = n_ubatch
        self.swa_full = swa_full
        self.forced_flash_attn = flash_attn

    def flash_attn(self, n_gpu_layers: int) -> bool:
        if self.forced_flash_attn is not None:
            return self.forced_flash_attn
        return n_gpu_layers > 0 or self.kv_type != "f16"

    def placement(self, ctx: int, n_gpu_layers: int, *, experts_on_cpu: bool = False) -> MemoryBreakdown:
        return predict_memory(
            self.p,
            context=ctx,
            n_gpu_layers=n_gpu_layers,
            kv_type=self.kv_type,
            flash_attn=self.flash_attn(n_gpu_layers),
            n_ubatch=self.n_ubatch,
            swa_full=self.swa_full,
            cuda=n_gpu_layers > 0,
            experts_on_cpu=experts_on_cpu,
            amx=self.hardware.cpu_amx,
        )

    def gpu_fits(self, m: MemoryBreakdown) -> bool:
        return self.gpu is not None and m.gpu_total + VRAM_MARGIN_BYTES <= self.gpu.free_mib * MIB

    def ram_fits(self, m: MemoryBreakdown) -> bool:
        return m.ram_total + RAM_MARGIN_BYTES <= self.hardware.ram_available_mib * MIB

    def fits(self, m: MemoryBreakdown) -> bool:
        return self.gpu_fits(m) and self.ram_fits(m)

    def max_context(self, n_gpu_layers: int, *, experts_on_cpu: bool = False) -> int:
        limit = self.p.n_ctx_train or (1 << 20)

        def fits_at(ctx: int) -> bool:
            m = self.placement(ctx, n_gpu_layers, experts_on_cpu=experts_on_cpu)
            return self.fits(m) if n_gpu_layers > 0 else self.ram_fits(m)

        steps = _largest(0, limit // CONTEXT_PAD, lambda s: fits_at(s * CONTEXT_PAD))
        if steps == limit // CONTEXT_PAD and fits_at(limit):
            return limit
        return steps * CONTEXT_PAD

    def speed_ratio(self, k: int, *, experts_on_cpu: bool = False) -> float:
        """This placement's speed ÷ full offload's, from bytes read per token and the bandwidth ratio. A token
        reads every expert-free weight but only expert_used_count of expert_count experts."""
        p = self.p
        first_gpu = p.n_layers - min(k, p.n_layers)
        experts = [round(b * _active_expert_share(p)) for b in p.expert_bytes]
        dense = [layer - expert for layer, expert in zip(p.layer_bytes, p.expert_bytes, strict=True)]
        on_gpu = sum(dense[first_gpu:]) + (0 if experts_on_cpu else sum(experts[first_gpu:]))
        on_cpu = sum(dense[:first_gpu]) + sum(experts[:first_gpu])
        on_cpu += sum(experts[first_gpu:]) if experts_on_cpu else 0
        if k > p.n_layers:
            on_gpu += _output_matrix_bytes(p)
        else:
            on_cpu += _output_matrix_bytes(p)
        total = on_gpu + on_cpu
        return total / (on_gpu + GPU_TO_CPU_BANDWIDTH * on_cpu) if total else 1.0

    def result(
        self, verdict: Fit, k: int, ctx: int, m: MemoryBreakdown, speed: float | None, notes: list[str]
    ) -> FitEstimate:
        experts_on_cpu = verdict is Fit.EXPERTS_CPU
        llama_layers = self.p.n_layers + 1 if verdict is Fit.GPU or experts_on_cpu else k
        return FitEstimate(
            verdict=verdict,
            n_gpu_layers=k,
            n_layers=self.p.n_layers,
            context=ctx,
            max_context=0
            if verdict is Fit.TOO_LARGE
            else self.max_context(llama_layers, experts_on_cpu=experts_on_cpu),
            kv_type=self.kv_type,
            gpu_bytes=m.gpu_total,
            ram_bytes=m.ram_total,
            expected_speed_ratio=speed,
            notes=tuple(notes),
            quantization=self.p.quantization,
            gpu_name=self.gpu.name if self.gpu is not None and k > 0 else None,
            flash_attn=self.flash_attn(llama_layers),
        )


def _ladder_step(
    estimate: Callable[[int, str], FitEstimate],
    first: FitEstimate,
    goal: Fit,
    floor: int,
    step: str,
) -> FitEstimate | None:
    """One rung: the f16 estimate at the requested context (`first`), a q8_0 KV cache at that context, or a
    q8_0 KV cache at the largest context (≥ floor) whose placement is at least as good as `goal`."""
    rank = _VERDICT_RANK[goal]
    if step == "f16":
        return first if first.verdict == goal else None
    if step == "q8_0":
        quantized = estimate(first.context, "q8_0")
        if quantized.verdict == goal:
            return replace(quantized, notes=(*quantized.notes, "KV cache quantized to q8_0 to fit"))
        return None
    top = first.context // CONTEXT_PAD
    steps = _largest(0, top, lambda s: _VERDICT_RANK[estimate(s * CONTEXT_PAD, "q8_0").verdict] >= rank)
    ctx = steps * CONTEXT_PAD
    if ctx <= 0 or ctx < min(floor, first.context):
        return None
    reduced = estimate(ctx, "q8_0")
    if _VERDICT_RANK[reduced.verdict] < rank:
        return None
    why = f"context reduced to {ctx} tokens (KV cache {reduced.kv_type}) to fit"
    return replace(reduced, notes=(*reduced.notes, why))


def _recommended(
    index: int, estimate: FitEstimate, p: ModelProfile, hardware: HardwareReport, context: int
) -> Recommendation:
    quant, gpu = p.quantization, estimate.gpu_name
    where = {
        Fit.GPU: f"fits fully on {gpu}",
        Fit.PARTIAL: f"runs with {estimate.n_gpu_layers} of {estimate.n_layers} layers on {gpu}",
        Fit.EXPERTS_CPU: f"runs with every layer on {gpu} and its experts in system memory",
        Fit.CPU: "runs in system memory",
    }[estimate.verdict]
    reason = f"{quant} {where} at {estimate.context} tokens"
    if estimate.kv_type != "f16":
        reason += f" with a {estimate.kv_type} KV cache"
    warnings: list[str] = []
    if estimate.verdict in (Fit.PARTIAL, Fit.EXPERTS_CPU) and estimate.expected_speed_ratio is not None:
        reason += f", at about {estimate.expected_speed_ratio:.0%} of full-offload speed"
        left = "layers" if estimate.verdict is Fit.PARTIAL else "experts"
        warnings.append(f"No file fits fully on the GPU; {left} left on the CPU slow generation down.")
    if estimate.verdict is Fit.CPU and _best_gpu(hardware) is not None:
        warnings.append("No file fits on the GPU even in part; generation runs on the CPU.")
    if estimate.context < min(context, p.n_ctx_train or context):
        warnings.append(f"Context reduced from {context} to {estimate.context} tokens to fit.")
    if _tier(p) == "low":
        loss = _PPL_INCREASE.get(quant, "noticeably")
        warnings.append(f"{quant} loses quality ({loss} perplexity on Llama-3-8B); prefer Q4_K_M or better.")
    elif _tier(p) == "below":
        warnings.append(f"{quant} is below Q4_K_M: expect a few percent more perplexity.")
    return Recommendation(index, estimate, reason, tuple(warnings))


def _too_large_reason(hardware: HardwareReport, has_gpu: bool, context: int) -> str:
    gpu = _best_gpu(hardware)
    where = f"{gpu.name} ({gpu.free_mib} MiB free) or " if has_gpu and gpu is not None else ""
    return (
        f"No file fits in {where}system memory ({hardware.ram_available_mib} MiB available) "
        f"at {context} tokens of context."
    )


def _tiers(profiles: Sequence[ModelProfile]) -> list[list[int]]:
    """Candidate indices in policy order: good quants best first, unquantized files, quants below Q4_K_M,
    then Q3 and below (without Q2 on 7–8B models)."""
    by_tier: dict[str, list[int]] = {"good": [], "unquantized": [], "below": [], "low": []}
    for i, p in enumerate(profiles):
        tier = _tier(p)
        low, high = _AVOID_Q2_PARAMS
        if tier == "low" and p.quantization.startswith(("Q2", "IQ2")) and low <= p.n_params <= high:
            continue
        by_tier[tier].append(i)
    return [sorted(group, key=lambda i: -profiles[i].bits_per_weight) for group in by_tier.values()]


def _tier(p: ModelProfile) -> str:
    label = p.quantization.upper()
    if label in _GOOD_QUANTS:
        return "good"
    if label in _UNQUANTIZED:
        return "unquantized"
    if label.startswith(_LOW_QUANT_PREFIXES):
        return "low"
    if label.startswith(("Q4", "IQ4")):
        return "below"
    # Unknown labels are placed by their measured bits per weight (Q4_K_M is ~4.9, Q3_K_M ~3.9).
    return "good" if p.bits_per_weight >= 4.8 else "below" if p.bits_per_weight >= 4.0 else "low"


def _quantization_label(header: GGUFHeader) -> str:
    label = header.quantization
    if label is not None and not label.startswith("unknown"):
        return label
    # No (or an unknown) general.file_type: name the file after the type holding most layer bytes.
    by_type: dict[int, int] = {}
    for tensor in header.tensors:
        if _BLOCK.match(tensor.name) and len(tensor.shape) > 1:
            by_type[tensor.ggml_type] = by_type.get(tensor.ggml_type, 0) + tensor.n_bytes
    if not by_type:
        return label or "unknown"
    dominant = max(by_type, key=lambda t: by_type[t])
    traits = GGML_TYPES.get(dominant)
    return traits.name if traits is not None else f"type {dominant}"


def _sliding_window(
    header: GGUFHeader, arch: str, n_layers: int, notes: list[str]
) -> tuple[tuple[bool, ...], int]:
    window = header.sliding_window
    known = _SWA_PATTERNS.get(arch)
    pattern = header.metadata.get(f"{arch}.attention.sliding_window_pattern")
    if known is None and pattern is None:
        if window:
            notes.append(f"sliding window of {arch} not modelled; KV cache counted at full context")
        return (False,) * n_layers, 0
    period, default_window = known or (0, None)
    window = window if window is not None else default_window
    if not window:
        return (False,) * n_layers, 0
    if isinstance(pattern, list) and len(pattern) == n_layers:
        return tuple(bool(v) for v in pattern), window
    if isinstance(pattern, int) and not isinstance(pattern, bool):
        period = pattern
    return tuple(period == 0 or il % period < period - 1 for il in range(n_layers)), window


def _per_layer(value: object, n_layers: int, *, default: int) -> tuple[int, ...]:
    if isinstance(value, list) and value and all(isinstance(v, int) for v in value):
        if len(value) >= n_layers:
            return tuple(value[:n_layers]) if n_layers else tuple(value)
        return tuple(value) + (value[-1],) * (n_layers - len(value))
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,) * max(n_layers, 1)
    return (default,) * max(n_layers, 1)


def vocab_size(header: GGUFHeader) -> int:
    """How many tokens the model's vocabulary has, from its header; 0 when the header does not say."""
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    if isinstance(tokens, ArraySummary):
        return tokens.length
    if isinstance(tokens, list):
        return len(tokens)
    size = header.metadata.get(f"{header.architecture}.vocab_size")
    return size if isinstance(size, int) else 0


def _output_matrix_bytes(p: ModelProfile) -> int:
    """Bytes the output matmul reads per token."""
    return p.token_embd_bytes if p.tied_output else p.output_bytes


def _active_expert_share(p: ModelProfile) -> float:
    return p.n_expert_used / p.n_expert if p.n_expert and p.n_expert_used else 1.0


def _count(value: object) -> int:
    """A positive integer from the metadata, else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _cpu_copy_bytes(tensor: GGUFTensorInfo, *, amx: bool) -> int:
    """Bytes of the CPU's own copy of one tensor (0: it is used from the mapped file)."""
    shape, ggml_type = tensor.shape, tensor.ggml_type
    if len(shape) != 2:
        return 0
    extra = _AMX_EXTRA_BYTES_PER_BLOCK.get(ggml_type) if amx else None
    if extra is not None and shape[1] % _AMX_ROWS == 0:
        return tensor.n_bytes + shape[1] * (shape[0] // GGML_TYPES[ggml_type].block_size) * extra
    if ggml_type in _REPACKED_TYPES and shape[1] % _REPACK_ROWS == 0:
        return tensor.n_bytes
    return 0


def _weight_copies(
    copyable: Sequence[tuple[int, GGUFTensorInfo]], n_layers: int, *, amx: bool
) -> tuple[WeightCopies, WeightCopies]:
    """The copies of the layers' weights and of the output matrix, with or without AMX kernels."""
    copies, sources = [0] * (n_layers + 1), [0] * (n_layers + 1)
    for slot, tensor in copyable:
        copy = _cpu_copy_bytes(tensor, amx=amx)
        if copy:
            copies[slot] += copy
            sources[slot] += tensor.n_bytes
    layers = WeightCopies(tuple(copies[:n_layers]), tuple(sources[:n_layers]))
    return layers, WeightCopies((copies[n_layers],), (sources[n_layers],))


def _attention_step_bytes(p: ModelProfile, cells: int, n_ubatch: int, flash_attn: bool) -> int:
    # Fitted on llama.cpp's reserved graphs here (SmolLM2 at 8k–16k context: within 0.1%): without flash
    # attention the KQ scores (n_head per token per cell) and the mask (one per token per cell); with it only
    # the mask. Besides those: the residual stream, the normalized input, Q, and the FFN activation.
    per_cell = p.n_head + 1 if not flash_attn else 1
    per_token = 3 * p.n_embd + p.n_ff
    if p.kv_k_only:
        # MLA's absorbed attention: per head a query of key_length (latent + rope) and an output in the latent
        # (value_length) before the V decompression. Dry runs of a DeepSeek-V2-Lite shape here: 8k–32k context
        # within 3%; at 4k and below the output step leads and llama.cpp reserves up to 12% (28 MiB) more.
        per_token += p.n_head * (p.key_length + p.value_length)
    return n_ubatch * (cells * per_cell + per_token) * _F32


def _kv_layer_bytes(cells: int, kv_heads: int, head_dims: int, kv: KvCacheType) -> int:
    elements = cells * kv_heads * head_dims
    return -(-elements // kv.block_elements) * kv.block_bytes


def _pad(n: int) -> int:
    return -(-max(n, 1) // CONTEXT_PAD) * CONTEXT_PAD


def _largest(low: int, high: int, ok: Callable[[int], bool]) -> int:
    """The largest n in [low, high] with ok(n), for ok true up to some point and false after; low if none."""
    if ok(high):
        return high
    while high - low > 1:
        mid = (low + high) // 2
        if ok(mid):
            low = mid
        else:
            high = mid
    return low


def _best_gpu(hardware: HardwareReport) -> GpuInfo | None:
    # One GPU: llama.cpp can split layers across several, which this estimate does not model yet.
    return max(hardware.gpus, key=lambda g: g.free_mib, default=None)


def _mib(n: int) -> str:
    return f"{n / MIB:,.0f} MiB"


def _delta(predicted: int, measured: int) -> str:
    if measured <= 0:
        return "Δ n/a"
    return f"Δ {(predicted - measured) / measured:+.1%}"
