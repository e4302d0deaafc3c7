"""A tiny mixture-of-experts model with random weights, for plumbing only: which kernels llama.cpp takes for
experts (MUL_MAT_ID), never what a model says. No MoE model small enough for the tests ships on PyPI.

llama's architecture with experts (as Mixtral's files are): 2 blocks, 4 experts of which 2 are used per
token (few, so that a batch of guesses routes 8 or more tokens to one expert, where llama.cpp takes other
kernels), a byte-fallback SentencePiece vocabulary of single characters, and a ChatML template. Written in F32
by the tests' own GGUF writer, then quantized by llama.cpp itself to the types whose expert kernels differ: on
AVX2, Q4_0 and Q4_K are repacked and take the repacked MUL_MAT_ID; a Q4_K_M file's Q6_K experts take ggml's
generic one, which hands an expert to the tiled K-quant kernel once 8 tokens are routed to it; Q8_0 and F16
take the generic one's vec_dot.
"""

from __future__ import annotations

import string
from pathlib import Path

import numpy as np

from tests.helpers.gguf_factory import GGUFValueType, TensorSpec, TypedArray, write_gguf

N_EMBD = 256
N_FF = 512
N_HEAD = 4
N_HEAD_KV = 2
N_BLOCKS = 2
N_EXPERTS = 4
N_EXPERTS_USED = 2
CHATML = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
_F32 = 0
_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6


def _vocabulary() -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"]
    types = [_UNKNOWN, _CONTROL, _CONTROL]
    tokens += [f"<0x{byte:02X}>" for byte in range(256)]
    types += [_BYTE] * 256
    characters = ["\u2581"] + [c for c in string.printable if c not in string.whitespace]
    tokens += characters
    types += [_NORMAL] * len(characters)
    scores = [0.0] * 259 + [-float(i) for i in range(len(characters))]
    return tokens, scores, types


def write_tiny_moe(path: Path, *, seed: int = 0) -> Path:
    """The F32 model at `path`."""
    rng = np.random.default_rng(seed)
    tokens, scores, types = _vocabulary()
    n_vocab = len(tokens)
    head_dim = N_EMBD // N_HEAD

    def weights(name: str, *shape: int) -> TensorSpec:
        # GGUF lists ne0 (the row length, a matrix's input) first; numpy's last axis is that row.
        values = rng.standard_normal(tuple(reversed(shape)), dtype=np.float32) / np.sqrt(shape[0])
        return TensorSpec(name, shape, _F32, data=values.astype(np.float32).tobytes())

    def ones(name: str, size: int) -> TensorSpec:
        return TensorSpec(name, (size,), _F32, data=np.ones(size, dtype=np.float32).tobytes())

    tensors = [weights("token_embd.weight", N_EMBD, n_vocab)]
    for block in range(N_BLOCKS):
        prefix = f"blk.{block}."
        tensors += [
            ones(prefix + "attn_norm.weight", N_EMBD),
            weights(prefix + "attn_q.weight", N_EMBD, N_EMBD),
            weights(prefix + "attn_k.weight", N_EMBD, N_HEAD_KV * head_dim),
            weights(prefix + "attn_v.weight", N_EMBD, N_HEAD_KV * head_dim),
            weights(prefix + "attn_output.weight", N_EMBD, N_EMBD),
            ones(prefix + "ffn_norm.weight", N_EMBD),
            weights(prefix + "ffn_gate_inp.weight", N_EMBD, N_EXPERTS),
            weights(prefix + "ffn_gate_exps.weight", N_EMBD, N_FF, N_EXPERTS),
            weights(prefix + "ffn_up_exps.weight", N_EMBD, N_FF, N_EXPERTS),
            weights(prefix + "ffn_down_exps.weight", N_FF, N_EMBD, N_EXPERTS),
        ]
    tensors += [ones("output_norm.weight", N_EMBD), weights("output.weight", N_EMBD, n_vocab)]
    metadata: dict[str, object] = {
        "general.architecture": "llama",
        "general.name": "tiny random MoE (tests)",
        "general.file_type": 0,
        "llama.context_length": 4096,
        "llama.embedding_length": N_EMBD,
        "llama.block_count": N_BLOCKS,
        "llama.feed_forward_length": N_FF,
        "llama.attention.head_count": N_HEAD,
        "llama.attention.head_count_kv": N_HEAD_KV,
        "llama.rope.dimension_count": head_dim,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.expert_count": N_EXPERTS,
        "llama.expert_used_count": N_EXPERTS_USED,
        "llama.vocab_size": n_vocab,
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": TypedArray(GGUFValueType.STRING, tokens),
        "tokenizer.ggml.scores": TypedArray(GGUFValueType.FLOAT32, scores),
        "tokenizer.ggml.token_type": TypedArray(GGUFValueType.INT32, types),
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.chat_template": CHATML,
    }
    return write_gguf(path, metadata, tensors)
