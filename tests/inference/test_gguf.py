"""The GGUF header check: real files parse, and every crafted hostile header is refused fast and cheaply."""

from __future__ import annotations

import contextlib
import struct
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from inference.gguf import (
    GGML_TYPES,
    HYPERPARAMETER_LIMITS,
    MAX_ARRAY_LENGTH,
    MAX_BLOCK_COUNT,
    MAX_KEPT_ARRAY_LENGTH,
    MAX_KEPT_STRING_BYTES,
    MAX_KV_COUNT,
    MAX_TENSOR_COUNT,
    ArraySummary,
    ByteSource,
    FileByteSource,
    GGUFError,
    GGUFHeader,
    StringSummary,
    parse_header,
    read_header,
)
from tests.helpers.gguf_factory import (
    BytesSource,
    GGUFValueType,
    TensorSpec,
    Typed,
    TypedArray,
    gguf_bytes,
    header_bytes,
    kv_bytes,
    raw_kv,
    string_bytes,
    tensor_info_bytes,
    write_gguf,
)

F32, Q4_0, Q8_0 = 0, 2, 8

LLAMA_METADATA: dict[str, object] = {
    "general.architecture": "llama",
    "general.name": "Tiny Test",
    "general.file_type": 15,
    "llama.context_length": 4096,
    "llama.block_count": 2,
    "llama.embedding_length": 64,
    "llama.attention.head_count": 8,
    "llama.attention.head_count_kv": [2, 4],
    "llama.attention.sliding_window": 512,
    "tokenizer.ggml.bos_token_id": 1,
    "tokenizer.ggml.eos_token_id": 2,
    "tokenizer.chat_template": "{{ messages }}",
}
SMALL_TENSORS = [
    TensorSpec("token_embd.weight", (64, 2), Q4_0, data=bytes(range(72))),
    TensorSpec("blk.0.attn_norm.weight", (4,), F32, data=struct.pack("<4f", 1, 2, 3, 4)),
    TensorSpec("output.weight", (32, 3), Q8_0),
]


def _small_valid_file() -> bytes:
    return gguf_bytes({"general.architecture": "llama", "llama.block_count": 1}, SMALL_TENSORS[:2])


def _rejects(data: bytes, match: str) -> GGUFError:
    started = time.perf_counter()
    with pytest.raises(GGUFError, match=match) as info:
        parse_header(BytesSource(data))
    assert time.perf_counter() - started < 1.0
    return info.value


# --- well-formed files ---------------------------------------------------------------------------------


def test_round_trip_of_every_value_type(tmp_path: Path) -> None:
    metadata: dict[str, object] = {
        "u8": Typed(GGUFValueType.UINT8, 255),
        "i8": Typed(GGUFValueType.INT8, -128),
        "u16": Typed(GGUFValueType.UINT16, 65535),
        "i16": Typed(GGUFValueType.INT16, -32768),
        "u32": Typed(GGUFValueType.UINT32, 2**32 - 1),
        "i32": Typed(GGUFValueType.INT32, -(2**31)),
        "u64": Typed(GGUFValueType.UINT64, 2**64 - 1),
        "i64": Typed(GGUFValueType.INT64, -(2**63)),
        "f32": 0.5,
        "f64": Typed(GGUFValueType.FLOAT64, 1e300),
        "bool": True,
        "string": "héllo ✓",
        "empty": "",
        "ints": [1, 2, 3],
        "strings": ["a", "bb", ""],
        "bools": [True, False],
        "floats": TypedArray(GGUFValueType.FLOAT64, [1.5, -2.25]),
        "nested": [[1, 2], [3]],
        "nested_strings": [["x"], [], ["y", "z"]],
        "empty_array": [],
    }
    path = write_gguf(tmp_path / "model.gguf", metadata, SMALL_TENSORS, alignment=64)
    header = read_header(path)

    assert header.version == 3
    assert header.alignment == 64
    expected = {
        "u8": 255,
        "i8": -128,
        "u16": 65535,
        "i16": -32768,
        "u32": 2**32 - 1,
        "i32": -(2**31),
        "u64": 2**64 - 1,
        "i64": -(2**63),
        "f32": 0.5,
        "f64": 1e300,
        "bool": True,
        "string": "héllo ✓",
        "empty": "",
        "ints": [1, 2, 3],
        "strings": ["a", "bb", ""],
        "bools": [True, False],
        "floats": [1.5, -2.25],
        "nested": [[1, 2], [3]],
        "nested_strings": [["x"], [], ["y", "z"]],
        "empty_array": [],
        "general.alignment": 64,
    }
    assert dict(header.metadata) == expected
    assert [(t.name, t.shape, t.ggml_type, t.n_bytes) for t in header.tensors] == [
        ("token_embd.weight", (64, 2), Q4_0, 72),  # 4 blocks of 32 x 18 bytes
        ("blk.0.attn_norm.weight", (4,), F32, 16),
        ("output.weight", (32, 3), Q8_0, 102),  # 3 blocks of 32 x 34 bytes
    ]
    assert [t.offset for t in header.tensors] == [0, 128, 192]
    assert header.data_offset % 64 == 0
    assert header.file_size == path.stat().st_size == header.data_offset + 192 + 102
    assert header.tensor_bytes_total == 72 + 16 + 102
    with path.open("rb") as f:
        f.seek(header.data_offset + header.tensors[1].offset)
        assert struct.unpack("<4f", f.read(16)) == (1, 2, 3, 4)


def test_version_2_and_default_alignment() -> None:
    header = parse_header(BytesSource(gguf_bytes({"a": 1}, SMALL_TENSORS[:1], version=2)))
    assert header.version == 2
    assert header.alignment == 32
    assert header.data_offset % 32 == 0


def test_model_properties() -> None:
    header = parse_header(BytesSource(gguf_bytes(LLAMA_METADATA, SMALL_TENSORS)))
    assert header.architecture == "llama"
    assert header.model_name == "Tiny Test"
    assert header.chat_template == "{{ messages }}"
    assert header.context_length == 4096
    assert header.block_count == 2
    assert header.embedding_length == 64
    assert header.head_count == 8
    assert header.head_count_kv == [2, 4]
    assert header.key_length == header.value_length == 8  # embedding_length // head_count
    assert header.sliding_window == 512
    assert header.file_type == 15
    assert header.quantization == "Q4_K_M"
    assert (header.bos_token_id, header.eos_token_id) == (1, 2)


def test_explicit_head_dims_and_missing_keys() -> None:
    metadata = {
        "general.architecture": "gemma3",
        "gemma3.attention.head_count": 4,
        "gemma3.attention.head_count_kv": 1,
        "gemma3.attention.key_length": 256,
        "gemma3.attention.value_length": 128,
        "general.file_type": 7,
    }
    header = parse_header(BytesSource(gguf_bytes(metadata)))
    assert (header.key_length, header.value_length, header.head_count_kv) == (256, 128, 1)
    assert header.quantization == "Q8_0"
    assert header.chat_template is None
    assert header.context_length is None
    assert header.model_name is None
    assert header.tensors == ()
    assert header.tensor_bytes_total == 0


@pytest.mark.parametrize(
    ("file_type", "label"), [(0, "F32"), (1, "F16"), (3, "Q4_1"), (18, "Q6_K"), (32, "BF16")]
)
def test_quantization_labels(file_type: int, label: str) -> None:
    header = parse_header(BytesSource(gguf_bytes({"general.file_type": file_type})))
    assert header.quantization == label


def test_unknown_file_type_is_labelled_not_rejected() -> None:
    header = parse_header(BytesSource(gguf_bytes({"general.file_type": 999})))
    assert header.quantization == "unknown (file type 999)"


def test_large_arrays_and_strings_are_validated_but_summarized() -> None:
    tokens = [f"tok{i}" for i in range(5000)]
    template = "{# long #}" + "x" * 500_000
    metadata: dict[str, object] = {
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": TypedArray(GGUFValueType.INT32, [1] * 2000),
        "kept": list(range(MAX_KEPT_ARRAY_LENGTH)),
        "huge_string": "y" * (MAX_KEPT_STRING_BYTES + 1),
        "tokenizer.chat_template": template,
        "tokenizer.ggml.merges": TypedArray(GGUFValueType.STRING, ["a b"] * 3000),
        "nested_big": [[1]] * 2000,
    }
    header = parse_header(BytesSource(gguf_bytes(metadata)))
    assert header.metadata["tokenizer.ggml.tokens"] == ArraySummary(GGUFValueType.STRING, 5000)
    assert header.metadata["tokenizer.ggml.token_type"] == ArraySummary(GGUFValueType.INT32, 2000)
    assert header.metadata["tokenizer.ggml.merges"] == ArraySummary(GGUFValueType.STRING, 3000)
    assert header.metadata["nested_big"] == ArraySummary(GGUFValueType.ARRAY, 2000)
    assert header.metadata["kept"] == list(range(MAX_KEPT_ARRAY_LENGTH))
    assert header.metadata["huge_string"] == StringSummary(MAX_KEPT_STRING_BYTES + 1)
    assert header.chat_template == template


def test_ggml_type_table_matches_ggml() -> None:
    # (block size, bytes per block) from ggml.c's type_traits.
    expected = {
        "F32": (1, 4),
        "F16": (1, 2),
        "Q4_0": (32, 18),
        "Q4_1": (32, 20),
        "Q5_0": (32, 22),
        "Q5_1": (32, 24),
        "Q8_0": (32, 34),
        "Q2_K": (256, 84),
        "Q3_K": (256, 110),
        "Q4_K": (256, 144),
        "Q5_K": (256, 176),
        "Q6_K": (256, 210),
        "Q8_K": (256, 292),
        "IQ2_XXS": (256, 66),
        "IQ4_XS": (256, 136),
        "IQ1_M": (256, 56),
        "BF16": (1, 2),
        "TQ1_0": (256, 54),
        "TQ2_0": (256, 66),
        "MXFP4": (32, 17),
    }
    by_name = {t.name: (t.block_size, t.type_size) for t in GGML_TYPES.values()}
    assert {name: by_name[name] for name in expected} == expected
    assert [k for k, t in GGML_TYPES.items() if t.name in ("Q4_K", "BF16", "MXFP4")] == [12, 30, 39]


def test_starter_model_header(starter_model: Path) -> None:
    started = time.perf_counter()
    header = read_header(starter_model)
    assert time.perf_counter() - started < 1.0
    assert header.architecture == "llama"
    assert header.block_count == 30
    assert header.context_length == 8192
    assert header.chat_template is not None and "im_start" in header.chat_template
    assert header.quantization == "Q4_1"
    assert header.head_count_kv == 3
    assert isinstance(header.metadata["tokenizer.ggml.tokens"], ArraySummary)
    assert header.data_offset + header.tensor_bytes_total <= header.file_size


def test_missing_file_is_an_os_error_not_a_format_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_header(tmp_path / "absent.gguf")


# --- bounded reading -----------------------------------------------------------------------------------


class RecordingSource:
    def __init__(self, inner: ByteSource) -> None:
        self.inner = inner
        self.reads: list[int] = []

    @property
    def size(self) -> int:
        return self.inner.size

    def read(self, offset: int, n: int) -> bytes:
        self.reads.append(n)
        return self.inner.read(offset, n)


def test_reads_only_the_header_in_bounded_blocks(tmp_path: Path) -> None:
    metadata = {"tokenizer.ggml.tokens": [f"token-{i:06d}" for i in range(300_000)]}
    big_tensor = TensorSpec("big.weight", (1 << 18, 1 << 10), F32)  # 1 GiB, written as a hole
    path = write_gguf(tmp_path / "big.gguf", metadata, [big_tensor])
    with FileByteSource(path) as file_source:
        source = RecordingSource(file_source)
        header = parse_header(source)
    assert header.file_size > 1 << 30
    assert max(source.reads) <= 1 << 20
    assert sum(source.reads) < header.data_offset + (1 << 20)


def test_source_that_delivers_less_than_its_size_is_truncated() -> None:
    data = _small_valid_file()

    class Lying(BytesSource):
        @property
        def size(self) -> int:
            return len(data) + 1000

    with pytest.raises(GGUFError, match="truncated"):
        parse_header(Lying(data[:40]))


def test_header_larger_than_the_limit_is_refused() -> None:
    data = gguf_bytes({"big": "z" * 4096}, SMALL_TENSORS[:1])
    with pytest.raises(GGUFError, match="a GGUF header may be at most 1 KiB"):
        parse_header(BytesSource(data), max_header_bytes=1024)


def test_truncation_at_every_position_is_a_gguf_error() -> None:
    data = gguf_bytes(
        {"general.architecture": "llama", "strings": ["ab", "c"], "nested": [[1], [2, 3]], "f": 1.5},
        SMALL_TENSORS[:2],
        alignment=16,
    )
    parse_header(BytesSource(data))
    for length in range(len(data)):
        with pytest.raises(GGUFError):
            parse_header(BytesSource(data[:length]))


# --- hostile headers -----------------------------------------------------------------------------------


def test_empty_file() -> None:
    _rejects(b"", "empty")


def test_bad_magic() -> None:
    _rejects(b"GGML" + _small_valid_file()[4:], r"not a GGUF file \(bad magic\)")
    _rejects(b"GG", r"bad magic")


@pytest.mark.parametrize(
    ("version", "match"), [(1, "version 1"), (4, "version 4"), (0x03000000, "big-endian")]
)
def test_unsupported_versions(version: int, match: str) -> None:
    _rejects(header_bytes(0, 0, version=version) + b"\0" * 64, match)


def test_tensor_count_of_2_to_the_63() -> None:
    error = _rejects(header_bytes(2**63, 0) + b"\0" * 16, "claims 2\\^63 tensors")
    assert "the file is only 40 bytes" in str(error)


def test_kv_count_of_2_to_the_40() -> None:
    data = header_bytes(0, 2**40) + b"\0" * 19
    error = _rejects(data, "claims 2\\^40 metadata entries")
    assert str(error) == "GGUF header claims 2^40 metadata entries but the file is only 43 bytes"


def test_counts_that_fit_alone_but_not_together() -> None:
    room = 14 * 5
    _rejects(header_bytes(2, 4) + b"\0" * room, "metadata entries and 2 tensors")


def test_counts_above_the_sanity_caps_even_if_the_bytes_exist() -> None:
    _rejects(
        header_bytes(0, MAX_KV_COUNT + 1) + b"\0" * (14 * (MAX_KV_COUNT + 1)), "at most 65536 are accepted"
    )
    room = 33 * (MAX_TENSOR_COUNT + 1)
    _rejects(header_bytes(MAX_TENSOR_COUNT + 1, 0) + b"\0" * room, f"at most {MAX_TENSOR_COUNT} are accepted")


def test_keys_adding_up_to_more_than_16_mib() -> None:
    entries = b"".join(kv_bytes(f"{i:05d}" + "k" * 60_000, 1) for i in range(300))
    _rejects(header_bytes(0, 300) + entries, "keys add up to more than 16 MiB")


def test_key_length_past_end_of_file() -> None:
    _rejects(header_bytes(0, 1) + string_bytes("abc", length=2**32) + b"\0" * 16, "has length 2\\^32")


def test_value_string_length_past_end_of_file() -> None:
    payload = struct.pack("<Q", 1000) + b"short"
    _rejects(header_bytes(0, 1) + raw_kv("k", GGUFValueType.STRING, payload), "key 'k'.*length 1000")


def test_array_length_2_to_the_62_in_a_tiny_file() -> None:
    """The shape of file that makes gguf's GGUFReader hang and eat memory."""
    payload = struct.pack("<IQ", GGUFValueType.UINT8, 2**62)
    data = header_bytes(0, 1) + raw_kv("a", GGUFValueType.ARRAY, payload)
    assert len(data) < 64
    tracemalloc.start()
    try:
        _rejects(data, "array claims 2\\^62 elements")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 10 * 1024 * 1024


def test_array_of_strings_longer_than_the_file() -> None:
    payload = struct.pack("<IQ", GGUFValueType.STRING, 2**40) + b"\0" * 64
    _rejects(header_bytes(0, 1) + raw_kv("t", GGUFValueType.ARRAY, payload), "2\\^40 elements")


def test_deeply_nested_array_bomb() -> None:
    depth = 200
    payload = struct.pack("<IQ", GGUFValueType.ARRAY, 1) * depth + struct.pack("<IQ", GGUFValueType.UINT8, 0)
    _rejects(header_bytes(0, 1) + raw_kv("n", GGUFValueType.ARRAY, payload), "nested more than")


def test_wide_nested_array_bomb() -> None:
    payload = struct.pack("<IQ", GGUFValueType.ARRAY, 2**50) + struct.pack("<IQ", GGUFValueType.UINT8, 0) * 8
    _rejects(header_bytes(0, 1) + raw_kv("n", GGUFValueType.ARRAY, payload), "2\\^50 elements")


def test_unknown_value_type() -> None:
    _rejects(header_bytes(0, 1) + raw_kv("k", 13, b"\0" * 8), "key 'k': unknown value type 13")


def test_unknown_array_element_type() -> None:
    payload = struct.pack("<IQ", 99, 1) + b"\0" * 8
    _rejects(header_bytes(0, 1) + raw_kv("k", GGUFValueType.ARRAY, payload), "unknown element type 99")


def test_key_that_is_not_utf8() -> None:
    _rejects(header_bytes(0, 1) + kv_bytes(b"\xff\xfe", 1), "not valid UTF-8")


def test_empty_key() -> None:
    _rejects(header_bytes(0, 1) + kv_bytes(b"", 1), "empty")


def test_duplicate_key() -> None:
    _rejects(header_bytes(0, 2) + kv_bytes("same", 1) + kv_bytes("same", 2), "'same' appears twice")


def _with_tensor(shape: tuple[int, ...], ggml_type: int = F32, *, n_bytes: int = 4, offset: int = 0) -> bytes:
    # data_size keeps the in-memory file small whatever the offset claims.
    return gguf_bytes({}, [TensorSpec("t", shape, ggml_type, offset=offset, n_bytes=n_bytes)], data_size=64)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        pytest.param(lambda: _with_tensor(()), "has 0 dimensions", id="n_dims-0"),
        pytest.param(lambda: _with_tensor((1, 1, 1, 1, 1)), "has 5 dimensions", id="n_dims-5"),
        pytest.param(lambda: _with_tensor((4, 0)), "dimension of size 0", id="zero-dim"),
        pytest.param(
            lambda: _with_tensor((2**40, 2**40)), "more than 2\\^63 elements", id="dim-product-overflow"
        ),
        pytest.param(lambda: _with_tensor((2**64 - 1,)), "more than 2\\^63 elements", id="dim-2^64"),
        pytest.param(lambda: _with_tensor((32,), 4), "unknown ggml type 4", id="removed-ggml-type"),
        pytest.param(lambda: _with_tensor((32,), 1000), "unknown ggml type 1000", id="unknown-ggml-type"),
        pytest.param(
            lambda: _with_tensor((33,), Q4_0, n_bytes=18), "not a multiple of the block size", id="row"
        ),
        pytest.param(lambda: _with_tensor((4,), offset=2**40), "ends at byte", id="offset-past-eof"),
        pytest.param(lambda: _with_tensor((4,), offset=2**64 - 32), "ends at byte", id="offset-2^64"),
        pytest.param(
            lambda: _with_tensor((4,), offset=8), "not a multiple of the alignment 32", id="misaligned"
        ),
        pytest.param(lambda: _with_tensor((1 << 20,), n_bytes=4), "ends at byte", id="data-past-eof"),
    ],
)
def test_bad_tensor_infos(make: Callable[[], bytes], match: str) -> None:
    _rejects(make(), match)


def test_tensor_data_cut_short() -> None:
    _rejects(gguf_bytes({}, [TensorSpec("t", (256,), F32)], data_size=1000), "ends at byte")


def test_tensor_name_too_long() -> None:
    _rejects(gguf_bytes({}, [TensorSpec("n" * 64, (4,), F32)]), "more than the 63 bytes limit")


def test_tensor_name_not_utf8() -> None:
    data = header_bytes(1, 0) + tensor_info_bytes(b"\xc3", (4,), F32, 0) + b"\0" * 64
    _rejects(data, "not valid UTF-8")


def test_duplicate_tensor_names() -> None:
    _rejects(gguf_bytes({}, [TensorSpec("t", (4,), F32), TensorSpec("t", (4,), F32)]), "'t' appears twice")


def test_overlapping_tensors() -> None:
    tensors = [TensorSpec("a", (64,), F32, offset=0), TensorSpec("b", (8,), F32, offset=128)]
    _rejects(gguf_bytes({}, tensors), "'a' and 'b' overlap")


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (Typed(GGUFValueType.UINT32, 48), "48 is not a power of two"),
        (Typed(GGUFValueType.UINT32, 0), "0 is not a power of two"),
        (Typed(GGUFValueType.UINT32, 2**30), "larger than the 1 MiB limit"),
        (Typed(GGUFValueType.UINT64, 32), "must be a uint32"),
        ("32", "must be a uint32"),
    ],
)
def test_bad_alignment(value: object, match: str) -> None:
    _rejects(gguf_bytes({"general.alignment": value}, SMALL_TENSORS[:1]), match)


def test_header_is_returned_intact_for_a_zero_tensor_file() -> None:
    header = parse_header(BytesSource(gguf_bytes({"only": "metadata"})))
    assert isinstance(header, GGUFHeader)
    assert header.metadata == {"only": "metadata"}


@pytest.mark.parametrize("replacement", [0x00, 0x7F, 0x80, 0xFF])
def test_any_single_corrupted_byte_is_accepted_or_a_gguf_error(replacement: int) -> None:
    data = gguf_bytes({**LLAMA_METADATA, "nested": [[1, 2], [3]]}, SMALL_TENSORS, alignment=16)
    for position in range(len(data)):
        corrupted = bytearray(data)
        corrupted[position] = replacement
        with contextlib.suppress(GGUFError):
            parse_header(BytesSource(bytes(corrupted)))


# --- hyperparameters that size the estimator's lists and loops ------------------------------------------


def _llama_with(key: str, value: object) -> bytes:
    """A small, otherwise valid Llama header (well under 8 KB) with one hyperparameter replaced."""
    return gguf_bytes({**LLAMA_METADATA, f"llama.{key}": value}, SMALL_TENSORS)


def _rejects_cheaply(data: bytes, match: str) -> None:
    tracemalloc.start()
    try:
        _rejects(data, match)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 1024 * 1024


@pytest.mark.parametrize("key", list(HYPERPARAMETER_LIMITS))
@pytest.mark.parametrize(
    "value",
    [
        pytest.param(Typed(GGUFValueType.UINT32, 2**32 - 1), id="uint32-max"),
        pytest.param(Typed(GGUFValueType.UINT64, 2**64 - 1), id="uint64-max"),
        pytest.param(Typed(GGUFValueType.INT32, -1), id="negative"),
    ],
)
def test_hyperparameters_no_model_has_are_refused_fast_and_cheaply(key: str, value: Typed) -> None:
    assert len(_llama_with(key, value)) < 8192
    shown = value.value if isinstance(value.value, int) and value.value < 0 else "[0-9^]+"
    _rejects_cheaply(_llama_with(key, value), f"'llama.{key}' is {shown}; Hearth accepts 0 to ")


def test_block_count_of_20_million_is_refused_before_any_list_is_sized() -> None:
    """The security review's case: 20 M layers in an 8 KB header cost the library 1.24 GB and 8.4 s."""
    _rejects_cheaply(_llama_with("block_count", 20_000_000), "'llama.block_count' is 20000000")


def test_a_hostile_entry_in_a_per_layer_array_is_refused() -> None:
    _rejects_cheaply(
        _llama_with("attention.head_count_kv", [8, 2**32 - 1]),
        "'llama.attention.head_count_kv' is 4294967295",
    )


def test_a_per_layer_array_longer_than_any_model_is_refused() -> None:
    layers = TypedArray(GGUFValueType.UINT8, [8] * (MAX_BLOCK_COUNT + 1))
    _rejects_cheaply(_llama_with("attention.head_count_kv", layers), "lists 1025 layers; at most 1024")


def test_hyperparameters_at_the_limits_are_accepted() -> None:
    metadata = {**LLAMA_METADATA, **{f"llama.{key}": limit for key, limit in HYPERPARAMETER_LIMITS.items()}}
    metadata["llama.attention.head_count_kv"] = [HYPERPARAMETER_LIMITS["attention.head_count_kv"]] * 1024
    header = parse_header(BytesSource(gguf_bytes(metadata, SMALL_TENSORS)))
    assert header.block_count == MAX_BLOCK_COUNT
    assert header.head_count_kv == [1 << 14] * 1024


def test_hyperparameters_of_another_architecture_or_type_are_left_alone() -> None:
    # Only the file's own architecture's keys are read as its hyperparameters; floats and strings are
    # ignored by the readers, so they size nothing.
    metadata = {**LLAMA_METADATA, "qwen2.block_count": 2**32 - 1, "llama.context_length": 1e30}
    header = parse_header(BytesSource(gguf_bytes(metadata, SMALL_TENSORS)))
    assert header.context_length is None


def test_array_longer_than_any_vocabulary_is_refused_even_if_the_bytes_exist(tmp_path: Path) -> None:
    # A sparse file: the array's bytes exist (as a hole), so only the length bound can refuse it.
    length = MAX_ARRAY_LENGTH + 1
    head = header_bytes(0, 1) + raw_kv("tokenizer.ggml.token_type", GGUFValueType.ARRAY, b"")
    head += struct.pack("<IQ", GGUFValueType.UINT8, length)
    path = tmp_path / "long-array.gguf"
    with path.open("wb") as f:
        f.write(head)
        f.truncate(len(head) + length)
    started = time.perf_counter()
    with pytest.raises(GGUFError, match="array claims 16777217 elements; at most 16,777,216 are accepted"):
        read_header(path)
    assert time.perf_counter() - started < 1.0
