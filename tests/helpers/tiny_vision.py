"""A tiny, loadable LLaVA-style multimodal projector (`mmproj*.gguf`) with random weights.

It exists for plumbing tests of the local vision path: llama.cpp's mtmd (as vendored by llama-cpp-python)
accepts it next to the starter text model (SmolLM2-135M, 576 wide) and encodes a small image through it in
milliseconds on a CPU, so tests can drive image prompts end to end without downloading a real projector.
The weights are seeded random numbers, small enough to keep every activation finite; what the text model
"sees" is noise, so tests may check that an image was accepted and evaluated, never what was said about it.

The layout follows clip.cpp's `mlp` projector (`clip.projector_type = "mlp"`, graph `clip_graph_llava`):
a ViT (patch embedding, class embedding, positions, pre-norm, `_BLOCKS` pre-norm blocks) and a two-layer
MLP `mm.0` / GELU / `mm.2` whose output width, `projection_dim`, mtmd compares with the text model's
embedding length. The LLaVA graph stops one block short of the last (the "second to last layer" feature),
so two blocks are written and one runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt

from tests.helpers.gguf_factory import GGUFValueType, TensorSpec, Typed, TypedArray, write_gguf

__all__ = ["TINY_IMAGE_SIZE", "TINY_IMAGE_TOKENS", "TINY_PATCH_SIZE", "write_tiny_projector"]

TINY_IMAGE_SIZE = 56  # every image is resized (letterboxed) to this square before encoding
TINY_PATCH_SIZE = 14
TINY_IMAGE_TOKENS = (TINY_IMAGE_SIZE // TINY_PATCH_SIZE) ** 2  # embeddings one image becomes: 16

_EMBD = 32  # vision width
_HEADS = 2
_FFN = 64  # != _EMBD, so clip.cpp's legacy up/down swap heuristic cannot misfire
_BLOCKS = 2
_MM_HIDDEN = 64  # mm.0's output width; real LLaVA uses the text width, a small one keeps the file small
_EPS = 1e-6
_SCALE = 0.02

_F32 = 0
_F16 = 1


def write_tiny_projector(path: Path, *, projection_dim: int = 576, seed: int = 0) -> Path:
    """Write the projector to `path` and return it; the same `seed` always gives the same bytes.

    `projection_dim` is the width of the embeddings it produces: 576 pairs it with SmolLM2-135M, any other
    width makes mtmd refuse the pair (its n_embd check).
    """
    rng = np.random.default_rng(seed)
    n_pos = TINY_IMAGE_TOKENS + 1  # patches and the class embedding

    def weight(name: str, shape: tuple[int, ...], ggml_type: int = _F16) -> TensorSpec:
        return _tensor(name, shape, rng.normal(0.0, _SCALE, _numpy_shape(shape)), ggml_type)

    def ones(name: str, width: int) -> TensorSpec:
        return _tensor(name, (width,), np.ones(width), _F32)

    def zeros(name: str, width: int) -> TensorSpec:
        return _tensor(name, (width,), np.zeros(width), _F32)

    tensors: list[TensorSpec] = [
        # ggml conv2d kernel: [kernel w, kernel h, in channels, out channels]
        weight("v.patch_embd.weight", (TINY_PATCH_SIZE, TINY_PATCH_SIZE, 3, _EMBD)),
        zeros("v.patch_embd.bias", _EMBD),
        weight("v.class_embd", (_EMBD,), _F32),
        weight("v.position_embd.weight", (_EMBD, n_pos), _F32),
        ones("v.pre_ln.weight", _EMBD),
        zeros("v.pre_ln.bias", _EMBD),
    ]
    for i in range(_BLOCKS):
        block = f"v.blk.{i}"
        for part in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensors += [
                weight(f"{block}.{part}.weight", (_EMBD, _EMBD)),
                zeros(f"{block}.{part}.bias", _EMBD),
            ]
        tensors += [
            ones(f"{block}.ln1.weight", _EMBD),
            zeros(f"{block}.ln1.bias", _EMBD),
            # a linear layer's weight is [in, out] in GGUF order
            weight(f"{block}.ffn_up.weight", (_EMBD, _FFN)),
            zeros(f"{block}.ffn_up.bias", _FFN),
            weight(f"{block}.ffn_down.weight", (_FFN, _EMBD)),
            zeros(f"{block}.ffn_down.bias", _EMBD),
            ones(f"{block}.ln2.weight", _EMBD),
            zeros(f"{block}.ln2.bias", _EMBD),
        ]
    tensors += [
        weight("mm.0.weight", (_EMBD, _MM_HIDDEN)),
        zeros("mm.0.bias", _MM_HIDDEN),
        weight("mm.2.weight", (_MM_HIDDEN, projection_dim)),
        zeros("mm.2.bias", projection_dim),
    ]
    return write_gguf(path, _metadata(projection_dim), tensors)


def _metadata(projection_dim: int) -> dict[str, object]:
    def u32(value: int) -> Typed:
        return Typed(GGUFValueType.UINT32, value)

    def f32s(*values: float) -> TypedArray:
        return TypedArray(GGUFValueType.FLOAT32, values)

    return {
        "general.architecture": "clip",
        "general.name": "hearth-tiny-vision",
        "general.description": "random weights, for plumbing tests only",
        "general.file_type": u32(1),  # mostly F16
        "clip.projector_type": "mlp",
        "clip.has_vision_encoder": True,
        "clip.has_audio_encoder": False,
        "clip.use_gelu": False,  # gelu_quick, as in CLIP
        "clip.vision.image_size": u32(TINY_IMAGE_SIZE),
        "clip.vision.patch_size": u32(TINY_PATCH_SIZE),
        "clip.vision.embedding_length": u32(_EMBD),
        "clip.vision.feed_forward_length": u32(_FFN),
        "clip.vision.block_count": u32(_BLOCKS),
        "clip.vision.projection_dim": u32(projection_dim),
        "clip.vision.attention.head_count": u32(_HEADS),
        "clip.vision.attention.layer_norm_epsilon": Typed(GGUFValueType.FLOAT32, _EPS),
        "clip.vision.image_mean": f32s(0.48145466, 0.4578275, 0.40821073),
        "clip.vision.image_std": f32s(0.26862954, 0.26130258, 0.27577711),
    }


def _numpy_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(reversed(shape))  # GGUF lists ne0 (the fastest-moving axis) first, numpy last


def _tensor(name: str, shape: tuple[int, ...], values: npt.NDArray[np.float64], ggml_type: int) -> TensorSpec:
    dtype = np.float16 if ggml_type == _F16 else np.float32
    data = np.ascontiguousarray(values.reshape(_numpy_shape(shape)), dtype=dtype).tobytes()
    return TensorSpec(name, shape, ggml_type, data=data)
