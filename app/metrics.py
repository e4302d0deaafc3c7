"""What the local model has done, for Prometheus: the local API's `GET /metrics` serves it.

One `Metrics` per ChatEngine, on a registry of its own: prometheus_client's default registry is one per
process, where every engine and server a test (or a second window) makes would collide on the names. The
engine outlives the models it loads and the API servers started on it, so its counters survive both.

The window's (and the CLI's) own chats and the API's requests are told apart by the `source` label; the
HTTP requests are the API's alone. What changes on its own (the queue, the loaded model, the runner's
restarts) is read when scraped, not copied as it happens.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import urlsplit

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from inference.protocol import Finished, GenerationStats

E = TypeVar("E")


class Source(enum.StrEnum):
    WINDOW = "window"  # the window's and the CLI's own chats
    API = "api"  # requests through the local API


# Local models answer from tens of milliseconds (a short prompt on a GPU) to minutes (a long document read
# on a CPU): the first token's wait spans four orders of magnitude.
TTFT_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# From a large model on a laptop's CPU (a few tokens a second) to a small one on a GPU (hundreds).
TOKENS_PER_SECOND_BUCKETS = (1.0, 2.5, 5.0, 10.0, 20.0, 35.0, 50.0, 75.0, 100.0, 150.0, 250.0, 500.0, 1000.0)

# The paths the local API answers, as the `endpoint` label names them. Any other path is "other": the label
# is written before the key is checked, and must not take as many values as a client can make up paths.
ENDPOINTS = frozenset(
    {"/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/messages", "/v1/embeddings"}
    | {"/api/embed"}
    | {"/api/version", "/api/tags", "/api/show", "/api/chat", "/api/generate"}
)
MODEL_ENDPOINT = "/v1/models/{id}"
OTHER_ENDPOINT = "other"


def endpoint_label(target: str) -> str:
    """The `endpoint` label for a request's target (path and query, as sent)."""
    path = urlsplit(target).path.rstrip("/")
    if path.startswith("/v1/models/"):
        return MODEL_ENDPOINT
    return path if path in ENDPOINTS else OTHER_ENDPOINT


@dataclass(frozen=True)
class LiveState:
    """What is read at each scrape."""

    queue_depth: int  # turns and requests waiting for the runner behind the one holding it
    model: str | None  # the local model the runner holds
    runner_restarts: int  # runners started in place of one that died, since the engine was made


class _Live(Collector):
    def __init__(self, read: Callable[[], LiveState]) -> None:
        self._read = read

    def describe(self) -> Iterable[Metric]:
        # Names only, so that the registry can refuse a clash; values are read at scrape time.
        yield GaugeMetricFamily("hearth_queue_depth", "")
        yield InfoMetricFamily("hearth_model", "")
        yield CounterMetricFamily("hearth_runner_restarts", "")

    def collect(self) -> Iterable[Metric]:
        state = self._read()
        yield GaugeMetricFamily(
            "hearth_queue_depth",
            "Chat turns and API requests waiting for the model runner (not counting the one it is serving).",
            value=state.queue_depth,
        )
        model = InfoMetricFamily("hearth_model", "The local model loaded now; no sample while none is.")
        if state.model is not None:
            model.add_metric([], {"model": state.model})
        yield model
        yield CounterMetricFamily(
            "hearth_runner_restarts",
            "Model runners started in place of one that crashed or was stopped for not answering.",
            value=state.runner_restarts,
        )


class Metrics:
    """Counters and histograms of one engine, and the live values `read` gives at each scrape."""

    def __init__(self, read: Callable[[], LiveState]) -> None:
        self.registry = CollectorRegistry()
        self._requests = Counter(
            "hearth_api_requests",
            "Local API requests answered, by endpoint and HTTP status (refused ones too).",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self._prompt_tokens = Counter(
            "hearth_prompt_tokens",
            "Prompt tokens of finished local generations (as the API's usage reports them).",
            ["source"],
            registry=self.registry,
        )
        self._generated_tokens = Counter(
            "hearth_generated_tokens",
            "Tokens the local model generated, cancelled replies included.",
            ["source"],
            registry=self.registry,
        )
        self._ttft = Histogram(
            "hearth_time_to_first_token_seconds",
            "From a request reaching the runner to its first generated token, per reply with any tokens.",
            ["source"],
            buckets=TTFT_BUCKETS_S,
            registry=self.registry,
        )
        self._speed = Histogram(
            "hearth_tokens_per_second",
            "Generation speed after the first token, per reply of two tokens or more.",
            ["source"],
            buckets=TOKENS_PER_SECOND_BUCKETS,
            registry=self.registry,
        )
        # Both sources from the start, at zero: a series that appears only later breaks rate() over it.
        for source in Source:
            for metric in (self._prompt_tokens, self._generated_tokens, self._ttft, self._speed):
                metric.labels(source=source.value)
        self.registry.register(_Live(read))

    def count_request(self, endpoint: str, status: int) -> None:
        self._requests.labels(endpoint=endpoint, status=str(status)).inc()

    def generated(self, source: Source, stats: GenerationStats) -> None:
        """One local generation ended (finished or cancelled)."""
        label = source.value
        if stats.prompt_tokens is not None:
            self._prompt_tokens.labels(source=label).inc(stats.prompt_tokens)
        self._generated_tokens.labels(source=label).inc(stats.completion_tokens)
        # A reply with no token has no first token; with one, no speed (the runner says 0).
        if stats.completion_tokens > 0:
            self._ttft.labels(source=label).observe(stats.time_to_first_token_s)
        if stats.completion_tokens > 1 and stats.tokens_per_second > 0:
            self._speed.labels(source=label).observe(stats.tokens_per_second)

    def metered(self, source: Source, events: Iterable[E]) -> Iterator[E]:
        """`events` as they are, each generation's stats counted as its Finished goes by."""
        for event in events:
            if isinstance(event, Finished):
                self.generated(source, event.stats)
            yield event

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The body and its content type: OpenMetrics when the scraper asks for it (Prometheus does), else
        Prometheus' text format."""
        encode, content_type = choose_encoder(accept or "")
        return encode(self.registry), content_type
