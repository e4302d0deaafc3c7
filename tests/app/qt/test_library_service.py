"""LibraryService, the GUI's handle on the library and the Hub: real services against the local hub server."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import keyring
import psutil
import pytest
from keyring.backends import fail
from PySide6.QtCore import Qt
from pytestqt.qtbot import QtBot

from app.library.downloads import local_path
from app.library.hub import RepoSummary
from app.library.installed import InstalledModel
from app.library.model_ops import DiskUsage, RepoAssessment
from app.paths import HearthPaths
from app.qt.library_service import DownloadPhase, DownloadState
from app.qt.services import AppServices
from app.secret_store import SecretStatus
from app.settings import Settings, save_settings
from tests.helpers.gguf_factory import TensorSpec, gguf_bytes
from tests.helpers.hubserver import HubServer, ServedFile, starter_file
from tests.helpers.model_files import with_chat_template

REPO = "bartowski/SmolLM2-135M-Instruct-GGUF"
TOKEN = "hf_ServiceTokenServiceToken01234567"
WAIT_MS = 30_000


@dataclass
class Heard:
    """Everything the service said, and on which thread it said it."""

    downloads: list[DownloadState] = field(default_factory=list)
    download_threads: set[str] = field(default_factory=set)  # where progress was reported from
    models: list[list[InstalledModel]] = field(default_factory=list)
    assessments: list[RepoAssessment] = field(default_factory=list)
    searches: list[tuple[str, list[RepoSummary]]] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    tokens: list[SecretStatus] = field(default_factory=list)
    disk: list[DiskUsage] = field(default_factory=list)

    def last(self, key: str) -> DownloadState | None:
        return next((s for s in reversed(self.downloads) if s.key == key), None)

    def record_thread(self, state: DownloadState) -> None:
        if state.progress is not None:
            self.download_threads.add(threading.current_thread().name)


@pytest.fixture
def paths(hermetic_home: Path, hub: HubServer) -> HearthPaths:
    paths = HearthPaths(hermetic_home).ensure()
    save_settings(paths.settings_path, Settings(hf_endpoint=hub.url))
    return paths


class Started:
    """Services opened by a test, shut down at its end (like the app quitting)."""

    def __init__(self) -> None:
        self.opened: list[AppServices] = []

    def open(self, paths: HearthPaths) -> tuple[AppServices, Heard]:
        services = AppServices.start(paths)
        self.opened.append(services)
        heard = Heard()
        library = services.library_service
        library.downloadChanged.connect(heard.downloads.append)
        # Direct: runs on the emitting thread, which is what this records.
        library.downloadChanged.connect(heard.record_thread, Qt.ConnectionType.DirectConnection)
        library.modelsChanged.connect(heard.models.append)
        library.repoAssessed.connect(heard.assessments.append)
        library.searchFinished.connect(lambda query, results: heard.searches.append((query, results)))
        library.failed.connect(lambda operation, message: heard.failures.append((operation, message)))
        library.tokenChanged.connect(heard.tokens.append)
        library.diskUsage.connect(heard.disk.append)
        return services, heard

    def close(self, services: AppServices) -> None:
        self.opened.remove(services)
        services.shutdown()


@pytest.fixture
def started() -> Iterator[Started]:
    opened = Started()
    yield opened
    for services in list(opened.opened):
        opened.close(services)


def listing_and_model(services: AppServices, heard: Heard, qtbot: QtBot) -> RepoAssessment:
    services.library_service.open_repo(REPO, vram_mib=0, ram_mib=16_000)
    qtbot.waitUntil(lambda: bool(heard.assessments), timeout=WAIT_MS)
    return heard.assessments[-1]


def test_a_download_runs_on_its_own_thread_and_a_search_meanwhile_is_not_held_up(
    qtbot: QtBot, hub: HubServer, paths: HearthPaths, started: Started
) -> None:
    starter = starter_file()
    hub.add_repo(REPO, [starter], downloads=10)
    hub.faults.rate_bps = 20_000_000
    services, heard = started.open(paths)
    library = services.library_service
    assessment = listing_and_model(services, heard, qtbot)
    key = library.download(assessment.listing, assessment.fits[0].model)
    qtbot.waitUntil(lambda: (s := heard.last(key)) is not None and s.done > 5_000_000, timeout=WAIT_MS)

    library.search("smollm2")
    qtbot.waitUntil(lambda: bool(heard.searches), timeout=WAIT_MS)
    state = heard.last(key)
    assert state is not None and state.running, "the search waited for the download"
    assert [r.repo_id for r in heard.searches[-1][1]] == [REPO]

    hub.faults.rate_bps = None
    qtbot.waitUntil(
        lambda: (s := heard.last(key)) is not None and s.state == DownloadPhase.INSTALLED, timeout=WAIT_MS
    )
    assert {name.rsplit("_", 1)[0] for name in heard.download_threads} == {"hearth-download"}
    qtbot.waitUntil(lambda: any(m.repo_id == REPO for m in heard.models[-1]) if heard.models else False)
    qtbot.waitUntil(lambda: bool(heard.disk) and heard.disk[-1].models_bytes == starter.size)


def test_a_partial_download_is_found_after_a_restart_and_resumes_where_it_stopped(
    qtbot: QtBot, hub: HubServer, paths: HearthPaths, started: Started
) -> None:
    starter = starter_file()
    hub.add_repo(REPO, [starter])
    hub.faults.rate_bps = 20_000_000
    services, heard = started.open(paths)
    assessment = listing_and_model(services, heard, qtbot)
    key = services.library_service.download(assessment.listing, assessment.fits[0].model)
    qtbot.waitUntil(lambda: (s := heard.last(key)) is not None and s.done > 5_000_000, timeout=WAIT_MS)
    # Quitting pauses the download; the partial file stays for the next start.
    started.close(services)
    part = local_path(paths.models_dir, REPO, starter.filename).with_name(starter.filename + ".part")
    kept = part.stat().st_size
    assert 5_000_000 <= kept < starter.size

    hub.faults.rate_bps = None
    services, heard = started.open(paths)
    services.library_service.refresh()
    qtbot.waitUntil(
        lambda: (s := heard.last(key)) is not None and s.state == DownloadPhase.PAUSED, timeout=WAIT_MS
    )
    state = heard.last(key)
    assert state is not None and (state.done, state.total) == (kept, starter.size)
    # The disk figures follow the download states, once the models folder has been measured.
    qtbot.waitUntil(lambda: bool(heard.disk), timeout=WAIT_MS)
    assert heard.disk[-1].partial_bytes == kept

    services.library_service.resume(key)
    qtbot.waitUntil(
        lambda: (s := heard.last(key)) is not None and s.state == DownloadPhase.INSTALLED, timeout=WAIT_MS
    )
    resumed = [r.headers.get("range") for r in hub.requests_to("/resolve/") if r.headers.get("range")]
    assert f"bytes={kept}-" in resumed
    installed = heard.last(key)
    assert installed is not None and installed.installed is not None
    assert installed.installed.sha256 == starter.sha256
    assert not part.exists()


def test_a_queued_download_can_be_paused_and_cancelled_before_it_starts(
    qtbot: QtBot, hub: HubServer, paths: HearthPaths, started: Started
) -> None:
    files = [ServedFile.from_bytes(f"model-{i}.Q4_0.gguf", bytes(4_000_000 + i)) for i in range(3)]
    hub.add_repo(REPO, files)
    hub.faults.rate_bps = 1_000_000
    services, heard = started.open(paths)
    library = services.library_service
    assessment = listing_and_model(services, heard, qtbot)
    keys = [library.download(assessment.listing, fit.model) for fit in assessment.fits]
    # Two download threads: the third waits its turn.
    qtbot.waitUntil(lambda: sum(1 for k in keys if (s := heard.last(k)) and s.done > 0) == 2, timeout=WAIT_MS)
    waiting = next(k for k in keys if (s := heard.last(k)) is not None and s.done == 0)
    library.pause(waiting)
    qtbot.waitUntil(lambda: (s := heard.last(waiting)) is not None and s.state == DownloadPhase.PAUSED)
    library.cancel(waiting)
    qtbot.waitUntil(
        lambda: (s := heard.last(waiting)) is not None and s.state == DownloadPhase.CANCELLED, timeout=WAIT_MS
    )
    for key in keys:
        library.cancel(key)
    qtbot.waitUntil(
        lambda: all((s := heard.last(k)) and s.state == DownloadPhase.CANCELLED for k in keys),
        timeout=WAIT_MS,
    )
    hub_dir = paths.models_dir / "hub"
    leftovers = [p.name for p in hub_dir.rglob("*") if p.is_file()] if hub_dir.exists() else []
    assert leftovers == []


def test_the_token_reaches_the_hub_and_without_a_keyring_lives_for_the_session_only(
    qtbot: QtBot, hub: HubServer, paths: HearthPaths, started: Started
) -> None:
    hub.add_repo(REPO, [starter_file()], private=True)
    hub.valid_tokens.add(TOKEN)
    keyring.set_keyring(fail.Keyring())  # type: ignore[no-untyped-call]
    services, heard = started.open(paths)
    library = services.library_service

    library.open_repo(REPO)
    qtbot.waitUntil(lambda: bool(heard.failures), timeout=WAIT_MS)
    assert heard.failures[-1][0] == "repo" and "token is missing or invalid" in heard.failures[-1][1]

    library.set_token(TOKEN)
    qtbot.waitUntil(lambda: bool(heard.tokens), timeout=WAIT_MS)
    status = heard.tokens[-1]
    assert status.present and not status.persisted
    assert "session only" in status.reason and "No system keyring" in status.reason
    assert TOKEN not in repr(status)

    library.open_repo(REPO, vram_mib=0, ram_mib=16_000)
    qtbot.waitUntil(lambda: bool(heard.assessments), timeout=WAIT_MS)
    assert [f.recommended for f in heard.assessments[-1].fits] == [True]
    assert hub.requests_to("/api/models/")[-1].authorization == f"Bearer {TOKEN}"

    library.set_token("not a token")
    qtbot.waitUntil(lambda: heard.failures[-1][0] == "token", timeout=WAIT_MS)
    assert "does not look like" in heard.failures[-1][1]


def split_model() -> list[ServedFile]:
    """A small model split in three; part 2 is the largest, so a pause lands in it."""
    parts = [
        gguf_bytes(
            {"general.architecture": "llama", "llama.block_count": 3, "split.no": i, "split.count": 3},
            [TensorSpec(f"blk.{i}.attn_q.weight", (256, rows), 0, data=os.urandom(1024))],
        )
        for i, rows in enumerate((128, 2048, 256))
    ]
    return [ServedFile.from_bytes(f"tiny-Q8_0-0000{i + 1}-of-00003.gguf", p) for i, p in enumerate(parts)]


def test_a_split_model_paused_in_its_second_part_resumes_after_a_restart(
    qtbot: QtBot, hub: HubServer, paths: HearthPaths, started: Started
) -> None:
    files = split_model()
    hub.add_repo(REPO, files)
    hub.faults.rate_bps = 500_000
    services, heard = started.open(paths)
    assessment = listing_and_model(services, heard, qtbot)
    [fit] = assessment.fits
    assert len(fit.model.parts) == 3
    key = services.library_service.download(assessment.listing, fit.model)
    qtbot.waitUntil(
        lambda: (s := heard.last(key)) is not None and s.done > files[0].size + 300_000, timeout=WAIT_MS
    )
    services.library_service.pause(key)
    qtbot.waitUntil(
        lambda: (s := heard.last(key)) is not None and s.state == DownloadPhase.PAUSED, timeout=WAIT_MS
    )
    started.close(services)

    hub.faults.rate_bps = None
    services, heard = started.open(paths)
    services.library_service.refresh()
    # What is left on disk is part 2's partial file: the download is known by it until it resumes.
    part_key = f"{REPO}/{files[1].filename}"
    qtbot.waitUntil(
        lambda: (s := heard.last(part_key)) is not None and s.state == DownloadPhase.PAUSED, timeout=WAIT_MS
    )
    services.library_service.resume(part_key)
    qtbot.waitUntil(
        lambda: (s := heard.last(part_key)) is not None and s.state == DownloadPhase.INSTALLED,
        timeout=WAIT_MS,
    )
    state = heard.last(part_key)
    assert state is not None and state.installed is not None
    assert state.installed.name == "tiny-Q8_0" and len(state.installed.parts) == 3
    assert services.library.verify("tiny-Q8_0")
    # Part 1 was finished before the pause and is not fetched again.
    fetched = [r.path.rsplit("/", 1)[1] for r in hub.requests_to("/resolve/") if not r.headers.get("range")]
    assert fetched.count(files[0].filename) == 1


def test_a_switch_that_cannot_load_says_why(qtbot: QtBot, paths: HearthPaths, started: Started) -> None:
    services, _ = started.open(paths)
    library = services.library_service
    with qtbot.waitSignal(library.switchFinished, timeout=WAIT_MS) as finished:
        library.switch_model("no-such-model")
    name, loaded, detail = finished.args
    assert (name, loaded) == ("no-such-model", False)
    assert detail.startswith("No installed model is named 'no-such-model'")


@pytest.mark.model
def test_removing_the_loaded_model_stops_the_runner_before_deleting_its_file(
    qtbot: QtBot, paths: HearthPaths, started: Started, starter_model: Path, tmp_path: Path
) -> None:
    services, _ = started.open(paths)
    # Different bytes from the starter model (which cannot be removed), so it is a model of its own.
    other = with_chat_template(starter_model, tmp_path / "other.gguf", "{{ messages[-1].content }}")
    installed = services.core.library.import_file(other, name="other")
    engine = services.chat.engine
    engine.prepare(installed.name)
    runner = engine.client.pid
    assert runner is not None and psutil.Process(runner).is_running()

    with (
        qtbot.waitSignal(services.chat.modelStatus, timeout=WAIT_MS) as unloaded,
        qtbot.waitSignal(services.library_service.removed, timeout=WAIT_MS),
    ):
        services.library_service.remove(installed.name)
    assert unloaded.args[0].state == "unloaded"
    assert engine.loaded is None and not psutil.pid_exists(runner)
    assert not installed.path.exists()
    assert "other" not in [m.name for m in services.core.library.list_models()]
