"""The GUI's handle on chat: a worker thread runs the Qt-free engine and reports through Qt signals."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

from PySide6.QtCore import QObject, Signal

from app.engine import ChatEngine, ModelStatus, TurnCallbacks, TurnResult
from app.errors import HearthError
from inference.protocol import SamplingParams

log = logging.getLogger("hearth.chat")


class _SignalCallbacks(TurnCallbacks):
    def __init__(self, service: ChatService) -> None:
        self._service = service

    def started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        self._service.replyStarted.emit(conversation_id, user_message_id, assistant_message_id)
        self._service.conversationsChanged.emit()

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        if text:
            self._service.replyDelta.emit(assistant_message_id, text)
        self._service.replyProgress.emit(assistant_message_id, n_tokens)

    def model_status(self, status: ModelStatus) -> None:
        self._service.modelStatus.emit(status)


class ChatService(QObject):
    """Signals are emitted from the worker thread; Qt queues them to receivers living on the GUI thread."""

    replyStarted = Signal(int, int, int)
    replyDelta = Signal(int, str)
    # Tokens generated since the previous progress signal; for live counters and the throughput benchmark.
    replyProgress = Signal(int, int)
    replyFinished = Signal(int, object, str)
    replyFailed = Signal(int, str, str)
    modelStatus = Signal(object)
    busyChanged = Signal(bool)
    conversationsChanged = Signal()

    def __init__(self, engine: ChatEngine, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._engine = engine
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hearth-inference")
        self._busy = False
        self._callbacks = _SignalCallbacks(self)

    @property
    def engine(self) -> ChatEngine:
        return self._engine

    @property
    def busy(self) -> bool:
        return self._busy

    def current_status(self) -> ModelStatus:
        return self._engine.status()

    def send(
        self,
        conversation_id: int | None,
        prompt: str,
        model_name: str,
        sampling: SamplingParams | None = None,
    ) -> Future[None] | None:
        """Non-blocking. Ignored while a reply is streaming (the GUI disables Send meanwhile)."""
        if self._busy:
            return None
        self._set_busy(True)
        return self._worker.submit(self._run, conversation_id, prompt, model_name, sampling)

    def preload(self, model_name: str) -> Future[None]:
        """Load a model ahead of the first message so the first reply starts quickly."""
        return self._worker.submit(self._preload, model_name)

    def autoload(self) -> Future[None] | None:
        """Load the default model in the background at start-up, unless it crashed the runner last time."""
        name, why = self._engine.model_to_autoload()
        if name is None:
            self.modelStatus.emit(ModelStatus(None, "unloaded", "", "No model loaded", why))
            return None
        return self.preload(name)

    def _preload(self, model_name: str) -> None:
        try:
            self._engine.ensure_loaded(model_name, self._callbacks)
        except HearthError as exc:
            self.modelStatus.emit(ModelStatus(model_name, "failed", "", "Model failed to load", str(exc)))
        except Exception as exc:  # the worker must survive anything and say so
            log.exception("preload failed")
            self.modelStatus.emit(ModelStatus(model_name, "failed", "", "Model failed to load", repr(exc)))

    def _run(
        self, conversation_id: int | None, prompt: str, model_name: str, sampling: SamplingParams | None
    ) -> None:
        try:
            result = self._engine.run_turn(
                prompt,
                model_name,
                conversation_id=conversation_id,
                sampling=sampling,
                callbacks=self._callbacks,
            )
            self._report(result)
        except HearthError as exc:
            self.replyFailed.emit(-1, "invalid_request", str(exc))
        except Exception as exc:
            log.exception("chat turn failed")
            self.replyFailed.emit(-1, "internal", f"Unexpected error: {exc}")
        finally:
            self._set_busy(False)
            self.conversationsChanged.emit()

    def _report(self, result: TurnResult) -> None:
        if result.stats is not None and result.status in ("complete", "stopped"):
            self.replyFinished.emit(result.assistant_message_id, result.stats, result.status)
        else:
            kind = result.error_kind.value if result.error_kind else "internal"
            self.replyFailed.emit(result.assistant_message_id, kind, result.error or "The reply failed.")
            self.modelStatus.emit(self._engine.status())

    def _set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.busyChanged.emit(busy)

    def stop(self) -> None:
        self._engine.cancel()

    def shutdown(self) -> None:
        self._engine.cancel()
        self._worker.shutdown(wait=True)
        self._engine.close()
