"""The chat session without widgets: a real store on a real database, the chat service's reports played by
the test, and background work run when the test says (as the GUI thread would see it arrive)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from app.chat.documents import TurnDocuments
from app.chat.session import BranchLoaded, ChatSession, ReplyBegan, ReplyFailed, ReplyFinished, Request
from app.conversations.store import Conversation, ConversationStore, Message, PartInput, ReplyProvenance
from app.documents.collections import CollectionStore
from app.documents.index import ChunkIndex
from app.documents.library import Attachment
from app.settings import Settings, SettingsStore
from app.storage.db import Database
from inference.protocol import GenerationStats, StopReason

T = TypeVar("T")
STATS = GenerationStats(5, 0, 3, 0.1, 30.0, StopReason.END_OF_TURN, 1)


class Later:
    """Background work, done when the test drains it: results arrive in the order they were asked for."""

    def __init__(self) -> None:
        self._waiting: list[Callable[[], None]] = []

    def __call__(self, fn: Callable[[], T], on_done: Callable[[T], None]) -> None:
        self._waiting.append(lambda: on_done(fn()))

    def drain(self) -> None:
        while self._waiting:
            self._waiting.pop(0)()


@dataclass
class FakeChat:
    """The chat service as the session sees it: the turns it was asked for."""

    busy: bool = False
    asked: list[tuple[Any, ...]] = field(default_factory=list)

    def send(
        self,
        conversation_id: int | None,
        prompt: str,
        model_name: str,
        *,
        documents: TurnDocuments | None = None,
        tools: Sequence[str] = (),
    ) -> None:
        sent: tuple[Any, ...] = ("send", conversation_id, prompt, model_name)
        sent = sent if documents is None else (*sent, documents)
        self.asked.append(sent if not tools else (*sent, tuple(tools)))

    def regenerate(self, message_id: int, model_name: str, *, tools: Sequence[str] = ()) -> None:
        asked: tuple[Any, ...] = ("regenerate", message_id, model_name)
        self.asked.append(asked if not tools else (*asked, tuple(tools)))

    def edit(
        self,
        message_id: int,
        new_text: str,
        model_name: str,
        *,
        documents: TurnDocuments | None = None,
        tools: Sequence[str] = (),
    ) -> None:
        edited: tuple[Any, ...] = ("edit", message_id, new_text, model_name)
        edited = edited if documents is None else (*edited, documents)
        self.asked.append(edited if not tools else (*edited, tuple(tools)))


@dataclass
class Heard:
    """Everything the session said, in order."""

    events: list[tuple[str, Any]] = field(default_factory=list)

    def of(self, name: str) -> list[Any]:
        return [value for kind, value in self.events if kind == name]


@pytest.fixture
def later() -> Later:
    return Later()


@pytest.fixture
def chat() -> FakeChat:
    return FakeChat()


@pytest.fixture
def settings() -> SettingsStore:
    return SettingsStore(Settings(default_model="starter"))


@pytest.fixture
def session(
    store: ConversationStore, settings: SettingsStore, chat: FakeChat, later: Later
) -> Iterator[ChatSession]:
    made = ChatSession(store, settings, chat, later)
    made.models_listed(["starter", "other"])
    yield made


@pytest.fixture
def heard(session: ChatSession) -> Heard:
    record = Heard()
    for name in (
        "conversations_listed",
        "branch_loaded",
        "branch_synced",
        "branch_changed",
        "conversation_loaded",
        "settings_saved",
        "settings_reset",
        "editing_changed",
        "reply_began",
        "reply_noted",
        "reply_finished",
        "reply_failed",
    ):
        getattr(session, name).connect(lambda value, name=name: record.events.append((name, value)))
    return record


def _stream_into_new_chat(
    session: ChatSession, store: ConversationStore, prompt: str
) -> tuple[int, int, int]:
    """What the chat service does for a message sent from New chat: it creates the conversation."""
    conversation = store.create_conversation()
    user = store.add_message(conversation.id, "user", prompt)
    reply = store.start_assistant_message(
        conversation.id, model_name="starter", model_sha256=None, sampling={}, seed=None
    )
    session.reply_started(conversation.id, user.id, reply.id)
    return conversation.id, user.id, reply.id


def test_a_message_sent_from_new_chat_follows_the_conversation_the_service_creates(
    session: ChatSession, store: ConversationStore, chat: FakeChat, later: Later, heard: Heard
) -> None:
    session.send("Hello there")
    assert chat.asked == [("send", None, "Hello there", "starter")]
    assert session.pending == Request("send", None, "Hello there")
    assert not session.can_send("Again")

    conversation_id, user_id, reply_id = _stream_into_new_chat(session, store, "Hello there")
    assert session.pending is None and session.current_id == conversation_id
    (began,) = heard.of("reply_began")
    assert isinstance(began, ReplyBegan) and began.shown and began.reply is session.live
    assert (began.reply.user_id, began.reply.user_text, began.reply.assistant_id) == (
        user_id,
        "Hello there",
        reply_id,
    )

    session.reply_reasoning(reply_id, "A greeting.")
    session.reply_delta(reply_id, "Hi")
    session.reply_delta(reply_id + 1, "not this reply's")
    session.reply_delta(reply_id, "!")
    session.context_note(reply_id, "1 earlier message left out")
    live = began.reply.text
    assert (live.answer, live.reasoning, began.reply.note) == (
        "Hi!",
        "A greeting.",
        "1 earlier message left out",
    )
    assert heard.of("reply_noted") == [began.reply]

    store.finish_message(reply_id, content="Hi!", status="complete")
    session.reply_done(reply_id, STATS, "complete")
    assert session.live is None and not live.thinking
    assert heard.of("reply_finished") == [
        ReplyFinished(reply_id, "complete", STATS, "1 earlier message left out")
    ]
    later.drain()
    (synced,) = heard.of("branch_synced")
    assert [(m.role, m.content) for m in synced] == [("user", "Hello there"), ("assistant", "Hi!")]
    assert set(session.messages) == {user_id, reply_id}


def test_the_reply_being_written_is_shown_again_after_switching_away_and_back(
    session: ChatSession, store: ConversationStore, later: Later, heard: Heard
) -> None:
    other = store.create_conversation("Other")
    session.send("Tell me a story")
    conversation_id, _user_id, reply_id = _stream_into_new_chat(session, store, "Tell me a story")
    session.reply_delta(reply_id, "Once upon")

    session.open(other.id)
    later.drain()
    session.reply_delta(reply_id, " a time")
    session.open(conversation_id)
    later.drain()

    loaded = heard.of("branch_loaded")
    assert [(b.conversation_id, b.live) for b in loaded] == [
        (other.id, None),
        (conversation_id, session.live),
    ]
    assert loaded[1].live is not None and loaded[1].live.text.answer == "Once upon a time"


def test_a_slow_load_for_a_conversation_left_meanwhile_is_dropped(
    session: ChatSession, store: ConversationStore, later: Later, heard: Heard
) -> None:
    first, second = store.create_conversation("First"), store.create_conversation("Second")
    store.add_message(first.id, "user", "in the first")
    session.open(first.id)
    session.open(second.id)
    later.drain()
    assert [b.conversation_id for b in heard.of("branch_loaded")] == [second.id]
    assert [c.id for c in heard.of("conversation_loaded")] == [second.id]
    assert session.messages == {}


class ReadNow:
    """Background work done as soon as it is asked for, its result handed to the session when the test
    drains it: a read that reaches the GUI thread after the chat service's later reports."""

    def __init__(self) -> None:
        self._results: list[Callable[[], None]] = []

    def __call__(self, fn: Callable[[], T], on_done: Callable[[T], None]) -> None:
        result = fn()
        self._results.append(lambda: on_done(result))

    def drain(self) -> None:
        while self._results:
            self._results.pop(0)()


def _answer_with_a_call(
    store: ConversationStore, conversation_id: int, reply_id: int, call_id: str
) -> tuple[int, int]:
    """What the engine stores for a reply that called a tool, before the model answers again: the reply, the
    result, and the next reply's streaming row. Returns the result's id and the next reply's."""
    call = PartInput("tool_call", "add", text='{"a": 2, "b": 40}', call_id=call_id)
    store.finish_message(reply_id, content="Let me add.", status="complete", tool_calls=[call])
    result = store.add_tool_result(reply_id, call_id=call_id, tool_name="add", text="42")
    provenance = ReplyProvenance("starter", None, {}, None)
    turn = store.begin_turn(
        conversation_id, prompt=None, after=result.id, system_prompt=None, reply=provenance
    )
    return result.id, turn.reply.id


def test_the_results_show_with_the_next_reply_and_a_read_from_before_it_ended_is_dropped(
    store: ConversationStore, settings: SettingsStore, chat: FakeChat
) -> None:
    run = ReadNow()
    session = ChatSession(store, settings, chat, run)
    session.models_listed(["starter"])
    shown: list[tuple[str, list[tuple[str, str]], bool]] = []
    session.branch_loaded.connect(
        lambda b: shown.append(("loaded", [(m.role, m.status) for m in b.messages], b.live is not None))
    )
    session.branch_synced.connect(
        lambda messages: shown.append(("synced", [(m.role, m.status) for m in messages], False))
    )
    began: list[ReplyBegan] = []
    session.reply_began.connect(began.append)
    session.send("Add them")
    conversation_id, _user_id, first = _stream_into_new_chat(session, store, "Add them")

    # In time: the results show while the model answers them, with the reply being written.
    result, second = _answer_with_a_call(store, conversation_id, first, "c4ll0aaaa")
    session.reply_started(conversation_id, result, second)
    assert began[-1].reply.user_text is None, "a tool's result is no prompt of the user's"
    run.drain()
    branch = [("user", "complete"), ("assistant", "complete"), ("tool", "complete")]
    assert shown == [("loaded", [*branch, ("assistant", "streaming")], True)]

    # Late: read while the next reply was written, handed over after it ended; the read at its end wins.
    shown.clear()
    result, third = _answer_with_a_call(store, conversation_id, second, "c4ll0bbbb")
    session.reply_started(conversation_id, result, third)
    store.finish_message(third, content="It is 42.", status="complete")
    session.reply_done(third, STATS, "complete")
    run.drain()
    assert shown == [("synced", [*branch, *branch[1:], ("assistant", "complete")], False)]
    assert session.messages[third].status == "complete"


def test_settings_edited_before_the_first_message_create_the_chat_and_the_send_waits_for_it(
    session: ChatSession, store: ConversationStore, chat: FakeChat, later: Later, heard: Heard
) -> None:
    session.save_settings("Answer in French.", {"temperature": 0.2})
    assert session.creating
    sent: list[str] = []
    session.after_creation(lambda: sent.append("now"))
    assert sent == []

    later.drain()
    (saved,) = heard.of("settings_saved")
    assert isinstance(saved, Conversation) and session.current_id == saved.id and not session.creating
    assert (saved.system_prompt, saved.settings) == ("Answer in French.", {"temperature": 0.2})
    assert sent == ["now"]
    assert [c.id for c in heard.of("conversations_listed")[-1]] == [saved.id]

    session.send("Bonjour")
    assert chat.asked == [("send", saved.id, "Bonjour", "starter")]


def test_a_conversation_read_from_before_a_settings_edit_does_not_overwrite_it(
    store: ConversationStore, settings: SettingsStore, chat: FakeChat, later: Later
) -> None:
    unsaved = [False]
    session = ChatSession(store, settings, chat, later, unsaved_edit=lambda: unsaved[0])
    conversation = store.create_conversation()
    loaded: list[Conversation] = []
    session.conversation_loaded.connect(loaded.append)

    session.open(conversation.id)
    session.save_settings(None, {"top_k": 3})
    later.drain()
    assert loaded == []
    assert session.conversations[conversation.id].settings == {"top_k": 3}

    unsaved[0] = True
    session.open(conversation.id)
    later.drain()
    assert loaded == []
    unsaved[0] = False
    session.open(conversation.id)
    later.drain()
    assert [c.settings for c in loaded] == [{"top_k": 3}]


def test_editing_a_message_sends_a_new_version_of_it(
    session: ChatSession, store: ConversationStore, chat: FakeChat, later: Later, heard: Heard
) -> None:
    conversation = store.create_conversation()
    prompt = store.add_message(conversation.id, "user", "Waht is 2+2?")
    answer = store.add_message(conversation.id, "assistant", "4")
    session.open(conversation.id)
    later.drain()

    session.begin_edit(answer.id)
    assert session.editing is None
    session.begin_edit(prompt.id)
    assert session.editing == prompt.id and heard.of("editing_changed") == [session.messages[prompt.id]]

    session.send("What is 2+2?")
    assert chat.asked == [("edit", prompt.id, "What is 2+2?", "starter")]
    assert session.pending == Request("edit", conversation.id, "What is 2+2?", prompt.id)
    assert session.editing is None and heard.of("editing_changed")[-1] is None


def test_a_reply_that_never_started_hands_the_request_back(
    session: ChatSession, store: ConversationStore, chat: FakeChat, later: Later, heard: Heard
) -> None:
    conversation = store.create_conversation()
    message = store.add_message(conversation.id, "user", "Hi")
    session.open(conversation.id)
    later.drain()
    session.regenerate(message.id)
    assert chat.asked == [("regenerate", message.id, "starter")]

    session.reply_error(-1, "context_overflow", "Too long")
    assert session.pending is None
    assert heard.of("reply_failed") == [
        ReplyFailed(
            -1, "context_overflow", "Too long", Request("regenerate", conversation.id, "", message.id)
        )
    ]


def test_the_model_is_the_saved_default_else_the_one_chosen_else_the_first(
    session: ChatSession, settings: SettingsStore
) -> None:
    assert session.model == "starter"
    assert not session.models_listed(["other", "starter"])
    assert session.models_listed(["other", "third"]) and session.model == "other"

    saved: list[Settings] = []
    settings.changed.connect(saved.append)
    session.choose_model("third")
    assert settings.current.default_model == "third" and len(saved) == 1
    session.choose_model("third")
    assert len(saved) == 1
    # Put in the picker by code, not by the user: chosen, not remembered.
    session.choose_model("other", remember=False)
    assert session.model == "other" and settings.current.default_model == "third" and len(saved) == 1
    assert not session.models_listed(["other"]) and session.model == "other"
    assert session.models_listed([]) and session.model is None


def test_nothing_changes_the_branch_while_a_reply_is_written(
    session: ChatSession, store: ConversationStore, chat: FakeChat, later: Later, heard: Heard
) -> None:
    conversation = store.create_conversation()
    first = store.add_message(conversation.id, "user", "Hi")
    session.open(conversation.id)
    later.drain()
    chat.busy = True
    session.switch_sibling(first.id, 1)
    session.delete_message(first.id)
    session.regenerate(first.id)
    later.drain()
    assert heard.of("branch_changed") == [] and chat.asked == []

    chat.busy = False
    session.delete_message(first.id)
    later.drain()
    (changed,) = heard.of("branch_changed")
    assert list(changed.messages) == [] and session.messages == {}


def test_resetting_the_settings_of_an_open_chat(
    session: ChatSession, store: ConversationStore, later: Later, heard: Heard
) -> None:
    assert not session.reset_settings()
    conversation = store.set_conversation_settings(store.create_conversation().id, "Be brief.", {"top_k": 1})
    session.open(conversation.id)
    assert session.reset_settings()
    later.drain()
    (reset,) = heard.of("settings_reset")
    assert (reset.system_prompt, reset.settings) == (None, None)


def test_the_open_branch_is_loaded_with_the_message_to_focus(
    session: ChatSession, store: ConversationStore, later: Later, heard: Heard
) -> None:
    conversation = store.create_conversation()
    prompt = store.add_message(conversation.id, "user", "Hi")
    reply = store.add_message(conversation.id, "assistant", "Hello", parent_id=prompt.id)
    session.open(conversation.id, focus_message=prompt.id)
    later.drain()
    (loaded,) = heard.of("branch_loaded")
    assert loaded == BranchLoaded(conversation.id, loaded.messages, prompt.id, None)
    assert [m.id for m in loaded.messages] == [prompt.id, reply.id]
    assert all(isinstance(m, Message) for m in loaded.messages)


def test_attachments_go_with_a_new_message_and_come_back_if_it_never_starts(
    session: ChatSession, chat: FakeChat, heard: Heard
) -> None:
    notes = Attachment("notes.txt", "ab" * 32, "text/plain", 12, "text", None, 12)
    session.send("Summarise this", (notes,))
    assert chat.asked == [("send", None, "Summarise this", "starter", TurnDocuments((notes,)))]

    session.reply_error(-1, "context_overflow", "Too long")
    (failed,) = heard.of("reply_failed")
    assert failed.request == Request("send", None, "Summarise this", attachments=(notes,))


def test_an_edited_message_goes_with_the_files_the_window_hands_over_and_gets_them_back(
    session: ChatSession, store: ConversationStore, chat: FakeChat, later: Later, heard: Heard
) -> None:
    conversation = store.create_conversation()
    prompt = store.add_message(conversation.id, "user", "Summarise this")
    session.open(conversation.id)
    later.drain()
    notes = Attachment("notes.txt", "ab" * 32, "text/plain", 12, "text", None, 12)
    extra = Attachment("more.md", "cd" * 32, "text/markdown", 30, "markdown", None, 30)

    session.begin_edit(prompt.id)
    session.send("Summarise both", (notes, extra))
    documents = TurnDocuments((notes, extra))
    assert chat.asked == [("edit", prompt.id, "Summarise both", "starter", documents)]
    assert session.pending == Request("edit", conversation.id, "Summarise both", prompt.id, (notes, extra))

    # Never started: the request, files and all, goes back to the window to try again.
    session.reply_error(-1, "context_overflow", "Too long")
    (failed,) = heard.of("reply_failed")
    assert failed.request is not None and failed.request.attachments == (notes, extra)


def answers_from(session: ChatSession) -> tuple[str, ...]:
    """Read afresh each time (mypy would take an earlier comparison for what it still is)."""
    return session.collections


def last(items: list[T]) -> T:
    return items[-1]


def test_the_collections_chosen_are_each_chats_own_and_go_with_its_turns(
    session: ChatSession, store: ConversationStore, chat: FakeChat, later: Later
) -> None:
    shown: list[tuple[str, ...]] = []
    session.collections_changed.connect(shown.append)
    session.choose_collections(["handbook", "tides", "handbook"])
    assert answers_from(session) == ("handbook", "tides") and shown == [("handbook", "tides")]

    # Sent from New chat: the conversation the service creates answers from them from now on.
    session.send("Where is the key?")
    assert chat.asked == [
        ("send", None, "Where is the key?", "starter", TurnDocuments(collections=("handbook", "tides")))
    ]
    first, user_id, reply_id = _stream_into_new_chat(session, store, "Where is the key?")
    store.finish_message(reply_id, content="Under the pot.", status="complete")
    session.reply_done(reply_id, STATS, "complete")
    later.drain()
    assert answers_from(session) == ("handbook", "tides")

    other = store.create_conversation("Other")
    session.open(other.id)
    assert answers_from(session) == () and last(shown) == ()
    session.send("Anything?")
    assert last(chat.asked) == ("send", other.id, "Anything?", "starter")
    session.reply_error(-1, "internal", "no")

    session.new_chat()
    assert answers_from(session) == ()
    session.open(first)
    later.drain()
    assert answers_from(session) == ("handbook", "tides") and last(shown) == ("handbook", "tides")
    # An edited prompt answers from them too (it takes no new attachments).
    session.begin_edit(user_id)
    session.send("Where is the spare key?")
    assert last(chat.asked) == (
        "edit",
        user_id,
        "Where is the spare key?",
        "starter",
        TurnDocuments(collections=("handbook", "tides")),
    )
    assert session.pending is not None and session.pending.collections == ("handbook", "tides")


def test_a_collection_that_is_gone_is_no_longer_answered_from(
    session: ChatSession, store: ConversationStore
) -> None:
    shown: list[tuple[str, ...]] = []
    session.collections_changed.connect(shown.append)
    other = store.create_conversation("Other")
    session.open(other.id)
    session.choose_collections(["tides"])
    session.new_chat()
    session.choose_collections(["handbook", "tides"])

    session.keep_collections(["handbook"])
    assert answers_from(session) == ("handbook",) and last(shown) == ("handbook",)
    session.open(other.id)
    assert answers_from(session) == ()
    # Nothing changed for the open chat: nothing to tell.
    count = len(shown)
    session.keep_collections([])
    assert len(shown) == count


@pytest.fixture
def shelves(db: Database, tmp_path: Path) -> None:
    """Real collections, so the choices below are stored (names of collections that do not exist are not)."""
    notes = tmp_path / "shelf"
    notes.mkdir()
    made = CollectionStore(db, ChunkIndex(db))
    for name in ("handbook", "tides"):
        made.create(name, [notes])


@pytest.mark.usefixtures("shelves")
def test_each_chats_collections_are_stored_and_answer_after_a_restart(
    session: ChatSession, store: ConversationStore, settings: SettingsStore, chat: FakeChat, later: Later
) -> None:
    session.choose_collections(["tides", "handbook"])
    session.send("Where is the key?")
    first, _user, reply = _stream_into_new_chat(session, store, "Where is the key?")
    store.finish_message(reply, content="Under the pot.", status="complete")
    session.reply_done(reply, STATS, "complete")
    other = store.create_conversation("Other")
    session.open(other.id)
    session.choose_collections(["handbook"])
    session.choose_collections([])
    later.drain()
    assert store.get_conversation(first).collections == ("tides", "handbook")
    assert store.get_conversation(other.id).collections == ()

    # A new session on the same store, as after a restart: the list says what each chat answers from.
    restarted = ChatSession(store, settings, chat, later)
    restarted.models_listed(["starter"])
    shown: list[tuple[str, ...]] = []
    restarted.collections_changed.connect(shown.append)
    restarted.refresh_conversations()
    later.drain()
    restarted.open(first)
    assert answers_from(restarted) == ("tides", "handbook") and last(shown) == ("tides", "handbook")
    restarted.send("And the spare?")
    assert last(chat.asked) == (
        "send", first, "And the spare?", "starter", TurnDocuments(collections=("tides", "handbook"))
    )  # fmt: skip


@pytest.mark.usefixtures("shelves")
def test_a_read_from_before_a_choice_does_not_undo_it(
    session: ChatSession, store: ConversationStore, later: Later
) -> None:
    chat_id = store.create_conversation("Keys").id
    store.set_conversation_collections(chat_id, ["tides"])
    session.open(chat_id)  # its read waits in `later`
    session.choose_collections(["handbook"])
    later.drain()
    assert answers_from(session) == ("handbook",)
    assert store.get_conversation(chat_id).collections == ("handbook",)


@pytest.mark.usefixtures("shelves")
def test_a_removed_collection_leaves_the_stored_choice_of_a_chat_not_open(
    session: ChatSession, store: ConversationStore, later: Later
) -> None:
    chat_id = store.create_conversation("Keys").id
    store.set_conversation_collections(chat_id, ["tides", "handbook"])
    session.refresh_conversations()
    later.drain()
    session.keep_collections(["handbook"])
    session.open(chat_id)
    assert answers_from(session) == ("handbook",)


def calls_tools_of(session: ChatSession) -> tuple[str, ...]:
    """Read afresh each time, like answers_from."""
    return session.tools


def test_the_tool_servers_chosen_are_each_chats_own_and_go_with_every_kind_of_turn(
    session: ChatSession, store: ConversationStore, chat: FakeChat, later: Later
) -> None:
    shown: list[tuple[str, ...]] = []
    session.tools_changed.connect(shown.append)
    session.choose_tools(["maths", "files", "maths"])
    assert calls_tools_of(session) == ("maths", "files") and shown == [("maths", "files")]

    # Sent from New chat: the conversation the service creates keeps them.
    session.send("Add them")
    assert chat.asked == [("send", None, "Add them", "starter", ("maths", "files"))]
    first, user_id, reply_id = _stream_into_new_chat(session, store, "Add them")
    store.finish_message(reply_id, content="5", status="complete")
    session.reply_done(reply_id, STATS, "complete")
    later.drain()
    assert store.get_conversation(first).tools == ("maths", "files")

    other = store.create_conversation("Other")
    session.open(other.id)
    assert calls_tools_of(session) == () and last(shown) == ()
    session.send("Anything?")
    assert last(chat.asked) == ("send", other.id, "Anything?", "starter")
    session.reply_error(-1, "internal", "no")
    session.new_chat()
    assert calls_tools_of(session) == () and last(shown) == ()

    session.open(first)
    later.drain()
    assert calls_tools_of(session) == ("maths", "files") and last(shown) == ("maths", "files")
    # A reply asked for again, and an edited prompt, may call them too.
    session.regenerate(reply_id)
    assert last(chat.asked) == ("regenerate", reply_id, "starter", ("maths", "files"))
    session.reply_error(-1, "internal", "no")
    session.begin_edit(user_id)
    session.send("Add them again")
    assert last(chat.asked) == ("edit", user_id, "Add them again", "starter", ("maths", "files"))
    assert session.pending is not None and session.pending.tools == ("maths", "files")


def test_each_chats_tool_servers_are_stored_and_offered_after_a_restart(
    session: ChatSession, store: ConversationStore, settings: SettingsStore, chat: FakeChat, later: Later
) -> None:
    chat_id = store.create_conversation("Sums").id
    session.open(chat_id)
    session.choose_tools(["maths"])
    session.choose_tools(["maths", "gone"])
    later.drain()
    assert store.get_conversation(chat_id).tools == ("maths", "gone")

    restarted = ChatSession(store, settings, chat, later)
    restarted.models_listed(["starter"])
    shown: list[tuple[str, ...]] = []
    restarted.tools_changed.connect(shown.append)
    restarted.refresh_conversations()
    later.drain()
    restarted.open(chat_id)
    assert calls_tools_of(restarted) == ("maths", "gone") and last(shown) == ("maths", "gone")
    restarted.send("Add")
    assert last(chat.asked) == ("send", chat_id, "Add", "starter", ("maths", "gone"))
    restarted.reply_error(-1, "internal", "no")
    # Unticking every server is kept too: the chat offers no tools after the next restart.
    restarted.choose_tools([])
    later.drain()
    assert store.get_conversation(chat_id).tools == ()


def test_a_chat_created_from_new_chat_keeps_its_tools_when_another_was_opened_meanwhile(
    session: ChatSession, store: ConversationStore, later: Later
) -> None:
    session.choose_tools(["maths"])
    session.send("Add them")
    other = store.create_conversation("Other")
    session.open(other.id)
    created, _user, _reply = _stream_into_new_chat(session, store, "Add them")
    later.drain()
    assert store.get_conversation(created).tools == ("maths",)
    assert store.get_conversation(other.id).tools == ()
    assert calls_tools_of(session) == ()
