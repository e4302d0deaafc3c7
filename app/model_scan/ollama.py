"""Ollama's store: `<root>/manifests/<registry>/<namespace>/<model>/<tag>`, each a JSON manifest whose
layers name content-addressed blobs, `<root>/blobs/sha256-<hex>`. The model layer is a GGUF file; a vision
model has a projector layer too. The root is `$OLLAMA_MODELS`, else `~/.ollama/models` (and, on Linux,
where the system service keeps it: `/usr/share/ollama/.ollama/models`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from app.model_scan.candidates import OLLAMA, Candidate, Location, digest_in_name

MODEL_LAYER: Final = "application/vnd.ollama.image.model"
PROJECTOR_LAYER: Final = "application/vnd.ollama.image.projector"
DEFAULT_REGISTRY: Final = "registry.ollama.ai"
# A manifest is a few hundred bytes; anything much larger is not one.
MAX_MANIFEST_BYTES: Final = 1 << 20


def ollama_roots(home: Path, environ: Mapping[str, str]) -> list[Path]:
    if environ.get("OLLAMA_MODELS"):
        return [Path(environ["OLLAMA_MODELS"]).expanduser()]
    roots = [home / ".ollama" / "models"]
    if sys.platform.startswith("linux"):
        roots.append(Path("/usr/share/ollama/.ollama/models"))
    return roots


def ollama_location(root: Path) -> Location:
    manifests = root / "manifests"
    candidates: list[Candidate] = []
    notes: list[str] = []
    # Exactly four levels deep: a fixed pattern, so no link can make it walk for ever.
    for manifest in sorted(manifests.glob("*/*/*/*")):
        try:
            if not manifest.is_file():
                continue
            candidate = _candidate(root, manifest.relative_to(manifests).parts, manifest)
        except OSError as exc:
            notes.append(f"cannot read {manifest}: {exc.strerror or exc}")
            continue
        if candidate is not None:
            candidates.append(candidate)
    return Location(OLLAMA, root, tuple(candidates), tuple(notes))


def model_name(registry: str, namespace: str, model: str, tag: str) -> str:
    """How `ollama list` names it: `llama3.2:3b`, `namespace/model:tag`, `hf.co/org/repo:tag`."""
    if registry != DEFAULT_REGISTRY:
        return f"{registry}/{namespace}/{model}:{tag}"
    if namespace == "library":
        return f"{model}:{tag}"
    return f"{namespace}/{model}:{tag}"


def _candidate(root: Path, parts: tuple[str, ...], manifest: Path) -> Candidate | None:
    name = model_name(*parts)
    if manifest.stat().st_size > MAX_MANIFEST_BYTES:
        return Candidate(OLLAMA, name, manifest, problem="its manifest is too large to be one")
    try:
        data = json.loads(manifest.read_bytes())
    except (ValueError, RecursionError):
        return Candidate(OLLAMA, name, manifest, problem="its manifest is not valid JSON")
    layers = data.get("layers") if isinstance(data, dict) else None
    if not isinstance(layers, list):
        return Candidate(OLLAMA, name, manifest, problem="its manifest lists no layers")
    model = _layer(layers, MODEL_LAYER)
    if model is None:
        # An embedding-only or remote ("cloud") model, or one Ollama keeps in another format.
        return None
    digest = _digest(model)
    if digest is None:
        return Candidate(OLLAMA, name, manifest, problem="its model layer has no valid sha256 digest")
    blob = root / "blobs" / f"sha256-{digest}"
    if not blob.is_file():
        return Candidate(OLLAMA, name, blob, sha256=digest, problem=f"its blob {blob.name} is missing")
    projector = _layer(layers, PROJECTOR_LAYER)
    projector_digest = _digest(projector) if projector is not None else None
    projector_blob = root / "blobs" / f"sha256-{projector_digest}" if projector_digest else None
    if projector_blob is not None and not projector_blob.is_file():
        projector_blob, projector_digest = None, None
    return Candidate(
        OLLAMA,
        name,
        blob,
        sha256=digest,
        projector=projector_blob,
        projector_sha256=projector_digest,
    )


def _layer(layers: list[Any], media_type: str) -> dict[str, Any] | None:
    return next((la for la in layers if isinstance(la, dict) and la.get("mediaType") == media_type), None)


def _digest(layer: dict[str, Any]) -> str | None:
    digest = layer.get("digest")
    return digest_in_name(digest, "sha256:") if isinstance(digest, str) else None
