"""Conversation trees: branches in the store; regenerate and edit through the engine with the real model."""

from __future__ import annotations

import pytest
from pytestqt.qtbot import QtBot

from app.chat.engine import ChatEngine
from app.conversations.store import ConversationStore, Message
from app.core import Core
from app.errors import HearthError, MessageNotFound
from app.qt.chat_service import ChatService
from inference.protocol import SamplingParams
from tests.conftest import starter_name

SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GREEDY = SamplingParams(temperature=0.0, max_tokens=12, seed=1)
REPLY_TIMEOUT_MS = 120_000


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


def positions(messages: list[Message]) -> list[tuple[int, int]]:
    return [(m.sibling_index, m.sibling_count) for m in messages]


def reply(store: ConversationStore, conversation_id: int, text: str, parent_id: int) -> Message:
    started = store.start_assistant_message(
        conversation_id, model_name="m", model_sha256=SHA, sampling={}, seed=None, parent_id=parent_id
    )
    store.finish_message(started.id, content=text, status="complete")
    return store.get_message(started.id)


def test_messages_added_one_after_another_form_a_chain(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    added = [
        store.add_message(conversation.id, "user" if i % 2 == 0 else "assistant", f"m{i}") for i in range(4)
    ]
    assert [m.parent_id for m in added] == [None, added[0].id, added[1].id, added[2].id]
    assert positions(added) == [(1, 1)] * 4
    assert store.list_messages(conversation.id) == store.list_all_messages(conversation.id)
    assert store.get_conversation(conversation.id).current_leaf_id == added[-1].id


def test_regenerated_replies_are_alternatives_the_user_can_flip_between(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    question = store.add_message(conversation.id, "user", "Name a colour")
    first = reply(store, conversation.id, "Red", question.id)
    second = reply(store, conversation.id, "Blue", question.id)
    third = reply(store, conversation.id, "Green", question.id)

    # The newest alternative is shown, as ‹ 3/3 ›.
    shown = store.list_messages(conversation.id)
    assert contents(shown) == ["Name a colour", "Green"]
    assert positions(shown) == [(1, 1), (3, 3)]
    assert contents(store.siblings(second.id)) == ["Red", "Blue", "Green"]

    # ‹ back to 1/3, and the conversation list order does not change for a mere switch.
    before = store.get_conversation(conversation.id).updated_at
    assert contents(store.switch_to(first.id)) == ["Name a colour", "Red"]
    assert positions(store.list_messages(conversation.id)) == [(1, 1), (1, 3)]
    assert store.get_conversation(conversation.id).updated_at == before
    # A follow-up goes under the alternative being shown.
    follow = store.add_message(conversation.id, "user", "Why red?")
    assert follow.parent_id == first.id
    assert contents(store.switch_to(third.id)) == ["Name a colour", "Green"]
    assert store.get_conversation(conversation.id).message_count == 5


def test_an_edited_prompt_starts_a_branch_and_the_old_one_can_be_returned_to(
    store: ConversationStore,
) -> None:
    conversation = store.create_conversation()
    hello = store.add_message(conversation.id, "user", "Hello")
    hi = reply(store, conversation.id, "Hi!", hello.id)
    old_question = store.add_message(conversation.id, "user", "What is 2+2?")
    old_answer = reply(store, conversation.id, "4", old_question.id)
    deeper = store.add_message(conversation.id, "user", "And 3+3?")
    reply(store, conversation.id, "6", deeper.id)

    edited = store.add_message(conversation.id, "user", "What is 2+3?", parent_id=hi.id)
    reply(store, conversation.id, "5", edited.id)
    assert contents(store.list_messages(conversation.id)) == ["Hello", "Hi!", "What is 2+3?", "5"]
    assert positions(store.list_messages(conversation.id))[2] == (2, 2)

    # Back to the old prompt: the transcript descends to the newest reply below it.
    assert contents(store.switch_to(old_question.id)) == [
        "Hello",
        "Hi!",
        "What is 2+2?",
        "4",
        "And 3+3?",
        "6",
    ]
    assert contents(store.path_to(old_answer.id)) == ["Hello", "Hi!", "What is 2+2?", "4"]
    # Editing the very first prompt makes a second root.
    root = store.add_message(conversation.id, "user", "Good morning", parent_id=None)
    assert root.parent_id is None and (root.sibling_index, root.sibling_count) == (2, 2)
    assert contents(store.list_messages(conversation.id)) == ["Good morning"]
    assert len(store.list_all_messages(conversation.id)) == 9


def test_delete_removes_the_subtree_and_shows_a_remaining_alternative(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    question = store.add_message(conversation.id, "user", "Q")
    first = reply(store, conversation.id, "A1", question.id)
    second = reply(store, conversation.id, "A2", question.id)
    below = store.add_message(conversation.id, "user", "follow-up")
    reply(store, conversation.id, "deep", below.id)
    third = reply(store, conversation.id, "A3", question.id)
    store.switch_to(second.id)

    # Deleting the alternative on screen shows the one before it; its follow-ups go with it.
    path = store.delete_message(second.id)
    assert contents(path) == ["Q", "A1"] == contents(store.list_messages(conversation.id))
    assert positions(path) == [(1, 1), (1, 2)]
    assert contents(store.list_all_messages(conversation.id)) == ["Q", "A1", "A3"]
    assert store.get_conversation(conversation.id).message_count == 3
    with pytest.raises(MessageNotFound):
        store.get_message(below.id)

    # Deleting one that is not on screen leaves the transcript alone.
    assert contents(store.delete_message(third.id)) == ["Q", "A1"]
    # The only reply gone: the transcript ends at its prompt, where a new reply would go.
    assert contents(store.delete_message(first.id)) == ["Q"]
    assert (
        store.start_assistant_message(
            conversation.id, model_name="m", model_sha256=SHA, sampling={}, seed=None
        ).parent_id
        == question.id
    )
    store.delete_message(question.id)
    assert store.list_messages(conversation.id) == []
    assert store.get_conversation(conversation.id).current_leaf_id is None
    assert store.add_message(conversation.id, "user", "fresh start").parent_id is None


def test_a_long_chain_can_be_cut_near_its_root(store: ConversationStore) -> None:
    # Thousands of levels deep: a cascading delete would recurse past SQLite's trigger depth limit.
    conversation = store.create_conversation()
    first = store.add_message(conversation.id, "user", "start")
    for i in range(1500):
        store.add_message(conversation.id, "assistant" if i % 2 == 0 else "user", f"step {i}")
    assert len(store.list_messages(conversation.id)) == 1501
    assert contents(store.delete_message(store.list_messages(conversation.id)[1].id)) == ["start"]
    assert store.get_conversation(conversation.id).message_count == 1
    assert store.get_conversation(conversation.id).current_leaf_id == first.id
    store.delete_conversation(conversation.id)


def test_parents_must_belong_to_the_conversation(store: ConversationStore) -> None:
    a = store.create_conversation("a")
    b = store.create_conversation("b")
    in_a = store.add_message(a.id, "user", "x")
    with pytest.raises(MessageNotFound):
        store.add_message(b.id, "user", "y", parent_id=in_a.id)
    with pytest.raises(MessageNotFound):
        store.switch_to(999_999)
    with pytest.raises(MessageNotFound):
        store.delete_message(999_999)
    with pytest.raises(MessageNotFound):
        store.siblings(999_999)
    assert store.list_messages(b.id) == []


# With the real model ---------------------------------------------------------------------------------------


@pytest.mark.model
def test_regenerate_keeps_the_old_reply_and_answers_the_same_prompt(core: Core, engine: ChatEngine) -> None:
    name = starter_name(core)
    first = engine.run_turn("Name a fruit.", name, sampling=GREEDY)
    second = engine.regenerate(
        first.assistant_message_id, name, sampling=SamplingParams(temperature=1.5, max_tokens=12, seed=9)
    )

    assert second.status == "complete", second.error
    assert second.user_message_id == first.user_message_id
    assert second.assistant_message_id != first.assistant_message_id
    store = core.store
    assert [m.id for m in store.siblings(first.assistant_message_id)] == [
        first.assistant_message_id,
        second.assistant_message_id,
    ]
    shown = store.list_messages(first.conversation_id)
    assert [m.id for m in shown] == [first.user_message_id, second.assistant_message_id]
    assert (shown[1].sibling_index, shown[1].sibling_count) == (2, 2)
    # The same prompt, token for token, so it came straight from the KV cache.
    assert first.stats is not None and second.stats is not None
    assert second.stats.prompt_tokens is not None and second.stats.prompt_tokens == first.stats.prompt_tokens
    assert second.stats.cached_prompt_tokens == second.stats.prompt_tokens - 1
    assert store.get_message(first.assistant_message_id).content == first.text
    # A prompt can be answered again too (after its reply was deleted, say).
    third = engine.regenerate(first.user_message_id, name, sampling=GREEDY)
    assert third.text == first.text
    with pytest.raises(HearthError):
        engine.edit(first.assistant_message_id, "not mine", name)


@pytest.mark.model
def test_edit_branches_and_the_prompt_is_only_the_active_path(core: Core, engine: ChatEngine) -> None:
    name = starter_name(core)
    first = engine.run_turn("My name is Ada.", name, sampling=GREEDY)
    second = engine.run_turn("What is my name?", name, conversation_id=first.conversation_id, sampling=GREEDY)
    edited = engine.edit(first.user_message_id, "Say hello.", name, sampling=GREEDY)

    store = core.store
    assert [m.content for m in store.list_messages(first.conversation_id)] == ["Say hello.", edited.text]
    assert store.get_message(edited.user_message_id).parent_id is None
    # The edited branch's prompt holds only "Say hello.": exactly what a new chat with it would send.
    fresh = engine.run_turn("Say hello.", name, sampling=GREEDY)
    assert edited.stats is not None and fresh.stats is not None
    assert edited.stats.prompt_tokens == fresh.stats.prompt_tokens
    assert edited.text == fresh.text
    # The old branch is intact and comes back whole.
    old = store.switch_to(first.user_message_id)
    assert [m.id for m in old] == [
        first.user_message_id,
        first.assistant_message_id,
        second.user_message_id,
        second.assistant_message_id,
    ]


@pytest.mark.model
def test_chat_service_regenerate_and_edit_report_like_send(core: Core, qtbot: QtBot) -> None:
    engine = ChatEngine(core.store, core.library, core.settings_store, runner_log=core.paths.runner_log_file)
    service = ChatService(engine)
    name = starter_name(core)
    started: list[tuple[int, int, int]] = []
    service.replyStarted.connect(lambda *ids: started.append(ids))
    list_changes: list[None] = []
    service.conversationsChanged.connect(lambda: list_changes.append(None))
    try:
        with qtbot.waitSignal(service.replyFinished, timeout=REPLY_TIMEOUT_MS):
            service.send(None, "Count to three.", name, GREEDY)
        qtbot.waitUntil(lambda: not service.busy)
        (conversation,) = core.store.list_conversations()
        user, assistant = core.store.list_messages(conversation.id)

        with qtbot.waitSignal(service.replyFinished, timeout=REPLY_TIMEOUT_MS):
            service.regenerate(assistant.id, name, GREEDY)
        assert started[-1][:2] == (conversation.id, user.id) and started[-1][2] != assistant.id
        qtbot.waitUntil(lambda: not service.busy)

        with qtbot.waitSignal(service.replyFinished, timeout=REPLY_TIMEOUT_MS):
            service.edit(user.id, "Count to four.", name, GREEDY)
        new_user = started[-1][1]
        assert new_user != user.id
        assert core.store.get_message(new_user).content == "Count to four."
        qtbot.waitUntil(lambda: not service.busy)
        # The conversation list is read again once per reply, when it starts.
        assert len(list_changes) == len(started) == 3

        with qtbot.waitSignal(service.replyFailed, timeout=REPLY_TIMEOUT_MS) as failed:
            service.regenerate(999_999, name)
        assert failed.args[:2] == [-1, "invalid_request"]
        qtbot.waitUntil(lambda: not service.busy)
        assert len(list_changes) == 3
    finally:
        service.shutdown()
