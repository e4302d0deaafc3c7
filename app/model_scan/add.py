"""Adding found models to the library where they lie: no copy, and Hearth never changes or deletes them
(removing one from the library only forgets it). Each file is header-checked and hashed once; a file its
app names by its SHA-256 (an Ollama blob, a Hugging Face cache blob) must have that SHA-256."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.errors import HearthError, ModelNotFound
from app.library.installed import InstalledModel, ModelLibrary
from app.model_scan.candidates import OLLAMA
from app.model_scan.scan import FoundModel, free_name, projector_digest

log = logging.getLogger("hearth.model_scan")

AddProgress = Callable[[FoundModel, int, int], None]
"""Called with (the model, bytes hashed, bytes in all) while a model is hashed; it may raise to stop."""


@dataclass(frozen=True)
class Added:
    found: FoundModel
    model: InstalledModel | None  # in the library now (added, or there already); None when refused
    added: bool  # a new entry; False when the model was in the library already
    error: str | None = None  # why it was not added


def source_for(app: str) -> str:
    """The library's source for a model found in `app`'s folder: `scan:ollama`, `scan:folder`…"""
    return f"scan:{app}"


def add_found(
    library: ModelLibrary, found: Sequence[FoundModel], progress: AddProgress | None = None
) -> list[Added]:
    """Register each usable model that is not in the library yet. Blocking (hashes every file); a model
    that cannot be added is reported in its `Added`, not raised. An exception from `progress` stops it."""
    results = []
    for model in found:
        results.append(_add(library, model, progress))
    return results


def _add(library: ModelLibrary, found: FoundModel, progress: AddProgress | None) -> Added:
    if not found.usable:
        return Added(found, None, False, found.problem)
    if found.in_library and found.library_name is not None:
        try:
            return Added(found, library.get(found.library_name), False)
        except ModelNotFound:
            pass  # forgotten since the scan: add it again
    candidate = found.candidate
    taken = {m.name.casefold() for m in library.list_models()}
    name = found.add_as if found.add_as.casefold() not in taken else free_name(found.add_as, found.app, taken)

    def hashed(done: int, total: int) -> None:
        if progress is not None:
            progress(found, done, total)

    try:
        model = library.register_in_place(
            candidate.path,
            name=name,
            source=source_for(found.app),
            expected_sha256=candidate.sha256,
            progress=hashed,
            part_sha256s=candidate.part_sha256s,
            projector=found.projector,
            projector_sha256=projector_digest(candidate, found.projector) if found.projector else None,
            repo_id=candidate.repo_id,
            revision=candidate.revision,
            filename=candidate.filename,
        )
    except HearthError as exc:
        why = str(exc)
        if found.app == OLLAMA and candidate.sha256 is not None and candidate.sha256 in why:
            why = (
                f"Ollama's blob {candidate.path.name} does not hold what its name promises (SHA-256 "
                f"{candidate.sha256}): it is damaged. Run `ollama pull {found.name}` to repair it. {why}"
            )
        log.info("could not add %s from %s: %s", found.name, found.app, why)
        return Added(found, None, False, why)
    added = model.name == name and model.name.casefold() not in taken
    log.info("%s %s from %s as %s", "added" if added else "found", found.name, found.app, model.name)
    return Added(found, model, added)
