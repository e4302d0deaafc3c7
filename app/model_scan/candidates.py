"""What a layout module reports: a model file as another app keeps it, before Hearth has looked inside."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app.library.installed import SPLIT_NAME
from inference.projector import is_projector_filename

# The apps a found model can come from, as `hearth models scan` and the `scan:<app>` source name them.
OLLAMA: Final = "ollama"
LMSTUDIO: Final = "lmstudio"
HF_CACHE: Final = "hf-cache"
GPT4ALL: Final = "gpt4all"
JAN: Final = "jan"
FOLDER: Final = "folder"
APPS: Final = (OLLAMA, LMSTUDIO, HF_CACHE, GPT4ALL, JAN, FOLDER)

SHA256_HEX: Final = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class Candidate:
    app: str
    name: str  # as the app names it (an Ollama tag, a file's stem)
    path: Path  # the file, or part 1 of a split GGUF, where the app shows it (a link stays a link)
    # The SHA-256 the app's own naming promises (an Ollama blob's, a Hugging Face cache blob's): checked
    # when the model is added, and enough to tell it is in the library without reading the file.
    sha256: str | None = None
    part_sha256s: tuple[str | None, ...] = ()  # parts 2..N of a split GGUF, the same way
    projector: Path | None = None  # a projector the app pairs with the model itself (Ollama's layer)
    projector_sha256: str | None = None
    # The Hugging Face cache's provenance, for update checks later.
    repo_id: str | None = None
    revision: str | None = None
    filename: str | None = None
    problem: str | None = None  # why the app's own records do not give a usable file


@dataclass(frozen=True)
class Location:
    """A folder one app keeps models in, and what was found there."""

    app: str
    path: Path
    candidates: tuple[Candidate, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def exists(self) -> bool:
        return self.path.is_dir()


def digest_in_name(name: str, prefix: str = "") -> str | None:
    """The SHA-256 a content-addressed file is named by (`sha256-<hex>` for Ollama, `<hex>` for the
    Hugging Face cache), or None."""
    if not name.startswith(prefix):
        return None
    digest = name[len(prefix) :].lower()
    return digest if SHA256_HEX.fullmatch(digest) else None


def model_files(paths: list[Path]) -> list[Path]:
    """The files in a folder that stand for a model: not projectors (paired with their model instead), and
    not parts 2..N of a split GGUF (listed with part 1)."""
    return [path for path in paths if not is_projector_filename(path.name) and _whole_or_first(path)]


def _whole_or_first(path: Path) -> bool:
    match = SPLIT_NAME.match(path.name)
    return match is None or int(match.group("index")) == 1
