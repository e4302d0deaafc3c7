"""The runner's queue: jobs share it up to the places it has, a load has it alone, all in the order asked."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest

from app.chat.runner_queue import Job, JobCancelled, RunnerQueue
from tests.helpers.waiting import wait_until


class Recorder:
    """Jobs on threads of their own: each enters the queue, says so, and holds its place until released."""

    def __init__(self, queue: RunnerQueue) -> None:
        self.queue = queue
        self.inside: list[str] = []
        self.entered: list[str] = []
        self._release: dict[str, threading.Event] = {}
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def start(
        self, name: str, hold: Callable[[Job], AbstractContextManager[None]], job: Job | None = None
    ) -> Job:
        job = job or Job()
        self._release[name] = release = threading.Event()

        def run() -> None:
            try:
                with hold(job):
                    with self._lock:
                        self.inside.append(name)
                        self.entered.append(name)
                    release.wait(30)
                    with self._lock:
                        self.inside.remove(name)
            except JobCancelled:
                with self._lock:
                    self.entered.append(f"{name} cancelled")

        thread = threading.Thread(target=run, name=f"job {name}")
        self._threads.append(thread)
        thread.start()
        return job

    def release(self, name: str) -> None:
        self._release[name].set()

    def finish(self) -> None:
        for event in self._release.values():
            event.set()
        for thread in self._threads:
            thread.join(30)


@pytest.fixture
def places() -> list[int]:
    return [2]


@pytest.fixture
def jobs(places: list[int]) -> Iterator[Recorder]:
    recorder = Recorder(RunnerQueue(places=lambda: places[0]))
    yield recorder
    recorder.finish()


def test_jobs_share_the_runner_up_to_the_places_it_has(jobs: Recorder, places: list[int]) -> None:
    for name in ("a", "b", "c"):
        jobs.start(name, jobs.queue.share)
    wait_until(lambda: sorted(jobs.inside) == ["a", "b"] and jobs.queue.waiting == 1, "two to share")
    jobs.release("a")
    wait_until(lambda: sorted(jobs.inside) == ["b", "c"], "the third to take the place given up")
    # The setting is read at each admission: one more place lets the next in at once.
    places[0] = 3
    jobs.start("d", jobs.queue.share)
    wait_until(lambda: sorted(jobs.inside) == ["b", "c", "d"], "a third place")


def test_the_windows_turn_has_a_place_of_its_own_beside_the_api_requests_and_counting_takes_none(
    jobs: Recorder, places: list[int]
) -> None:
    places[0] = 1
    jobs.start("api 1", jobs.queue.share)
    wait_until(lambda: jobs.inside == ["api 1"], "the first request")
    jobs.start("api 2", jobs.queue.share)
    wait_until(lambda: jobs.queue.waiting == 1, "the second request to wait for the place")
    # Behind the waiting request, the window's turn goes in at once, and so does a count of its prompt.
    jobs.start("window", jobs.queue.share, Job(interactive=True))
    jobs.start("count", lambda job: jobs.queue.share(job, generates=False))
    wait_until(lambda: sorted(jobs.inside) == ["api 1", "count", "window"], "the window's turn and the count")
    assert jobs.queue.waiting == 1
    jobs.release("api 1")
    wait_until(lambda: "api 2" in jobs.inside, "the second request, once the first has ended")


def test_a_job_that_needs_the_runner_alone_waits_for_those_sharing_it_and_comes_before_later_ones(
    jobs: Recorder,
) -> None:
    jobs.start("reply", jobs.queue.share)
    wait_until(lambda: jobs.inside == ["reply"], "the reply to start")
    jobs.start("load", jobs.queue.turn)
    wait_until(lambda: jobs.queue.waiting == 1, "the load to queue")
    jobs.start("later reply", jobs.queue.share)
    wait_until(lambda: jobs.queue.waiting == 2, "the later reply to queue")
    # A place is free, but the later reply does not overtake the load.
    assert jobs.inside == ["reply"]
    jobs.release("reply")
    wait_until(lambda: jobs.inside == ["load"], "the load to have the runner alone")
    jobs.release("load")
    wait_until(lambda: jobs.inside == ["later reply"], "the later reply")
    assert jobs.entered == ["reply", "load", "later reply"]


def test_a_sharing_job_that_must_load_gives_up_its_place_and_shares_again(jobs: Recorder) -> None:
    queue = jobs.queue
    loading, loaded = threading.Event(), threading.Event()
    other_saw: list[list[str]] = []

    def share_then_load(job: Job) -> AbstractContextManager[None]:
        @contextmanager
        def held() -> Iterator[None]:
            with queue.share(job):
                loading.wait(30)
                with queue.alone(job):
                    other_saw.append(list(jobs.inside))
                loaded.set()
                yield

        return held()

    jobs.start("api", queue.share)
    wait_until(lambda: jobs.inside == ["api"], "the API request to run")
    jobs.start("turn", share_then_load)
    wait_until(lambda: not queue.waiting, "the turn to share")
    loading.set()
    # It waits, alone-to-be, for the API request sharing the runner to end.
    wait_until(lambda: queue.waiting == 1, "the turn to wait for the runner alone")
    assert not loaded.is_set()
    jobs.release("api")
    assert loaded.wait(10)
    assert other_saw == [[]]  # nothing else held the runner during the load
    wait_until(lambda: jobs.inside == ["turn"], "the turn to share again")


def test_a_job_cancelled_while_it_waits_leaves_the_line_and_nothing_runs(jobs: Recorder) -> None:
    jobs.start("load", jobs.queue.turn)
    wait_until(lambda: jobs.inside == ["load"], "the load")
    waiting = jobs.start("gui", jobs.queue.share, Job(interactive=True))
    jobs.start("api", jobs.queue.share)
    wait_until(lambda: jobs.queue.waiting == 2, "both to wait")
    jobs.queue.cancel_interactive()
    wait_until(lambda: jobs.queue.waiting == 1, "the GUI turn to leave the line")
    assert waiting.cancelled
    jobs.release("load")
    wait_until(lambda: jobs.inside == ["api"], "the API request")
    assert jobs.entered == ["load", "gui cancelled", "api"]


def test_cancelling_a_running_job_stops_what_it_runs_now_and_what_it_starts_later() -> None:
    job, stopped = Job(), []
    with job.stopping(lambda: stopped.append("first reply")):
        job.cancel()
    assert stopped == ["first reply"]
    # Already cancelled: a generation started after the Stop is stopped as it starts.
    with job.stopping(lambda: stopped.append("second reply")):
        pass
    assert stopped == ["first reply", "second reply"]
