"""The GUI's handle on chat: the inference thread runs the Qt-free engine and reports through Qt signals."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from app.chat.documents import TurnDocuments
from app.chat.engine import ChatEngine, ContextUsage, ModelState, ModelStatus, TurnCallbacks, TurnResult
from app.errors import ContextOverflow, HearthError, ReplyNotSaved
from app.qt.background import Background, describe
from app.remote.openai_client import RemoteError
from app.storage.orm import MessageStatus
from app.tools.chat import Approval, PendingApproval, ToolRequest, ToolSet
from app.tools.host import ToolHost
from inference.protocol import ErrorKind, SamplingParams

log = logging.getLogger("hearth.chat")


class TurnFailure(enum.StrEnum):
    """What else replyFailed's kind can be, beside an ErrorKind from the runner or a server."""

    NOT_SAVED = "not_saved"  # the reply is shown but could not be written (ReplyNotSaved)
    INVALID_REQUEST = "invalid_request"  # refused before anything ran (a HearthError)


@dataclass(frozen=True)
class _Measure:
    conversation_id: int | None
    draft_text: str
    model_name: str
    documents: TurnDocuments | None
    replacing: int | None
    tools: tuple[str, ...] = ()


class _SignalCallbacks(TurnCallbacks):
    def __init__(self, service: ChatService) -> None:
        self._service = service

    def started(self, conversation_id: int, user_message_id: int, assistant_message_id: int) -> None:
        self._service.replyStarted.emit(conversation_id, user_message_id, assistant_message_id)
        self._service.conversationsChanged.emit()

    def context_note(self, assistant_message_id: int, note: str) -> None:
        self._service.replyContextNote.emit(assistant_message_id, note)

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        if text:
            self._service.replyDelta.emit(assistant_message_id, text)
        self._service.replyProgress.emit(assistant_message_id, n_tokens)

    def reasoning_delta(self, assistant_message_id: int, text: str) -> None:
        self._service.replyReasoningDelta.emit(assistant_message_id, text)

    def answer_was_reasoning(self, assistant_message_id: int) -> None:
        self._service.replyAnswerWasReasoning.emit(assistant_message_id)

    def model_status(self, status: ModelStatus) -> None:
        self._service.modelStatus.emit(status)

    def approve_tool(self, request: ToolRequest) -> Approval:
        # The window asks; this thread waits for the answer, or for Stop.
        pending = PendingApproval(request)
        service = self._service
        try:
            service.toolApprovalRequested.emit(pending)
            return pending.wait(lambda: service.engine.turn_stopped or service.closing)
        finally:
            service.toolApprovalEnded.emit(pending)


class ChatService(QObject):
    """Signals are emitted from the inference thread (Qt queues them to receivers on the GUI thread), except
    the end of a turn (busyChanged(False) and an unexpected failure), which the GUI
    thread emits once everything the turn sent has arrived."""

    replyStarted = Signal(int, int, int)
    replyDelta = Signal(int, str)
    # A reasoning model's thinking, batched like replyDelta: (assistant id, text).
    replyReasoningDelta = Signal(int, str)
    # The answer text sent so far was thinking after all (the model closed a thinking block it never
    # opened): it moves in front of the reasoning.
    replyAnswerWasReasoning = Signal(int)
    # Tokens generated since the previous progress signal; for live counters and the throughput benchmark.
    replyProgress = Signal(int, int)
    replyFinished = Signal(int, object, str)
    # (assistant id or -1 when no reply started, an ErrorKind or TurnFailure, the message for the user)
    replyFailed = Signal(int, str, str)
    modelStatus = Signal(object)
    busyChanged = Signal(bool)
    conversationsChanged = Signal()
    # Right after replyStarted when the overflow policy left earlier messages out: (assistant id, note).
    replyContextNote = Signal(int, str)
    # A ContextUsage, answering measure_context.
    contextUsage = Signal(object)
    # A tool call the model made waits for the user (a PendingApproval: answer it from the GUI thread), and
    # the question is over (answered, or given up on Stop).
    toolApprovalRequested = Signal(object)
    toolApprovalEnded = Signal(object)

    def __init__(
        self, engine: ChatEngine, parent: QObject | None = None, *, tools: ToolHost | None = None
    ) -> None:
        super().__init__(parent)
        self._engine = engine
        self._tools = tools
        self.closing = False
        # One thread: the runner's state is read and changed only there, one request at a time.
        self._worker = Background("inference", parent=self)
        self._busy = False
        self._callbacks = _SignalCallbacks(self)
        # The latest measure_context request not yet started; typing faster than the worker counts only
        # ever queues one measurement.
        self._measure_lock = threading.Lock()
        self._pending_measure: _Measure | None = None

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
        *,
        documents: TurnDocuments | None = None,
        tools: Sequence[str] = (),
    ) -> Future[None] | None:
        """Non-blocking. Ignored while a reply is streaming (the GUI disables Send meanwhile).
        `documents`: the files attached to this prompt (already stored by the document library). `tools`:
        the MCP servers whose tools the model may call; each call is asked about (toolApprovalRequested)."""

        def turn() -> TurnResult:
            return self._engine.run_turn(
                prompt,
                model_name,
                conversation_id=conversation_id,
                sampling=sampling,
                callbacks=self._callbacks,
                documents=documents,
                tools=self._open_tools(tools),
            )

        return self._start_turn(turn)

    def _open_tools(self, servers: Sequence[str]) -> ToolSet | None:
        """Blocking (it starts the servers and lists their tools): called on the inference thread."""
        return ToolSet.open(self._tools, servers) if servers and self._tools is not None else None

    @property
    def tool_host(self) -> ToolHost | None:
        return self._tools

    def regenerate(
        self,
        message_id: int,
        model_name: str,
        sampling: SamplingParams | None = None,
        *,
        tools: Sequence[str] = (),
    ) -> Future[None] | None:
        """Non-blocking: a new reply beside the given one (or to the given prompt); same signals as send.

        replyStarted's user_message_id is the existing prompt. Ignored while a reply is streaming.
        """
        return self._start_turn(
            lambda: self._engine.regenerate(
                message_id,
                model_name,
                sampling=sampling,
                callbacks=self._callbacks,
                tools=self._open_tools(tools),
            )
        )

    def edit(
        self,
        message_id: int,
        new_text: str,
        model_name: str,
        sampling: SamplingParams | None = None,
        *,
        documents: TurnDocuments | None = None,
        tools: Sequence[str] = (),
    ) -> Future[None] | None:
        """Non-blocking: a new prompt beside the user's message `message_id` (a new branch), then its reply.
        `documents`: the files the new prompt goes with (the edited one's, as the user left them).

        Same signals as send. Ignored while a reply is streaming. `documents`: the collections the chat
        answers from (an edited prompt takes no new attachments).
        """
        return self._start_turn(
            lambda: self._engine.edit(
                message_id,
                new_text,
                model_name,
                sampling=sampling,
                callbacks=self._callbacks,
                documents=documents,
                tools=self._open_tools(tools),
            )
        )

    def measure_context(
        self,
        conversation_id: int | None,
        draft_text: str,
        model_name: str,
        *,
        documents: TurnDocuments | None = None,
        replacing: int | None = None,
        tools: Sequence[str] = (),
    ) -> Future[None] | None:
        """Non-blocking: count the tokens the next Send would use, with the files attached to the draft
        (`documents`), while a message is edited in its place (`replacing`), and with the definitions of
        the tools the chat's servers (`tools`) offer, of those running; answered by contextUsage.

        Requests made while one is waiting replace it, so only the latest draft is counted. Returns None
        when it was folded into a request already waiting.
        """
        with self._measure_lock:
            waiting = self._pending_measure is not None
            self._pending_measure = _Measure(
                conversation_id, draft_text, model_name, documents, replacing, tuple(tools)
            )
        # No on_error: an unexpected failure is logged and the meter keeps showing what it showed.
        return None if waiting else self._worker.call(self._measure, operation="measuring the context")

    def preload(self, model_name: str) -> Future[None]:
        """Load a model ahead of the first message so the first reply starts quickly.

        The future is done on the inference thread, right after the load (or its failure)."""

        def failed(error: Exception) -> None:
            self.modelStatus.emit(
                ModelStatus(model_name, ModelState.FAILED, "", "Model failed to load", repr(error))
            )

        return self._worker.call(lambda: self._preload(model_name), on_error=failed, operation="preload")

    def _preload(self, model_name: str) -> None:
        try:
            self._engine.prepare(model_name, self._callbacks)
        except HearthError as exc:
            self.modelStatus.emit(
                ModelStatus(model_name, ModelState.FAILED, "", "Model failed to load", str(exc))
            )

    def _start_turn(self, turn: Callable[[], TurnResult]) -> Future[None] | None:
        if self._busy:
            return None
        self._set_busy(True)

        def crashed(error: Exception) -> None:
            self.replyFailed.emit(-1, ErrorKind.INTERNAL, describe(error))
            self._turn_ended(None)

        return self._worker.call(lambda: self._run(turn), self._turn_ended, crashed, operation="chat turn")

    def _run(self, turn: Callable[[], TurnResult]) -> None:
        """On the inference thread: the outcomes a user can cause become signals; anything else is a bug
        for the one error path."""
        try:
            self._report(turn())
        except ContextOverflow as exc:
            self.replyFailed.emit(-1, ErrorKind.CONTEXT_OVERFLOW, str(exc))
        except ReplyNotSaved as exc:
            # The prompt is stored and the reply shown: the window keeps both and says why it is not saved.
            self.replyFailed.emit(exc.assistant_message_id, TurnFailure.NOT_SAVED, str(exc))
        except RemoteError as exc:
            # The server could not be used: nothing was stored, the window hands the prompt back.
            self.replyFailed.emit(-1, exc.kind, str(exc))
            self.modelStatus.emit(self._engine.status())
        except HearthError as exc:
            self.replyFailed.emit(-1, TurnFailure.INVALID_REQUEST, str(exc))

    def _turn_ended(self, _result: None) -> None:
        # The conversation list changed when the turn started (replyStarted comes with conversationsChanged)
        # and a turn that never started stored nothing: no second reload.
        self._set_busy(False)

    def _measure(self) -> None:
        with self._measure_lock:
            request, self._pending_measure = self._pending_measure, None
        if request is None:
            return
        host = self._tools
        offered = ToolSet.running(host, request.tools).specs if request.tools and host is not None else ()
        try:
            usage: ContextUsage = self._engine.measure_context(
                request.conversation_id,
                request.draft_text,
                request.model_name,
                self._callbacks,
                documents=request.documents,
                replacing=request.replacing,
                tools=offered,
            )
        except HearthError as exc:
            # The meter has nothing to show; the next Send reports the same problem where it matters.
            log.info("could not measure the context: %s", exc)
            return
        self.contextUsage.emit(usage)

    def _report(self, result: TurnResult) -> None:
        if result.stats is not None and result.status in (MessageStatus.COMPLETE, MessageStatus.STOPPED):
            self.replyFinished.emit(result.assistant_message_id, result.stats, result.status)
        else:
            kind = result.error_kind or ErrorKind.INTERNAL
            self.replyFailed.emit(result.assistant_message_id, kind, result.error or "The reply failed.")
            self.modelStatus.emit(self._engine.status())

    def _set_busy(self, busy: bool) -> None:
        self._busy = busy
        self.busyChanged.emit(busy)

    def stop(self) -> None:
        self._engine.cancel()

    def shutdown(self) -> None:
        self.closing = True  # a call waiting for an answer is denied: the turn ends
        self._engine.cancel()
        # Queued measurements would load a model just to be thrown away.
        self._worker.shutdown(cancel_pending=True)
        self._engine.close()
        if self._tools is not None:
            self._tools.close()
