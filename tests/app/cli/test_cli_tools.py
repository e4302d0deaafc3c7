"""`hearth tools`: MCP servers added, listed with their tools (real servers written with the SDK, started or
reached over HTTP), imported from other apps, turned off and removed; secrets only in the keyring."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from app.paths import resolve_home
from tests.app.cli.test_cli import REPO, run
from tests.helpers.mcp_tool_server import serve_http

SERVER = [sys.executable, "-m", "tests.helpers.mcp_tool_server"]


def listed(*flags: str) -> dict[str, dict[str, object]]:
    code, out, err = run("tools", "list", "--json", *flags)
    assert code == 0, err
    return {s["name"]: s for s in json.loads(out)["servers"]}


def test_a_server_hearth_starts_is_listed_with_its_tools_and_keeps_its_secrets_out_of_the_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("piped-secret\n"))
    code, out, err = run(
        "tools",
        "add",
        "maths",
        "--cwd",
        str(REPO),
        "--env",
        "PLAIN=visible-to-the-server",
        "--env",
        "PIPED",
        "--",
        *SERVER,
    )
    assert code == 0, err
    assert out == f"Added maths: {' '.join(SERVER)}.\n"
    text = (resolve_home().home / "mcp.json").read_text()
    assert "piped-secret" not in text and "visible-to-the-server" not in text
    assert json.loads(text)["mcpServers"]["maths"]["env"] == {"PLAIN": "<keyring>", "PIPED": "<keyring>"}

    offline = listed("--no-connect")["maths"]
    assert (offline["state"], offline["tools"], offline["secrets"]) == ("not started", [], ["PLAIN", "PIPED"])
    server = listed()["maths"]
    assert server["state"] == "running" and server["error"] is None
    tools = {t["name"]: t for t in server["tools"]}  # type: ignore[attr-defined]
    assert tools["add"]["description"] == "Add two whole numbers."
    assert tools["add"]["input_schema"]["properties"]["a"]["type"] == "integer"
    code, out, _ = run("tools", "list")
    assert "maths\trunning\t" in out and "  add\tAdd two whole numbers.\n" in out

    assert run("tools", "disable", "maths")[1] == "maths is off.\n"
    assert listed()["maths"]["state"] == "off"
    assert run("tools", "enable", "maths")[1] == "maths is on.\n"
    assert run("tools", "remove", "maths")[1] == "Removed maths and its secrets.\n"
    assert listed() == {}


def test_a_server_at_a_url_is_reached_with_its_header_and_a_wrong_token_is_its_error() -> None:
    with serve_http() as served:
        assert (
            run(
                "tools", "add", "web", "--url", served.url, "--header", f"Authorization=Bearer {served.token}"
            )[0]
            == 0
        )
        assert (
            run("tools", "add", "denied", "--url", served.url, "--header", "Authorization=Bearer wrong")[0]
            == 0
        )
        servers = listed()
    assert servers["web"]["state"] == "running" and servers["web"]["url"] == served.url
    assert "add" in {t["name"] for t in servers["web"]["tools"]}  # type: ignore[attr-defined]
    assert servers["denied"]["state"] == "failed"
    assert "The tool server denied could not be used" in str(servers["denied"]["error"])
    assert served.token not in (resolve_home().home / "mcp.json").read_text()


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["tools", "add", "x"], "Give the server's command after --, or its address with --url."),
        (["tools", "add", "x", "--url", "https://a.example/mcp", "--", "cmd"], "either --url or -- COMMAND"),
        (
            ["tools", "add", "x", "--env", "A=1", "--url", "https://a.example/mcp"],
            "--env is for a server Hearth starts",
        ),
        (["tools", "add", "x", "--url", "gopher://a.example"], "not an http:// or https:// address"),
        (["tools", "add", "bad name", "--", "cmd"], "cannot name a tool server"),
        (["tools", "remove", "nothing"], "There is no tool server named “nothing”"),
    ],
)
def test_what_cannot_be_a_server_is_one_line_and_nothing_is_saved(argv: list[str], why: str) -> None:
    code, out, err = run(*argv)
    assert code == 3 and out == "" and why in err and err.count("\n") == 1, err
    assert not (resolve_home().home / "mcp.json").exists()


def test_servers_are_imported_from_claude_desktop_and_an_mcp_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    claude = Path.home() / ".config" / "Claude" / "claude_desktop_config.json"
    claude.parent.mkdir(parents=True)
    claude.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "maths": {
                        "command": SERVER[0],
                        "args": SERVER[1:],
                        "cwd": str(REPO),
                        "env": {"K": "s3cret"},
                    },
                    "legacy": {"type": "sse", "url": "http://localhost:1/sse"},
                }
            }
        )
    )
    code, out, err = run("tools", "import", "claude")
    assert code == 0 and out == "Added maths.\n"
    assert err == "skipped legacy: it uses the old SSE transport; Hearth speaks stdio and Streamable HTTP\n"
    assert "s3cret" not in (resolve_home().home / "mcp.json").read_text()
    assert listed()["maths"]["state"] == "running"
    # Again: Hearth has it already.
    code, out, err = run("tools", "import", str(claude))
    assert code == 0 and "No servers were added" in out and "skipped maths: Hearth has" in err
    assert run("tools", "import", str(tmp_path / "missing.json"))[0] == 3
