"""Reasoning stored apart from the answer: streaming flushes, crashes, exports, imports, search, the
migration that indexes it, and the rule that it is never sent back to the model."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine

import app.chat.engine as engine_module
import app.storage.db as db_module
from app.chat.engine import ChatEngine, TurnCallbacks
from app.chat.runner_queue import Job
from app.conversations.store import HIT_END, HIT_START, ConversationStore
from app.core import Core
from app.errors import HearthError
from app.paths import resolve_home
from app.storage.db import Database
from inference.protocol import (
    ErrorKind,
    Failed,
    Finished,
    GenerateRequest,
    GenerationStats,
    PromptReady,
    SamplingParams,
    StopReason,
    TokenDelta,
)
from tests.helpers.model_files import with_chat_template

HEAD = ScriptDirectory.from_config(db_module._alembic_config()).get_current_head()
REPO = Path(__file__).resolve().parents[3]
SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
T0 = "2025-01-01T00:00:00.000000+00:00"
GREEDY = SamplingParams(temperature=0.0, max_tokens=24, seed=1)
# The starter model's own template made to behave like DeepSeek-R1's: the reply starts inside a pre-filled
# <think>, and earlier replies lose everything up to </think>.
THINKING_TEMPLATE = (
    "{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + (m['content'].split('</think>')[-1] "
    "if m['role'] == 'assistant' else m['content']) + '<|im_end|>\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n<think>\\n' }}{% endif %}"
)


def raw(path: Path, sql: str, params: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql, params).fetchall()


def _reply(store: ConversationStore, conversation_id: int, content: str, reasoning: str | None) -> int:
    reply = store.start_assistant_message(
        conversation_id, model_name="R1-Distill", model_sha256=SHA, sampling={}, seed=None
    )
    store.finish_message(
        reply.id, content=content, status="complete", reasoning=reasoning, reasoning_seconds=12.4
    )
    return reply.id


# -- the store -------------------------------------------------------------------------------------------


def test_streaming_flushes_and_the_final_write_carry_the_reasoning(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    store.add_message(conversation.id, "user", "2+2?")
    reply = store.start_assistant_message(
        conversation.id, model_name="m", model_sha256=SHA, sampling={}, seed=None
    )
    assert store.flush_streaming_text(reply.id, "", reasoning="The user asks")
    flushed = store.get_message(reply.id)
    assert (flushed.content, flushed.reasoning, flushed.status) == ("", "The user asks", "streaming")
    assert store.finish_message(
        reply.id, content="4", status="complete", reasoning="The user asks for a sum.", reasoning_seconds=2.5
    )
    done = store.get_message(reply.id)
    assert (done.content, done.reasoning, done.reasoning_seconds) == ("4", "The user asks for a sum.", 2.5)
    assert store.add_message(conversation.id, "user", "ok").reasoning is None


def test_exports_show_the_reasoning_as_its_own_part_and_imports_keep_it(
    store: ConversationStore, tmp_path: Path
) -> None:
    conversation = store.create_conversation("Sums")
    store.add_message(conversation.id, "user", "2+2?")
    reply_id = _reply(store, conversation.id, "It is **4**.", "Two and two.\n\nThat makes four.")

    markdown = store.export_markdown(conversation.id)
    assert (
        "## Assistant (R1-Distill)\n\n> **Thinking** (12 s)\n>\n> Two and two.\n>\n> That makes four.\n\n"
        "It is **4**.\n"
    ) in markdown

    exported = store.export_json(conversation.id)
    record = next(m for m in exported["messages"] if m["id"] == reply_id)
    assert (record["content"], record["reasoning"], record["reasoning_seconds"]) == (
        "It is **4**.",
        "Two and two.\n\nThat makes four.",
        12.4,
    )
    path = tmp_path / "sums.json"
    path.write_text(json.dumps(exported), encoding="utf-8")
    (imported_id,) = store.import_file(path).conversation_ids
    answer = store.list_messages(imported_id)[-1]
    assert (answer.content, answer.reasoning, answer.reasoning_seconds) == (
        "It is **4**.",
        "Two and two.\n\nThat makes four.",
        12.4,
    )

    # An export from before reasoning was stored has no such keys and still imports.
    for message in exported["messages"]:
        del message["reasoning"], message["reasoning_seconds"]
    path.write_text(json.dumps(exported), encoding="utf-8")
    (older_id,) = store.import_file(path).conversation_ids
    assert store.list_messages(older_id)[-1].reasoning is None
    bad = json.loads(path.read_text(encoding="utf-8"))
    bad["messages"][-1]["reasoning_seconds"] = "long"
    path.write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(HearthError, match="reasoning_seconds"):
        store.import_file(path)


def test_search_finds_words_the_model_only_thought_and_says_so(store: ConversationStore) -> None:
    conversation = store.create_conversation("Travel")
    store.add_message(conversation.id, "user", "Capital of France?")
    reply_id = _reply(store, conversation.id, "Paris.", "Recall European geography: the capital is Paris.")

    (thought,) = store.search("geography")
    assert (thought.message_id, thought.in_reasoning) == (reply_id, True)
    assert f"{HIT_START}geography{HIT_END}" in thought.snippet
    # A word in the answer and the reasoning: the answer's snippet is shown.
    (answered,) = [hit for hit in store.search("Paris") if hit.message_id == reply_id]
    assert (answered.in_reasoning, answered.snippet) == (False, f"{HIT_START}Paris{HIT_END}.")
    assert store.search("capital france")[0].in_reasoning is False  # the prompt, not a thought

    # A reply still thinking is not searchable until it stops (the index is written once, at the end).
    streaming = store.start_assistant_message(
        conversation.id, model_name="m", model_sha256=SHA, sampling={}, seed=None
    )
    store.flush_streaming_text(streaming.id, "", reasoning="pondering zeppelins")
    assert store.search("zeppelins") == []
    store.finish_message(streaming.id, content="", status="stopped", reasoning="pondering zeppelins")
    (late,) = store.search("zeppelins")
    assert (late.message_id, late.in_reasoning) == (streaming.id, True)

    store.delete_message(reply_id)
    assert store.search("geography") == []


# -- migration 0004 --------------------------------------------------------------------------------------

WORDS = ("river", "mountain", "bread", "garden", "lantern", "harbour", "violin", "comet")


def database_at_0003(path: Path) -> int:
    """Schema 0003 with a few thousand messages in chains, one reply cut off mid-stream. Returns the count."""
    engine = create_engine(f"sqlite:///{path}")
    config = db_module._alembic_config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "0003")
    engine.dispose()
    with closing(sqlite3.connect(path)) as conn, conn:
        conn.executemany(
            "INSERT INTO conversations (id, title, created_at, updated_at) VALUES (?, ?, ?, ?)",
            [(c, f"Chat {c} about {WORDS[c % len(WORDS)]}", T0, T0) for c in range(1, 21)],
        )
        rows = []
        for i in range(1, 3001):
            conversation = (i - 1) % 20 + 1
            parent = i - 20 if i > 20 else None
            role = "user" if (i - 1) // 20 % 2 == 0 else "assistant"
            text = f"message {i} mentions {WORDS[i * 7 % len(WORDS)]}"
            rows.append((i, conversation, parent, role, text, "complete", T0, T0))
        rows.append((3001, 1, 2981, "assistant", "half a reply about zeppelins", "streaming", T0, T0))
        conn.executemany(
            "INSERT INTO messages (id, conversation_id, parent_id, role, content, status, created_at, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
        conn.execute(
            "UPDATE conversations SET current_leaf_id = "
            "(SELECT max(id) FROM messages WHERE conversation_id = conversations.id)"
        )
    return len(rows)


def test_0004_indexes_reasoning_and_keeps_every_old_message_searchable(tmp_path: Path) -> None:
    path = tmp_path / "hearth.sqlite3"
    total = database_at_0003(path)
    database = Database.open(path, tmp_path / "backups")
    try:
        assert raw(path, "SELECT version_num FROM alembic_version") == [(HEAD,)]
        assert raw(path, "SELECT count(*) FROM messages") == [(total,)]
        store = ConversationStore(database)
        hits = [h for h in store.search("harbour", limit=10_000) if h.message_id is not None]
        expected = raw(path, "SELECT count(*) FROM messages WHERE content LIKE '%harbour%'")[0][0]
        assert len(hits) == expected > 100
        assert not any(h.in_reasoning for h in hits)
        assert store.search("zeppelins") == []  # still streaming, so not indexed yet
        assert store.mark_interrupted_streaming() == 1
        assert [h.message_id for h in store.search("zeppelins")] == [3001]
        assert store.get_conversation(1).message_count == 151

        reply_id = _reply(store, 2, "Fine.", "I should mention the lighthouse")
        (hit,) = store.search("lighthouse")
        assert (hit.message_id, hit.in_reasoning) == (reply_id, True)
        with closing(sqlite3.connect(path)) as conn:
            conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
        assert database.quick_check() == "ok"
    finally:
        database.dispose()

    engine = create_engine(f"sqlite:///{path}")
    config = db_module._alembic_config()
    try:
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.downgrade(config, "0003")
        columns = {row[1] for row in raw(path, "PRAGMA table_info(messages)")}
        assert not columns & {"reasoning", "reasoning_seconds", "server_name", "server_url"}
        # 0003's search is back: answers are found, the reasoning column is gone from the index.
        assert raw(path, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'zeppelins'") == [(3001,)]
        assert raw(path, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'lighthouse'") == []
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    finally:
        engine.dispose()
    assert raw(path, "SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'zeppelins'") == [(3001,)]


# -- the engine ------------------------------------------------------------------------------------------


class Recorder(TurnCallbacks):
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.assistant_id: int | None = None

    def started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        self.assistant_id = assistant_message_id

    def reasoning_delta(self, assistant_message_id: int, text: str) -> None:
        self.events.append(("reasoning", text))

    def answer_was_reasoning(self, assistant_message_id: int) -> None:
        self.events.append(("moved", ""))

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        if text:
            self.events.append(("answer", text))

    def joined(self, kind: str) -> str:
        return "".join(text for k, text in self.events if k == kind)


Event = PromptReady | TokenDelta | Finished | Failed
STATS = GenerationStats(10, 0, 5, 0.1, 20.0, StopReason.END_OF_TURN, 1)


class ScriptedEngine(ChatEngine):
    """The real engine, store and runner (which loads the model and counts the prompt); only the tokens
    come from a script instead of the model, so every marker layout can be played."""

    script: Iterator[Event] = iter(())

    def _generate(self, request: GenerateRequest, job: Job) -> Iterator[Event]:
        return self.script


@pytest.fixture
def scripted(core: Core, monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedEngine]:
    # Every delta is flushed, so the script can look at the database after each one.
    monkeypatch.setattr(engine_module, "FLUSH_INTERVAL_S", 0.0)
    chat = ScriptedEngine(
        core.store, core.library, core.settings_store, runner_log=core.paths.runner_log_file
    )
    yield chat
    chat.close()


def starter_name(core: Core) -> str:
    (starter,) = [m for m in core.library.list_models() if m.name != "thinker"]
    return starter.name


def import_thinker(core: Core, starter_model: Path, directory: Path) -> str:
    """The starter model with THINKING_TEMPLATE, which names the <think> markers."""
    model = with_chat_template(starter_model, directory / "thinker.gguf", THINKING_TEMPLATE)
    return core.library.import_file(model, name="thinker").name


@pytest.fixture
def thinker(core: Core, starter_model: Path, tmp_path: Path) -> str:
    return import_thinker(core, starter_model, tmp_path)


def _stored(core: Core, recorder: Recorder) -> tuple[str, str | None, str]:
    assert recorder.assistant_id is not None
    message = core.store.get_message(recorder.assistant_id)
    return message.content, message.reasoning, message.status


@pytest.mark.model
def test_a_prefilled_think_and_a_closing_marker_split_across_deltas(
    core: Core, scripted: ScriptedEngine, thinker: str
) -> None:
    recorder = Recorder()

    def script() -> Iterator[Event]:
        yield PromptReady("r", 10, "<|im_start|>assistant\n<think>")
        yield TokenDelta("r", "Let me", 2)
        yield TokenDelta("r", " think.\n</th", 3)
        # Saved while thinking: a crash here keeps the reasoning.
        assert _stored(core, recorder) == ("", "Let me think.", "streaming")
        yield TokenDelta("r", "ink>\n\nFour.", 3)
        assert _stored(core, recorder) == ("Four.", "Let me think.", "streaming")
        yield Finished("r", STATS)

    scripted.script = script()
    result = scripted.run_turn("2+2?", thinker, sampling=GREEDY, callbacks=recorder)
    assert (result.status, result.text, result.reasoning) == ("complete", "Four.", "Let me think.")
    assert (recorder.joined("reasoning"), recorder.joined("answer")) == ("Let me think.", "Four.")
    assert _stored(core, recorder) == ("Four.", "Let me think.", "complete")
    stored = core.store.get_message(result.assistant_message_id)
    assert stored.reasoning_seconds is not None and stored.reasoning_seconds >= 0


@pytest.mark.model
def test_a_closing_marker_without_an_opening_one_moves_the_answer_so_far(
    core: Core, scripted: ScriptedEngine, thinker: str
) -> None:
    recorder = Recorder()

    def script() -> Iterator[Event]:
        yield PromptReady("r", 10, "<|im_start|>assistant")
        yield TokenDelta("r", "Hmm, two", 2)
        yield TokenDelta("r", " plus two.", 3)
        assert _stored(core, recorder) == ("Hmm, two plus two.", None, "streaming")
        yield TokenDelta("r", "\n</think>\n\n", 3)
        assert _stored(core, recorder) == ("", "Hmm, two plus two.", "streaming")
        yield TokenDelta("r", "Four.", 1)
        yield Finished("r", STATS)

    scripted.script = script()
    result = scripted.run_turn("2+2?", thinker, sampling=GREEDY, callbacks=recorder)
    assert (result.text, result.reasoning) == ("Four.", "Hmm, two plus two.")
    kinds = [kind for kind, _ in recorder.events]
    assert kinds == ["answer", "answer", "moved", "answer"]
    assert _stored(core, recorder) == ("Four.", "Hmm, two plus two.", "complete")


@pytest.mark.model
def test_a_reply_cut_off_mid_thought_keeps_its_reasoning(
    core: Core, scripted: ScriptedEngine, thinker: str
) -> None:
    recorder = Recorder()

    def script() -> Iterator[Event]:
        yield PromptReady("r", 10, "<think>")
        yield TokenDelta("r", "\nStill thinking about", 3)
        yield Failed("r", ErrorKind.RUNNER_CRASHED, "the model runner exited")

    scripted.script = script()
    result = scripted.run_turn("Hard question", thinker, sampling=GREEDY, callbacks=recorder)
    assert (result.status, result.text, result.reasoning) == ("interrupted", "", "Still thinking about")
    assert _stored(core, recorder) == ("", "Still thinking about", "interrupted")


@pytest.mark.model
def test_a_model_whose_template_names_no_markers_keeps_a_lone_closing_marker_in_its_answer(
    core: Core, scripted: ScriptedEngine
) -> None:
    """The starter model's template names no reasoning markers: it is no reasoning model, and "</think>" in
    its answer is text (an opening marker at the very start would still count)."""
    recorder = Recorder()
    scripted.script = iter(
        [
            PromptReady("r", 10, "<|im_start|>assistant"),
            TokenDelta("r", "R1 closes with </think> and", 6),
            TokenDelta("r", " then answers.", 3),
            Finished("r", STATS),
        ]
    )
    result = scripted.run_turn("How does R1 format?", starter_name(core), sampling=GREEDY, callbacks=recorder)
    assert (result.text, result.reasoning) == ("R1 closes with </think> and then answers.", None)
    assert [kind for kind, _ in recorder.events] == ["answer", "answer"]


@pytest.mark.model
def test_stored_reasoning_is_never_sent_back_to_the_model(core: Core) -> None:
    """Counted by the real model's template and tokenizer, as the next prompt would be sent."""
    store = core.store
    thought = " ".join(["I must consider every possibility before I answer this question."] * 20)

    def conversation(reasoning: str | None, content: str = "Blue.") -> int:
        created = store.create_conversation()
        store.add_message(created.id, "user", "What colour is the sky?")
        _reply(store, created.id, content, reasoning)
        return created.id

    with_reasoning, without, reasoning_in_answer = (
        conversation(thought),
        conversation(None),
        conversation(None, content=f"{thought} Blue."),
    )
    engine = ChatEngine(store, core.library, core.settings_store, runner_log=core.paths.runner_log_file)
    try:
        name = starter_name(core)
        counts = [
            engine.measure_context(c, "And at night?", name).used_tokens for c in (with_reasoning, without)
        ]
        longer = engine.measure_context(reasoning_in_answer, "And at night?", name).used_tokens
    finally:
        engine.close()
    assert counts[0] == counts[1]
    assert longer > counts[1] + 100  # the count does see what is in the history


@pytest.mark.model
def test_a_template_that_prefills_think_makes_the_whole_reply_reasoning(core: Core, thinker: str) -> None:
    recorder = Recorder()
    engine = ChatEngine(core.store, core.library, core.settings_store, runner_log=core.paths.runner_log_file)
    try:
        result = engine.run_turn("What is 2+2?", thinker, sampling=GREEDY, callbacks=recorder)
    finally:
        engine.close()
    assert result.status == "complete", result.error
    assert result.reasoning and result.reasoning == recorder.joined("reasoning")
    assert result.text == recorder.joined("answer") == ""
    stored = core.store.get_message(result.assistant_message_id)
    assert (stored.reasoning, stored.content) == (result.reasoning, "")
    assert stored.reasoning_seconds is not None


CHILD = """
import sys
from pathlib import Path

from app.core import Core
from app.chat.engine import ChatEngine
from app.paths import resolve_home
from inference.protocol import SamplingParams

if __name__ == "__main__":
    core = Core.open(resolve_home())
    engine = ChatEngine(core.store, core.library, core.settings_store, runner_log=core.paths.runner_log_file)
    # Never ends on its own: the parent kills it mid-thought.
    sampling = SamplingParams(temperature=0.0, max_tokens=100_000, seed=1, ignore_eos=True)
    engine.run_turn("Think about rivers.", sys.argv[1], sampling=sampling)
"""


@pytest.mark.model
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_kill_minus_9_mid_thought_keeps_the_reasoning_saved_so_far(
    starter_model: Path, tmp_path: Path
) -> None:
    paths = resolve_home()
    core = Core.open(paths)
    import_thinker(core, starter_model, tmp_path)
    core.close()
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(CHILD), encoding="utf-8")
    child = subprocess.Popen(
        [sys.executable, str(script), "thinker"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    flushed: list[str] = []
    try:
        deadline = time.monotonic() + 120
        # Two different flushes of the reasoning: the reply is well into its thinking.
        while len(set(flushed)) < 2 and time.monotonic() < deadline and child.poll() is None:
            time.sleep(0.05)
            rows = raw(
                paths.db_path,
                "SELECT reasoning FROM messages WHERE status = 'streaming' AND reasoning IS NOT NULL",
            )
            flushed += [row[0] for row in rows]
    finally:
        # The chat process and its runner, as a crash or a power cut would take them.
        os.killpg(child.pid, signal.SIGKILL)
        _, stderr = child.communicate(timeout=30)
    assert len(set(flushed)) >= 2, stderr.decode()

    reopened = Core.open(paths)  # marks the cut-off reply interrupted
    try:
        (conversation,) = reopened.store.list_conversations()
        user, reply = reopened.store.list_messages(conversation.id)
        assert (user.content, reply.status, reply.content) == ("Think about rivers.", "interrupted", "")
        assert reply.reasoning is not None and reply.reasoning.startswith(flushed[-1])
        assert "<think>" not in reply.reasoning
    finally:
        reopened.close()
