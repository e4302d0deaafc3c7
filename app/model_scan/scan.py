"""Listing the models other apps keep: fast enough to run each time the library opens.

No file is hashed here: a model is known to be in the library by its path and size, or by the SHA-256
its app names it by (Ollama, the Hugging Face cache). Each file's GGUF header is read (a few megabytes at
most), so what is listed as usable is a model llama.cpp can be given.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from app.errors import HearthError
from app.library.installed import (
    MAX_NAME_CHARS,
    SPLIT_NAME,
    InstalledModel,
    ModelLibrary,
    check_model_files,
    check_model_name,
    check_projector,
    projector_beside,
    split_sources,
)
from app.model_scan.apps import folder_apps
from app.model_scan.candidates import FOLDER, HF_CACHE, OLLAMA, Candidate, Location, model_files
from app.model_scan.hf_cache import blob_digest, hf_cache_location, hf_cache_root
from app.model_scan.ollama import ollama_location, ollama_roots
from app.model_scan.walk import gguf_files
from inference.gguf import GGUFHeader

log = logging.getLogger("hearth.model_scan")

_NOT_IN_NAMES = re.compile(r"[^\w .+()\[\]-]+")


@dataclass(frozen=True)
class FoundModel:
    app: str
    name: str  # as the app names it
    path: Path  # part 1, where the app keeps it
    size_bytes: int  # every part; the projector not counted
    parts: int
    usable: bool
    problem: str | None  # why it cannot be used (unusable) or added
    in_library: bool
    library_name: str | None  # the library's name for it, when it is in the library
    add_as: str  # the name adding it would give it
    quantization: str | None
    projector: Path | None
    candidate: Candidate

    @property
    def addable(self) -> bool:
        return self.usable and not self.in_library


@dataclass(frozen=True)
class Searched:
    app: str
    path: Path
    exists: bool
    found: int
    notes: tuple[str, ...]


@dataclass(frozen=True)
class ScanResult:
    models: tuple[FoundModel, ...]
    searched: tuple[Searched, ...]

    @property
    def addable(self) -> tuple[FoundModel, ...]:
        return tuple(m for m in self.models if m.addable)


def locations(
    user_folders: Sequence[Path], *, home: Path | None = None, environ: Mapping[str, str] | None = None
) -> list[Location]:
    """Every place a scan looks, found or not, without reading any of them."""
    home = Path.home() if home is None else home
    environ = os.environ if environ is None else environ
    return [
        *(Location(OLLAMA, root) for root in ollama_roots(home, environ)),
        Location(HF_CACHE, hf_cache_root(home, environ)),
        *folder_apps(home, environ),
        *(Location(FOLDER, Path(folder)) for folder in user_folders),
    ]


def scan_models(
    library: ModelLibrary,
    user_folders: Sequence[Path] = (),
    *,
    home: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ScanResult:
    """What every app's folders hold, each entry checked and matched against the library. Blocking (reads
    folders and headers); never raises for what it finds there."""
    installed = library.list_models()
    by_path = {_key(m.path): m for m in installed}
    by_sha = {m.sha256: m for m in installed}
    models_dir = library.models_dir.resolve()
    taken = {m.name.casefold() for m in installed}
    seen: set[tuple[int, int]] = set()
    models: list[FoundModel] = []
    searched: list[Searched] = []
    for place in locations(user_folders, home=home, environ=environ):
        if not place.exists:
            searched.append(Searched(place.app, place.path, False, 0, ()))
            continue
        read = _read(place)
        count = 0
        for candidate in read.candidates:
            identity = _identity(candidate.path)
            if identity is not None and identity in seen:
                # The same file (a link, a hard link, an overlapping folder) is listed once, first found.
                continue
            if identity is not None:
                seen.add(identity)
            if _key(candidate.path).is_relative_to(models_dir):
                continue  # Hearth's own models folder
            found = _examine(candidate, by_path, by_sha, taken)
            taken.add(found.add_as.casefold())
            models.append(found)
            count += 1
        searched.append(Searched(place.app, place.path, True, count, read.notes))
    return ScanResult(tuple(models), tuple(searched))


def _read(place: Location) -> Location:
    if place.app == OLLAMA:
        return ollama_location(place.path)
    if place.app == HF_CACHE:
        return hf_cache_location(place.path)
    walk = gguf_files(place.path)
    candidates = [Candidate(place.app, _file_name(path), path) for path in model_files(walk.files)]
    return Location(place.app, place.path, tuple(candidates), tuple(walk.notes))


def _file_name(path: Path) -> str:
    match = SPLIT_NAME.match(path.name)
    stem = match.group("base") if match is not None else path.stem
    # Jan 0.6 keeps every model as `<id>/model.gguf`.
    return path.parent.name if stem.lower() == "model" else stem


def _examine(
    candidate: Candidate,
    by_path: Mapping[Path, InstalledModel],
    by_sha: Mapping[str, InstalledModel],
    taken: set[str],
) -> FoundModel:
    problem = candidate.problem
    header: GGUFHeader | None = None
    files = [candidate.path]
    if problem is None:
        try:
            files = split_sources(candidate.path)
            header = check_model_files(files)[0]
        except HearthError as exc:
            problem = str(exc)
    size = sum(_size(p) for p in files)
    library_model = by_path.get(_key(candidate.path))
    if library_model is not None and library_model.size_bytes != _size(candidate.path):
        library_model = None  # the file at that path is not the one registered there any more
    if library_model is None and candidate.sha256 is not None:
        library_model = by_sha.get(candidate.sha256)
    projector = _projector(candidate, header) if header is not None else None
    return FoundModel(
        app=candidate.app,
        name=candidate.name,
        path=candidate.path,
        size_bytes=size,
        parts=len(files),
        usable=header is not None,
        problem=problem,
        in_library=library_model is not None,
        library_name=library_model.name if library_model is not None else None,
        add_as=free_name(library_name_for(candidate.name), candidate.app, taken),
        quantization=header.quantization if header is not None else None,
        projector=projector,
        candidate=candidate,
    )


def _projector(candidate: Candidate, header: GGUFHeader) -> Path | None:
    if candidate.projector is not None:
        try:
            check_projector(candidate.projector, header)
        except HearthError as exc:
            log.info("%s: its projector layer does not fit: %s", candidate.name, exc)
            return None
        return candidate.projector
    # A folder's projector: the mmproj file beside the model that fits it, as `hearth models import` pairs.
    return projector_beside(candidate.path, header)


def projector_digest(candidate: Candidate, projector: Path) -> str | None:
    """The SHA-256 the app names the projector by, when it does."""
    if candidate.projector is not None:
        return candidate.projector_sha256
    return blob_digest(projector) if candidate.app == HF_CACHE else None


def library_name_for(name: str) -> str:
    """An app's name as a library name: `llama3.2:3b` becomes `llama3.2-3b`."""
    cleaned = _NOT_IN_NAMES.sub("-", name.replace(":", "-").replace("/", "-")).strip(" -.")
    cleaned = cleaned[:MAX_NAME_CHARS].rstrip(" .")
    try:
        return check_model_name(cleaned)
    except HearthError:
        return "model"


def free_name(name: str, app: str, taken: set[str]) -> str:
    """`name`, or `name (app)`, `name (app 2)`… when a model has it already (names ignore case)."""
    if name.casefold() not in taken:
        return name
    number = 1
    while True:
        label = app if number == 1 else f"{app} {number}"
        suffix = f" ({label})"
        candidate = name[: MAX_NAME_CHARS - len(suffix)] + suffix
        if candidate.casefold() not in taken:
            return candidate
        number += 1


def _key(path: Path) -> Path:
    try:
        return Path(path).resolve()
    except OSError:
        return Path(path).absolute()


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
