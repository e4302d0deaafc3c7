"""Real model files for tests, derived from the starter model without touching the original."""

from __future__ import annotations

import struct
from pathlib import Path

TEMPLATE_KEY = b"tokenizer.chat_template"
GGUF_STRING = 8


def with_chat_template(source: Path, target: Path, template: str) -> Path:
    """Copy `source` with its chat template replaced.

    The new template is padded with spaces to the old length, so every offset in the file stays valid and the
    result is a real, loadable model whose only difference is the template.
    """
    data = bytearray(source.read_bytes())
    key_at = data.find(struct.pack("<Q", len(TEMPLATE_KEY)) + TEMPLATE_KEY)
    if key_at < 0:
        raise ValueError(f"{source} has no chat template")
    type_at = key_at + 8 + len(TEMPLATE_KEY)
    (value_type,) = struct.unpack_from("<I", data, type_at)
    if value_type != GGUF_STRING:
        raise ValueError("chat template is not a string")
    (length,) = struct.unpack_from("<Q", data, type_at + 4)
    encoded = template.encode("utf-8")
    if len(encoded) > length:
        raise ValueError(f"template of {len(encoded)} bytes does not fit in the original {length}")
    start = type_at + 12
    data[start : start + length] = encoded.ljust(length, b" ")
    target.write_bytes(bytes(data))
    return target


TOKENS_KEY = b"tokenizer.ggml.tokens"
GGUF_ARRAY = 9


def with_duplicate_token(source: Path, target: Path) -> Path:
    """Copy `source` with one vocabulary entry overwritten by an earlier entry of the same length.

    Every length and offset stays valid, so the file passes Hearth's header check; llama.cpp then finds two
    tokens with the same text and aborts the whole process (GGML_ASSERT in llama-vocab.cpp): a model that
    crashes only the runner.
    """
    data = bytearray(source.read_bytes())
    key_at = data.find(struct.pack("<Q", len(TOKENS_KEY)) + TOKENS_KEY)
    if key_at < 0:
        raise ValueError(f"{source} has no vocabulary")
    at = key_at + 8 + len(TOKENS_KEY)
    value_type, element_type, count = struct.unpack_from("<IIQ", data, at)
    if (value_type, element_type) != (GGUF_ARRAY, GGUF_STRING):
        raise ValueError("the vocabulary is not an array of strings")
    at += 16
    seen: dict[int, bytes] = {}
    for _ in range(count):
        (length,) = struct.unpack_from("<Q", data, at)
        text = bytes(data[at + 8 : at + 8 + length])
        first = seen.setdefault(length, text)
        if length > 1 and first != text:
            data[at + 8 : at + 8 + length] = first
            target.write_bytes(bytes(data))
            return target
        at += 8 + length
    raise ValueError("no two vocabulary entries have the same length")
