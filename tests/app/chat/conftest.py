"""Fixtures for the chat tests that use tools."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from app.core import Core
from app.tools.config import ToolServerRegistry
from app.tools.host import ToolHost
from tests.helpers.mcp_tool_server import stdio_transport


@pytest.fixture
def tool_host(core: Core, tmp_path: Path) -> Iterator[ToolHost]:
    """A host for the test MCP server (tests.helpers.mcp_tool_server), added as "maths"."""
    registry = ToolServerRegistry(core.paths.home)
    registry.add("maths", stdio_transport())
    made = ToolHost(registry, log_dir=tmp_path / "logs", call_timeout_s=10)
    yield made
    made.close()
