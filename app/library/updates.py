"""Whether the Hub's main branch now has other bytes for installed models, and updating them. No Qt.

`check_updates` asks the Hub (a few repos at a time) about every model that carries Hub provenance: those
downloaded by Hearth and those `hearth models scan --add` registered from the Hugging Face cache. It reuses
`HubClient.check_update`, the comparison `hearth models verify --check-hub` makes, for every part of a split
model.

`update_model` downloads the new file(s) with the ordinary `Downloader` (resumable, SHA-256 verified against
the Hub's LFS hash) into `<models>/updates/<commit>/`, and only then switches the library entry to them in
one transaction and deletes the old files, if they were in Hearth's models folder. Until the switch the old
model is untouched and usable; a model used in place from another app's folder (the Hugging Face cache) is
never modified: its update lands in Hearth's models folder and the old file just stops being used.

The last check's result is kept in `model-updates.json` in the Hearth home, for the library's badges and for
the at-most-daily automatic check (`check_updates_daily`).
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

from huggingface_hub import constants

from app.errors import HearthError
from app.library.downloads import DownloadControl, Downloader, ProgressCallback, RetryPolicy
from app.library.hub import HubClient, HubUnreachable, RepoListing
from app.library.installed import (
    InstalledModel,
    ModelLibrary,
    ModelPart,
    check_model_files,
    check_projector,
)
from app.library.model_ops import prune_empty_folders
from app.settings import read_section, write_text_atomically

log = logging.getLogger("hearth.library")

UPDATES_FILE: Final = "model-updates.json"
SCHEMA_VERSION: Final = 1
# A few repos at a time: each check is one listing request, and the Hub rate-limits bursts.
CHECK_WORKERS: Final = 4
CHECK_INTERVAL: Final = timedelta(hours=24)
# Inside the models folder, so updated files count as Hearth's own (deleted on remove, in disk usage).
UPDATES_DIR: Final = "updates"


@dataclass(frozen=True)
class ModelUpdate:
    """For a split model, `file` and the hashes are those of the first part whose bytes changed."""

    name: str
    repo: str
    file: str
    installed_sha256: str
    upstream_sha256: str
    upstream_commit: str
    in_place: bool  # used from another app's folder: the update downloads into Hearth's models folder


@dataclass(frozen=True)
class UpdateProblem:
    name: str
    reason: str


@dataclass(frozen=True)
class UpdateReport:
    updates: tuple[ModelUpdate, ...]
    checked: int
    errors: tuple[UpdateProblem, ...]
    checked_at: datetime

    def update_for(self, name: str) -> ModelUpdate | None:
        return next((u for u in self.updates if u.name == name), None)

    def without(self, name: str) -> UpdateReport:
        """The report once the model `name` was updated: it lists no update for it."""
        return replace(self, updates=tuple(u for u in self.updates if u.name != name))


@dataclass(frozen=True)
class UpdateResult:
    before: InstalledModel
    model: InstalledModel  # the same name, now on the new commit's files
    deleted: tuple[Path, ...]  # the old files removed from the models folder


def hub_models(library: ModelLibrary) -> list[InstalledModel]:
    """The installed models that know which Hub repo file they are."""
    return [m for m in library.list_models() if m.repo_id is not None and m.filename is not None]


def check_updates(library: ModelLibrary, hub: HubClient) -> UpdateReport:
    """Compare every Hub model with its file on main now. Blocking (network): run it on a worker.

    A model the Hub refuses or no longer lists gets a reason in `errors`; raises HearthError only when the
    Hub cannot be reached at all (offline), with one message for every model.
    """
    if constants.HF_HUB_OFFLINE:
        raise HearthError("HF_HUB_OFFLINE is set, so Hearth does not contact the Hub; unset it to check.")
    models = hub_models(library)
    models_dir = library.models_dir.resolve()
    with ThreadPoolExecutor(max_workers=CHECK_WORKERS, thread_name_prefix="hearth-updates") as pool:
        outcomes = list(pool.map(lambda m: _check_one(hub, m, models_dir), models))
    failures = [o for o in outcomes if isinstance(o, HearthError)]
    unreachable = {str(f) for f in failures if isinstance(f, HubUnreachable)}
    if models and len(failures) == len(models) and len(unreachable) == 1:
        raise failures[0]
    return UpdateReport(
        updates=tuple(o for o in outcomes if isinstance(o, ModelUpdate)),
        checked=len(models),
        errors=tuple(
            UpdateProblem(m.name, str(o) if isinstance(o, HearthError) else o.reason)
            for m, o in zip(models, outcomes, strict=True)
            if isinstance(o, HearthError | UpdateProblem)
        ),
        checked_at=datetime.now(UTC),
    )


def _check_one(
    hub: HubClient, model: InstalledModel, models_dir: Path
) -> ModelUpdate | UpdateProblem | HearthError | None:
    try:
        check = hub.check_update(model)
    except HearthError as exc:
        return exc
    if check.changed is None or check.remote is None:
        # Renamed or removed upstream, or not verifiable: nothing an update could download.
        return UpdateProblem(model.name, check.detail)
    if not check.changed:
        return None
    assert check.commit is not None  # a listing always names its commit
    installed = [p.sha256 for p in model.parts] if model.parts else [model.sha256]
    upstream = [p.sha256 or "" for p in check.remote.parts]
    names = [p.filename for p in check.remote.parts]
    changed = next(
        (i for i, (old, new) in enumerate(zip(installed, upstream, strict=False)) if old != new),
        min(len(installed), len(upstream)) - 1,
    )
    return ModelUpdate(
        name=model.name,
        repo=check.listing.repo_id if check.listing else model.repo_id or "",
        file=names[changed],
        installed_sha256=installed[changed],
        upstream_sha256=upstream[changed],
        upstream_commit=check.commit,
        in_place=not model.path.resolve().is_relative_to(models_dir),
    )


def update_model(
    library: ModelLibrary,
    hub: HubClient,
    name: str,
    *,
    control: DownloadControl | None = None,
    progress: ProgressCallback | None = None,
    policy: RetryPolicy | None = None,
) -> UpdateResult | None:
    """Download and verify the model's file(s) at main's commit, then switch the model to them. Blocking.

    Returns None when main has the installed bytes already. Raises HearthError when main no longer has the
    file, and what `Downloader.download` raises (a pause or a failure keeps the old model as it was).
    """
    before = library.get(name)
    if before.repo_id is None or before.filename is None:
        raise HearthError(f"{before.name} was not downloaded from the Hub; there is nothing to update.")
    check = hub.check_update(before)
    if check.changed is None or check.listing is None or check.remote is None:
        raise HearthError(f"{before.name} cannot be updated: {check.detail}")
    if not check.changed:
        return None
    remote, kept = check.remote, None
    installed_projector, upstream_projector = before.projector, remote.projector
    if (
        installed_projector is not None
        and upstream_projector is not None
        and upstream_projector.sha256 == installed_projector.sha256
    ):
        # The same projector bytes: keep the installed file rather than download it again.
        remote, kept = replace(remote, projector=None), installed_projector
    staging = _Staging(library, staging_dir(library.models_dir, check.listing), kept)
    staged = Downloader(hub, staging, policy=policy).download(
        check.listing, remote, control=control, progress=progress
    )
    model, deleted = library.switch_files(before.name, staged)
    for folder in {p.parent for p in deleted}:
        prune_empty_folders(library, folder)
    log.info("updated %s from %s to %s", name, (before.revision or "?")[:12], check.listing.commit[:12])
    return UpdateResult(before, model, tuple(deleted))


def staging_dir(models_dir: Path, listing: RepoListing) -> Path:
    """Where an update to this commit downloads: the same place on every try, so a second try resumes."""
    return Path(models_dir) / UPDATES_DIR / listing.commit[:12]


class _Staging(ModelLibrary):
    """The library as the Downloader sees it during an update: files go under the staging folder, and
    "registering" them only checks them and describes them, so the real entry is switched in one step
    afterwards. It never touches the database (its base class is not initialised on purpose)."""

    def __init__(self, library: ModelLibrary, models_dir: Path, projector: ModelPart | None) -> None:
        self.models_dir = models_dir
        self._library = library
        self._projector = projector

    def list_models(self) -> list[InstalledModel]:
        # The download's own name is never used: the update keeps the model's name.
        return []

    def find_hub_file(self, repo_id: str, filename: str) -> InstalledModel | None:
        return None

    def projector_in_use(self, path: Path) -> bool:
        return self._library.projector_in_use(path)

    def register_download(
        self,
        path: Path,
        *,
        name: str,
        sha256: str,
        repo_id: str,
        revision: str,
        filename: str,
        parts: tuple[ModelPart, ...] = (),
        projector: ModelPart | None = None,
    ) -> InstalledModel:
        path = Path(path).resolve()
        header = check_model_files([p.path for p in parts] if parts else [path])[0]
        projector = projector or self._projector
        if projector is not None:
            check_projector(projector.path, header)
        return InstalledModel(
            id=0,
            name=name,
            path=path,
            sha256=sha256,
            size_bytes=path.stat().st_size,
            source=f"hub:{repo_id}@{revision}/{filename}",
            architecture=header.architecture,
            quantization=header.quantization,
            context_length=header.context_length,
            n_layers=header.block_count,
            added_at=datetime.now(UTC),
            last_load_error=None,
            last_loaded_at=None,
            repo_id=repo_id,
            revision=revision,
            filename=filename,
            parts=parts,
            projector=projector,
        )


# The last check ------------------------------------------------------------------------------------------


def updates_path(home: Path) -> Path:
    return Path(home) / UPDATES_FILE


def save_report(home: Path, report: UpdateReport) -> None:
    data = {"schema_version": SCHEMA_VERSION, "last_check": report_json(report)}
    path = updates_path(home)
    try:
        write_text_atomically(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise HearthError(f"Could not save the update check in {path}: {exc.strerror or exc}.") from exc


def load_report(home: Path) -> UpdateReport | None:
    """The last check, or None when there was none (or its file is damaged: set aside and logged)."""
    data = read_section(updates_path(home), "last_check", dict, "model updates")
    if data is None:
        return None
    try:
        return UpdateReport(
            updates=tuple(ModelUpdate(**u) for u in data["updates"]),
            checked=int(data["checked"]),
            errors=tuple(UpdateProblem(**e) for e in data["errors"]),
            checked_at=datetime.fromisoformat(data["checked_at"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("%s does not describe an update check (%s); checking again", updates_path(home), exc)
        return None


def forget_update(home: Path, name: str) -> None:
    """The model was updated: the last check no longer lists it."""
    report = load_report(home)
    if report is not None and report.update_for(name) is not None:
        save_report(home, report.without(name))


def daily_check_due(home: Path, enabled: bool, now: datetime | None = None) -> bool:
    """Whether the automatic check should run: only when the user turned it on, at most once a day."""
    if not enabled:
        return False
    report = load_report(home)
    return report is None or (now or datetime.now(UTC)) - report.checked_at >= CHECK_INTERVAL


def report_json(report: UpdateReport) -> dict[str, Any]:
    return {
        "updates": [update_json(u) for u in report.updates],
        "checked": report.checked,
        "errors": [{"name": e.name, "reason": e.reason} for e in report.errors],
        "checked_at": report.checked_at.isoformat(),
    }


def update_json(update: ModelUpdate) -> dict[str, Any]:
    return {
        "name": update.name,
        "repo": update.repo,
        "file": update.file,
        "installed_sha256": update.installed_sha256,
        "upstream_sha256": update.upstream_sha256,
        "upstream_commit": update.upstream_commit,
        "in_place": update.in_place,
    }
