"""`hearth chat` with a reasoning model: thinking on stderr by default, on stdout before the answer with
--show-thinking, not at all with --hide-thinking; the stored reply, `show --json` and search."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import app.chat.engine as engine_module
from app.cli.chat import StreamToStdout
from app.core import Core
from app.paths import resolve_home
from inference.protocol import Finished, PromptReady, SamplingParams, TokenDelta
from tests.app.chat.test_reasoning_storage import (
    STATS,
    THINKING_TEMPLATE,
    Event,
    ScriptedEngine,
    import_thinker,
)
from tests.app.cli.test_cli import run
from tests.helpers.model_files import with_chat_template

OPEN = "Thinking…\n"
CLOSE = "\n…done thinking.\n\n"


@pytest.fixture
def thinker(starter_model: Path, tmp_path: Path) -> str:
    model = with_chat_template(starter_model, tmp_path / "thinker.gguf", THINKING_TEMPLATE)
    code, _, err = run("models", "import", str(model), "--name", "thinker")
    assert code == 0, err
    return "thinker"


def _chat(*options: str) -> tuple[int, str, str]:
    return run(
        "chat",
        "--model",
        "thinker",
        "--temperature",
        "0",
        "--seed",
        "1",
        "--max-tokens",
        "24",
        *options,
        "2+2?",
    )


def _conversation(err: str) -> int:
    return int(err.split("conversation ", 1)[1].split("\n", 1)[0])


def _stored_reasoning(conversation_id: int) -> str:
    code, out, _ = run("conversations", "show", str(conversation_id), "--json")
    assert code == 0
    reply = json.loads(out)["messages"][-1]
    assert reply["role"] == "assistant" and reply["content"] == ""
    assert isinstance(reply["reasoning_seconds"], float)
    reasoning: str = reply["reasoning"]
    return reasoning


@pytest.mark.model
def test_thinking_goes_to_stderr_and_the_answer_alone_to_stdout(thinker: str) -> None:
    code, out, err = _chat()
    assert code == 0, err
    # The template pre-fills <think> and this small model never closes it: all of the reply is thinking.
    assert out == "\n"
    thought = err.split(OPEN, 1)[1].split(CLOSE, 1)[0]
    assert thought and thought == _stored_reasoning(_conversation(err))


@pytest.mark.model
def test_show_thinking_prints_it_before_the_answer_and_hide_thinking_not_at_all(thinker: str) -> None:
    code, out, err = _chat("--show-thinking")
    assert code == 0, err
    assert out.startswith(OPEN) and out.endswith(CLOSE + "\n") and OPEN not in err
    assert out[len(OPEN) : -len(CLOSE) - 1] == _stored_reasoning(_conversation(err))

    code, out, err = _chat("--hide-thinking")
    assert code == 0, err
    assert out == "\n" and OPEN not in err and CLOSE not in err
    assert _stored_reasoning(_conversation(err))  # hidden from the terminal, still stored

    with pytest.raises(SystemExit) as usage:
        _chat("--show-thinking", "--hide-thinking")
    assert usage.value.code == 2


@pytest.fixture
def scripted(
    starter_model: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[tuple[Core, ScriptedEngine]]:
    monkeypatch.setattr(engine_module, "FLUSH_INTERVAL_S", 0.0)
    core = Core.open(resolve_home())
    import_thinker(core, starter_model, tmp_path)
    engine = ScriptedEngine(
        core.store, core.library, core.settings_store, runner_log=core.paths.runner_log_file
    )
    yield core, engine
    engine.close()
    core.close()


def _streamed(core: Core, engine: ScriptedEngine, script: list[Event], thinking: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    engine.script = iter(script)
    stream = StreamToStdout(out, err, thinking)
    engine.run_turn("2+2?", "thinker", sampling=SamplingParams(max_tokens=8), callbacks=stream)
    stream.end_thinking()
    return out.getvalue(), err.getvalue()


@pytest.mark.model
def test_the_answer_follows_the_thinking_clearly_separated(scripted: tuple[Core, ScriptedEngine]) -> None:
    core, engine = scripted
    script: list[Event] = [
        PromptReady("r", 9, "<think>"),
        TokenDelta("r", "Two and", 2),
        TokenDelta("r", " two.</thi", 2),
        TokenDelta("r", "nk>\n\nFour.", 2),
        Finished("r", STATS),
    ]
    out, err = _streamed(core, engine, script, "stdout")
    assert out == f"{OPEN}Two and two.{CLOSE}Four."
    out, err = _streamed(core, engine, script, "stderr")
    assert (out, err.split("\n", 1)[1]) == ("Four.", f"{OPEN}Two and two.{CLOSE}")


@pytest.mark.model
def test_unannounced_thinking_already_printed_is_explained_on_stderr(
    scripted: tuple[Core, ScriptedEngine],
) -> None:
    core, engine = scripted
    script: list[Event] = [
        PromptReady("r", 9, "assistant"),
        TokenDelta("r", "Two and two.", 2),
        TokenDelta("r", "</think>Four.", 2),
        Finished("r", STATS),
    ]
    out, err = _streamed(core, engine, script, "stderr")
    assert out == "Two and two.Four."
    assert "the text printed so far was its thinking" in err
    (conversation,) = core.store.list_conversations()
    reply = core.store.list_messages(conversation.id)[-1]
    assert (reply.reasoning, reply.content) == ("Two and two.", "Four.")


def test_search_says_when_a_hit_is_in_the_thinking() -> None:
    core = Core.open(resolve_home())
    try:
        conversation = core.store.create_conversation("Sums")
        core.store.add_message(conversation.id, "user", "What is two plus two?")
        reply = core.store.start_assistant_message(
            conversation.id, model_name="m", model_sha256="0" * 64, sampling={}, seed=None
        )
        core.store.finish_message(reply.id, content="Four.", status="complete", reasoning="Count on fingers.")
    finally:
        core.close()
    code, out, _ = run("conversations", "search", "fingers")
    assert code == 0
    assert out == f"{conversation.id}\t{reply.id}\tSums\t(thinking) Count on «fingers».\n"
    code, out, _ = run("conversations", "search", "fingers", "--json")
    (hit,) = json.loads(out)["hits"]
    assert (hit["in_reasoning"], hit["snippet"]) == (True, "Count on fingers.")
    code, out, _ = run("conversations", "show", str(conversation.id))
    assert "assistant (thinking): Count on fingers.\n\nassistant: Four.\n" in out
