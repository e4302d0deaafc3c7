"""A small, correct GGUF writer for tests, plus raw builders for deliberately malformed files.

Well-formed files: `write_gguf(path, metadata, tensors)` or `gguf_bytes(...)`. Plain Python values get a
default GGUF type (bool, uint32/int32/uint64/int64, float32, string, array); wrap a value in `Typed` or
`TypedArray` to choose the type. Tensor data that is not given is written as a sparse hole, so a test can
describe a multi-gigabyte model without writing it.

Malformed files: concatenate `header_bytes`, `kv_bytes`/`raw_kv`, `tensor_info_bytes` and padding yourself,
or pass impossible `TensorSpec`s (an unknown type with an explicit `n_bytes`, an explicit bad `offset`).
"""

from __future__ import annotations

import io
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from inference.gguf import GGML_TYPES, GGUFValueType

__all__ = [
    "BytesSource",
    "GGUFValueType",
    "TensorSpec",
    "Typed",
    "TypedArray",
    "gguf_bytes",
    "header_bytes",
    "kv_bytes",
    "raw_kv",
    "string_bytes",
    "tensor_info_bytes",
    "tensor_nbytes",
    "value_bytes",
    "write_gguf",
]

_SCALAR_FORMATS: Mapping[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}


@dataclass(frozen=True)
class Typed:
    """A scalar or string metadata value with an explicit GGUF type."""

    value_type: GGUFValueType
    value: object


@dataclass(frozen=True)
class TypedArray:
    """An array whose elements are all `element_type`; for ARRAY elements, each value is a TypedArray."""

    element_type: GGUFValueType
    values: Sequence[object]


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # GGUF order: ne0 first
    ggml_type: int = 0
    offset: int | None = None  # relative to the data section; None: the next aligned offset
    data: bytes | None = None  # None: zeros (a sparse hole in a real file)
    n_bytes: int | None = None  # None: computed from shape and type; required for unknown types


class BytesSource:
    """An in-memory ByteSource, e.g. for truncating a file at every position without touching disk."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    @property
    def size(self) -> int:
        return len(self._data)

    def read(self, offset: int, n: int) -> bytes:
        return self._data[offset : offset + n]


def write_gguf(
    path: Path,
    metadata: Mapping[str, object],
    tensors: Sequence[TensorSpec] = (),
    *,
    version: int = 3,
    alignment: int | None = None,
    data_size: int | None = None,
) -> Path:
    """Write a GGUF file. `alignment` also writes `general.alignment`; `data_size` forces the length of the
    data section (shorter than the tensors need: a truncated file; longer: trailing bytes)."""
    with path.open("wb") as f:
        _write(f, metadata, tensors, version=version, alignment=alignment, data_size=data_size)
    return path


def gguf_bytes(
    metadata: Mapping[str, object],
    tensors: Sequence[TensorSpec] = (),
    *,
    version: int = 3,
    alignment: int | None = None,
    data_size: int | None = None,
) -> bytes:
    """The bytes `write_gguf` would write; for small files only, since holes become real zeros."""
    buffer = io.BytesIO()
    _write(buffer, metadata, tensors, version=version, alignment=alignment, data_size=data_size)
    return buffer.getvalue()


def _write(
    f: BinaryIO,
    metadata: Mapping[str, object],
    tensors: Sequence[TensorSpec],
    *,
    version: int,
    alignment: int | None,
    data_size: int | None,
) -> None:
    entries = dict(metadata)
    if alignment is not None:
        entries["general.alignment"] = Typed(GGUFValueType.UINT32, alignment)
    align = alignment or 32
    placed: list[tuple[TensorSpec, int, int]] = []  # spec, offset, size
    next_offset = 0
    for spec in tensors:
        size = spec.n_bytes if spec.n_bytes is not None else tensor_nbytes(spec.shape, spec.ggml_type)
        offset = spec.offset if spec.offset is not None else next_offset
        placed.append((spec, offset, size))
        next_offset = _align(offset + size, align)

    f.write(header_bytes(len(tensors), len(entries), version=version))
    for key, value in entries.items():
        f.write(kv_bytes(key, value))
    for spec, offset, _ in placed:
        f.write(tensor_info_bytes(spec.name, spec.shape, spec.ggml_type, offset))
    if not placed and data_size is None:
        return
    data_offset = _align(f.tell(), align)
    natural_end = max((offset + size for _, offset, size in placed), default=0)
    total = data_offset + (natural_end if data_size is None else data_size)
    for spec, offset, _ in placed:
        if spec.data is not None:
            f.seek(data_offset + offset)
            f.write(spec.data)
    end = f.seek(0, io.SEEK_END)
    if end < total:
        f.seek(total - 1)
        f.write(b"\0")
    elif end > total:
        f.truncate(total)


def header_bytes(n_tensors: int, n_kv: int, *, version: int = 3, magic: bytes = b"GGUF") -> bytes:
    return magic + struct.pack("<IQQ", version, n_tensors, n_kv)


def string_bytes(value: str | bytes, *, length: int | None = None) -> bytes:
    """A GGUF string; `length` overrides the length field (to claim more bytes than follow)."""
    raw = value.encode("utf-8") if isinstance(value, str) else value
    return struct.pack("<Q", len(raw) if length is None else length) + raw


def raw_kv(key: str | bytes, value_type: int, payload: bytes) -> bytes:
    """A metadata entry with any type tag and payload, well-formed or not."""
    return string_bytes(key) + struct.pack("<I", value_type) + payload


def kv_bytes(key: str | bytes, value: object) -> bytes:
    value_type, payload = value_bytes(value)
    return raw_kv(key, value_type, payload)


def value_bytes(value: object) -> tuple[GGUFValueType, bytes]:
    """The type tag and encoded payload of a metadata value."""
    if isinstance(value, TypedArray):
        return GGUFValueType.ARRAY, _array_payload(value)
    if isinstance(value, Typed):
        return value.value_type, _typed_payload(value.value_type, value.value)
    if isinstance(value, list | tuple):
        return GGUFValueType.ARRAY, _array_payload(_infer_array(value))
    value_type = _infer_type(value)
    return value_type, _typed_payload(value_type, value)


def tensor_info_bytes(name: str | bytes, shape: Sequence[int], ggml_type: int, offset: int) -> bytes:
    """A tensor info entry; `shape` may have any length and any values (that is the point)."""
    dims = b"".join(struct.pack("<Q", d) for d in shape)
    return string_bytes(name) + struct.pack("<I", len(shape)) + dims + struct.pack("<IQ", ggml_type, offset)


def tensor_nbytes(shape: Sequence[int], ggml_type: int) -> int:
    traits = GGML_TYPES.get(ggml_type)
    if traits is None:
        raise ValueError(f"unknown ggml type {ggml_type}: give TensorSpec.n_bytes explicitly")
    n_elements = 1
    for dim in shape:
        n_elements *= dim
    return n_elements // traits.block_size * traits.type_size


def _align(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _infer_type(value: object) -> GGUFValueType:
    if isinstance(value, bool):
        return GGUFValueType.BOOL
    if isinstance(value, int):
        if value >= 0:
            return GGUFValueType.UINT32 if value < 1 << 32 else GGUFValueType.UINT64
        return GGUFValueType.INT32 if value >= -(1 << 31) else GGUFValueType.INT64
    if isinstance(value, float):
        return GGUFValueType.FLOAT32
    if isinstance(value, str | bytes):
        return GGUFValueType.STRING
    raise TypeError(f"no default GGUF type for {type(value).__name__}; wrap it in Typed")


def _infer_array(values: Sequence[object]) -> TypedArray:
    if not values:
        return TypedArray(GGUFValueType.UINT32, [])
    first = values[0]
    if isinstance(first, list | tuple):
        return TypedArray(GGUFValueType.ARRAY, [_as_typed_array(v) for v in values])
    return TypedArray(_infer_type(first), values)


def _typed_payload(value_type: GGUFValueType, value: object) -> bytes:
    if value_type == GGUFValueType.STRING:
        if not isinstance(value, str | bytes):
            raise TypeError("a STRING value must be str or bytes")
        return string_bytes(value)
    if value_type == GGUFValueType.ARRAY:
        if not isinstance(value, TypedArray):
            raise TypeError("an ARRAY value must be a TypedArray")
        return _array_payload(value)
    return struct.pack(_SCALAR_FORMATS[value_type], value)


def _array_payload(array: TypedArray) -> bytes:
    head = struct.pack("<IQ", array.element_type, len(array.values))
    if array.element_type == GGUFValueType.ARRAY:
        return head + b"".join(_array_payload(_as_typed_array(v)) for v in array.values)
    return head + b"".join(_typed_payload(array.element_type, v) for v in array.values)


def _as_typed_array(value: object) -> TypedArray:
    if isinstance(value, TypedArray):
        return value
    if isinstance(value, list | tuple):
        return _infer_array(value)
    raise TypeError("elements of an array of arrays must be arrays")
