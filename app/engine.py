"""One chat turn, start to finish, without Qt: used by the CLI directly and by the GUI's worker thread."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.conversations import Conversation, ConversationStore, Message
from app.errors import ContextOverflow, DatabaseError, HearthError, ModelNotFound
from app.library import InstalledModel, ModelLibrary
from app.settings import Settings
from inference.client import RunnerClient, RunnerError
from inference.gguf import GGUFError, read_header
from inference.hardware import HardwareReport, llama_backend, probe_hardware
from inference.planner import plan_load
from inference.protocol import (
    ChatMessage,
    ErrorKind,
    Failed,
    Finished,
    GenerateRequest,
    GenerationStats,
    Loaded,
    SamplingParams,
    StopReason,
    TokenCount,
    TokenDelta,
)

log = logging.getLogger("hearth.engine")

# The streaming reply is written to the database this often, so a crash loses at most this much text.
FLUSH_INTERVAL_S = 0.3
FINAL_WRITE_ATTEMPTS = 5
FINAL_WRITE_BACKOFF_S = 0.5
# Room kept free for the reply when deciding whether a conversation fits: its max_tokens, but never more
# than this share of the context (a 4,096-token reply would otherwise leave no room in a 4,096 context).
REPLY_RESERVE_SHARE = 0.25
SAMPLING_KEYS = tuple(f.name for f in dataclasses.fields(SamplingParams) if f.name != "ignore_eos")


@dataclass(frozen=True)
class ModelStatus:
    model_name: str | None
    state: str  # "unloaded" | "loading" | "ready" | "failed"
    backend: str
    summary: str
    detail: str = ""


@dataclass(frozen=True)
class TurnResult:
    conversation_id: int
    user_message_id: int
    assistant_message_id: int
    status: str  # complete | stopped | error | interrupted
    text: str
    stats: GenerationStats | None = None
    error_kind: ErrorKind | None = None
    error: str | None = None
    context_note: str | None = None  # what the overflow policy left out of the prompt, if anything


@dataclass(frozen=True)
class GenerationSettings:
    """What a reply is generated with, after layering conversation > model defaults > global settings."""

    sampling: SamplingParams
    context_length: int
    system_prompt: str | None


@dataclass(frozen=True)
class ContextUsage:
    used_tokens: int  # the whole prompt as it stands (history + draft), counted by the model's tokenizer
    context_tokens: int  # the loaded context length
    would_drop_messages: int  # how many earlier messages drop_oldest would leave out (0 under "refuse")
    policy: str  # Settings.overflow_policy
    reserve_tokens: int = 0  # kept free for the reply
    fits: bool = True  # used_tokens + reserve_tokens fit without leaving anything out


@dataclass(frozen=True)
class _Fitted:
    """A prompt checked against the context: what would be sent, and what had to be left out."""

    messages: tuple[ChatMessage, ...]
    used_tokens: int  # before anything was left out
    context_tokens: int
    reserve_tokens: int
    template_source: str
    dropped: int = 0
    fits: bool = True  # False: too long even with every earlier message left out
    sent_tokens: int = 0  # the prompt left after the cut (when nothing fits: with everything cut)

    def note(self) -> str | None:
        if not self.dropped:
            return None
        were = "message was" if self.dropped == 1 else "messages were"
        return f"{self.dropped} earlier {were} left out to fit the {self.context_tokens}-token context"


class TurnCallbacks:
    """Override what you need; the engine calls these from the thread running the turn."""

    def started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        pass

    def context_note(self, assistant_message_id: int, note: str) -> None:
        """Called right after `started` when the overflow policy left earlier messages out of the prompt."""

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        pass

    def model_status(self, status: ModelStatus) -> None:
        pass


def history_for_prompt(messages: list[Message]) -> list[ChatMessage]:
    """Earlier turns as the model should see them: failed replies with no text are left out."""
    return [
        ChatMessage(m.role, m.content)
        for m in messages
        if m.role in ("system", "user", "assistant") and (m.content or m.role == "user")
    ]


class ChatEngine:
    def __init__(
        self,
        store: ConversationStore,
        library: ModelLibrary,
        settings: Settings,
        *,
        runner_log: Path | None = None,
        hardware: HardwareReport | None = None,
    ) -> None:
        self.store = store
        self.library = library
        self.settings = settings
        self.hardware = hardware or probe_hardware()
        self._client = RunnerClient(runner_log)
        self._model: InstalledModel | None = None
        self._context_length: int | None = None  # what the loaded model was asked for (the plan may cap it)
        self._busy = threading.Lock()

    @property
    def client(self) -> RunnerClient:
        return self._client

    @property
    def loaded(self) -> Loaded | None:
        return self._client.loaded

    def default_sampling(self) -> SamplingParams:
        s = self.settings
        return SamplingParams(
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            min_p=s.min_p,
            repeat_penalty=s.repeat_penalty,
            max_tokens=s.max_tokens,
        )

    def generation_settings(self, conversation: Conversation | None, model_name: str) -> GenerationSettings:
        """The conversation's own settings, else the model's defaults, else the global settings."""
        layered: dict[str, Any] = {**dataclasses.asdict(self.default_sampling())}
        layered["context_length"] = self.settings.context_length
        model_defaults = self.settings.model_defaults.get(model_name, {})
        layered.update({k: v for k, v in model_defaults.items() if k != "system_prompt"})
        if conversation is not None and conversation.settings:
            layered.update(conversation.settings)
        system = conversation.system_prompt if conversation is not None else None
        return GenerationSettings(
            sampling=SamplingParams(**{k: layered[k] for k in SAMPLING_KEYS}),
            context_length=int(layered["context_length"]),
            system_prompt=system if system is not None else model_defaults.get("system_prompt"),
        )

    def sampling_for(self, conversation_id: int | None, model_name: str) -> SamplingParams:
        conversation = self.store.get_conversation(conversation_id) if conversation_id is not None else None
        return self.generation_settings(conversation, model_name).sampling

    def status(self) -> ModelStatus:
        loaded, model = self._client.loaded, self._model
        if loaded is None or model is None:
            backend, why = llama_backend()
            return ModelStatus(None, "unloaded", backend, f"{backend} · no model loaded", why)
        plan = self._client.plan
        return ModelStatus(
            model.name,
            "ready",
            loaded.backend,
            plan.reason.split(";")[0] if plan else loaded.backend,
            loaded.template_note,
        )

    def ensure_loaded(
        self, model_name: str, callbacks: TurnCallbacks | None = None, *, context_length: int | None = None
    ) -> Loaded:
        """Blocking. Loads the model (for `context_length`, default: the setting) unless a live runner
        already has it loaded for that context length."""
        model = self.library.get(model_name)
        context_length = context_length or self.settings.context_length
        loaded = self._client.loaded
        if (
            loaded is not None
            and self._model is not None
            and self._model.sha256 == model.sha256
            and self._context_length == context_length
        ):
            return loaded
        if not Path(model.path).is_file():
            raise ModelNotFound(f"The file for model '{model.name}' is missing: {model.path}")
        try:
            header = read_header(Path(model.path))
        except GGUFError as exc:
            raise HearthError(f"Model '{model.name}' is not a valid GGUF file: {exc}") from exc
        backend, _ = llama_backend()
        plan = plan_load(
            str(model.path),
            header,
            self.hardware,
            context_length=context_length,
            gpu_layers=self.settings.gpu_layers,
            n_threads=self.settings.n_threads,
            gpu_offload_supported=backend == "CUDA",
        )
        notify = callbacks.model_status if callbacks else (lambda _status: None)
        notify(ModelStatus(model.name, "loading", backend, f"Loading {model.name}…", plan.reason))
        self._model = None
        try:
            loaded = self._client.load(plan)
        except RunnerError as exc:
            if exc.kind is ErrorKind.RUNNER_CRASHED:
                # A model that killed the runner is not loaded again automatically at the next start.
                self.library.mark_load_error(model.name, exc.message)
            notify(ModelStatus(model.name, "failed", backend, f"{model.name} failed to load", exc.message))
            raise HearthError(f"Could not load '{model.name}': {exc.message}") from exc
        self._model = model
        self._context_length = context_length
        self.library.mark_loaded(model.name)
        self.library.clear_load_error(model.name)
        notify(self.status())
        log.info("loaded %s: %s (%.2f s)", model.name, plan.reason, loaded.load_seconds)
        return loaded

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
    ) -> TurnResult:
        """Store the user's message after the current leaf, stream the reply into the database and return
        how it ended.

        Raises HearthError, with nothing stored, when the conversation or the model is unusable or the
        conversation does not fit the context under the "refuse" policy (ContextOverflow): the caller still
        holds the prompt (the GUI puts it back in the composer), so a retry cannot duplicate it.
        """
        with self._busy:
            # A Stop pressed from here on, even while the model loads, ends this turn.
            self._client.reset_cancel()
            existing = self.store.get_conversation(conversation_id) if conversation_id is not None else None
            path = self.store.list_messages(existing.id) if existing is not None else []
            return self._reply(
                model_name,
                existing,
                path,
                prompt=prompt,
                system_prompt=system_prompt,
                sampling=sampling,
                callbacks=callbacks or TurnCallbacks(),
            )

    def regenerate(
        self,
        message_id: int,
        model_name: str,
        *,
        sampling: SamplingParams | None = None,
        callbacks: TurnCallbacks | None = None,
    ) -> TurnResult:
        """Answer the same prompt again: a new reply beside the old one, which stays as an alternative.

        Given a prompt instead of a reply, answers that prompt again. The result's user_message_id is the
        existing prompt.
        """
        with self._busy:
            self._client.reset_cancel()
            target = self.store.get_message(message_id)
            prompt_id = target.parent_id if target.role == "assistant" else target.id
            if target.role == "system" or prompt_id is None:
                raise HearthError("Only a reply to a prompt, or a prompt itself, can be answered again.")
            conversation = self.store.get_conversation(target.conversation_id)
            return self._reply(
                model_name,
                conversation,
                self.store.path_to(prompt_id),
                prompt=None,
                system_prompt=None,
                sampling=sampling,
                callbacks=callbacks or TurnCallbacks(),
            )

    def edit(
        self,
        message_id: int,
        new_text: str,
        model_name: str,
        *,
        sampling: SamplingParams | None = None,
        callbacks: TurnCallbacks | None = None,
    ) -> TurnResult:
        """Ask again with different words: a new prompt beside the edited one (a new branch), then a reply.

        The edited prompt and everything that followed it stay, on their own branch.
        """
        with self._busy:
            self._client.reset_cancel()
            target = self.store.get_message(message_id)
            if target.role != "user":
                raise HearthError("Only your own messages can be edited; regenerate a reply instead.")
            conversation = self.store.get_conversation(target.conversation_id)
            path = self.store.path_to(target.parent_id) if target.parent_id is not None else []
            return self._reply(
                model_name,
                conversation,
                path,
                prompt=new_text,
                system_prompt=None,
                sampling=sampling,
                callbacks=callbacks or TurnCallbacks(),
            )

    def measure_context(
        self,
        conversation_id: int | None,
        draft_text: str,
        model_name: str,
        callbacks: TurnCallbacks | None = None,
    ) -> ContextUsage:
        """How much of the context the conversation plus the draft would use, as the next Send would see it.

        Loads the model if needed: the count comes from its own template and tokenizer.
        """
        with self._busy:
            conversation = (
                self.store.get_conversation(conversation_id) if conversation_id is not None else None
            )
            resolved = self.generation_settings(conversation, model_name)
            self.ensure_loaded(model_name, callbacks, context_length=resolved.context_length)
            path = self.store.list_messages(conversation.id) if conversation is not None else []
            messages = self._prompt_messages(
                resolved.system_prompt, path, draft_text if draft_text.strip() else None
            )
            fitted = self._fit(messages, bool(resolved.system_prompt), resolved.sampling.max_tokens)
            policy = self.settings.overflow_policy
            return ContextUsage(
                used_tokens=fitted.used_tokens,
                context_tokens=fitted.context_tokens,
                would_drop_messages=fitted.dropped if policy == "drop_oldest" and fitted.fits else 0,
                policy=policy,
                reserve_tokens=fitted.reserve_tokens,
                fits=fitted.used_tokens + fitted.reserve_tokens <= fitted.context_tokens,
            )

    def _reply(
        self,
        model_name: str,
        conversation: Conversation | None,
        path: list[Message],
        *,
        prompt: str | None,
        system_prompt: str | None,
        sampling: SamplingParams | None,
        callbacks: TurnCallbacks,
    ) -> TurnResult:
        """Reply after `path` (root → the message to follow), adding the user's `prompt` first if given."""
        resolved = self.generation_settings(conversation, model_name)
        sampling = sampling or resolved.sampling
        self.ensure_loaded(model_name, callbacks, context_length=resolved.context_length)
        model = self._model
        assert model is not None
        system = system_prompt if system_prompt is not None else resolved.system_prompt
        fitted = self._fit(self._prompt_messages(system, path, prompt), bool(system), sampling.max_tokens)
        self._check_policy(fitted)
        if conversation is None:
            conversation = self.store.create_conversation(system_prompt=system_prompt)
        # Explicit parents: the reply follows exactly the messages its prompt was built from, even if the
        # user switches branches meanwhile.
        after = path[-1].id if path else None
        if prompt is not None:
            user_id = self.store.add_message(conversation.id, "user", prompt, parent_id=after).id
            self.store.auto_title(conversation.id, prompt)
        else:
            assert after is not None
            user_id = after
        self.store.set_conversation_model(conversation.id, model.name)
        note = fitted.note()
        assistant = self.store.start_assistant_message(
            conversation.id,
            model_name=model.name,
            model_sha256=model.sha256,
            sampling=dataclasses.asdict(sampling),
            seed=sampling.seed,
            parent_id=user_id,
            template=fitted.template_source,
            quantization=model.quantization,
            context_note=note,
        )
        callbacks.started(conversation.id, user_id, assistant.id)
        if note:
            callbacks.context_note(assistant.id, note)
        request = GenerateRequest(uuid.uuid4().hex, fitted.messages, sampling)
        result = self._stream(conversation.id, user_id, assistant.id, request, callbacks)
        return dataclasses.replace(result, context_note=note)

    @staticmethod
    def _prompt_messages(system: str | None, path: list[Message], prompt: str | None) -> list[ChatMessage]:
        messages = [ChatMessage("system", system)] if system else []
        messages += history_for_prompt(path)
        if prompt is not None:
            messages.append(ChatMessage("user", prompt))
        return messages

    def _count(self, messages: Sequence[ChatMessage]) -> TokenCount:
        try:
            return self._client.count_tokens(tuple(messages))
        except RunnerError as exc:
            if exc.kind is ErrorKind.RUNNER_CRASHED:
                self._model = None
            raise HearthError(f"Could not measure the prompt: {exc.message}") from exc

    def _fit(self, messages: list[ChatMessage], has_system: bool, max_tokens: int) -> _Fitted:
        """Check the prompt against the context, and find the fewest oldest turns to leave out if it is over.

        The system prompt and the last message (the prompt being answered) are never left out, and what
        remains starts with a user message: chat templates expect turns to alternate from there.
        """
        full = self._count(messages)
        n_ctx = full.n_ctx
        reserve = min(max_tokens, int(n_ctx * REPLY_RESERVE_SHARE))
        fitted = _Fitted(tuple(messages), full.n_tokens, n_ctx, reserve, full.template_source)
        if full.n_tokens + reserve <= n_ctx or len(messages) < 2:
            return dataclasses.replace(
                fitted, fits=full.n_tokens + reserve <= n_ctx, sent_tokens=full.n_tokens
            )
        head = messages[:1] if has_system else []
        body = messages[len(head) : -1]
        last = messages[-1]
        cuts = [i for i in range(1, len(body) + 1) if i == len(body) or body[i].role == "user"]
        best: tuple[int, TokenCount] | None = None
        low, high = 0, len(cuts) - 1
        smallest: TokenCount | None = None
        # Fewer tokens the more is cut, so a binary search over the cut points needs log2(turns) counts.
        while low <= high:
            middle = (low + high) // 2
            candidate = self._count([*head, *body[cuts[middle] :], last])
            if middle == len(cuts) - 1:
                smallest = candidate
            if candidate.n_tokens + reserve <= n_ctx:
                best = (cuts[middle], candidate)
                high = middle - 1
            else:
                low = middle + 1
        if best is None:
            return dataclasses.replace(
                fitted, fits=False, sent_tokens=smallest.n_tokens if smallest else full.n_tokens
            )
        cut, counted = best
        return dataclasses.replace(
            fitted,
            messages=(*head, *body[cut:], last),
            dropped=cut,
            template_source=counted.template_source,
            sent_tokens=counted.n_tokens,
        )

    def _check_policy(self, fitted: _Fitted) -> None:
        policy = self.settings.overflow_policy
        if not fitted.fits:
            raise ContextOverflow(
                f"The message needs {fitted.sent_tokens} tokens plus {fitted.reserve_tokens} for the "
                f"reply, more than the model's {fitted.context_tokens}-token context even with every earlier "
                "message left out. Shorten it, or raise the context length in the conversation's settings."
            )
        if fitted.dropped and policy == "refuse":
            raise ContextOverflow(
                f"The conversation needs {fitted.used_tokens} tokens plus {fitted.reserve_tokens} for the "
                f"reply, but the model's context holds {fitted.context_tokens}. Nothing was sent or cut (the "
                "overflow policy is to refuse): start a new conversation, or raise the context length."
            )

    def _stream(
        self,
        conversation_id: int,
        user_id: int,
        assistant_id: int,
        request: GenerateRequest,
        callbacks: TurnCallbacks,
    ) -> TurnResult:
        parts: list[str] = []
        last_flush = time.monotonic()
        outcome: Finished | Failed | None = None
        for event in self._client.generate(request):
            if isinstance(event, TokenDelta):
                parts.append(event.text)
                callbacks.delta(assistant_id, event.text, event.n_tokens)
                now = time.monotonic()
                if now - last_flush >= FLUSH_INTERVAL_S:
                    self._flush(assistant_id, parts)
                    last_flush = now
            else:
                outcome = event
        text = "".join(parts)
        if isinstance(outcome, Finished):
            stats = outcome.stats
            status = "stopped" if stats.stop_reason is StopReason.CANCELLED else "complete"
            self._finish(assistant_id, text, status, stats=stats)
            return TurnResult(conversation_id, user_id, assistant_id, status, text, stats=stats)
        assert isinstance(outcome, Failed)
        status = "interrupted" if outcome.kind is ErrorKind.RUNNER_CRASHED else "error"
        if outcome.kind is ErrorKind.RUNNER_CRASHED and self._model is not None:
            # Remembered so the next start does not load it again on its own; a later good load clears it.
            self.library.mark_load_error(self._model.name, outcome.message)
            self._model = None
        self._finish(assistant_id, text, status, error=outcome.message)
        return TurnResult(
            conversation_id,
            user_id,
            assistant_id,
            status,
            text,
            error_kind=outcome.kind,
            error=outcome.message,
        )

    def _flush(self, assistant_id: int, parts: list[str]) -> None:
        try:
            self.store.flush_streaming_text(assistant_id, "".join(parts))
        except DatabaseError:
            # The text stays in memory and goes out with the next flush or the final write.
            log.warning("could not save the streaming reply yet", exc_info=True)

    def _finish(
        self,
        assistant_id: int,
        text: str,
        status: str,
        *,
        stats: GenerationStats | None = None,
        error: str | None = None,
    ) -> None:
        """Write the reply's final state, retrying for a while: the disk may be full only for a moment."""
        for attempt in range(FINAL_WRITE_ATTEMPTS):
            try:
                self.store.finish_message(
                    assistant_id,
                    content=text,
                    status=status,
                    error=error,
                    prompt_tokens=stats.prompt_tokens if stats else None,
                    completion_tokens=stats.completion_tokens if stats else None,
                    ttft_ms=stats.time_to_first_token_s * 1000.0 if stats else None,
                    tokens_per_second=stats.tokens_per_second if stats else None,
                    seed=stats.seed if stats else None,
                )
                return
            except DatabaseError as exc:
                log.warning("could not save the finished reply (attempt %d): %s", attempt + 1, exc)
                time.sleep(FINAL_WRITE_BACKOFF_S * (attempt + 1))
        raise HearthError(
            "The reply could not be saved (the database is not writable); it is still shown, and the part "
            "saved while streaming is kept."
        )

    def cancel(self) -> None:
        """Safe from any thread: sets the runner's cancel flag, checked between tokens."""
        self._client.cancel()

    def close(self) -> None:
        self._client.close()
