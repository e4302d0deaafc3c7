"""Adding found models in place: no copy, never changed or deleted by Hearth, hashed once and checked
against the digest the app names a blob by; a file that goes away later shows as missing."""

from __future__ import annotations

from pathlib import Path

from app.library.installed import STARTER_SHA256, ModelLibrary
from app.library.model_ops import remove_installed
from app.model_scan import add_found, scan_models
from tests.app.model_scan.layouts import hf_cached, ollama_model, sha256_of, tiny_model
from tests.helpers.projectors import projector_bytes

COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


def models_dir_files(library: ModelLibrary) -> list[Path]:
    folder = library.models_dir
    return sorted(p for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_an_ollama_model_is_added_where_it_lies(
    library: ModelLibrary, user_home: Path, starter_model: Path
) -> None:
    blob = ollama_model(
        user_home / ".ollama" / "models", "registry.ollama.ai/library/smollm2:135m", starter_model
    )
    before = blob.stat()
    progress: list[tuple[str, int, int]] = []

    [added] = add_found(
        library, scan_models(library).addable, lambda f, d, t: progress.append((f.name, d, t))
    )

    assert added.added and added.error is None and added.model is not None
    model = library.get("smollm2-135m")
    assert (model.path, model.sha256, model.source) == (blob.resolve(), STARTER_SHA256, "scan:ollama")
    after = blob.stat()
    # The same file, untouched: no copy, no new link, no write.
    assert (after.st_ino, after.st_nlink, after.st_mtime_ns) == (
        before.st_ino,
        before.st_nlink,
        before.st_mtime_ns,
    )
    assert models_dir_files(library) == []
    assert progress[-1] == ("smollm2:135m", blob.stat().st_size, blob.stat().st_size)
    # Found again, it is in the library now, and adding again adds nothing.
    [again] = scan_models(library).models
    assert (again.in_library, again.library_name, again.addable) == (True, "smollm2-135m", False)
    assert add_found(library, scan_models(library).addable) == []


def test_an_ollama_blob_that_does_not_match_its_digest_is_refused(
    library: ModelLibrary, user_home: Path, tmp_path: Path
) -> None:
    claimed = "ab" * 32
    ollama_model(
        user_home / ".ollama" / "models",
        "registry.ollama.ai/library/tiny:1b",
        tiny_model(tmp_path / "t.gguf"),
        digest=claimed,
    )

    [found] = scan_models(library).models
    assert found.usable  # its header is fine: only hashing tells
    [added] = add_found(library, [found])

    assert not added.added and added.model is None
    assert added.error is not None
    assert f"Ollama's blob sha256-{claimed} does not hold what its name promises" in added.error
    assert "ollama pull tiny:1b" in added.error
    assert library.list_models() == []


def test_an_ollama_vision_model_is_added_with_its_projector(
    library: ModelLibrary, user_home: Path, starter_model: Path, tmp_path: Path
) -> None:
    projector = tmp_path / "projector"
    projector.write_bytes(projector_bytes())
    ollama_model(
        user_home / ".ollama" / "models",
        "registry.ollama.ai/library/smolvlm:latest",
        starter_model,
        projector=projector,
    )

    [added] = add_found(library, scan_models(library).addable)

    assert added.model is not None and added.model.projector is not None
    assert added.model.projector.sha256 == sha256_of(projector)
    assert added.model.projector.path.parent == user_home / ".ollama" / "models" / "blobs"
    assert models_dir_files(library) == []


def test_a_hugging_face_cache_file_keeps_its_provenance(
    library: ModelLibrary, user_home: Path, tmp_path: Path
) -> None:
    model = tiny_model(tmp_path / "src" / "Tiny-Q4_K_M.gguf", "HF")
    hf_cached(
        user_home / ".cache" / "huggingface" / "hub",
        "bartowski/Tiny-GGUF",
        COMMIT,
        {"Tiny-Q4_K_M.gguf": model},
    )

    [added] = add_found(library, scan_models(library).addable)

    installed = library.get("Tiny-Q4_K_M")
    assert added.model == installed
    assert (installed.repo_id, installed.revision, installed.filename) == (
        "bartowski/Tiny-GGUF",
        COMMIT,
        "Tiny-Q4_K_M.gguf",
    )
    assert installed.source == "scan:hf-cache" and installed.sha256 == sha256_of(model)
    assert library.find_hub_file("bartowski/Tiny-GGUF", "Tiny-Q4_K_M.gguf") == installed


def test_a_split_model_in_the_cache_is_added_as_its_parts(
    library: ModelLibrary, user_home: Path, tmp_path: Path
) -> None:
    names = [f"Big-Q4_K_M-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    sources = [tiny_model(tmp_path / "src" / f"{i}.gguf", "Big", split=(i, 3)) for i in range(3)]
    snapshot = hf_cached(
        user_home / ".cache" / "huggingface" / "hub",
        "org/Big-GGUF",
        COMMIT,
        dict(zip(names, sources, strict=True)),
    )

    [added] = add_found(library, scan_models(library).addable)

    assert added.model is not None, added.error
    model = added.model
    # llama.cpp opens parts 2..N by part 1's name: the snapshot's names, not the blobs'.
    assert model.path == snapshot.resolve() / names[0]
    assert [p.path.name for p in model.parts] == names
    assert [p.sha256 for p in model.parts] == [sha256_of(p) for p in sources]
    assert models_dir_files(library) == []
    assert library.verify(model.name)


def test_a_file_that_goes_away_shows_as_missing(library: ModelLibrary, tmp_path: Path) -> None:
    folder = tmp_path / "my-models"
    path = tiny_model(folder / "gone.gguf", "Gone")
    [added] = add_found(library, scan_models(library, [folder]).addable)
    assert added.model is not None and added.model.missing_files() == ()

    path.unlink()

    [model] = library.list_models()
    assert model.missing_files() == (path.resolve(),)
    assert not library.verify(model.name)
    assert scan_models(library, [folder]).models == ()


def test_removing_a_model_added_in_place_only_forgets_it(
    library: ModelLibrary, user_home: Path, tmp_path: Path
) -> None:
    blob = ollama_model(
        user_home / ".ollama" / "models",
        "registry.ollama.ai/library/tiny:1b",
        tiny_model(tmp_path / "t.gguf"),
    )
    folder_file = tiny_model(tmp_path / "my-models" / "mine.gguf", "Mine")
    add_found(library, scan_models(library, [tmp_path / "my-models"]).addable)
    assert {m.name for m in library.list_models()} == {"tiny-1b", "mine"}

    model, deleted = remove_installed(library, "tiny-1b")
    assert not deleted and blob.is_file() and model.path == blob.resolve()
    assert not library.remove("mine", delete_file=True)
    assert folder_file.is_file()
    assert library.list_models() == []
    # Forgotten, not gone: the next scan offers them again.
    assert all(m.addable for m in scan_models(library, [tmp_path / "my-models"]).models)


def test_content_already_in_the_library_is_not_added_twice(library: ModelLibrary, tmp_path: Path) -> None:
    source = tiny_model(tmp_path / "src" / "dup.gguf", "Dup")
    copy = library.import_file(source)
    (tmp_path / "my-models").mkdir()
    (tmp_path / "my-models" / "dup-again.gguf").write_bytes(source.read_bytes())

    [found] = scan_models(library, [tmp_path / "my-models"]).models
    assert found.addable  # a plain folder names no digest: only hashing tells
    [added] = add_found(library, [found])

    assert (added.added, added.model) == (False, copy)
    assert [m.name for m in library.list_models()] == [copy.name]


def test_unusable_files_are_not_added(library: ModelLibrary, tmp_path: Path) -> None:
    (tmp_path / "my-models").mkdir()
    (tmp_path / "my-models" / "junk.gguf").write_bytes(b"junk" * 100)

    [found] = scan_models(library, [tmp_path / "my-models"]).models
    [added] = add_found(library, [found])
    assert added.error == found.problem and added.model is None
    assert library.list_models() == []
