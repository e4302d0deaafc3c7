"""DocumentsService: collections indexed on their own thread with the real bundled embedding model, passes
that coalesce, Cancel, changes that wait for a pass to stop, and attachments read while a pass runs."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pytestqt.qtbot import QtBot

from app.core import Core
from app.documents.library import Attachment, DocumentLibrary, IndexProgress, RefreshReport
from app.qt.background import Background
from app.qt.documents_service import CollectionFiles, DocumentsService, IndexingProgress
from tests.helpers.collection_files import BROKEN, handbook, notes

pytestmark = pytest.mark.model

WAIT_MS = 120_000


@dataclass
class Heard:
    """What the service said, in order, and the threads the library ran its passes on."""

    started: list[str] = field(default_factory=list)
    steps: list[IndexingProgress] = field(default_factory=list)
    finished: list[tuple[str, RefreshReport | None]] = field(default_factory=list)
    files: list[CollectionFiles] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    pass_threads: list[threading.Thread] = field(default_factory=list)

    def reports(self, name: str) -> list[RefreshReport | None]:
        return [report for collection, report in self.finished if collection == name]


@pytest.fixture
def documents(core: Core, embedding_model: Path) -> Iterator[DocumentLibrary]:
    opened = core.documents()
    yield opened
    opened.close()


@pytest.fixture
def service(qtbot: QtBot, documents: DocumentLibrary) -> Iterator[DocumentsService]:
    made = DocumentsService(documents)
    yield made
    made.shutdown()


@pytest.fixture
def heard(service: DocumentsService, documents: DocumentLibrary, monkeypatch: pytest.MonkeyPatch) -> Heard:
    record = Heard()
    service.indexingStarted.connect(record.started.append)
    service.progressed.connect(record.steps.append)
    service.indexingFinished.connect(lambda name, report: record.finished.append((name, report)))
    service.filesListed.connect(record.files.append)
    service.failed.connect(record.failures.append)
    service.removed.connect(record.removed.append)
    real_refresh = documents.refresh

    def refresh(
        name: str,
        progress: Callable[[IndexProgress], None] | None = None,
        cancel: threading.Event | None = None,
    ) -> RefreshReport:
        # The real pass, noting where it runs.
        record.pass_threads.append(threading.current_thread())
        return real_refresh(name, progress, cancel)

    monkeypatch.setattr(documents, "refresh", refresh)
    return record


def wait_for_passes(qtbot: QtBot, heard: Heard, count: int) -> None:
    qtbot.waitUntil(lambda: len(heard.finished) >= count, timeout=WAIT_MS)


def statuses(documents: DocumentLibrary, name: str) -> dict[str, str]:
    return {Path(f.path).name: f.status for f in documents.collections.files(name)}


def test_a_collection_is_indexed_on_the_indexing_thread_with_progress_to_the_end(
    qtbot: QtBot, service: DocumentsService, heard: Heard, documents: DocumentLibrary, tmp_path: Path
) -> None:
    folder = handbook(tmp_path / "handbook")
    service.create("handbook", [folder])
    wait_for_passes(qtbot, heard, 1)

    assert heard.started == ["handbook"] and heard.failures == []
    (report,) = heard.reports("handbook")
    assert report is not None and report.indexed == 3 and not report.cancelled
    assert [path for path, _why in report.failed] == [str(folder / BROKEN)]
    # Before each of the four files, then once at the end; the passages count grows with them.
    assert [(s.done, s.total) for s in heard.steps] == [(0, 4), (1, 4), (2, 4), (3, 4), (4, 4)]
    assert heard.steps[-1].path == "" and heard.steps[-1].passages >= 3
    assert heard.steps[-1].passages == sum(documents.collections.passages("handbook").values())
    (thread,) = heard.pass_threads
    assert thread is not threading.main_thread() and thread.name.startswith("hearth-indexing")
    assert service.indexing is None
    assert [s.name for s in service.collections()] == ["handbook"]

    service.load_files("handbook")
    qtbot.waitUntil(lambda: bool(heard.files))
    listed = heard.files[-1]
    assert listed.roots == (str(folder),)
    by_name = {Path(f.path).name: f for f in listed.files}
    assert by_name["leave.docx"].status == "indexed" and (by_name["leave.docx"].passages or 0) >= 1
    broken = by_name[BROKEN]
    assert broken.status == "failed" and broken.passages is None
    assert broken.error is not None and BROKEN in broken.error and "\n" not in broken.error


def test_asking_again_while_a_pass_runs_makes_one_more_pass(
    qtbot: QtBot, service: DocumentsService, heard: Heard, documents: DocumentLibrary, tmp_path: Path
) -> None:
    folder = notes(tmp_path / "ships", 12)
    documents.collections.create("ships", [folder])
    service.refresh_in_background("ships")
    assert service.indexing is not None and service.indexing.collection == "ships"
    for _ in range(3):
        service.refresh_in_background("ships")
    # From another thread too (a folder watcher's): handled on the service's own.
    asker = threading.Thread(target=service.refresh_in_background, args=("ships",))
    asker.start()
    asker.join()
    wait_for_passes(qtbot, heard, 2)

    assert heard.started == ["ships", "ships"]
    assert service.waiting() == () and service.indexing is None
    first, second = heard.reports("ships")
    assert first is not None and first.indexed == 12
    # The second pass finds nothing new to index.
    assert second is not None and (second.indexed, second.unchanged) == (0, 12)
    assert all(t.name.startswith("hearth-indexing") for t in heard.pass_threads)


def test_cancel_stops_a_pass_midway_and_a_later_pass_finishes_it(
    qtbot: QtBot, service: DocumentsService, heard: Heard, documents: DocumentLibrary, tmp_path: Path
) -> None:
    count = 30
    folder = notes(tmp_path / "ships", count)
    documents.collections.create("ships", [folder])
    service.refresh_in_background("ships")
    qtbot.waitUntil(lambda: any(s.done >= 2 for s in heard.steps), timeout=WAIT_MS)
    service.cancel("ships")
    wait_for_passes(qtbot, heard, 1)

    (report,) = heard.reports("ships")
    assert report is not None and report.cancelled and report.failed == ()
    assert 2 <= report.indexed < count
    # What was indexed stays indexed and searchable; the rest waits, with no passages of its own.
    found = statuses(documents, "ships")
    assert sorted(found.values()).count("indexed") == report.indexed
    assert set(found.values()) == {"indexed", "pending"}
    passages = documents.collections.passages("ships")
    assert {Path(path).name for path in passages} == {n for n, s in found.items() if s == "indexed"}

    service.refresh_in_background("ships")
    wait_for_passes(qtbot, heard, 2)
    _, again = heard.reports("ships")
    assert again is not None and not again.cancelled
    assert (again.indexed, again.unchanged) == (count - report.indexed, report.indexed)
    assert set(statuses(documents, "ships").values()) == {"indexed"}


def test_removing_a_collection_while_it_is_indexed_waits_for_the_pass_to_stop(
    qtbot: QtBot, service: DocumentsService, heard: Heard, documents: DocumentLibrary, tmp_path: Path
) -> None:
    folder = notes(tmp_path / "ships", 30)
    documents.collections.create("ships", [folder])
    service.refresh_in_background("ships")
    qtbot.waitUntil(lambda: any(s.done >= 1 for s in heard.steps), timeout=WAIT_MS)
    service.remove("ships")
    qtbot.waitUntil(lambda: heard.removed == ["ships"], timeout=WAIT_MS)

    (report,) = heard.reports("ships")
    assert report is not None and report.cancelled
    assert heard.failures == []
    assert documents.collections.list() == []
    assert documents.index.counts().chunks == 0
    # The user's files stay.
    assert len(list(folder.iterdir())) == 30


def test_removing_a_path_while_it_is_indexed_goes_on_with_the_rest(
    qtbot: QtBot, service: DocumentsService, heard: Heard, documents: DocumentLibrary, tmp_path: Path
) -> None:
    ships = notes(tmp_path / "ships", 30)
    guide = handbook(tmp_path / "handbook")
    documents.collections.create("harbour", [guide, ships])
    service.refresh_in_background("harbour")
    qtbot.waitUntil(lambda: any(s.done >= 1 for s in heard.steps), timeout=WAIT_MS)
    service.remove_paths("harbour", [ships])
    wait_for_passes(qtbot, heard, 2)

    cancelled, resumed = heard.reports("harbour")
    assert cancelled is not None and cancelled.cancelled
    assert resumed is not None and not resumed.cancelled
    assert heard.failures == []
    assert documents.collections.get("harbour").roots == (str(guide),)
    assert statuses(documents, "harbour") == {
        "leave.docx": "indexed",
        "tides.pdf": "indexed",
        "lamp.md": "indexed",
        BROKEN: "failed",
    }


def test_attachments_are_read_while_a_collection_is_indexed(
    qtbot: QtBot, service: DocumentsService, heard: Heard, documents: DocumentLibrary, tmp_path: Path
) -> None:
    """The attachments' worker is not the one indexing: Send never waits for a pass."""
    folder = notes(tmp_path / "ships", 30)
    documents.collections.create("ships", [folder])
    memo = tmp_path / "memo.txt"
    memo.write_text("Bring the spare lamp wick to the harbour office.\n", encoding="utf-8")
    attachments = Background("documents")
    read: list[tuple[Attachment, bool]] = []
    try:
        service.refresh_in_background("ships")
        qtbot.waitUntil(lambda: any(s.done >= 1 for s in heard.steps), timeout=WAIT_MS)
        attachments.call(
            lambda: documents.attach(memo),
            lambda attached: read.append((attached, service.indexing is not None)),
        )
        qtbot.waitUntil(lambda: bool(read), timeout=WAIT_MS)
    finally:
        attachments.shutdown()
    ((attached, still_indexing),) = read
    assert attached.name == "memo.txt" and still_indexing
    service.cancel("ships")
    wait_for_passes(qtbot, heard, 1)


def test_errors_a_user_can_cause_come_back_as_one_line(
    qtbot: QtBot, service: DocumentsService, heard: Heard, tmp_path: Path
) -> None:
    service.create("handbook")
    qtbot.waitUntil(lambda: service.names() == ("handbook",))
    # (what is asked, what its error says)
    tries: list[tuple[Callable[[], Any], str]] = [
        (lambda: service.create("handbook"), "already exists"),
        (lambda: service.create("bad\x07name"), "control characters"),
        (lambda: service.create("   "), "needs a name"),
        (lambda: service.add_paths("handbook", [tmp_path / "gone"]), "No such file or folder"),
        (lambda: service.add_paths("nowhere", [tmp_path]), "No collection named 'nowhere'"),
        (lambda: service.remove_paths("handbook", [tmp_path / "never-added"]), "is not one of the paths"),
    ]
    for attempt, _expected in tries:
        attempt()
    qtbot.waitUntil(lambda: len(heard.failures) == len(tries), timeout=WAIT_MS)

    # Removals run on the indexing thread, the rest on the control thread: the answers may cross.
    for _attempt, expected in tries:
        assert len([failure for failure in heard.failures if expected in failure]) == 1, expected
    assert all("\n" not in failure for failure in heard.failures)
    assert heard.started == []
