"""The GUI's handle on the local API server: start, stop and the keys off the GUI thread, state as signals."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from app.chat.engine import ChatEngine
from app.local_api.api_keys import ApiKeyInfo, ApiKeys, CreatedKey
from app.local_api.embeddings import ServedEmbedder
from app.local_api.server import LocalServer
from app.qt.background import Background, describe
from app.secret_store import SecretResult


@dataclass(frozen=True)
class ServerState:
    running: bool
    port: int
    url: str | None = None  # the API's base URL while running
    error: str = ""  # why the last start failed


@dataclass(frozen=True)
class KeyListing:
    """The keys, as a list shows them (never their secrets)."""

    keys: tuple[ApiKeyInfo, ...]
    # Keys the running server refuses for now, with why: the keyring would not give their secrets.
    unavailable: tuple[tuple[str, str], ...] = ()


class LocalServerService(QObject):
    """activityChanged is emitted from request threads (Qt queues it to receivers on the GUI thread); the
    other signals on the GUI thread, which alone keeps the state and the listing."""

    stateChanged = Signal(object)  # ServerState
    keysChanged = Signal(object)  # KeyListing
    # A key just made, as a CreatedKey: the only time its secret is given; then keysChanged.
    keyCreated = Signal(object)
    # (ApiKeyInfo, SecretResult): the key revoked, and whether its secret left the keyring; then keysChanged.
    keyRevoked = Signal(object)
    # Why a key could not be made, revoked or listed (one sentence for the user).
    keyFailed = Signal(str)
    # API requests waiting for the runner or generating; 0 when the server is idle.
    activityChanged = Signal(int)

    def __init__(
        self,
        engine: ChatEngine,
        port: int,
        keys: ApiKeys,
        parent: QObject | None = None,
        *,
        embedder: ServedEmbedder | None = None,
    ) -> None:
        super().__init__(parent)
        self._engine = engine
        self._embedder = embedder
        self._keys = keys
        # One worker: keyring calls may block for seconds, and starts and stops must happen in order.
        self._worker = Background("local-server-control", parent=self)
        self._server: LocalServer | None = None
        self._state = ServerState(running=False, port=port)
        self._listing: KeyListing | None = None
        self._active = 0
        self._shut_down = False

    @property
    def state(self) -> ServerState:
        """The latest state, for widgets created after it was signalled."""
        return self._state

    @property
    def listing(self) -> KeyListing | None:
        """The latest listing of the keys; None until one was loaded."""
        return self._listing

    @property
    def active_requests(self) -> int:
        return self._active

    def start(self, port: int) -> Future[tuple[ServerState, KeyListing]]:
        """Non-blocking: (re)start on 127.0.0.1:port, accepting every key (and those made and revoked while
        it runs). A start that fails leaves the server off, with the reason in the state. The listing
        follows: it says which keys the keyring would not give the server."""

        def started(result: tuple[ServerState, KeyListing]) -> None:
            self._set_state(result[0])
            self._set_listing(result[1])

        def failed(error: Exception) -> None:
            self._set_state(ServerState(running=False, port=port, error=describe(error)))

        return self._worker.call(
            lambda: self._start(port), started, failed, operation="starting the local API server"
        )

    def stop(self) -> Future[None]:
        return self._worker.call(self._stop, self._stopped, operation="stopping the local API server")

    def load_keys(self) -> Future[KeyListing]:
        """Non-blocking: list the keys, with their last use; answered by keysChanged. After shutdown (a
        panel's refresh timer may still fire) it does nothing."""
        if self._shut_down:
            nothing: Future[KeyListing] = Future()
            nothing.cancel()
            return nothing
        return self._worker.call(
            self._list_keys, self._set_listing, self._failed_key, operation="listing the API keys"
        )

    def create_key(self, name: str) -> Future[tuple[CreatedKey, KeyListing]]:
        """Non-blocking: make a key (the server accepts it at once); answered by keyCreated, or keyFailed
        (a bad or taken name, too many keys)."""

        def create() -> tuple[CreatedKey, KeyListing]:
            return self._keys.create(name), self._list_keys()

        def done(result: tuple[CreatedKey, KeyListing]) -> None:
            self.keyCreated.emit(result[0])
            self._set_listing(result[1])

        return self._worker.call(create, done, self._failed_key, operation="making an API key")

    def revoke_key(self, name: str) -> Future[tuple[tuple[ApiKeyInfo, SecretResult], KeyListing]]:
        """Non-blocking: revoke a key; servers refuse it from their next request. Answered by keyRevoked
        or keyFailed."""

        def revoke() -> tuple[tuple[ApiKeyInfo, SecretResult], KeyListing]:
            return self._keys.revoke(name), self._list_keys()

        def done(result: tuple[tuple[ApiKeyInfo, SecretResult], KeyListing]) -> None:
            self.keyRevoked.emit(result[0])
            self._set_listing(result[1])

        return self._worker.call(revoke, done, self._failed_key, operation="revoking an API key")

    def shutdown(self) -> None:
        """Blocking: stop serving (requests in flight are cancelled) and end the worker."""
        self._shut_down = True
        self.stop()
        self._worker.shutdown()

    def _list_keys(self) -> KeyListing:
        server = self._server
        unavailable = tuple(server.keys.unavailable.items()) if server is not None else ()
        return KeyListing(tuple(self._keys.list_keys()), unavailable)

    def _set_listing(self, listing: KeyListing) -> None:
        self._listing = listing
        self.keysChanged.emit(listing)

    def _failed_key(self, error: Exception) -> None:
        self.keyFailed.emit(describe(error))

    def _start(self, port: int) -> tuple[ServerState, KeyListing]:
        self._stop()
        server = LocalServer(
            self._engine,
            keys=self._keys.accepted(),
            port=port,
            on_activity=self._on_activity,
            embedder=self._embedder,
        )
        server.start()
        self._server = server
        return ServerState(running=True, port=server.port, url=server.url), self._list_keys()

    def _stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def _stopped(self, _result: None) -> None:
        self._set_state(ServerState(running=False, port=self._state.port))

    def _set_state(self, state: ServerState) -> None:
        self._state = state
        self.stateChanged.emit(state)

    def _on_activity(self, active: int) -> None:
        self._active = active
        self.activityChanged.emit(active)
