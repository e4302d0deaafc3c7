"""The OpenAI-compatible servers the user added: name, address, CA bundle and context length in
`servers.json` in the Hearth home, the API key in the OS keyring through app.secret_store (never in a file
or a log).

    {"schema_version": 1, "servers": [{"name": "...", "url": "https://host/v1", "ca_bundle": "/…" | null,
                                       "context_tokens": 32768}]}

`context_tokens` came after the first files were written and is there only when the user set it: a file
without it loads (the server's context is then what it reports), and a Hearth that predates it reads a
newer file, ignoring the key; so the schema version stays 1.

A model on a server is named `SERVER/MODEL`; local model names never contain a slash.
"""

from __future__ import annotations

import enum
import json
import logging
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app.errors import HearthError
from app.remote.openai_client import OpenAIClient, RemoteError, ServerModel, StreamCancel, normalize_base_url
from app.secret_store import SecretResult, SecretStatus, SecretStore
from app.settings import read_section, write_text_atomically
from inference.protocol import ErrorKind

log = logging.getLogger("hearth.servers")

SERVERS_FILE: Final = "servers.json"
SCHEMA_VERSION: Final = 1
MAX_NAME_CHARS: Final = 40
MAX_KEY_CHARS: Final = 4096
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_KEY_PREFIX: Final = "server-api-key:"
API_KEY_NOUN: Final = "API key"  # how keyring failures name the secret to the user
# What a server that reports no context length is planned for, unless the user set its context.
DEFAULT_SERVER_CONTEXT: Final = 8192
MIN_CONTEXT_SETTING: Final = 256
MAX_CONTEXT_SETTING: Final = 10_000_000
AUTOMATIC: Final = "auto"  # the context setting's "not set": what the server reports, else the default


@dataclass(frozen=True)
class Server:
    name: str
    url: str  # normalized: the API root, ending in /v1 (or another version)
    ca_bundle: str | None = None  # a PEM file of CAs to trust instead of the system's
    # The user's context length for the server's models; None: what the server reports, else the default.
    context_tokens: int | None = None


class ContextSource(enum.StrEnum):
    SETTING = "setting"  # the user's, for this server
    SERVER = "server"  # what the server reports for the model
    DEFAULT = "default"  # neither: DEFAULT_SERVER_CONTEXT


@dataclass(frozen=True)
class ServerContext:
    """The context a server's model is planned for, and where the figure comes from."""

    tokens: int
    source: ContextSource


@dataclass(frozen=True)
class ServerListing:
    """One server's models, or why they could not be listed."""

    server: Server
    models: tuple[ServerModel, ...] = ()
    error: str | None = None
    error_kind: ErrorKind | None = None  # None: an unexpected failure


def split_model_name(name: str) -> tuple[str, str] | None:
    """`SERVER/MODEL` → (server, model); None for a local model name."""
    server, slash, model = name.partition("/")
    return (server, model) if slash and server and model else None


def check_name(name: str) -> str:
    cleaned = name.strip()
    if not cleaned or len(cleaned) > MAX_NAME_CHARS or not _NAME.fullmatch(cleaned):
        raise HearthError(
            f"“{name}” cannot name a server: use up to {MAX_NAME_CHARS} letters, digits, dots, dashes and "
            "underscores (no slash: models on it are called NAME/MODEL)."
        )
    return cleaned


def check_context_tokens(value: int) -> int:
    if isinstance(value, bool) or not MIN_CONTEXT_SETTING <= value <= MAX_CONTEXT_SETTING:
        raise HearthError(
            f"{value} tokens cannot be a server's context length: give a whole number from "
            f"{MIN_CONTEXT_SETTING:,} to {MAX_CONTEXT_SETTING:,}, or {AUTOMATIC} for what the server reports."
        )
    return value


def parse_context_tokens(text: str) -> int | None:
    """A context length as typed (`4096`, `32,768`); None for blank or `auto`: the server's own figure."""
    cleaned = text.strip().replace(",", "").replace("_", "")
    if not cleaned or cleaned.casefold() == AUTOMATIC:
        return None
    if not cleaned.isascii() or not cleaned.lstrip("-").isdigit():
        raise HearthError(
            f"“{text.strip()}” is not a context length: give a whole number of tokens from "
            f"{MIN_CONTEXT_SETTING:,} to {MAX_CONTEXT_SETTING:,}, or {AUTOMATIC} for what the server reports."
        )
    return check_context_tokens(int(cleaned))


def check_key_text(value: str) -> str:
    """The key as typed or piped, trimmed; it goes into an HTTP header, so printable ASCII only."""
    key = value.strip()
    if len(key) > MAX_KEY_CHARS or not all("!" <= c <= "~" for c in key):
        # Never echo the value: it may be a real key with a stray character.
        raise HearthError("That does not look like an API key (printable characters, no spaces).")
    return key


class ServerRegistry:
    """Thread-safe. Keep one per process: a key the keyring would not take lives in its SecretStore."""

    def __init__(self, home: Path, secrets: SecretStore | None = None) -> None:
        self._path = Path(home) / SERVERS_FILE
        self._secrets = secrets if secrets is not None else SecretStore()
        self._lock = threading.Lock()
        # What each server (by name and address) reported its models' contexts to be, from its last model
        # list; an empty dict when that list failed, so planning a turn does not ask a dead server again.
        self._reported_lock = threading.Lock()
        self._reported: dict[tuple[str, str], dict[str, int | None]] = {}

    @property
    def path(self) -> Path:
        return self._path

    def servers(self) -> list[Server]:
        """In name order. Never fails: a damaged file is set aside and logged."""
        with self._lock:
            return self._read()

    def get(self, name: str) -> Server:
        found = next((s for s in self.servers() if s.name.casefold() == name.strip().casefold()), None)
        if found is None:
            raise HearthError(f"There is no server named “{name}”; add it with `hearth servers add`.")
        return found

    def add(
        self,
        name: str,
        url: str,
        *,
        api_key: str | None = None,
        ca_bundle: Path | None = None,
        context_tokens: int | None = None,
    ) -> tuple[Server, SecretResult | None]:
        """Add the server, or replace the one of the same name (its key too: None removes a stored key).

        Returns the server and how the key was stored (None when none was given). Raises HearthError for a
        bad name, address, CA bundle or context length; the server is saved even when the keyring refuses
        the key, which is then kept for this session only (the result says so).
        """
        server = self.check(name, url, ca_bundle, context_tokens)
        key = check_key_text(api_key) if api_key is not None else ""
        with self._lock:
            existing = self._read()
            others = [s for s in existing if s.name.casefold() != server.name.casefold()]
            self._write([*others, server])
        if key:
            return server, self._secrets.set(_KEY_PREFIX + server.name, key, noun=API_KEY_NOUN)
        if len(others) < len(existing):
            # Replaced without a key: the old server's key must not outlive it. A new server has none.
            self._secrets.delete(_KEY_PREFIX + server.name, noun=API_KEY_NOUN)
        return server, None

    @staticmethod
    def check(
        name: str, url: str, ca_bundle: Path | None = None, context_tokens: int | None = None
    ) -> Server:
        """The server as it would be saved. Raises HearthError for a bad name, address, CA bundle or
        context length."""
        bundle = None
        if ca_bundle is not None:
            path = Path(ca_bundle).expanduser()
            if not path.is_file():
                raise HearthError(f"The CA bundle {path} is not a file.")
            bundle = str(path.resolve())
        context = check_context_tokens(context_tokens) if context_tokens is not None else None
        return Server(check_name(name), normalize_base_url(url), bundle, context)

    def connect(
        self,
        name: str,
        url: str,
        *,
        api_key: str | None = None,
        ca_bundle: Path | None = None,
        context_tokens: int | None = None,
    ) -> tuple[Server, list[ServerModel], SecretResult | None]:
        """Blocking, network: list the server's models with these details and, only if that works, add it.

        Raises HearthError (RemoteError when the server cannot be used); nothing is saved then.
        """
        server = self.check(name, url, ca_bundle, context_tokens)
        key = check_key_text(api_key) if api_key else None
        models = OpenAIClient(
            server.url,
            name=server.name,
            api_key=key,
            ca_bundle=Path(server.ca_bundle) if server.ca_bundle else None,
        ).list_models()
        saved, stored = self.add(
            server.name, server.url, api_key=key, ca_bundle=ca_bundle, context_tokens=context_tokens
        )
        self._remember(saved, models)
        return saved, models, stored

    def remove(self, name: str) -> tuple[Server, SecretResult]:
        """Blocking (the keyring). Returns the server and how deleting its key went: not `persisted` when
        the keyring kept it (the reason says why); the server is gone either way."""
        server = self.get(name)
        with self._lock:
            self._write([s for s in self._read() if s.name != server.name])
        return server, self._secrets.delete(_KEY_PREFIX + server.name, noun=API_KEY_NOUN)

    def set_api_key(self, name: str, api_key: str | None) -> SecretResult:
        """Blocking (the keyring): replace the server's key, or remove it (None or blank).

        Raises HearthError for an unknown server or a key that cannot be one. The result says where the
        key is now: in the keyring (`persisted`), or for this session only and why.
        """
        server = self.get(name)
        key = check_key_text(api_key) if api_key is not None else ""
        if key:
            return self._secrets.set(_KEY_PREFIX + server.name, key, noun=API_KEY_NOUN)
        return self._secrets.delete(_KEY_PREFIX + server.name, noun=API_KEY_NOUN)

    def set_ca_bundle(self, name: str, ca_bundle: Path | None) -> Server:
        """Trust the CAs in this PEM file for the server instead of the system's (None: the system's again).

        Raises HearthError for an unknown server or a bundle that is not a file.
        """
        with self._lock:
            servers = self._read()
            found = self._find(servers, name)
            changed = self.check(found.name, found.url, ca_bundle, found.context_tokens)
            self._write([changed if s is found else s for s in servers])
        return changed

    def set_context_tokens(self, name: str, context_tokens: int | None) -> Server:
        """Plan the server's models for this many tokens (None: what the server reports, else the default).

        Raises HearthError for an unknown server or a context length out of range.
        """
        context = check_context_tokens(context_tokens) if context_tokens is not None else None
        with self._lock:
            servers = self._read()
            found = self._find(servers, name)
            changed = Server(found.name, found.url, found.ca_bundle, context)
            self._write([changed if s is found else s for s in servers])
        return changed

    @staticmethod
    def _find(servers: list[Server], name: str) -> Server:
        found = next((s for s in servers if s.name.casefold() == name.strip().casefold()), None)
        if found is None:
            raise HearthError(f"There is no server named “{name}”; add it with `hearth servers add`.")
        return found

    def api_key(self, name: str) -> str | None:
        """Blocking (the keyring, up to its timeout)."""
        return self._secrets.get(_KEY_PREFIX + check_name(name), noun=API_KEY_NOUN).value or None

    def key_status(self, name: str) -> SecretStatus:
        return self._secrets.status_of(_KEY_PREFIX + check_name(name), noun=API_KEY_NOUN)

    def client(self, server: Server, **timeouts: float) -> OpenAIClient:
        """Blocking (reads the key from the keyring)."""
        return OpenAIClient(
            server.url,
            name=server.name,
            api_key=self.api_key(server.name),
            ca_bundle=Path(server.ca_bundle) if server.ca_bundle else None,
            **timeouts,
        )

    def resolve(self, model_name: str) -> tuple[Server, str] | None:
        """The server and the model's name on it for `SERVER/MODEL`; None for a local model name.

        Raises HearthError for SERVER/MODEL when no server of that name was added.
        """
        split = split_model_name(model_name)
        if split is None:
            return None
        return self.get(split[0]), split[1]

    def listing(self, server: Server, cancel: StreamCancel | None = None) -> ServerListing:
        """Blocking (the keyring, then the network): the server's models, or why they cannot be listed.
        `cancel` gives up from another thread."""
        try:
            models = self.client(server).list_models(cancel)
        except RemoteError as exc:
            return ServerListing(server, error=str(exc), error_kind=exc.kind)
        self._remember(server, models)
        return ServerListing(server, tuple(models))

    def context_for(self, server: Server, model: str) -> ServerContext:
        """Blocking (the network, once per server until its models are listed again): the context `model`
        on `server` is planned for. The user's setting for the server when there is one, else what the
        server reports for the model, else DEFAULT_SERVER_CONTEXT."""
        if server.context_tokens is not None:
            return ServerContext(server.context_tokens, ContextSource.SETTING)
        key = (server.name, server.url)
        with self._reported_lock:
            reported = self._reported.get(key)
        if reported is None:
            listed = self.listing(server)
            reported = {m.id: m.context_tokens for m in listed.models}
            if listed.error is not None:
                log.info(
                    "%s did not list its models (%s): its context is not known", server.name, listed.error
                )
                with self._reported_lock:
                    self._reported.setdefault(key, reported)
        tokens = reported.get(model)
        if tokens is None:
            return ServerContext(DEFAULT_SERVER_CONTEXT, ContextSource.DEFAULT)
        return ServerContext(tokens, ContextSource.SERVER)

    def _remember(self, server: Server, models: list[ServerModel]) -> None:
        with self._reported_lock:
            self._reported[(server.name, server.url)] = {m.id: m.context_tokens for m in models}

    # -- the file -----------------------------------------------------------------------------------

    def _read(self) -> list[Server]:
        entries = read_section(self._path, "servers", list, "servers")
        if entries is None:
            return []
        servers: dict[str, Server] = {}
        for index, entry in enumerate(entries):
            try:
                server = _server(entry, self._path)
            except HearthError as exc:
                # One bad entry (a hand edit) should not hide the others.
                log.warning("server %d in %s is left out: %s", index + 1, self._path, exc)
                continue
            servers.setdefault(server.name.casefold(), server)
        return sorted(servers.values(), key=lambda s: s.name.casefold())

    def _write(self, servers: list[Server]) -> None:
        data = {
            "schema_version": SCHEMA_VERSION,
            "servers": [_entry(s) for s in sorted(servers, key=lambda s: s.name.casefold())],
        }
        try:
            write_text_atomically(self._path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        except OSError as exc:
            raise HearthError(f"Could not save the servers in {self._path}: {exc.strerror or exc}.") from exc


def _entry(server: Server) -> dict[str, object]:
    entry: dict[str, object] = {"name": server.name, "url": server.url, "ca_bundle": server.ca_bundle}
    if server.context_tokens is not None:
        entry["context_tokens"] = server.context_tokens
    return entry


def _server(entry: object, path: Path) -> Server:
    if not isinstance(entry, dict):
        raise HearthError("it is not an object")
    name, url, bundle = entry.get("name"), entry.get("url"), entry.get("ca_bundle")
    if not isinstance(name, str) or not isinstance(url, str):
        raise HearthError("it has no name or no url")
    if bundle is not None and not isinstance(bundle, str):
        raise HearthError("its ca_bundle is not a path")
    server = Server(check_name(name), normalize_base_url(url), bundle)
    context = entry.get("context_tokens")
    if context is None:
        return server
    try:
        if not isinstance(context, int):
            raise HearthError(f"{context!r} is not a number of tokens")
        return Server(server.name, server.url, bundle, check_context_tokens(context))
    except HearthError as exc:
        # A hand edit gone wrong costs the setting, not the server.
        log.warning("the context_tokens of %s in %s is ignored: %s", server.name, path, exc)
        return server
