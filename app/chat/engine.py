"""One chat turn, start to finish, without Qt: used by the CLI directly and by the GUI's worker thread."""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.chat.context_fit import Fitted, check_policy, fit, reply_reserve
from app.chat.documents import (
    PreparedDocuments,
    TurnDocuments,
    as_the_model_read_it,
    budget,
    images_of,
    local_image_refusal,
    prepare,
)
from app.chat.reasoning import DEFAULT_MARKERS, ReasoningMarkers, ReplyText, Split, markers_for_template
from app.chat.runner_queue import Job, RunnerQueue
from app.chat.tool_rounds import ModelCall, ToolApprover, answer_call, calls_at_the_end, split_tool_calls
from app.conversations.store import (
    Conversation,
    ConversationStore,
    Message,
    PartInput,
    ReplyProvenance,
    TurnStart,
)
from app.documents.chunking import estimate_tokens
from app.documents.library import DocumentLibrary
from app.errors import (
    ContextOverflow,
    DatabaseError,
    HearthError,
    ModelNotFound,
    NoModelLoaded,
    ReplyNotSaved,
)
from app.images.prepare import ImageSizing
from app.library.installed import InstalledModel, ModelLibrary
from app.library.model_ops import installed_load_plan
from app.metrics import LiveState, Metrics, Source
from app.remote.openai_client import StreamCancel, request_sampling
from app.remote.registry import ContextSource, Server, ServerRegistry
from app.settings import GLOBAL_SAMPLING, Settings, SettingsStore
from app.storage.orm import MessageStatus
from app.tools.chat import Approval, ToolRequest, ToolSet
from inference.client import RunnerClient, RunnerError
from inference.ggml_backends import CpuKernelMemory
from inference.gguf import GGUFError, GGUFHeader, read_header
from inference.hardware import HardwareReport, llama_backend, probe_hardware
from inference.planner import smaller_plan
from inference.projector import ProjectorResize, projector_info
from inference.protocol import (
    SAMPLING_SETTINGS,
    ChatMessage,
    ErrorKind,
    Failed,
    Finished,
    GenerateRequest,
    GenerationStats,
    Loaded,
    LoadPlan,
    PromptReady,
    SamplingParams,
    StopReason,
    TokenCount,
    TokenDelta,
    ToolCallRecord,
    ToolSpec,
)
from inference.tool_calls import ToolCallFormat, ToolCallParser, tool_call_format

log = logging.getLogger("hearth.engine")

# The streaming reply is written to the database when its first text arrives (before that text is shown)
# and then this often, so a crash loses at most the text shown since the last write.
FLUSH_INTERVAL_S = 0.3
FINAL_WRITE_ATTEMPTS = 5
FINAL_WRITE_BACKOFF_S = 0.5
NO_DOCUMENTS = TurnDocuments()


class ModelState(enum.StrEnum):
    UNLOADED = "unloaded"
    LOADING = "loading"
    READY = "ready"
    FAILED = "failed"


@dataclass(frozen=True)
class ModelStatus:
    model_name: str | None
    state: ModelState
    backend: str
    summary: str
    detail: str = ""
    # Which CPU kernels llama.cpp runs on and why, for the status bar's tooltip ("" before a model loads).
    kernels: str = ""


@dataclass(frozen=True)
class TurnResult:
    conversation_id: int
    user_message_id: int
    assistant_message_id: int
    status: MessageStatus  # the reply's: never STREAMING
    text: str
    stats: GenerationStats | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    context_note: str | None = None  # what the overflow policy left out of the prompt, if anything
    reasoning: str | None = None  # what the model thought before answering (stored apart from `text`)


@dataclass(frozen=True)
class GenerationSettings:
    """What a reply is generated with, after layering conversation > model defaults > global settings."""

    sampling: SamplingParams
    context_length: int
    system_prompt: str | None


@dataclass(frozen=True)
class ContextUsage:
    # The whole prompt as the next Send would make it (history, draft, its documents), counted by the
    # model's tokenizer with its template, or estimated for a server's model.
    used_tokens: int
    context_tokens: int  # the loaded context length, or the server's (see ServerRegistry.context_for)
    would_drop_messages: int  # how many earlier messages drop_oldest would leave out (0 under "refuse")
    policy: str  # Settings.overflow_policy
    reserve_tokens: int = 0  # kept free for the reply
    fits: bool = True  # used_tokens + reserve_tokens fit without leaving anything out
    # Of used_tokens, what documents take: the draft's attachments and earlier prompts' files that go in
    # again whole, with their framing.
    document_tokens: int = 0
    # The draft's attachments too long to go whole: searched at Send, and only passages go in. Of
    # document_tokens, `passage_tokens` is the most those passages can take (they are not looked up here).
    searched: tuple[str, ...] = ()
    passage_tokens: int = 0
    # The collections the chat answers from: searched at Send too, their passages within passage_tokens.
    collections: tuple[str, ...] = ()
    # Of used_tokens, what the definitions of the tools offered take (those of servers running now).
    tool_tokens: int = 0
    # A server's model: counted with app.documents.chunking.estimate_tokens (its tokenizer is not here);
    # `context_source` says where its context length comes from. None for a local model.
    context_source: ContextSource | None = None

    @property
    def estimated(self) -> bool:
        return self.context_source is not None


class TurnCallbacks:
    """Override what you need; the engine calls these from the thread running the turn."""

    def started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        pass

    def context_note(self, assistant_message_id: int, note: str) -> None:
        """Called right after `started` when the overflow policy left earlier messages out of the prompt,
        and again, with the whole note, when the reply is cut off because the context ran out."""

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        """Answer text (empty when the tokens were reasoning, or text held back at a possible marker)."""

    def reasoning_delta(self, assistant_message_id: int, text: str) -> None:
        """Reasoning text, called before `delta` for the same tokens."""

    def answer_was_reasoning(self, assistant_message_id: int) -> None:
        """The answer text given so far was reasoning after all (a closing marker came with no opening
        one): it now belongs in front of the reasoning. Called before that delta's `reasoning_delta`."""

    def model_status(self, status: ModelStatus) -> None:
        pass

    def approve_tool(self, request: ToolRequest) -> Approval:
        """Asked before each call the model makes, on the turn's thread (never the GUI's). Unless it is
        answered, no tool runs: the model is told the call was not allowed."""
        return Approval.DENY

    def tool_result(self, tool_message_id: int, call: ToolCallRecord, text: str, is_error: bool) -> None:
        """A call's result, stored as a tool message; the next reply follows it."""


def _estimate(messages: Sequence[ChatMessage]) -> int:
    """A server's prompt, estimated: its tokenizer and template are not here."""
    return sum(estimate_tokens(m.content) for m in messages)


def _joined_notes(*notes: str | None) -> str | None:
    return " ".join(note for note in notes if note) or None


def _tools_note(tools: ToolSet | None) -> str | None:
    """The tool servers that could not be used this turn, said with the reply they were missing from."""
    return " ".join(tools.problems) if tools is not None and tools.problems else None


def _configuration(plan: LoadPlan) -> str:
    layers = f"{plan.n_gpu_layers}/{plan.n_layers} GPU layers and " if plan.n_gpu_layers > 0 else ""
    return f"{layers}a {plan.n_ctx:,}-token context"


def _memory_note(planned: LoadPlan, loaded: LoadPlan) -> str:
    """What the user gave up for the model to fit, in one sentence; "" when the plan loaded as made."""
    changes = []
    if loaded.n_ctx != planned.n_ctx:
        changes.append(f"a {loaded.n_ctx:,}-token context instead of {planned.n_ctx:,}")
    if loaded.n_gpu_layers != planned.n_gpu_layers:
        changes.append(
            f"{min(loaded.n_gpu_layers, loaded.n_layers)} of {loaded.n_layers} layers on the GPU instead of "
            f"{min(planned.n_gpu_layers, planned.n_layers)}"
        )
    return f"Loaded with {' and '.join(changes)}: not enough memory." if changes else ""


class ToolsNotTaken(HearthError):
    """Tools for a model whose chat template takes none."""


def _no_tools(model_name: str) -> str:
    return (
        f"{model_name} cannot use tools: its chat template takes none (it never reads a list of tools). "
        "Models whose templates do include Qwen 2.5 and 3, Llama 3.1 and later, Mistral's, Hermes, gpt-oss."
    )


def _projector_resize(model: InstalledModel) -> ProjectorResize | None:
    if model.projector is None:
        return None
    try:
        return projector_info(read_header(model.projector.path)).resize
    except (GGUFError, OSError) as exc:  # the runner loaded it a moment ago: only a file changed since
        log.warning("%s: the projector's header could not be read again: %s", model.name, exc)
        return None


def history_for_prompt(
    messages: list[Message],
    documents: DocumentLibrary | None = None,
    *,
    images: ImageSizing | None = None,
) -> list[ChatMessage]:
    """Earlier turns as the model should see them: failed replies with no text are left out, and a prompt's
    attachments that went in whole go in again, with its images sized by `images` for a model that can see
    (None: one that cannot)."""
    return [
        ChatMessage(
            m.role,
            as_the_model_read_it(m, documents) if m.role == "user" else m.content,
            images_of(m, documents, images) if images is not None and m.role == "user" else (),
            tool_calls=tuple(
                ToolCallRecord(p.call_id or "", p.name or "", p.text or "{}") for p in m.tool_calls
            ),
            tool_call_id=m.tool_result.call_id if m.tool_result is not None else None,
            tool_name=m.tool_result.name if m.tool_result is not None else None,
        )
        for m in messages
        if m.role in ("user", "tool") or (m.role in ("system", "assistant") and (m.content or m.tool_calls))
    ]


class ChatEngine:
    def __init__(
        self,
        store: ConversationStore,
        library: ModelLibrary,
        settings: SettingsStore,
        *,
        runner_log: Path | None = None,
        cpu_kernels_file: Path | None = None,
        hardware: HardwareReport | None = None,
        servers: ServerRegistry | None = None,
        documents: DocumentLibrary | None = None,
    ) -> None:
        self.store = store
        self.documents = documents
        self.library = library
        # Read at each use, never copied: a change in the window applies to the next turn.
        self.settings_store = settings
        self.hardware = hardware or probe_hardware()
        # Models named SERVER/MODEL are answered by that OpenAI-compatible server, not the runner.
        self.servers = servers
        self._client = RunnerClient(runner_log, kernel_memory=CpuKernelMemory(cpu_kernels_file))
        self._model: InstalledModel | None = None
        self._context_length: int | None = None  # what the loaded model was asked for (the plan may cap it)
        self._memory_note = ""  # what the load gave up because memory ran out, said to the user
        self._loading = False  # a load is under way (read from the local API's threads)
        # Declared by the loaded model's template; None when it names none.
        self._reasoning_markers: ReasoningMarkers | None = None
        # How the loaded vision model's projector resizes pictures, read from its header at load.
        self._projector_resize: ProjectorResize | None = None
        # How the loaded model writes tool calls, from its template; None: its template takes no tools.
        self._tool_format: ToolCallFormat | None = None
        # The tools the turn running on this thread offers: its prompt is counted with them. Per thread:
        # several turns and requests share the runner at once, each on its own thread.
        self._turn = threading.local()
        # Per conversation, the (server, tool) pairs the user allowed for the rest of the chat.
        self._allowed_tools: dict[int, set[tuple[str, str]]] = {}
        # GUI turns, measurements, loads and local server requests take the runner in the order they ask:
        # parallel_slots requests at once, and the window's turn beside them (RunnerQueue).
        self._queue = RunnerQueue(places=lambda: self.settings.parallel_slots)
        self._remote_server: Server | None = None  # the server the last remote turn went to, for status()
        # Final writes of replies that failed (a full disk): written before the next turn, and at close.
        self._unsaved: dict[int, Callable[[], object]] = {}
        # For the local API's GET /metrics: here, not in the server, so that the window's turns are counted
        # while no server runs, and the counts outlast servers and loaded models.
        self.metrics = Metrics(self._live_state)

    @property
    def settings(self) -> Settings:
        return self.settings_store.current

    @property
    def client(self) -> RunnerClient:
        return self._client

    @property
    def loaded(self) -> Loaded | None:
        return self._client.loaded

    def default_sampling(self) -> SamplingParams:
        return SamplingParams(**{name: getattr(self.settings, name) for name in GLOBAL_SAMPLING})

    def generation_settings(self, conversation: Conversation | None, model_name: str) -> GenerationSettings:
        """The conversation's own settings, else the model's defaults, else the global settings. The context
        length set in the model's load settings comes after the conversation's and before the rest."""
        layered: dict[str, Any] = {**dataclasses.asdict(self.default_sampling())}
        layered["context_length"] = self.settings.context_length
        model_defaults = self.settings.model_defaults.get(model_name, {})
        layered.update({k: v for k, v in model_defaults.items() if k != "system_prompt"})
        model_context = self._model_context_length(model_name)
        if model_context is not None:
            layered["context_length"] = model_context
        if conversation is not None and conversation.settings:
            layered.update(conversation.settings)
        system = conversation.system_prompt if conversation is not None else None
        return GenerationSettings(
            sampling=SamplingParams(**{name: layered[name] for name in SAMPLING_SETTINGS}),
            context_length=int(layered["context_length"]),
            system_prompt=system if system is not None else model_defaults.get("system_prompt"),
        )

    def _model_context_length(self, model_name: str) -> int | None:
        try:
            return self.library.get(model_name).load_settings.context_length
        except ModelNotFound:
            return None  # a model on a server, or one removed since: the load says so, not the settings

    def sampling_for(self, conversation_id: int | None, model_name: str) -> SamplingParams:
        conversation = self.store.get_conversation(conversation_id) if conversation_id is not None else None
        return self.generation_settings(conversation, model_name).sampling

    def status(self) -> ModelStatus:
        server = self._remote_server
        if server is not None:
            return ModelStatus(None, ModelState.READY, "Remote", f"Remote · {server.name}", server.url)
        loaded, model = self._client.loaded, self._model
        if loaded is None or model is None:
            backend, why = llama_backend()
            return ModelStatus(None, ModelState.UNLOADED, backend, f"{backend} · no model loaded", why)
        plan = self._client.plan
        notes = (self._memory_note, loaded.template_note, self._client.kernel_note, loaded.draft_note)
        return ModelStatus(
            model.name,
            ModelState.READY,
            loaded.backend,
            plan.reason.split(";")[0] if plan else loaded.backend,
            " ".join(note for note in notes if note),
            f"CPU kernels: {loaded.cpu_kernels} ({loaded.cpu_kernels_reason})" if loaded.cpu_kernels else "",
        )

    def ensure_loaded(
        self,
        model_name: str,
        callbacks: TurnCallbacks | None = None,
        *,
        context_length: int | None = None,
        job: Job | None = None,
    ) -> Loaded:
        """Blocking. Loads the model (for `context_length`, default: the model's setting, else the global
        one) unless a live runner already has it loaded for that context length, load settings and number
        of parallel replies. `job`: the job sharing the runner that asks, which has it alone for the load
        (RunnerQueue.alone)."""
        model = self.library.get(model_name)
        context_length = context_length or model.load_settings.context_length or self.settings.context_length
        was_remote, self._remote_server = self._remote_server is not None, None
        loaded = self._loaded_as(model, context_length)
        if loaded is None:
            with self._queue.alone(job):
                # Another job may have loaded it while this one waited.
                loaded = self._loaded_as(model, context_length) or self._load_model(
                    model, context_length, callbacks
                )
                return loaded
        if was_remote and callbacks is not None:
            callbacks.model_status(self.status())
        return loaded

    def _loaded_as(self, model: InstalledModel, context_length: int) -> Loaded | None:
        loaded, plan = self._client.loaded, self._client.plan
        if (
            loaded is not None
            and plan is not None
            and self._model is not None
            and self._model.sha256 == model.sha256
            and self._model.projector == model.projector
            and self._context_length == context_length
            and self._model.load_settings == model.load_settings
            and plan.n_parallel == self.settings.replies_at_once
        ):
            return loaded
        return None

    def _load_model(
        self, model: InstalledModel, context_length: int, callbacks: TurnCallbacks | None
    ) -> Loaded:
        if not Path(model.path).is_file():
            raise ModelNotFound(f"The file for model '{model.name}' is missing: {model.path}")
        try:
            header = read_header(Path(model.path))
        except GGUFError as exc:
            raise HearthError(f"Model '{model.name}' is not a valid GGUF file: {exc}") from exc
        backend, _ = llama_backend()
        plan = installed_load_plan(
            model,
            model.load_settings,
            self.settings,
            self.hardware,
            library=self.library,
            context_length=context_length,
            header=header,
        )
        notify = callbacks.model_status if callbacks else (lambda _status: None)
        notify(ModelStatus(model.name, ModelState.LOADING, backend, f"Loading {model.name}…", plan.reason))
        self._model = None
        self._loading = True
        try:
            loaded, used = self._load(model, header, plan, backend, notify)
        finally:
            self._loading = False
        self._memory_note = _memory_note(plan, used)
        self._model = model
        self._context_length = context_length
        self._reasoning_markers = markers_for_template(header.chat_template)
        self._projector_resize = _projector_resize(model)
        self._tool_format = tool_call_format(header.chat_template)
        self.library.mark_loaded(model.name)
        self.library.clear_load_error(model.name)
        notify(self.status())
        log.info("loaded %s: %s (%.2f s)", model.name, used.reason, loaded.load_seconds)
        if used.experts_on_cpu:
            # What llama.cpp did with the override, for a report about a slow or failed MoE load.
            log.info("%s: %d expert tensors in system memory", model.name, loaded.host_expert_tensors)
        return loaded

    def _load(
        self,
        model: InstalledModel,
        header: GGUFHeader,
        plan: LoadPlan,
        backend: str,
        notify: Callable[[ModelStatus], None],
    ) -> tuple[Loaded, LoadPlan]:
        """Load `plan`; out of memory, retry with fewer GPU layers, then a smaller context, until one fits.

        Returns what loaded and the plan it loaded with. Raises HearthError when nothing fits or the load
        failed for another reason.
        """
        while True:
            try:
                return self._client.load(plan), plan
            except RunnerError as exc:
                smaller = smaller_plan(plan, header) if exc.kind is ErrorKind.OUT_OF_MEMORY else None
                if smaller is None:
                    if exc.kind is ErrorKind.RUNNER_CRASHED:
                        self._runner_crashed(model.name, exc.message)
                    summary = f"{model.name} failed to load"
                    notify(ModelStatus(model.name, ModelState.FAILED, backend, summary, exc.message))
                    raise HearthError(f"Could not load '{model.name}': {exc.message}") from exc
                log.warning("%s: %s; retrying: %s", model.name, exc.message, smaller.reason)
                detail = f"Not enough memory for {_configuration(plan)}; trying {_configuration(smaller)}."
                notify(ModelStatus(model.name, ModelState.LOADING, backend, f"Loading {model.name}…", detail))
                plan = smaller

    def _runner_crashed(self, model_name: str, message: str) -> None:
        """The runner died (or was stopped for not answering) with `model_name` loaded or loading: nothing is
        loaded now, and the model is not loaded again on its own at the next start, until a load succeeds."""
        self.library.mark_load_error(model_name, message)
        self._model = None

    def remote_target(self, model_name: str) -> tuple[Server, str] | None:
        """The server and its model for `SERVER/MODEL`; None for a local model. Raises HearthError for an
        unknown server."""
        if self.servers is None:
            return None
        return self.servers.resolve(model_name)

    def prepare(self, model_name: str, callbacks: TurnCallbacks | None = None) -> None:
        """Blocking. Get ready to answer with `model_name`: load a local model; for a model on a server,
        nothing to load (the status says which server answers). Waits its turn for the runner."""
        with self._queue.turn(Job()):
            target = self.remote_target(model_name)
            if target is None:
                self.ensure_loaded(model_name, callbacks)
                return
            self._remote_server = target[0]
            if callbacks is not None:
                callbacks.model_status(self.status())

    def release_model(self, path: Path) -> bool:
        """Blocking, in turn with replies: stop the runner if it has the file at `path` loaded, so the file
        can be deleted (Windows refuses to delete a mapped file; elsewhere its disk space would stay in use
        until the runner ended). Returns whether it was loaded; the next turn starts a fresh runner.

        By path, not by bytes: a copy with the same bytes as the loaded model is not loaded again, so the
        runner never maps it."""
        with self._queue.turn(Job()):
            if self._model is None or Path(self._model.path) != Path(path):
                return False
            self._client.close()
            self._model = None
            self._context_length = None
            return True

    def model_to_autoload(self) -> tuple[str | None, str]:
        """The model to load at start-up, or None and why not."""
        models = self.library.list_models()
        preferred = self.settings.default_model
        candidates = [m for m in models if m.name == preferred] or models
        if not candidates:
            return None, "No models installed."
        model = candidates[0]
        if model.last_load_error:
            why = f"it crashed last time ({model.last_load_error})"
            return None, f"{model.name} was not loaded automatically: {why}"
        return model.name, ""

    def run_turn(
        self,
        prompt: str,
        model_name: str,
        *,
        conversation_id: int | None = None,
        system_prompt: str | None = None,
        sampling: SamplingParams | None = None,
        callbacks: TurnCallbacks | None = None,
        documents: TurnDocuments | None = None,
        tools: ToolSet | None = None,
    ) -> TurnResult:
        """Store the user's message after the current leaf, stream the reply into the database and return
        how it ended. With `tools`, the model may call them: each call the user allows (approve_tool) runs,
        its result is stored as a tool message, and the model replies again after it, up to the
        tool_rounds setting; the result is the last reply's.

        Raises HearthError, with nothing stored, when the conversation or the model is unusable or the
        conversation does not fit the context under the "refuse" policy (ContextOverflow): the caller still
        holds the prompt (the GUI puts it back in the composer), so a retry cannot duplicate it.
        """
        # A Stop pressed from here on, even while the model loads, ends this turn; pressed while it waits for
        # the runner, the turn gives up its place (JobCancelled) and nothing is stored.
        job = Job(interactive=True)
        with self._queue.share(job):
            existing = self.store.get_conversation(conversation_id) if conversation_id is not None else None
            path = self.store.list_messages(existing.id) if existing is not None else []
            return self._reply(
                job,
                model_name,
                existing,
                path,
                prompt=prompt,
                system_prompt=system_prompt,
                sampling=sampling,
                callbacks=callbacks or TurnCallbacks(),
                documents=documents or TurnDocuments(),
                tools=tools,
            )

    def regenerate(
        self,
        message_id: int,
        model_name: str,
        *,
        sampling: SamplingParams | None = None,
        callbacks: TurnCallbacks | None = None,
        tools: ToolSet | None = None,
    ) -> TurnResult:
        """Answer the same prompt again: a new reply beside the old one, which stays as an alternative.

        Given a prompt instead of a reply, answers that prompt again. The result's user_message_id is the
        existing prompt. `tools` as for run_turn.
        """
        job = Job(interactive=True)
        with self._queue.share(job):
            target = self.store.get_message(message_id)
            prompt_id = target.parent_id if target.role == "assistant" else target.id
            if target.role == "system" or prompt_id is None:
                raise HearthError("Only a reply to a prompt, or a prompt itself, can be answered again.")
            conversation = self.store.get_conversation(target.conversation_id)
            return self._reply(
                job,
                model_name,
                conversation,
                self.store.path_to(prompt_id),
                prompt=None,
                system_prompt=None,
                sampling=sampling,
                callbacks=callbacks or TurnCallbacks(),
                tools=tools,
            )

    def edit(
        self,
        message_id: int,
        new_text: str,
        model_name: str,
        *,
        sampling: SamplingParams | None = None,
        callbacks: TurnCallbacks | None = None,
        documents: TurnDocuments | None = None,
        tools: ToolSet | None = None,
    ) -> TurnResult:
        """Ask again with different words: a new prompt beside the edited one (a new branch), then a reply.

        The edited prompt and everything that followed it stay, on their own branch. `documents` go with the
        new prompt: the window passes the edited prompt's files again, less those the user took off and
        with those added (app.chat.documents.prompt_attachments), and the collections the chat answers from.
        """
        job = Job(interactive=True)
        with self._queue.share(job):
            target = self.store.get_message(message_id)
            if target.role != "user":
                raise HearthError("Only your own messages can be edited; regenerate a reply instead.")
            conversation = self.store.get_conversation(target.conversation_id)
            path = self.store.path_to(target.parent_id) if target.parent_id is not None else []
            return self._reply(
                job,
                model_name,
                conversation,
                path,
                prompt=new_text,
                system_prompt=None,
                sampling=sampling,
                callbacks=callbacks or TurnCallbacks(),
                documents=documents or NO_DOCUMENTS,
                tools=tools,
            )

    def measure_context(
        self,
        conversation_id: int | None,
        draft_text: str,
        model_name: str,
        callbacks: TurnCallbacks | None = None,
        *,
        documents: TurnDocuments | None = None,
        replacing: int | None = None,
        tools: Sequence[ToolSpec] = (),
    ) -> ContextUsage:
        """How much of the context the conversation plus the draft and its `documents` would use, as the next
        Send would see it: the same plan as the turn's, except that files too long to go whole are not
        searched (the most their passages can take is counted instead). `replacing`: the user message being
        edited, whose new version follows what it followed. `tools`: the definitions the turn would offer.

        Loads a local model if needed: the count comes from its own template and tokenizer. A server's
        model is estimated, against the context ServerRegistry.context_for gives.
        """
        documents = documents or NO_DOCUMENTS
        job = Job()
        with self._queue.share(job, generates=False):
            conversation = (
                self.store.get_conversation(conversation_id) if conversation_id is not None else None
            )
            resolved = self.generation_settings(conversation, model_name)
            path = self._path_for_draft(conversation, replacing)
            # Attached files count before anything is typed: the user sees what they cost.
            draft = draft_text if draft_text.strip() or not documents.empty else None
            target = self.remote_target(model_name)
            if target is not None:
                return self._measure_remote(target, resolved, path, draft, documents, tools)
            self.ensure_loaded(model_name, callbacks, context_length=resolved.context_length, job=job)
            system = resolved.system_prompt
            messages = self._prompt_messages(system, path, draft, images=self._local_images())
            max_tokens = resolved.sampling.max_tokens
            # Counted as the turn counts them: with the tools its template is given (a model that takes no
            # tools refuses them at Send, and here counts none).
            self._turn.offered_tools = tuple(tools) if self._tool_format is not None else ()
            try:
                prepared, fitted = self._plan_local(
                    messages, draft, documents, max_tokens, bool(system), search=False
                )
                plain = self._prompt_messages(system, path, draft, with_documents=False)
                document_tokens = fitted.used_tokens - self._count(plain).n_tokens if plain != messages else 0
                offered, self._turn.offered_tools = self._turn.offered_tools, ()
                tool_tokens = fitted.used_tokens - self._count(messages).n_tokens if offered else 0
            finally:
                self._turn.offered_tools = ()
            policy = self.settings.overflow_policy
            context = prepared.context if prepared is not None else None
            return ContextUsage(
                used_tokens=fitted.used_tokens,
                context_tokens=fitted.context_tokens,
                would_drop_messages=fitted.dropped if policy == "drop_oldest" and fitted.fits else 0,
                policy=policy,
                reserve_tokens=fitted.reserve_tokens,
                fits=fitted.used_tokens + fitted.reserve_tokens <= fitted.context_tokens,
                document_tokens=document_tokens,
                searched=context.searched_attachments if context else (),
                passage_tokens=context.unsearched_tokens if context else 0,
                collections=documents.collections,
                tool_tokens=tool_tokens,
            )

    def _path_for_draft(self, conversation: Conversation | None, replacing: int | None) -> list[Message]:
        """The messages the draft follows: the open branch, or what the message being edited followed."""
        if conversation is None:
            return []
        if replacing is not None:
            edited = self.store.get_message(replacing)
            if edited.conversation_id == conversation.id and edited.role == "user":
                return self.store.path_to(edited.parent_id) if edited.parent_id is not None else []
        return self.store.list_messages(conversation.id)

    def _measure_remote(
        self,
        target: tuple[Server, str],
        resolved: GenerationSettings,
        path: list[Message],
        draft: str | None,
        documents: TurnDocuments,
        tools: Sequence[ToolSpec],
    ) -> ContextUsage:
        assert self.servers is not None
        server, remote_model = target
        context = self.servers.context_for(server, remote_model)
        max_tokens = resolved.sampling.max_tokens
        listed = self._prompt_messages(resolved.system_prompt, path, draft)
        prepared = self._plan_remote_documents(
            listed, draft, documents, context.tokens, max_tokens, search=False
        )
        unsearched = prepared.context.unsearched_tokens if prepared is not None else 0
        tool_tokens = sum(estimate_tokens(f"{t.name} {t.description} {t.parameters_json}") for t in tools)
        used = _estimate(listed) + unsearched + tool_tokens
        plain = self._prompt_messages(resolved.system_prompt, path, draft, with_documents=False)
        return ContextUsage(
            used_tokens=used,
            context_tokens=context.tokens,
            # The server is sent the whole conversation: it keeps or refuses it, Hearth leaves nothing out.
            would_drop_messages=0,
            policy=self.settings.overflow_policy,
            reserve_tokens=max_tokens,
            fits=used + max_tokens <= context.tokens,
            document_tokens=used - tool_tokens - _estimate(plain),
            searched=prepared.context.searched_attachments if prepared is not None else (),
            passage_tokens=unsearched,
            collections=documents.collections,
            tool_tokens=tool_tokens,
            context_source=context.source,
        )

    def _reply(
        self,
        job: Job,
        model_name: str,
        conversation: Conversation | None,
        path: list[Message],
        *,
        prompt: str | None,
        system_prompt: str | None,
        sampling: SamplingParams | None,
        callbacks: TurnCallbacks,
        documents: TurnDocuments = NO_DOCUMENTS,
        tools: ToolSet | None = None,
    ) -> TurnResult:
        """Reply after `path` (root → the message to follow), adding the user's `prompt` first if given,
        with the documents it comes with, and the tools the model may call."""
        self._save_unsaved()
        target = self.remote_target(model_name)
        refusal = (
            local_image_refusal(self.library, model_name, [a.name for a in documents.images])
            if target is None and documents.images
            else None
        )
        if refusal is not None:
            # Before anything is stored or loaded: the prompt stays with the caller.
            raise HearthError(refusal)
        if target is not None:
            return self._reply_remote(
                job,
                target,
                model_name,
                conversation,
                path,
                prompt=prompt,
                system_prompt=system_prompt,
                sampling=sampling,
                callbacks=callbacks,
                documents=documents,
                tools=tools,
            )
        resolved = self.generation_settings(conversation, model_name)
        sampling = sampling or resolved.sampling
        self.ensure_loaded(model_name, callbacks, context_length=resolved.context_length, job=job)
        model = self._model
        assert model is not None
        if tools is not None and self._tool_format is None:
            raise ToolsNotTaken(_no_tools(model.name))
        self._turn.offered_tools = tools.specs if tools is not None else ()
        try:
            return self._reply_local(
                job,
                model,
                conversation,
                path,
                prompt,
                system_prompt,
                resolved,
                sampling,
                callbacks,
                documents,
                tools,
            )
        finally:
            self._turn.offered_tools = ()

    def _reply_local(
        self,
        job: Job,
        model: InstalledModel,
        conversation: Conversation | None,
        path: list[Message],
        prompt: str | None,
        system_prompt: str | None,
        resolved: GenerationSettings,
        sampling: SamplingParams,
        callbacks: TurnCallbacks,
        documents: TurnDocuments,
        tools: ToolSet | None,
    ) -> TurnResult:
        system = system_prompt if system_prompt is not None else resolved.system_prompt
        messages = self._prompt_messages(system, path, prompt, images=self._local_images())
        prepared, fitted = self._plan_local(
            messages, prompt, documents, sampling.max_tokens, bool(system), search=True
        )
        self._check_policy(fitted)
        note = _joined_notes(prepared.context.note if prepared else None, fitted.note(), _tools_note(tools))
        provenance = ReplyProvenance(
            model.name,
            model.sha256,
            dataclasses.asdict(sampling),
            sampling.seed,
            template=fitted.template_source,
            quantization=model.quantization,
            context_note=note,
        )
        turn = self._begin_turn(conversation, path, prompt, system_prompt, provenance, prepared)
        conversation_id, user_id, assistant = turn.conversation_id, turn.prompt_id, turn.reply
        callbacks.started(conversation_id, user_id, assistant.id)
        if note:
            callbacks.context_note(assistant.id, note)
        approver = ToolApprover(
            callbacks.approve_tool, self._allowed_tools.setdefault(conversation_id, set())
        )
        rounds = 0
        while True:
            # The last round offers no tools: the model answers with what it has.
            offered = tools.specs if tools is not None and rounds < self.settings.tool_rounds else ()
            request = GenerateRequest(uuid.uuid4().hex, fitted.messages, sampling, tools=offered)
            markers = self._reasoning_markers
            reply = ReplyText(markers or DEFAULT_MARKERS, lone_close=markers is not None)
            kernels = self._client.kernels
            calls: list[ModelCall] = []
            events = self.metrics.metered(Source.WINDOW, self._generate(request, job))
            if offered:
                assert self._tool_format is not None
                events = split_tool_calls(events, ToolCallParser(self._tool_format), calls)
            result = self._stream(
                conversation_id, user_id, assistant.id, events, reply, callbacks, note=note, calls=calls
            )
            if self._client.kernels != kernels:
                # The runner crashed on this CPU's kernels and answered on safer ones: say so once.
                callbacks.model_status(self.status())
            if not calls or result.status is not MessageStatus.COMPLETE or tools is None:
                return result
            rounds += 1
            after = self._answer_calls(assistant.id, calls, tools, approver, callbacks)
            if job.cancelled:  # Stop pressed while the tools ran: the results are kept
                return result
            # The model replies again, after the results: the prompt is the conversation up to them.
            path = self.store.path_to(after)
            messages = self._prompt_messages(system, path, None, images=self._local_images())
            fitted = fit(messages, bool(system), sampling.max_tokens, self._count)
            try:
                self._check_policy(fitted)
            except ContextOverflow as exc:
                # The prompt and the results are stored already: the turn ends with them, it is not undone.
                log.warning("no reply after the tool results: %s", exc)
                return result
            turn = self._begin_turn(
                self.store.get_conversation(conversation_id),
                path,
                None,
                system_prompt,
                dataclasses.replace(provenance, template=fitted.template_source, context_note=fitted.note()),
            )
            assistant, note = turn.reply, None
            callbacks.started(conversation_id, after, assistant.id)

    def _begin_turn(
        self,
        conversation: Conversation | None,
        path: list[Message],
        prompt: str | None,
        system_prompt: str | None,
        reply: ReplyProvenance,
        prepared: PreparedDocuments | None = None,
    ) -> TurnStart:
        # Explicit parents: the reply follows exactly the messages its prompt was built from, even if the
        # user switches branches meanwhile.
        return self.store.begin_turn(
            conversation.id if conversation else None,
            prompt=prompt,
            after=path[-1].id if path else None,
            system_prompt=system_prompt,
            reply=reply,
            prompt_parts=prepared.prompt_parts if prepared else (),
            reply_parts=prepared.reply_parts if prepared else (),
        )

    def _plan_local(
        self,
        messages: list[ChatMessage],
        prompt: str | None,
        documents: TurnDocuments,
        max_tokens: int,
        has_system: bool,
        *,
        search: bool,
    ) -> tuple[PreparedDocuments | None, Fitted]:
        """The turn's documents planned into what the context has left, by the loaded model's own tokenizer,
        put into the prompt (`messages`' last), and the prompt fitted into the context. The turn and the
        context meter both plan here; the meter does not `search`, and counts the most the passages can take
        in their place."""
        prepared = self._prepare_documents(messages, prompt, documents, max_tokens, search=search)
        if prepared is not None and prompt is not None:
            messages[-1] = ChatMessage("user", prepared.prompt(prompt), prepared.images)
        unsearched = prepared.context.unsearched_tokens if prepared is not None else 0

        def count(candidate: Sequence[ChatMessage]) -> TokenCount:
            counted = self._count(candidate)
            return dataclasses.replace(counted, n_tokens=counted.n_tokens + unsearched)

        return prepared, fit(messages, has_system, max_tokens, count if unsearched else self._count)

    def _prepare_documents(
        self,
        messages: list[ChatMessage],
        prompt: str | None,
        documents: TurnDocuments,
        max_tokens: int,
        *,
        search: bool,
    ) -> PreparedDocuments | None:
        if prompt is None or documents.empty:
            return None
        counted = self._count(messages)
        reserve = reply_reserve(counted.n_ctx, max_tokens)
        framing = self._count([ChatMessage("user", "")]).n_tokens

        def count_tokens(text: str) -> int:
            return self._count([ChatMessage("user", text)]).n_tokens - framing

        assert self._model is not None
        return prepare(
            self.documents,
            documents,
            prompt,
            budget_tokens=budget(counted.n_ctx, counted.n_tokens, reserve),
            count_tokens=count_tokens,
            search=search,
            pdf_pages=self._model.vision and self._pdf_pages(documents),
            sizing=self._local_images() or ImageSizing(self.settings.image_max_side),
        )

    def _local_images(self) -> ImageSizing | None:
        """How pictures are sized for the loaded model: no larger than its projector resizes them to; None
        when it cannot see."""
        if self._model is None or not self._model.vision:
            return None
        return ImageSizing(self.settings.image_max_side, self._projector_resize)

    def _pdf_pages(self, documents: TurnDocuments) -> bool:
        return documents.pdf_pages if documents.pdf_pages is not None else self.settings.pdf_pages_as_images

    def _plan_remote_documents(
        self,
        listed: list[ChatMessage],
        prompt: str | None,
        documents: TurnDocuments,
        context_tokens: int,
        max_tokens: int,
        *,
        search: bool,
    ) -> PreparedDocuments | None:
        """For a server's model: the documents planned into what its context leaves after the prompt and the
        whole reply (the server refuses a prompt plus max_tokens over its context), by an estimate of their
        tokens, and put into the prompt (`listed`' last). The turn and the context meter both plan here."""
        if prompt is None or documents.empty:
            return None
        prepared = prepare(
            self.documents,
            documents,
            prompt,
            budget_tokens=budget(context_tokens, _estimate(listed), max_tokens),
            count_tokens=estimate_tokens,
            search=search,
            pdf_pages=self._pdf_pages(documents),
            sizing=ImageSizing(self.settings.image_max_side),
        )
        if prepared is not None:
            listed[-1] = ChatMessage("user", prepared.prompt(prompt))
        return prepared

    def _reply_remote(
        self,
        job: Job,
        target: tuple[Server, str],
        model_name: str,
        conversation: Conversation | None,
        path: list[Message],
        *,
        prompt: str | None,
        system_prompt: str | None,
        sampling: SamplingParams | None,
        callbacks: TurnCallbacks,
        documents: TurnDocuments,
        tools: ToolSet | None = None,
    ) -> TurnResult:
        """The same turn answered by a server: no local load and no token count (the server enforces its
        own context; documents are planned for its context, ServerRegistry.context_for, with an estimate of
        their tokens). A server that cannot be reached or refuses the request raises RemoteError before
        anything is stored, like an unusable local model. Tools go as OpenAI's `tools`, and the calls come
        back in `tool_calls`; the rounds are the local turn's."""
        assert self.servers is not None
        server, remote_model = target
        resolved = self.generation_settings(conversation, model_name)
        sampling = sampling or resolved.sampling
        system = system_prompt if system_prompt is not None else resolved.system_prompt
        # A server's model may see: earlier prompts' images go again (the server says if it cannot).
        listed = self._prompt_messages(system, path, prompt, images=ImageSizing(self.settings.image_max_side))
        prepared = None
        if prompt is not None and not documents.empty:
            # Asked only for documents: a turn without them has nothing to plan (the server keeps the rest).
            context = self.servers.context_for(server, remote_model)
            prepared = self._plan_remote_documents(
                listed, prompt, documents, context.tokens, sampling.max_tokens, search=True
            )
            if prepared is not None and prepared.images:
                listed[-1] = dataclasses.replace(listed[-1], images=prepared.images)
        messages = tuple(listed)
        self._remote_server = server
        callbacks.model_status(self.status())
        # What the server was sent: it applies its own defaults for the rest.
        provenance = ReplyProvenance(
            model_name,
            None,
            request_sampling(sampling),
            sampling.seed,
            server_name=server.name,
            server_url=server.url,
            context_note=_joined_notes(prepared.context.note if prepared else None, _tools_note(tools)),
        )
        client = self.servers.client(server)
        # Stop shuts the stream in progress down at once.
        cancel = StreamCancel()
        with job.stopping(cancel.cancel):
            rounds = 0
            approver: ToolApprover | None = None
            while True:
                offered = tools.specs if tools is not None and rounds < self.settings.tool_rounds else ()
                request_id = uuid.uuid4().hex
                stream = client.chat(
                    remote_model,
                    messages,
                    sampling,
                    request_id=request_id,
                    cancel=cancel,
                    tools=offered,
                )
                try:
                    # Stored once the server took the request: one that refuses it leaves nothing new behind.
                    turn = self._begin_turn(conversation, path, prompt, system_prompt, provenance, prepared)
                    conversation_id, user_id, assistant = turn.conversation_id, turn.prompt_id, turn.reply
                    callbacks.started(conversation_id, user_id, assistant.id)
                    if provenance.context_note:
                        callbacks.context_note(assistant.id, provenance.context_note)
                    # Servers send `reasoning_content` wrapped in <think> … </think>; a server that pre-fills
                    # <think> for an R1 model but streams its raw text sends only the closing marker.
                    reply = ReplyText(DEFAULT_MARKERS)
                    calls: list[ModelCall] = []
                    events = calls_at_the_end(stream, calls)
                    result = self._stream(
                        conversation_id, user_id, assistant.id, events, reply, callbacks, calls=calls
                    )
                finally:
                    stream.close()
                if not calls or result.status is not MessageStatus.COMPLETE or tools is None:
                    return result
                rounds += 1
                if approver is None:
                    approver = ToolApprover(
                        callbacks.approve_tool, self._allowed_tools.setdefault(conversation_id, set())
                    )
                after = self._answer_calls(assistant.id, calls, tools, approver, callbacks)
                if job.cancelled:
                    return result
                path = self.store.path_to(after)
                sizing = ImageSizing(self.settings.image_max_side)
                messages = tuple(self._prompt_messages(system, path, None, images=sizing))
                # The next reply follows the results: no new prompt, its documents and note were the first's.
                conversation = self.store.get_conversation(conversation_id)
                prompt, prepared = None, None
                provenance = dataclasses.replace(provenance, context_note=None)

    def _answer_calls(
        self,
        after: int,
        calls: Sequence[ModelCall],
        tools: ToolSet,
        approver: ToolApprover,
        callbacks: TurnCallbacks,
    ) -> int:
        """Blocking: ask about, run and store each call's result after the reply that made it, in order;
        returns the last result's message id (the next reply follows it)."""
        for call in calls:
            outcome = answer_call(call, tools, approver)
            stored = self.store.add_tool_result(
                after,
                call_id=call.record.id,
                tool_name=call.record.name,
                text=outcome.text,
                is_error=outcome.is_error,
            )
            callbacks.tool_result(stored.id, call.record, outcome.text, outcome.is_error)
            after = stored.id
        return after

    def _prompt_messages(
        self,
        system: str | None,
        path: list[Message],
        prompt: str | None,
        *,
        with_documents: bool = True,
        images: ImageSizing | None = None,
    ) -> list[ChatMessage]:
        """Without documents: earlier prompts without the files that go in again (what they cost is the
        difference). With `images`: earlier prompts' pictures, for a model that may see them."""
        messages = [ChatMessage("system", system)] if system else []
        documents = self.documents if with_documents else None
        messages += history_for_prompt(path, documents, images=images)
        if prompt is not None:
            messages.append(ChatMessage("user", prompt))
        return messages

    def _count(self, messages: Sequence[ChatMessage]) -> TokenCount:
        try:
            return self._client.count_tokens(tuple(messages), getattr(self._turn, "offered_tools", ()))
        except RunnerError as exc:
            model = self._model  # read once: a reply beside this one may see the crash first
            if exc.kind is ErrorKind.RUNNER_CRASHED and model is not None:
                self._runner_crashed(model.name, exc.message)
            raise HearthError(f"Could not measure the prompt: {exc.message}") from exc

    def _check_policy(self, fitted: Fitted) -> None:
        check_policy(fitted, self.settings.overflow_policy)

    def _stream(
        self,
        conversation_id: int,
        user_id: int,
        assistant_id: int,
        events: Iterator[PromptReady | TokenDelta | Finished | Failed],
        reply: ReplyText,
        callbacks: TurnCallbacks,
        *,
        note: str | None = None,
        calls: Sequence[ModelCall] = (),
    ) -> TurnResult:
        """Stream the reply from `events` (the runner's or a server's) into the database, split into answer
        and reasoning by `reply`. `note` is what the overflow policy left out of the prompt. `calls`: the
        tool calls taken out of the events' text (split_tool_calls), complete once they end; a reply that
        finishes is stored with them."""
        last_flush = time.monotonic()
        first_text_written = False
        outcome: Finished | Failed | None = None
        for event in events:
            if isinstance(event, PromptReady):
                reply.parser.after_prompt(event.prompt_end)
            elif isinstance(event, TokenDelta):
                split = reply.feed(event.text)
                now = time.monotonic()
                first = not first_text_written and bool(split.answer or split.reasoning)
                # The first text is written before it is shown: after a crash, a reply the user saw any of
                # is not stored empty (unless the disk refused that write).
                if first or now - last_flush >= FLUSH_INTERVAL_S:
                    self._flush(assistant_id, reply)
                    first_text_written, last_flush = first_text_written or first, now
                self._relay(assistant_id, split, event.n_tokens, callbacks)
            else:
                outcome = event
        self._relay(assistant_id, reply.finish(), 0, callbacks)
        text = reply.answer
        if isinstance(outcome, Finished):
            stats = outcome.stats
            cancelled = stats.stop_reason is StopReason.CANCELLED
            status = MessageStatus.STOPPED if cancelled else MessageStatus.COMPLETE
            loaded = self._client.loaded
            if stats.stop_reason is StopReason.CONTEXT_FULL and loaded is not None:
                # The reply outgrew the room kept for it: the cut is said, never silent.
                cut = f"the reply was cut off where the {loaded.n_ctx}-token context ran out"
                note = f"{note}; {cut}" if note else cut[0].upper() + cut[1:]
                callbacks.context_note(assistant_id, note)
            self._finish(assistant_id, text, status, stats=stats, reply=reply, context_note=note, calls=calls)
            return TurnResult(
                conversation_id,
                user_id,
                assistant_id,
                status,
                text,
                stats=stats,
                context_note=note,
                reasoning=reply.reasoning,
            )
        assert isinstance(outcome, Failed)
        crashed = outcome.kind is ErrorKind.RUNNER_CRASHED
        status = MessageStatus.INTERRUPTED if crashed else MessageStatus.ERROR
        model = self._model  # read once: a reply beside this one may see the crash first
        if crashed and model is not None:
            self._runner_crashed(model.name, outcome.message)
        self._finish(assistant_id, text, status, error=outcome.message, reply=reply)
        return TurnResult(
            conversation_id,
            user_id,
            assistant_id,
            status,
            text,
            error_kind=outcome.kind,
            error=outcome.message,
            context_note=note,
            reasoning=reply.reasoning,
        )

    @staticmethod
    def _relay(assistant_id: int, split: Split, n_tokens: int, callbacks: TurnCallbacks) -> None:
        if split.answer_was_reasoning:
            callbacks.answer_was_reasoning(assistant_id)
        if split.reasoning:
            callbacks.reasoning_delta(assistant_id, split.reasoning)
        if split.answer or n_tokens:
            callbacks.delta(assistant_id, split.answer, n_tokens)

    def _generate(
        self, request: GenerateRequest, job: Job
    ) -> Iterator[PromptReady | TokenDelta | Finished | Failed]:
        """The runner's reply to `request`, which cancelling `job` stops at its next token."""
        stop = functools.partial(self._client.cancel, request.request_id)
        with job.stopping(stop):
            events = self._client.generate(request)
            for event in events:
                if isinstance(event, PromptReady) and job.cancelled:
                    # Cancelled before the request reached the runner: its cancel went nowhere.
                    stop()
                yield event

    def _flush(self, assistant_id: int, reply: ReplyText) -> None:
        try:
            self.store.flush_streaming_text(assistant_id, reply.answer, reasoning=reply.reasoning)
        except DatabaseError:
            # The text stays in memory and goes out with the next flush or the final write.
            log.warning("could not save the streaming reply yet", exc_info=True)

    def _finish(
        self,
        assistant_id: int,
        text: str,
        status: MessageStatus,
        *,
        stats: GenerationStats | None = None,
        error: str | None = None,
        reply: ReplyText | None = None,
        context_note: str | None = None,
        calls: Sequence[ModelCall] = (),
    ) -> None:
        """Write the reply's final state, retrying for a while: the disk may be full only for a moment.

        Still failing, the write is kept and tried again before the next turn and at close.
        """

        def save() -> bool:
            return self.store.finish_message(
                assistant_id,
                content=text,
                status=status,
                error=error,
                prompt_tokens=stats.prompt_tokens if stats else None,
                completion_tokens=stats.completion_tokens if stats else None,
                ttft_ms=stats.time_to_first_token_s * 1000.0 if stats else None,
                tokens_per_second=stats.tokens_per_second if stats else None,
                seed=stats.seed if stats else None,
                reasoning=reply.reasoning if reply else None,
                reasoning_seconds=reply.reasoning_seconds if reply else None,
                context_note=context_note,
                tool_calls=[
                    PartInput("tool_call", c.record.name, text=c.record.arguments, call_id=c.record.id)
                    for c in calls
                ],
            )

        for attempt in range(FINAL_WRITE_ATTEMPTS):
            try:
                save()
                return
            except DatabaseError as exc:
                log.warning("could not save the finished reply (attempt %d): %s", attempt + 1, exc)
                time.sleep(FINAL_WRITE_BACKOFF_S * (attempt + 1))
        self._unsaved[assistant_id] = save
        raise ReplyNotSaved(
            "The reply could not be saved (the database is not writable: is the disk full?). It is still "
            "shown, and Hearth saves it as soon as the database can be written again.",
            assistant_id,
        )

    def _save_unsaved(self) -> None:
        for assistant_id, save in list(self._unsaved.items()):
            try:
                save()
            except DatabaseError as exc:
                log.warning("the reply %d still cannot be saved: %s", assistant_id, exc)
                return
            del self._unsaved[assistant_id]
            log.info("saved the reply %d that a full disk had held back", assistant_id)

    def cancel(self) -> None:
        """Safe from any thread: Stop for the GUI's or the CLI's turn, running or waiting for the runner.
        Local server requests are not affected (see cancel_job)."""
        self._queue.cancel_interactive()

    def cancel_job(self, job: Job) -> None:
        """Safe from any thread: a job waiting for the runner gives up its place; a running one stops."""
        self._queue.cancel(job)

    @property
    def turn_stopped(self) -> bool:
        """Stop was pressed for the GUI's (or CLI's) turn in progress."""
        return self._queue.interactive_stopped

    @property
    def waiting_jobs(self) -> int:
        """Turns and requests waiting for the runner behind the one using it."""
        return self._queue.waiting

    def _live_state(self) -> LiveState:
        # Read from a scrape's thread without waiting for the runner's turn, as /health reads `readiness`.
        return LiveState(self._queue.waiting, self.loaded_model_name, self._client.restarts)

    @property
    def readiness(self) -> ModelState:
        """READY with a local model loaded, LOADING while one loads, else UNLOADED; nothing about which."""
        if self.loaded_model_name is not None:
            return ModelState.READY
        return ModelState.LOADING if self._loading else ModelState.UNLOADED

    @property
    def loaded_model_name(self) -> str | None:
        """The local model the runner holds now, if any."""
        model = self._model
        return model.name if model is not None and self._client.loaded is not None else None

    def complete(
        self,
        messages: Sequence[ChatMessage],
        sampling: SamplingParams,
        *,
        model_name: str,
        stop: Sequence[str] = (),
        job: Job | None = None,
        tools: Sequence[ToolSpec] = (),
        calls: list[ModelCall] | None = None,
        prompt_tokens: list[int] | None = None,
        json_schema: str | None = None,
    ) -> Generator[TokenDelta | Finished | Failed, None, None]:
        """Generate for `messages` with the loaded local model, storing nothing: the local API server's
        requests. With `tools`, the model's template is given them and the calls it makes are taken out of
        the text into `calls` (complete before Finished is yielded); nothing is run. Raises ToolsNotTaken
        when its template takes no tools. `prompt_tokens` is given the prompt's length once it is rendered,
        before the first delta (Anthropic's stream says it in its first event). With `json_schema` (a JSON
        Schema's text) the reply is held to JSON valid against it (a schema the runner cannot make a grammar
        of ends in Failed BAD_SCHEMA).

        Waits for a place at the runner beside GUI turns and other requests (up to parallel_slots replies
        are generated at once), then yields the runner's deltas and exactly one Finished or Failed. Closing
        the iterator early (its client went away) cancels the generation and reads what the runner still
        sends, so the place is given up only once the runner has let go of the reply. Never loads a model:
        it serves what is loaded. Raises, before anything runs: JobCancelled (cancelled while waiting),
        NoModelLoaded, or ModelNotFound when `model_name` is not the loaded model.
        """
        job = job or Job()
        with self._queue.share(job):
            loaded = self.loaded_model_name
            if loaded is None:
                raise NoModelLoaded("No model is loaded in Hearth: load one in the window first.")
            if model_name != loaded:
                raise ModelNotFound(f"The model {model_name!r} is not loaded; this server has {loaded!r}.")
            if tools and self._tool_format is None:
                raise ToolsNotTaken(_no_tools(loaded))
            request = GenerateRequest(
                uuid.uuid4().hex,
                tuple(messages),
                sampling,
                tuple(stop),
                tuple(tools),
                json_schema=json_schema,
            )
            events = self.metrics.metered(Source.API, self._generate(request, job))
            if tools:
                assert self._tool_format is not None
                events = split_tool_calls(
                    events, ToolCallParser(self._tool_format), [] if calls is None else calls
                )
            ended = False
            try:
                for event in events:
                    if isinstance(event, PromptReady):
                        if prompt_tokens is not None:
                            prompt_tokens.append(event.prompt_tokens)
                        continue
                    ended = isinstance(event, Finished | Failed)
                    if isinstance(event, Failed) and event.kind is ErrorKind.RUNNER_CRASHED:
                        self._runner_crashed(loaded, event.message)
                    yield event
            finally:
                if not ended:
                    self._queue.cancel(job)
                # To its end, which also lets go of the client's lock.
                for event in events:
                    if isinstance(event, Finished) and event.stats.stop_reason is StopReason.CANCELLED:
                        log.info("generation cancelled after %d tokens", event.stats.completion_tokens)

    def close(self) -> None:
        self._save_unsaved()
        self._client.close()
