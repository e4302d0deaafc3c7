"""The chat the window shows, without the window: which conversation is open, what was asked and not yet
answered, the reply being written, the chosen model, and the settings edits that create a new chat.

Qt-free, like napari's ViewerModel: the widgets show this state and tell it what the user did; it changes,
reads and writes through the store off the GUI thread (`run`), and says what changed through its events.
Tests drive it with a synchronous `run` and no widgets at all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from app.chat.documents import TurnDocuments
from app.chat.live_reply import LiveReply
from app.conversations.store import Conversation, ConversationStore, Message
from app.documents.library import Attachment
from app.events import Event
from app.settings import SettingsStore
from inference.protocol import GenerationStats

T = TypeVar("T")


@dataclass
class _ChatChoice:
    """Something the user chooses per chat and that is kept with its conversation (the collections it answers
    from, the tool servers it may call). `chosen` holds what was chosen in this run for each chat (None: the
    new chat, until it is created); each choice is saved with its conversation, and until it is, and for a
    read that started before it, the choice made here wins over what the store says."""

    stored: Callable[[Conversation], tuple[str, ...]]
    save: Callable[[ConversationStore, int, tuple[str, ...]], object]
    changed: Event[tuple[str, ...]]
    chosen: dict[int | None, tuple[str, ...]] = field(default_factory=dict)

    def value(self, conversation_id: int | None, conversation: Conversation | None) -> tuple[str, ...]:
        chosen = self.chosen.get(conversation_id)
        if chosen is not None:
            return chosen
        return self.stored(conversation) if conversation is not None else ()


class Run(Protocol):
    """Call `fn` off the GUI thread and hand its result to `on_done` back on it (a failure is reported by
    the runner itself, and `on_done` is not called)."""

    def __call__(self, fn: Callable[[], T], on_done: Callable[[T], None]) -> None: ...


class Chat(Protocol):
    """What the session asks of the chat service (app.qt.chat_service.ChatService): start turns."""

    @property
    def busy(self) -> bool: ...

    def send(
        self,
        conversation_id: int | None,
        prompt: str,
        model_name: str,
        *,
        documents: TurnDocuments | None = None,
        tools: Sequence[str] = (),
    ) -> object: ...

    def regenerate(self, message_id: int, model_name: str, *, tools: Sequence[str] = ()) -> object: ...

    def edit(
        self,
        message_id: int,
        new_text: str,
        model_name: str,
        *,
        documents: TurnDocuments | None = None,
        tools: Sequence[str] = (),
    ) -> object: ...


@dataclass(frozen=True)
class Request:
    """What the user asked the chat service for, until it answers with replyStarted or replyFailed."""

    kind: str  # "send" | "regenerate" | "edit"
    conversation_id: int | None
    text: str = ""
    target: int | None = None
    # The files sent with a new message or a new version of one (stored already), handed back with the
    # prompt if it never starts.
    attachments: tuple[Attachment, ...] = ()
    # The collections the chat answered from, and the tool servers it could call, when it was asked.
    collections: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()


@dataclass
class StreamingReply:
    """The reply being written: where it goes, the prompt it answers, and its text (held only here)."""

    conversation_id: int
    user_id: int
    user_text: str | None
    assistant_id: int
    text: LiveReply = field(default_factory=LiveReply)
    # What the overflow policy left out of its prompt.
    note: str | None = None


@dataclass(frozen=True)
class BranchLoaded:
    """The open conversation's current branch, read afresh; `focus` is the message to show."""

    conversation_id: int
    messages: Sequence[Message]
    focus: int | None
    # The reply being written in this conversation: newer than the database's copy of it.
    live: StreamingReply | None


@dataclass(frozen=True)
class BranchChanged:
    """The branch the store just switched to or changed; `focus` is to be kept in view."""

    messages: Sequence[Message]
    focus: int | None


@dataclass(frozen=True)
class ReplyBegan:
    reply: StreamingReply
    request: Request
    # The reply belongs to the open conversation (else it is written out of sight).
    shown: bool


@dataclass(frozen=True)
class ReplyFinished:
    assistant_id: int
    status: str
    stats: GenerationStats
    note: str | None


@dataclass(frozen=True)
class ReplyFailed:
    assistant_id: int  # -1: the reply never started
    kind: str
    message: str
    # What the user asked, when the reply never started: the prompt goes back into the composer.
    request: Request | None


class ChatSession:
    def __init__(
        self,
        store: ConversationStore,
        settings: SettingsStore,
        chat: Chat,
        run: Run,
        *,
        unsaved_edit: Callable[[], bool] = lambda: False,
    ) -> None:
        """`unsaved_edit`: whether the settings being edited have changes not handed to the session yet (a
        conversation read from before them would overwrite them)."""
        self._store = store
        self._settings = settings
        self._chat = chat
        self._run = run
        self._unsaved_edit = unsaved_edit

        self.current_id: int | None = None
        # Bumped on every conversation switch so a slow load for a previous one is dropped.
        self._load_generation = 0
        # Bumped on every re-read of the open branch: one that arrives after a later one was asked for read
        # the store before it, maybe while a reply since ended was still being written.
        self._sync_generation = 0
        self.messages: dict[int, Message] = {}
        self.conversations: dict[int, Conversation] = {}
        self.pending: Request | None = None
        self.live: StreamingReply | None = None
        # The user message being edited: the next send makes a new version of it.
        self.editing: int | None = None
        self.model: str | None = None
        # A chat created for settings edited before its first message; sends wait for it.
        self._creating = False
        self._after_creation: list[Callable[[], None]] = []
        # Counts settings edits, so a conversation read from before an edit does not overwrite it.
        self._settings_edits = 0

        self.conversations_listed: Event[Sequence[Conversation]] = Event()
        self.branch_loaded: Event[BranchLoaded] = Event()
        # Re-read after a reply, without moving the view.
        self.branch_synced: Event[Sequence[Message]] = Event()
        self.branch_changed: Event[BranchChanged] = Event()
        # The open conversation as stored, for its settings (not sent while an edit is waiting).
        self.conversation_loaded: Event[Conversation] = Event()
        self.settings_saved: Event[Conversation] = Event()
        self.settings_reset: Event[Conversation] = Event()
        # The message now being edited, or None when editing ended.
        self.editing_changed: Event[Message | None] = Event()
        # The collections the open chat answers from, and the tool servers (MCP) whose tools the model may
        # call in it, whenever they or the open chat change.
        self.collections_changed: Event[tuple[str, ...]] = Event()
        self.tools_changed: Event[tuple[str, ...]] = Event()
        self._collections = _ChatChoice(
            lambda c: c.collections, ConversationStore.set_conversation_collections, self.collections_changed
        )
        self._tools = _ChatChoice(
            lambda c: c.tools, ConversationStore.set_conversation_tools, self.tools_changed
        )
        self._choices = (self._collections, self._tools)
        self.reply_began: Event[ReplyBegan] = Event()
        self.reply_noted: Event[StreamingReply] = Event()
        self.reply_finished: Event[ReplyFinished] = Event()
        self.reply_failed: Event[ReplyFailed] = Event()

    @property
    def creating(self) -> bool:
        return self._creating

    def current_conversation(self) -> Conversation | None:
        return self.conversations.get(self.current_id) if self.current_id else None

    def streaming_in(self, conversation_id: int) -> bool:
        return self.live is not None and self.live.conversation_id == conversation_id

    # -- conversations ----------------------------------------------------------------------------

    def refresh_conversations(self) -> None:
        self._run(self._store.list_conversations, self._listed)

    def _listed(self, conversations: Sequence[Conversation]) -> None:
        # The current conversation may be missing from a list read just before the chat service created
        # it; it stays current (only deleting it ends it) and is selected next time.
        before = self._chosen_now()
        self.conversations = {c.id: c for c in conversations}
        self.conversations_listed.emit(conversations)
        self._choices_read(before)

    def new_chat(self) -> None:
        self.current_id = None
        self._load_generation += 1
        self.messages = {}
        self.cancel_edit()
        for choice in self._choices:
            choice.chosen.pop(None, None)
            choice.changed.emit(())

    def open(self, conversation_id: int, focus_message: int | None = None) -> None:
        """With `focus_message`, switch to the branch holding it (unless a reply is being written there)."""
        switched = conversation_id != self.current_id
        if switched:
            self.cancel_edit()
        self.current_id = conversation_id
        self._load_generation += 1
        if switched:
            for choice in self._choices:
                choice.changed.emit(self._value(choice))
        generation = self._load_generation
        store = self._store
        streaming_here = self.streaming_in(conversation_id)

        def load() -> list[Message]:
            # Switching branches under a reply being written would move its siblings; show it as it is.
            if focus_message is not None and not streaming_here:
                return store.switch_to(focus_message)
            return store.list_messages(conversation_id)

        def loaded(messages: list[Message]) -> None:
            if generation != self._load_generation:
                return
            self.messages = {m.id: m for m in messages}
            live = self.live if self.streaming_in(conversation_id) else None
            self.branch_loaded.emit(BranchLoaded(conversation_id, messages, focus_message, live))

        self._run(load, loaded)
        edits = self._settings_edits
        self._run(
            lambda: store.get_conversation(conversation_id),
            lambda conversation: self._conversation_read(conversation, edits),
        )

    def _conversation_read(self, conversation: Conversation, edits: int) -> None:
        if conversation.id != self.current_id:
            return
        # An edit made while this was loading is newer than what was read; it is (being) saved.
        if edits == self._settings_edits and not self._unsaved_edit():
            before = self._chosen_now()
            self.conversations[conversation.id] = conversation
            self.conversation_loaded.emit(conversation)
            self._choices_read(before)

    def refresh_current(self) -> None:
        """Re-read the open branch (sibling counts, provenance) once no reply is being written."""
        conversation_id = self.current_id
        if conversation_id is None:
            return
        generation = self._load_generation
        self._sync_generation += 1
        sync = self._sync_generation

        def synced(messages: list[Message]) -> None:
            if generation != self._load_generation or sync != self._sync_generation or self.live is not None:
                return
            self.messages = {m.id: m for m in messages}
            self.branch_synced.emit(messages)

        store = self._store
        self._run(lambda: store.list_messages(conversation_id), synced)

    def _branch_changed(self, messages: Sequence[Message], focus: int | None) -> None:
        self.messages = {m.id: m for m in messages}
        self.branch_changed.emit(BranchChanged(messages, focus))

    def switch_sibling(self, message_id: int, step: int) -> None:
        """Show the previous (-1) or next (1) version of a message, and the branch that follows it."""
        if self._chat.busy:
            return
        store = self._store

        def switch() -> tuple[int, list[Message]]:
            siblings = store.siblings(message_id)
            ids = [s.id for s in siblings]
            index = ids.index(message_id) + step if message_id in ids else 0
            target = ids[max(0, min(len(ids) - 1, index))]
            return target, store.switch_to(target)

        self._run(switch, lambda found: self._branch_changed(found[1], found[0]))

    def can_delete_message(self, message_id: int) -> bool:
        return message_id in self.messages and not self._chat.busy

    def delete_message(self, message_id: int) -> None:
        """The message and everything after it on this branch; other versions stay."""
        if not self.can_delete_message(message_id):
            return
        store = self._store
        self._run(lambda: store.delete_message(message_id), lambda path: self._branch_changed(path, None))

    # -- the chat's own settings -----------------------------------------------------------------

    def save_settings(self, system_prompt: str | None, values: dict[str, Any]) -> None:
        """For the open chat; with none open, a new chat is created now so its first message uses them."""
        self._settings_edits += 1
        store = self._store
        conversation_id = self.current_id
        if conversation_id is not None:
            self._run(
                lambda: store.set_conversation_settings(conversation_id, system_prompt, values),
                self._settings_saved,
            )
            return
        self._creating = True

        def create() -> Conversation:
            conversation = store.create_conversation()
            return store.set_conversation_settings(conversation.id, system_prompt, values)

        def created(conversation: Conversation) -> None:
            self._creating = False
            if self.current_id is None:
                self.current_id = conversation.id
                self._load_generation += 1
                self._adopt_new_chat_choices(conversation.id)
            self._settings_saved(conversation)
            self.refresh_conversations()
            waiting, self._after_creation = self._after_creation, []
            for step in waiting:
                step()

        self._run(create, created)

    def after_creation(self, step: Callable[[], None]) -> None:
        """Do `step` once the chat being created for edited settings exists."""
        self._after_creation.append(step)

    def _settings_saved(self, conversation: Conversation) -> None:
        self.conversations[conversation.id] = conversation
        self.settings_saved.emit(conversation)

    def reset_settings(self) -> bool:
        """Back to the defaults; False when no chat is open (there is nothing stored to reset)."""
        conversation_id = self.current_id
        if conversation_id is None:
            return False
        store = self._store

        def reset(conversation: Conversation) -> None:
            self.conversations[conversation.id] = conversation
            self.settings_reset.emit(conversation)

        self._run(lambda: store.set_conversation_settings(conversation_id, None, {}), reset)
        return True

    # -- the model -------------------------------------------------------------------------------

    def models_listed(self, names: Sequence[str]) -> bool:
        """The models that can be chosen changed: keep the saved default, else the one chosen, else the
        first. Returns whether the choice changed."""
        before = self.model
        wanted = [name for name in (self._settings.current.default_model, before) if name in names]
        self.model = wanted[0] if wanted else names[0] if names else None
        return self.model != before

    def choose_model(self, name: str | None, *, remember: bool = True) -> None:
        """`remember`: the user chose it, so it is the default from now on."""
        self.model = name
        if remember and name is not None and name != self._settings.current.default_model:
            self._settings.update(default_model=name)

    # -- what the chat answers from and may call ---------------------------------------------------

    @property
    def collections(self) -> tuple[str, ...]:
        """What the open chat answers from: chosen in this run, else as stored with the conversation."""
        return self._value(self._collections)

    @property
    def tools(self) -> tuple[str, ...]:
        """The MCP servers whose tools the model may call in the open chat, chosen in this run, else as
        stored with the conversation."""
        return self._value(self._tools)

    def choose_collections(self, names: Sequence[str]) -> None:
        """The open chat's next turns answer from these collections (none: from no collection), and so it
        does after a restart."""
        self._choose(self._collections, names)

    def choose_tools(self, names: Sequence[str]) -> None:
        """The model may call these servers' tools in the open chat's next turns (none: no tools), and so
        it may after a restart."""
        self._choose(self._tools, names)

    def keep_collections(self, existing: Sequence[str]) -> None:
        """Only these collections exist now: a chat stops answering from one that was removed (the store
        forgets it by itself, with the collection)."""
        before = self.collections
        kept = set(existing)
        chosen = self._collections.chosen
        for key, names in list(chosen.items()):
            chosen[key] = tuple(name for name in names if name in kept)
        for conversation in list(self.conversations.values()):
            if any(name not in kept for name in conversation.collections):
                remaining = tuple(name for name in conversation.collections if name in kept)
                self.conversations[conversation.id] = replace(conversation, collections=remaining)
        if self.collections != before:
            self.collections_changed.emit(self.collections)

    def _value(self, choice: _ChatChoice) -> tuple[str, ...]:
        return choice.value(self.current_id, self.current_conversation())

    def _choose(self, choice: _ChatChoice, names: Sequence[str]) -> None:
        chosen = tuple(dict.fromkeys(names))
        choice.chosen[self.current_id] = chosen
        if self.current_id is not None:
            self._save_choice(choice, self.current_id, chosen)
        choice.changed.emit(chosen)

    def _adopt_new_chat_choices(self, conversation_id: int) -> None:
        for choice in self._choices:
            chosen = choice.chosen.pop(None, None)
            if chosen:
                choice.chosen[conversation_id] = chosen
                self._save_choice(choice, conversation_id, chosen)

    def _save_choice(self, choice: _ChatChoice, conversation_id: int, names: tuple[str, ...]) -> None:
        store = self._store
        self._run(lambda: choice.save(store, conversation_id, names), lambda _saved: None)

    def _chosen_now(self) -> tuple[tuple[str, ...], ...]:
        return tuple(self._value(choice) for choice in self._choices)

    def _choices_read(self, before: tuple[tuple[str, ...], ...]) -> None:
        """Conversations were read from the store: the open chat may answer from the collections, and call
        the tools, stored with it."""
        for choice, was in zip(self._choices, before, strict=True):
            now = self._value(choice)
            if now != was:
                choice.changed.emit(now)

    # -- asking ----------------------------------------------------------------------------------

    def can_send(self, prompt: str) -> bool:
        return bool(prompt.strip()) and not self._chat.busy and self.pending is None

    def send(self, prompt: str, attachments: tuple[Attachment, ...] = ()) -> None:
        """The composer's text, as a new message or (while editing) a new version of one, with the files
        attached to it: while editing, those of the edited message (`editing_changed` hands them to the
        window, app.chat.documents.prompt_attachments) as the user left them. The collections the chat
        answers from go with both."""
        assert self.model is not None and self.can_send(prompt) and not self._creating
        collections, tools = self.collections, self.tools
        documents = TurnDocuments(attachments, collections) if attachments or collections else None
        if self.editing is not None:
            target = self.editing
            self.cancel_edit()
            self.pending = Request("edit", self.current_id, prompt, target, attachments, collections, tools)
            self._chat.edit(target, prompt, self.model, documents=documents, tools=tools)
        else:
            self.pending = Request(
                "send", self.current_id, prompt, attachments=attachments, collections=collections, tools=tools
            )
            self._chat.send(self.current_id, prompt, self.model, documents=documents, tools=tools)

    def regenerate(self, message_id: int) -> None:
        if self.model is None or self._chat.busy or self.pending is not None:
            return
        tools = self.tools
        self.pending = Request("regenerate", self.current_id, "", message_id, tools=tools)
        self._chat.regenerate(message_id, self.model, tools=tools)

    def begin_edit(self, message_id: int) -> None:
        message = self.messages.get(message_id)
        if message is None or message.role != "user":
            return
        self.editing = message_id
        self.editing_changed.emit(message)

    def cancel_edit(self) -> None:
        if self.editing is None:
            return
        self.editing = None
        self.editing_changed.emit(None)

    # -- the reply, as the chat service reports it ------------------------------------------------

    def reply_started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        tool_round = self.live is not None and self.live.conversation_id == conversation_id
        if tool_round:
            # The model answers again after its tool calls: the reply before and the results are stored.
            self._end_reply()
        request = self.pending or Request("send", conversation_id)
        self.pending = None
        # After a tool round the reply follows the last result, which is no prompt of the user's.
        user_text = request.text if request.kind in ("send", "edit") and not tool_round else None
        self.live = StreamingReply(conversation_id, user_message_id, user_text, assistant_message_id)
        if self.current_id is None and request.conversation_id is None:
            # Sent from "New chat": the session follows the conversation the service just created.
            self.current_id = conversation_id
            self._load_generation += 1
            self._adopt_new_chat_choices(conversation_id)
        elif request.conversation_id is None:
            # Another chat was opened meanwhile: the one created still answers from what it was sent with.
            for choice, sent in ((self._collections, request.collections), (self._tools, request.tools)):
                if sent and conversation_id not in choice.chosen:
                    choice.chosen[conversation_id] = sent
                    self._save_choice(choice, conversation_id, sent)
        self.reply_began.emit(ReplyBegan(self.live, request, conversation_id == self.current_id))
        if tool_round and conversation_id == self.current_id:
            self._show_tool_results(self.live)

    def _show_tool_results(self, live: StreamingReply) -> None:
        """Re-read the branch `live` follows (the reply that made the calls, their results) and show it with
        `live`. A re-read that only arrives once `live` has ended is dropped: it may hold `live` as still
        being written, and the re-read at its end (refresh_current) follows it."""
        generation = self._load_generation
        store = self._store

        def read(messages: list[Message]) -> None:
            if generation != self._load_generation or self.live is not live:
                return
            self.messages = {m.id: m for m in messages}
            self.branch_loaded.emit(BranchLoaded(live.conversation_id, messages, None, live))

        self._run(lambda: store.list_messages(live.conversation_id), read)

    def _streaming(self, assistant_message_id: int) -> LiveReply | None:
        live = self.live
        return live.text if live is not None and live.assistant_id == assistant_message_id else None

    def reply_delta(self, assistant_message_id: int, text: str) -> None:
        reply = self._streaming(assistant_message_id)
        if reply is not None:
            reply.append_answer(text)

    def reply_reasoning(self, assistant_message_id: int, text: str) -> None:
        reply = self._streaming(assistant_message_id)
        if reply is not None:
            reply.append_reasoning(text)

    def answer_was_reasoning(self, assistant_message_id: int) -> None:
        reply = self._streaming(assistant_message_id)
        if reply is not None:
            reply.answer_was_reasoning()

    def context_note(self, assistant_message_id: int, note: str) -> None:
        live = self.live
        if live is not None and live.assistant_id == assistant_message_id:
            live.note = note
            self.reply_noted.emit(live)

    def reply_done(self, assistant_message_id: int, stats: GenerationStats, status: str) -> None:
        note = self.live.note if self.live is not None else None
        self._end_reply()
        self.reply_finished.emit(ReplyFinished(assistant_message_id, status, stats, note))
        self.refresh_current()

    def reply_error(self, assistant_message_id: int, kind: str, message: str) -> None:
        request, self.pending = self.pending, None
        self._end_reply()
        self.reply_failed.emit(ReplyFailed(assistant_message_id, kind, message, request))
        self.refresh_current()

    def _end_reply(self) -> None:
        if self.live is not None:
            self.live.text.finish()
        self.live = None
