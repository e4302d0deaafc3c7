"""ConversationStore on a real SQLite file: CRUD, streaming replies, crash recovery, export.

Secure delete (no deleted text left in the database, its WAL or the search index) is proved in
tests/reliability/test_secure_delete.py."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import threading
from datetime import UTC
from pathlib import Path

import pytest
from sqlalchemy import text

from app.conversations.store import DEFAULT_TITLE, INTERRUPTED_ERROR, ConversationStore
from app.errors import ConversationNotFound, HearthError
from app.storage.db import Database

SAMPLING = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 256, "seed": None}
SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def test_create_get_and_list_with_counts_most_recent_first(store: ConversationStore) -> None:
    first = store.create_conversation()
    second = store.create_conversation("Second", system_prompt="Answer in French.")
    assert first.title == DEFAULT_TITLE and first.message_count == 0
    assert second.system_prompt == "Answer in French."
    assert first.created_at.tzinfo is UTC or first.created_at.utcoffset() is not None

    store.add_message(first.id, "user", "hello")
    store.add_message(first.id, "assistant", "hi")

    listed = store.list_conversations()
    assert [(c.id, c.message_count) for c in listed] == [(first.id, 2), (second.id, 0)]
    assert store.get_conversation(first.id) == listed[0]


def test_every_write_moves_the_conversation_up(store: ConversationStore) -> None:
    a = store.create_conversation("A")
    b = store.create_conversation("B")
    assert [c.id for c in store.list_conversations()] == [b.id, a.id]

    def top() -> int:
        return store.list_conversations()[0].id

    store.rename_conversation(a.id, "A renamed")
    assert top() == a.id
    store.set_conversation_model(b.id, "some-model")
    assert top() == b.id
    store.add_message(a.id, "user", "x")
    assert top() == a.id
    reply = store.start_assistant_message(b.id, model_name="m", model_sha256=SHA, sampling=SAMPLING, seed=1)
    assert top() == b.id
    store.add_message(a.id, "user", "y")
    store.flush_streaming_text(reply.id, "partial")
    assert top() == b.id
    store.add_message(a.id, "user", "z")
    store.finish_message(reply.id, content="done", status="complete")
    assert top() == b.id


def test_rename_cleans_the_title_and_refuses_an_empty_one(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    assert store.rename_conversation(conversation.id, "  Trip\nplanning  ").title == "Trip planning"
    with pytest.raises(HearthError):
        store.rename_conversation(conversation.id, " \n ")
    assert store.get_conversation(conversation.id).title == "Trip planning"


def test_missing_conversation_is_reported_everywhere(store: ConversationStore) -> None:
    with pytest.raises(ConversationNotFound):
        store.get_conversation(404)
    with pytest.raises(ConversationNotFound):
        store.rename_conversation(404, "x")
    with pytest.raises(ConversationNotFound):
        store.delete_conversation(404)
    with pytest.raises(ConversationNotFound):
        store.list_messages(404)
    with pytest.raises(ConversationNotFound):
        store.add_message(404, "user", "x")
    with pytest.raises(ConversationNotFound):
        store.start_assistant_message(404, model_name="m", model_sha256=SHA, sampling={}, seed=None)
    with pytest.raises(ConversationNotFound):
        store.export_json(404)


def test_messages_are_validated_by_the_store_and_the_schema(store: ConversationStore, db: Database) -> None:
    conversation = store.create_conversation()
    with pytest.raises(ValueError, match="role"):
        store.add_message(conversation.id, "tool", "x")
    with pytest.raises(ValueError, match="status"):
        store.add_message(conversation.id, "user", "x", status="done")
    # The CHECK constraints hold even for writes that bypass the store.
    with pytest.raises(Exception, match="CHECK constraint failed"), db.session() as session:
        session.execute(
            text(
                "INSERT INTO messages (conversation_id, role, status, created_at, updated_at) "
                "VALUES (:c, 'user', 'finished', 'x', 'x')"
            ),
            {"c": conversation.id},
        )


def test_list_messages_in_order(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    for i in range(5):
        store.add_message(conversation.id, "user" if i % 2 == 0 else "assistant", f"message {i}")
    messages = store.list_messages(conversation.id)
    assert [m.content for m in messages] == [f"message {i}" for i in range(5)]
    assert all(m.status == "complete" and m.conversation_id == conversation.id for m in messages)


def test_delete_cascades_to_messages(store: ConversationStore, db: Database) -> None:
    keep = store.create_conversation("keep")
    store.add_message(keep.id, "user", "kept")
    gone = store.create_conversation("gone")
    store.add_message(gone.id, "user", "a")
    store.add_message(gone.id, "assistant", "b")

    store.delete_conversation(gone.id)

    with db.read_session() as session:
        orphans = session.execute(
            text("SELECT count(*) FROM messages WHERE conversation_id = :c"), {"c": gone.id}
        )
        assert orphans.scalar() == 0
    assert [c.id for c in store.list_conversations()] == [keep.id]
    assert [m.content for m in store.list_messages(keep.id)] == ["kept"]


def test_streaming_reply_lifecycle(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    store.add_message(conversation.id, "user", "Tell me a story")
    reply = store.start_assistant_message(
        conversation.id, model_name="SmolLM2", model_sha256=SHA, sampling=SAMPLING, seed=None
    )
    assert (reply.status, reply.content, reply.role) == ("streaming", "", "assistant")
    assert reply.sampling == SAMPLING and reply.model_sha256 == SHA and reply.seed is None

    assert store.flush_streaming_text(reply.id, "Once upon")
    assert store.list_messages(conversation.id)[-1].content == "Once upon"

    assert store.finish_message(
        reply.id,
        content="Once upon a time.",
        status="complete",
        prompt_tokens=12,
        completion_tokens=5,
        ttft_ms=42.5,
        tokens_per_second=88.0,
        seed=1234,
    )
    final = store.list_messages(conversation.id)[-1]
    assert (final.status, final.content, final.error) == ("complete", "Once upon a time.", None)
    assert (final.prompt_tokens, final.completion_tokens, final.ttft_ms, final.tokens_per_second) == (
        12,
        5,
        42.5,
        88.0,
    )
    assert final.seed == 1234
    assert final.updated_at >= final.created_at

    # A late flush or a second finish cannot overwrite the finished reply.
    assert not store.flush_streaming_text(reply.id, "stale")
    assert not store.finish_message(reply.id, content="again", status="error", error="late")
    assert store.list_messages(conversation.id)[-1] == final


def test_finish_keeps_the_requested_seed_when_none_is_reported(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    reply = store.start_assistant_message(
        conversation.id, model_name="m", model_sha256=SHA, sampling=SAMPLING, seed=7
    )
    store.finish_message(reply.id, content="", status="error", error="model crashed")
    final = store.list_messages(conversation.id)[-1]
    assert (final.seed, final.status, final.error) == (7, "error", "model crashed")
    with pytest.raises(ValueError):
        store.finish_message(reply.id, content="", status="streaming")


def test_writes_to_a_reply_whose_conversation_was_deleted_are_ignored(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    reply = store.start_assistant_message(
        conversation.id, model_name="m", model_sha256=SHA, sampling=SAMPLING, seed=None
    )
    store.delete_conversation(conversation.id)
    assert not store.flush_streaming_text(reply.id, "text")
    assert not store.finish_message(reply.id, content="text", status="complete")
    assert store.list_conversations() == []


def test_mark_interrupted_streaming(store: ConversationStore) -> None:
    a = store.create_conversation("a")
    b = store.create_conversation("b")
    done = store.add_message(a.id, "user", "q")
    r1 = store.start_assistant_message(a.id, model_name="m", model_sha256=SHA, sampling=SAMPLING, seed=None)
    r2 = store.start_assistant_message(b.id, model_name="m", model_sha256=SHA, sampling=SAMPLING, seed=None)
    store.flush_streaming_text(r1.id, "half a rep")

    assert store.mark_interrupted_streaming() == 2
    assert store.mark_interrupted_streaming() == 0

    by_id = {m.id: m for m in store.list_messages(a.id) + store.list_messages(b.id)}
    assert by_id[done.id].status == "complete"
    assert (by_id[r1.id].status, by_id[r1.id].content) == ("interrupted", "half a rep")
    assert by_id[r1.id].error == INTERRUPTED_ERROR
    assert by_id[r2.id].status == "interrupted"


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_kill_minus_9_mid_reply_keeps_everything_flushed(db: Database, store: ConversationStore) -> None:
    conversation = store.create_conversation()
    store.add_message(conversation.id, "user", "question")
    db.dispose()
    child = textwrap.dedent(
        f"""
        import os, signal
        from pathlib import Path
        from app.conversations.store import ConversationStore
        from app.storage.db import Database

        db = Database.open(Path({str(db.path)!r}), Path({str(db.path.parent / "backups")!r}))
        store = ConversationStore(db)
        reply = store.start_assistant_message(
            {conversation.id}, model_name="m", model_sha256={SHA!r}, sampling={{}}, seed=None
        )
        store.flush_streaming_text(reply.id, "the first part")
        with db.session() as session:  # killed with a write transaction open
            session.execute(__import__("sqlalchemy").text("UPDATE messages SET content = 'torn'"))
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", child],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == -signal.SIGKILL, result.stderr.decode()

    reopened = Database.open(db.path, db.path.parent / "backups")
    try:
        survivor = ConversationStore(reopened)
        assert survivor.mark_interrupted_streaming() == 1
        messages = survivor.list_messages(conversation.id)
        assert [(m.role, m.content, m.status) for m in messages] == [
            ("user", "question", "complete"),
            ("assistant", "the first part", "interrupted"),
        ]
        assert reopened.quick_check() == "ok"
    finally:
        reopened.dispose()


def test_auto_title(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    prompt = "How do I   make\n\tsourdough bread at home without a proofing basket or a dutch oven?"
    titled = store.auto_title(conversation.id, prompt)
    assert "\n" not in titled.title and "  " not in titled.title
    assert titled.title.endswith("…") and len(titled.title) <= 61
    assert titled.title.startswith("How do I make sourdough bread")

    # Only the default title is replaced.
    assert store.auto_title(conversation.id, "something else").title == titled.title
    named = store.create_conversation("My name")
    assert store.auto_title(named.id, "a prompt").title == "My name"
    short = store.create_conversation()
    assert store.auto_title(short.id, "  Hi there ").title == "Hi there"
    blank = store.create_conversation()
    assert store.auto_title(blank.id, " \n ").title == DEFAULT_TITLE


def test_export_json_shape(store: ConversationStore) -> None:
    conversation = store.create_conversation("Export me", system_prompt="Be terse.")
    store.set_conversation_settings(conversation.id, "Be terse.", {"temperature": 0.2})
    user = store.add_message(conversation.id, "user", "Hi")
    reply = store.start_assistant_message(
        conversation.id,
        model_name="SmolLM2",
        model_sha256=SHA,
        sampling=SAMPLING,
        seed=3,
        template="gguf",
        quantization="Q4_1",
        context_note="2 earlier messages were left out to fit the 4096-token context",
    )
    store.finish_message(reply.id, content="Hello!", status="stopped", completion_tokens=2)

    exported = store.export_json(conversation.id)
    assert json.loads(json.dumps(exported)) == exported
    assert set(exported) == {"format", "version", "conversation", "messages"}
    assert (exported["format"], exported["version"]) == ("hearth.conversation", 2)
    assert exported["conversation"]["title"] == "Export me"
    assert exported["conversation"]["system_prompt"] == "Be terse."
    assert set(exported["conversation"]) == {
        "id",
        "title",
        "system_prompt",
        "created_at",
        "updated_at",
        "model_name",
        "pinned",
        "settings",
        "current_leaf_id",
    }
    assert exported["conversation"]["settings"] == {"temperature": 0.2}
    assert exported["conversation"]["current_leaf_id"] == reply.id
    first, assistant = exported["messages"]
    assert set(assistant) == {
        "id",
        "parent_id",
        "role",
        "content",
        "status",
        "error",
        "model_name",
        "model_sha256",
        "prompt_tokens",
        "completion_tokens",
        "ttft_ms",
        "tokens_per_second",
        "sampling",
        "seed",
        "template",
        "quantization",
        "context_note",
        "reasoning",
        "reasoning_seconds",
        "server_name",
        "server_url",
        "created_at",
        "updated_at",
    }
    assert (assistant["server_name"], assistant["server_url"]) == (None, None)
    assert (first["id"], first["parent_id"], first["role"], first["content"]) == (user.id, None, "user", "Hi")
    assert assistant["parent_id"] == user.id
    assert (assistant["status"], assistant["sampling"], assistant["seed"]) == ("stopped", SAMPLING, 3)
    assert (assistant["template"], assistant["quantization"]) == ("gguf", "Q4_1")
    assert assistant["context_note"].startswith("2 earlier messages")
    assert assistant["created_at"].endswith("+00:00")


def test_export_markdown(store: ConversationStore) -> None:
    conversation = store.create_conversation("Recipes", system_prompt="You are a chef.")
    store.add_message(conversation.id, "user", "Soup?")
    reply = store.start_assistant_message(
        conversation.id, model_name="SmolLM2", model_sha256=SHA, sampling=SAMPLING, seed=None
    )
    store.finish_message(reply.id, content="Boil water.", status="error", error="runner crashed")

    markdown = store.export_markdown(conversation.id)
    assert markdown.startswith("# Recipes\n")
    assert "## System prompt\n\nYou are a chef.\n" in markdown
    assert "## User\n\nSoup?\n" in markdown
    assert "## Assistant (SmolLM2)\n\nBoil water.\n" in markdown
    assert "*[error: runner crashed]*" in markdown
    assert markdown.index("Soup?") < markdown.index("Boil water.")
    assert markdown.endswith("\n") and not markdown.endswith("\n\n")


def test_two_threads_writing_while_a_third_reads(store: ConversationStore) -> None:
    conversations = [store.create_conversation(f"thread {i}") for i in range(2)]
    errors: list[BaseException] = []
    rounds = 40

    def writer(conversation_id: int) -> None:
        try:
            for i in range(rounds):
                store.add_message(conversation_id, "user", f"q{i}")
                reply = store.start_assistant_message(
                    conversation_id, model_name="m", model_sha256=SHA, sampling=SAMPLING, seed=None
                )
                store.flush_streaming_text(reply.id, f"partial {i}")
                store.finish_message(reply.id, content=f"a{i}", status="complete")
        except BaseException as exc:
            errors.append(exc)

    stop = threading.Event()

    def reader() -> None:
        try:
            while not stop.is_set():
                store.list_conversations()
                for c in conversations:
                    store.list_messages(c.id)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(c.id,)) for c in conversations]
    watcher = threading.Thread(target=reader)
    watcher.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    watcher.join()

    assert errors == []
    for c in conversations:
        messages = store.list_messages(c.id)
        assert len(messages) == 2 * rounds
        assert [m.content for m in messages if m.role == "assistant"] == [f"a{i}" for i in range(rounds)]
    assert sorted(c.message_count for c in store.list_conversations()) == [2 * rounds, 2 * rounds]


def test_conversation_ids_are_never_reused(store: ConversationStore) -> None:
    first = store.create_conversation()
    store.delete_conversation(first.id)
    assert store.create_conversation().id != first.id
