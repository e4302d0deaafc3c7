"""Inference failures, for real, through the engine the CLI and the window use: the runner out of memory at
load, killed mid-reply, and a conversation or a reply that outgrows the context."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from app.chat.engine import ChatEngine, ModelStatus, TurnCallbacks
from app.conversations.store import Message
from app.core import Core
from app.errors import ContextOverflow, HearthError
from inference.gguf import read_header
from inference.planner import smaller_plan
from inference.protocol import ErrorKind, LoadPlan, SamplingParams
from inference.runner import ADDRESS_SPACE_ENV
from tests.conftest import starter_name
from tests.reliability.conftest import RecordFault, characters_missing, messages_missing

pytestmark = pytest.mark.model

CATEGORY = "Inference"

GREEDY = SamplingParams(temperature=0.0, max_tokens=16, seed=1)
# The starter model's training context, and what its runner needs on top of what it uses before loading,
# with flash attention (on when the runner writes several replies at once) and its decode thread: measured,
# 4,096 tokens and a reply fit from about 480 MiB on, 8,192 load from about 560 MiB on (and then have no room
# left for the decode threads). The cap lies between.
FULL_CONTEXT = 8192
ADDRESS_SPACE_MIB = 510


class Recorder(TurnCallbacks):
    def __init__(self) -> None:
        self.statuses: list[ModelStatus] = []
        self.notes: list[str] = []
        self.deltas: list[str] = []

    def model_status(self, status: ModelStatus) -> None:
        self.statuses.append(status)

    def context_note(self, assistant_message_id: int, note: str) -> None:
        self.notes.append(note)

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        if text:
            self.deltas.append(text)

    @property
    def shown(self) -> str:
        return "".join(self.deltas)


def stored_text(core: Core, message_id: int) -> str:
    return core.store.get_message(message_id).content


def texts(messages: list[Message]) -> list[tuple[int, str, str]]:
    return [(m.id, m.role, m.content) for m in messages]


def every_message(core: Core) -> list[tuple[int, str, str]]:
    store = core.store
    return [t for c in store.list_conversations() for t in texts(store.list_all_messages(c.id))]


@pytest.fixture
def memory_cap(monkeypatch: pytest.MonkeyPatch) -> Callable[[int], None]:
    """Cap the runner's address space (see inference.runner._cap_address_space) for runners started later."""
    # One malloc arena and two threads: the runner's address space then depends on the model, not the machine.
    monkeypatch.setenv("MALLOC_ARENA_MAX", "1")

    def cap(mib: int) -> None:
        monkeypatch.setenv(ADDRESS_SPACE_ENV, str(mib))

    return cap


def test_out_of_memory_at_load_retries_smaller_and_says_what_worked(
    core: Core, make_engine: Callable[..., ChatEngine], memory_cap: Callable[[int], None], fault: RecordFault
) -> None:
    memory_cap(ADDRESS_SPACE_MIB)
    engine = make_engine(context_length=FULL_CONTEXT, n_threads=2)
    recorder = Recorder()

    result = engine.run_turn("Say hello.", starter_name(core), sampling=GREEDY, callbacks=recorder)
    missing = characters_missing(recorder.shown, stored_text(core, result.assistant_message_id))
    fault(
        CATEGORY,
        "out of memory at load (address space capped below what an 8,192-token context needs)",
        trials=1,
        outcome="retried with a 4,096-token context; loaded, replied, and the status says what was given up",
        lost={"characters": missing},
    )

    assert missing == 0
    assert result.status == "complete", result.error
    assert result.text.strip()
    assert engine.loaded is not None and engine.loaded.n_ctx == FULL_CONTEXT // 2
    retry = next(s for s in recorder.statuses if s.state == "loading" and "Not enough memory" in s.detail)
    assert retry.detail == "Not enough memory for a 8,192-token context; trying a 4,096-token context."
    ready = recorder.statuses[-1]
    assert ready.state == "ready"
    assert ready.detail.startswith("Loaded with a 4,096-token context instead of 8,192: not enough memory.")
    assert engine.status().detail == ready.detail
    plan = engine.client.plan
    assert plan is not None and plan.reason.endswith("; 4,096-token context after running out of memory")
    # Running out of memory is not a crash: the model stays eligible for loading at the next start.
    assert core.library.get(starter_name(core)).last_load_error is None
    stored = core.store.list_messages(result.conversation_id)
    assert [(m.role, m.status) for m in stored] == [("user", "complete"), ("assistant", "complete")]


def test_out_of_memory_whatever_the_context_is_one_clear_error_and_nothing_stored(
    core: Core, make_engine: Callable[..., ChatEngine], memory_cap: Callable[[int], None], fault: RecordFault
) -> None:
    memory_cap(60)  # not even the weights fit
    engine = make_engine(context_length=2048, n_threads=2)
    recorder = Recorder()
    earlier = core.store.create_conversation("Earlier")
    core.store.add_message(earlier.id, "user", "Written before the model would not load.")
    before = every_message(core)

    with pytest.raises(HearthError, match="not enough memory to load it with a 512-token context") as caught:
        engine.run_turn("Say hello.", starter_name(core), sampling=GREEDY, callbacks=recorder)
    after = every_message(core)
    missing = messages_missing(before, after)
    fault(
        CATEGORY,
        "out of memory at load at every context size",
        trials=1,
        outcome="one clear error after trying 2,048, 1,024 and 512 tokens; the prompt is not stored",
        lost={"messages": missing},
    )
    assert missing == 0

    assert "\n" not in str(caught.value)
    tried = [s.detail for s in recorder.statuses if s.state == "loading"][1:]
    assert tried == [
        "Not enough memory for a 2,048-token context; trying a 1,024-token context.",
        "Not enough memory for a 1,024-token context; trying a 512-token context.",
    ]
    assert recorder.statuses[-1].state == "failed"
    assert after == before, "nothing stored"
    assert core.library.get(starter_name(core)).last_load_error is None


class KillRunnerMidReply(Recorder):
    def __init__(self, engine: ChatEngine) -> None:
        super().__init__()
        self._engine = engine

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        super().delta(assistant_message_id, text, n_tokens)
        if len(self.deltas) == 2:
            self._engine.client.kill()


def test_killed_runner_keeps_partial_reply_interrupted_and_next_message_works(
    core: Core, make_engine: Callable[..., ChatEngine], fault: RecordFault
) -> None:
    engine = make_engine()
    name = starter_name(core)
    recorder = KillRunnerMidReply(engine)
    sampling = SamplingParams(temperature=0.0, max_tokens=2000, seed=1)
    result = engine.run_turn(
        "Write a very long essay about mountains.", name, sampling=sampling, callbacks=recorder
    )
    missing = characters_missing(recorder.shown, stored_text(core, result.assistant_message_id))
    fault(
        CATEGORY,
        "runner SIGKILLed mid-reply",
        trials=1,
        outcome="partial reply kept as interrupted; the next message starts a new runner and completes",
        lost={"characters": missing},
    )

    assert missing == 0
    assert result.status == "interrupted"
    assert result.error_kind is ErrorKind.RUNNER_CRASHED
    assert "SIGKILL" in (result.error or "")
    reply = core.store.list_messages(result.conversation_id)[-1]
    assert reply.status == "interrupted"
    assert reply.content and reply.content == "".join(recorder.deltas)
    # Until it works again, the model that took the runner down is not loaded on its own at the next start.
    assert core.library.get(name).last_load_error
    assert engine.model_to_autoload()[0] is None
    assert "crashed last time" in engine.model_to_autoload()[1]
    killed_pid = engine.client.pid

    follow_up = engine.run_turn(
        "Thanks. Say hi.", name, conversation_id=result.conversation_id, sampling=GREEDY
    )
    assert follow_up.status == "complete", follow_up.error
    assert follow_up.text.strip()
    assert engine.client.pid != killed_pid, "a new runner answered"
    assert core.library.get(name).last_load_error is None
    assert engine.model_to_autoload() == (name, "")
    statuses = [m.status for m in core.store.list_messages(result.conversation_id)]
    assert statuses == ["complete", "interrupted", "complete", "complete"]


# Short turns, about 25 tokens each, so that what drop_oldest keeps nearly fills the context and the reply
# reaches its end after a few dozen tokens: on a busy CPU each token counts.
def long_conversation(core: Core, turns: int = 12) -> int:
    store = core.store
    conversation = store.create_conversation("Rivers", system_prompt="You are a patient tutor.")
    for i in range(turns):
        store.add_message(conversation.id, "user", f"Question {i}: where does the Danube flow?")
        store.add_message(conversation.id, "assistant", f"Answer {i}: to the Black Sea.")
    return conversation.id


# llama.cpp rounds a context up to a multiple of 256 but caps its batch at the size asked for; a prompt
# longer than that batch used to abort the runner.
CONTEXT_SETTING = 128
SMALL_CONTEXT = 256
# Fits with the 64 tokens kept for the reply, leaving it about 70 before the context is full.
LONG_PROMPT = "Tell me about rivers and the seas they flow into. " * 14
# Generates to the end of the context, whatever the model would say.
ENDLESS = SamplingParams(temperature=0.0, max_tokens=1000, seed=1, ignore_eos=True)
CUT = f"cut off where the {SMALL_CONTEXT}-token context ran out"


def test_drop_oldest_says_what_it_left_out_and_where_the_reply_was_cut(
    core: Core, make_engine: Callable[..., ChatEngine], fault: RecordFault
) -> None:
    engine = make_engine(context_length=CONTEXT_SETTING, overflow_policy="drop_oldest")
    conversation_id = long_conversation(core)
    before = core.store.list_all_messages(conversation_id)
    recorder = Recorder()

    result = engine.run_turn(
        "And the Rhine?",
        starter_name(core),
        conversation_id=conversation_id,
        sampling=ENDLESS,
        callbacks=recorder,
    )
    missing = messages_missing(texts(before), texts(core.store.list_all_messages(conversation_id)))
    cut = characters_missing(recorder.shown, stored_text(core, result.assistant_message_id))
    fault(
        CATEGORY,
        "context overflow under drop_oldest (conversation and reply both too long)",
        trials=1,
        outcome="oldest turns left out and the cut reply, both stated on the reply; nothing deleted",
        lost={"messages": missing, "characters": cut},
    )

    assert missing == 0 and cut == 0
    assert result.status == "complete", result.error
    assert engine.loaded is not None and engine.loaded.n_ctx == SMALL_CONTEXT
    assert result.stats is not None and result.stats.prompt_tokens is not None
    assert result.stats.prompt_tokens + result.stats.completion_tokens == SMALL_CONTEXT
    note = result.context_note or ""
    assert re.fullmatch(
        rf"\d*[02468] earlier messages were left out to fit the {SMALL_CONTEXT}-token context; "
        rf"the reply was {CUT}",
        note,
    ), note
    # Said as it happened (the window shows each note on the reply) and stored with the reply.
    assert recorder.notes[-1] == note and len(recorder.notes) == 2
    stored = core.store.get_message(result.assistant_message_id)
    assert stored.context_note == note and stored.content == result.text
    # Nothing the user wrote was deleted to make room.
    assert core.store.list_all_messages(conversation_id)[: len(before)] == before


def test_refuse_sends_nothing_and_a_reply_that_runs_out_of_room_says_so(
    core: Core, make_engine: Callable[..., ChatEngine], fault: RecordFault
) -> None:
    engine = make_engine(context_length=CONTEXT_SETTING, overflow_policy="refuse")
    name = starter_name(core)
    conversation_id = long_conversation(core)
    before = core.store.list_all_messages(conversation_id)

    with pytest.raises(ContextOverflow, match="Nothing was sent or cut"):
        engine.run_turn("And the Rhine?", name, conversation_id=conversation_id, sampling=ENDLESS)
    after = core.store.list_all_messages(conversation_id)

    recorder = Recorder()
    result = engine.run_turn(LONG_PROMPT, name, sampling=ENDLESS, callbacks=recorder)
    missing = messages_missing(texts(before), texts(after))
    cut = characters_missing(recorder.shown, stored_text(core, result.assistant_message_id))
    fault(
        CATEGORY,
        "context overflow under refuse (conversation too long, then a reply too long)",
        trials=2,
        outcome="the long conversation is refused with nothing stored; the cut reply is kept and says so",
        lost={"messages": missing, "characters": cut},
    )
    assert missing == 0 and cut == 0
    assert after == before
    assert result.status == "complete", result.error
    assert result.context_note == f"The reply was {CUT}"
    assert recorder.notes == [result.context_note]
    assert core.store.get_message(result.assistant_message_id).context_note == result.context_note


def test_after_running_out_of_memory_gpu_layers_go_first_then_the_context(starter_model: Path) -> None:
    header = read_header(starter_model)
    plan = LoadPlan(
        model_path=str(starter_model),
        n_ctx=4096,
        n_gpu_layers=31,  # llama.cpp's count: all 30 layers and the output layer
        n_layers=30,
        flash_attn=True,
        n_threads=2,
        reason="CUDA · 30/30 layers on a test GPU; a note",
    )
    steps = []
    step: LoadPlan | None = plan
    while step is not None:
        steps.append((step.n_gpu_layers, step.n_ctx))
        last, step = step, smaller_plan(step, header)
    assert steps == [
        (31, 4096),
        (15, 4096),
        (7, 4096),
        (3, 4096),
        (1, 4096),
        (0, 4096),
        (0, 2048),
        (0, 1024),
        (0, 512),
    ]
    assert last.reason == "CPU · not enough GPU memory; 512-token context after running out of memory"
    assert last.predicted_bytes["gpu"] == 0 < last.predicted_bytes["ram"]
