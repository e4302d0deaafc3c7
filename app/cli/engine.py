"""The one place the command line builds a `ChatEngine`, for every command that chats or serves."""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.chat.engine import ChatEngine
from app.core import Core

if TYPE_CHECKING:
    from app.documents.library import DocumentLibrary
    from app.remote.registry import ServerRegistry


def chat_engine(
    core: Core, servers: ServerRegistry | None = None, documents: DocumentLibrary | None = None
) -> ChatEngine:
    """The engine a command runs, with the runner's log and the CPU kernels learned on this machine."""
    return ChatEngine(
        core.store,
        core.library,
        core.settings_store,
        runner_log=core.paths.runner_log_file,
        cpu_kernels_file=core.paths.cpu_kernels_file,
        servers=servers,
        documents=documents,
    )
