"""The GUI's handle on the local API server: start, stop and the key off the GUI thread, state as signals."""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass

from PySide6.QtCore import QObject, Signal

from app.chat.engine import ChatEngine
from app.local_api.server import LocalServer, get_or_create_api_key, replace_api_key
from app.qt.background import Background, describe
from app.secret_store import SecretResult, SecretStore


@dataclass(frozen=True)
class ServerState:
    running: bool
    port: int
    url: str | None = None  # the API's base URL while running
    error: str = ""  # why the last start failed


class LocalServerService(QObject):
    """keyChanged and activityChanged are emitted from worker and request threads (Qt queues them to
    receivers on the GUI thread); stateChanged on the GUI thread, which alone keeps the state."""

    stateChanged = Signal(object)  # ServerState
    # The key as a SecretResult: value, and whether the keyring keeps it (else: this session only, and why).
    keyChanged = Signal(object)
    # API requests waiting for the runner or generating; 0 when the server is idle.
    activityChanged = Signal(int)

    def __init__(
        self, engine: ChatEngine, port: int, secrets: SecretStore | None = None, parent: QObject | None = None
    ) -> None:
        super().__init__(parent)
        self._engine = engine
        self._secrets = secrets if secrets is not None else SecretStore()
        # One worker: keyring calls may block for seconds, and starts and stops must happen in order.
        self._worker = Background("local-server-control", parent=self)
        self._server: LocalServer | None = None
        self._state = ServerState(running=False, port=port)
        self._key: SecretResult | None = None
        self._active = 0

    @property
    def state(self) -> ServerState:
        """The latest state, for widgets created after it was signalled."""
        return self._state

    @property
    def key(self) -> SecretResult | None:
        return self._key

    @property
    def active_requests(self) -> int:
        return self._active

    def start(self, port: int) -> Future[ServerState]:
        """Non-blocking: (re)start on 127.0.0.1:port with the stored key (made on first use). A start that
        fails leaves the server off, with the reason in the state."""

        def failed(error: Exception) -> None:
            self._set_state(ServerState(running=False, port=port, error=describe(error)))

        return self._worker.call(
            lambda: self._start(port), self._set_state, failed, operation="starting the local API server"
        )

    def stop(self) -> Future[None]:
        return self._worker.call(self._stop, self._stopped, operation="stopping the local API server")

    def load_key(self) -> Future[str]:
        """Non-blocking: read the key (making one on first use); answered by keyChanged."""
        return self._worker.call(self._ensure_key, operation="reading the API key")

    def new_key(self) -> Future[None]:
        """Non-blocking: replace the key; a running server accepts only the new one from then on."""
        return self._worker.call(self._new_key, operation="replacing the API key")

    def shutdown(self) -> None:
        """Blocking: stop serving (requests in flight are cancelled) and end the worker."""
        self.stop()
        self._worker.shutdown()

    def _ensure_key(self) -> str:
        key = self._key
        if key is None or key.value is None:
            key = get_or_create_api_key(self._secrets)
            self._set_key(key)
        assert key.value is not None
        return key.value

    def _new_key(self) -> None:
        key = replace_api_key(self._secrets)
        assert key.value is not None
        if self._server is not None:
            self._server.set_api_key(key.value)
        self._set_key(key)

    def _set_key(self, key: SecretResult) -> None:
        self._key = key
        self.keyChanged.emit(key)

    def _start(self, port: int) -> ServerState:
        self._stop()
        server = LocalServer(self._engine, self._ensure_key(), port=port, on_activity=self._on_activity)
        server.start()
        self._server = server
        return ServerState(running=True, port=server.port, url=server.url)

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
