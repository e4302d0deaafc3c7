"""A turn writes everything before its first token in one transaction, and a failure there leaves nothing."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import event

from app.chat.engine import ChatEngine, TurnCallbacks
from app.conversations.store import ConversationStore, ReplyProvenance
from app.core import Core
from app.errors import MessageNotFound
from inference.protocol import SamplingParams
from tests.conftest import starter_name

SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
REPLY = ReplyProvenance("m", SHA, {"temperature": 0.0}, 1)


def test_a_new_chat_its_prompt_title_model_and_reply_are_written_together(store: ConversationStore) -> None:
    turn = store.begin_turn(
        None, prompt="What is a tide?", after=None, system_prompt="Be brief.", reply=REPLY
    )
    conversation = store.get_conversation(turn.conversation_id)
    assert (conversation.title, conversation.system_prompt, conversation.model_name) == (
        "What is a tide?",
        "Be brief.",
        "m",
    )
    prompt, reply = store.list_messages(turn.conversation_id)
    assert (prompt.id, prompt.role, prompt.content) == (turn.prompt_id, "user", "What is a tide?")
    assert (reply.id, reply.status, reply.parent_id, reply.model_sha256) == (
        turn.reply.id,
        "streaming",
        prompt.id,
        SHA,
    )


def test_answering_a_prompt_again_adds_only_the_reply(store: ConversationStore) -> None:
    first = store.begin_turn(None, prompt="Name a fruit.", after=None, system_prompt=None, reply=REPLY)
    store.finish_message(first.reply.id, content="Apple", status="complete")
    again = store.begin_turn(
        first.conversation_id, prompt=None, after=first.prompt_id, system_prompt=None, reply=REPLY
    )
    assert again.prompt_id == first.prompt_id
    assert [m.content for m in store.list_all_messages(first.conversation_id)] == [
        "Name a fruit.",
        "Apple",
        "",
    ]


def test_a_turn_that_fails_midway_leaves_no_conversation_and_no_prompt(store: ConversationStore) -> None:
    other = store.begin_turn(None, prompt="Elsewhere", after=None, system_prompt=None, reply=REPLY)
    before = store.list_conversations()
    # The prompt's parent belongs to another conversation: the check fails after the new conversation's
    # row and before the prompt's, inside the one transaction.
    with pytest.raises(MessageNotFound):
        store.begin_turn(None, prompt="Lost?", after=other.reply.id, system_prompt=None, reply=REPLY)
    assert store.list_conversations() == before
    assert store.search("Lost") == []


@pytest.mark.model
def test_the_engine_commits_once_before_the_first_token(
    core: Core, make_engine: Callable[..., ChatEngine]
) -> None:
    engine = make_engine()
    name = starter_name(core)
    engine.prepare(name)
    commits: list[str] = []
    event.listen(core.db.engine, "commit", lambda _connection: commits.append("commit"))
    commits_before_first_token: list[int] = []

    class FirstToken(TurnCallbacks):
        def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
            if not commits_before_first_token:
                commits_before_first_token.append(len(commits))

    result = engine.run_turn(
        "Say hello.",
        name,
        sampling=SamplingParams(temperature=0.0, max_tokens=4, seed=1),
        callbacks=FirstToken(),
    )
    # One for the turn's start and one for the first streamed text, which is stored before it is shown.
    assert commits_before_first_token == [2]
    assert core.store.get_message(result.assistant_message_id).status == "complete"
