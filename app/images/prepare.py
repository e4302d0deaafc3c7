"""Images for vision models: checked from their header, decoded once, oriented and sized the way models
take them. The file the user attached is kept as it is (app.attachments.files); this is what a model sees.

Pillow (HPND, already in the installers through python-pptx) decodes. Hostile files are refused before
any pixel is decoded: the format and the dimensions come from the header, so a tiny file that claims
100,000 × 100,000 pixels costs nothing. A JPEG is decoded at a reduced scale when the model needs fewer
pixels (Pillow's `draft`, libjpeg's DCT scaling), so a 100-megapixel photo never takes its full size in
memory.
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from PIL import Image, ImageOps, UnidentifiedImageError

from app.errors import HearthError
from inference.projector import DEFAULT_MAX_IMAGE_SIDE, ProjectorResize

# Pillow's format name → the MIME type the file is stored and sent under.
ACCEPTED_FORMATS: Final = {
    "PNG": "image/png",
    "JPEG": "image/jpeg",
    "WEBP": "image/webp",
    "GIF": "image/gif",
    "BMP": "image/bmp",
}
# An attachment's kind (app.documents.library.Attachment.kind) when it is an image rather than a document.
IMAGE_KIND: Final = "image"
# The long side a model is given by default (the image_max_side setting): larger photos are scaled down,
# never up.
DEFAULT_MAX_SIDE: Final = DEFAULT_MAX_IMAGE_SIDE
# What a real photo may have: 108-megapixel phone cameras (12,000 × 9,000) pass, a decompression bomb
# (a few KB claiming gigapixels) does not.
MAX_PIXELS: Final = 120_000_000
MAX_SIDE_PIXELS: Final = 30_000
# Sources without loss stay lossless for the model (screenshots, diagrams, text); photos are re-encoded
# as JPEG, smaller in a data URL and in the runner pipe.
_LOSSLESS: Final = frozenset({"PNG", "GIF", "BMP"})
_JPEG_QUALITY: Final = 92


class ImageError(HearthError):
    """An image that cannot be used: not an image, an unsupported format, corrupt, or too large."""


@dataclass(frozen=True)
class ImageInfo:
    """What an image's header says, before any pixel is decoded."""

    format: str  # Pillow's name: "PNG", "JPEG", …
    mime_type: str
    width: int
    height: int
    frames: int  # an animated GIF or WebP has several; the model sees the first


@dataclass(frozen=True)
class ImageSizing:
    """How large a model is given a picture: at most `max_side` on its long side (the image_max_side
    setting), and no larger than its projector uses when that is known (a local vision model's)."""

    max_side: int = DEFAULT_MAX_SIDE
    projector: ProjectorResize | None = None

    def __post_init__(self) -> None:
        if self.max_side < 1:
            raise ValueError("max_side must be at least 1 pixel")

    def long_side(self, width: int, height: int) -> int:
        """The long side a `width` × `height` picture is scaled down to (a picture is never scaled up)."""
        useful = self.projector.long_side(width, height) if self.projector is not None else max(width, height)
        return min(self.max_side, useful)


DEFAULT_SIZING: Final = ImageSizing()


@dataclass(frozen=True)
class PreparedImage:
    """The image as a model takes it: upright, RGB, no larger than its ImageSizing allows."""

    data: bytes
    mime_type: str  # image/png or image/jpeg
    width: int
    height: int
    original: ImageInfo


# The first bytes of each accepted format: enough to tell an image from a document without reading it all.
_SIGNATURES: Final = (
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"\xff\xd8\xff", "JPEG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
)
# "BM" alone starts plenty of text ("BMW …"): a bitmap also has one of the DIB header sizes at byte 14.
_BMP_HEADER_SIZES: Final = frozenset({12, 40, 52, 56, 64, 108, 124})
HEAD_BYTES: Final = 32


def image_format(head: bytes) -> str | None:
    """The accepted format whose signature `head` (a file's first HEAD_BYTES bytes) starts with."""
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WEBP"
    if head[:2] == b"BM" and len(head) >= 18:
        return "BMP" if int.from_bytes(head[14:18], "little") in _BMP_HEADER_SIZES else None
    return next((fmt for signature, fmt in _SIGNATURES if head.startswith(signature)), None)


def is_image_file(path: Path) -> bool:
    """Whether a file starts like an image Hearth reads, whatever its name; False when it cannot be read
    (the document check then names what is wrong with it)."""
    try:
        with path.open("rb") as file:
            return image_format(file.read(HEAD_BYTES)) is not None
    except OSError:
        return False


def probe_image(data: bytes, name: str = "the image") -> ImageInfo:
    """The header's facts, or ImageError naming what is wrong with `name`."""
    with _open(data, name) as image:
        return _info(image, name)


def prepare_image(
    data: bytes, name: str = "the image", *, sizing: ImageSizing = DEFAULT_SIZING, verified: bool = False
) -> PreparedImage:
    """Decode, apply the EXIF orientation, flatten transparency onto white, convert to RGB and scale the
    long side down to what `sizing` allows (never up). Raises ImageError for anything a model cannot be
    given.

    `verified`: the bytes were decoded in full before (when they were attached). A JPEG or PNG that needs
    none of the changes (upright, RGB, one frame, small enough) is then given as it is, from its header
    alone: no second decode, and no re-encoding that would cost time and lose detail.
    """
    with _open(data, name) as image:
        info = _info(image, name)
        max_side = sizing.long_side(info.width, info.height)
        if verified and _as_it_is(image, info, max_side):
            return PreparedImage(data, info.mime_type, info.width, info.height, info)
        if info.format == "JPEG":
            # Decodes at 1/2, 1/4 or 1/8 scale when that still leaves at least max_side on the long side.
            image.draft("RGB", _bounding_box(info, max_side))
        try:
            image.seek(0)
            image.load()
        except (OSError, SyntaxError, ValueError, EOFError) as exc:
            raise ImageError(f"{name} is corrupt or truncated ({info.format}: {exc}).") from None
        upright = ImageOps.exif_transpose(image)
        rgb = _flattened(upright)
        rgb.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
        out = io.BytesIO()
        if info.format in _LOSSLESS:
            rgb.save(out, format="PNG", optimize=False)
            mime = "image/png"
        else:
            rgb.save(out, format="JPEG", quality=_JPEG_QUALITY)
            mime = "image/jpeg"
        return PreparedImage(out.getvalue(), mime, rgb.width, rgb.height, info)


def _as_it_is(image: Image.Image, info: ImageInfo, max_side: int) -> bool:
    """Whether a model can be given the file itself: what preparing it would make of it is the same."""
    return (
        info.format in ("JPEG", "PNG")
        and info.frames == 1
        and image.mode == "RGB"
        and max(info.width, info.height) <= max_side
        and image.getexif().get(_EXIF_ORIENTATION, 1) == 1
    )


_EXIF_ORIENTATION: Final = 0x0112


def _open(data: bytes, name: str) -> Image.Image:
    if not data:
        raise ImageError(f"{name} is empty (0 bytes).")
    try:
        # Pillow warns, then raises, for images over its own pixel limit; the limits here come first, from
        # the header, so its check is turned off only to let this module say so in its own words.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            return Image.open(io.BytesIO(data), formats=list(ACCEPTED_FORMATS))
    except UnidentifiedImageError:
        kinds = ", ".join(sorted(ACCEPTED_FORMATS))
        raise ImageError(f"{name} is not an image Hearth can read (it reads {kinds}).") from None
    except Image.DecompressionBombError:
        raise ImageError(f"{name} claims more than {MAX_PIXELS:,} pixels; Hearth refuses it.") from None
    except (OSError, SyntaxError, ValueError) as exc:
        raise ImageError(f"{name} is corrupt ({exc}).") from None


def _info(image: Image.Image, name: str) -> ImageInfo:
    fmt = image.format or ""
    if fmt not in ACCEPTED_FORMATS:
        raise ImageError(f"{name} is {fmt or 'an unknown format'}, which Hearth does not read.")
    width, height = image.size
    if width < 1 or height < 1:
        raise ImageError(f"{name} has no pixels ({width} × {height}).")
    if width * height > MAX_PIXELS or max(width, height) > MAX_SIDE_PIXELS:
        raise ImageError(
            f"{name} claims {width:,} × {height:,} pixels, more than Hearth decodes "
            f"({MAX_PIXELS // 1_000_000} megapixels, {MAX_SIDE_PIXELS:,} on a side): refused as a possible "
            "decompression bomb."
        )
    frames = int(getattr(image, "n_frames", 1))
    return ImageInfo(fmt, ACCEPTED_FORMATS[fmt], width, height, frames)


def _bounding_box(info: ImageInfo, max_side: int) -> tuple[int, int]:
    scale = min(1.0, max_side / max(info.width, info.height))
    return max(1, round(info.width * scale)), max(1, round(info.height * scale))


def _flattened(image: Image.Image) -> Image.Image:
    """RGB; transparent pixels become white, as a page behind a picture would be."""
    if image.mode in ("RGBA", "LA", "PA") or (image.mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGB", rgba.size, (255, 255, 255))
        background.paste(rgba, mask=rgba.getchannel("A"))
        return background
    return image.convert("RGB")
