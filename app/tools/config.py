"""The MCP servers the user added, in `mcp.json` in the Hearth home, in the format LM Studio, Cursor, Claude
Desktop and llama.cpp share, so a file copied from one of them works here and the other way round:

    {"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/home/me"],
                  "env": {"GITHUB_TOKEN": "<keyring>"}},
        "search": {"url": "https://example.org/mcp", "headers": {"Authorization": "<keyring>"}},
        "old": {"command": "uvx", "args": ["mcp-server-time"], "disabled": true}}}

The values of a server's environment and headers are where its secrets are (tokens, API keys): Hearth keeps
every one of them in the OS keyring (app.secret_store) and writes KEYRING_VALUE in their place. A value
typed into the file by hand is used as it is, and moved into the keyring the next time Hearth writes the
file (left where it is while the keyring cannot keep it). A server's command starts with only the
environment a process needs (the SDK's default: PATH, HOME, …) plus its own `env`, never Hearth's (no Hugging
Face token, no API keys).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from app.errors import HearthError
from app.secret_store import SecretResult, SecretStore
from app.settings import read_section, write_text_atomically

log = logging.getLogger("hearth.tools")

MCP_FILE: Final = "mcp.json"
KEYRING_VALUE: Final = "<keyring>"
MAX_NAME_CHARS: Final = 64
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SECRET_PREFIX: Final = "mcp:"
SECRET_NOUN: Final = "tool server secret"


@dataclass(frozen=True)
class StdioTransport:
    """A server Hearth starts as a process and talks to over its standard input and output."""

    command: str
    args: tuple[str, ...] = ()
    cwd: str | None = None


@dataclass(frozen=True)
class HttpTransport:
    """A server already running, reached over MCP's Streamable HTTP."""

    url: str


@dataclass(frozen=True)
class ToolServer:
    name: str
    transport: StdioTransport | HttpTransport
    # The names of its environment variables (stdio) or HTTP headers; their values are secrets.
    secret_names: tuple[str, ...] = ()
    enabled: bool = True
    # Values written into the file by hand, not yet moved into the keyring; never shown or logged.
    plain_values: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)

    @property
    def kind(self) -> str:
        return "stdio" if isinstance(self.transport, StdioTransport) else "http"


@dataclass(frozen=True)
class ImportResult:
    added: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (name, why)
    secrets: tuple[SecretResult, ...] = ()


def check_name(name: str) -> str:
    cleaned = name.strip()
    if not cleaned or len(cleaned) > MAX_NAME_CHARS or not _NAME.fullmatch(cleaned):
        raise HearthError(
            f"“{name}” cannot name a tool server: use up to {MAX_NAME_CHARS} letters, digits, dots, dashes "
            "and underscores."
        )
    return cleaned


def _importable_name(name: str) -> str:
    """Another app's name for a server ("Brave Search") as one Hearth accepts ("Brave-Search")."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", name.strip()).strip("-._")[:MAX_NAME_CHARS]
    return check_name(cleaned or name)


def check_url(url: str) -> str:
    cleaned = url.strip()
    if not re.fullmatch(r"https?://[^\s/?#]+[^\s]*", cleaned, flags=re.IGNORECASE):
        raise HearthError(f"“{url}” is not an http:// or https:// address of an MCP server.")
    return cleaned


def parse_pairs(pairs: Iterable[str], what: str) -> dict[str, str]:
    """`KEY=VALUE` arguments (`--env`, `--header`) as a mapping; HearthError for one without `=`."""
    found: dict[str, str] = {}
    for pair in pairs:
        key, equals, value = pair.partition("=")
        key = key.strip()
        if not equals or not key or any(c.isspace() for c in key):
            raise HearthError(f"“{pair.split('=')[0]}…” is not a {what}: give it as NAME=VALUE.")
        found[key] = value
    return found


def other_apps_files(home: Path | None = None) -> dict[str, Path]:
    """Where LM Studio, Claude Desktop and Cursor keep their MCP servers on this system."""
    user = home if home is not None else Path.home()
    if sys.platform == "darwin":
        claude = user / "Library" / "Application Support" / "Claude"
    elif sys.platform == "win32":
        claude = Path(os.environ.get("APPDATA", user / "AppData" / "Roaming")) / "Claude"
    else:
        claude = Path(os.environ.get("XDG_CONFIG_HOME", user / ".config")) / "Claude"
    return {
        "lmstudio": user / ".lmstudio" / "mcp.json",
        "claude": claude / "claude_desktop_config.json",
        "cursor": user / ".cursor" / "mcp.json",
    }


class ToolServerRegistry:
    """Thread-safe. Keep one per process: a secret the keyring would not take lives in its SecretStore."""

    def __init__(self, home: Path, secrets: SecretStore | None = None) -> None:
        self._path = Path(home) / MCP_FILE
        self._secrets = secrets if secrets is not None else SecretStore()
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path

    def servers(self) -> list[ToolServer]:
        """In name order. Never fails: a damaged file is set aside and logged."""
        with self._lock:
            return list(self._read().values())

    def get(self, name: str) -> ToolServer:
        with self._lock:
            return _find(self._read(), name)

    def add(
        self,
        name: str,
        transport: StdioTransport | HttpTransport,
        secrets: Mapping[str, str] | None = None,
        *,
        enabled: bool = True,
    ) -> tuple[ToolServer, list[SecretResult]]:
        """Add the server, or replace the one of that name (its secrets too). `secrets`: its environment
        (stdio) or headers (HTTP), kept in the keyring. Returns the server and how each secret was stored:
        one the keyring would not take is kept for this session only, and its result says why."""
        server = ToolServer(check_name(name), _checked(transport), tuple(secrets or {}), enabled)
        with self._lock:
            servers = self._read()
            replaced = servers.pop(server.name.casefold(), None)
            servers[server.name.casefold()] = server
            self._write(servers)
        results = [
            self._secrets.set(_secret_key(server, k), v, noun=SECRET_NOUN) for k, v in (secrets or {}).items()
        ]
        if replaced is not None:
            for stale in set(replaced.secret_names) - set(server.secret_names):
                self._secrets.delete(_secret_key(replaced, stale), noun=SECRET_NOUN)
        return server, results

    def remove(self, name: str) -> ToolServer:
        """Blocking (the keyring): the server and its secrets are gone."""
        server = self.get(name)
        with self._lock:
            servers = self._read()
            servers.pop(server.name.casefold(), None)
            self._write(servers)
        for key in server.secret_names:
            self._secrets.delete(_secret_key(server, key), noun=SECRET_NOUN)
        return server

    def set_enabled(self, name: str, enabled: bool) -> ToolServer:
        with self._lock:
            servers = self._read()
            found = _find(servers, name)
            changed = ToolServer(found.name, found.transport, found.secret_names, enabled, found.plain_values)
            servers[found.name.casefold()] = changed
            self._write(servers)
        return changed

    def secrets_of(self, server: ToolServer) -> dict[str, str]:
        """Blocking (the keyring): its environment or headers, with their values. A value the keyring no
        longer has is left out (and logged by name), so the server starts and says what it misses."""
        values: dict[str, str] = {}
        for key in server.secret_names:
            if key in server.plain_values:
                values[key] = server.plain_values[key]
                continue
            found = self._secrets.get(_secret_key(server, key), noun=SECRET_NOUN)
            if found.value is None:
                log.warning("tool server %s: the keyring has no value for %s", server.name, key)
                continue
            values[key] = found.value
        return values

    def import_file(self, path: Path, *, replace: bool = False) -> ImportResult:
        """Blocking (the keyring). Add the servers another app's file lists (`{"mcpServers": {...}}`); a
        name Hearth has already is skipped unless `replace`. Their secrets go into the keyring."""
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            raise HearthError(f"{path} does not exist.") from None
        except OSError as exc:
            raise HearthError(f"Cannot read {path}: {exc.strerror or exc}.") from None
        except (ValueError, RecursionError) as exc:
            raise HearthError(f"{path} is not a JSON file ({exc}).") from None
        entries = data.get("mcpServers") if isinstance(data, dict) else None
        if not isinstance(entries, dict):
            raise HearthError(f"{path} lists no MCP servers (it has no “mcpServers” object).")
        existing = {s.name.casefold() for s in self.servers()}
        added: list[str] = []
        skipped: list[tuple[str, str]] = []
        stored: list[SecretResult] = []
        for raw_name, entry in entries.items():
            try:
                name = _importable_name(str(raw_name))
                server, values = _server(name, entry)
            except HearthError as exc:
                skipped.append((str(raw_name), str(exc)))
                continue
            if name.casefold() in existing and not replace:
                skipped.append((name, "Hearth has a tool server of that name already"))
                continue
            _, results = self.add(name, server.transport, values, enabled=server.enabled)
            stored += results
            existing.add(name.casefold())
            added.append(name)
        return ImportResult(tuple(added), tuple(skipped), tuple(stored))

    def _read(self) -> dict[str, ToolServer]:
        entries = read_section(self._path, "mcpServers", dict, "tool servers")
        if entries is None:
            return {}
        servers: dict[str, ToolServer] = {}
        for raw_name, entry in entries.items():
            try:
                server, values = _server(check_name(str(raw_name)), entry)
            except HearthError as exc:
                # One bad entry (a hand edit) should not hide the others.
                log.warning("tool server %r in %s is left out: %s", raw_name, self._path, exc)
                continue
            plain = {k: v for k, v in values.items() if v != KEYRING_VALUE}
            servers.setdefault(
                server.name.casefold(),
                ToolServer(server.name, server.transport, server.secret_names, server.enabled, plain),
            )
        return dict(sorted(servers.items()))

    def _write(self, servers: Mapping[str, ToolServer]) -> None:
        data = {"mcpServers": {s.name: _entry(self._moved_to_keyring(s)) for _, s in sorted(servers.items())}}
        try:
            write_text_atomically(self._path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise HearthError(
                f"Could not save the tool servers in {self._path}: {exc.strerror or exc}."
            ) from exc

    def _moved_to_keyring(self, server: ToolServer) -> ToolServer:
        """The server with the values typed into its entry by hand moved into the keyring, those the keyring
        would not keep left in the entry."""
        if not server.plain_values:
            return server
        kept = {
            key: value
            for key, value in server.plain_values.items()
            if not self._secrets.set(_secret_key(server, key), value, noun=SECRET_NOUN).persisted
        }
        return ToolServer(server.name, server.transport, server.secret_names, server.enabled, kept)


def _find(servers: Mapping[str, ToolServer], name: str) -> ToolServer:
    found = servers.get(name.strip().casefold())
    if found is None:
        raise HearthError(f"There is no tool server named “{name}”; add it with `hearth tools add`.")
    return found


def _secret_key(server: ToolServer, name: str) -> str:
    kind = "env" if server.kind == "stdio" else "header"
    return f"{_SECRET_PREFIX}{server.name}:{kind}:{name}"


def _checked(transport: StdioTransport | HttpTransport) -> StdioTransport | HttpTransport:
    if isinstance(transport, HttpTransport):
        return HttpTransport(check_url(transport.url))
    if not transport.command.strip():
        raise HearthError(
            "A tool server needs a command to start it (hearth tools add NAME -- COMMAND ARGS…)."
        )
    return transport


def _entry(server: ToolServer) -> dict[str, object]:
    secrets = {key: server.plain_values.get(key, KEYRING_VALUE) for key in server.secret_names}
    entry: dict[str, object]
    if isinstance(server.transport, StdioTransport):
        entry = {"command": server.transport.command, "args": list(server.transport.args)}
        if server.transport.cwd is not None:
            entry["cwd"] = server.transport.cwd
        if secrets:
            entry["env"] = secrets
    else:
        entry = {"url": server.transport.url}
        if secrets:
            entry["headers"] = secrets
    if not server.enabled:
        entry["disabled"] = True
    return entry


def _server(name: str, entry: object) -> tuple[ToolServer, dict[str, str]]:
    """An entry of a `mcpServers` object, and the values of its environment or headers."""
    if not isinstance(entry, dict):
        raise HearthError("it is not an object")
    enabled = entry.get("disabled") is not True and entry.get("enabled") is not False
    kind = entry.get("type") or entry.get("transport")
    url = entry.get("url") or entry.get("serverUrl")
    command = entry.get("command")
    if kind == "sse":
        raise HearthError("it uses the old SSE transport; Hearth speaks stdio and Streamable HTTP")
    if isinstance(command, str) and command.strip():
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str | int | float) for a in args):
            raise HearthError("its args are not a list of strings")
        cwd = entry.get("cwd")
        values = _string_map(entry.get("env"), "env")
        transport: StdioTransport | HttpTransport = StdioTransport(
            command, tuple(str(a) for a in args), cwd if isinstance(cwd, str) else None
        )
    elif isinstance(url, str):
        values = _string_map(entry.get("headers"), "headers")
        transport = HttpTransport(check_url(url))
    else:
        raise HearthError("it has neither a command nor a url")
    return ToolServer(name, transport, tuple(values), enabled), values


def _string_map(value: object, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise HearthError(f"its {what} is not an object of names and values")
    return {k: str(v) for k, v in value.items()}
