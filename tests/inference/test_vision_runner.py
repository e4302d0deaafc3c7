"""The local vision path in the runner, for real: the starter model loaded with a tiny generated projector
(random weights: tests/helpers/tiny_vision.py), an image decoded, tokenized and encoded by llama.cpp's mtmd,
its embeddings in the context, a reply generated. What the model says about noise is not checked; that the
picture took its tokens, that the cache after it serves no later prompt, and that a projector of another
model is refused at load with a sentence, are."""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import llama_cpp
import pytest
from PIL import Image

from inference.gguf import read_header
from inference.hardware import probe_hardware
from inference.planner import plan_load
from inference.protocol import (
    ChatMessage,
    CheckingTemplate,
    CountTokensRequest,
    ErrorKind,
    Failed,
    Finished,
    GenerateRequest,
    ImageInput,
    Loaded,
    LoadRequest,
    PromptReady,
    SamplingParams,
    TokenCount,
    TokenDelta,
)
from inference.runner import Runner
from tests.helpers.tiny_vision import TINY_IMAGE_TOKENS, write_tiny_projector

pytestmark = pytest.mark.model
GREEDY = SamplingParams(temperature=0.0, max_tokens=6, seed=1)


def png(colour: str, size: tuple[int, int] = (40, 30)) -> ImageInput:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, format="PNG")
    return ImageInput("image/png", out.getvalue())


class LoadedRunner:
    def __init__(self, starter_model: Path, mmproj: Path | None) -> None:
        self.replies: list[object] = []
        self.runner = Runner(self.replies.append)
        plan = plan_load(
            str(starter_model),
            read_header(starter_model),
            probe_hardware(),
            context_length=1024,
            gpu_layers=0,
            n_threads=2,
            gpu_offload_supported=False,
            mmproj_path=str(mmproj) if mmproj is not None else None,
        )
        self.runner.load(LoadRequest(plan))

    def take(self) -> list[object]:
        replies, self.replies[:] = list(self.replies), []
        return [r for r in replies if not isinstance(r, CheckingTemplate)]

    def generate(self, *messages: ChatMessage) -> tuple[int, str, Finished]:
        self.runner.generate(GenerateRequest("r", messages, GREEDY))
        replies = self.take()
        [ready] = [r for r in replies if isinstance(r, PromptReady)]
        text = "".join(r.text for r in replies if isinstance(r, TokenDelta))
        finished = replies[-1]
        assert isinstance(finished, Finished), replies
        return ready.prompt_tokens, text, finished

    def count(self, *messages: ChatMessage) -> int:
        self.runner.count_tokens(CountTokensRequest("c", messages))
        [count] = self.take()
        assert isinstance(count, TokenCount), count
        return count.n_tokens


@pytest.fixture
def vision(starter_model: Path, tmp_path: Path) -> Iterator[LoadedRunner]:
    runner = LoadedRunner(starter_model, write_tiny_projector(tmp_path / "mmproj-tiny.gguf"))
    [loaded] = runner.take()
    assert isinstance(loaded, Loaded), loaded
    yield runner
    del runner


def test_an_image_is_encoded_into_the_context_and_a_reply_follows(vision: LoadedRunner) -> None:
    question = ChatMessage("user", "What is in the picture?")
    text_only, _, _ = vision.generate(question)
    with_image = ChatMessage("user", "What is in the picture?", (png("navy"),))
    n_prompt, reply, finished = vision.generate(with_image)
    # The image's embeddings, in place of its slot, and the line break after it.
    assert n_prompt - text_only in (TINY_IMAGE_TOKENS, TINY_IMAGE_TOKENS + 1)
    assert finished.stats.prompt_tokens == n_prompt == vision.count(with_image)
    assert finished.stats.cached_prompt_tokens == 0
    assert finished.stats.completion_tokens > 0 and reply

    # The same picture and seed again: the same reply (nothing of the last prompt's cache is reused).
    again, same, _ = vision.generate(with_image)
    assert (again, same) == (n_prompt, reply)
    # After it, a text prompt is decoded from the start and answers as it does on its own.
    _, after_image, finished_text = vision.generate(question)
    fresh = LoadedRunner(vision_model_path(vision), None)
    fresh.take()
    _, alone, _ = fresh.generate(question)
    assert after_image == alone and finished_text.stats.cached_prompt_tokens == 0


def vision_model_path(runner: LoadedRunner) -> Path:
    model = runner.runner._model
    assert model is not None
    return Path(model.plan.model_path)


def test_two_images_take_two_slots_in_order(vision: LoadedRunner) -> None:
    one = vision.count(ChatMessage("user", "Compare them.", (png("navy"),)))
    two = vision.count(ChatMessage("user", "Compare them.", (png("navy"), png("orange", (30, 40)))))
    assert two - one == TINY_IMAGE_TOKENS
    n_prompt, _, finished = vision.generate(ChatMessage("user", "Compare them.", (png("navy"), png("red"))))
    assert n_prompt == two and finished.stats.completion_tokens > 0


def test_the_first_token_after_an_image_comes_from_the_decode_that_reads_the_end_of_the_prompt(
    vision: LoadedRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The text after the last picture is read by the steps, as any prompt's end, with the token after it:
    no llama_decode of that one token alone before anything is shown. (mtmd decodes the picture's embeddings
    itself, in C: only the text's decodes pass through Python.)"""
    decoded: list[int] = []
    decode = llama_cpp.llama_decode

    def counted(ctx: object, batch: llama_cpp.llama_batch) -> int:
        decoded.append(batch.n_tokens)
        return int(decode(ctx, batch))

    monkeypatch.setattr(llama_cpp, "llama_decode", counted)
    question = ChatMessage("user", "What is in the picture?", (png("navy"),))
    vision.runner.generate(GenerateRequest("r", (question,), replace(GREEDY, max_tokens=1)))
    [finished] = [r for r in vision.take() if isinstance(r, Finished)]
    assert finished.stats.completion_tokens == 1
    # The template's text before the picture, then the question after it with the turn's opening.
    assert len(decoded) == 2 and min(decoded) > 1, decoded


def test_a_text_model_refuses_images_with_a_sentence(starter_model: Path) -> None:
    runner = LoadedRunner(starter_model, None)
    runner.take()
    runner.runner.generate(GenerateRequest("r", (ChatMessage("user", "Hi", (png("navy"),)),), GREEDY))
    [failed] = runner.take()
    assert isinstance(failed, Failed) and failed.kind is ErrorKind.MODEL_INVALID
    assert "no vision projector" in failed.message


def test_a_projector_of_another_model_is_refused_at_load(starter_model: Path, tmp_path: Path) -> None:
    wrong = write_tiny_projector(tmp_path / "mmproj-1024.gguf", projection_dim=1024)
    runner = LoadedRunner(starter_model, wrong)
    [failed] = runner.take()
    assert isinstance(failed, Failed) and failed.kind is ErrorKind.MODEL_INVALID
    assert "mmproj-1024.gguf does not fit this model" in failed.message
    assert "1024 wide" in failed.message and "576 wide" in failed.message
    assert runner.runner._model is None
