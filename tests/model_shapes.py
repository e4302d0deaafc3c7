"""Header-only GGUF files shaped like real models, for memory estimates: tensor data is a sparse hole.

Shapes follow the published configs: Llama-3-8B (32 layers, n_embd 4096, 32 heads, 8 KV heads of 128,
FFN 14336, vocabulary 128256) and Gemma-3-1B (26 layers, n_embd 1152, 4 heads, 1 KV head of 256, FFN 6912,
vocabulary 262144, window 512, tied embeddings). Quantized "presets" use one type for every layer matrix,
which is close to, but simpler than, llama.cpp's mixes.

The files carry what llama.cpp itself needs to load them without a vocabulary ("no_vocab" with a vocabulary
size), so a no_alloc dry run can size their KV cache and compute buffers for comparison.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from inference.gguf import GGUFHeader, read_header
from inference.hardware import GpuInfo, HardwareReport
from tests.gguf_factory import TensorSpec, write_gguf

MIB = 1 << 20
GIB = 1 << 30

F32, F16, Q4_0, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = 0, 1, 2, 8, 10, 11, 12, 13, 14


@dataclass(frozen=True)
class Preset:
    file_type: int | None  # general.file_type; None leaves it out
    layer_type: int
    embd_type: int
    output_type: int


# general.file_type values from llama.h's llama_ftype.
PRESETS: Mapping[str, Preset] = {
    "Q8_0": Preset(7, Q8_0, Q8_0, Q8_0),
    "Q6_K": Preset(18, Q6_K, Q6_K, Q6_K),
    "Q5_K_M": Preset(17, Q5_K, Q5_K, Q6_K),
    "Q4_K_M": Preset(15, Q4_K, Q4_K, Q6_K),
    "Q3_K_M": Preset(12, Q3_K, Q3_K, Q6_K),
    "Q2_K": Preset(10, Q2_K, Q2_K, Q6_K),
    "unlabelled": Preset(None, Q4_K, Q4_K, Q6_K),
}


def llama3_8b(
    directory: Path,
    quant: str = "Q4_K_M",
    *,
    n_ctx_train: int = 131072,
    kv_heads: int | list[int] = 8,
) -> GGUFHeader:
    return read_header(llama3_8b_file(directory, quant, n_ctx_train=n_ctx_train, kv_heads=kv_heads))


def llama3_8b_file(
    directory: Path,
    quant: str = "Q4_K_M",
    *,
    n_ctx_train: int = 131072,
    kv_heads: int | list[int] = 8,
) -> Path:
    preset = PRESETS[quant]
    n_embd, n_ff, n_vocab, n_layers = 4096, 14336, 128256, 32
    tensors = [TensorSpec("token_embd.weight", (n_embd, n_vocab), preset.embd_type)]
    max_kv = max(kv_heads) if isinstance(kv_heads, list) else kv_heads
    for il in range(n_layers):
        heads = kv_heads[il] if isinstance(kv_heads, list) else kv_heads
        t = preset.layer_type
        tensors += [
            TensorSpec(f"blk.{il}.attn_norm.weight", (n_embd,), F32),
            TensorSpec(f"blk.{il}.attn_q.weight", (n_embd, n_embd), t),
            TensorSpec(f"blk.{il}.attn_k.weight", (n_embd, 128 * max(heads, 1)), t),
            TensorSpec(f"blk.{il}.attn_v.weight", (n_embd, 128 * max(heads, 1)), t),
            TensorSpec(f"blk.{il}.attn_output.weight", (n_embd, n_embd), t),
            TensorSpec(f"blk.{il}.ffn_norm.weight", (n_embd,), F32),
            TensorSpec(f"blk.{il}.ffn_gate.weight", (n_embd, n_ff), t),
            TensorSpec(f"blk.{il}.ffn_up.weight", (n_embd, n_ff), t),
            TensorSpec(f"blk.{il}.ffn_down.weight", (n_ff, n_embd), t),
        ]
    tensors += [
        TensorSpec("output_norm.weight", (n_embd,), F32),
        TensorSpec("output.weight", (n_embd, n_vocab), preset.output_type),
    ]
    metadata: dict[str, object] = {
        "general.architecture": "llama",
        "general.name": f"Llama-3-8B-shaped {quant}",
        "llama.block_count": n_layers,
        "llama.context_length": n_ctx_train,
        "llama.embedding_length": n_embd,
        "llama.feed_forward_length": n_ff,
        "llama.attention.head_count": 32,
        "llama.attention.head_count_kv": kv_heads if isinstance(kv_heads, list) else max_kv,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.vocab_size": n_vocab,
        "tokenizer.ggml.model": "no_vocab",
    }
    if preset.file_type is not None:
        metadata["general.file_type"] = preset.file_type
    return write_gguf(directory / f"llama3-8b-{quant}.gguf", metadata, tensors)


def gemma3_1b(directory: Path, *, pattern: object = None) -> GGUFHeader:
    return read_header(gemma3_1b_file(directory, pattern=pattern))


def gemma3_1b_file(directory: Path, *, pattern: object = None) -> Path:
    n_embd, n_ff, n_vocab, n_layers = 1152, 6912, 262144, 26
    tensors = [TensorSpec("token_embd.weight", (n_embd, n_vocab), Q8_0)]
    for il in range(n_layers):
        tensors += [
            TensorSpec(f"blk.{il}.attn_norm.weight", (n_embd,), F32),
            TensorSpec(f"blk.{il}.attn_q_norm.weight", (256,), F32),
            TensorSpec(f"blk.{il}.attn_k_norm.weight", (256,), F32),
            TensorSpec(f"blk.{il}.post_attention_norm.weight", (n_embd,), F32),
            TensorSpec(f"blk.{il}.ffn_norm.weight", (n_embd,), F32),
            TensorSpec(f"blk.{il}.post_ffw_norm.weight", (n_embd,), F32),
            TensorSpec(f"blk.{il}.attn_q.weight", (n_embd, 1024), Q4_0),
            TensorSpec(f"blk.{il}.attn_k.weight", (n_embd, 256), Q4_0),
            TensorSpec(f"blk.{il}.attn_v.weight", (n_embd, 256), Q4_0),
            TensorSpec(f"blk.{il}.attn_output.weight", (1024, n_embd), Q4_0),
            TensorSpec(f"blk.{il}.ffn_gate.weight", (n_embd, n_ff), Q4_0),
            TensorSpec(f"blk.{il}.ffn_up.weight", (n_embd, n_ff), Q4_0),
            TensorSpec(f"blk.{il}.ffn_down.weight", (n_ff, n_embd), Q4_0),
        ]
    tensors.append(TensorSpec("output_norm.weight", (n_embd,), F32))
    metadata: dict[str, object] = {
        "general.architecture": "gemma3",
        "general.file_type": 2,  # Q4_0
        "gemma3.block_count": n_layers,
        "gemma3.context_length": 32768,
        "gemma3.embedding_length": n_embd,
        "gemma3.feed_forward_length": n_ff,
        "gemma3.attention.head_count": 4,
        "gemma3.attention.head_count_kv": 1,
        "gemma3.attention.key_length": 256,
        "gemma3.attention.value_length": 256,
        "gemma3.attention.sliding_window": 512,
        "gemma3.attention.layer_norm_rms_epsilon": 1e-6,
        "gemma3.vocab_size": n_vocab,
        "tokenizer.ggml.model": "no_vocab",
    }
    if pattern is not None:
        metadata["gemma3.attention.sliding_window_pattern"] = pattern
    return write_gguf(directory / "gemma3-1b.gguf", metadata, tensors)


def hardware(*, vram_mib: int | None, ram_mib: int, gpu_name: str = "RTX Test") -> HardwareReport:
    """A machine with one GPU with `vram_mib` free (None: no GPU) and `ram_mib` of available memory."""
    gpus: tuple[GpuInfo, ...] = ()
    if vram_mib is not None:
        gpus = (GpuInfo(0, gpu_name, vram_mib, vram_mib, 0, "555.42", "12.5"),)
    return HardwareReport(
        gpus=gpus,
        gpu_reason="" if gpus else "no NVIDIA GPU found",
        ram_total_mib=ram_mib,
        ram_available_mib=ram_mib,
        cpu_count_physical=8,
        cpu_count_logical=16,
    )
