"""Tool calls through real MCP servers written with the official SDK: one Hearth starts (stdio), one it
reaches over Streamable HTTP behind a bearer token. Every fault a server or a model can cause ends the call
with a sentence for the model, and the next call starts the server again."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.secret_store import SecretStore
from app.tools.config import HttpTransport, StdioTransport, ToolServerRegistry
from app.tools.host import ToolHost, ToolServerError
from tests.conftest import MemoryKeyring
from tests.helpers.mcp_tool_server import serve_http, stdio_transport

STDIO = stdio_transport()


@pytest.fixture
def registry(tmp_path: Path) -> ToolServerRegistry:
    return ToolServerRegistry(tmp_path / "home", SecretStore(backend=MemoryKeyring()))


@pytest.fixture
def host(registry: ToolServerRegistry, tmp_path: Path) -> Iterator[ToolHost]:
    made = ToolHost(registry, log_dir=tmp_path / "logs", call_timeout_s=10, start_timeout_s=30)
    yield made
    made.close()


def test_a_stdio_server_lists_its_tools_and_answers_calls(
    registry: ToolServerRegistry, host: ToolHost
) -> None:
    registry.add("maths", STDIO)
    tools = {t.name: t for t in host.tools("maths")}
    assert {"add", "environment", "sleep", "crash", "fail", "long_text"} <= set(tools)
    assert tools["add"].description == "Add two whole numbers."
    assert tools["add"].input_schema["required"] == ["a", "b"]
    outcome = host.call("maths", "add", '{"a": 2, "b": 40}')
    assert (outcome.text, outcome.is_error) == ("42", False)
    assert host.status("maths").running
    # The same process answers the next call: a server stays up between calls.
    assert host.call("maths", "add", '{"a": 1, "b": 1}').text == "2"


def test_a_server_gets_its_own_secrets_and_none_of_hearths(
    registry: ToolServerRegistry, host: ToolHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_should_never_leak")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-never-leak")
    registry.add("maths", STDIO, {"GITHUB_TOKEN": "ghp_for_this_server"})
    assert host.call("maths", "environment", '{"name": "GITHUB_TOKEN"}').text == "ghp_for_this_server"
    assert host.call("maths", "environment", '{"name": "HF_TOKEN"}').text == "<unset>"
    assert host.call("maths", "environment", '{"name": "OPENAI_API_KEY"}').text == "<unset>"
    saved = registry.path.read_text()
    assert "ghp_for_this_server" not in saved and '"GITHUB_TOKEN": "<keyring>"' in saved


@pytest.mark.parametrize(
    ("arguments", "why"),
    [
        ('{"a": 2, "b": ', "not valid JSON"),
        ("[2, 40]", "must be a JSON object"),
        ('{"a": "two", "b": 40}', "a: 'two' is not of type 'integer'"),
        ('{"a": 2}', "'b' is a required property"),
    ],
)
def test_arguments_a_tool_cannot_take_go_back_to_the_model_unsent(
    registry: ToolServerRegistry, host: ToolHost, arguments: str, why: str
) -> None:
    registry.add("maths", STDIO)
    outcome = host.call("maths", "add", arguments)
    assert outcome.is_error and outcome.text.startswith("The call was not made:") and why in outcome.text


def test_a_tool_that_fails_or_does_not_exist_is_an_error_for_the_model(
    registry: ToolServerRegistry, host: ToolHost
) -> None:
    registry.add("maths", STDIO)
    failed = host.call("maths", "fail", "{}")
    assert failed.is_error and "the disk is on fire" in failed.text
    unknown = host.call("maths", "divide", '{"a": 1}')
    assert unknown.is_error and "has no tool named “divide”" in unknown.text and "add" in unknown.text
    assert host.call("nowhere", "add", "{}").is_error


def test_a_hung_tool_is_cut_off_and_the_server_starts_again(
    registry: ToolServerRegistry, tmp_path: Path
) -> None:
    registry.add("maths", STDIO)
    host = ToolHost(registry, log_dir=tmp_path / "logs", call_timeout_s=1.5, start_timeout_s=30)
    try:
        outcome = host.call("maths", "sleep", '{"seconds": 30}')
        assert outcome.is_error and "did not finish within 1.5 seconds" in outcome.text
        assert not host.status("maths").running
        assert "did not finish" in (host.status("maths").last_error or "")
        assert host.call("maths", "add", '{"a": 3, "b": 4}').text == "7"
    finally:
        host.close()


def test_a_server_that_crashes_is_reported_and_restarted_on_next_use(
    registry: ToolServerRegistry, host: ToolHost
) -> None:
    registry.add("maths", STDIO)
    assert host.call("maths", "add", '{"a": 1, "b": 2}').text == "3"
    crashed = host.call("maths", "crash", "{}")
    assert crashed.is_error
    assert host.call("maths", "add", '{"a": 5, "b": 6}').text == "11"


def test_a_server_that_cannot_start_says_why(registry: ToolServerRegistry, host: ToolHost) -> None:
    registry.add("ghost", StdioTransport("hearth-no-such-mcp-server", ("--stdio",)))
    with pytest.raises(ToolServerError, match=r"The tool server ghost could not be used: .*not found"):
        host.tools("ghost")
    assert host.status("ghost").last_error
    outcome = host.call("ghost", "anything", "{}")
    assert outcome.is_error and "could not be used" in outcome.text
    registry.add("quits", StdioTransport(sys.executable, ("-c", "import sys; sys.exit(2)")))
    with pytest.raises(ToolServerError, match="The tool server quits could not be used"):
        host.tools("quits")


def test_a_long_result_is_cut_with_a_note(registry: ToolServerRegistry, tmp_path: Path) -> None:
    registry.add("maths", STDIO)
    host = ToolHost(registry, call_timeout_s=10, max_result_chars=1000)
    try:
        outcome = host.call("maths", "long_text", json.dumps({"chars": 50_000}))
        assert outcome.truncated and not outcome.is_error
        assert outcome.text.startswith("x" * 1000) and "the result was 50,000 characters" in outcome.text
        assert len(outcome.text) < 1200
    finally:
        host.close()


def test_a_turned_off_server_is_not_started(registry: ToolServerRegistry, host: ToolHost) -> None:
    registry.add("maths", STDIO, enabled=False)
    with pytest.raises(ToolServerError, match="turned off"):
        host.tools("maths")


def test_an_http_server_gets_its_headers_from_the_keyring(
    registry: ToolServerRegistry, host: ToolHost
) -> None:
    with serve_http() as served:
        registry.add("remote", HttpTransport(served.url), {"Authorization": f"Bearer {served.token}"})
        assert "add" in {t.name for t in host.tools("remote")}
        assert host.call("remote", "add", '{"a": 20, "b": 22}').text == "42"
        assert served.token not in registry.path.read_text()
        registry.add("wrong", HttpTransport(served.url), {"Authorization": "Bearer nope"})
        with pytest.raises(ToolServerError, match="The tool server wrong could not be used"):
            host.tools("wrong")
