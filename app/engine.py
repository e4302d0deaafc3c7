"""One chat turn, start to finish, without Qt: used by the CLI directly and by the GUI's worker thread."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from app.conversations import ConversationStore, Message
from app.errors import DatabaseError, HearthError, ModelNotFound
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
    TokenDelta,
)

log = logging.getLogger("hearth.engine")

# The streaming reply is written to the database this often, so a crash loses at most this much text.
FLUSH_INTERVAL_S = 0.3
FINAL_WRITE_ATTEMPTS = 5
FINAL_WRITE_BACKOFF_S = 0.5


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


class TurnCallbacks:
    """Override what you need; the engine calls these from the thread running the turn."""

    def started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        pass

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

    def ensure_loaded(self, model_name: str, callbacks: TurnCallbacks | None = None) -> Loaded:
        """Blocking. Loads the model unless it is already loaded in a live runner."""
        model = self.library.get(model_name)
        loaded = self._client.loaded
        if loaded is not None and self._model is not None and self._model.sha256 == model.sha256:
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
            context_length=self.settings.context_length,
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
        """Store the user's message, stream the reply into the database and return how it ended.

        Raises HearthError, with nothing stored, when the conversation or the model is unusable: the caller
        still holds the prompt (the GUI puts it back in the composer), so a retry cannot duplicate it.
        """
        callbacks = callbacks or TurnCallbacks()
        sampling = sampling or self.default_sampling()
        with self._busy:
            # A Stop pressed from here on, even while the model loads, ends this turn.
            self._client.reset_cancel()
            existing = self.store.get_conversation(conversation_id) if conversation_id is not None else None
            self.ensure_loaded(model_name, callbacks)
            model = self._model
            assert model is not None
            if existing is None:
                conversation = self.store.create_conversation(system_prompt=system_prompt)
                conversation_id = conversation.id
            else:
                conversation = existing
                conversation_id = existing.id
            user = self.store.add_message(conversation_id, "user", prompt)
            self.store.auto_title(conversation_id, prompt)
            self.store.set_conversation_model(conversation_id, model.name)
            history = self.store.list_messages(conversation_id)
            system = conversation.system_prompt if system_prompt is None else system_prompt
            messages = ([ChatMessage("system", system)] if system else []) + history_for_prompt(history)
            seed = sampling.seed
            assistant = self.store.start_assistant_message(
                conversation_id,
                model_name=model.name,
                model_sha256=model.sha256,
                sampling=dataclasses.asdict(sampling),
                seed=seed,
            )
            callbacks.started(conversation_id, user.id, assistant.id)
            request = GenerateRequest(uuid.uuid4().hex, tuple(messages), sampling)
            return self._stream(conversation_id, user.id, assistant.id, request, callbacks)

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
