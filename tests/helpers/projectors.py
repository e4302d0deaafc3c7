"""Multimodal projector files (`mmproj*.gguf`) with the header keys llama.cpp's converter writes.

Plumbing only: the weights are random bytes, enough for header checks, pairing, hashing and downloads.
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.helpers.gguf_factory import TensorSpec, gguf_bytes

STARTER_WIDTH = 576  # SmolLM2-135M's embedding length: a projector for the starter model is this wide


def projector_bytes(
    projection_dim: int = STARTER_WIDTH,
    *,
    projector_type: str = "gemma3",
    image_size: int = 896,
    patch_size: int = 14,
    scale_factor: int | None = None,
    weight_rows: int = 512,
    architecture: str = "clip",
    vision: bool = True,
    extra: dict[str, object] | None = None,
) -> bytes:
    metadata: dict[str, object] = {
        "general.architecture": architecture,
        "general.file_type": 1,
        "clip.projector_type": projector_type,
        "clip.has_vision_encoder": vision,
        "clip.vision.image_size": image_size,
        "clip.vision.patch_size": patch_size,
        "clip.vision.embedding_length": 64,
        "clip.vision.projection_dim": projection_dim,
        "clip.vision.block_count": 1,
    }
    if scale_factor is not None:
        metadata["clip.vision.projector.scale_factor"] = scale_factor
    metadata |= extra or {}
    tensors = [
        TensorSpec("v.patch_embd.weight", (patch_size, patch_size, 3, 64), 1),
        # F32 rows of random bytes: a few hundred KiB, so sizes and hashes are real.
        TensorSpec("mm.input_projection.weight", (64, weight_rows), 0, data=os.urandom(64 * weight_rows * 4)),
    ]
    return gguf_bytes(metadata, tensors)


def write_projector(
    path: Path, projection_dim: int = STARTER_WIDTH, *, projector_type: str = "gemma3"
) -> Path:
    path.write_bytes(projector_bytes(projection_dim, projector_type=projector_type))
    return path
