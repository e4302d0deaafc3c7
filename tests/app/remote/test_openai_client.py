"""The OpenAI-compatible client against real peers: llama-cpp-python's own server running the starter model,
and a fault server of our own for what a healthy server never does."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.errors import HearthError
from app.remote.openai_client import (
    OpenAIClient,
    RemoteError,
    StreamCancel,
    normalize_base_url,
    request_sampling,
)
from inference.protocol import (
    ChatMessage,
    ErrorKind,
    Failed,
    Finished,
    SamplingParams,
    StopReason,
    TokenDelta,
)
from tests.helpers.openai_peer import FaultServer, LlamaPeer, make_certificates, serve_faults

HELLO = (ChatMessage("user", "Say hello."),)
GREEDY = SamplingParams(temperature=0.0, max_tokens=24, seed=5)


def collect(
    client: OpenAIClient, model: str, cancel: StreamCancel | None = None
) -> tuple[str, Finished | Failed]:
    stream = client.chat(model, HELLO, GREEDY, request_id="r1", cancel=cancel or StreamCancel())
    text: list[str] = []
    outcome: Finished | Failed | None = None
    for event in stream.events():
        if isinstance(event, TokenDelta):
            text.append(event.text)
        else:
            assert outcome is None, "more than one final event"
            outcome = event
    assert outcome is not None
    return "".join(text), outcome


def test_addresses_are_normalized_and_checked() -> None:
    assert normalize_base_url("http://GPU-Box:8000") == "http://gpu-box:8000/v1"
    assert normalize_base_url(" https://llm.example.com/openai/v1/ ") == "https://llm.example.com/openai/v1"
    assert normalize_base_url("http://127.0.0.1:11434/api/v2") == "http://127.0.0.1:11434/api/v2"
    for bad in (
        "ftp://host/",
        "host:8000",
        "http://user:secret@host/v1",
        "http://host/v1?key=1",
        "http://h:99999",
    ):
        with pytest.raises(HearthError):
            normalize_base_url(bad)


# -- llama-cpp-python's server -------------------------------------------------------------------------


def test_lists_the_models_of_llama_cpp_server(llama_peer: LlamaPeer) -> None:
    models = OpenAIClient(llama_peer.url, api_key=llama_peer.api_key).list_models()
    assert llama_peer.model_id in [m.id for m in models]
    # llama-cpp-python's server says nothing of its context, anywhere: the figure is unknown, not wrong.
    assert {m.context_tokens for m in models} == {None}


def test_streams_a_reply_from_llama_cpp_server_with_stats(llama_peer: LlamaPeer) -> None:
    client = OpenAIClient(llama_peer.url, name="peer", api_key=llama_peer.api_key)
    text, outcome = collect(client, llama_peer.model_id)
    assert isinstance(outcome, Finished), outcome
    assert text.strip()
    stats = outcome.stats
    assert stats.stop_reason in (StopReason.END_OF_TURN, StopReason.MAX_TOKENS)
    assert 0 < stats.completion_tokens <= GREEDY.max_tokens
    assert stats.time_to_first_token_s > 0
    assert stats.tokens_per_second > 0
    assert stats.seed == GREEDY.seed


def test_a_wrong_key_is_refused_clearly_and_never_repeated(llama_peer: LlamaPeer) -> None:
    wrong = "wrong-key-0123456789"
    client = OpenAIClient(llama_peer.url, name="peer", api_key=wrong)
    for call in (client.list_models, lambda: collect(client, llama_peer.model_id)):
        with pytest.raises(RemoteError) as info:
            call()
        assert info.value.kind is ErrorKind.SERVER_AUTH
        assert "peer refused the API key (401" in str(info.value)
        assert wrong not in str(info.value)
    with pytest.raises(RemoteError) as info:
        OpenAIClient(llama_peer.url, name="peer").list_models()
    assert "needs an API key" in str(info.value)


def test_stop_closes_the_stream_of_llama_cpp_server(llama_peer: LlamaPeer) -> None:
    client = OpenAIClient(llama_peer.url, api_key=llama_peer.api_key)
    cancel = StreamCancel()
    long = SamplingParams(temperature=0.0, max_tokens=1500)
    stream = client.chat(
        llama_peer.model_id,
        (ChatMessage("user", "Count from 1 to 500."),),
        long,
        request_id="r",
        cancel=cancel,
    )
    deltas = 0
    outcome: Finished | Failed | None = None
    for event in stream.events():
        if isinstance(event, TokenDelta):
            deltas += 1
            cancel.cancel()
        else:
            outcome = event
    assert isinstance(outcome, Finished) and outcome.stats.stop_reason is StopReason.CANCELLED
    assert deltas == 1


# -- the fault server ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "kind", "words"),
    [
        (
            "no-such-model",
            ErrorKind.MODEL_MISSING,
            "has no model “no-such-model” (404: The model `no-such-model`",
        ),
        ("status-429", ErrorKind.SERVER_BUSY, "busy or rate-limited (429"),
        ("status-500", ErrorKind.SERVER_ERROR, "server error (500"),
        ("status-503", ErrorKind.SERVER_ERROR, "server error (503"),
        ("status-400-context", ErrorKind.CONTEXT_OVERFLOW, "too long for model “status-400-context”"),
        ("status-422", ErrorKind.SERVER_ERROR, "rejected the request"),
    ],
)
def test_refusals_before_the_reply_are_typed_errors(
    fault_server: FaultServer, model: str, kind: ErrorKind, words: str
) -> None:
    client = OpenAIClient(fault_server.url, name="lab")
    with pytest.raises(RemoteError) as info:
        client.chat(model, HELLO, GREEDY, request_id="r", cancel=StreamCancel())
    assert info.value.kind is kind
    assert words in str(info.value)
    if model == "status-429":
        assert "Try again in 7 s" in str(info.value)


def test_a_key_goes_only_in_the_authorization_header_with_standard_sampling(
    fault_server: FaultServer,
) -> None:
    fault_server.api_key = "fault-key-9876543210"
    client = OpenAIClient(fault_server.url, api_key="fault-key-9876543210")
    text, outcome = collect(client, "echo")
    assert text == "Hello, world." and isinstance(outcome, Finished)
    request = fault_server.requests[-1]
    assert request.headers["authorization"] == "Bearer fault-key-9876543210"
    assert request.body is not None
    assert request.body["stream"] is True
    assert {k: request.body[k] for k in ("temperature", "top_p", "max_tokens", "seed")} == {
        "temperature": 0.0,
        "top_p": 0.95,
        "max_tokens": 24,
        "seed": 5,
    }
    assert "top_k" not in request.body and "fault-key" not in str(request.body)


def test_servers_are_sent_only_the_openai_settings_that_are_set() -> None:
    sent = request_sampling(SamplingParams(top_k=5, min_p=0.2, repeat_penalty=1.3, max_tokens=7))
    assert sent == {"temperature": 0.7, "top_p": 0.95, "max_tokens": 7}
    assert request_sampling(SamplingParams(seed=3))["seed"] == 3


def test_usage_from_the_server_is_used_for_the_stats(fault_server: FaultServer) -> None:
    _, outcome = collect(OpenAIClient(fault_server.url), "usage")
    assert isinstance(outcome, Finished)
    assert (outcome.stats.prompt_tokens, outcome.stats.completion_tokens) == (11, 3)
    _, outcome = collect(OpenAIClient(fault_server.url), "echo")
    assert isinstance(outcome, Finished)
    assert (outcome.stats.prompt_tokens, outcome.stats.completion_tokens) == (None, 3)


def test_reasoning_content_arrives_wrapped_in_think_tags(fault_server: FaultServer) -> None:
    text, outcome = collect(OpenAIClient(fault_server.url), "reasoning")
    assert text == "<think>The user greets me. I greet back.</think>Hello!"
    assert isinstance(outcome, Finished)


@pytest.mark.parametrize(
    ("model", "kind", "words"),
    [
        ("cut", ErrorKind.STREAM_CUT, "connection to lab was lost while streaming the reply"),
        ("eof", ErrorKind.STREAM_CUT, "ended the stream before the reply was complete"),
        ("malformed", ErrorKind.SERVER_ERROR, "sent a malformed event"),
        ("error-event", ErrorKind.SERVER_ERROR, "reported an error mid-reply: CUDA out of memory"),
    ],
)
def test_failures_mid_reply_keep_the_partial_text(
    fault_server: FaultServer, model: str, kind: ErrorKind, words: str
) -> None:
    text, outcome = collect(OpenAIClient(fault_server.url, name="lab"), model)
    assert text == "Hello, world"
    assert isinstance(outcome, Failed) and outcome.kind is kind
    assert words in outcome.message


def test_a_stream_that_says_nothing_or_is_not_a_stream_is_an_error(fault_server: FaultServer) -> None:
    text, outcome = collect(OpenAIClient(fault_server.url, name="lab"), "empty")
    assert text == "" and isinstance(outcome, Failed) and outcome.kind is ErrorKind.STREAM_CUT
    assert "without sending any of it" in outcome.message
    text, outcome = collect(OpenAIClient(fault_server.url, name="lab"), "html")
    assert text == "" and isinstance(outcome, Failed) and outcome.kind is ErrorKind.SERVER_ERROR
    assert "malformed event stream" in outcome.message and "text/html" in outcome.message


def test_a_silent_server_times_out_instead_of_hanging(fault_server: FaultServer) -> None:
    client = OpenAIClient(fault_server.url, name="lab", read_timeout_s=1.0)
    text, outcome = collect(client, "slow")
    assert text == "Hello, world"
    assert isinstance(outcome, Failed) and outcome.kind is ErrorKind.SERVER_TIMEOUT
    assert "sent nothing for 1 s while streaming the reply" in outcome.message
    with pytest.raises(RemoteError) as info:
        client.chat("slow-headers", HELLO, GREEDY, request_id="r", cancel=StreamCancel())
    assert info.value.kind is ErrorKind.SERVER_TIMEOUT


def test_stop_wakes_a_read_that_waits_for_a_silent_server(fault_server: FaultServer) -> None:
    """With a read timeout far beyond the test's, only Stop can end these streams."""
    client = OpenAIClient(fault_server.url, read_timeout_s=250.0)
    cancel = StreamCancel()
    stream = client.chat("slow", HELLO, GREEDY, request_id="r", cancel=cancel)
    events = stream.events()
    first = next(events)
    assert isinstance(first, TokenDelta)
    stopper = threading.Timer(0.2, cancel.cancel)
    stopper.start()
    rest = list(events)
    stopper.join()
    assert len(rest) == 2 and isinstance(rest[-1], Finished)
    assert rest[-1].stats.stop_reason is StopReason.CANCELLED

    cancel.reset()
    stopper = threading.Timer(0.2, cancel.cancel)
    stopper.start()
    try:
        text, outcome = collect(client, "slow-headers", cancel)
    finally:
        stopper.join()
    assert text == "" and isinstance(outcome, Finished)
    assert outcome.stats.stop_reason is StopReason.CANCELLED


def test_an_unreachable_server_is_a_clear_error(fault_server: FaultServer) -> None:
    url = fault_server.url
    fault_server.stop()
    with pytest.raises(RemoteError) as info:
        OpenAIClient(url, name="lab").list_models()
    assert info.value.kind is ErrorKind.SERVER_UNREACHABLE
    assert "Could not connect to lab at 127.0.0.1" in str(info.value)


def test_tls_is_verified_and_a_chosen_ca_bundle_is_honoured(tmp_path: Path) -> None:
    certificates = make_certificates(tmp_path)
    with serve_faults(certificates=certificates) as server:
        with pytest.raises(RemoteError) as info:
            OpenAIClient(server.url, name="internal").list_models()
        assert info.value.kind is ErrorKind.SERVER_CERTIFICATE
        assert "TLS certificate of internal" in str(info.value) and "CA bundle" in str(info.value)
        trusted = OpenAIClient(server.url, ca_bundle=certificates.ca)
        assert [m.id for m in trusted.list_models()][:1] == ["echo"]
        text, outcome = collect(trusted, "echo")
        assert text == "Hello, world." and isinstance(outcome, Finished)
        # A bundle is trusted for what its CA signed, nothing else: verification stays on.
        other = tmp_path / "other"
        other.mkdir()
        with pytest.raises(RemoteError) as info:
            OpenAIClient(server.url, ca_bundle=make_certificates(other).ca).list_models()
        assert "could not be verified" in str(info.value)


# -- what servers say of their context ---------------------------------------------------------------


def test_vllm_reports_each_models_context_in_the_model_list(fault_server: FaultServer) -> None:
    fault_server.max_model_len = {"echo": 4096, "usage": 32768}
    models = OpenAIClient(fault_server.url).list_models()
    assert {m.id: m.context_tokens for m in models} == {
        "echo": 4096,
        "reasoning": None,
        "usage": 32768,
        "tools": None,
    }
    # The list said it all: nothing else was asked.
    assert [r.path for r in fault_server.requests] == ["/v1/models"]


def test_llama_cpp_server_reports_what_it_serves_in_props_else_the_training_context(
    fault_server: FaultServer,
) -> None:
    fault_server.n_ctx_train, fault_server.props_n_ctx = 131072, 4096
    models = OpenAIClient(fault_server.url).list_models()
    assert {m.context_tokens for m in models} == {4096}
    assert [r.path for r in fault_server.requests] == ["/v1/models", "/props"]

    fault_server.props_n_ctx = None
    assert {m.context_tokens for m in OpenAIClient(fault_server.url).list_models()} == {131072}


def test_tgi_reports_its_context_in_info_and_a_server_that_says_nothing_costs_one_request(
    fault_server: FaultServer,
) -> None:
    assert {m.context_tokens for m in OpenAIClient(fault_server.url).list_models()} == {None}
    assert [r.path for r in fault_server.requests] == ["/v1/models", "/info"]
    fault_server.info_max_total_tokens = 2048
    assert {m.context_tokens for m in OpenAIClient(fault_server.url).list_models()} == {2048}


def test_implausible_context_lengths_are_not_believed(fault_server: FaultServer) -> None:
    fault_server.max_model_len = {"echo": 0, "reasoning": -4096, "usage": 1 << 40}
    fault_server.info_max_total_tokens = 3
    assert {m.context_tokens for m in OpenAIClient(fault_server.url).list_models()} == {None}
