"""One Hearth window per data directory: a second start hands over to the first and exits.

Two processes writing one conversation database would race each other's streaming replies, so the window
holds an exclusive lock on `HearthPaths.instance_lock` for its lifetime. The operating system drops that
lock when the process dies however it dies, so a killed instance never blocks the next start. The window
also listens on a local socket (a Unix socket or a Windows named pipe, never the network); a second start
that finds the lock taken asks it to come to the front and exits.
"""

from __future__ import annotations

import hashlib
import logging
import time

from filelock import FileLock, Timeout
from PySide6.QtCore import QObject, Signal
from PySide6.QtNetwork import QLocalServer, QLocalSocket

from app.errors import HearthError
from app.paths import HearthPaths

log = logging.getLogger("hearth.instance")

ACTIVATE = b"activate\n"
ACKNOWLEDGED = b"ok\n"
# How long a second start keeps trying to reach a first one that holds the lock but is still starting.
HANDOVER_WAIT_S = 10.0
_SOCKET_WAIT_MS = 1000
_RETRY_S = 0.1


def server_name(paths: HearthPaths) -> str:
    """A short, stable name per data directory (socket paths are limited to about 100 bytes)."""
    return "hearth-" + hashlib.sha256(str(paths.home).encode()).hexdigest()[:20]


class SingleInstance(QObject):
    """The running window's claim. `activated` fires (on the GUI thread) when another start hands over."""

    activated = Signal()

    def __init__(self, paths: HearthPaths, lock: FileLock, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._lock = lock
        self._name = server_name(paths)
        self._server = QLocalServer(self)
        self._server.setSocketOptions(QLocalServer.SocketOption.UserAccessOption)
        self._server.newConnection.connect(self._accept)
        # Holding the lock means nobody else listens: a socket file left by a killed instance is stale.
        QLocalServer.removeServer(self._name)
        if not self._server.listen(self._name):
            log.warning(
                "cannot listen on %s (%s); a second start cannot bring this window forward",
                self._name,
                self._server.errorString(),
            )

    @classmethod
    def claim(cls, paths: HearthPaths, *, wait_s: float = HANDOVER_WAIT_S) -> SingleInstance | None:
        """Become the running instance, or (returning None) hand over to the one already running.

        Raises HearthError when another instance holds the lock but does not answer within `wait_s`.
        """
        paths.home.mkdir(parents=True, exist_ok=True)
        lock = FileLock(paths.instance_lock)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                lock.acquire(timeout=0)
            except Timeout:
                if request_activation(paths):
                    log.info("Hearth is already running for %s; asked its window to come forward", paths.home)
                    return None
                if time.monotonic() >= deadline:
                    raise HearthError(
                        f"Another Hearth holds {paths.instance_lock} but does not answer; if it is "
                        "restoring a backup, wait for it to finish and start Hearth again."
                    ) from None
                time.sleep(_RETRY_S)
            else:
                return cls(paths, lock)

    def _accept(self) -> None:
        while (connection := self._server.nextPendingConnection()) is not None:
            connection.readyRead.connect(lambda c=connection: self._read(c))
            connection.disconnected.connect(connection.deleteLater)

    def _read(self, connection: QLocalSocket) -> None:
        if not connection.canReadLine():
            return
        if bytes(connection.readLine().data()) == ACTIVATE:
            log.info("another start asked for this window; bringing it to the front")
            connection.write(ACKNOWLEDGED)
            connection.flush()
            self.activated.emit()
        connection.disconnectFromServer()

    def release(self) -> None:
        self._server.close()
        self._lock.release()


def request_activation(paths: HearthPaths) -> bool:
    """Ask the running window to come to the front; True when it acknowledged."""
    socket = QLocalSocket()
    try:
        socket.connectToServer(server_name(paths))
        if not socket.waitForConnected(_SOCKET_WAIT_MS):
            return False
        socket.write(ACTIVATE)
        if not socket.waitForBytesWritten(_SOCKET_WAIT_MS):
            return False
        while not socket.canReadLine():
            if not socket.waitForReadyRead(_SOCKET_WAIT_MS):
                return False
        return bytes(socket.readLine().data()) == ACKNOWLEDGED
    finally:
        socket.abort()
