"""Bounded, defensive reader for GGUF file headers.

llama.cpp's own GGUF parser has a long history of memory-safety bugs driven by counts and lengths in the
header (CVE-2024-21802 and siblings), and `gguf`'s GGUFReader hangs on a 43-byte file. Hearth checks every
header in Python before llama.cpp sees the file: each count and length is compared with the bytes that are
actually left before anything is allocated for it, so a hostile file costs at most a few megabytes of memory
and a fraction of a second.

Parsing goes only through a `ByteSource` and reads it in bounded blocks, so the same code works for a local
file and (later) for HTTP range requests against a remote file.
"""

from __future__ import annotations

import enum
import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, NoReturn, Protocol, Self


class GGUFError(ValueError):
    """The file is not a GGUF model Hearth can use; the message is written for the user."""


class ByteSource(Protocol):
    """Random-access bytes. `read` returns fewer than `n` bytes only at the end of the data."""

    @property
    def size(self) -> int: ...

    def read(self, offset: int, n: int) -> bytes: ...


class FileByteSource:
    """A local file read with seek + read, so only the blocks the parser asks for are ever in memory."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        # Held open for the source's lifetime (closed by close() / the with block), not a leak.
        self._file = Path(path).open("rb")  # noqa: SIM115
        self._size = os.fstat(self._file.fileno()).st_size

    @property
    def size(self) -> int:
        return self._size

    def read(self, offset: int, n: int) -> bytes:
        self._file.seek(offset)
        return self._file.read(n)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class GGUFValueType(enum.IntEnum):
    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12


@dataclass(frozen=True, slots=True)
class GGMLType:
    name: str
    block_size: int  # elements per block
    type_size: int  # bytes per block


# From ggml.c's type_traits. Gaps are types that were removed from GGUF files (Q4_2, Q4_3, the Q4_0_x_x and
# IQ4_NL_x_x repacks); llama.cpp refuses them too.
GGML_TYPES: Final[Mapping[int, GGMLType]] = {
    0: GGMLType("F32", 1, 4),
    1: GGMLType("F16", 1, 2),
    2: GGMLType("Q4_0", 32, 18),
    3: GGMLType("Q4_1", 32, 20),
    6: GGMLType("Q5_0", 32, 22),
    7: GGMLType("Q5_1", 32, 24),
    8: GGMLType("Q8_0", 32, 34),
    9: GGMLType("Q8_1", 32, 36),
    10: GGMLType("Q2_K", 256, 84),
    11: GGMLType("Q3_K", 256, 110),
    12: GGMLType("Q4_K", 256, 144),
    13: GGMLType("Q5_K", 256, 176),
    14: GGMLType("Q6_K", 256, 210),
    15: GGMLType("Q8_K", 256, 292),
    16: GGMLType("IQ2_XXS", 256, 66),
    17: GGMLType("IQ2_XS", 256, 74),
    18: GGMLType("IQ3_XXS", 256, 98),
    19: GGMLType("IQ1_S", 256, 50),
    20: GGMLType("IQ4_NL", 32, 18),
    21: GGMLType("IQ3_S", 256, 110),
    22: GGMLType("IQ2_S", 256, 82),
    23: GGMLType("IQ4_XS", 256, 136),
    24: GGMLType("I8", 1, 1),
    25: GGMLType("I16", 1, 2),
    26: GGMLType("I32", 1, 4),
    27: GGMLType("I64", 1, 8),
    28: GGMLType("F64", 1, 8),
    29: GGMLType("IQ1_M", 256, 56),
    30: GGMLType("BF16", 1, 2),
    34: GGMLType("TQ1_0", 256, 54),
    35: GGMLType("TQ2_0", 256, 66),
    39: GGMLType("MXFP4", 32, 17),
    40: GGMLType("NVFP4", 64, 36),
}

# llama.h's enum llama_ftype, stored as general.file_type.
FILE_TYPE_NAMES: Final[Mapping[int, str]] = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    7: "Q8_0",
    8: "Q5_0",
    9: "Q5_1",
    10: "Q2_K",
    11: "Q3_K_S",
    12: "Q3_K_M",
    13: "Q3_K_L",
    14: "Q4_K_S",
    15: "Q4_K_M",
    16: "Q5_K_S",
    17: "Q5_K_M",
    18: "Q6_K",
    19: "IQ2_XXS",
    20: "IQ2_XS",
    21: "Q2_K_S",
    22: "IQ3_XS",
    23: "IQ3_XXS",
    24: "IQ1_S",
    25: "IQ4_NL",
    26: "IQ3_S",
    27: "IQ3_M",
    28: "IQ2_S",
    29: "IQ2_M",
    30: "IQ4_XS",
    31: "IQ1_M",
    32: "BF16",
    36: "TQ1_0",
    37: "TQ2_0",
    38: "MXFP4_MOE",
    39: "NVFP4",
}

MAGIC: Final = b"GGUF"
SUPPORTED_VERSIONS: Final = (2, 3)
DEFAULT_ALIGNMENT: Final = 32
MAX_ALIGNMENT: Final = 1 << 20
MAX_DIMS: Final = 4
MAX_KEPT_ARRAY_LENGTH: Final = 1024
MAX_KEPT_STRING_BYTES: Final = 1 << 20
MAX_STRING_BYTES: Final = 64 << 20
# GGML_MAX_NAME is 64 including the terminating NUL; llama.cpp refuses longer names.
MAX_TENSOR_NAME_BYTES: Final = 63
# The GGUF spec caps keys at 65535 bytes.
MAX_KEY_BYTES: Final = 65535
# Real models have well under a hundred metadata keys and a few thousand tensors; these caps bound the
# per-entry Python objects a header can make us create, independent of how large the file is.
MAX_KV_COUNT: Final = 1 << 16
MAX_TENSOR_COUNT: Final = 1 << 17
MAX_ARRAY_DEPTH: Final = 4
# Every array element costs a Python loop step for strings and nested arrays, so a length is bounded
# beyond what the bytes allow: the largest real vocabularies have ~262k tokens (Gemma 3) and ~500k merges.
MAX_ARRAY_LENGTH: Final = 1 << 24

# Hyperparameters size Python lists and loops in inference.estimator (one entry per layer, several passes
# per placement tried) and land in SQLite integer columns, so each is bounded far above any real model but
# far below what a uint32/uint64 can claim. llama.cpp itself refuses more than 512 layers or 512 experts
# (LLAMA_MAX_LAYERS, LLAMA_MAX_EXPERTS in llama-hparams.h); the largest real models have ~160 layers,
# 128 attention heads, head dims of 576 (MLA), 256-512 experts, 16k-18k embeddings, FFNs of ~74k,
# vocabularies of ~262k and contexts of 10M tokens (Llama 4 Scout).
MAX_BLOCK_COUNT: Final = 1024
MAX_EXPERT_COUNT: Final = 4096
MAX_HEAD_COUNT: Final = 1 << 14
MAX_HEAD_DIM: Final = 1 << 16
MAX_EMBEDDING_LENGTH: Final = 1 << 20
MAX_FEED_FORWARD_LENGTH: Final = 1 << 22
MAX_VOCAB_SIZE: Final = 1 << 24
MAX_CONTEXT_LENGTH: Final = 1 << 27
# Per-architecture keys (`{arch}.{suffix}`) and their bounds; a per-layer key may be an array of them.
HYPERPARAMETER_LIMITS: Final[Mapping[str, int]] = {
    "block_count": MAX_BLOCK_COUNT,
    "leading_dense_block_count": MAX_BLOCK_COUNT,
    "context_length": MAX_CONTEXT_LENGTH,
    "attention.sliding_window": MAX_CONTEXT_LENGTH,
    "embedding_length": MAX_EMBEDDING_LENGTH,
    "feed_forward_length": MAX_FEED_FORWARD_LENGTH,
    "expert_feed_forward_length": MAX_FEED_FORWARD_LENGTH,
    "vocab_size": MAX_VOCAB_SIZE,
    "attention.head_count": MAX_HEAD_COUNT,
    "attention.head_count_kv": MAX_HEAD_COUNT,
    "attention.key_length": MAX_HEAD_DIM,
    "attention.value_length": MAX_HEAD_DIM,
    "attention.key_length_mla": MAX_HEAD_DIM,
    "attention.value_length_mla": MAX_HEAD_DIM,
    "expert_count": MAX_EXPERT_COUNT,
    "expert_used_count": MAX_EXPERT_COUNT,
    "expert_shared_count": MAX_EXPERT_COUNT,
}
# Keys are always kept, so they get their own bound; real models use a few kilobytes.
_MAX_TOTAL_KEY_BYTES: Final = 16 << 20
_MAX_INT64: Final = (1 << 63) - 1
_READ_BLOCK: Final = 1 << 20
# Approximate Python memory that retained metadata may use in total; values past it become summaries.
_RETAIN_BUDGET: Final = 64 << 20
_ELEMENT_COST: Final = 32

# Smallest possible encoding of each entry, used to refuse counts the remaining bytes cannot hold.
# A KV: key length (8) + a 1-byte key + value type (4) + a 1-byte value.
_MIN_KV_BYTES: Final = 8 + 1 + 4 + 1
# A tensor info: name length (8) + a 1-byte name + n_dims (4) + one dimension (8) + type (4) + offset (8).
_MIN_TENSOR_INFO_BYTES: Final = 8 + 1 + 4 + 8 + 4 + 8

_SCALARS: Final[Mapping[int, struct.Struct]] = {
    GGUFValueType.UINT8: struct.Struct("<B"),
    GGUFValueType.INT8: struct.Struct("<b"),
    GGUFValueType.UINT16: struct.Struct("<H"),
    GGUFValueType.INT16: struct.Struct("<h"),
    GGUFValueType.UINT32: struct.Struct("<I"),
    GGUFValueType.INT32: struct.Struct("<i"),
    GGUFValueType.FLOAT32: struct.Struct("<f"),
    GGUFValueType.BOOL: struct.Struct("<B"),
    GGUFValueType.UINT64: struct.Struct("<Q"),
    GGUFValueType.INT64: struct.Struct("<q"),
    GGUFValueType.FLOAT64: struct.Struct("<d"),
}
# Minimal bytes per array element: a string is at least its length field, a nested array its type and length.
_MIN_ELEMENT_BYTES: Final[Mapping[int, int]] = {
    **{t: s.size for t, s in _SCALARS.items()},
    GGUFValueType.STRING: 8,
    GGUFValueType.ARRAY: 4 + 8,
}
_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")


@dataclass(frozen=True, slots=True)
class ArraySummary:
    """Stands in for an array too large to keep in memory (a 256k-token vocabulary, merges)."""

    element_type: int
    length: int


@dataclass(frozen=True, slots=True)
class StringSummary:
    """Stands in for a string value over MAX_KEPT_STRING_BYTES."""

    length: int


@dataclass(frozen=True, slots=True)
class GGUFTensorInfo:
    name: str
    shape: tuple[int, ...]  # GGUF order: the fastest-varying dimension (ne0) first
    ggml_type: int
    offset: int  # relative to GGUFHeader.data_offset
    n_bytes: int


@dataclass(frozen=True, slots=True)
class GGUFHeader:
    """A validated header. Metadata values are int, float, bool, str or (nested) lists of those, with
    ArraySummary / StringSummary standing in for values too large to keep."""

    version: int
    metadata: Mapping[str, object]
    tensors: tuple[GGUFTensorInfo, ...]
    alignment: int
    data_offset: int
    file_size: int

    @property
    def architecture(self) -> str | None:
        return _as_str(self.metadata.get("general.architecture"))

    @property
    def model_name(self) -> str | None:
        return _as_str(self.metadata.get("general.name"))

    @property
    def chat_template(self) -> str | None:
        return _as_str(self.metadata.get("tokenizer.chat_template"))

    @property
    def context_length(self) -> int | None:
        return _as_int(self._arch_value("context_length"))

    @property
    def block_count(self) -> int | None:
        return _as_int(self._arch_value("block_count"))

    @property
    def embedding_length(self) -> int | None:
        return _as_int(self._arch_value("embedding_length"))

    @property
    def head_count(self) -> int | list[int] | None:
        return _as_int_or_list(self._arch_value("attention.head_count"))

    @property
    def head_count_kv(self) -> int | list[int] | None:
        return _as_int_or_list(self._arch_value("attention.head_count_kv"))

    @property
    def key_length(self) -> int | None:
        return _as_int(self._arch_value("attention.key_length")) or self._default_head_dim()

    @property
    def value_length(self) -> int | None:
        return _as_int(self._arch_value("attention.value_length")) or self._default_head_dim()

    @property
    def sliding_window(self) -> int | None:
        return _as_int(self._arch_value("attention.sliding_window"))

    @property
    def file_type(self) -> int | None:
        return _as_int(self.metadata.get("general.file_type"))

    @property
    def quantization(self) -> str | None:
        file_type = self.file_type
        if file_type is None:
            return None
        return FILE_TYPE_NAMES.get(file_type, f"unknown (file type {file_type})")

    @property
    def bos_token_id(self) -> int | None:
        return _as_int(self.metadata.get("tokenizer.ggml.bos_token_id"))

    @property
    def eos_token_id(self) -> int | None:
        return _as_int(self.metadata.get("tokenizer.ggml.eos_token_id"))

    @property
    def tensor_bytes_total(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    def _arch_value(self, suffix: str) -> object:
        arch = self.architecture
        return None if arch is None else self.metadata.get(f"{arch}.{suffix}")

    def _default_head_dim(self) -> int | None:
        # llama.cpp's default when the file does not say: n_embd / n_head.
        embedding, heads = self.embedding_length, self.head_count
        if embedding is None or not isinstance(heads, int) or heads <= 0:
            return None
        return embedding // heads


def read_header(path: str | os.PathLike[str]) -> GGUFHeader:
    """Parse and validate the header of a local GGUF file. OSError (missing, unreadable) passes through."""
    with FileByteSource(path) as source:
        return parse_header(source)


def parse_header(source: ByteSource, *, max_header_bytes: int = 512 * 1024 * 1024) -> GGUFHeader:
    """Parse and validate a GGUF header; raises GGUFError for anything llama.cpp should not be given."""
    file_size = source.size
    if file_size == 0:
        raise GGUFError("the file is empty")
    reader = _Reader(source, max_header_bytes)
    if reader.remaining() < 4 or reader.take(4) != MAGIC:
        raise GGUFError("not a GGUF file (bad magic)")
    version = _check_version(reader.u32())
    n_tensors = reader.u64()
    n_kv = reader.u64()
    _check_counts(reader, n_tensors, n_kv, file_size)

    budget = _Budget(_RETAIN_BUDGET)
    key_bytes = 0
    metadata: dict[str, object] = {}
    alignment = DEFAULT_ALIGNMENT
    for index in range(n_kv):
        key = reader.string(MAX_KEY_BYTES, strict=True, what=f"metadata key #{index}")
        if not key:
            raise GGUFError(f"metadata key #{index} is empty")
        key_bytes += len(key)
        if key_bytes > _MAX_TOTAL_KEY_BYTES:
            raise GGUFError(f"the metadata keys add up to more than {_size(_MAX_TOTAL_KEY_BYTES)}")
        if key in metadata:
            raise GGUFError(f"metadata key {_show(key)} appears twice")
        value_type = reader.u32()
        try:
            value = _read_value(reader, value_type, budget)
        except GGUFError as exc:
            raise GGUFError(f"metadata key {_show(key)}: {exc}") from None
        if key == "general.alignment":
            alignment = _check_alignment(value_type, value)
        metadata[key] = value
    check_hyperparameters(metadata)

    tensors = tuple(_read_tensor_info(reader, index) for index in range(n_tensors))
    _check_unique_names(tensors)
    data_offset = -(-reader.pos // alignment) * alignment
    _check_tensor_placement(tensors, alignment, data_offset, file_size)
    return GGUFHeader(
        version=version,
        metadata=metadata,
        tensors=tensors,
        alignment=alignment,
        data_offset=data_offset,
        file_size=file_size,
    )


class _Reader:
    """Sequential reads over a ByteSource through a bounded block buffer; never past the header limit."""

    __slots__ = ("_buf", "_buf_start", "_end", "_file_size", "_max_header", "_source", "pos")

    def __init__(self, source: ByteSource, max_header_bytes: int) -> None:
        self._source = source
        self._file_size = source.size
        self._max_header = max_header_bytes
        self._end = min(self._file_size, max_header_bytes)
        self._buf = b""
        self._buf_start = 0
        self.pos = 0

    def remaining(self) -> int:
        return self._end - self.pos

    def describe_limit(self) -> str:
        if self._end < self._file_size:
            return f"a GGUF header may be at most {_size(self._max_header)}"
        return f"the file is only {self._file_size} bytes"

    def _short(self, n: int) -> NoReturn:
        if self.pos + n > self._file_size:
            raise GGUFError(
                f"the file is truncated (needed {n} bytes at offset {self.pos}; "
                f"the file is {self._file_size} bytes long)"
            )
        raise GGUFError(f"the GGUF header is larger than the {_size(self._max_header)} limit")

    def _fill(self, n: int) -> int:
        """Makes [pos, pos + n) available in the buffer; returns pos relative to the buffer."""
        rel = self.pos - self._buf_start
        if rel >= 0 and rel + n <= len(self._buf):
            return rel
        if n > self._end - self.pos:
            self._short(n)
        want = min(max(n, _READ_BLOCK), self._end - self.pos)
        data = self._source.read(self.pos, want)
        if len(data) < n:
            # The source shrank, or reports a size it cannot deliver.
            raise GGUFError(f"the file is truncated: could not read {n} bytes at offset {self.pos}")
        self._buf = data
        self._buf_start = self.pos
        return 0

    def take(self, n: int) -> bytes:
        rel = self._fill(n)
        self.pos += n
        return self._buf[rel : rel + n]

    def unpack(self, fmt: struct.Struct) -> object:
        rel = self._fill(fmt.size)
        self.pos += fmt.size
        return fmt.unpack_from(self._buf, rel)[0]

    def unpack_many(self, fmt: str, count: int, size: int) -> tuple[Any, ...]:
        rel = self._fill(count * size)
        self.pos += count * size
        return struct.unpack_from(f"<{count}{fmt}", self._buf, rel)

    def u32(self) -> int:
        rel = self._fill(4)
        self.pos += 4
        value: int = _U32.unpack_from(self._buf, rel)[0]
        return value

    def u64(self) -> int:
        rel = self._fill(8)
        self.pos += 8
        value: int = _U64.unpack_from(self._buf, rel)[0]
        return value

    def skip(self, n: int) -> None:
        if n > self._end - self.pos:
            self._short(n)
        self.pos += n

    def string_length(self, cap: int, what: str) -> int:
        length = self.u64()
        if length > self.remaining():
            raise GGUFError(
                f"{what} has length {_count(length)} but only {self.remaining()} bytes remain "
                f"({self.describe_limit()})"
            )
        if length > cap:
            raise GGUFError(f"{what} is {_size(length)}, more than the {_size(cap)} limit")
        return length

    def string(self, cap: int, *, strict: bool, what: str) -> str:
        raw = self.take(self.string_length(cap, what))
        if not strict:
            return raw.decode("utf-8", errors="replace")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{what} is not valid UTF-8") from None


class _Budget:
    """Approximate bytes of Python objects that retained metadata may still use."""

    __slots__ = ("left",)

    def __init__(self, total: int) -> None:
        self.left = total

    def take(self, n: int) -> bool:
        if n > self.left:
            return False
        self.left -= n
        return True


def _check_version(version: int) -> int:
    if version in SUPPORTED_VERSIONS:
        return version
    if int.from_bytes(version.to_bytes(4, "little"), "big") in SUPPORTED_VERSIONS:
        raise GGUFError("big-endian GGUF files are not supported")
    if version == 1:
        raise GGUFError("GGUF version 1 is no longer supported; download a newer conversion of this model")
    raise GGUFError(f"unsupported GGUF version {version} (supported: 2 and 3)")


def _check_counts(reader: _Reader, n_tensors: int, n_kv: int, file_size: int) -> None:
    room = reader.remaining()
    for count, minimum, noun in (
        (n_tensors, _MIN_TENSOR_INFO_BYTES, "tensors"),
        (n_kv, _MIN_KV_BYTES, "metadata entries"),
    ):
        if count * minimum > room:
            raise GGUFError(f"GGUF header claims {_count(count)} {noun} but {reader.describe_limit()}")
    if n_tensors * _MIN_TENSOR_INFO_BYTES + n_kv * _MIN_KV_BYTES > room:
        raise GGUFError(
            f"GGUF header claims {_count(n_kv)} metadata entries and {_count(n_tensors)} tensors "
            f"but {reader.describe_limit()}"
        )
    if n_kv > MAX_KV_COUNT:
        raise GGUFError(
            f"GGUF header claims {_count(n_kv)} metadata entries; at most {MAX_KV_COUNT} are accepted"
        )
    if n_tensors > MAX_TENSOR_COUNT:
        raise GGUFError(
            f"GGUF header claims {_count(n_tensors)} tensors; at most {MAX_TENSOR_COUNT} are accepted"
        )


def _read_value(reader: _Reader, value_type: int, budget: _Budget) -> object:
    scalar = _SCALARS.get(value_type)
    if scalar is not None:
        value = reader.unpack(scalar)
        return bool(value) if value_type == GGUFValueType.BOOL else value
    if value_type == GGUFValueType.STRING:
        length = reader.string_length(MAX_STRING_BYTES, "string")
        if length > MAX_KEPT_STRING_BYTES or not budget.take(length + _ELEMENT_COST):
            reader.skip(length)
            return StringSummary(length)
        return reader.take(length).decode("utf-8", errors="replace")
    if value_type == GGUFValueType.ARRAY:
        return _read_array(reader, budget, depth=1, retain=True)
    raise GGUFError(f"unknown value type {value_type}")


def _read_array(reader: _Reader, budget: _Budget, *, depth: int, retain: bool) -> list[object] | ArraySummary:
    if depth > MAX_ARRAY_DEPTH:
        raise GGUFError(f"arrays are nested more than {MAX_ARRAY_DEPTH} deep")
    element_type = reader.u32()
    min_bytes = _MIN_ELEMENT_BYTES.get(element_type)
    if min_bytes is None:
        raise GGUFError(f"array has unknown element type {element_type}")
    length = reader.u64()
    if length * min_bytes > reader.remaining():
        raise GGUFError(
            f"array claims {_count(length)} elements of at least {min_bytes} bytes but only "
            f"{reader.remaining()} bytes remain ({reader.describe_limit()})"
        )
    if length > MAX_ARRAY_LENGTH:
        raise GGUFError(f"array claims {_count(length)} elements; at most {MAX_ARRAY_LENGTH:,} are accepted")
    # `retain` is False inside an array that is itself being summarized: validate, keep nothing.
    keep = retain and length <= MAX_KEPT_ARRAY_LENGTH and budget.take(length * _ELEMENT_COST)
    scalar = _SCALARS.get(element_type)
    if scalar is not None:
        if not keep:
            reader.skip(length * scalar.size)
            return ArraySummary(int(element_type), length)
        values = reader.unpack_many(scalar.format[1:], length, scalar.size)
        if element_type == GGUFValueType.BOOL:
            return [bool(v) for v in values]
        return list(values)
    if element_type == GGUFValueType.STRING:
        return _read_string_array(reader, budget, length, keep)
    items: list[object] = []
    for _ in range(length):
        item = _read_array(reader, budget, depth=depth + 1, retain=keep)
        if keep:
            items.append(item)
    return items if keep else ArraySummary(int(element_type), length)


def _read_string_array(
    reader: _Reader, budget: _Budget, length: int, keep: bool
) -> list[object] | ArraySummary:
    # The hot loop of every header (a vocabulary has 30k-260k strings): kept minimal on purpose.
    items: list[object] = []
    for _ in range(length):
        n = reader.string_length(MAX_STRING_BYTES, "string in array")
        if keep and n <= MAX_KEPT_STRING_BYTES and budget.take(n):
            items.append(reader.take(n).decode("utf-8", errors="replace"))
        else:
            keep = False
            reader.skip(n)
    return items if keep else ArraySummary(int(GGUFValueType.STRING), length)


def check_hyperparameters(metadata: Mapping[str, object]) -> None:
    """Refuses a layer, head, expert, context or vocabulary count no real model has (HYPERPARAMETER_LIMITS),
    before anything sizes a list or a loop by it. Values of other types are left to the readers, which ignore
    them."""
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str):
        return
    for suffix, limit in HYPERPARAMETER_LIMITS.items():
        key = f"{arch}.{suffix}"
        value = metadata.get(key)
        if isinstance(value, ArraySummary):
            if value.length > MAX_BLOCK_COUNT:
                raise GGUFError(
                    f"{_show(key)} lists {_count(value.length)} layers; "
                    f"at most {MAX_BLOCK_COUNT} are accepted"
                )
            continue
        for item in value if isinstance(value, list) else (value,):
            if isinstance(item, int) and not isinstance(item, bool) and not 0 <= item <= limit:
                raise GGUFError(
                    f"{_show(key)} is {_count(item)}; Hearth accepts 0 to {limit:,} "
                    "(far more than any real model has)"
                )


def _check_alignment(value_type: int, value: object) -> int:
    if value_type != GGUFValueType.UINT32 or not isinstance(value, int):
        raise GGUFError("general.alignment must be a uint32")
    if value <= 0 or value & (value - 1):
        raise GGUFError(f"general.alignment {value} is not a power of two")
    if value > MAX_ALIGNMENT:
        raise GGUFError(f"general.alignment {_count(value)} is larger than the {_size(MAX_ALIGNMENT)} limit")
    return value


def _read_tensor_info(reader: _Reader, index: int) -> GGUFTensorInfo:
    name = reader.string(MAX_TENSOR_NAME_BYTES, strict=True, what=f"tensor #{index} name")
    if not name:
        raise GGUFError(f"tensor #{index} has an empty name")
    label = f"tensor {_show(name)}"
    n_dims = reader.u32()
    if not 1 <= n_dims <= MAX_DIMS:
        raise GGUFError(f"{label} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
    shape: tuple[int, ...] = reader.unpack_many("Q", n_dims, 8)
    n_elements = 1
    for dim in shape:
        if dim < 1:
            raise GGUFError(f"{label} has a dimension of size {dim}")
        n_elements *= dim
        if n_elements > _MAX_INT64:
            raise GGUFError(f"{label} has shape {shape}, more than 2^63 elements")
    ggml_type = reader.u32()
    traits = GGML_TYPES.get(ggml_type)
    if traits is None:
        raise GGUFError(f"{label} has unknown ggml type {ggml_type}")
    if shape[0] % traits.block_size:
        raise GGUFError(
            f"{label} of type {traits.name} has rows of {shape[0]} elements, "
            f"not a multiple of the block size {traits.block_size}"
        )
    offset = reader.u64()
    return GGUFTensorInfo(
        name=name,
        shape=shape,
        ggml_type=ggml_type,
        offset=offset,
        n_bytes=n_elements // traits.block_size * traits.type_size,
    )


def _check_unique_names(tensors: tuple[GGUFTensorInfo, ...]) -> None:
    seen: set[str] = set()
    for tensor in tensors:
        if tensor.name in seen:
            raise GGUFError(f"tensor {_show(tensor.name)} appears twice")
        seen.add(tensor.name)


def _check_tensor_placement(
    tensors: tuple[GGUFTensorInfo, ...], alignment: int, data_offset: int, file_size: int
) -> None:
    for tensor in tensors:
        if tensor.offset % alignment:
            raise GGUFError(
                f"tensor {_show(tensor.name)} starts at offset {tensor.offset}, "
                f"not a multiple of the alignment {alignment}"
            )
        end = data_offset + tensor.offset + tensor.n_bytes
        if end > file_size:
            raise GGUFError(
                f"tensor {_show(tensor.name)} ends at byte {end} but the file is only {file_size} bytes "
                "(truncated or corrupt download?)"
            )
    previous: GGUFTensorInfo | None = None
    for tensor in sorted(tensors, key=lambda t: t.offset):
        if previous is not None and previous.offset + previous.n_bytes > tensor.offset:
            raise GGUFError(f"tensors {_show(previous.name)} and {_show(tensor.name)} overlap")
        previous = tensor


def _as_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _as_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _as_int_or_list(value: object) -> int | list[int] | None:
    if isinstance(value, list):
        numbers = [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
        return numbers if len(numbers) == len(value) else None
    return _as_int(value)


def _count(n: int) -> str:
    """Counts from hostile headers are often exact powers of two; 2^62 reads better than 19 digits."""
    if n >= 1 << 16 and n & (n - 1) == 0:
        return f"2^{n.bit_length() - 1}"
    return str(n)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def _show(name: str) -> str:
    return repr(name if len(name) <= 80 else name[:77] + "...")
