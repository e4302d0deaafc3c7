"""The MCP servers the user added, in `mcp.json` (the format LM Studio, Cursor and Claude Desktop share), with
every environment and header value in the keyring; imports from the files those apps keep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from keyring.backends import fail

from app.errors import HearthError
from app.secret_store import SecretStore
from app.tools.config import (
    KEYRING_VALUE,
    HttpTransport,
    StdioTransport,
    ToolServerRegistry,
    other_apps_files,
)
from tests.conftest import MemoryKeyring


@pytest.fixture
def keyring_backend() -> MemoryKeyring:
    return MemoryKeyring()


@pytest.fixture
def registry(tmp_path: Path, keyring_backend: MemoryKeyring) -> ToolServerRegistry:
    return ToolServerRegistry(tmp_path / "home", SecretStore(backend=keyring_backend))


def saved(registry: ToolServerRegistry) -> dict[str, dict[str, object]]:
    servers: dict[str, dict[str, object]] = json.loads(registry.path.read_text())["mcpServers"]
    return servers


def test_servers_are_saved_in_the_shared_format_with_their_secrets_in_the_keyring(
    registry: ToolServerRegistry, keyring_backend: MemoryKeyring
) -> None:
    files = StdioTransport("npx", ("-y", "@modelcontextprotocol/server-filesystem", "/home/me"))
    _, stored = registry.add("files", files, {"GITHUB_TOKEN": "ghp_secret"})
    assert [r.persisted for r in stored] == [True]
    registry.add("search", HttpTransport("https://example.org/mcp"), {"Authorization": "Bearer abc"})
    assert saved(registry) == {
        "files": {
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me"],
            "env": {"GITHUB_TOKEN": KEYRING_VALUE},
        },
        "search": {"url": "https://example.org/mcp", "headers": {"Authorization": KEYRING_VALUE}},
    }
    assert "ghp_secret" not in registry.path.read_text() and "Bearer abc" not in registry.path.read_text()
    assert registry.secrets_of(registry.get("FILES")) == {"GITHUB_TOKEN": "ghp_secret"}
    assert registry.secrets_of(registry.get("search")) == {"Authorization": "Bearer abc"}
    # Replacing a server drops the secrets it no longer has; removing it drops them all.
    registry.add("files", files, {"OTHER": "1"})
    assert registry.secrets_of(registry.get("files")) == {"OTHER": "1"}
    assert not any("GITHUB_TOKEN" in user for _, user in keyring_backend.entries)
    registry.remove("files")
    registry.remove("search")
    assert keyring_backend.entries == {} and saved(registry) == {}
    with pytest.raises(HearthError, match="no tool server named “files”"):
        registry.get("files")


@pytest.mark.parametrize(
    ("name", "transport", "why"),
    [
        ("two words", StdioTransport("uvx"), "cannot name a tool server"),
        ("ok", StdioTransport("  "), "needs a command"),
        ("ok", HttpTransport("ftp://example.org/mcp"), "not an http:// or https:// address"),
    ],
)
def test_a_server_that_cannot_be_one_is_refused_and_nothing_saved(
    registry: ToolServerRegistry, name: str, transport: StdioTransport | HttpTransport, why: str
) -> None:
    with pytest.raises(HearthError, match=why):
        registry.add(name, transport)
    assert not registry.path.exists()


def test_other_apps_files_import_with_their_secrets_moved_into_the_keyring(
    registry: ToolServerRegistry, tmp_path: Path
) -> None:
    places = other_apps_files(tmp_path / "user")
    claude = {
        "mcpServers": {
            "Brave Search": {
                "command": "npx",
                "args": ["-y", "@modelcontextprotocol/server-brave-search"],
                "env": {"BRAVE_API_KEY": "BSA-secret"},
            },
            "old-sse": {"type": "sse", "url": "http://localhost:9000/sse"},
            "broken": {"args": ["no command"]},
        },
        "globalShortcut": "Ctrl+Space",
    }
    places["claude"].parent.mkdir(parents=True)
    places["claude"].write_text(json.dumps(claude))
    result = registry.import_file(places["claude"])
    assert result.added == ("Brave-Search",)
    assert dict(result.skipped) == {
        "old-sse": "it uses the old SSE transport; Hearth speaks stdio and Streamable HTTP",
        "broken": "it has neither a command nor a url",
    }
    assert "BSA-secret" not in registry.path.read_text()
    assert registry.secrets_of(registry.get("Brave-Search")) == {"BRAVE_API_KEY": "BSA-secret"}
    # Cursor's file lists a remote server by url, with headers; a name Hearth has already is skipped.
    cursor = {
        "mcpServers": {
            "Brave-Search": {"command": "other"},
            "context7": {"url": "https://mcp.context7.com/mcp", "headers": {"CONTEXT7_API_KEY": "c7"}},
        }
    }
    places["cursor"].parent.mkdir(parents=True)
    places["cursor"].write_text(json.dumps(cursor))
    second = registry.import_file(places["cursor"])
    assert second.added == ("context7",)
    assert dict(second.skipped) == {"Brave-Search": "Hearth has a tool server of that name already"}
    assert registry.get("Brave-Search").transport == StdioTransport(
        "npx", ("-y", "@modelcontextprotocol/server-brave-search")
    )
    assert registry.import_file(places["cursor"], replace=True).added == ("Brave-Search", "context7")
    assert registry.get("Brave-Search").transport == StdioTransport("other")


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "does not exist"),
        ("{not json", "is not a JSON file"),
        ('{"servers": []}', "lists no MCP servers"),
    ],
)
def test_a_file_that_lists_no_servers_is_one_line(
    registry: ToolServerRegistry, tmp_path: Path, content: str | None, why: str
) -> None:
    path = tmp_path / "mcp.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(HearthError, match=why):
        registry.import_file(path)


def test_a_value_typed_into_the_file_is_used_then_moved_into_the_keyring(
    registry: ToolServerRegistry, keyring_backend: MemoryKeyring
) -> None:
    registry.path.parent.mkdir(parents=True)
    typed = {"mcpServers": {"gh": {"command": "gh-mcp", "env": {"GH_TOKEN": "typed-by-hand"}}}}
    registry.path.write_text(json.dumps(typed))
    server = registry.get("gh")
    assert registry.secrets_of(server) == {"GH_TOKEN": "typed-by-hand"}
    assert "typed-by-hand" not in repr(server)
    registry.set_enabled("gh", False)  # any write
    assert saved(registry)["gh"] == {
        "command": "gh-mcp",
        "args": [],
        "env": {"GH_TOKEN": KEYRING_VALUE},
        "disabled": True,
    }
    assert registry.secrets_of(registry.get("gh")) == {"GH_TOKEN": "typed-by-hand"}
    assert "typed-by-hand" in keyring_backend.entries.values()


def test_without_a_keyring_a_typed_value_stays_where_the_user_put_it(tmp_path: Path) -> None:
    registry = ToolServerRegistry(tmp_path / "home", SecretStore(backend=fail.Keyring()))  # type: ignore[no-untyped-call]
    registry.path.parent.mkdir(parents=True)
    registry.path.write_text(
        json.dumps({"mcpServers": {"gh": {"command": "gh-mcp", "env": {"GH_TOKEN": "t"}}}})
    )
    registry.set_enabled("gh", False)
    assert saved(registry)["gh"]["env"] == {"GH_TOKEN": "t"}, "not lost: the keyring could not take it"
    # A secret given now is kept for this session, and the result says so.
    _, [stored] = registry.add("other", StdioTransport("x"), {"KEY": "v"})
    assert not stored.persisted and stored.reason
    assert registry.secrets_of(registry.get("other")) == {"KEY": "v"}


def test_a_damaged_file_is_set_aside_and_one_bad_entry_hides_no_other(registry: ToolServerRegistry) -> None:
    registry.path.parent.mkdir(parents=True)
    registry.path.write_text(
        '{"mcpServers": {"good": {"command": "a"}, "bad": {"args": 3}, "bad name!": {}}}'
    )
    assert [s.name for s in registry.servers()] == ["good"]
    registry.path.write_text("{ torn")
    assert registry.servers() == []
    assert not registry.path.exists()
    assert len(list(registry.path.parent.glob("mcp.json.corrupt-*"))) == 1
