"""Context budget and overflow policy, per-conversation settings and provenance, with the real model."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from pytestqt.qtbot import QtBot

from app.chat.engine import ChatEngine, ContextUsage
from app.conversations.store import Conversation, Message
from app.core import Core
from app.errors import ContextOverflow, HearthError
from app.qt.chat_service import ChatService
from app.settings import Settings
from inference.protocol import ChatMessage, SamplingParams
from tests.conftest import starter_name

SMALL_CONTEXT = 512
GREEDY = SamplingParams(temperature=0.0, max_tokens=16, seed=1)
SYSTEM = "You are a patient tutor."
REPLY_TIMEOUT_MS = 120_000


def long_conversation(core: Core, turns: int = 8) -> Conversation:
    """Stored turns of about 60 tokens each: together far more than a 512-token context holds."""
    store = core.store
    conversation = store.create_conversation("Rivers", system_prompt=SYSTEM)
    for i in range(turns):
        store.add_message(conversation.id, "user", f"Question {i}: " + "tell me about the river Danube " * 6)
        store.add_message(
            conversation.id, "assistant", f"Answer {i}: " + "the Danube flows to the Black Sea " * 6
        )
    return store.get_conversation(conversation.id)


def prompt_of(history: list[Message], keep_last: int, prompt: str) -> tuple[ChatMessage, ...]:
    kept = history[len(history) - keep_last :]
    return (
        ChatMessage("system", SYSTEM),
        *(ChatMessage(m.role, m.content) for m in kept),
        ChatMessage("user", prompt),
    )


@pytest.mark.model
def test_drop_oldest_leaves_out_whole_turns_keeps_the_system_prompt_and_says_so(
    core: Core, make_engine: Callable[..., ChatEngine]
) -> None:
    engine = make_engine(
        context_length=SMALL_CONTEXT, overflow_policy="drop_oldest", max_tokens=16, temperature=0.0
    )
    name = starter_name(core)
    conversation = long_conversation(core)
    history = core.store.list_messages(conversation.id)
    before = len(history)

    usage = engine.measure_context(conversation.id, "And the Rhine?", name)
    reserve = 16  # max_tokens, under a quarter of the context
    assert (usage.context_tokens, usage.policy, usage.fits, usage.reserve_tokens) == (
        SMALL_CONTEXT,
        "drop_oldest",
        False,
        reserve,
    )
    full = engine.client.count_tokens(prompt_of(history, before, "And the Rhine?"))
    assert usage.used_tokens == full.n_tokens > SMALL_CONTEXT

    # The meter said what Send then does.
    result = engine.run_turn("And the Rhine?", name, conversation_id=conversation.id)
    assert result.status == "complete", result.error
    dropped = usage.would_drop_messages
    assert dropped > 0 and dropped % 2 == 0  # whole turns: what remains still starts with a question
    note = f"{dropped} earlier messages were left out to fit the {SMALL_CONTEXT}-token context"
    assert result.context_note == note
    reply = core.store.get_message(result.assistant_message_id)
    assert reply.context_note == note
    # What was sent is exactly: the system prompt, the newest turns, the question.
    sent = engine.client.count_tokens(prompt_of(history, before - dropped, "And the Rhine?"))
    assert result.stats is not None and result.stats.prompt_tokens == sent.n_tokens
    assert sent.n_tokens + reserve <= SMALL_CONTEXT
    # And no more was cut than needed.
    one_turn_more = engine.client.count_tokens(prompt_of(history, before - dropped + 2, "And the Rhine?"))
    assert one_turn_more.n_tokens + reserve > SMALL_CONTEXT
    # Nothing is deleted: the transcript still holds every message.
    assert len(core.store.list_messages(conversation.id)) == before + 2


@pytest.mark.model
def test_refuse_sends_nothing_and_stores_nothing(core: Core, make_engine: Callable[..., ChatEngine]) -> None:
    engine = make_engine(context_length=SMALL_CONTEXT, overflow_policy="refuse")
    name = starter_name(core)
    conversation = long_conversation(core)
    before = core.store.list_all_messages(conversation.id)

    usage = engine.measure_context(conversation.id, "And the Rhine?", name)
    assert (usage.policy, usage.would_drop_messages, usage.fits) == ("refuse", 0, False)
    with pytest.raises(
        ContextOverflow, match=r"needs \d+ tokens plus \d+ for the reply.*Nothing was sent or cut"
    ):
        engine.run_turn("And the Rhine?", name, conversation_id=conversation.id, sampling=GREEDY)
    assert core.store.list_all_messages(conversation.id) == before

    # A conversation that fits is answered as usual under "refuse".
    short = engine.run_turn("Hello!", name, sampling=GREEDY)
    assert short.status == "complete" and short.context_note is None


@pytest.mark.model
def test_a_message_too_long_for_the_context_is_refused_under_either_policy(
    core: Core, make_engine: Callable[..., ChatEngine]
) -> None:
    engine = make_engine(context_length=SMALL_CONTEXT, overflow_policy="drop_oldest")
    conversation = long_conversation(core, turns=2)
    before = core.store.list_all_messages(conversation.id)
    with pytest.raises(ContextOverflow, match="even with every earlier message left out"):
        engine.run_turn("word " * 600, starter_name(core), conversation_id=conversation.id, sampling=GREEDY)
    assert core.store.list_all_messages(conversation.id) == before
    with pytest.raises(ContextOverflow):
        engine.run_turn("word " * 600, starter_name(core), sampling=GREEDY)
    assert [c.id for c in core.store.list_conversations()] == [conversation.id]


@pytest.mark.model
def test_a_runner_that_dies_while_counting_is_remembered_like_any_crash(
    core: Core, make_engine: Callable[..., ChatEngine], monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = make_engine(context_length=SMALL_CONTEXT)
    name = starter_name(core)
    engine.measure_context(None, "Hello", name)
    client = engine.client
    send = client._send

    def dies_first(message: object) -> None:
        client.kill()
        send(message)

    monkeypatch.setattr(client, "_send", dies_first)
    with pytest.raises(HearthError, match="Could not measure the prompt: the model runner crashed"):
        engine.measure_context(None, "Hello again", name)
    assert engine.loaded_model_name is None
    # As after a crash mid-reply: not loaded again on its own at the next start.
    assert core.library.get(name).last_load_error
    assert engine.model_to_autoload()[0] is None


@pytest.mark.model
def test_counting_agrees_with_generation_and_replies_record_their_provenance(
    core: Core, make_engine: Callable[..., ChatEngine]
) -> None:
    engine = make_engine()
    name = starter_name(core)
    result = engine.run_turn("What is a lighthouse?", name, system_prompt=SYSTEM, sampling=GREEDY)
    counted = engine.client.count_tokens(
        (ChatMessage("system", SYSTEM), ChatMessage("user", "What is a lighthouse?"))
    )
    assert result.stats is not None and counted.n_tokens == result.stats.prompt_tokens
    assert counted.n_ctx == Settings().context_length
    reply = core.store.get_message(result.assistant_message_id)
    model = core.library.get(name)
    assert (reply.template, reply.quantization, reply.model_sha256) == ("gguf", "Q4_1", model.sha256)
    assert reply.template == engine.loaded.template_source if engine.loaded else False


@pytest.mark.model
def test_conversation_settings_win_over_model_defaults_which_win_over_global_ones(
    core: Core, make_engine: Callable[..., ChatEngine]
) -> None:
    name = starter_name(core)
    engine = make_engine(
        temperature=0.9,
        model_defaults={name: {"max_tokens": 4, "temperature": 0.0, "seed": 3, "system_prompt": SYSTEM}},
    )
    by_default = engine.run_turn("Describe the sea.", name)
    assert by_default.stats is not None and by_default.stats.completion_tokens <= 4
    reply = core.store.get_message(by_default.assistant_message_id)
    assert reply.sampling is not None and (reply.sampling["temperature"], reply.seed) == (0.0, 3)
    # The model's default system prompt was part of the prompt.
    counted = engine.client.count_tokens(
        (ChatMessage("system", SYSTEM), ChatMessage("user", "Describe the sea."))
    )
    assert by_default.stats.prompt_tokens == counted.n_tokens

    conversation = core.store.create_conversation("Own settings")
    core.store.set_conversation_settings(
        conversation.id, None, {"max_tokens": 2, "context_length": 1024, "seed": 8}
    )
    own = engine.run_turn("Describe the sea.", name, conversation_id=conversation.id)
    assert own.stats is not None and own.stats.completion_tokens <= 2
    assert engine.loaded is not None and engine.loaded.n_ctx == 1024  # reloaded for this conversation
    reply = core.store.get_message(own.assistant_message_id)
    assert reply.sampling is not None and (reply.sampling["max_tokens"], reply.sampling["temperature"]) == (
        2,
        0.0,
    )
    assert reply.seed == 8
    # Explicit arguments win over everything.
    explicit = engine.run_turn(
        "Describe the sea.",
        name,
        conversation_id=conversation.id,
        sampling=dataclasses.replace(GREEDY, max_tokens=1),
    )
    assert explicit.stats is not None and explicit.stats.completion_tokens == 1


def test_generation_settings_layering_without_a_model(
    core: Core, make_engine: Callable[..., ChatEngine]
) -> None:
    engine = make_engine(
        temperature=0.5,
        context_length=2048,
        model_defaults={"m": {"top_k": 7, "context_length": 1024, "system_prompt": "Model default."}},
    )
    plain = engine.generation_settings(None, "other-model")
    assert (plain.sampling.temperature, plain.sampling.top_k, plain.context_length) == (0.5, 40, 2048)
    assert plain.system_prompt is None
    by_model = engine.generation_settings(None, "m")
    assert (by_model.sampling.top_k, by_model.context_length, by_model.system_prompt) == (
        7,
        1024,
        "Model default.",
    )
    conversation = core.store.create_conversation("x", system_prompt="Mine.")
    conversation = core.store.set_conversation_settings(conversation.id, "Mine.", {"top_k": 3})
    own = engine.generation_settings(conversation, "m")
    assert (own.sampling.top_k, own.sampling.temperature, own.context_length) == (3, 0.5, 1024)
    assert own.system_prompt == "Mine."


@pytest.mark.model
def test_chat_service_meter_and_refusal_signals(
    core: Core, make_engine: Callable[..., ChatEngine], qtbot: QtBot
) -> None:
    service = ChatService(make_engine(context_length=SMALL_CONTEXT, overflow_policy="refuse"))
    name = starter_name(core)
    conversation = long_conversation(core)
    try:
        with qtbot.waitSignal(service.contextUsage, timeout=REPLY_TIMEOUT_MS) as measured:
            service.measure_context(conversation.id, "And the Rhine?", name)
        usage = measured.args[0]
        assert isinstance(usage, ContextUsage) and not usage.fits

        with qtbot.waitSignal(service.replyFailed, timeout=REPLY_TIMEOUT_MS) as failed:
            service.send(conversation.id, "And the Rhine?", name, GREEDY)
        assert failed.args[:2] == [-1, "context_overflow"]
        assert "Nothing was sent or cut" in failed.args[2]
        qtbot.waitUntil(lambda: not service.busy)
    finally:
        service.shutdown()
