"""Connections to the user's MCP servers, through the official `mcp` SDK (2.x `mcp.Client` over stdio or
Streamable HTTP), for the rest of Hearth, which is not async: every method here blocks the calling worker
thread (never the GUI's) and returns within its timeout, whatever the server does.

One event loop on a daemon thread holds every connection. A connection is opened on first use and kept: a
stdio server stays running between calls, as the peers keep theirs. A server that crashes, exits, never
starts or stops answering is closed and reported (its `status`), and started again on the next use. Tool
errors, bad arguments, timeouts and oversized results come back as a ToolOutcome with `is_error` set and a
sentence the model can act on: a chat's tool round always ends.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import sys
import threading
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO, TypeVar

from app.errors import HearthError
from app.tools.config import HttpTransport, StdioTransport, ToolServer, ToolServerRegistry

log = logging.getLogger("hearth.tools")

DEFAULT_CALL_TIMEOUT_S: Final = 60.0
DEFAULT_START_TIMEOUT_S: Final = 30.0
# Tool output past this goes to the model cut, with a note: a result must leave room for the reply.
DEFAULT_MAX_RESULT_CHARS: Final = 32_000

T = TypeVar("T")


@dataclass(frozen=True)
class ToolInfo:
    server: str
    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True)
class ToolOutcome:
    """What a tool call gave, as the model is told it: the tool's text, or why there is none."""

    text: str
    is_error: bool = False
    truncated: bool = False


@dataclass(frozen=True)
class ServerStatus:
    name: str
    running: bool
    last_error: str | None = None


class ToolServerError(HearthError):
    """A tool server that could not be started, listed or reached."""


@dataclass
class _Connection:
    client: Any  # mcp.Client, imported where the SDK is first needed (it costs ~0.5 s to import)
    closing: asyncio.Event
    holder: asyncio.Task[None]
    tools: dict[str, ToolInfo] = field(default_factory=dict)
    errlog: TextIO | None = None


class ToolHost:
    """Thread-safe. One per process (the window and each `hearth` command keep their own)."""

    def __init__(
        self,
        registry: ToolServerRegistry,
        *,
        log_dir: Path | None = None,
        call_timeout_s: float = DEFAULT_CALL_TIMEOUT_S,
        start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    ) -> None:
        self.registry = registry
        self._log_dir = log_dir
        self.call_timeout_s = call_timeout_s
        self.start_timeout_s = start_timeout_s
        self.max_result_chars = max_result_chars
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        # Touched only on the loop's thread.
        self._connections: dict[str, _Connection] = {}
        self._errors: dict[str, str] = {}

    # Blocking API -----------------------------------------------------------------------------------------

    def tools(self, server_name: str) -> list[ToolInfo]:
        """The server's tools, starting it if it is not running. Raises ToolServerError naming the server
        and what went wrong."""
        server = self.registry.get(server_name)
        return self._run(self._tools(server), self.start_timeout_s + self.call_timeout_s)

    def call(self, server_name: str, tool: str, arguments: str) -> ToolOutcome:
        """Run one call. `arguments` is the JSON text the model wrote. Never raises for anything the
        server or the model did: the outcome then says what happened, for the model to read."""
        try:
            server = self.registry.get(server_name)
        except HearthError as exc:
            return ToolOutcome(str(exc), is_error=True)
        try:
            return self._run(
                self._call(server, tool, arguments), self.start_timeout_s + self.call_timeout_s + 5
            )
        except ToolServerError as exc:
            return ToolOutcome(str(exc), is_error=True)

    def running_tools(self, server_name: str) -> list[ToolInfo] | None:
        """The tools of the server if it is running now, None if it is not: nothing is started (the
        context meter counts what is offered without starting processes while the user types)."""
        if self._loop is None:
            return None
        return self._run(self._running_tools(self.registry.get(server_name).name), 5.0)

    def status(self, server_name: str) -> ServerStatus:
        name = self.registry.get(server_name).name
        if self._loop is None:
            return ServerStatus(name, False)
        return self._run(self._status(name), 5.0)

    def stop(self, server_name: str) -> None:
        """Stop the server if it runs (its next use starts it again)."""
        if self._loop is not None:
            self._run(self._close(self.registry.get(server_name).name), 15.0)

    def close(self) -> None:
        """Stop every server and the loop. Safe to call twice."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._close_all(), loop).result(timeout=20)
        except (concurrent.futures.TimeoutError, RuntimeError) as exc:
            log.warning("tool servers did not all stop in time: %s", exc)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        if not thread.is_alive():
            loop.close()

    # On the loop ------------------------------------------------------------------------------------------

    def _run(self, work: Coroutine[Any, Any, T], timeout: float) -> T:
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(work, loop)
        try:
            return future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ToolServerError("The tool server did not answer in time.") from None

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, name="hearth-mcp", daemon=True)
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    async def _status(self, name: str) -> ServerStatus:
        connection = self._connections.get(name)
        running = connection is not None and not connection.holder.done()
        return ServerStatus(name, running, self._errors.get(name))

    async def _running_tools(self, name: str) -> list[ToolInfo] | None:
        connection = self._connections.get(name)
        if connection is None or connection.holder.done():
            return None
        return list(connection.tools.values())

    async def _tools(self, server: ToolServer) -> list[ToolInfo]:
        connection = await self._connected(server)
        return list(connection.tools.values())

    async def _call(self, server: ToolServer, tool: str, arguments: str) -> ToolOutcome:
        connection = await self._connected(server)
        found = connection.tools.get(tool)
        if found is None:
            have = ", ".join(sorted(connection.tools)) or "none"
            return ToolOutcome(
                f"{server.name} has no tool named “{tool}” (its tools: {have}).", is_error=True
            )
        problem, parsed = _checked_arguments(found, arguments)
        if problem is not None:
            return ToolOutcome(f"The call was not made: {problem}", is_error=True)
        try:
            result = await asyncio.wait_for(connection.client.call_tool(tool, parsed), self.call_timeout_s)
        except TimeoutError:
            # A hung call may hold the server's only worker: start it afresh next time.
            await self._close(server.name, f"{tool} did not finish in {self.call_timeout_s:g} s")
            return ToolOutcome(
                f"{tool} did not finish within {self.call_timeout_s:g} seconds and was stopped.",
                is_error=True,
            )
        except Exception as exc:  # the SDK's MCPError, a broken pipe, a server that exited
            reason = _describe(exc)
            if connection.holder.done() or _is_disconnect(exc):
                await self._close(server.name, reason)
                return ToolOutcome(f"The tool server {server.name} stopped: {reason}.", is_error=True)
            return ToolOutcome(f"{tool} failed: {reason}.", is_error=True)
        text = _result_text(result)
        truncated = len(text) > self.max_result_chars
        if truncated:
            text = (
                text[: self.max_result_chars]
                + f"\n[… cut: the result was {len(text):,} characters; only the first "
                f"{self.max_result_chars:,} are shown]"
            )
        return ToolOutcome(text, is_error=bool(result.is_error), truncated=truncated)

    async def _connected(self, server: ToolServer) -> _Connection:
        connection = self._connections.get(server.name)
        if connection is not None and not connection.holder.done():
            return connection
        if connection is not None:
            await self._close(server.name)
        if not server.enabled:
            raise ToolServerError(f"The tool server {server.name} is turned off.")
        connection = await self._open(server)
        self._connections[server.name] = connection
        self._errors.pop(server.name, None)
        return connection

    async def _open(self, server: ToolServer) -> _Connection:
        from mcp import Client

        secrets = await asyncio.to_thread(self.registry.secrets_of, server)  # the keyring may be slow
        errlog = self._errlog(server)
        target = _transport(server, secrets, errlog)
        ready: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        closing = asyncio.Event()

        async def hold() -> None:
            # The SDK's task groups must be left in the task that entered them: this one holds the client.
            try:
                async with Client(target, read_timeout_seconds=self.call_timeout_s) as client:
                    ready.set_result(client)
                    await closing.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                else:
                    self._errors[server.name] = _describe(exc)
                    log.warning("tool server %s stopped: %s", server.name, _describe(exc))
                if isinstance(exc, asyncio.CancelledError):
                    raise

        holder = asyncio.get_running_loop().create_task(hold(), name=f"mcp:{server.name}")
        try:
            client = await asyncio.wait_for(asyncio.shield(ready), self.start_timeout_s)
            listed = await asyncio.wait_for(_all_tools(client), self.call_timeout_s)
        except BaseException as exc:
            closing.set()
            holder.cancel()
            with contextlib.suppress(BaseException):
                await holder
            if errlog is not None:
                errlog.close()
            reason = (
                f"it did not start within {self.start_timeout_s:g} seconds"
                if isinstance(exc, TimeoutError)
                else _describe(exc)
            )
            self._errors[server.name] = reason
            if isinstance(exc, asyncio.CancelledError):
                raise
            raise ToolServerError(f"The tool server {server.name} could not be used: {reason}.") from None
        tools = {
            t.name: ToolInfo(server.name, t.name, t.description or "", dict(t.input_schema)) for t in listed
        }
        return _Connection(client, closing, holder, tools, errlog)

    async def _close(self, name: str, reason: str | None = None) -> None:
        connection = self._connections.pop(name, None)
        if reason is not None:
            self._errors[name] = reason
        if connection is None:
            return
        connection.closing.set()
        try:
            await asyncio.wait_for(asyncio.shield(connection.holder), 10)
        except BaseException:  # a server that will not stop is killed with its task
            connection.holder.cancel()
            with contextlib.suppress(BaseException):
                await connection.holder
        if connection.errlog is not None:
            connection.errlog.close()

    async def _close_all(self) -> None:
        for name in list(self._connections):
            await self._close(name)

    def _errlog(self, server: ToolServer) -> TextIO | None:
        """Where a stdio server's standard error goes: a log per server, for a user who reports a fault."""
        if self._log_dir is None or not isinstance(server.transport, StdioTransport):
            return None
        try:
            self._log_dir.mkdir(parents=True, exist_ok=True)
            return (self._log_dir / f"mcp-{server.name}.log").open("a", encoding="utf-8", errors="replace")
        except OSError as exc:
            log.warning("no log for tool server %s: %s", server.name, exc)
            return None


def _transport(server: ToolServer, secrets: dict[str, str], errlog: TextIO | None) -> Any:
    if isinstance(server.transport, HttpTransport):
        return _streamable_http(server.transport.url, secrets)

    from mcp.client.stdio import StdioServerParameters, stdio_client

    parameters = StdioServerParameters(
        command=server.transport.command,
        args=list(server.transport.args),
        # Merged over the SDK's short list (PATH, HOME, …): Hearth's own environment, with its tokens and
        # keys, never reaches a tool server.
        env=secrets,
        cwd=server.transport.cwd,
    )
    return stdio_client(parameters, errlog=errlog if errlog is not None else sys.stderr)


@contextlib.asynccontextmanager
async def _streamable_http(url: str, headers: dict[str, str]) -> AsyncIterator[Any]:
    """The SDK's Streamable HTTP transport with the server's headers; it leaves a client it was given open,
    so this closes it."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    # The SDK's own timeouts: a server may hold a response stream open for minutes.
    timeout = httpx2.Timeout(30.0, read=300.0)
    async with (
        httpx2.AsyncClient(headers=headers, timeout=timeout) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams


async def _all_tools(client: Any) -> list[Any]:
    tools: list[Any] = []
    cursor: str | None = None
    for _page in range(100):  # a server that pages forever cannot hang the listing
        listed = await client.list_tools(cursor=cursor)
        tools += listed.tools
        cursor = listed.next_cursor
        if not cursor:
            break
    return tools


def _checked_arguments(tool: ToolInfo, arguments: str) -> tuple[str | None, dict[str, Any]]:
    """Why the model's arguments cannot be sent (not JSON, not an object, against the tool's schema)."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except ValueError as exc:
        return f"the arguments are not valid JSON ({exc}).", {}
    if not isinstance(parsed, dict):
        return "the arguments must be a JSON object.", {}
    import jsonschema

    try:
        validator_class = jsonschema.validators.validator_for(tool.input_schema)
        validator = validator_class(dict(tool.input_schema))
        errors = sorted(validator.iter_errors(parsed), key=lambda e: list(e.absolute_path))
    except jsonschema.SchemaError as exc:
        log.info("tool %s has a schema jsonschema cannot use (%s); arguments sent unchecked", tool.name, exc)
        return None, parsed
    if errors:
        listed = "; ".join(
            f"{'/'.join(str(p) for p in e.absolute_path) or 'the arguments'}: {e.message}" for e in errors[:5]
        )
        return f"the arguments do not match {tool.name}'s schema ({listed}).", {}
    return None, parsed


def _result_text(result: Any) -> str:
    """A CallToolResult as text for the model: its text blocks in order, other blocks named."""
    parts: list[str] = []
    for block in result.content:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} ({block.mime_type}) returned by the tool; not shown to the model]")
        elif kind == "resource_link":
            parts.append(f"[resource: {block.uri}]")
        elif kind == "resource":
            text = getattr(block.resource, "text", None)
            parts.append(text if isinstance(text, str) else f"[binary resource: {block.resource.uri}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts)


def _is_disconnect(exc: BaseException) -> bool:
    import anyio

    return (
        isinstance(
            exc, anyio.ClosedResourceError | anyio.BrokenResourceError | anyio.EndOfStream | BrokenPipeError
        )
        or "closed" in str(exc).lower()
    )


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    if isinstance(exc, FileNotFoundError):
        return f"its command was not found ({exc.filename or exc})"
    text = str(exc).strip() or type(exc).__name__
    return text.rstrip(".")
