"""Vision models in the library: projectors (`mmproj*.gguf`) read from real headers, paired with the models
they belong to, counted in the fit, downloaded and verified with them from a real local hub server,
imported beside them or named, refused when they belong to another model."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest

from app.errors import HearthError, InvalidModelFile
from app.library.downloads import Downloader, RetryPolicy, local_path
from app.library.hub import HubClient, RemoteFile, group_gguf_files, pick_projector
from app.library.installed import ModelLibrary
from app.library.model_ops import assess_listing, remove_installed
from inference.gguf import GGUFHeader, parse_header, read_header
from inference.projector import ProjectorResize, is_projector_filename, projector_info, projector_problem
from tests.helpers.gguf_factory import BytesSource
from tests.helpers.hubserver import HubServer, ServedFile, starter_file, starter_model_file
from tests.helpers.projectors import STARTER_WIDTH, projector_bytes, write_projector

REPO = "ggml-org/SmolLM2-Vision-GGUF"
FAST = RetryPolicy(stall_timeout_s=0.5, base_delay_s=0.01, max_delay_s=0.05, max_failures_without_progress=3)


def header_of(data: bytes) -> GGUFHeader:
    return parse_header(BytesSource(data))


def remote(name: str, size: int = 100) -> RemoteFile:
    return RemoteFile(name, size, "ab" * 32)


@pytest.mark.parametrize(
    ("projector_type", "image_size", "patch_size", "scale_factor", "tokens"),
    [
        # Gemma 3: 896 px / 14 = 64² patches, pooled 4 × 4 → the 256 tokens Gemma 3 is documented to use.
        ("gemma3", 896, 14, None, 256),
        # SmolVLM (idefics3) at 512 px / 16 with scale factor 4: 32² / 16.
        ("idefics3", 512, 16, 4, 64),
        # LLaVA 1.5's MLP projector: every one of (336 / 14)² patches.
        ("mlp", 336, 14, None, 576),
        # Qwen2.5-VL grows with the image: a 2,048 px square is 74² merged patches, capped at 4,096.
        ("qwen2.5vl_merger", 896, 14, None, 4096),
        ("some-future-type", 896, 14, None, None),
    ],
)
def test_image_tokens_follow_llama_cpp_per_projector_type(
    projector_type: str, image_size: int, patch_size: int, scale_factor: int | None, tokens: int | None
) -> None:
    data = projector_bytes(
        projector_type=projector_type, image_size=image_size, patch_size=patch_size, scale_factor=scale_factor
    )
    info = projector_info(header_of(data))
    assert info.image_tokens == tokens
    assert info.has_vision and not info.has_audio
    assert info.projection_dim == STARTER_WIDTH
    assert info.weights_bytes > 64 * 512 * 4


@pytest.mark.parametrize(
    ("projector_type", "image_size", "extra", "resize", "photo_side", "screenshot_side"),
    [
        # mtmd resizes to one 896 square: a 4,000 × 3,000 photo keeps all it will use at 1,195 × 896.
        ("gemma3", 896, {}, ProjectorResize(square=896), 1195, 800),
        ("mlp", 336, {}, ProjectorResize(square=336), 448, 598),
        # LLaVA 1.6 lists tile grids: mtmd cuts big pictures into tiles, so they are not shrunk here.
        ("mlp", 336, {"clip.vision.image_grid_pinpoints": [336, 672, 672, 336]}, None, 4000, 800),
        # Qwen2.5-VL: at most 4,096 tokens of 28 × 28 pixels (patch 14, merge 2); 12 MP → 3.2 MP.
        ("qwen2.5vl_merger", 896, {}, ProjectorResize(max_pixels=4096 * 28 * 28), 2069, 800),
        # SmolVLM tiles too.
        ("idefics3", 512, {}, None, 4000, 800),
    ],
)
def test_pictures_are_shrunk_only_as_far_as_the_projector_resizes_them(
    projector_type: str,
    image_size: int,
    extra: dict[str, object],
    resize: ProjectorResize | None,
    photo_side: int,
    screenshot_side: int,
) -> None:
    info = projector_info(
        header_of(projector_bytes(projector_type=projector_type, image_size=image_size, extra=extra))
    )
    assert info.resize == resize
    used = info.resize or ProjectorResize()
    assert used.long_side(4000, 3000) == used.long_side(3000, 4000) == photo_side
    # A picture whose short side is within the square, or under the budget, is left as it is.
    assert used.long_side(800, 450) == screenshot_side
    assert used.long_side(image_size, image_size) == image_size


def test_a_projector_for_another_model_or_no_projector_at_all_is_named_as_such() -> None:
    model = read_header(starter_model_file())
    assert projector_problem(header_of(projector_bytes()), model) is None
    wrong_width = projector_problem(header_of(projector_bytes(2048)), model)
    assert wrong_width is not None and "2048 wide" in wrong_width and "576 wide" in wrong_width
    assert "another model" in wrong_width
    not_clip = projector_problem(model, model)
    assert not_clip is not None and "not a multimodal projector" in not_clip and "llama" in not_clip
    audio_only = projector_problem(header_of(projector_bytes(vision=False)), model)
    assert audio_only is not None and "no vision encoder" in audio_only


def test_projectors_are_paired_with_models_and_never_listed_as_models() -> None:
    files = [
        remote("gemma-3-4b-it-Q4_K_M.gguf", 2000),
        remote("gemma-3-4b-it-Q8_0.gguf", 4000),
        remote("mmproj-model-F32.gguf"),
        remote("mmproj-model-BF16.gguf"),
        remote("mmproj-model-F16.gguf"),
        remote("Q6_K/gemma-3-4b-it-Q6_K.gguf", 3000),
        remote("Q6_K/mmproj-Q8_0.gguf"),
        remote("README.md"),
    ]
    models, rejected = group_gguf_files(files)
    assert rejected == ()
    assert [m.filename for m in models] == [
        "gemma-3-4b-it-Q4_K_M.gguf",
        "Q6_K/gemma-3-4b-it-Q6_K.gguf",
        "gemma-3-4b-it-Q8_0.gguf",
    ]
    # F16 before BF16 and F32 at the top; a folder's own projector first for a model in that folder.
    assert [m.projector.filename if m.projector else None for m in models] == [
        "mmproj-model-F16.gguf",
        "Q6_K/mmproj-Q8_0.gguf",
        "mmproj-model-F16.gguf",
    ]
    assert models[0].size == 2000 and [f.filename for f in models[0].files][-1] == "mmproj-model-F16.gguf"
    text_only, _ = group_gguf_files([remote("model-Q4_0.gguf")])
    assert text_only[0].projector is None
    assert pick_projector("a/model.gguf", [remote("b/mmproj-F16.gguf")]) is None
    assert is_projector_filename("llava-v1.6-mistral-7b-mmproj-f16.gguf")
    assert not is_projector_filename("mmproj-notes.txt")


def vision_repo(
    hub: HubServer, *projectors: tuple[str, bytes], extra: list[ServedFile] | None = None
) -> None:
    served = [ServedFile.from_bytes(name, data) for name, data in projectors]
    hub.add_repo(REPO, [starter_file(), *served, *(extra or [])])


def test_the_fit_pairs_by_header_and_counts_the_projector(hub: HubServer) -> None:
    # Two projectors at the top of the repo: the F16 one belongs to a 2,048-wide model, not this one.
    vision_repo(hub, ("mmproj-F16.gguf", projector_bytes(2048)), ("mmproj-F32.gguf", projector_bytes()))
    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    [model] = listing.models
    assert model.projector is not None and model.projector.filename == "mmproj-F16.gguf"  # by name
    assert {p.filename for p in listing.projectors} == {"mmproj-F16.gguf", "mmproj-F32.gguf"}

    [fit] = assess_listing(client, listing, context=2048).fits
    assert fit.model.projector is not None and fit.model.projector.filename == "mmproj-F32.gguf"
    assert fit.projector is not None and fit.projector.image_tokens == 256

    hub.add_repo("plain/SmolLM2-GGUF", [starter_file()])
    plain = client.list_files("plain/SmolLM2-GGUF")
    [text_fit] = assess_listing(client, plain, context=2048).fits
    assert text_fit.model.projector is None and text_fit.projector is None
    assert fit.estimate is not None and text_fit.estimate is not None
    assert fit.estimate.ram_bytes - text_fit.estimate.ram_bytes == fit.projector.weights_bytes


def test_no_fitting_projector_leaves_the_model_text_only(hub: HubServer) -> None:
    vision_repo(hub, ("mmproj-F16.gguf", projector_bytes(2048)))
    client = HubClient(hub.url)
    [fit] = assess_listing(client, client.list_files(REPO), context=2048).fits
    assert fit.model.projector is None and fit.projector is None


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_vision_model_downloads_with_its_projector_and_they_share_it(
    hub: HubServer, library: ModelLibrary
) -> None:
    data = projector_bytes()
    second = ServedFile.from_path("Q4_1-copy/SmolLM2-copy.Q4_1.gguf", starter_model_file())
    vision_repo(hub, ("mmproj-F16.gguf", data), extra=[second])
    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    downloader = Downloader(client, library, policy=FAST)
    seen: list[int] = []

    first = downloader.download(listing, listing.models[0], progress=lambda p: seen.append(p.total))
    assert first.projector is not None and first.vision
    assert first.projector.path == local_path(library.models_dir, REPO, "mmproj-F16.gguf")
    assert sha256(first.projector.path) == hashlib.sha256(data).hexdigest() == first.projector.sha256
    assert seen[-1] == first.total_size_bytes == first.size_bytes + len(data)
    assert library.verify(first.name)

    other = downloader.download(listing, listing.models[1])  # the folder has none: the repo's top one
    assert other.projector is not None and other.projector.path == first.projector.path
    # The projector was already there and verified: it is not fetched twice.
    assert len([r for r in hub.requests_to("/resolve/") if "mmproj" in r.path]) == 1

    remove_installed(library, first.name)
    assert first.projector.path.is_file(), "still used by the other quantization"
    first.projector.path.write_bytes(b"damaged")
    assert not library.verify(other.name)
    remove_installed(library, other.name)
    assert not first.projector.path.exists()


def test_a_download_whose_projector_belongs_to_another_model_installs_nothing(
    hub: HubServer, library: ModelLibrary
) -> None:
    vision_repo(hub, ("mmproj-F16.gguf", projector_bytes(2048)))
    client = HubClient(hub.url)
    listing = client.list_files(REPO)
    with pytest.raises(InvalidModelFile, match=r"2048 wide.*nothing was installed"):
        Downloader(client, library, policy=FAST).download(listing, listing.models[0])
    assert [m for m in library.list_models() if m.repo_id == REPO] == []
    repo_dir = library.models_dir / "hub"
    assert not any(p.is_file() for p in repo_dir.rglob("*")) if repo_dir.exists() else True


@pytest.fixture
def model_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "downloads"
    folder.mkdir()
    shutil.copy(starter_model_file(), folder / "SmolLM2.gguf")
    return folder


def test_import_finds_the_projector_beside_the_model(library: ModelLibrary, model_folder: Path) -> None:
    write_projector(model_folder / "mmproj-other-model-F16.gguf", 2048)
    write_projector(model_folder / "mmproj-F32.gguf")
    write_projector(model_folder / "mmproj-F16.gguf")
    model = library.import_file(model_folder / "SmolLM2.gguf")
    assert model.projector is not None and model.projector.filename == "mmproj-F16.gguf"
    assert model.projector.path == library.models_dir / "mmproj-SmolLM2.gguf"
    assert model.projector.sha256 == sha256(model_folder / "mmproj-F16.gguf") == sha256(model.projector.path)
    assert library.get("SmolLM2").projector == model.projector
    assert library.remove("SmolLM2", delete_file=True)
    assert not model.projector.path.exists()


def test_import_without_a_projector_is_a_text_model(library: ModelLibrary, model_folder: Path) -> None:
    model = library.import_file(model_folder / "SmolLM2.gguf")
    assert model.projector is None and not model.vision


def test_a_named_projector_that_does_not_fit_is_refused_and_nothing_copied(
    library: ModelLibrary, model_folder: Path
) -> None:
    wrong = write_projector(model_folder / "elsewhere.gguf", 4096)
    with pytest.raises(InvalidModelFile, match=r"elsewhere\.gguf cannot be used .* 4096 wide"):
        library.import_file(model_folder / "SmolLM2.gguf", mmproj=wrong)
    with pytest.raises(HearthError, match="does not exist"):
        library.import_file(model_folder / "SmolLM2.gguf", mmproj=model_folder / "missing.gguf")
    assert library.list_models() == []
    assert not library.models_dir.exists() or list(library.models_dir.iterdir()) == []


def test_a_projector_imported_as_a_model_says_what_to_do(library: ModelLibrary, model_folder: Path) -> None:
    projector = write_projector(model_folder / "mmproj-F16.gguf")
    with pytest.raises(InvalidModelFile, match=r"multimodal projector \(mmproj\), not a model.*--mmproj"):
        library.import_file(projector)


def test_a_named_projector_replaces_the_one_a_model_has_and_one_found_beside_does_not(
    library: ModelLibrary, model_folder: Path, tmp_path: Path
) -> None:
    write_projector(model_folder / "mmproj-F16.gguf")
    first = library.import_file(model_folder / "SmolLM2.gguf").projector
    assert first is not None
    write_projector(model_folder / "mmproj-F16.gguf")  # other random weights beside it now
    assert library.import_file(model_folder / "SmolLM2.gguf").projector == first
    named = write_projector(tmp_path / "better.gguf")
    second = library.import_file(model_folder / "SmolLM2.gguf", mmproj=named).projector
    assert second is not None and second.sha256 == sha256(named) != first.sha256
    assert second.path == first.path and sha256(second.path) == second.sha256
    assert sorted(p.name for p in library.models_dir.iterdir()) == ["SmolLM2.gguf", "mmproj-SmolLM2.gguf"]
    assert library.verify("SmolLM2")
