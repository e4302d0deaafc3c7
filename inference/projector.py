"""Multimodal projectors (`mmproj*.gguf`): what llama.cpp's mtmd reads from their headers, checked up front.

A vision model is two files: the language model and a projector (`general.architecture = "clip"`) that turns
an image into embeddings of the language model's width. mtmd refuses a pair whose widths differ only once
both are loaded, inside the runner; the same check is made here from the headers, so a wrong pair is refused
when it is imported or downloaded, with a sentence instead of a runner error. The image-token counts follow
`clip_n_output_tokens` in llama.cpp's `tools/mtmd/clip.cpp` (vendored 0.3.36) for the families users run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from inference.gguf import GGUFHeader

PROJECTOR_ARCHITECTURE: Final = "clip"
# Hearth's default limit on an image's long side (the image_max_side setting; app.images.prepare resizes to
# it): the fit counts a dynamic-resolution projector's tokens for a picture this large.
DEFAULT_MAX_IMAGE_SIDE: Final = 2048

# Projector types whose output is a fixed square grid: (image_size / patch_size)² patches, pooled by
# n_merge² (the `clip.vision.projector.scale_factor` key, else llama.cpp's default for the type).
_POOLED: Final[Mapping[str, int]] = {
    "gemma3": 4,
    "idefics3": 1,
    "internvl": 1,
    "llama4": 1,
    "nemotron_v2_vl": 1,
}
# Types whose token count follows the image size (Qwen2-VL's family): one token per (patch · merge)² pixels,
# between llama.cpp's minimum and maximum for the type.
_DYNAMIC: Final[Mapping[str, tuple[int, int, int]]] = {
    # type: (default merge, min tokens, max tokens)
    "qwen2vl_merger": (2, 8, 4096),
    "qwen2.5vl_merger": (2, 8, 4096),
    "qwen3vl_merger": (2, 8, 4096),
    "pixtral": (1, 8, 1024),
    "lfm2": (2, 64, 256),
    "kimivl": (2, 8, 1024),
}
# Unpooled square grids (LLaVA's MLP projectors): every patch is a token.
_UNPOOLED: Final = frozenset({"mlp", "phi4", "janus_pro"})
# What mtmd's preprocessor (`init_vision` in tools/mtmd/mtmd.cpp) does to a picture, for the types where it
# is one resize: a fixed square of image_size (LLaVA's family tiles instead when the header lists
# `clip.vision.image_grid_pinpoints`), or a pixel budget (Qwen-VL's smart resize).
_SQUARE_RESIZE: Final = frozenset({"gemma3", "gemma3nv", "yasa2", "nemotron_v2_vl"})
_SQUARE_UNLESS_TILED: Final = frozenset({"mlp", "mlp_norm", "ldp", "ldpv2", "cogvlm", "janus_pro", "adapter"})
_PIXEL_BUDGET: Final = frozenset({"qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "pixtral"})


@dataclass(frozen=True)
class ProjectorResize:
    """How the projector's preprocessor resizes every picture, when it is known: to a `square` of that side
    (stretched or padded), or down to at most `max_pixels`. Detail past that is thrown away inside mtmd, so
    a picture can be given to it no larger, decoded and carried to the runner at a fraction of the cost."""

    square: int | None = None
    max_pixels: int | None = None

    def long_side(self, width: int, height: int) -> int:
        """The long side a `width` × `height` picture can be shrunk to and lose nothing the model would see:
        for a square, until its short side is the square's (both sides then keep the detail mtmd uses)."""
        long = max(width, height)
        if self.square is not None and min(width, height) > self.square:
            return math.ceil(long * self.square / min(width, height))
        if self.max_pixels is not None and width * height > self.max_pixels:
            return max(1, math.floor(long * math.sqrt(self.max_pixels / (width * height))))
        return long


@dataclass(frozen=True)
class ProjectorInfo:
    projector_type: str | None  # `clip.projector_type` (`clip.vision.projector_type` for mixed files)
    has_vision: bool
    has_audio: bool
    projection_dim: int | None  # the language model width it produces embeddings for
    image_size: int | None
    patch_size: int | None
    weights_bytes: int
    image_tokens: int | None  # a full-size image's tokens in the context; None when the type is unknown
    resize: ProjectorResize | None = None  # None: mtmd tiles or its resize is not known here


# Of several projectors for one model, F16 first, as llama.cpp's converter writes them and the peers download
# them: BF16 is slow on CPUs without bf16 instructions, F32 twice the size, a quantized one less accurate.
_PREFERRED_TYPES: Final = ("F16", "BF16", "Q8_0", "F32")
_TYPE_IN_NAME: Final = re.compile(r"(?<![A-Z0-9])(BF16|F16|Q8_0|F32)(?![A-Z0-9])")


def is_projector_filename(filename: str) -> bool:
    """How repos and folders name multimodal projectors: `mmproj-model-f16.gguf`, `mmproj-F16.gguf`,
    `llava-v1.6-mmproj-f16.gguf`."""
    base = filename.replace("\\", "/").rsplit("/", 1)[-1].lower()
    return base.endswith(".gguf") and "mmproj" in base


def projector_preference(filename: str) -> tuple[int, str]:
    """Sort key: the projector to choose first among several for one model."""
    found = _TYPE_IN_NAME.findall(filename.upper())
    rank = _PREFERRED_TYPES.index(found[-1]) if found else len(_PREFERRED_TYPES)
    return rank, filename


def is_projector(header: GGUFHeader) -> bool:
    return header.architecture == PROJECTOR_ARCHITECTURE


def projector_info(header: GGUFHeader, *, max_image_side: int = DEFAULT_MAX_IMAGE_SIDE) -> ProjectorInfo:
    metadata = header.metadata
    has_vision = metadata.get("clip.has_vision_encoder") is True
    has_audio = metadata.get("clip.has_audio_encoder") is True
    projector_type = _text(metadata.get("clip.vision.projector_type")) or _text(
        metadata.get("clip.projector_type")
    )
    image_size = _positive(metadata.get("clip.vision.image_size"))
    patch_size = _positive(metadata.get("clip.vision.patch_size"))
    projection_dim = _positive(metadata.get("clip.vision.projection_dim")) or _positive(
        metadata.get("clip.audio.projection_dim")
    )
    tokens = (
        _image_tokens(projector_type, image_size, patch_size, metadata, max_image_side)
        if has_vision
        else None
    )
    return ProjectorInfo(
        projector_type=projector_type,
        has_vision=has_vision,
        has_audio=has_audio,
        projection_dim=projection_dim,
        image_size=image_size,
        patch_size=patch_size,
        weights_bytes=header.tensor_bytes_total,
        image_tokens=tokens,
        resize=_resize(projector_type, image_size, patch_size, metadata) if has_vision else None,
    )


def projector_problem(projector: GGUFHeader, model: GGUFHeader) -> str | None:
    """Why `projector` cannot serve `model` (the check mtmd makes after loading both), or None.

    The width is compared when the projector states it (`clip.vision.projection_dim`, written by llama.cpp's
    converter for years); an older file without it is left to mtmd's own check at load.
    """
    if not is_projector(projector):
        architecture = projector.architecture or "no architecture"
        return f"it is not a multimodal projector (its architecture is {architecture}, not clip)"
    info = projector_info(projector)
    if not info.has_vision:
        return "it has no vision encoder (clip.has_vision_encoder is not set)"
    if is_projector(model):
        return "the model it was paired with is itself a projector"
    width = model.embedding_length
    if info.projection_dim is not None and width is not None and info.projection_dim != width:
        return (
            f"it makes embeddings {info.projection_dim} wide, but {model.model_name or 'the model'} "
            f"({model.architecture}) is {width} wide: it belongs to another model"
        )
    return None


def _image_tokens(
    projector_type: str | None,
    image_size: int | None,
    patch_size: int | None,
    metadata: Mapping[str, object],
    max_image_side: int,
) -> int | None:
    if projector_type is None or patch_size is None:
        return None
    scale = _positive(metadata.get("clip.vision.projector.scale_factor"))
    spatial = _positive(metadata.get("clip.vision.spatial_merge_size"))
    if projector_type in _DYNAMIC:
        default_merge, low, high = _DYNAMIC[projector_type]
        merge = spatial or scale or default_merge
        side = patch_size * merge
        # The largest image Hearth sends: a square of the long-side limit, the most pixels it can have.
        grid = math.ceil(max_image_side / side)
        return max(low, min(high, grid * grid))
    if image_size is None:
        return None
    patches = (image_size // patch_size) ** 2
    if projector_type in _POOLED:
        merge = scale or _POOLED[projector_type]
        return patches // (merge * merge)
    if projector_type in _UNPOOLED:
        return patches
    if projector_type in ("ldp", "ldpv2", "adapter"):
        return patches // 4
    return None


def _resize(
    projector_type: str | None, image_size: int | None, patch_size: int | None, metadata: Mapping[str, object]
) -> ProjectorResize | None:
    tiled = "clip.vision.image_grid_pinpoints" in metadata
    if projector_type in _SQUARE_RESIZE or (projector_type in _SQUARE_UNLESS_TILED and not tiled):
        return ProjectorResize(square=image_size) if image_size is not None else None
    if projector_type in _PIXEL_BUDGET and patch_size is not None:
        # llama.cpp's budget for these types is a token count (set_limit_image_tokens), not a header key.
        default_merge, _low, most_tokens = _DYNAMIC[projector_type]
        merge = _positive(metadata.get("clip.vision.spatial_merge_size")) or default_merge
        return ProjectorResize(max_pixels=most_tokens * (patch_size * merge) ** 2)
    return None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _positive(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
