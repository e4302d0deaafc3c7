"""What each part of the main window is handed: the services, the chat session, the dialogs, and the
window's way of running work off the GUI thread and of telling the user how it went."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from app.chat.session import ChatSession
from app.qt.services import AppServices
from ui.dialogs import Dialogs

T = TypeVar("T")


class RunInWindow(Protocol):
    """Run `fn` off the GUI thread; its result reaches `on_done` unless the window is gone by then, and a
    failure is shown in the status bar. `network`: on the network worker, so a slow server never holds up
    database work."""

    def __call__(
        self, fn: Callable[[], T], on_done: Callable[[T], None], *, network: bool = False
    ) -> None: ...


@dataclass(frozen=True)
class WindowContext:
    services: AppServices
    session: ChatSession
    dialogs: Dialogs
    run: RunInWindow
    show_info: Callable[[str], None]
    show_error: Callable[[str], None]
    # A damaged database is open read-only: nothing is written, so no model is needed either.
    read_only: bool
    # Whether choosing a model loads it ahead of the first message (the smoke test's window loads none).
    preload_model: bool
    # Once closed, no new background work: the services may already be shutting down.
    is_closed: Callable[[], bool]
