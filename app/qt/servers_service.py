"""The GUI's handle on the servers the user added: each one's models (or why they cannot be listed), where
its API key is kept, and the changes the user makes (remove, key, CA bundle, context length).

Every file, keyring and network call runs on a worker; results arrive as signals on the GUI thread, where
all the state lives. Changes go through one worker, in the order they were asked for; model lists go
through several, so one slow server holds up neither the others nor the user's changes.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from PySide6.QtCore import QObject, Signal

from app.qt.background import Background
from app.remote.openai_client import ServerModel, StreamCancel
from app.remote.registry import Server, ServerListing, ServerRegistry
from app.secret_store import SecretResult, SecretStatus
from inference.protocol import ErrorKind

LISTING_WORKERS: Final = 4


@dataclass(frozen=True)
class ServerEntry:
    server: Server
    models: tuple[ServerModel, ...] | None = None  # None: not listed yet, or the last listing failed
    error: str | None = None  # why the last listing failed
    error_kind: ErrorKind | None = None
    checking: bool = False  # a listing is on its way
    key: SecretStatus | None = None  # None: not read from the keyring yet


@dataclass(frozen=True)
class Removal:
    server: Server
    key: SecretResult  # not `persisted`: the keyring kept the key (the reason says why)


@dataclass
class _State:
    entry: ServerEntry
    # Renewed (never reused, not even for a server removed and added again) by every change to what a
    # listing would say: address, CA bundle, key. A listing asked for before the change is stale.
    version: int
    listing_for: int | None = None  # the version the listing on its way was asked for


class ServersService(QObject):
    # The entries (and so the model picker's server models) changed.
    changed = Signal()
    removed = Signal(object)  # a Removal
    # (server name, SecretResult): the key was replaced or removed; not `persisted`: this session only.
    keyChanged = Signal(str, object)
    caChanged = Signal(object)  # the Server with its new CA bundle
    contextChanged = Signal(object)  # the Server with its new context setting
    # A change the user asked for could not be made (the message says why); nothing was changed.
    failed = Signal(str)

    def __init__(self, registry: ServerRegistry, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._registry = registry
        self._control = Background("servers", parent=self)
        self._network = Background("server-listing", LISTING_WORKERS, self)
        # Listings in progress, so closing the window ends them at once instead of waiting out a slow server.
        self._listings_lock = threading.Lock()
        self._listings: set[StreamCancel] = set()
        self._closing = False
        self._states: dict[str, _State] = {}
        self._versions = itertools.count()
        self._loaded = False
        self._loading = False

    @property
    def registry(self) -> ServerRegistry:
        return self._registry

    def entries(self) -> list[ServerEntry]:
        return [self._states[name].entry for name in sorted(self._states, key=str.casefold)]

    def listings(self) -> list[ServerListing]:
        """What the model picker shows: the servers listed so far, with their models or their failure."""
        result = []
        for entry in self.entries():
            if entry.error is not None:
                result.append(ServerListing(entry.server, error=entry.error, error_kind=entry.error_kind))
            elif entry.models is not None:
                result.append(ServerListing(entry.server, entry.models))
        return result

    # -- listing -------------------------------------------------------------------------------------

    def refresh(self, name: str | None = None) -> None:
        """Non-blocking: list one server's models again, or (None) re-read the servers and list them all."""
        if name is not None:
            if name in self._states:
                self._list(name)
            return
        if self._loading:
            return
        self._loading = True
        registry = self._registry

        def read() -> list[tuple[Server, SecretStatus]]:
            return [(server, registry.key_status(server.name)) for server in registry.servers()]

        self._control.call(read, self._read, self._read_failed, operation="reading the servers")

    def retry_failed(self) -> None:
        """Non-blocking: list again the servers whose last listing failed (all of them before the first)."""
        if not self._loaded:
            self.refresh()
            return
        for name, state in self._states.items():
            if state.entry.error is not None:
                self._list(name)

    def _read(self, servers: list[tuple[Server, SecretStatus]]) -> None:
        self._loading = False
        self._loaded = True
        states: dict[str, _State] = {}
        for server, key in servers:
            state = self._states.get(server.name)
            if state is None or state.entry.server != server:
                state = _State(ServerEntry(server), next(self._versions))
            state.entry = replace(state.entry, key=key)
            states[server.name] = state
        self._states = states
        for name in states:
            self._list(name)
        self.changed.emit()

    def _read_failed(self, error: Exception) -> None:
        self._loading = False
        self.failed.emit(str(error))

    def _list(self, name: str) -> None:
        state = self._states[name]
        if state.listing_for == state.version:
            return
        version = state.listing_for = state.version
        server = state.entry.server
        state.entry = replace(state.entry, checking=True)
        self._network.call(
            lambda: self._listing(server),
            lambda listing: self._listed(name, version, listing),
            lambda error: self._listed(name, version, ServerListing(server, error=str(error))),
            operation=f"listing the models of {name}",
        )
        self.changed.emit()

    def _listing(self, server: Server) -> ServerListing:
        """On a network worker."""
        cancel = StreamCancel()
        with self._listings_lock:
            if self._closing:
                return ServerListing(server, error="Hearth is closing.")
            self._listings.add(cancel)
        try:
            return self._registry.listing(server, cancel)
        finally:
            with self._listings_lock:
                self._listings.discard(cancel)

    def _listed(self, name: str, version: int, listing: ServerListing) -> None:
        state = self._states.get(name)
        if state is None or state.version != version:
            return  # removed or changed meanwhile: a newer listing is on its way, or none is wanted
        state.listing_for = None
        state.entry = replace(
            state.entry,
            models=None if listing.error is not None else listing.models,
            error=listing.error,
            error_kind=listing.error_kind,
            checking=False,
        )
        self.changed.emit()

    # -- changes -------------------------------------------------------------------------------------

    def add(self, server: Server, models: tuple[ServerModel, ...]) -> None:
        """A server the Add server dialog just connected to and saved, with the models it listed."""
        for name in [n for n in self._states if n.casefold() == server.name.casefold()]:
            del self._states[name]
        self._states[server.name] = _State(ServerEntry(server, models=models), next(self._versions))
        registry = self._registry
        # A key that cannot be read stays unknown (None) in the entry.
        self._control.call(
            lambda: registry.key_status(server.name),
            lambda key: self._key_read(server.name, key),
            operation=f"reading the key of {server.name}",
        )
        self.changed.emit()

    def _key_read(self, name: str, key: SecretStatus) -> None:
        state = self._states.get(name)
        if state is not None:
            state.entry = replace(state.entry, key=key)
            self.changed.emit()

    def remove(self, name: str) -> None:
        """Non-blocking: forget the server and delete its key; answered by `removed` or `failed`."""
        self._control.call(
            lambda: self._registry.remove(name),
            self._removed,
            self._change_failed,
            operation=f"removing {name}",
        )

    def _removed(self, result: tuple[Server, SecretResult]) -> None:
        server, key = result
        self._states.pop(server.name, None)
        self.changed.emit()
        self.removed.emit(Removal(server, key))

    def set_key(self, name: str, api_key: str | None) -> None:
        """Non-blocking: replace the server's key (None: remove it), then list its models with it."""
        registry = self._registry

        def work() -> tuple[SecretResult, SecretStatus]:
            return registry.set_api_key(name, api_key), registry.key_status(name)

        self._control.call(
            work,
            lambda result: self._key_set(name, *result),
            self._change_failed,
            operation=f"setting the key of {name}",
        )

    def _key_set(self, name: str, result: SecretResult, key: SecretStatus) -> None:
        state = self._states.get(name)
        if state is not None:
            state.entry = replace(state.entry, key=key)
            state.version = next(self._versions)
            self._list(name)
        self.keyChanged.emit(name, result)

    def set_ca_bundle(self, name: str, ca_bundle: Path | None) -> None:
        """Non-blocking: trust this PEM file's CAs for the server (None: the system's), then list again."""
        registry = self._registry
        self._control.call(
            lambda: registry.set_ca_bundle(name, ca_bundle),
            self._ca_set,
            self._change_failed,
            operation=f"setting the CA bundle of {name}",
        )

    def _ca_set(self, server: Server) -> None:
        state = self._states.get(server.name)
        if state is not None:
            state.entry = replace(state.entry, server=server)
            state.version = next(self._versions)
            self._list(server.name)
        self.caChanged.emit(server)

    def set_context(self, name: str, context_tokens: int | None) -> None:
        """Non-blocking: plan the server's models for this many tokens (None: what the server reports)."""
        registry = self._registry
        self._control.call(
            lambda: registry.set_context_tokens(name, context_tokens),
            self._context_set,
            self._change_failed,
            operation=f"setting the context of {name}",
        )

    def _context_set(self, server: Server) -> None:
        state = self._states.get(server.name)
        if state is not None:
            # What the server lists is the same: no new listing.
            state.entry = replace(state.entry, server=server)
            self.changed.emit()
        self.contextChanged.emit(server)

    def _change_failed(self, error: Exception) -> None:
        self.failed.emit(str(error))
        # The file may have changed under us (another Hearth, the CLI): show what it holds now.
        self.refresh()

    def shutdown(self) -> None:
        """Blocking: until the calls in progress end. Listings still waiting on a server are cut short."""
        with self._listings_lock:
            self._closing = True
            listings = list(self._listings)
        for cancel in listings:
            cancel.cancel()
        self._control.shutdown()
        self._network.shutdown()
