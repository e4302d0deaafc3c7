"""Images for installed models, through the engine the window uses. A text-only model refuses them before
anything is stored or loaded, with the sentence that says which model can see. A vision model is given each
picture no larger than its projector uses, and the context meter counts the pictures before Send as the
model's own tokenizer will."""

from __future__ import annotations

import dataclasses
import io
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from PIL import Image

from app.chat.documents import TurnDocuments
from app.chat.engine import ChatEngine
from app.core import Core
from app.documents.library import DocumentLibrary
from app.errors import HearthError
from app.settings import SettingsStore
from app.storage.orm import MessageStatus
from inference.protocol import Failed, Finished, GenerateRequest, PromptReady, SamplingParams, TokenDelta
from tests.conftest import starter_model_file, starter_name
from tests.helpers.tiny_vision import TINY_IMAGE_SIZE, TINY_IMAGE_TOKENS, write_tiny_projector


def test_an_image_for_a_text_only_model_is_refused_before_anything_is_stored(
    core: Core, tmp_path: Path
) -> None:
    documents = core.documents()
    engine = ChatEngine(
        core.store,
        core.library,
        SettingsStore(dataclasses.replace(core.settings)),
        runner_log=core.paths.runner_log_file,
        documents=documents,
    )
    try:
        picture = tmp_path / "chart.png"
        Image.new("RGB", (40, 30), "navy").save(picture)
        attached = documents.attach(picture)
        assert (attached.kind, attached.mime_type, attached.pages) == ("image", "image/png", None)
        with pytest.raises(HearthError, match=r"can't see images \(chart\.png\): it is a text-only model"):
            engine.run_turn("What does it show?", starter_name(core), documents=TurnDocuments((attached,)))
        assert core.store.list_conversations() == []
        assert engine.loaded is None, "nothing was loaded for a turn that could not happen"
    finally:
        engine.close()
        documents.close()


@dataclasses.dataclass(frozen=True)
class VisionChat:
    engine: ChatEngine
    documents: DocumentLibrary
    model: str


@pytest.fixture
def vision_chat(core: Core, make_engine: Callable[..., ChatEngine], tmp_path: Path) -> Iterator[VisionChat]:
    """The starter model with the tiny projector (an `mlp` one: mtmd resizes every picture to a
    TINY_IMAGE_SIZE square), and an engine that has the document store."""
    starter = starter_model_file()
    assert starter is not None
    model = core.library.import_file(starter, mmproj=write_tiny_projector(tmp_path / "mmproj-F16.gguf"))
    assert model.vision
    documents = core.documents()
    try:
        yield VisionChat(make_engine(documents=documents, image_max_side=2048), documents, model.name)
    finally:
        documents.close()


def _photo(path: Path, size: tuple[int, int] = (640, 480)) -> Path:
    Image.effect_noise(size, 64).convert("RGB").save(path, format="JPEG")
    return path


QUICK = SamplingParams(temperature=0.0, max_tokens=4)


@pytest.mark.model
def test_a_local_vision_model_is_given_pictures_no_larger_than_its_projector_uses(
    vision_chat: VisionChat, tmp_path: Path
) -> None:
    engine, documents = vision_chat.engine, vision_chat.documents
    attached = documents.attach(_photo(tmp_path / "photo.jpg"))
    given: list[tuple[int, int]] = []
    generate = engine.client.generate

    def seen_by_the_runner(
        request: GenerateRequest,
    ) -> Iterator[PromptReady | TokenDelta | Finished | Failed]:
        for message in request.messages:
            given.extend(Image.open(io.BytesIO(image.data)).size for image in message.images)
        return generate(request)

    engine.client.generate = seen_by_the_runner  # type: ignore[method-assign]
    result = engine.run_turn(
        "What is it?", vision_chat.model, documents=TurnDocuments((attached,)), sampling=QUICK
    )
    assert result.status is MessageStatus.COMPLETE, result.error
    # Shrunk until the short side is the square's, keeping the aspect ratio: 640 × 480 → 75 × 56.
    assert given == [(math.ceil(640 * TINY_IMAGE_SIZE / 480), TINY_IMAGE_SIZE)]
    with Image.open(documents.files.path(attached.sha256)) as kept:
        assert kept.size == (640, 480), "the attached file itself is kept as it was"


@pytest.mark.model
def test_the_context_meter_counts_pictures_before_send_as_the_model_will(
    vision_chat: VisionChat, tmp_path: Path
) -> None:
    engine, model = vision_chat.engine, vision_chat.model
    attached = vision_chat.documents.attach(_photo(tmp_path / "photo.jpg"))
    with_picture = TurnDocuments((attached,))
    text_only = engine.measure_context(None, "What is it?", model)
    before = engine.measure_context(None, "What is it?", model, documents=with_picture)
    assert before.used_tokens - text_only.used_tokens >= TINY_IMAGE_TOKENS
    assert before.document_tokens == before.used_tokens - text_only.used_tokens
    sent = engine.run_turn("What is it?", model, documents=with_picture, sampling=QUICK)
    assert sent.stats is not None and sent.stats.prompt_tokens == before.used_tokens
    # A follow-up question: the earlier picture goes in again, and the meter counts it as an attachment.
    follow_up = engine.measure_context(sent.conversation_id, "And the colours?", model)
    assert follow_up.document_tokens >= TINY_IMAGE_TOKENS
    again = engine.run_turn("And the colours?", model, conversation_id=sent.conversation_id, sampling=QUICK)
    assert again.stats is not None and again.stats.prompt_tokens == follow_up.used_tokens
