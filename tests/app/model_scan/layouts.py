"""Other apps' model folders, laid out under a test's home as those apps write them: Ollama's manifests and
content-addressed blobs, the Hugging Face cache's snapshot links into blobs, LM Studio's, GPT4All's and
Jan's folders of `.gguf` files."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from tests.helpers.gguf_factory import TensorSpec, write_gguf

F32 = 0


def tiny_model(path: Path, name: str = "Tiny", *, split: tuple[int, int] | None = None) -> Path:
    """A small, well-formed GGUF model; `name` makes its bytes differ. `split` = (part number from 0,
    count) writes the split keys llama.cpp reads."""
    path.parent.mkdir(parents=True, exist_ok=True)
    metadata: dict[str, object] = {
        "general.architecture": "llama",
        "general.name": name,
        "general.file_type": 3,
        "llama.context_length": 2048,
        "llama.block_count": 2,
        "llama.embedding_length": 64,
    }
    tensor = f"blk.{split[0] if split else 0}.weight"
    if split is not None:
        metadata["split.no"] = split[0]
        metadata["split.count"] = split[1]
        metadata["split.tensors.count"] = split[1]
    data = (name.encode() * 64)[:256] * 8
    return write_gguf(path, metadata, [TensorSpec(tensor, (64, 8), F32, data=data)])


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def place(source: Path, target: Path, *, hard_link: bool = True) -> Path:
    """The file at `target` as the app would have it: a hard link to `source` (the same bytes and inode,
    no copy of a 90 MB model) or a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if hard_link:
        os.link(source, target)
    else:
        target.write_bytes(source.read_bytes())
    return target


def ollama_model(
    root: Path,
    reference: str,
    model: Path,
    *,
    digest: str | None = None,
    projector: Path | None = None,
) -> Path:
    """Install `model` as Ollama's `pull` leaves it under `root` (OLLAMA_MODELS): the blob
    `blobs/sha256-<digest>` (a hard link of `model`) and the manifest at
    `manifests/<registry>/<namespace>/<model>/<tag>` for `reference` ("registry/namespace/model:tag").
    `digest` names the blob with another digest than its content's (a damaged blob). Returns the blob."""
    where, tag = reference.rsplit(":", 1)
    digest = digest or sha256_of(model)
    blob = root / "blobs" / f"sha256-{digest}"
    if not blob.exists():
        place(model, blob)
    layers = [
        {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}", "size": 1},
        {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:" + "1" * 64, "size": 2},
    ]
    if projector is not None:
        projector_digest = sha256_of(projector)
        place(projector, root / "blobs" / f"sha256-{projector_digest}", hard_link=False)
        layers.append(
            {
                "mediaType": "application/vnd.ollama.image.projector",
                "digest": f"sha256:{projector_digest}",
                "size": projector.stat().st_size,
            }
        )
    manifest = root / "manifests" / where / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": "x"},
                "layers": layers,
            }
        )
    )
    return blob


def hf_cached(cache: Path, repo_id: str, commit: str, files: dict[str, Path]) -> Path:
    """Files as huggingface_hub caches them: `blobs/<sha256>` and, in `snapshots/<commit>/`, a relative link
    to the blob for each repo file name (folders in it included). Returns the snapshot folder."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / commit
    for filename, source in files.items():
        digest = sha256_of(source)
        blob = repo / "blobs" / digest
        if not blob.exists():
            place(source, blob, hard_link=False)
        link = snapshot / filename
        link.parent.mkdir(parents=True, exist_ok=True)
        up = "../" * (len(Path(filename).parts) + 1)
        link.symlink_to(f"{up}blobs/{digest}")
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(commit)
    return snapshot


# Where the apps' folders would otherwise be looked for outside the test's home.
APP_VARIABLES = (
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_HOME",
    "XDG_CACHE_HOME",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "APPDATA",
    "LOCALAPPDATA",
)


def isolate_app_folders(monkeypatch: pytest.MonkeyPatch, home: Path) -> Path:
    """Every app folder a scan looks in under `home` (HOME, which hermetic_home sets): none of this
    machine's own caches, and Ollama's store at `~/.ollama/models`, not the system service's."""
    for variable in APP_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    home.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("OLLAMA_MODELS", str(home / ".ollama" / "models"))
    return home
