"""The Hugging Face cache (huggingface_hub's): `<cache>/models--<org>--<name>/snapshots/<commit>/<file>`,
each file a link to `../../blobs/<etag>`; a file stored with Git LFS (every GGUF) has its SHA-256 as its
etag. The cache is `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub` (under
`$XDG_CACHE_HOME` when that is set). Where links are not available (Windows without developer mode) the
snapshot holds copies: no digest then, and hashing alone tells."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from app.library.installed import SPLIT_NAME
from app.model_scan.candidates import HF_CACHE, Candidate, Location, digest_in_name, model_files
from app.model_scan.walk import gguf_files


def hf_cache_root(home: Path, environ: Mapping[str, str]) -> Path:
    for variable in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if environ.get(variable):
            return Path(environ[variable]).expanduser()
    if environ.get("HF_HOME"):
        return Path(environ["HF_HOME"]).expanduser() / "hub"
    cache = Path(environ["XDG_CACHE_HOME"]) if environ.get("XDG_CACHE_HOME") else home / ".cache"
    return cache / "huggingface" / "hub"


def hf_cache_location(root: Path) -> Location:
    candidates: list[Candidate] = []
    notes: list[str] = []
    try:
        repos = sorted(p for p in root.glob("models--*") if p.is_dir())
    except OSError as exc:
        return Location(HF_CACHE, root, notes=(f"cannot read {root}: {exc.strerror or exc}",))
    for repo in repos:
        repo_id = "/".join(repo.name.split("--")[1:])
        for snapshot in _snapshots(repo):
            walk = gguf_files(snapshot)
            notes += walk.notes
            for path in model_files(walk.files):
                filename = path.relative_to(snapshot).as_posix()
                candidates.append(
                    Candidate(
                        HF_CACHE,
                        (match.group("base") if (match := SPLIT_NAME.match(path.name)) else path.stem),
                        path,
                        sha256=blob_digest(path),
                        part_sha256s=_other_parts(path),
                        repo_id=repo_id,
                        revision=snapshot.name,
                        filename=filename,
                    )
                )
    return Location(HF_CACHE, root, tuple(candidates), tuple(notes))


def blob_digest(path: Path) -> str | None:
    """The SHA-256 a snapshot file's blob is named by, when the file is a link to one."""
    try:
        target = path.readlink()
    except OSError:
        return None
    return digest_in_name(target.name)


def _other_parts(path: Path) -> tuple[str | None, ...]:
    """The digests of parts 2..N beside part 1 of a split GGUF (empty for one file)."""
    match = SPLIT_NAME.match(path.name)
    if match is None or int(match.group("index")) != 1:
        return ()
    base, count, suffix = match.group("base"), match.group("count"), match.group("suffix")
    return tuple(
        blob_digest(path.with_name(f"{base}-{i:05d}-of-{count}{suffix}")) for i in range(2, int(count) + 1)
    )


def _snapshots(repo: Path) -> list[Path]:
    """The repo's snapshots, the one `refs/main` names first: the same file in several commits is listed
    once (by its blob), as of the newest download."""
    try:
        snapshots = sorted(p for p in (repo / "snapshots").iterdir() if p.is_dir())
    except OSError:
        return []
    try:
        main = (repo / "refs" / "main").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        main = ""
    return sorted(snapshots, key=lambda p: p.name != main)
