"""PDF pages as pictures, for a model that can see: a chart, a scan or a form reads better as what it looks
like than as its text layer (llama.cpp's web UI offers the same).

pypdfium2 (Apache-2.0 / BSD-3-Clause: Google's PDFium, ~9 MB installed) renders; PyMuPDF would too but is
AGPL, which the installers cannot carry. Pages are rendered at most PAGE_SIDE pixels on their long side, the
first MAX_PAGES of them: each page costs a vision model hundreds of tokens of context.
"""

from __future__ import annotations

import io
from typing import Final

from app.errors import HearthError
from app.images.prepare import ImageSizing
from inference.protocol import ImageInput

MAX_PAGES: Final = 8
PAGE_SIDE: Final = 1024
_ANY_SIZE: Final = ImageSizing(PAGE_SIDE)


def page_images(
    data: bytes, name: str, *, max_pages: int = MAX_PAGES, sizing: ImageSizing = _ANY_SIZE
) -> list[ImageInput]:
    """The first `max_pages` pages of a PDF, each rendered at most PAGE_SIDE pixels on its long side and no
    larger than `sizing` allows, as PNG images."""
    import pypdfium2 as pdfium

    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        raise HearthError(f"{name} could not be rendered as pages ({exc}).") from None
    try:
        images = []
        for index in range(min(len(document), max_pages)):
            page = document[index]
            try:
                width, height = page.get_size()
                long = max(width, height, 1.0)
                # Never more than 4× the page's own size: a tiny page is not blown up into a blur.
                full = min(PAGE_SIDE / long, 4.0)
                side = sizing.long_side(max(1, round(width * full)), max(1, round(height * full)))
                bitmap = page.render(scale=side / long)
                out = io.BytesIO()
                bitmap.to_pil().convert("RGB").save(out, format="PNG")
                images.append(ImageInput("image/png", out.getvalue()))
            finally:
                page.close()
        return images
    except pdfium.PdfiumError as exc:
        raise HearthError(f"A page of {name} could not be rendered ({exc}).") from None
    finally:
        document.close()
