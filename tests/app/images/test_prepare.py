"""Image preparation on real files written by Pillow (and by hand, for the hostile ones): every accepted
format, EXIF orientation, transparency, scaling, and each kind of bad input refused with its reason."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from app.images.prepare import (
    DEFAULT_MAX_SIDE,
    HEAD_BYTES,
    MAX_PIXELS,
    ImageError,
    ImageSizing,
    image_format,
    prepare_image,
    probe_image,
)
from inference.projector import ProjectorResize
from tests.helpers.images import png_claiming

RED, BLUE = (220, 20, 20), (20, 20, 220)


def encoded(image: Image.Image, fmt: str, **options: object) -> bytes:
    out = io.BytesIO()
    image.save(out, format=fmt, **options)
    return out.getvalue()


def decoded(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


@pytest.mark.parametrize(
    ("fmt", "mime", "model_mime"),
    [
        ("PNG", "image/png", "image/png"),
        ("JPEG", "image/jpeg", "image/jpeg"),
        ("WEBP", "image/webp", "image/jpeg"),
        ("GIF", "image/gif", "image/png"),
        ("BMP", "image/bmp", "image/png"),
    ],
)
def test_every_accepted_format_comes_out_rgb_at_its_size(fmt: str, mime: str, model_mime: str) -> None:
    data = encoded(Image.new("RGB", (320, 200), RED), fmt)
    assert probe_image(data).mime_type == mime
    prepared = prepare_image(data)
    assert (prepared.width, prepared.height, prepared.mime_type) == (320, 200, model_mime)
    image = decoded(prepared.data)
    assert image.mode == "RGB" and image.size == (320, 200)
    red, green, blue = image.getpixel((160, 100))  # type: ignore[misc]
    assert red > 180 and green < 60 and blue < 60


def test_large_photos_are_scaled_down_to_the_long_side_and_small_ones_never_up() -> None:
    big = prepare_image(encoded(Image.new("RGB", (4000, 3000), BLUE), "JPEG"))
    assert (big.width, big.height) == (DEFAULT_MAX_SIDE, 1536)
    assert (big.original.width, big.original.height) == (4000, 3000)
    assert decoded(big.data).size == (2048, 1536)
    # A smaller limit (the setting) is honoured the same way.
    tall = encoded(Image.new("RGB", (1000, 2000), BLUE), "PNG")
    assert prepare_image(tall, sizing=ImageSizing(512)).height == 512
    # A projector that resizes to a 448 square uses no more than a 448-wide, 896-high picture of it.
    square = ImageSizing(2048, ProjectorResize(square=448))
    assert (prepare_image(tall, sizing=square).width, prepare_image(tall, sizing=square).height) == (448, 896)
    # The lower of the two limits wins; neither ever scales a picture up.
    assert prepare_image(tall, sizing=ImageSizing(512, ProjectorResize(square=448))).height == 512
    assert prepare_image(tall, sizing=ImageSizing(4096, ProjectorResize(max_pixels=10**7))).height == 2000
    small = prepare_image(encoded(Image.new("RGB", (100, 50), BLUE), "PNG"))
    assert (small.width, small.height) == (100, 50)


def test_the_exif_orientation_is_applied() -> None:
    """A camera held upright writes a landscape frame and Orientation 6 (rotate 90° clockwise to view)."""
    frame = Image.new("RGB", (300, 100), RED)
    frame.paste(BLUE, (0, 0, 30, 100))  # a blue stripe on the left of the stored frame
    exif = Image.Exif()
    exif[0x0112] = 6
    prepared = prepare_image(encoded(frame, "JPEG", exif=exif.tobytes(), quality=95))
    assert (prepared.width, prepared.height) == (100, 300)
    upright = decoded(prepared.data)
    # Rotated clockwise, the stored frame's left edge is now the top.
    top = upright.getpixel((50, 10))
    bottom = upright.getpixel((50, 290))
    assert top[2] > 150 and bottom[0] > 150  # type: ignore[index]


def test_transparency_becomes_white_and_an_animation_gives_its_first_frame() -> None:
    clear = Image.new("RGBA", (64, 64), (0, 0, 0, 0))
    clear.paste((*RED, 255), (0, 0, 32, 64))
    flat = decoded(prepare_image(encoded(clear, "PNG")).data)
    assert flat.getpixel((48, 32)) == (255, 255, 255) and flat.getpixel((16, 32)) == RED

    frames = [Image.new("RGB", (40, 40), RED), Image.new("RGB", (40, 40), BLUE)]
    gif = encoded(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    assert probe_image(gif).frames == 2
    first = decoded(prepare_image(gif).data).getpixel((20, 20))
    assert first[0] > 180 and first[2] < 60  # type: ignore[index]


def test_a_decompression_bomb_is_refused_from_its_header_without_decoding() -> None:
    bomb = png_claiming(100_000, 100_000)
    assert len(bomb) < 200
    # Refused for what it claims, not for its data (one row of it, which decoding would find truncated).
    with pytest.raises(ImageError, match="pixels; Hearth refuses it"):
        prepare_image(bomb, "bomb.png")
    with pytest.raises(ImageError, match="pixels; Hearth refuses it"):
        probe_image(bomb, "bomb.png")
    # Just over the limit is refused too, by this module's own words (Pillow's own limit is higher).
    with pytest.raises(ImageError, match="decompression bomb"):
        probe_image(png_claiming(12_000, MAX_PIXELS // 12_000 + 1), "tall.png")


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(b"", "empty", id="empty"),
        pytest.param(b"hello, this is text" * 10, "not an image", id="text"),
        pytest.param(b"\x89PNG\r\n\x1a\n" + b"\0" * 40, "not an image|corrupt", id="png-signature-only"),
    ],
)
def test_what_is_not_an_image_is_refused_with_its_reason(data: bytes, reason: str) -> None:
    with pytest.raises(ImageError, match=reason):
        prepare_image(data, "photo.png")


def test_a_truncated_photo_is_refused_not_half_shown() -> None:
    whole = encoded(Image.effect_noise((800, 600), 64).convert("RGB"), "JPEG", quality=90)
    with pytest.raises(ImageError, match="corrupt or truncated"):
        prepare_image(whole[: len(whole) // 2], "cut.jpg")
    png = encoded(Image.effect_noise((300, 300), 64).convert("RGB"), "PNG")
    with pytest.raises(ImageError, match="corrupt or truncated"):
        prepare_image(png[: len(png) // 2], "cut.png")


def test_an_unsupported_format_is_named() -> None:
    tiff = encoded(Image.new("RGB", (10, 10), RED), "TIFF")
    with pytest.raises(ImageError, match=r"not an image Hearth can read .*BMP, GIF, JPEG, PNG, WEBP"):
        prepare_image(tiff, "scan.tiff")


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF", "BMP"])
def test_an_image_is_told_from_a_document_by_its_first_bytes(fmt: str) -> None:
    assert image_format(encoded(Image.new("RGB", (8, 8), RED), fmt)[:HEAD_BYTES]) == fmt


@pytest.mark.parametrize(
    "head",
    [
        b"%PDF-1.7\n",
        b"PK\x03\x04",
        b"# Notes",
        b"RIFF\0\0\0\0WAVE",
        b"BMW service history, 2019-2024",
        b"BM",
        b"",
    ],
)
def test_documents_and_other_files_are_not_taken_for_images(head: bytes) -> None:
    assert image_format(head) is None


def test_a_verified_image_that_needs_no_change_is_given_as_it_is() -> None:
    upright = io.BytesIO()
    Image.effect_noise((640, 480), 40).convert("RGB").save(upright, format="JPEG", quality=80)
    data = upright.getvalue()
    given = prepare_image(data, "upright.jpg", verified=True)
    assert given.data is data and (given.width, given.height, given.mime_type) == (640, 480, "image/jpeg")
    # Unverified, it is decoded (a corrupt file must be named) and so re-encoded.
    assert prepare_image(data, "upright.jpg").data != data
    # Anything to change, and it is prepared as ever: turned, too large, not RGB.
    turned = io.BytesIO()
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.effect_noise((640, 480), 40).convert("RGB").save(turned, format="JPEG", exif=exif)
    assert prepare_image(turned.getvalue(), "turned.jpg", verified=True).width == 480
    assert prepare_image(data, "upright.jpg", sizing=ImageSizing(320), verified=True).width == 320
    grey = io.BytesIO()
    Image.effect_noise((64, 48), 40).save(grey, format="PNG")  # mode L
    assert prepare_image(grey.getvalue(), "grey.png", verified=True).data != grey.getvalue()
