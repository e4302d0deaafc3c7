"""Everything the GUI talks to, built once at start-up."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from app.background import Background
from app.chat_service import ChatService
from app.conversations import ConversationStore
from app.core import Core
from app.engine import ChatEngine
from app.gpu_monitor import GpuMonitor
from app.library import ModelLibrary
from app.library_service import LibraryService
from app.paths import HearthPaths
from app.settings import Settings, save_settings, write_text_atomically
from inference.hardware import HardwareReport, probe_hardware


@dataclass
class AppServices:
    paths: HearthPaths
    settings: Settings
    store: ConversationStore
    library: ModelLibrary
    chat: ChatService
    background: Background
    hardware: HardwareReport
    core: Core
    gpu_monitor: GpuMonitor
    # The library panel's: Hub search, downloads, verify, delete, model switching, the token.
    library_service: LibraryService

    @classmethod
    def start(cls, paths: HearthPaths) -> AppServices:
        core = Core.open(paths)
        hardware = probe_hardware()
        engine = ChatEngine(
            core.store, core.library, core.settings, runner_log=paths.runner_log_file, hardware=hardware
        )
        monitor = GpuMonitor()
        monitor.start()
        chat = ChatService(engine)
        return cls(
            paths=paths,
            settings=core.settings,
            store=core.store,
            library=core.library,
            chat=chat,
            background=Background(),
            hardware=hardware,
            core=core,
            gpu_monitor=monitor,
            library_service=LibraryService(core, chat),
        )

    def update_settings(self, **changes: object) -> None:
        """Apply at once (the next turn uses them) and save off the GUI thread."""
        settings = dataclasses.replace(self.settings, **changes)  # type: ignore[arg-type]
        self.settings = self.core.settings = self.chat.engine.settings = settings
        self.background.call(lambda: save_settings(self.paths.settings_path, settings))

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
        # Pauses running downloads (they resume at the next start); its workers use the database.
        self.library_service.shutdown()
        self.chat.shutdown()
        self.background.shutdown()
        self.core.close()
