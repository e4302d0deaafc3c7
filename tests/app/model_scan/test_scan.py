"""Scanning other apps' folders: each layout found under the right app and name, matched against the
library without hashing, and broken files listed as unusable instead of failing the scan."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.library.installed import STARTER_SHA256, ModelLibrary
from app.model_scan import FoundModel, ScanResult, scan_models
from tests.app.model_scan.layouts import hf_cached, ollama_model, place, sha256_of, tiny_model
from tests.helpers.projectors import projector_bytes

COMMIT = "0123456789abcdef0123456789abcdef01234567"


def by_name(result: ScanResult) -> dict[str, FoundModel]:
    return {m.name: m for m in result.models}


def ollama_root(home: Path) -> Path:
    return home / ".ollama" / "models"


def test_ollama_models_are_named_as_ollama_names_them(
    library: ModelLibrary, user_home: Path, starter_model: Path, tmp_path: Path
) -> None:
    root = ollama_root(user_home)
    blob = ollama_model(root, "registry.ollama.ai/library/smollm2:135m", starter_model)
    ollama_model(root, "registry.ollama.ai/someone/tiny:latest", tiny_model(tmp_path / "t.gguf", "T"))
    ollama_model(root, "hf.co/bartowski/Tiny-GGUF:Q4_K_M", tiny_model(tmp_path / "h.gguf", "H"))

    found = by_name(scan_models(library))

    starter = found["smollm2:135m"]
    assert (starter.app, starter.path, starter.usable, starter.in_library) == ("ollama", blob, True, False)
    assert starter.candidate.sha256 == STARTER_SHA256
    assert starter.add_as == "smollm2-135m"
    assert starter.size_bytes == starter_model.stat().st_size
    assert starter.quantization == "Q4_1"
    assert found["someone/tiny:latest"].add_as == "someone-tiny-latest"
    assert found["hf.co/bartowski/Tiny-GGUF:Q4_K_M"].usable


def test_an_ollama_vision_model_brings_its_projector_layer(
    library: ModelLibrary, user_home: Path, starter_model: Path, tmp_path: Path
) -> None:
    projector = tmp_path / "projector"
    projector.write_bytes(projector_bytes())
    ollama_model(
        ollama_root(user_home),
        "registry.ollama.ai/library/smolvlm:latest",
        starter_model,
        projector=projector,
    )

    [found] = scan_models(library).models
    assert found.projector is not None and found.projector.name == f"sha256-{sha256_of(projector)}"


def test_ollama_manifests_that_name_no_usable_blob_are_listed_as_such(
    library: ModelLibrary, user_home: Path, tmp_path: Path
) -> None:
    root = ollama_root(user_home)
    blob = ollama_model(root, "registry.ollama.ai/library/gone:latest", tiny_model(tmp_path / "g.gguf"))
    blob.unlink()
    broken = root / "manifests" / "registry.ollama.ai" / "library" / "broken" / "latest"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")

    found = by_name(scan_models(library))
    assert not found["gone:latest"].usable and "is missing" in str(found["gone:latest"].problem)
    assert not found["broken:latest"].usable and "not valid JSON" in str(found["broken:latest"].problem)


def test_lm_studio_folders_and_the_folder_it_is_set_to_use(
    library: ModelLibrary, user_home: Path, tmp_path: Path
) -> None:
    models = user_home / ".lmstudio" / "models"
    tiny_model(models / "lmstudio-community" / "Tiny-GGUF" / "Tiny-Q4_K_M.gguf", "LM")
    (models / "lmstudio-community" / "Tiny-GGUF" / "mmproj-Tiny-F16.gguf").write_bytes(projector_bytes(64))
    chosen = tmp_path / "big-disk" / "lm-models"
    tiny_model(chosen / "someone" / "Other-GGUF" / "Other-Q8_0.gguf", "Other")
    (user_home / ".lmstudio" / "settings.json").write_text(json.dumps({"downloadsFolder": str(chosen)}))

    result = scan_models(library)
    found = by_name(result)
    assert set(found) == {"Tiny-Q4_K_M", "Other-Q8_0"}  # the projector is not a model
    assert {m.app for m in result.models} == {"lmstudio"}
    assert (
        found["Tiny-Q4_K_M"].projector == models / "lmstudio-community" / "Tiny-GGUF" / "mmproj-Tiny-F16.gguf"
    )
    searched = {(s.app, s.path): s for s in result.searched}
    assert searched[("lmstudio", chosen)].found == 1


def test_the_hugging_face_cache_gives_digests_and_provenance(
    library: ModelLibrary, user_home: Path, tmp_path: Path
) -> None:
    model = tiny_model(tmp_path / "src" / "Tiny-Q4_K_M.gguf", "HF")
    snapshot = hf_cached(
        user_home / ".cache" / "huggingface" / "hub",
        "bartowski/Tiny-GGUF",
        COMMIT,
        {"Tiny-Q4_K_M.gguf": model, "README.md": tmp_path / "src" / "Tiny-Q4_K_M.gguf"},
    )

    [found] = scan_models(library).models
    assert (found.app, found.name, found.path) == ("hf-cache", "Tiny-Q4_K_M", snapshot / "Tiny-Q4_K_M.gguf")
    assert found.path.is_symlink()
    candidate = found.candidate
    assert (candidate.repo_id, candidate.revision, candidate.filename) == (
        "bartowski/Tiny-GGUF",
        COMMIT,
        "Tiny-Q4_K_M.gguf",
    )
    assert candidate.sha256 == sha256_of(model)


def test_hf_home_and_hf_hub_cache_move_the_cache(
    library: ModelLibrary, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_model(tmp_path / "src" / "a.gguf", "A")
    hf_cached(tmp_path / "hf-home" / "hub", "org/a", COMMIT, {"a.gguf": model})
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    assert [m.name for m in scan_models(library).models] == ["a"]
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    assert scan_models(library).models == ()


def test_a_split_model_is_one_entry(library: ModelLibrary, user_home: Path, tmp_path: Path) -> None:
    files = {
        f"Q4_K_M/Big-Q4_K_M-{i:05d}-of-00003.gguf": tiny_model(
            tmp_path / "src" / f"big-{i}.gguf", "Big", split=(i - 1, 3)
        )
        for i in (1, 2, 3)
    }
    hf_cached(user_home / ".cache" / "huggingface" / "hub", "org/Big-GGUF", COMMIT, files)

    [found] = scan_models(library).models
    assert (found.name, found.parts, found.usable) == ("Big-Q4_K_M", 3, True), found.problem
    assert found.size_bytes == sum(p.stat().st_size for p in files.values())
    assert found.candidate.part_sha256s == tuple(sha256_of(p) for p in list(files.values())[1:])


def test_gpt4all_and_jan_folders(library: ModelLibrary, user_home: Path) -> None:
    tiny_model(
        user_home / ".local" / "share" / "nomic.ai" / "GPT4All" / "Llama-3.2-1B-Instruct-Q4_0.gguf", "G"
    )
    tiny_model(
        user_home / ".local" / "share" / "Jan" / "data" / "llamacpp" / "models" / "qwen3-1.7b" / "model.gguf",
        "J",
    )
    tiny_model(user_home / "jan" / "models" / "old-model" / "old-model-q4.gguf", "Old")

    found = {(m.app, m.name) for m in scan_models(library).models}
    assert found == {
        ("gpt4all", "Llama-3.2-1B-Instruct-Q4_0"),
        ("jan", "qwen3-1.7b"),
        ("jan", "old-model-q4"),
    }


def test_user_folders_are_scanned_recursively(library: ModelLibrary, tmp_path: Path) -> None:
    folder = tmp_path / "my-models"
    tiny_model(folder / "a" / "b" / "c" / "deep.gguf", "Deep")
    (folder / "notes.txt").write_text("not a model")

    [found] = scan_models(library, [folder]).models
    assert (found.app, found.name) == ("folder", "deep")


def test_broken_files_are_listed_as_unusable(library: ModelLibrary, tmp_path: Path) -> None:
    folder = tmp_path / "my-models"
    folder.mkdir()
    (folder / "garbage.gguf").write_bytes(b"this is not a GGUF file at all" * 10)
    (folder / "empty.gguf").write_bytes(b"")
    (folder / "GGUF-but-truncated.gguf").write_bytes(tiny_model(tmp_path / "t.gguf").read_bytes()[:40])

    found = by_name(scan_models(library, [folder]))
    assert set(found) == {"garbage", "empty", "GGUF-but-truncated"}
    for entry in found.values():
        assert not entry.usable and not entry.addable
        assert entry.problem is not None and "is not a usable GGUF model" in entry.problem


def test_the_same_file_seen_twice_is_listed_once(
    library: ModelLibrary, user_home: Path, tmp_path: Path
) -> None:
    """Tools link Ollama's blobs into LM Studio's folder (hard links or symlinks): one model, not two."""
    blob = ollama_model(
        ollama_root(user_home), "registry.ollama.ai/library/tiny:1b", tiny_model(tmp_path / "t.gguf")
    )
    place(blob, user_home / ".lmstudio" / "models" / "ollama" / "tiny" / "tiny-1b.gguf")
    (user_home / ".lmstudio" / "models" / "ollama" / "tiny" / "link.gguf").symlink_to(blob)

    assert [(m.app, m.name) for m in scan_models(library).models] == [("ollama", "tiny:1b")]


def test_already_in_library_by_path_or_by_the_digest_in_a_name(
    library: ModelLibrary, user_home: Path, tmp_path: Path
) -> None:
    in_place = tiny_model(tmp_path / "folder" / "registered.gguf", "R")
    library.register_in_place(in_place, name="Registered", source="test", expected_sha256=None)
    copied = library.import_file(tiny_model(tmp_path / "src" / "copied.gguf", "C"))
    ollama_model(
        ollama_root(user_home), "registry.ollama.ai/library/copied:latest", tmp_path / "src" / "copied.gguf"
    )

    found = by_name(scan_models(library, [tmp_path / "folder"]))
    assert (found["registered"].in_library, found["registered"].library_name) == (True, "Registered")
    assert (found["copied:latest"].in_library, found["copied:latest"].library_name) == (True, copied.name)
    # The copy in Hearth's own models folder is not "found".
    assert all(not m.path.is_relative_to(library.models_dir) for m in found.values())


def test_a_name_the_library_has_gets_the_app_added(
    library: ModelLibrary, user_home: Path, tmp_path: Path
) -> None:
    library.import_file(tiny_model(tmp_path / "src" / "tiny-1b.gguf", "Mine"))
    ollama_model(
        ollama_root(user_home), "registry.ollama.ai/library/tiny:1b", tiny_model(tmp_path / "o.gguf", "O")
    )

    [found] = scan_models(library).models
    assert found.add_as == "tiny-1b (ollama)"


def test_a_symlink_loop_does_not_hang(library: ModelLibrary, tmp_path: Path) -> None:
    folder = tmp_path / "loopy"
    tiny_model(folder / "inner" / "model-a.gguf", "A")
    (folder / "inner" / "back").symlink_to(folder, target_is_directory=True)
    (folder / "self").symlink_to(".", target_is_directory=True)
    (folder / "dangling.gguf").symlink_to(tmp_path / "nowhere.gguf")

    result = scan_models(library, [folder])
    assert [m.name for m in result.models] == ["model-a"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root reads every folder")
def test_an_unreadable_folder_is_noted_and_skipped(library: ModelLibrary, tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    tiny_model(folder / "ok" / "fine.gguf", "F")
    locked = folder / "locked"
    tiny_model(locked / "secret.gguf", "S")
    locked.chmod(0)
    try:
        result = scan_models(library, [folder])
    finally:
        locked.chmod(0o700)
    assert [m.name for m in result.models] == ["fine"]
    [searched] = [s for s in result.searched if s.app == "folder"]
    assert any("cannot read" in note for note in searched.notes)


def test_no_app_folders_no_models(library: ModelLibrary) -> None:
    result = scan_models(library)
    assert result.models == ()
    assert {s.app for s in result.searched} >= {"ollama", "lmstudio", "hf-cache", "gpt4all", "jan"}
    assert not any(s.exists for s in result.searched)
