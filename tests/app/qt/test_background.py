"""Background, the one worker helper: calls run on named workers, results and every error reach the GUI
thread through one path, and shutting down leaves no thread behind."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from functools import partial

import pytest
from PySide6.QtCore import QObject, Signal
from pytestqt.qtbot import QtBot

from app.errors import HearthError
from app.qt.background import Background, describe

# Guards a test against hanging when the behaviour it checks is broken; never reached when it works.
STUCK_S = 30


@pytest.fixture
def pools() -> Iterator[Callable[..., Background]]:
    made: list[Background] = []

    def make(name: str = "test", workers: int = 1) -> Background:
        pool = Background(name, workers)
        made.append(pool)
        return pool

    yield make
    for pool in made:
        pool.shutdown()


class _Thread:
    """Records where a callback ran."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.values: list[object] = []

    def __call__(self, value: object) -> None:
        self.names.append(threading.current_thread().name)
        self.values.append(value)


def test_a_call_runs_on_a_named_worker_and_its_result_arrives_on_the_gui_thread(
    qtbot: QtBot, pools: Callable[..., Background]
) -> None:
    pool = pools("things")
    ran: list[str] = []
    done = _Thread()

    def work() -> int:
        ran.append(threading.current_thread().name)
        return 42

    future = pool.call(work, done)
    qtbot.waitUntil(lambda: bool(done.values))

    assert future.result() == 42
    assert [name.rsplit("_", 1)[0] for name in ran] == ["hearth-things"]
    assert done.names == [threading.current_thread().name] and done.values == [42]


@pytest.mark.parametrize(
    ("error", "told", "traceback"),
    [
        (HearthError("The file is not a GGUF model."), "The file is not a GGUF model.", False),
        (RuntimeError("boom"), "Unexpected error: boom", True),
    ],
)
def test_an_error_is_logged_with_the_operation_and_reaches_on_error_on_the_gui_thread(
    qtbot: QtBot,
    pools: Callable[..., Background],
    caplog: pytest.LogCaptureFixture,
    error: Exception,
    told: str,
    traceback: bool,
) -> None:
    caplog.set_level(logging.INFO, logger="hearth.background")
    pool = pools()
    failed = _Thread()
    done = _Thread()
    heard: list[tuple[str, object]] = []
    pool.failed.connect(lambda operation, exc: heard.append((operation, exc)))

    def work() -> None:
        raise error

    future = pool.call(work, done, failed, operation="importing a model")
    qtbot.waitUntil(lambda: bool(failed.values))

    assert failed.values == [error] and failed.names == [threading.current_thread().name]
    assert done.values == [] and heard == [], "an error goes one way only"
    assert future.exception() is error
    assert describe(error) == told
    (record,) = [r for r in caplog.records if r.name == "hearth.background"]
    assert record.getMessage().startswith("importing a model failed")
    assert str(record.threadName).startswith("hearth-test")
    assert (record.exc_info is not None) == traceback


def test_without_on_error_the_failure_is_the_pools_signal_named_after_the_call(
    qtbot: QtBot, pools: Callable[..., Background]
) -> None:
    pool = pools()
    error = OSError("disk full")

    def save_everything() -> None:
        raise error

    with qtbot.waitSignal(pool.failed) as named:
        pool.call(save_everything, operation="saving the settings")
    assert named.args == ["saving the settings", error]

    with qtbot.waitSignal(pool.failed) as unnamed:
        pool.call(save_everything)
    assert unnamed.args[0].endswith("save_everything") and unnamed.args[1] is error


class _Emitter(QObject):
    said = Signal(str)


def test_the_result_arrives_after_every_signal_the_call_emitted(
    qtbot: QtBot, pools: Callable[..., Background]
) -> None:
    pool = pools()
    emitter = _Emitter()
    order: list[str] = []
    emitter.said.connect(order.append)

    def work() -> str:
        for word in ("one", "two", "three"):
            emitter.said.emit(word)
        return "done"

    def fail() -> None:
        emitter.said.emit("trying")
        raise HearthError("no")

    pool.call(work, order.append)
    pool.call(fail, on_error=lambda exc: order.append(f"failed: {exc}"))
    qtbot.waitUntil(lambda: len(order) == 6)
    assert order == ["one", "two", "three", "done", "trying", "failed: no"]


def test_one_worker_keeps_calls_in_order_and_more_let_them_pass_each_other(
    qtbot: QtBot, pools: Callable[..., Background]
) -> None:
    ordered = pools("ordered")
    seen: list[int] = []
    for number in range(20):
        ordered.call(partial(seen.append, number))
    ordered.shutdown()
    assert seen == list(range(20))

    # Each call waits for the other: both finish only if they run at once.
    parallel = pools("parallel", workers=2)
    meeting = threading.Barrier(2, timeout=STUCK_S)
    arrived: list[int] = []
    for _ in range(2):
        parallel.call(meeting.wait, arrived.append)
    qtbot.waitUntil(lambda: len(arrived) == 2, timeout=STUCK_S * 1000)
    assert sorted(arrived) == [0, 1]


@pytest.mark.parametrize("cancel_pending", [False, True])
def test_shutdown_waits_for_the_running_call_and_runs_or_cancels_the_waiting_ones(
    pools: Callable[..., Background], cancel_pending: bool
) -> None:
    pool = pools()
    started = threading.Event()
    release = threading.Event()
    ran: list[str] = []

    def first() -> None:
        started.set()
        release.wait(STUCK_S)
        ran.append("first")

    running = pool.call(first)
    waiting = pool.call(partial(ran.append, "second"))
    assert started.wait(STUCK_S)
    if cancel_pending:
        # Released only by the waiting call being cancelled, which shutdown does before it waits.
        waiting.add_done_callback(lambda _future: release.set())
        pool.shutdown(cancel_pending=True)
    else:
        # Released from elsewhere while shutdown waits here.
        releaser = threading.Thread(target=release.set)
        releaser.start()
        pool.shutdown()
        releaser.join()

    assert running.done() and ran[0] == "first"
    assert ran == (["first"] if cancel_pending else ["first", "second"])
    assert waiting.cancelled() == cancel_pending
