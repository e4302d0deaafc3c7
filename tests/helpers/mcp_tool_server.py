"""A real MCP server, written with the official SDK (`mcp.server.mcpserver.MCPServer`), for the tool tests.

Run as a process it speaks stdio (`python -m tests.helpers.mcp_tool_server`), as a tool server a user adds
with `hearth tools add NAME -- COMMAND`. `serve_http` runs the same tools over Streamable HTTP on loopback,
behind a bearer token, the way a hosted server is reached.

Its tools exercise what can go wrong: one that sleeps past a timeout, one that kills its own process, one
that fails, one whose output is too long, and one that reports an environment variable (to see what the
server was started with).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from app.tools.config import StdioTransport

TOKEN = "test-bearer-7f3a"
REPO = Path(__file__).resolve().parents[2]


def stdio_transport() -> StdioTransport:
    """How Hearth starts this server: this interpreter, in the checkout (where `tests` imports from)."""
    return StdioTransport(sys.executable, ("-m", "tests.helpers.mcp_tool_server"), cwd=str(REPO))


def build() -> MCPServer:
    server = MCPServer("hearth-test-tools")

    @server.tool(description="Add two whole numbers.")
    def add(a: int, b: int) -> int:
        return a + b

    @server.tool(description="The value of an environment variable in the server's process.")
    def environment(name: str) -> str:
        return os.environ.get(name, "<unset>")

    @server.tool(description="Wait, then answer.")
    def sleep(seconds: float) -> str:
        time.sleep(seconds)
        return f"slept {seconds}"

    @server.tool(description="End the server's process at once.")
    def crash() -> str:
        os._exit(3)

    @server.tool(description="Always fails, as a tool does that saw its failure coming.")
    def fail() -> str:
        raise ToolError("the disk is on fire")

    @server.tool(description="A long text.")
    def long_text(chars: int) -> str:
        return "x" * chars

    return server


@dataclass(frozen=True)
class HttpServer:
    url: str
    token: str


@contextmanager
def serve_http() -> Iterator[HttpServer]:
    """The tools over Streamable HTTP at http://127.0.0.1:PORT/mcp, refusing requests without TOKEN."""
    import uvicorn
    from starlette.requests import Request
    from starlette.responses import PlainTextResponse, Response
    from starlette.types import ASGIApp, Receive, Scope, Send

    inner = build().streamable_http_app()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            request = Request(scope)
            if request.headers.get("authorization") != f"Bearer {TOKEN}":
                denied: Response = PlainTextResponse("no token", status_code=401)
                await denied(scope, receive, send)
                return
        await inner(scope, receive, send)

    wrapped: ASGIApp = app
    config = uvicorn.Config(wrapped, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="mcp-test-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test MCP server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield HttpServer(f"http://127.0.0.1:{port}/mcp", TOKEN)
    finally:
        server.should_exit = True
        thread.join(timeout=10)


if __name__ == "__main__":
    build().run("stdio")
