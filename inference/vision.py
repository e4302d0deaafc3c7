"""Images into a loaded model, in the runner process: llama.cpp's mtmd (through llama-cpp-python 0.3.36's
`mtmd_cpp` bindings) encodes each picture with the model's multimodal projector and writes its embeddings
into the context at the right positions.

Hearth drives mtmd per image rather than handing it the whole prompt as llama-cpp-python's MTMDChatHandler
does: mtmd would tokenize the prompt with special tokens parsed, so text in a message could become control
tokens, and the prompt's text is tokenized by inference.runner instead, the same way as without images.
Everything here runs in the runner process: a projector that crashes llama.cpp takes only the runner.
"""

from __future__ import annotations

import ctypes
import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

from inference.protocol import ImageInput

# Images kept tokenized (decoded and preprocessed by mtmd, not yet encoded): the context meter and the fit
# count a prompt before it is sent, and the turn then evaluates the same pictures; each is decoded once.
# A real projector's preprocessed image is a few MB of floats (896 × 896 × 3 for Gemma 3).
KEPT_IMAGES: Final = 8


class VisionError(RuntimeError):
    """mtmd refused the projector or an image; the message says which, for the user."""


@dataclass
class ImageSlot:
    """One image, tokenized by mtmd: its chunk (owned by `chunks`, freed with it) and what it takes."""

    chunks: Any  # mtmd_input_chunks *
    chunk: Any  # the image's mtmd_input_chunk *, inside `chunks`
    n_tokens: int  # context cells its embeddings take
    n_pos: int  # positions it advances (fewer than n_tokens with M-RoPE, as in Qwen2-VL)


class Vision:
    """An mtmd context for one loaded model. The runner counts and tokenizes prompts on one thread while
    it decodes on another: whoever uses the context holds `lock`, and an image's slot is tokenized and
    evaluated under one holding of it, so that no other prompt's pictures can free it in between."""

    def __init__(
        self, mmproj_path: str, model: Any, *, n_threads: int, use_gpu: bool, flash_attn: bool
    ) -> None:
        import llama_cpp
        from llama_cpp import mtmd_cpp

        self._mtmd = mtmd_cpp
        params = mtmd_cpp.mtmd_context_params_default()
        params.use_gpu = use_gpu
        params.n_threads = n_threads
        params.print_timings = False
        params.flash_attn_type = (
            llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if flash_attn
            else llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        self._ctx = mtmd_cpp.mtmd_init_from_file(mmproj_path.encode(), model, params)
        if self._ctx is None:
            raise VisionError(
                "llama.cpp could not load the vision projector with this model (the runner log says why: "
                "usually a projector made for another model)"
            )
        self._kept: OrderedDict[bytes, ImageSlot] = OrderedDict()
        self.lock = threading.Lock()
        if not mtmd_cpp.mtmd_support_vision(self._ctx):
            self.close()
            raise VisionError("the projector has no vision encoder")

    def close(self) -> None:
        for slot in self._kept.values():
            self._mtmd.mtmd_input_chunks_free(slot.chunks)
        self._kept.clear()
        if self._ctx is not None:
            self._mtmd.mtmd_free(self._ctx)
            self._ctx = None

    def tokenized(self, images: tuple[ImageInput, ...]) -> list[ImageSlot]:
        """Each image decoded and tokenized (not yet encoded); the slots stay valid until more than
        KEPT_IMAGES other images (or as many as one prompt holds) have been tokenized since."""
        slots = []
        for image in images:
            key = hashlib.sha256(image.data).digest()
            slot = self._kept.get(key)
            if slot is None:
                slot = self._kept[key] = self._tokenize(image)
            self._kept.move_to_end(key)
            slots.append(slot)
        while len(self._kept) > max(KEPT_IMAGES, len(images)):
            _, oldest = self._kept.popitem(last=False)
            self._mtmd.mtmd_input_chunks_free(oldest.chunks)
        return slots

    def _tokenize(self, image: ImageInput) -> ImageSlot:
        mtmd = self._mtmd
        data = bytearray(image.data)
        bitmap = mtmd.mtmd_helper_bitmap_init_from_buf(
            self._ctx, (ctypes.c_uint8 * len(data)).from_buffer(data), len(data), False
        )
        if bitmap is None:
            raise VisionError(f"llama.cpp could not decode an image ({image.mime_type})")
        chunks = mtmd.mtmd_input_chunks_init()
        try:
            # The marker alone: the prompt's text is tokenized by the runner, never by mtmd.
            marker = mtmd.mtmd_default_marker()
            text = mtmd.mtmd_input_text()
            text.text = marker
            text.text_len = len(marker)
            text.add_special = False
            text.parse_special = True
            bitmaps = (mtmd.mtmd_bitmap_p_ctypes * 1)(bitmap)
            status = mtmd.mtmd_tokenize(self._ctx, chunks, ctypes.byref(text), bitmaps, 1)
            if status != 0:
                raise VisionError(f"llama.cpp could not prepare an image for the model (mtmd error {status})")
            for i in range(mtmd.mtmd_input_chunks_size(chunks)):
                chunk = mtmd.mtmd_input_chunks_get(chunks, i)
                if mtmd.mtmd_input_chunk_get_type(chunk) == mtmd.MTMD_INPUT_CHUNK_TYPE_IMAGE:
                    return ImageSlot(
                        chunks,
                        chunk,
                        int(mtmd.mtmd_input_chunk_get_n_tokens(chunk)),
                        int(mtmd.mtmd_input_chunk_get_n_pos(chunk)),
                    )
            raise VisionError("llama.cpp made no image input of the picture")
        except BaseException:
            mtmd.mtmd_input_chunks_free(chunks)
            raise
        finally:
            mtmd.mtmd_bitmap_free(bitmap)

    def evaluate(self, llama_ctx: Any, slot: ImageSlot, n_past: int, n_batch: int, seq_id: int = 0) -> int:
        """Encode the image and decode its embeddings at `n_past` of sequence `seq_id`; returns the position
        after it."""
        import llama_cpp

        after = llama_cpp.llama_pos(0)
        status = self._mtmd.mtmd_helper_eval_chunk_single(
            self._ctx,
            llama_ctx,
            slot.chunk,
            llama_cpp.llama_pos(n_past),
            llama_cpp.llama_seq_id(seq_id),
            n_batch,
            False,
            ctypes.byref(after),
        )
        if status != 0:
            raise VisionError(f"llama.cpp could not encode an image (mtmd error {status})")
        return int(after.value)
