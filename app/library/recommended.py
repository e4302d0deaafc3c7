"""A place to start: the short list of recommended models shipped with Hearth, and how each fits this machine.

The list is data (resources/library/recommended.json): repo, suggested quantization, a one-line description
and the licence, never a size, which would go stale. It is read from the package, so names and descriptions
show with no network at all. Sizes and fits come from the Hub only when asked for (`RecommendedFits.check`),
through the same listing, remote-header and fit machinery as any repo the user opens (`assess_listing`),
and are kept for the session.

A bad entry is skipped with a log line and a bad file gives an empty list: a broken list must never stop
the library from opening. No Qt.
"""

from __future__ import annotations

import enum
import json
import logging
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Final

from app.errors import HearthError
from app.library.hub import HEADER_WORKERS, HubClient, RemoteModel, RepoListing, check_repo_id, quant_label
from app.library.model_ops import FileFit, RepoAssessment, assess_listing
from inference.estimator import Fit

log = logging.getLogger("hearth.library")

SCHEMA_VERSION: Final = 1
_FIELDS: Final = frozenset({"repo", "quantization", "description", "license"})
# One line in the library's list: longer would wrap into a paragraph.
MAX_DESCRIPTION_CHARS: Final = 160


@dataclass(frozen=True)
class RecommendedModel:
    repo_id: str
    quantization: str  # the file suggested, as the Hub names quantizations (Q4_K_M)
    description: str  # one line: what it is good for
    license: str


class FitGroup(enum.StrEnum):
    """How the list is grouped: the fit badges' verdicts, partial placements together, then the entries
    whose fit is not known (not checked yet, or the check failed)."""

    GPU = "gpu"
    PARTIAL = "partial"
    CPU = "cpu"
    TOO_LARGE = "too_large"
    UNKNOWN = "unknown"


# Best first: the order the groups are shown in.
GROUP_ORDER: Final = tuple(FitGroup)
_GROUP_OF: Final[Mapping[Fit, FitGroup]] = {
    Fit.GPU: FitGroup.GPU,
    Fit.PARTIAL: FitGroup.PARTIAL,
    Fit.EXPERTS_CPU: FitGroup.PARTIAL,
    Fit.CPU: FitGroup.CPU,
    Fit.TOO_LARGE: FitGroup.TOO_LARGE,
}


@dataclass(frozen=True)
class RecommendedFit:
    entry: RecommendedModel
    fit: FileFit | None  # the suggested file, its remote header and its fit
    error: str | None  # why there is no fit: the Hub failed, or the repo has no such file now

    @property
    def group(self) -> FitGroup:
        return fit_group(self.fit)


def fit_group(fit: FileFit | None) -> FitGroup:
    if fit is None or fit.estimate is None:
        return FitGroup.UNKNOWN
    return _GROUP_OF[fit.estimate.verdict]


def load_recommended(source: Traversable | None = None) -> tuple[RecommendedModel, ...]:
    """The shipped list (or `source`). Blocking (reads a small file); never raises."""
    source = (
        source if source is not None else files("resources").joinpath("library").joinpath("recommended.json")
    )
    try:
        data = json.loads(source.read_bytes())
    except (OSError, ValueError) as exc:
        log.warning("the recommended models list %s cannot be read: %s", source, exc)
        return ()
    if not isinstance(data, dict) or not isinstance(data.get("models"), list):
        log.warning("the recommended models list %s has no list of models", source)
        return ()
    if data.get("schema_version") != SCHEMA_VERSION:
        log.warning(
            "the recommended models list %s has schema version %r; this Hearth reads version %d",
            source,
            data.get("schema_version"),
            SCHEMA_VERSION,
        )
        return ()
    entries: list[RecommendedModel] = []
    for index, raw in enumerate(data["models"]):
        entry, problem = _entry(raw)
        if entry is not None and any(e.repo_id == entry.repo_id for e in entries):
            problem = f"{entry.repo_id} is listed twice"
            entry = None
        if entry is None:
            log.warning("recommended model %d in %s is skipped: %s", index, source, problem)
            continue
        entries.append(entry)
    return tuple(entries)


def _entry(raw: object) -> tuple[RecommendedModel | None, str]:
    """The entry, or None and why it is unusable."""
    if not isinstance(raw, dict):
        return None, "it is not an object"
    unknown = sorted(set(raw) - _FIELDS)
    if unknown:
        # Sizes in particular: they come from the Hub, since a shipped one would go stale.
        return None, f"unknown field(s) {', '.join(map(repr, unknown))}"
    values = {name: raw.get(name) for name in _FIELDS}
    missing = sorted(
        name for name, value in values.items() if not isinstance(value, str) or not value.strip()
    )
    if missing:
        return None, f"missing or empty field(s) {', '.join(missing)}"
    repo, quantization, description, licence = (
        str(values[name]).strip() for name in ("repo", "quantization", "description", "license")
    )
    try:
        check_repo_id(repo)
    except HearthError as exc:
        return None, str(exc)
    if "/" not in repo:
        return None, f"{repo!r} has no owner (expected owner/name)"
    # The label the Hub's file names give (quant_label), so the suggested file can be found in a listing.
    if quant_label(f"model-{quantization}.gguf") != quantization.upper():
        return None, f"{quantization!r} is not a GGUF quantization name"
    if "\n" in description or len(description) > MAX_DESCRIPTION_CHARS:
        return (
            None,
            f"the description of {repo} is not one line of at most {MAX_DESCRIPTION_CHARS} characters",
        )
    return RecommendedModel(repo, quantization.upper(), description, licence), ""


def suggested_model(listing: RepoListing, quantization: str) -> RemoteModel | None:
    """The listing's model in `quantization` (by file name, as the listing labels it); of several, the
    smallest (the listing's order)."""
    return next((m for m in listing.models if (m.quantization or "").upper() == quantization.upper()), None)


def suggested_fit(entry: RecommendedModel, assessment: RepoAssessment) -> FileFit | None:
    """The suggested file's fit in an assessment of the whole repo (an entry the user opened)."""
    if assessment.listing.repo_id != entry.repo_id:
        return None
    model = suggested_model(assessment.listing, entry.quantization)
    if model is None:
        return None
    return next((f for f in assessment.fits if f.model.filename == model.filename), None)


def assess_recommended(
    hub: HubClient,
    entry: RecommendedModel,
    *,
    context: int,
    vram_mib: int | None = None,
    ram_mib: int | None = None,
) -> RecommendedFit:
    """The suggested file's size, remote header and fit. Blocking (network); raises HubError when the Hub
    cannot be asked."""
    listing = hub.list_files(entry.repo_id)
    model = suggested_model(listing, entry.quantization)
    if model is None:
        return RecommendedFit(entry, None, f"{entry.repo_id} has no {entry.quantization} file on main.")
    # Only the suggested file's header is read, not every quantization's.
    assessment = assess_listing(
        hub, replace(listing, models=(model,)), context=context, vram_mib=vram_mib, ram_mib=ram_mib
    )
    # Without the flag: within the list it would only say that the file fits.
    fit = replace(assessment.fits[0], recommended=False)
    return RecommendedFit(entry, fit, assessment.access_error or fit.error)


_Key = tuple[str, str, str, int, int | None, int | None]


class RecommendedFits:
    """The fits found this session, by endpoint, entry and plan (context and the what-if memory): asking
    again for the same plan sends no request. Failures are not kept, so asking again retries them.
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._found: dict[_Key, RecommendedFit] = {}

    def check(
        self,
        hub: HubClient,
        entries: Sequence[RecommendedModel],
        *,
        context: int,
        vram_mib: int | None = None,
        ram_mib: int | None = None,
    ) -> tuple[RecommendedFit, ...]:
        """Every entry's fit, in the entries' order; an entry the Hub could not answer for has its error.
        Blocking (network, a few entries in parallel)."""

        def one(entry: RecommendedModel) -> RecommendedFit:
            key = (hub.endpoint, entry.repo_id, entry.quantization, context, vram_mib, ram_mib)
            with self._lock:
                found = self._found.get(key)
            if found is not None:
                return found
            try:
                result = assess_recommended(hub, entry, context=context, vram_mib=vram_mib, ram_mib=ram_mib)
            except HearthError as exc:
                log.info("the fit of recommended model %s could not be checked: %s", entry.repo_id, exc)
                return RecommendedFit(entry, None, str(exc))
            if result.fit is not None and result.fit.estimate is not None:
                with self._lock:
                    self._found[key] = result
            return result

        with ThreadPoolExecutor(max_workers=HEADER_WORKERS, thread_name_prefix="hearth-recommended") as pool:
            return tuple(pool.map(one, entries))

    def remember(
        self,
        endpoint: str,
        entries: Sequence[RecommendedModel],
        assessment: RepoAssessment,
        *,
        vram_mib: int | None = None,
        ram_mib: int | None = None,
    ) -> RecommendedFit | None:
        """Keep what opening a recommended repo found for its suggested file; returns it (None when the
        repo is not in `entries` or the file was not readable)."""
        entry = next((e for e in entries if e.repo_id == assessment.listing.repo_id), None)
        fit = suggested_fit(entry, assessment) if entry is not None else None
        if entry is None or fit is None or fit.estimate is None:
            return None
        result = RecommendedFit(entry, replace(fit, recommended=False), assessment.access_error)
        key = (endpoint, entry.repo_id, entry.quantization, assessment.context, vram_mib, ram_mib)
        with self._lock:
            self._found[key] = result
        return result
