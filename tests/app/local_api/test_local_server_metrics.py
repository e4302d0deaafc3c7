"""GET /metrics on the local API: real requests with the official `openai` client, real turns of the window
through ChatEngine, a real model switch and a runner really killed, each scrape parsed by prometheus_client's
own parser."""

from __future__ import annotations

import http.client
import json
import os
import signal
import threading
from pathlib import Path

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from app.chat.engine import ChatEngine, TurnCallbacks
from app.core import Core
from app.local_api.server import LocalServer
from inference.protocol import SamplingParams
from tests.app.local_api.test_local_server import (
    COLOURS,
    KEY,
    LOOPBACK,
    STORY,
    client,
    model_name,
    one_reply_at_a_time,
    raw_exchange,
    server,
)
from tests.conftest import starter_model_file
from tests.helpers.model_files import with_chat_template
from tests.helpers.waiting import wait_until

# The fixtures this file takes from the server's main tests, named here so that pytest finds them.
__all__ = ["client", "model_name", "one_reply_at_a_time", "server"]

CHAT = "/v1/chat/completions"
PLAIN_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
WINDOW, API = {"source": "window"}, {"source": "api"}


class Scrape:
    """One scrape's samples, looked up by name and labels."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.samples: list[Sample] = [
            sample for family in text_string_to_metric_families(text) for sample in family.samples
        ]

    def find(self, name: str, **labels: str) -> list[Sample]:
        return [s for s in self.samples if s.name == name and labels.items() <= s.labels.items()]

    def value(self, name: str, **labels: str) -> float:
        """The one sample with these labels; 0 for a request counter's series not written yet."""
        found = self.find(name, **labels)
        if not found and name == "hearth_api_requests_total":
            return 0.0
        assert len(found) == 1, (name, labels, found)
        return found[0].value

    def requests(self, endpoint: str, status: int) -> float:
        return self.value("hearth_api_requests_total", endpoint=endpoint, status=str(status))

    def replies(self, source: dict[str, str]) -> tuple[float, float]:
        """The time-to-first-token and speed histograms' observation counts."""
        return (
            self.value("hearth_time_to_first_token_seconds_count", **source),
            self.value("hearth_tokens_per_second_count", **source),
        )

    def tokens(self, source: dict[str, str]) -> tuple[float, float]:
        return (
            self.value("hearth_prompt_tokens_total", **source),
            self.value("hearth_generated_tokens_total", **source),
        )


def get_metrics(
    server: LocalServer, method: str = "GET", **headers: str
) -> tuple[int, str, http.client.HTTPResponse]:
    connection = http.client.HTTPConnection(LOOPBACK, server.port, timeout=60)
    try:
        connection.request(method, "/metrics", headers={"Authorization": f"Bearer {KEY}", **headers})
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8"), response
    finally:
        connection.close()


def scrape(server: LocalServer) -> Scrape:
    status, text, response = get_metrics(server)
    assert status == 200, text
    assert response.getheader("Content-Type", "").startswith("text/plain; version=")
    return Scrape(text)


# -- without a model ----------------------------------------------------------------------------------


def test_metrics_need_the_key_and_a_get(server: LocalServer) -> None:
    for authorization in ("", "Bearer wrong", f"Basic {KEY}"):
        status, text, response = get_metrics(server, Authorization=authorization)
        assert status == 401 and response.getheader("WWW-Authenticate") == "Bearer"
        assert json.loads(text)["error"]["code"] == "invalid_api_key"
        assert "hearth_" not in text
    for method in ("POST", "PUT", "DELETE"):
        status, text, _ = get_metrics(server, method)
        assert status == 405 and json.loads(text)["error"]["code"] == "method_not_allowed"
    # The base class's own refusals are counted too: an unknown method, a request line it cannot read.
    assert raw_exchange(server, b"BREW /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")[0] == 501
    assert raw_exchange(server, b"GET /metrics HTTP/9.9\r\n\r\n")[0] == 505
    # Made-up paths all count as one endpoint, with the key or without it.
    with openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0) as stranger:
        for path in ("/a", "/b/c", "/v1/../etc"):
            with pytest.raises(openai.AuthenticationError):
                stranger.get(path, cast_to=object)
    with (
        openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0) as api,
        pytest.raises(openai.NotFoundError),
    ):
        api.get("/nothing-here", cast_to=object)

    metrics = scrape(server)
    assert metrics.requests("/metrics", 401) == 3
    assert metrics.requests("/metrics", 405) == 3
    assert metrics.requests("/metrics", 501) == 1
    assert metrics.requests("other", 505) == 1  # refused before its path was read
    assert metrics.requests("other", 401) == 3
    assert metrics.requests("other", 404) == 1
    assert metrics.requests("/metrics", 200) == 0  # this scrape is counted once answered
    assert {s.labels["endpoint"] for s in metrics.find("hearth_api_requests_total")} == {"/metrics", "other"}
    assert scrape(server).requests("/metrics", 200) == 1
    # Nothing generated yet, and both sources' series are there from the start, at zero.
    for source in (WINDOW, API):
        assert metrics.tokens(source) == (0, 0)
        assert metrics.replies(source) == (0, 0)
    assert metrics.value("hearth_queue_depth") == 0
    assert metrics.value("hearth_runner_restarts_total") == 0
    assert metrics.find("hearth_model_info") == []  # no model loaded


def test_a_scraper_asking_for_openmetrics_gets_it(server: LocalServer) -> None:
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    status, text, response = get_metrics(server, Accept=accept)
    assert status == 200
    assert response.getheader("Content-Type", "").startswith("application/openmetrics-text")
    assert "hearth_queue_depth 0" in text and text.endswith("# EOF\n")


# -- with the real starter model -----------------------------------------------------------------------


@pytest.mark.model
def test_requests_tokens_and_replies_are_what_the_api_answered(
    model_name: str, server: LocalServer, client: openai.OpenAI
) -> None:
    assert [m.id for m in client.models.list()] == [model_name]
    whole = client.chat.completions.create(model=model_name, messages=COLOURS, temperature=0, max_tokens=16)
    chunks = list(
        client.chat.completions.create(
            model=model_name,
            messages=COLOURS,
            temperature=0,
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usages = [whole.usage, chunks[-1].usage]
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model_name, messages=COLOURS, temperature=7)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="not-loaded", messages=COLOURS)

    metrics = scrape(server)
    assert metrics.requests(CHAT, 200) == 2
    assert metrics.requests(CHAT, 400) == 1
    assert metrics.requests(CHAT, 404) == 1
    assert metrics.requests("/v1/models", 200) == 1
    assert metrics.tokens(API) == (
        sum(u.prompt_tokens for u in usages if u is not None),
        sum(u.completion_tokens for u in usages if u is not None),
    )
    assert all(u is not None and u.completion_tokens > 1 for u in usages)  # so both have a speed
    assert metrics.replies(API) == (2, 2)  # the refused requests generated nothing
    assert metrics.tokens(WINDOW) == (0, 0) and metrics.replies(WINDOW) == (0, 0)
    # Every observation falls in a bucket: none beyond the last finite one for this small model.
    assert metrics.value("hearth_time_to_first_token_seconds_bucket", le="+Inf", **API) == 2
    assert metrics.value("hearth_time_to_first_token_seconds_sum", **API) > 0
    assert metrics.value("hearth_tokens_per_second_sum", **API) > 0
    [info] = metrics.find("hearth_model_info")
    assert info.labels == {"model": model_name} and info.value == 1


@pytest.mark.model
def test_the_windows_turns_are_counted_apart_and_the_queue_is_read_when_scraped(
    one_reply_at_a_time: str, engine: ChatEngine, server: LocalServer, client: openai.OpenAI
) -> None:
    model_name = one_reply_at_a_time
    first = client.chat.completions.create(
        model=model_name, messages=STORY, temperature=0, max_tokens=2000, stream=True
    )
    next(iter(first))  # the runner is working on this request, in the one place requests have
    sampling = SamplingParams(temperature=0.0, max_tokens=8)
    # The window's turn has a place of its own, beside it.
    gui = engine.run_turn("Say hello.", model_name, sampling=sampling, callbacks=TurnCallbacks())
    assert gui.status == "complete" and gui.stats is not None and gui.stats.completion_tokens > 1
    results: dict[str, str] = {}

    def second() -> None:
        answer = client.chat.completions.create(model=model_name, messages=COLOURS, max_tokens=4)
        results["second"] = answer.choices[0].message.content or ""

    thread = threading.Thread(target=second)
    thread.start()
    wait_until(lambda: engine.waiting_jobs == 1, "the second request to queue")
    assert scrape(server).value("hearth_queue_depth") == 1
    first.close()  # hanging up hands the place on to the second request
    thread.join(120)
    assert results["second"]

    metrics = scrape(server)
    assert metrics.value("hearth_queue_depth") == 0
    assert metrics.tokens(WINDOW) == (gui.stats.prompt_tokens, gui.stats.completion_tokens)
    assert metrics.replies(WINDOW) == (1, 1)
    # The request that was hung up on counts what it generated before it stopped, under the API alone.
    assert metrics.replies(API) == (2, 2)
    assert metrics.tokens(API)[1] > 0
    assert metrics.requests(CHAT, 200) == 2


@pytest.mark.model
def test_counters_survive_a_model_switch(
    core: Core,
    model_name: str,
    engine: ChatEngine,
    server: LocalServer,
    client: openai.OpenAI,
    tmp_path: Path,
) -> None:
    starter = starter_model_file()
    assert starter is not None
    other = core.library.import_file(
        with_chat_template(starter, tmp_path / "SmolPlain.gguf", PLAIN_TEMPLATE), name="SmolPlain"
    ).name
    before = client.chat.completions.create(model=model_name, messages=COLOURS, temperature=0, max_tokens=8)
    runner = engine.client.pid
    counted = scrape(server)

    engine.prepare(other)
    assert engine.loaded_model_name == other and engine.client.pid == runner  # the same runner, reloaded
    switched = scrape(server)
    for name in ("hearth_prompt_tokens_total", "hearth_generated_tokens_total"):
        assert switched.value(name, **API) == counted.value(name, **API)
    assert switched.replies(API) == counted.replies(API) == (1, 1)
    assert switched.requests(CHAT, 200) == 1
    [info] = switched.find("hearth_model_info")
    assert info.labels == {"model": other}
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model=model_name, messages=COLOURS)

    after = client.chat.completions.create(model=other, messages=COLOURS, temperature=0, max_tokens=8)
    metrics = scrape(server)
    assert metrics.requests(CHAT, 200) == 2 and metrics.requests(CHAT, 404) == 1
    usages = [u for u in (before.usage, after.usage) if u is not None]
    assert metrics.tokens(API) == (
        sum(u.prompt_tokens for u in usages),
        sum(u.completion_tokens for u in usages),
    )
    assert metrics.replies(API)[0] == 2
    assert metrics.value("hearth_runner_restarts_total") == 0  # a switch is not a restart


@pytest.mark.model
@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")
def test_a_killed_runner_counts_a_restart_and_the_counts_go_on(
    model_name: str, engine: ChatEngine, server: LocalServer, client: openai.OpenAI
) -> None:
    client.chat.completions.create(model=model_name, messages=COLOURS, temperature=0, max_tokens=8)
    killed = engine.client.pid
    assert killed is not None
    os.kill(killed, signal.SIGKILL)
    # Through the client, which reaps it: reaped here, it would look alive to multiprocessing for ever.
    wait_until(lambda: not engine.client.alive, "the runner to die")
    # Nothing is loaded until the window (here, the engine) loads the model again: the API says so.
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model=model_name, messages=COLOURS)
    assert info.value.status_code == 503
    dead = scrape(server)
    assert dead.find("hearth_model_info") == []
    assert dead.value("hearth_runner_restarts_total") == 0  # died, not replaced yet

    engine.prepare(model_name)
    assert engine.client.pid not in (None, killed)
    client.chat.completions.create(model=model_name, messages=COLOURS, temperature=0, max_tokens=8)
    metrics = scrape(server)
    assert metrics.value("hearth_runner_restarts_total") == 1
    assert metrics.requests(CHAT, 200) == 2 and metrics.requests(CHAT, 503) == 1
    assert metrics.replies(API)[0] == 2
    [loaded] = metrics.find("hearth_model_info")
    assert loaded.labels == {"model": model_name}
