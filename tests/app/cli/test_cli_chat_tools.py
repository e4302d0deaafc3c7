"""`hearth chat --tools`: a chat offered an MCP server's tools, each call asked about on the terminal,
allowed by --approve-tools, or denied where nobody can be asked."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from app.cli.chat import ToolsOnTheTerminal
from app.tools.chat import Approval, ToolRequest
from inference.protocol import ToolCallRecord
from tests.app.chat.test_tool_turns import TOOLS_TEMPLATE
from tests.app.cli.test_cli import REPO, run
from tests.conftest import starter_model_file
from tests.helpers.model_files import with_chat_template

REQUEST = ToolRequest("maths", "add", '{"a": 2, "b": 40}', "c4ll0aaaa")


@pytest.fixture
def maths() -> None:
    code, _, err = run(
        "tools",
        "add",
        "maths",
        "--cwd",
        str(REPO),
        "--",
        sys.executable,
        "-m",
        "tests.helpers.mcp_tool_server",
    )
    assert code == 0, err


@pytest.mark.model
def test_a_chat_with_tools_replies_and_a_model_without_them_says_so(maths: None, tmp_path: Path) -> None:
    starter = starter_model_file()
    assert starter is not None
    model = with_chat_template(starter, tmp_path / "SmolTools.gguf", TOOLS_TEMPLATE)
    assert run("models", "import", str(model))[0] == 0
    code, out, err = run(
        "chat",
        "--model",
        "SmolTools",
        "--tools",
        "maths",
        "--max-tokens",
        "6",
        "--temperature",
        "0",
        "2 + 40?",
    )
    assert code == 0 and out.strip(), err
    code, out, err = run("chat", "--model", "SmolLM2-135M-Instruct-Q4_1", "--tools", "all", "2 + 40?")
    assert code == 3 and out == ""
    assert "cannot use tools: its chat template takes none" in err
    # The refused chat stored nothing: the one conversation is the first chat's.
    conversations = json.loads(run("conversations", "list", "--json")[1])["conversations"]
    assert [c["title"] for c in conversations] == ["2 + 40?"]


def test_unknown_servers_are_one_line() -> None:
    code, _, err = run("chat", "--model", "SmolLM2-135M-Instruct-Q4_1", "--tools", "nowhere", "hi")
    assert code == 3 and "There is no tool server named “nowhere”" in err and err.count("\n") == 1
    code, _, err = run("chat", "--model", "SmolLM2-135M-Instruct-Q4_1", "--tools", " , ", "hi")
    assert code == 3 and "--tools needs the names of tool servers" in err


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("typed", "answer"),
    [
        ("y\n", Approval.ALLOW_ONCE),
        ("a\n", Approval.ALLOW_IN_CHAT),
        ("\n", Approval.DENY),
        ("no\n", Approval.DENY),
    ],
)
def test_a_call_is_asked_about_at_the_terminal(
    monkeypatch: pytest.MonkeyPatch, typed: str, answer: Approval
) -> None:
    monkeypatch.setattr(sys, "stdin", Terminal(typed))
    err = io.StringIO()
    assert ToolsOnTheTerminal(io.StringIO(), err, "stderr", approve_all=False).approve_tool(REQUEST) is answer
    assert 'tool call: maths › add\n{\n  "a": 2,\n  "b": 40\n}\nAllow? [y] once' in err.getvalue()


def test_without_a_terminal_a_call_is_denied_unless_approved_beforehand(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    err = io.StringIO()
    assert (
        ToolsOnTheTerminal(io.StringIO(), err, "stderr", approve_all=False).approve_tool(REQUEST)
        is Approval.DENY
    )
    assert "denied: no terminal to ask at" in err.getvalue()
    assert (
        ToolsOnTheTerminal(io.StringIO(), err, "stderr", approve_all=True).approve_tool(REQUEST)
        is Approval.ALLOW_ONCE
    )
    shown = io.StringIO()
    ToolsOnTheTerminal(io.StringIO(), shown, "stderr", approve_all=True).tool_result(
        7, ToolCallRecord("c4ll0aaaa", "add", "{}"), "42\nmore lines", False
    )
    assert shown.getvalue() == "result: 42\n"
