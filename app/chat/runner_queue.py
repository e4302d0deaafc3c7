"""Fair access to the one model runner, shared by GUI turns and local server requests.

The runner generates several replies at once (inference.decoding), so jobs share it: up to the
parallel_slots setting of local server requests are written together, and the window's own turn has a place
of its own beside them, so a program using the API never makes the window wait. A job that only counts
prompts takes no place. A load, or anything else that changes what the runner holds, has it alone, once
the jobs sharing it are done. Jobs go in the order they asked, except past one that must wait for a place
of its kind: a load waits for the replies ahead of it, and nothing asked for after it overtakes it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from app.errors import HearthError


class JobCancelled(HearthError):
    """The job was cancelled while it waited for the runner: nothing ran and nothing was stored."""


class Job:
    """One turn, measurement or API request that waits for, then holds, a place at the runner.

    `interactive` jobs are the GUI's and the CLI's own turns: the Stop button and Ctrl+C cancel those, never
    a request another program made through the local server.
    """

    def __init__(self, *, interactive: bool = False) -> None:
        self.interactive = interactive
        self.cancelled = False
        self._lock = threading.Lock()
        self._stops: list[Callable[[], None]] = []

    @contextmanager
    def stopping(self, stop: Callable[[], None]) -> Iterator[None]:
        """While the block runs, cancelling the job calls `stop` (which ends what the block runs: a reply's
        generation, a server's stream); at once if the job is cancelled already."""
        with self._lock:
            self._stops.append(stop)
            cancelled = self.cancelled
        if cancelled:
            stop()
        try:
            yield
        finally:
            with self._lock:
                self._stops.remove(stop)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled = True
            stops = list(self._stops)
        for stop in stops:
            stop()


@dataclass(eq=False)
class _Waiter:
    job: Job
    alone: bool
    generates: bool = True  # takes one of the runner's places for a reply


class RunnerQueue:
    """A fair lock with shared places: jobs get the runner in the order they asked for it.

    `threading.Lock` makes no promise about which waiter wins; with the GUI and several API clients asking
    at once, one of them could wait indefinitely.
    """

    def __init__(self, *, places: Callable[[], int] = lambda: 1) -> None:
        # places: how many replies to API requests may be written at once, read at each admission (the
        # setting may change); interactive jobs have one more place of their own.
        self._places = places
        self._changed = threading.Condition()
        self._waiting: deque[_Waiter] = deque()
        self._sharing: dict[Job, bool] = {}  # each job sharing the runner: whether it takes a place
        self._alone: Job | None = None

    @property
    def waiting(self) -> int:
        """Jobs waiting for the runner (not counting those holding it)."""
        with self._changed:
            return len(self._waiting)

    @contextmanager
    def share(self, job: Job, *, generates: bool = True) -> Iterator[None]:
        """Wait for a place beside the other jobs sharing the runner (none for a job that only counts, not
        `generates`), hold it for the block. Raises JobCancelled if cancelled while waiting."""
        self._enter(_Waiter(job, alone=False, generates=generates), first=False)
        try:
            yield
        finally:
            self._leave(job)

    @contextmanager
    def turn(self, job: Job) -> Iterator[None]:
        """Wait for the runner to be free of every other job, hold it alone for the block. Raises
        JobCancelled if cancelled while waiting."""
        self._enter(_Waiter(job, alone=True), first=False)
        try:
            yield
        finally:
            self._leave(job)

    @contextmanager
    def alone(self, job: Job | None) -> Iterator[None]:
        """For a job sharing the runner that must change what it holds (load another model): it gives up
        its place, has the runner alone once the others sharing it are done (before any job that asked after
        it), then shares again. A job that holds it alone already, or none (a caller outside the queue),
        just runs the block."""
        with self._changed:
            generates = self._sharing.pop(job, None) if job is not None else None
            self._changed.notify_all()
        if generates is None:
            yield
            return
        assert job is not None
        back = _Waiter(job, alone=False, generates=generates)
        try:
            self._enter(_Waiter(job, alone=True), first=True)
        except JobCancelled:
            self._enter(back, first=True, cancellable=False)
            raise
        try:
            yield
        finally:
            self._leave(job)
            self._enter(back, first=True, cancellable=False)

    def _enter(self, waiter: _Waiter, *, first: bool, cancellable: bool = True) -> None:
        job = waiter.job
        with self._changed:
            if first:
                self._waiting.appendleft(waiter)
            else:
                self._waiting.append(waiter)
            try:
                while not (cancellable and job.cancelled) and not self._may_go(waiter):
                    self._changed.wait()
                if cancellable and job.cancelled:
                    raise JobCancelled("Stopped before it started: nothing was sent to the model.")
            finally:
                self._waiting.remove(waiter)
                # The next in line may go now, or this job was in its way and gave up.
                self._changed.notify_all()
            if waiter.alone:
                self._alone = job
            else:
                self._sharing[job] = waiter.generates

    def _may_go(self, waiter: _Waiter) -> bool:
        """First in line among those that may go now: a job ahead that may go goes first, one waiting to
        have the runner alone holds back everyone behind it, one waiting for a place of its kind does not."""
        if self._alone is not None:
            return False
        for ahead in self._waiting:
            if ahead is waiter:
                break
            if ahead.alone or self._has_room(ahead):
                return False
        return self._has_room(waiter)

    def _has_room(self, waiter: _Waiter) -> bool:
        if waiter.alone:
            return not self._sharing
        if not waiter.generates:
            return True
        replies = [job for job, generates in self._sharing.items() if generates]
        places = max(1, self._places())
        if len(replies) >= places + 1:
            return False
        return waiter.job.interactive or sum(not job.interactive for job in replies) < places

    def _leave(self, job: Job) -> None:
        with self._changed:
            if self._alone is job:
                self._alone = None
            self._sharing.pop(job, None)
            self._changed.notify_all()

    def cancel(self, job: Job) -> None:
        """Safe from any thread: a waiting job gives up its place, a running one stops at the next token."""
        job.cancel()
        with self._changed:
            self._changed.notify_all()

    def cancel_interactive(self) -> None:
        """The Stop button: the GUI's (or CLI's) turns, running or waiting; API requests go on."""
        for job in self._jobs():
            if job.interactive:
                self.cancel(job)

    @property
    def interactive_stopped(self) -> bool:
        """Stop was pressed for a GUI or CLI turn that holds the runner now."""
        with self._changed:
            holders = [*self._sharing, *([self._alone] if self._alone is not None else [])]
        return any(job.interactive and job.cancelled for job in holders)

    def _jobs(self) -> list[Job]:
        with self._changed:
            held = [self._alone] if self._alone is not None else []
            return [*(w.job for w in self._waiting), *self._sharing, *held]
