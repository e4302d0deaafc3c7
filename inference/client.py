"""The GUI-process side of the runner: start it, talk to it, notice when it dies, restart it."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import signal
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from pathlib import Path

from inference.ggml_backends import (
    BEST_REASON,
    BUILT_IN,
    CpuKernelMemory,
    CpuKernels,
    kernels_for_this_machine,
    safer_than,
)
from inference.protocol import (
    CancelRequest,
    ChatMessage,
    CheckingTemplate,
    CountTokensRequest,
    ErrorKind,
    Failed,
    Finished,
    GenerateRequest,
    Loaded,
    LoadPlan,
    LoadRequest,
    PromptReady,
    TokenCount,
    TokenDelta,
    ToolSpec,
)
from inference.runner import SHUTDOWN, runner_main

log = logging.getLogger("hearth.client")

# Loading a multi-GB model from a cold disk can take minutes; a wedged runner is caught by its death, not
# by this limit, so it is generous. It ends where the runner says it checks the chat template.
LOAD_TIMEOUT_S = 600.0
# Rendering runs template code from the model file, for every request and once at load. The sandbox bounds
# it, but a C-level operation inside Python cannot be interrupted there, so the runner itself is the last
# line: no answer in time, it is killed.
PROMPT_TIMEOUT_S = 30.0
# An illegal instruction means the CPU kernels use an instruction this CPU (or its VM) does not run. A
# segfault or bus error says the same only before the runner's first reply is done (AMX without its tile
# configuration faults either way); after that it is a bug elsewhere, and a safer variant would not help.
_CPU_FAULT = signal.SIGILL
_EARLY_CPU_FAULTS = (signal.SIGSEGV, signal.SIGBUS) if hasattr(signal, "SIGBUS") else (signal.SIGSEGV,)
# The box of replies that carry no request id: a load's (Loaded, CheckingTemplate, Failed("load", ...)), and
# an exchange's that has none.
LOAD_REPLY = "load"


class RunnerError(Exception):
    def __init__(self, kind: ErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class _NoAnswer(RunnerError):
    """The runner did not answer in time and was killed; the caller says what it was waiting for."""


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "the model runner stopped responding"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"the model runner crashed ({name})"
    return f"the model runner exited with code {code}"


@dataclass(frozen=True)
class _Interrupted:
    """A reply cut off by the runner's death: what it died of, how far the reply had got, and which
    runner (RunnerClient._runs) it went to."""

    error: RunnerError
    prompt_ready: bool
    streamed: bool
    run: int


class RunnerClient:
    """Owns one runner process.

    Several threads may generate and count at once (the runner decodes up to LoadPlan.n_parallel replies
    together): each waits for the messages of its own request, and whichever thread is waiting reads the
    pipe for all of them. Loads, exchanges and close are one at a time, and are meant for when nothing is
    being generated (app.chat.runner_queue sees to that). `cancel(request_id)` may be called from any
    thread.

    `entry` is the runner process's main function, called with the same arguments as runner_main: the
    embedding runner (inference.embedder) is another one, driven through `exchange`.
    """

    def __init__(
        self,
        log_path: Path | None = None,
        *,
        prompt_timeout_s: float = PROMPT_TIMEOUT_S,
        kernel_memory: CpuKernelMemory | None = None,
        entry: Callable[..., None] = runner_main,
    ) -> None:
        self._log_path = log_path
        self._entry = entry
        self._prompt_timeout_s = prompt_timeout_s
        self._kernel_memory = kernel_memory or CpuKernelMemory(None)
        self._kernels: CpuKernels | None = None  # chosen at the first start (scoring loads the variants)
        self._exit_signal: int | None = None  # how the last runner died
        self._replied = False  # whether the current runner finished a reply
        # Runners started in place of one that died (or was stopped for not answering), for monitoring.
        self.restarts = 0
        self._died = False  # the last runner died: the next one started is a restart
        # One sentence about the last switch to safer CPU kernels, for the status bar; "" when none happened.
        self.kernel_note = ""
        self._ctx = multiprocessing.get_context("spawn")
        self._process: BaseProcess | None = None
        self._conn: Connection | None = None
        self._loaded: Loaded | None = None
        self._plan: LoadPlan | None = None
        self._lock = threading.Lock()  # loads, exchanges, starts and stops: one at a time
        self._send_lock = threading.Lock()
        # The messages received for each request still waiting for some, by request id (LOAD_REPLY for a
        # load's and an exchange's); `_reading` while a thread reads the pipe for everyone.
        self._mail = threading.Condition()
        self._boxes: dict[str, deque[object]] = {}
        self._reading = False
        # Requests whose waiter stopped the runner for not answering: their box gets _NoAnswer.
        self._silenced: set[str] = set()
        self._runs = 0  # runners started: which one a request went to
        self._kernel_switches: dict[int, bool] = {}  # per runner that died: whether safer kernels followed

    @property
    def loaded(self) -> Loaded | None:
        return self._loaded if self.alive else None

    @property
    def plan(self) -> LoadPlan | None:
        return self._plan

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def kernels(self) -> CpuKernels:
        """The CPU variant the next runner starts on: a fallback remembered for this machine, else the best
        one."""
        if self._kernels is None:
            self._kernels = kernels_for_this_machine(self._kernel_memory)
        return self._kernels

    def _start(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        log_path = str(self._log_path) if self._log_path else None
        kernels = self.kernels
        variant = None if kernels.variant == BUILT_IN else kernels.variant
        process = self._ctx.Process(
            target=self._entry,
            args=(child, log_path, variant, kernels.reason),
            name="hearth-runner",
            daemon=True,
        )
        process.start()
        child.close()
        with self._mail:
            self._process, self._conn = process, parent
            self._runs += 1
        if self._died:
            self.restarts += 1
            self._died = False
        self._loaded = None
        self._replied = False
        log.info("runner started (pid %s, CPU kernels %s: %s)", process.pid, kernels.variant, kernels.reason)

    def _switch_to_safer_kernels(self, *, decoding: bool) -> bool:
        """After the runner died of a CPU fault: choose the next safer CPU variant, remember it for this
        machine, and say so. False when the death was not a CPU fault or nothing safer is left.

        `decoding`: it died while answering a request, not while loading a model (where a segfault is the
        file's doing).
        """
        fault, kernels = self._exit_signal, self.kernels
        if fault is None or kernels.variant == BUILT_IN:
            return False
        cpu_fault = fault == _CPU_FAULT or (
            fault in _EARLY_CPU_FAULTS and decoding and not self._replied and kernels.reason == BEST_REASON
        )
        safer = safer_than(kernels.variant) if cpu_fault else None
        if safer is None:
            return False
        name = signal.Signals(fault).name
        remembered = self._kernel_memory.remember(safer, kernels.variant, name)
        self._kernels = CpuKernels(safer, remembered.reason)
        self.kernel_note = (
            f"llama.cpp's {kernels.variant} CPU kernels crashed on this computer ({name}); Hearth now uses "
            f"its safer {safer} kernels here."
        )
        log.warning("%s (remembered in %s)", self.kernel_note, self._kernel_memory.path)
        return True

    def _reap(self) -> str:
        """Clean up after a dead runner and say what happened, with llama.cpp's last words if any. Called
        with `_mail` held."""
        process = self._process
        code = None
        if process is not None:
            process.join(timeout=5)
            code = process.exitcode
        silenced = bool(self._silenced)
        # Stopped by Hearth for not answering: not the CPU's doing.
        self._exit_signal = -code if code is not None and code < 0 and not silenced else None
        self._died = True
        if self._conn is not None:
            self._conn.close()
        self._process, self._conn, self._loaded = None, None, None
        reason = "the model runner stopped responding" if silenced else _describe_exit(code)
        tail = "" if silenced else self._log_tail()
        log.error("%s%s", reason, f": {tail}" if tail else "")
        return reason + (f": {tail}" if tail else "")

    def _log_tail(self) -> str:
        if not self._log_path or not self._log_path.exists():
            return ""
        with self._log_path.open("rb") as fh:
            fh.seek(max(0, self._log_path.stat().st_size - 2048))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        # llama.cpp's abort messages are the last lines it writes before dying.
        for line in reversed(lines):
            if "error" in line.lower() or "assert" in line.lower() or "abort" in line.lower():
                return line[:300]
        return ""

    def _expect(self, request_id: str) -> None:
        """Messages for `request_id` are kept from now on, until _done(request_id)."""
        with self._mail:
            self._boxes[request_id] = deque()

    def _done(self, request_id: str) -> None:
        """Later messages for `request_id` (a reply given up on, still being cancelled) are dropped."""
        with self._mail:
            self._boxes.pop(request_id, None)
            self._silenced.discard(request_id)

    def _receive(self, request_id: str, timeout: float | None) -> object:
        """Wait for the next message for `request_id`, or for the runner to die; a dead runner raises
        RUNNER_CRASHED.

        A runner that sends nothing for this request within `timeout` is killed, and _NoAnswer raised:
        given up on, it would otherwise go on spinning in a template or in llama.cpp, holding a core and its
        memory, and answer the next request with the reply to this one. Every other request waiting then
        gets RUNNER_CRASHED.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._mail:
            box = self._boxes[request_id]
            while True:
                if box:
                    message = box.popleft()
                    if isinstance(message, RunnerError):
                        if request_id in self._silenced:
                            raise _NoAnswer(ErrorKind.RUNNER_CRASHED, "the model runner stopped responding")
                        raise message
                    return message
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    self._silence(request_id, timeout)
                    deadline = None  # the runner's death, delivered to every box, ends the wait
                    continue
                if self._reading:
                    self._mail.wait(left)
                    continue
                self._reading = True
                try:
                    self._read(left)
                finally:
                    self._reading = False
                    self._mail.notify_all()

    def _read(self, timeout: float | None) -> None:
        """Read one message (or the runner's death) into its box; returns after `timeout` with nothing.
        Called with `_mail` held, which it lets go of while it waits."""
        conn, process = self._conn, self._process
        if conn is None or process is None:
            self._bury(RunnerError(ErrorKind.RUNNER_CRASHED, "the model runner is not running"))
            return
        self._mail.release()
        message: object = None
        try:
            ready = wait([conn, process.sentinel], timeout)
            if ready and (conn in ready or conn.poll()):
                message = conn.recv()
        except (EOFError, OSError, ValueError):
            # The pipe broke, or was closed under this wait (close() at exit): the runner is gone.
            ready, message = [conn], None
        finally:
            self._mail.acquire()
        if not ready:
            return
        if message is None:
            self._bury(RunnerError(ErrorKind.RUNNER_CRASHED, self._reap()))
            return
        box = self._boxes.get(getattr(message, "request_id", LOAD_REPLY))
        if box is not None:
            box.append(message)

    def _bury(self, death: RunnerError) -> None:
        """The runner is gone: every request waiting for it gets `death`."""
        for box in self._boxes.values():
            box.append(death)

    def _silence(self, request_id: str, timeout: float | None) -> None:
        """No answer for `request_id` in time: the runner is stopped (see _receive)."""
        process = self._process
        self._silenced.add(request_id)
        if process is not None and process.is_alive():
            log.warning("no answer from the runner (pid %s) in %g s; stopping it", process.pid, timeout)
            process.kill()

    def load(self, plan: LoadPlan) -> Loaded:
        """Blocking. Starts the runner if needed. Raises RunnerError."""
        with self._lock:
            try:
                return self._load(plan)
            except RunnerError as exc:
                if exc.kind is not ErrorKind.RUNNER_CRASHED or not self._switch_to_safer_kernels(
                    decoding=False
                ):
                    raise
            try:
                return self._load(plan)
            except RunnerError as exc:
                if exc.kind is ErrorKind.RUNNER_CRASHED:
                    again = f"{exc.message} (again, on the safer {self.kernels.variant} CPU kernels)"
                    raise RunnerError(exc.kind, again) from exc
                raise

    def _send(self, message: object) -> None:
        """A runner that died since the last message has closed its end of the pipe: that is a crash too."""
        conn = self._conn
        if conn is None:
            raise RunnerError(ErrorKind.RUNNER_CRASHED, "the model runner is not running")
        try:
            with self._send_lock:
                conn.send(message)
        except (BrokenPipeError, ConnectionResetError, EOFError, OSError) as exc:
            with self._mail:
                # A thread reading the pipe notices the death too, and buries it itself: the pipe cannot
                # be closed under it.
                if self._reading or self._conn is not conn:
                    raise RunnerError(ErrorKind.RUNNER_CRASHED, "the model runner stopped") from exc
                death = RunnerError(ErrorKind.RUNNER_CRASHED, self._reap())
                self._bury(death)
            raise death from exc

    def _load(self, plan: LoadPlan) -> Loaded:
        if not self.alive:
            if self._process is not None:
                with self._mail:
                    self._reap()
            self._start()
        self._plan = plan
        self._loaded = None
        self._expect(LOAD_REPLY)
        try:
            self._send(LoadRequest(plan))
            reply = self._receive(LOAD_REPLY, LOAD_TIMEOUT_S)
            if isinstance(reply, CheckingTemplate):
                try:
                    reply = self._receive(LOAD_REPLY, self._prompt_timeout_s)
                except _NoAnswer as exc:
                    raise RunnerError(
                        exc.kind,
                        f"Checking the model's chat template took longer than {self._prompt_timeout_s:g} s "
                        "(it may loop forever); the model runner was stopped.",
                    ) from exc
        except _NoAnswer as exc:
            raise RunnerError(
                exc.kind,
                f"Loading the model took longer than {LOAD_TIMEOUT_S:g} s; the model runner was stopped.",
            ) from exc
        finally:
            self._done(LOAD_REPLY)
        if isinstance(reply, Failed):
            raise RunnerError(reply.kind, reply.message)
        assert isinstance(reply, Loaded)
        self._loaded = reply
        return reply

    def generate(self, request: GenerateRequest) -> Iterator[PromptReady | TokenDelta | Finished | Failed]:
        """Yields PromptReady once the prompt is rendered, deltas, then exactly one Finished or Failed; a
        runner that dies yields RUNNER_CRASHED. Closing the iterator before its end cancels the reply.

        A runner killed by a CPU fault before it streamed anything is restarted once on safer CPU kernels,
        and the request is sent again: the caller sees one reply, not the crash.
        """
        if not self.alive or self._loaded is None:
            yield Failed(request.request_id, ErrorKind.NOT_LOADED, "No model is loaded.")
            return
        retried = False
        prompt_ready = False
        while True:
            failed = yield from self._generate_once(request, prompt_ready)
            if failed is None:
                return
            prompt_ready = prompt_ready or failed.prompt_ready
            message = failed.error.message
            if retried:
                message += f" (again, on the safer {self.kernels.variant} CPU kernels)"
            elif self._switched_kernels_after(failed.run):
                if not failed.streamed:
                    retried = True
                    try:
                        self._reload(failed.run)
                    except RunnerError as exc:
                        yield Failed(request.request_id, exc.kind, f"{exc.message} {self.kernel_note}")
                        return
                    continue
                # Text already shown cannot be taken back: this reply ends, the next one is safe.
                message += f" {self.kernel_note}"
            yield Failed(request.request_id, failed.error.kind, message)
            return

    def _switched_kernels_after(self, run: int) -> bool:
        """Whether the death of runner `run` moved Hearth to safer CPU kernels: decided once, by the first
        of the replies it cut off."""
        with self._lock:
            if run not in self._kernel_switches:
                self._kernel_switches[run] = self._switch_to_safer_kernels(decoding=True)
            return self._kernel_switches[run]

    def _reload(self, run: int) -> None:
        """The plan loaded again on a new runner, unless another reply cut off with `run` did so already."""
        with self._lock:
            if self._runs != run and self.alive and self._loaded is not None:
                return
            plan = self._plan
            assert plan is not None
            self._load(plan)

    def _generate_once(
        self, request: GenerateRequest, prompt_ready_sent: bool
    ) -> Generator[PromptReady | TokenDelta | Finished | Failed, None, _Interrupted | None]:
        """One attempt: yields events, returns None when the reply ended (Finished or Failed) or what cut it
        off when the runner died or stopped answering."""
        request_id = request.request_id
        run = self._runs
        self._expect(request_id)
        ended = False
        try:
            try:
                self._send(request)
            except RunnerError as exc:
                ended = True
                return _Interrupted(exc, False, False, run)
            prompt_ready = streamed = False
            while True:
                try:
                    event = self._receive(request_id, None if prompt_ready else self._prompt_timeout_s)
                except _NoAnswer as exc:
                    ended = True
                    message = (
                        f"Preparing the prompt took longer than {self._prompt_timeout_s:g} s (the "
                        "model's chat template may loop forever); the model runner was stopped."
                    )
                    yield Failed(request_id, exc.kind, message)
                    return None
                except RunnerError as exc:
                    ended = True
                    return _Interrupted(exc, prompt_ready, streamed, run)
                if isinstance(event, PromptReady):
                    prompt_ready = True
                    if not prompt_ready_sent:
                        yield event
                elif isinstance(event, TokenDelta):
                    streamed = True
                    yield event
                elif isinstance(event, Finished | Failed):
                    ended = True
                    self._replied = self._replied or isinstance(event, Finished)
                    yield event
                    return None
        finally:
            if not ended:
                # Closed early (its caller went away): the runner stops it; what it still sends is dropped.
                self.cancel(request_id)
            self._done(request_id)

    def count_tokens(self, messages: tuple[ChatMessage, ...], tools: tuple[ToolSpec, ...] = ()) -> TokenCount:
        """Blocking. The prompt these messages make, counted by the loaded model's own template and tokenizer.

        Raises RunnerError: NOT_LOADED, or RUNNER_CRASHED (the runner died, or the template ran past the
        prompt time limit and the runner was stopped, as for generate).
        """
        if not self.alive or self._loaded is None:
            raise RunnerError(ErrorKind.NOT_LOADED, "No model is loaded.")
        request = CountTokensRequest(uuid.uuid4().hex, messages, tools)
        self._expect(request.request_id)
        try:
            self._send(request)
            reply = self._receive(request.request_id, self._prompt_timeout_s)
        except _NoAnswer as exc:
            raise RunnerError(
                exc.kind,
                f"Counting the prompt took longer than {self._prompt_timeout_s:g} s (the model's "
                "chat template may loop forever); the model runner was stopped.",
            ) from exc
        finally:
            self._done(request.request_id)
        if isinstance(reply, Failed):
            raise RunnerError(reply.kind, reply.message)
        assert isinstance(reply, TokenCount)
        return reply

    def exchange(self, request: object, timeout: float | None = None) -> object:
        """Blocking: send one request and return the runner's one reply, starting a runner first when none
        is running. A runner that died since the last exchange, or dies now, raises RUNNER_CRASHED (the
        next exchange starts a new one); one that does not answer within `timeout` is stopped and raises
        RUNNER_CRASHED too."""
        with self._lock:
            if self._process is not None and not self.alive:
                with self._mail:
                    reason = self._reap()
                raise RunnerError(ErrorKind.RUNNER_CRASHED, reason)
            if self._process is None:
                self._start()
            request_id = getattr(request, "request_id", LOAD_REPLY)
            self._expect(request_id)
            try:
                self._send(request)
                return self._receive(request_id, timeout)
            finally:
                self._done(request_id)

    def cancel(self, request_id: str) -> None:
        """Stop the reply to `request_id` at its next token; nothing when it has ended or the runner is
        gone (its death ends the reply anyway)."""
        with contextlib.suppress(RunnerError):
            self._send(CancelRequest(request_id))

    def kill(self) -> None:
        """Hard-kill the runner (tests, and the user's 'unload' of a wedged model)."""
        if self._process is not None and self._process.is_alive():
            self._process.kill()

    def close(self) -> None:
        process, conn = self._process, self._conn
        if process is None:
            return
        try:
            if conn is not None and process.is_alive():
                conn.send(SHUTDOWN)
        except (BrokenPipeError, OSError):
            pass
        process.join(timeout=10)
        if process.is_alive():
            process.kill()
            process.join(timeout=5)
        if conn is not None:
            conn.close()
        self._process, self._conn, self._loaded = None, None, None
