"""First come, first served access to the one model runner, shared by GUI turns and local server requests."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from app.errors import HearthError


class JobCancelled(HearthError):
    """The job was cancelled while it waited for the runner: nothing ran and nothing was stored."""


class Job:
    """One turn, measurement or API request that waits for, then holds, the runner.

    `interactive` jobs are the GUI's and the CLI's own turns: the Stop button and Ctrl+C cancel those, never
    a request another program made through the local server.
    """

    def __init__(self, *, interactive: bool = False) -> None:
        self.interactive = interactive
        self.cancelled = False


class RunnerQueue:
    """A fair lock: jobs get the runner in the order they asked for it.

    `threading.Lock` makes no promise about which waiter wins; with the GUI and several API clients asking
    at once, one of them could wait indefinitely.
    """

    def __init__(self, *, acquired: Callable[[], None], cancel_running: Callable[[], None]) -> None:
        # acquired: called as a job takes the runner (clears a Stop meant for the job before);
        # cancel_running: stops what the runner is doing now. Both run under the queue's lock.
        self._acquired = acquired
        self._cancel_running = cancel_running
        self._changed = threading.Condition()
        self._waiting: deque[Job] = deque()
        self._holder: Job | None = None

    @property
    def waiting(self) -> int:
        """Jobs waiting for the runner (not counting the one holding it)."""
        with self._changed:
            return len(self._waiting)

    @contextmanager
    def turn(self, job: Job) -> Iterator[None]:
        """Wait for the runner, hold it for the block. Raises JobCancelled if cancelled while waiting."""
        with self._changed:
            self._waiting.append(job)
            try:
                while not job.cancelled and (self._holder is not None or self._waiting[0] is not job):
                    self._changed.wait()
                if job.cancelled:
                    raise JobCancelled("Stopped before it started: nothing was sent to the model.")
            finally:
                self._waiting.remove(job)
                # The next in line may go now, or this job was in its way and gave up.
                self._changed.notify_all()
            self._holder = job
            # From here a cancel reaches the runner through cancel_running.
            self._acquired()
        try:
            yield
        finally:
            with self._changed:
                self._holder = None
                self._changed.notify_all()

    def cancel(self, job: Job) -> None:
        """Safe from any thread: a waiting job gives up its place, a running one stops at the next token."""
        with self._changed:
            job.cancelled = True
            if self._holder is job:
                self._cancel_running()
            self._changed.notify_all()

    def cancel_interactive(self) -> None:
        """The Stop button: the GUI's (or CLI's) turn, running or waiting; API requests go on."""
        with self._changed:
            for job in [*self._waiting, self._holder]:
                if job is not None and job.interactive:
                    self.cancel(job)
