"""Header-only GGUF files shaped like real models, for memory estimates: tensor data is a sparse hole.

Shapes follow the published configs: Llama-3-8B (32 layers, n_embd 4096, 32 heads, 8 KV heads of 128,
FFN 14336, vocabulary 128256) and Gemma-3-1B (26 layers, n_embd 1152, 4 heads, 1 KV head of 256, FFN 6912,
vocabulary 262144, window 512, tied embeddings). Quantized "presets" use one type for every layer matrix,
which is close to, but simpler than, llama.cpp's mixes.

The files carry what llama.cpp itself needs to load them without a vocabulary ("no_vocab" with a vocabulary
size), so a no_alloc dry run can size their KV cache and compute buffers for comparison.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from inference.estimator import KV_CACHE_TYPES
from inference.gguf import GGUFHeader, read_header
from inference.hardware import GpuInfo, HardwareReport
from inference.llama_memory import LlamaLog
from tests.helpers.gguf_factory import GGUFValueType, TensorSpec, TypedArray, write_gguf

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


# DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite config.json and model card): hidden 2048, 27 layers, 16
# heads, kv_lora_rank 512, no q_lora_rank, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, 64
# routed experts (6 used) of moe_intermediate_size 1408, 2 shared experts, first_k_dense_replace 1 with
# intermediate_size 10944, vocabulary 102400, max_position_embeddings 163840. Metadata as llama.cpp's
# convert_hf_to_gguf.py writes it since MLA support (2025): one KV "head" of kv_lora_rank + rope (576) for K
# and kv_lora_rank (512) for V, the per-head sizes in key_length_mla / value_length_mla, attn_kv_b split into
# attn_k_b / attn_v_b. `mla=False` writes an older file: full heads, attn_kv_b, no *_mla keys.
DSV2_LITE = {
    "n_embd": 2048,
    "n_layers": 27,
    "n_head": 16,
    "kv_lora_rank": 512,
    "qk_nope": 128,
    "qk_rope": 64,
    "v_head": 128,
    "n_expert": 64,
    "n_expert_used": 6,
    "n_expert_shared": 2,
    "n_ff_exp": 1408,
    "n_ff": 10944,
    "n_dense": 1,
    "n_vocab": 102400,
    "n_ctx_train": 163840,
}


def deepseek_v2_lite_file(directory: Path, *, mla: bool = True, matrix_type: int = Q8_0) -> Path:
    s = DSV2_LITE
    n_embd, n_head, rank, nope, rope, v_head = (
        s["n_embd"], s["n_head"], s["kv_lora_rank"], s["qk_nope"], s["qk_rope"], s["v_head"]
    )  # fmt: skip
    n_expert, n_ff_exp, n_vocab = s["n_expert"], s["n_ff_exp"], s["n_vocab"]
    n_ff_shexp = n_ff_exp * s["n_expert_shared"]
    t = matrix_type
    tensors = [TensorSpec("token_embd.weight", (n_embd, n_vocab), t)]
    for il in range(s["n_layers"]):
        tensors += [
            TensorSpec(f"blk.{il}.attn_norm.weight", (n_embd,), F32),
            TensorSpec(f"blk.{il}.attn_kv_a_norm.weight", (rank,), F32),
            TensorSpec(f"blk.{il}.attn_q.weight", (n_embd, n_head * (nope + rope)), t),
            TensorSpec(f"blk.{il}.attn_kv_a_mqa.weight", (n_embd, rank + rope), t),
            TensorSpec(f"blk.{il}.attn_output.weight", (n_head * v_head, n_embd), t),
            TensorSpec(f"blk.{il}.ffn_norm.weight", (n_embd,), F32),
        ]
        if mla:
            tensors += [
                TensorSpec(f"blk.{il}.attn_k_b.weight", (nope, rank, n_head), t),
                TensorSpec(f"blk.{il}.attn_v_b.weight", (rank, v_head, n_head), t),
            ]
        else:
            tensors.append(TensorSpec(f"blk.{il}.attn_kv_b.weight", (rank, n_head * (nope + v_head)), t))
        if il < s["n_dense"]:
            tensors += [
                TensorSpec(f"blk.{il}.ffn_gate.weight", (n_embd, s["n_ff"]), t),
                TensorSpec(f"blk.{il}.ffn_up.weight", (n_embd, s["n_ff"]), t),
                TensorSpec(f"blk.{il}.ffn_down.weight", (s["n_ff"], n_embd), t),
            ]
        else:
            tensors += [
                TensorSpec(f"blk.{il}.ffn_gate_inp.weight", (n_embd, n_expert), F32),
                TensorSpec(f"blk.{il}.ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), t),
                TensorSpec(f"blk.{il}.ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), t),
                TensorSpec(f"blk.{il}.ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), t),
                TensorSpec(f"blk.{il}.ffn_gate_shexp.weight", (n_embd, n_ff_shexp), t),
                TensorSpec(f"blk.{il}.ffn_up_shexp.weight", (n_embd, n_ff_shexp), t),
                TensorSpec(f"blk.{il}.ffn_down_shexp.weight", (n_ff_shexp, n_embd), t),
            ]
    tensors += [
        TensorSpec("output_norm.weight", (n_embd,), F32),
        TensorSpec("output.weight", (n_embd, n_vocab), t),
    ]
    metadata: dict[str, object] = {
        "general.architecture": "deepseek2",
        "general.name": "DeepSeek-V2-Lite-shaped",
        "general.file_type": 7 if t == Q8_0 else 1,
        "deepseek2.block_count": s["n_layers"],
        "deepseek2.context_length": s["n_ctx_train"],
        "deepseek2.embedding_length": n_embd,
        "deepseek2.feed_forward_length": s["n_ff"],
        "deepseek2.attention.head_count": n_head,
        "deepseek2.attention.head_count_kv": 1 if mla else n_head,
        "deepseek2.attention.key_length": rank + rope if mla else nope + rope,
        "deepseek2.attention.value_length": rank if mla else v_head,
        "deepseek2.attention.kv_lora_rank": rank,
        "deepseek2.attention.layer_norm_rms_epsilon": 1e-6,
        "deepseek2.rope.dimension_count": rope,
        "deepseek2.rope.freq_base": 10000.0,
        "deepseek2.leading_dense_block_count": s["n_dense"],
        "deepseek2.expert_count": n_expert,
        "deepseek2.expert_used_count": s["n_expert_used"],
        "deepseek2.expert_shared_count": s["n_expert_shared"],
        "deepseek2.expert_feed_forward_length": n_ff_exp,
        "deepseek2.expert_weights_scale": 1.0,
        "deepseek2.vocab_size": n_vocab,
        "tokenizer.ggml.model": "no_vocab",
    }
    if mla:
        metadata["deepseek2.attention.key_length_mla"] = nope + rope
        metadata["deepseek2.attention.value_length_mla"] = v_head
    return write_gguf(directory / f"deepseek-v2-lite{'' if mla else '-legacy'}.gguf", metadata, tensors)


# DeepSeek-R1-Distill-Qwen-7B (deepseek-ai/DeepSeek-R1-Distill-Qwen-7B config.json, a Qwen2 model): hidden
# 3584, 28 layers, 28 heads, 4 KV heads of 128, intermediate 18944, vocabulary 152064, max_position_embeddings
# 131072, untied output, biases on q/k/v.
def r1_distill_qwen_7b_file(directory: Path, *, matrix_type: int = Q8_0) -> Path:
    n_embd, n_ff, n_vocab, n_layers, n_kv = 3584, 18944, 152064, 28, 4 * 128
    t = matrix_type
    tensors = [TensorSpec("token_embd.weight", (n_embd, n_vocab), t)]
    for il in range(n_layers):
        tensors += [
            TensorSpec(f"blk.{il}.attn_norm.weight", (n_embd,), F32),
            TensorSpec(f"blk.{il}.attn_q.weight", (n_embd, n_embd), t),
            TensorSpec(f"blk.{il}.attn_q.bias", (n_embd,), F32),
            TensorSpec(f"blk.{il}.attn_k.weight", (n_embd, n_kv), t),
            TensorSpec(f"blk.{il}.attn_k.bias", (n_kv,), F32),
            TensorSpec(f"blk.{il}.attn_v.weight", (n_embd, n_kv), t),
            TensorSpec(f"blk.{il}.attn_v.bias", (n_kv,), F32),
            TensorSpec(f"blk.{il}.attn_output.weight", (n_embd, n_embd), t),
            TensorSpec(f"blk.{il}.ffn_norm.weight", (n_embd,), F32),
            TensorSpec(f"blk.{il}.ffn_gate.weight", (n_embd, n_ff), t),
            TensorSpec(f"blk.{il}.ffn_up.weight", (n_embd, n_ff), t),
            TensorSpec(f"blk.{il}.ffn_down.weight", (n_ff, n_embd), t),
        ]
    tensors += [
        TensorSpec("output_norm.weight", (n_embd,), F32),
        TensorSpec("output.weight", (n_embd, n_vocab), t),
    ]
    metadata: dict[str, object] = {
        "general.architecture": "qwen2",
        "general.name": "DeepSeek-R1-Distill-Qwen-7B-shaped",
        "general.file_type": 7 if t == Q8_0 else 1,
        "qwen2.block_count": n_layers,
        "qwen2.context_length": 131072,
        "qwen2.embedding_length": n_embd,
        "qwen2.feed_forward_length": n_ff,
        "qwen2.attention.head_count": 28,
        "qwen2.attention.head_count_kv": 4,
        "qwen2.attention.layer_norm_rms_epsilon": 1e-6,
        "qwen2.rope.freq_base": 10000.0,
        "qwen2.vocab_size": n_vocab,
        "tokenizer.ggml.model": "no_vocab",
    }
    return write_gguf(directory / "r1-distill-qwen-7b.gguf", metadata, tensors)


def tiny_moe_file(
    directory: Path,
    *,
    n_layers: int = 2,
    n_expert: int = 4,
    n_embd: int = 64,
    n_ff_exp: int = 32,
    matrix_type: int = F32,
) -> Path:
    """A loadable Qwen3-MoE-architecture model with all-zero weights and a byte-level SentencePiece
    vocabulary: small enough to load and run anywhere, with real routed-expert tensors
    (`ffn_{gate,up,down}_exps`) for tests of where llama.cpp puts them. Its replies are meaningless. Larger
    sizes give the GPU check (bench/gpu/check.py) expert tensors worth measuring; the file stays sparse."""
    head_dim = 16 if n_embd < 1024 else 128
    n_head = n_embd // head_dim
    n_head_kv = max(1, n_head // 4)
    tokens = ["<unk>", "<s>", "</s>", *(f"<0x{b:02X}>" for b in range(256)), "▁", "▁a", "▁the"]
    types = [2, 3, 3, *[6] * 256, 1, 1, 1]  # unknown, control, byte, normal
    arch = "qwen3moe"
    metadata: dict[str, object] = {
        "general.architecture": arch,
        "general.name": "tiny-moe",
        f"{arch}.context_length": 4096,
        f"{arch}.embedding_length": n_embd,
        f"{arch}.block_count": n_layers,
        f"{arch}.feed_forward_length": n_ff_exp * 2,
        f"{arch}.expert_feed_forward_length": n_ff_exp,
        f"{arch}.attention.head_count": n_head,
        f"{arch}.attention.head_count_kv": n_head_kv,
        f"{arch}.attention.key_length": head_dim,
        f"{arch}.attention.value_length": head_dim,
        f"{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        f"{arch}.rope.freq_base": 10000.0,
        f"{arch}.expert_count": n_expert,
        f"{arch}.expert_used_count": 2,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": [0.0] * len(tokens),
        "tokenizer.ggml.token_type": TypedArray(GGUFValueType.INT32, types),
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
    }
    tensors = [
        TensorSpec("token_embd.weight", (n_embd, len(tokens)), F32),
        TensorSpec("output_norm.weight", (n_embd,), F32),
    ]
    for i in range(n_layers):
        block = f"blk.{i}"
        tensors += [
            TensorSpec(f"{block}.attn_norm.weight", (n_embd,), F32),
            TensorSpec(f"{block}.attn_q.weight", (n_embd, n_head * head_dim), matrix_type),
            TensorSpec(f"{block}.attn_k.weight", (n_embd, n_head_kv * head_dim), matrix_type),
            TensorSpec(f"{block}.attn_v.weight", (n_embd, n_head_kv * head_dim), matrix_type),
            TensorSpec(f"{block}.attn_output.weight", (n_head * head_dim, n_embd), matrix_type),
            TensorSpec(f"{block}.attn_q_norm.weight", (head_dim,), F32),
            TensorSpec(f"{block}.attn_k_norm.weight", (head_dim,), F32),
            TensorSpec(f"{block}.ffn_norm.weight", (n_embd,), F32),
            TensorSpec(f"{block}.ffn_gate_inp.weight", (n_embd, n_expert), F32),
            TensorSpec(f"{block}.ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), matrix_type),
            TensorSpec(f"{block}.ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), matrix_type),
            TensorSpec(f"{block}.ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), matrix_type),
        ]
    return write_gguf(directory / f"moe-{n_layers}x{n_expert}-{n_embd}.gguf", metadata, tensors)


def dry_run(path: Path, **load: object) -> tuple[int, int]:
    """(KV bytes, compute bytes) as llama.cpp sizes them for a load, without reading or allocating the
    weights (model parameter no_alloc, no mmap): how a header-only 8B-shaped file can be checked here."""
    import llama_cpp

    kv_type = KV_CACHE_TYPES[str(load.get("kv_type", "f16"))].ggml_type
    model_params = llama_cpp.llama_model_default_params()
    model_params.no_alloc = True
    model_params.load_mode = 0  # LLAMA_LOAD_MODE_NONE: llama.cpp refuses no_alloc with mmap
    context_params = llama_cpp.llama_context_default_params()
    context_params.n_ctx = int(str(load["context"]))
    context_params.n_batch = context_params.n_ubatch = 512
    context_params.flash_attn_type = 1 if load.get("flash_attn") else 0
    context_params.type_k = context_params.type_v = kv_type
    context_params.swa_full = bool(load.get("swa_full", True))
    with LlamaLog(echo=False) as log:
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), model_params)
        assert model, log.text[-2000:]
        ctx = llama_cpp.llama_init_from_model(model, context_params)
        assert ctx, log.text[-2000:]
    llama_cpp.llama_free(ctx)
    llama_cpp.llama_model_free(model)
    # With no_alloc the KV buffers report 0 bytes, but the cache still logs the size it would take.
    kv = sum(round(float(m) * MIB) for m in re.findall(r"llama_kv_cache: size =\s*([\d.]+) MiB", log.text))
    return kv, log.buffer_sizes()["compute"]
