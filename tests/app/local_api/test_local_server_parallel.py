"""Several clients at once: the local API's requests and the window's own turn share the runner, which
writes their replies together (continuous batching), up to the parallel_slots setting; a load waits for the
replies in progress. With the official `openai` client and the real starter model."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import openai
import pytest

from app.chat.engine import ChatEngine, TurnCallbacks, TurnResult
from app.core import Core
from app.local_api.server import LocalServer
from app.storage.orm import MessageStatus
from inference.protocol import SamplingParams
from tests.app.local_api.test_local_server import KEY, serve
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.model

PROMPTS = (
    "Write a very long story about a lighthouse keeper.",
    "Write a very long story about a baker in Paris.",
    "Write a very long story about a lost dog.",
)


@dataclass
class Timeline:
    """The order in which streams started and ended, across threads."""

    events: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def mark(self, what: str, name: str) -> None:
        with self.lock:
            self.events.append((what, name))

    def position(self, what: str, name: str) -> int:
        return self.events.index((what, name))

    def all_started_before_any_ended(self, names: list[str]) -> bool:
        return max(self.position("first", n) for n in names) < min(self.position("end", n) for n in names)


def api_stream(server: LocalServer, name: str, prompt: str, timeline: Timeline, max_tokens: int = 60) -> str:
    with openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=300) as api:
        stream = api.chat.completions.create(
            model=name.split("#")[0],
            messages=[{"role": "user", "content": prompt}],
            max_tokens=max_tokens,
            temperature=0,
            stream=True,
        )
        text = ""
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                if not text:
                    timeline.mark("first", name)
                text += chunk.choices[0].delta.content
        timeline.mark("end", name)
        return text


class WindowCallbacks(TurnCallbacks):
    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.streamed = False

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        if not self.streamed:
            self.streamed = True
            self.timeline.mark("first", "window")


def run_all(jobs: dict[str, Callable[[], object]]) -> dict[str, object]:
    results: dict[str, object] = {}
    start = threading.Barrier(len(jobs))

    def run(name: str) -> None:
        start.wait()
        results[name] = jobs[name]()

    threads = [threading.Thread(target=run, args=(name,)) for name in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(600)
    assert not any(thread.is_alive() for thread in threads)
    return results


def model_of(core: Core, engine: ChatEngine) -> str:
    (model,) = core.library.list_models()
    engine.prepare(model.name)
    return model.name


def test_the_windows_turn_and_api_requests_are_written_at_once(core: Core, engine: ChatEngine) -> None:
    name = model_of(core, engine)
    server = serve(engine)
    timeline = Timeline()
    callbacks = WindowCallbacks(timeline)
    sampling = SamplingParams(temperature=0.0, max_tokens=60, ignore_eos=True)

    def window() -> object:
        result = engine.run_turn(PROMPTS[0], name, sampling=sampling, callbacks=callbacks)
        timeline.mark("end", "window")
        return result

    try:
        results = run_all(
            {
                "window": window,
                "api 1": lambda: api_stream(server, f"{name}#1", PROMPTS[1], timeline),
                "api 2": lambda: api_stream(server, f"{name}#2", PROMPTS[2], timeline),
            }
        )
    finally:
        server.stop()
    assert timeline.all_started_before_any_ended(["window", f"{name}#1", f"{name}#2"]), timeline.events
    turn = results["window"]
    assert isinstance(turn, TurnResult) and turn.status is MessageStatus.COMPLETE
    stored = core.store.get_message(turn.assistant_message_id)
    assert stored.completion_tokens == 60 and stored.content
    assert all(results[n] for n in ("api 1", "api 2"))


def test_with_one_slot_the_requests_are_answered_one_after_another(
    core: Core, make_engine: Callable[..., ChatEngine]
) -> None:
    engine = make_engine(parallel_slots=1)
    name = model_of(core, engine)
    # One place for requests, and the window's own beside it.
    assert engine.client.plan is not None and engine.client.plan.n_parallel == 2
    server = serve(engine)
    timeline = Timeline()
    try:

        def asker(i: int) -> Callable[[], object]:
            return lambda: api_stream(server, f"{name}#{i}", PROMPTS[i], timeline)

        run_all({f"api {i}": asker(i) for i in (1, 2)})
    finally:
        server.stop()
    first, second = sorted((f"{name}#1", f"{name}#2"), key=lambda n: timeline.position("first", n))
    assert timeline.position("end", first) < timeline.position("first", second), timeline.events


def test_a_load_waits_for_the_api_replies_in_progress_and_none_is_cut_off(
    core: Core, engine: ChatEngine
) -> None:
    name = model_of(core, engine)
    server = serve(engine)
    timeline = Timeline()
    measured_at: list[int] = []

    def api() -> object:
        return api_stream(server, f"{name}#1", PROMPTS[1], timeline, max_tokens=120)

    def measure_with_another_context() -> object:
        wait_until(lambda: ("first", f"{name}#1") in timeline.events, "the API reply to start")
        # Another context length: the model is loaded again, which waits for the reply in progress.
        engine.settings_store.update(context_length=2048)
        usage = engine.measure_context(None, "Hello", name)
        measured_at.append(len(timeline.events))
        return usage

    try:
        results = run_all({"api": api, "measure": measure_with_another_context})
    finally:
        server.stop()
    # The reply ran to its end, whole, before the load began.
    assert timeline.position("end", f"{name}#1") < measured_at[0]
    assert isinstance(results["api"], str) and results["api"]
    assert getattr(results["measure"], "context_tokens", None) == 2048
    assert engine.client.plan is not None and engine.client.plan.n_ctx == 2048
