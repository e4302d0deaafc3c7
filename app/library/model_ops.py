"""What the CLI and the GUI both do with Hub listings and installed models, in one place. No Qt.

`assess_listing` reads every GGUF header of a repo listing (range requests), pairs each model with the
projector that fits it, estimates how each file fits the machine (or a what-if one) and picks the
recommended file; `remove_installed` deletes a model and the repo folders its download created;
`disk_usage` says what the models folder holds.
"""

from __future__ import annotations

import logging
import shutil
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.errors import HearthError
from app.library.installed import STARTER_SOURCE, InstalledModel, ModelLibrary
from app.library.load_settings import DraftFile, ModelLoadSettings, plan_model_load
from app.settings import Settings
from inference.estimator import (
    Fit,
    FitEstimate,
    Recommendation,
    estimate_fit,
    profile_model,
    recommend,
    with_projector,
)
from inference.gguf import GGUFError, GGUFHeader, read_header
from inference.hardware import HardwareReport, llama_backend, probe_hardware
from inference.projector import ProjectorInfo, projector_info, projector_problem
from inference.protocol import LoadPlan

if TYPE_CHECKING:
    # Types only: importing app.library.hub pulls in huggingface_hub, which `hearth models remove` does not
    # need.
    from app.library.hub import HubClient, RemoteModel, RepoListing

log = logging.getLogger("hearth.library")


@dataclass(frozen=True)
class FileFit:
    model: RemoteModel  # paired with the projector that fits it, when the repo has one
    header: GGUFHeader | None
    error: str | None  # why the header could not be read
    estimate: FitEstimate | None  # with the projector's weights counted
    recommended: bool
    projector: ProjectorInfo | None = None

    @property
    def quantization(self) -> str | None:
        """The header's file type when it could be read; the file name's guess otherwise."""
        return (self.header.quantization if self.header else None) or self.model.quantization

    @property
    def expected_context(self) -> int | None:
        """The context a load would get: the one asked for, capped by the training length and by memory;
        None when the file does not fit at all or could not be read."""
        if self.estimate is None or self.estimate.verdict is Fit.TOO_LARGE:
            return None
        return min(self.estimate.context, self.estimate.max_context)


@dataclass(frozen=True)
class RepoAssessment:
    listing: RepoListing
    fits: tuple[FileFit, ...]
    recommendation: Recommendation | None  # None when no header could be read
    context: int  # the context length the estimates are for
    hardware: HardwareReport  # what was planned for (the what-if overrides applied)
    # The Hub refused the file bytes (401: token; 403: licence not accepted): one message for the repo.
    access_error: str | None


@dataclass(frozen=True)
class DiskUsage:
    models_bytes: int  # installed model files inside the models folder
    partial_bytes: int  # paused or interrupted downloads waiting to be resumed
    free_bytes: int  # free space on the disk holding the models folder


def assess_listing(
    hub: HubClient,
    listing: RepoListing,
    *,
    context: int,
    vram_mib: int | None = None,
    ram_mib: int | None = None,
) -> RepoAssessment:
    """Every model's remote header and fit at `context`, and the recommendation. Blocking (network).

    `vram_mib` / `ram_mib` plan for another machine instead of this one (see probe_hardware).
    """
    from app.library.hub import HubAuthError, HubGatedError

    hardware = probe_hardware(vram_override_mib=vram_mib, ram_override_mib=ram_mib)
    # A what-if GPU plans for another machine, whose llama.cpp build would have GPU support.
    gpu_offload = vram_mib is not None or llama_backend()[0] == "CUDA"
    headers = hub.read_headers(listing, listing.models)
    projector_headers = _projector_headers(hub, listing)
    paired = [
        _pair_projector(listing, model, header, projector_headers)
        if isinstance(header, GGUFHeader)
        else (model, None)
        for model, header in zip(listing.models, headers, strict=True)
    ]
    projector_bytes = [info.weights_bytes if info is not None else 0 for _, info in paired]
    readable = [(i, h) for i, h in enumerate(headers) if isinstance(h, GGUFHeader)]
    recommendation = (
        recommend(
            [h for _, h in readable],
            hardware,
            context=context,
            gpu_offload=gpu_offload,
            projector_bytes=[projector_bytes[i] for i, _ in readable],
        )
        if readable
        else None
    )
    chosen = (
        readable[recommendation.index][0]
        if recommendation is not None and recommendation.index is not None
        else None
    )
    fits = tuple(
        FileFit(
            model,
            h,
            None,
            estimate_fit(
                with_projector(profile_model(h), projector_bytes[i]),
                hardware,
                context=context,
                gpu_offload=gpu_offload,
            ).best_placement,
            i == chosen,
            projector,
        )
        if isinstance(h, GGUFHeader)
        else FileFit(model, None, str(h), None, False)
        for i, ((model, projector), h) in enumerate(zip(paired, headers, strict=True))
    )
    refused = next((h for h in headers if isinstance(h, HubAuthError | HubGatedError)), None)
    return RepoAssessment(
        listing, fits, recommendation, context, hardware, str(refused) if refused is not None else None
    )


def _projector_headers(hub: HubClient, listing: RepoListing) -> dict[str, GGUFHeader]:
    """Every projector in the repo that reads as one, by file name (a few KiB each, by range request)."""
    from app.library.hub import HubError

    found: dict[str, GGUFHeader] = {}
    for file in listing.projectors:
        try:
            found[file.filename] = hub.read_projector_header(listing, file)
        except HubError as exc:
            log.info("%s/%s: %s", listing.repo_id, file.filename, exc)
        except HearthError as exc:
            log.info("%s/%s is not a usable projector: %s", listing.repo_id, file.filename, exc)
    return found


def _pair_projector(
    listing: RepoListing, model: RemoteModel, header: GGUFHeader, projectors: dict[str, GGUFHeader]
) -> tuple[RemoteModel, ProjectorInfo | None]:
    """The model with the projector that fits its header (a repo may hold projectors for several model
    sizes) and what that projector is. A projector whose header could not be read stays paired by name
    (the download checks it); the model is text-only when none fits."""
    from app.library.hub import pick_projector

    fitting = [
        p
        for p in listing.projectors
        if p.filename in projectors and projector_problem(projectors[p.filename], header) is None
    ]
    chosen = pick_projector(model.filename, fitting)
    if chosen is not None:
        return replace(model, projector=chosen), projector_info(projectors[chosen.filename])
    if model.projector is not None and model.projector.filename not in projectors:
        return model, None
    return replace(model, projector=None), None


def installed_load_plan(
    model: InstalledModel,
    load_settings: ModelLoadSettings,
    settings: Settings,
    hardware: HardwareReport,
    *,
    library: ModelLibrary | None = None,
    context_length: int | None = None,
    header: GGUFHeader | None = None,
) -> LoadPlan:
    """The plan a load of `model` with `load_settings` would use now: its memory prediction and fit are
    what `hearth models show` and the load settings dialog report, and what app.chat.engine loads with
    (`context_length`: a conversation's own, which wins over the model's). `library` finds the draft model
    the settings name. Blocking (reads the headers); raises HearthError for a missing or unreadable file."""
    if header is None:
        header = _installed_header(model)
    if context_length is None:
        default = settings.model_defaults.get(model.name, {}).get("context_length", settings.context_length)
        context_length = load_settings.context_length or int(default)
    return plan_model_load(
        str(model.path),
        header,
        hardware,
        load_settings,
        context_length=context_length,
        global_gpu_layers=settings.gpu_layers,
        global_threads=settings.n_threads,
        parallel_replies=settings.replies_at_once,
        gpu_offload_supported=llama_backend()[0] == "CUDA",
        mmproj_path=str(model.projector.path) if model.projector is not None else None,
        projector_bytes=model.projector.size_bytes if model.projector is not None else 0,
        draft=_draft_file(library, load_settings.draft_model) if library is not None else None,
    )


def _installed_header(model: InstalledModel) -> GGUFHeader:
    try:
        return read_header(model.path)
    except (OSError, GGUFError) as exc:
        raise HearthError(f"The file of model '{model.name}' cannot be read: {exc}") from exc


def _draft_file(library: ModelLibrary, name: str | None) -> DraftFile | None:
    """The draft model `name` names, or None when the library has none by that name any more: the model
    then loads without it (the plan's reason says so). A file that cannot be read is the runner's to
    report, as it loads."""
    if name is None:
        return None
    try:
        draft = library.get(name)
    except HearthError as exc:
        log.info("draft model %s not used: %s", name, exc)
        return None
    try:
        return DraftFile(str(draft.path), _installed_header(draft))
    except HearthError as exc:
        log.info("draft model %s cannot be read: %s", name, exc)
        return DraftFile(str(draft.path), None)


def remove_installed(library: ModelLibrary, name: str) -> tuple[InstalledModel, bool]:
    """Forget a model and delete its files; returns it and whether files were deleted (only those inside
    the models folder are). The starter model is refused: it is registered again at every start."""
    model = library.get(name)
    if model.source == STARTER_SOURCE:
        raise HearthError(
            f"{model.name} is the built-in starter model; it comes back at every start and cannot be removed."
        )
    deleted = library.remove(name, delete_file=True)
    if deleted and model.repo_id is not None:
        prune_empty_folders(library, model.path.parent)
    return model, deleted


def prune_empty_folders(library: ModelLibrary, folder: Path) -> None:
    """Remove `folder` and the folders above it, up to the models folder, while they are empty: the folders
    of a repo's download were made for it."""
    while folder != library.models_dir and folder.is_relative_to(library.models_dir):
        try:
            folder.rmdir()
        except OSError:
            break
        folder = folder.parent


def disk_usage(library: ModelLibrary) -> DiskUsage:
    """Blocking (stats files)."""
    from app.library.downloads import pending_downloads

    models_dir = library.models_dir.resolve()
    models_bytes = sum(
        m.total_size_bytes for m in library.list_models() if m.path.resolve().is_relative_to(models_dir)
    )
    partial_bytes = sum(p.done for p in pending_downloads(library.models_dir))
    library.models_dir.mkdir(parents=True, exist_ok=True)
    return DiskUsage(models_bytes, partial_bytes, shutil.disk_usage(library.models_dir).free)
