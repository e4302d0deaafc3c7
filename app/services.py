"""Everything the GUI talks to, built once at start-up."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from app.background import Background
from app.chat_service import ChatService
from app.conversations import ConversationStore
from app.core import Core
from app.engine import ChatEngine
from app.library import ModelLibrary
from app.paths import HearthPaths
from app.settings import Settings, save_settings
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

    @classmethod
    def start(cls, paths: HearthPaths) -> AppServices:
        core = Core.open(paths)
        hardware = probe_hardware()
        engine = ChatEngine(
            core.store, core.library, core.settings, runner_log=paths.runner_log_file, hardware=hardware
        )
        return cls(
            paths=paths,
            settings=core.settings,
            store=core.store,
            library=core.library,
            chat=ChatService(engine),
            background=Background(),
            hardware=hardware,
            core=core,
        )

    def update_settings(self, **changes: object) -> None:
        """Apply at once (the next turn uses them) and save off the GUI thread."""
        settings = dataclasses.replace(self.settings, **changes)  # type: ignore[arg-type]
        self.settings = self.core.settings = self.chat.engine.settings = settings
        self.background.call(lambda: save_settings(self.paths.settings_path, settings))

    def shutdown(self) -> None:
        self.chat.shutdown()
        self.background.shutdown()
        self.core.close()
