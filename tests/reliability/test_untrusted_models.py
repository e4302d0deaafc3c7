"""Model files are untrusted input. Crafted GGUF headers are refused quickly and cheaply wherever a file
comes from (an import, a header read from the Hub, a download the Hub vouches for), and a file that passes the
header check but aborts llama.cpp takes down only the runner, and is not loaded on its own at the next start.

"Quickly" is measured as work, not time: the bytes read from a file of a gigabyte and more, and the bytes
fetched from the server. Memory is tracemalloc's peak while the header is checked.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import re
import struct
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytestqt.qtbot import QtBot

from app.chat.engine import ChatEngine
from app.cli.main import main
from app.core import Core
from app.errors import HearthError, InvalidModelFile
from app.library.downloads import Downloader, RetryPolicy
from app.library.hub import HubClient
from app.library.installed import InstalledModel, ModelLibrary
from app.paths import HearthPaths, resolve_home
from app.settings import save_settings
from app.storage.db import Database
from inference.gguf import ByteSource, FileByteSource, GGUFError, parse_header
from inference.protocol import SamplingParams
from tests.helpers.gguf_factory import (
    GGUFValueType,
    TensorSpec,
    Typed,
    gguf_bytes,
    header_bytes,
    kv_bytes,
    raw_kv,
    tensor_info_bytes,
)
from tests.helpers.hubserver import HubServer, ServedFile
from tests.helpers.model_files import with_duplicate_token
from tests.helpers.ui_fixtures import GuiSessions
from tests.reliability.conftest import RecordFault, characters_missing

CATEGORY = "Untrusted models"

F32 = 0
GIB = 1 << 30
MIB = 1 << 20
# What checking one hostile header may cost, whatever the file claims: the reader works in 1 MiB blocks.
MAX_READ_BYTES = 2 * MIB
MAX_PEAK_BYTES = 8 * MIB

VALID = gguf_bytes(
    {"general.architecture": "llama", "llama.block_count": 1, "general.name": "crafted"},
    [TensorSpec("token_embd.weight", (64, 4), F32)],
)


def _tensor(shape: tuple[int, ...], *, offset: int = 0, alignment: int | None = None) -> bytes:
    """A header whose one tensor has this shape and offset; its data lies in the tail the file gets."""
    kvs = [] if alignment is None else [kv_bytes("general.alignment", Typed(GGUFValueType.UINT32, alignment))]
    head = header_bytes(1, len(kvs)) + b"".join(kvs) + tensor_info_bytes("t", shape, F32, offset)
    return head + b"\0" * (-len(head) % 32)


@dataclass(frozen=True)
class Crafted:
    what: str  # the fault, as the report names it
    header: bytes  # the file's first bytes
    refusal: str  # part of the message the user gets
    sparse_tail: bool = True  # followed by a hole that makes the file over a gigabyte
    remote_refusal: str | None = None  # when the smaller file served by the hub is refused differently


CRAFTED = [
    Crafted("wrong magic", b"GGML" + VALID[4:], "not a GGUF file (bad magic)"),
    Crafted("GGUF version 1", header_bytes(0, 0, version=1), "version 1 is no longer supported"),
    Crafted("GGUF version 4", header_bytes(0, 0, version=4), "unsupported GGUF version 4"),
    Crafted("2^60 tensors claimed", header_bytes(2**60, 0), "claims 2^60 tensors"),
    Crafted("2^60 metadata keys claimed", header_bytes(0, 2**60), "claims 2^60 metadata entries"),
    Crafted(
        "2^18 tensors that would fit in the file",
        header_bytes(2**18, 0),
        "claims 2^18 tensors; at most 131072 are accepted",
    ),
    Crafted(
        "4 GiB string length past the end of the file",
        header_bytes(0, 1) + raw_kv("general.name", GGUFValueType.STRING, struct.pack("<Q", 4 * GIB)),
        "has length 2^32 but only",
    ),
    Crafted(
        "256 MiB string inside the file",
        header_bytes(0, 1) + raw_kv("general.name", GGUFValueType.STRING, struct.pack("<Q", 256 * MIB)),
        "more than the 64 MiB limit",
        remote_refusal="string has length 2^28 but only",
    ),
    Crafted(
        "2^62-element array in a tiny file",
        header_bytes(0, 1) + raw_kv("a", GGUFValueType.ARRAY, struct.pack("<IQ", GGUFValueType.UINT8, 2**62)),
        "array claims 2^62 elements",
        sparse_tail=False,
    ),
    Crafted(
        "2^40-string array past the end of the file",
        header_bytes(0, 1)
        + raw_kv("t", GGUFValueType.ARRAY, struct.pack("<IQ", GGUFValueType.STRING, 2**40)),
        "array claims 2^40 elements",
    ),
    Crafted(
        "arrays nested 200 deep",
        header_bytes(0, 1)
        + raw_kv("n", GGUFValueType.ARRAY, struct.pack("<IQ", GGUFValueType.ARRAY, 1) * 200),
        "nested more than 4 deep",
    ),
    Crafted("tensor dimensions whose product overflows", _tensor((2**40, 2**40)), "more than 2^63 elements"),
    Crafted("tensor with 5 dimensions", _tensor((1, 1, 1, 1, 1)), "has 5 dimensions"),
    Crafted("tensor data offset past the end of the file", _tensor((4,), offset=2**50), "ends at byte"),
    Crafted("tensor data offset not aligned", _tensor((4,), offset=8), "not a multiple of the alignment 32"),
    Crafted("alignment not a power of two", _tensor((4,), alignment=48), "48 is not a power of two"),
    Crafted("alignment of 1 GiB", _tensor((4,), alignment=GIB), "larger than the 1 MiB limit"),
    Crafted("truncated in the tensor table", VALID[: len(VALID) // 2], "truncated", sparse_tail=False),
]
IDS = [c.what.replace(" ", "-") for c in CRAFTED]


def write_crafted(directory: Path, crafted: Crafted, *, tail: int = GIB + 4096) -> Path:
    path = directory / f"{IDS[CRAFTED.index(crafted)]}.gguf"
    with path.open("wb") as file:
        file.write(crafted.header)
        if crafted.sparse_tail:
            file.truncate(len(crafted.header) + tail)
    return path


class CountingSource:
    """A ByteSource that counts what the parser asked for."""

    def __init__(self, inner: ByteSource) -> None:
        self._inner = inner
        self.reads: list[int] = []

    @property
    def size(self) -> int:
        return self._inner.size

    def read(self, offset: int, n: int) -> bytes:
        data = self._inner.read(offset, n)
        self.reads.append(len(data))
        return data


def bytes_read_by_this_process() -> int:
    """Every byte this process read through a system call (Linux): the import, not just the parser."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def peak_while(action: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        action()
    except (HearthError, GGUFError):
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


@pytest.fixture
def library(tmp_path: Path) -> Iterator[ModelLibrary]:
    db = Database.open(tmp_path / "lib" / "hearth.sqlite3", tmp_path / "lib" / "backups")
    yield ModelLibrary(db, tmp_path / "lib" / "models")
    db.dispose()


@pytest.fixture
def installed(library: ModelLibrary, tmp_path: Path) -> InstalledModel:
    """A good model the user already has, which no refused file may take with it."""
    source = tmp_path / "good.gguf"
    source.write_bytes(VALID)
    model = library.import_file(source, name="good")
    source.unlink()
    return model


def models_lost(library: ModelLibrary, *models: InstalledModel) -> int:
    """Of these installed models, how many are gone or no longer match their SHA-256."""
    present = {m.name: m.sha256 for m in library.list_models()}
    return sum(present.get(m.name) != m.sha256 or not library.verify(m.name) for m in models)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts reads in /proc/self/io")
def test_crafted_headers_are_refused_on_import_reading_and_keeping_little(
    tmp_path: Path, library: ModelLibrary, installed: InstalledModel, fault: RecordFault
) -> None:
    kept = sorted(library.models_dir.iterdir())
    for crafted in CRAFTED:
        path = write_crafted(tmp_path, crafted)

        # The parser's own work: a few blocks of the file, never what the header claims.
        with FileByteSource(path) as file:
            source = CountingSource(file)
            with pytest.raises(GGUFError, match=re.escape(crafted.refusal)):
                parse_header(source)
        assert sum(source.reads) <= MAX_READ_BYTES, crafted.what

        # The import as the user runs it: refused with one clear line, nothing copied or registered.
        before = bytes_read_by_this_process()
        with pytest.raises(InvalidModelFile) as refused:
            library.import_file(path)
        assert bytes_read_by_this_process() - before <= MAX_READ_BYTES, crafted.what
        message = str(refused.value)
        assert message.startswith(f"{path.name} is not a usable GGUF model: ") and "\n" not in message
        assert crafted.refusal in message
        assert peak_while(functools.partial(library.import_file, path)) <= MAX_PEAK_BYTES, crafted.what
        lost = models_lost(library, installed)
        fault(
            CATEGORY,
            f"crafted GGUF header, local import: {crafted.what}",
            trials=1,
            outcome="refused with one clear message; ≤ 2 MiB read, ≤ 8 MiB memory; nothing installed",
            lost={"models": lost},
        )
        assert lost == 0, crafted.what
        assert [m.name for m in library.list_models()] == [installed.name]
        assert sorted(library.models_dir.iterdir()) == kept
        path.unlink()


def test_crafted_header_through_the_command_line_is_one_line_and_exit_3(
    tmp_path: Path, hermetic_home: Path
) -> None:
    path = write_crafted(tmp_path, CRAFTED[3])
    out, err = io.StringIO(), io.StringIO()
    assert main(["models", "import", str(path)], out=out, err=err) == 3
    assert err.getvalue().count("\n") == 1 and "claims 2^60 tensors" in err.getvalue()
    assert not (hermetic_home / "models").exists() or not any(
        p.suffix == ".gguf" for p in (hermetic_home / "models").iterdir()
    )


REMOTE_REPO = "mallory/crafted-GGUF"


def _served_bytes(hub: HubServer) -> dict[str, int]:
    """Bytes each file's GET requests asked for, by file name (the server sends no more than asked)."""
    served: dict[str, int] = {}
    for request in hub.requests_to("/resolve/"):
        start, _, end = (request.headers.get("range") or "").removeprefix("bytes=").partition("-")
        assert start and end, f"an unbounded request for a header: {request.headers.get('range')}"
        name = request.path.rsplit("/", 1)[-1]
        served[name] = served.get(name, 0) + int(end) - int(start) + 1
    return served


def test_crafted_remote_headers_are_refused_fetching_and_keeping_little(
    hub: HubServer, tmp_path: Path, library: ModelLibrary, installed: InstalledModel, fault: RecordFault
) -> None:
    files = [write_crafted(tmp_path, c, tail=32 * MIB) for c in CRAFTED]
    hub.add_repo(REMOTE_REPO, [ServedFile.from_path(f"crafted/{p.name}", p) for p in files])
    client = HubClient(hub.url)
    listing = client.list_files(REMOTE_REPO)
    models = {m.filename.removeprefix("crafted/"): m for m in listing.models}
    assert len(models) == len(CRAFTED)

    for crafted, path in zip(CRAFTED, files, strict=True):
        model = models[path.name]
        refusal = crafted.remote_refusal or crafted.refusal
        with pytest.raises(InvalidModelFile, match=re.escape(refusal)) as refused:
            client.read_header(listing, model)
        peak = peak_while(functools.partial(client.read_header, listing, model))
        lost = models_lost(library, installed)
        fault(
            CATEGORY,
            f"crafted GGUF header, read from the Hub: {crafted.what}",
            trials=1,
            outcome="refused with one clear message; ≤ 2 MiB fetched, ≤ 8 MiB memory",
            lost={"models": lost},
        )
        assert lost == 0, crafted.what
        assert str(refused.value).startswith(f"{REMOTE_REPO}/crafted/{path.name} is not a usable GGUF model")
        assert peak <= MAX_PEAK_BYTES, crafted.what
    served = _served_bytes(hub)
    for crafted, path in zip(CRAFTED, files, strict=True):
        # Each header was read twice above (once for the message, once for the memory peak).
        assert served[path.name] <= 2 * MAX_READ_BYTES, crafted.what


def test_a_hostile_file_the_hub_vouches_for_is_downloaded_but_never_installed(
    hub: HubServer, tmp_path: Path, library: ModelLibrary, installed: InstalledModel, fault: RecordFault
) -> None:
    chosen = [c for c in CRAFTED if not c.sparse_tail] + [CRAFTED[3], CRAFTED[11]]
    files = [write_crafted(tmp_path, c, tail=MIB) for c in chosen]
    hub.add_repo(REMOTE_REPO, [ServedFile.from_path(p.name, p) for p in files])
    client = HubClient(hub.url)
    listing = client.list_files(REMOTE_REPO)
    downloader = Downloader(client, library, policy=RetryPolicy(base_delay_s=0.01))
    for model, crafted in zip(
        sorted(listing.models, key=lambda m: m.filename),
        sorted(chosen, key=lambda c: IDS[CRAFTED.index(c)]),
        strict=True,
    ):
        with pytest.raises(InvalidModelFile, match=re.escape(crafted.refusal)):
            downloader.download(listing, model)
    lost = models_lost(library, installed)
    fault(
        CATEGORY,
        "crafted GGUF file with the Hub's own SHA-256 (verified download, hostile header)",
        trials=len(chosen),
        outcome="refused after the download; the file is deleted and nothing is installed",
        lost={"models": lost},
    )
    assert lost == 0
    assert [m.name for m in library.list_models()] == [installed.name]
    hub_dir = library.models_dir / "hub"
    assert [p for p in hub_dir.rglob("*") if p.is_file()] == []


# --- a file that passes the header check but aborts llama.cpp ------------------------------------------

CRASHER = "duplicate-vocabulary"


@pytest.mark.model
def test_a_model_that_aborts_llama_cpp_kills_only_the_runner_and_is_not_autoloaded(
    starter_model: Path, tmp_path: Path, qtbot: QtBot, gui: GuiSessions, fault: RecordFault
) -> None:
    crasher_file = with_duplicate_token(starter_model, tmp_path / "crasher.gguf")
    paths = resolve_home()
    core = Core.open(paths)
    # It passes every check Hearth can make before llama.cpp sees it.
    crasher = core.library.import_file(crasher_file, name=CRASHER)
    starter = next(m.name for m in core.library.list_models() if m.name != CRASHER)
    save_settings(paths.settings_path, dataclasses.replace(core.settings, default_model=CRASHER))
    engine = ChatEngine(core.store, core.library, core.settings_store, runner_log=paths.runner_log_file)
    try:
        with pytest.raises(HearthError) as failed:
            engine.ensure_loaded(CRASHER)
        message = str(failed.value)
        assert message.startswith(f"Could not load '{CRASHER}': the model runner crashed (SIGABRT)")
        assert "GGML_ASSERT" in message, "llama.cpp's own last words reach the user"
        assert not engine.client.alive
        assert core.library.get(CRASHER).last_load_error == message.split(": ", 1)[1]

        # This process, its database and the other models are unharmed: the next turn starts a new runner.
        reply = engine.run_turn("Say hi.", starter, sampling=SamplingParams(temperature=0.0, max_tokens=8))
        cut = characters_missing(reply.text, core.store.get_message(reply.assistant_message_id).content)
        assert reply.status == "complete", reply.error
        assert cut == 0
    finally:
        engine.close()
        core.close()

    # A real restart on the same home: the crasher is named, not loaded; both models are still installed.
    core = Core.open(paths)
    engine = ChatEngine(core.store, core.library, core.settings_store, runner_log=paths.runner_log_file)
    try:
        lost = models_lost(core.library, crasher, core.library.get(starter))
        assert lost == 0
        assert core.library.get(CRASHER).sha256 == crasher.sha256
        name, why = engine.model_to_autoload()
        assert name is None
        assert why.startswith(f"{CRASHER} was not loaded automatically: it crashed last time (")
    finally:
        engine.close()
        core.close()

    # And the window: it starts without a runner and says why.
    session = gui.open(HearthPaths(paths.home))
    window = session.window
    assert window.modelPicker.currentData() == CRASHER
    qtbot.waitUntil(lambda: "crashed last time" in window.statusBar().currentMessage(), timeout=20_000)
    assert f"{CRASHER} was not loaded automatically" in window.statusBar().currentMessage()
    assert session.services.chat.engine.client.pid is None
    fault(
        CATEGORY,
        "GGUF that passes the header check but aborts llama.cpp (duplicate vocabulary entry: GGML_ASSERT)",
        trials=1,
        outcome="only the runner died; load error recorded; not loaded at the next start, which says why",
        lost={"models": lost, "characters": cut},
    )
