"""Everything the GUI talks to, built once at start-up."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from app.chat.engine import ChatEngine
from app.conversations.store import ConversationStore
from app.core import Core
from app.documents.library import DocumentLibrary
from app.library.installed import ModelLibrary
from app.local_api.api_keys import ApiKeys
from app.paths import HearthPaths
from app.qt.background import Background
from app.qt.chat_service import ChatService
from app.qt.documents_service import DocumentsService
from app.qt.gpu_monitor import GpuMonitor
from app.qt.library_service import LibraryService
from app.qt.local_api_service import LocalServerService
from app.qt.servers_service import ServersService
from app.remote.registry import ServerRegistry
from app.settings import Settings, save_settings, write_text_atomically
from app.tools.config import ToolServerRegistry
from app.tools.host import ToolHost
from inference.hardware import HardwareReport, probe_hardware


@dataclass
class AppServices:
    paths: HearthPaths
    store: ConversationStore
    library: ModelLibrary
    chat: ChatService
    background: Background
    hardware: HardwareReport
    core: Core
    gpu_monitor: GpuMonitor
    # The library panel's: Hub search, downloads, verify, delete, model switching, the token.
    library_service: LibraryService
    # OpenAI-compatible servers; the chat engine answers SERVER/MODEL names through the same registry.
    servers: ServerRegistry
    # Network calls the window makes (Add server's connection test): never behind database work.
    network: Background
    # The servers as the window shows them (models, key, reachability) and the user's changes to them.
    servers_service: ServersService
    # The loaded model over an OpenAI-compatible API on 127.0.0.1, when the user turns it on.
    local_server: LocalServerService
    # Attachments (and collections): the chat engine reads what a turn was given from it.
    documents: DocumentLibrary
    # Reading attached files (extraction can take seconds for a long PDF): never on the GUI thread, and
    # never behind database or network work.
    documents_worker: Background
    # Collections as the window shows them, the user's changes to them, and indexing on its own thread.
    documents_service: DocumentsService

    @classmethod
    def start(cls, paths: HearthPaths) -> AppServices:
        # A damaged database opens read-only: the window offers export and restore instead of quitting.
        core = Core.open(paths, allow_damaged=True, window=True)
        hardware = probe_hardware()
        servers = ServerRegistry(paths.home)
        documents = core.documents()
        engine = ChatEngine(
            core.store,
            core.library,
            core.settings_store,
            runner_log=paths.runner_log_file,
            cpu_kernels_file=paths.cpu_kernels_file,
            hardware=hardware,
            servers=servers,
            documents=documents,
        )
        monitor = GpuMonitor()
        monitor.start()
        # One host for the window's chats: a tool server stays running between calls and turns.
        tools = ToolHost(
            ToolServerRegistry(paths.home),
            log_dir=paths.logs_dir,
            call_timeout_s=core.settings.tool_timeout_s,
        )
        chat = ChatService(engine, tools=tools)
        # The documents' embedder: the API's embeddings use the same runner process.
        local_server = LocalServerService(
            engine, core.settings.local_server_port, ApiKeys(paths.home), embedder=core.embedder()
        )
        if core.settings.local_server_enabled:
            local_server.start(core.settings.local_server_port)
        background = Background("background")
        # Saved off the GUI thread after every change, in the order they were made (one worker).
        core.settings_store.changed.connect(
            lambda settings: background.call(
                lambda: save_settings(paths.settings_path, settings), operation="saving the settings"
            )
        )
        documents_service = DocumentsService(documents)
        if core.damaged is None:
            documents_service.watch(ignore=[paths.home])
        return cls(
            paths=paths,
            store=core.store,
            library=core.library,
            chat=chat,
            background=background,
            hardware=hardware,
            core=core,
            gpu_monitor=monitor,
            library_service=LibraryService(core, chat),
            servers=servers,
            network=Background("network"),
            servers_service=ServersService(servers),
            local_server=local_server,
            documents=documents,
            documents_worker=Background("documents"),
            documents_service=documents_service,
        )

    @property
    def settings(self) -> Settings:
        return self.core.settings

    def update_settings(self, **changes: object) -> None:
        """Apply at once (the next turn uses them) and save off the GUI thread."""
        self.core.settings_store.update(**changes)

    def export_conversation(self, conversation_id: int, path: Path, fmt: str) -> Path:
        """Blocking (run it through `background`): write one conversation as Markdown ("md") or JSON."""
        if fmt == "md":
            content = self.store.export_markdown(conversation_id)
        elif fmt == "json":
            data = self.store.export_json(conversation_id)
            content = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        else:
            raise ValueError(f"fmt must be 'md' or 'json', not {fmt!r}")
        write_text_atomically(path, content)
        return path

    def shutdown(self) -> None:
        self.gpu_monitor.stop()
        # Before the chat service closes the runner: requests in flight are cancelled, their threads end.
        self.local_server.shutdown()
        # Pauses running downloads (they resume at the next start); its workers use the database.
        self.library_service.shutdown()
        self.chat.shutdown()
        # Files still being read are dropped: nothing holds them yet.
        self.documents_worker.shutdown(cancel_pending=True)
        # Before the embedder closes: a pass stops at its next batch, the changes asked for still land.
        self.documents_service.shutdown()
        self.documents.close()
        self.network.shutdown()
        self.servers_service.shutdown()
        self.background.shutdown()
        self.core.close()
