"""Named presets: a system prompt, sampling settings and a context length, applied to a conversation at once.

A few ship with Hearth and cannot be changed; the user's own are kept in `presets.json` in the Hearth home:

    {"schema_version": 1,
     "presets": [{"name": "...", "system_prompt": "..." | null,
                  "settings": {<any of app.settings.GENERATION_KEYS>}}]}
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.errors import HearthError
from app.settings import clean_generation_settings, read_section, write_text_atomically
from inference.protocol import SAMPLING_SETTINGS, SamplingParams

log = logging.getLogger("hearth.presets")

PRESETS_FILE = "presets.json"
SCHEMA_VERSION = 1
MAX_NAME_CHARS = 60


@dataclass(frozen=True)
class Preset:
    name: str
    system_prompt: str | None
    sampling: SamplingParams
    context_length: int | None = None  # None: keep the conversation's (or the model's) context length
    builtin: bool = False

    def settings(self) -> dict[str, Any]:
        """As ConversationStore.set_conversation_settings takes them."""
        values: dict[str, Any] = {name: getattr(self.sampling, name) for name in SAMPLING_SETTINGS}
        if self.context_length is not None:
            values["context_length"] = self.context_length
        return values


# Balanced matches the global defaults. Precise and Code sample narrowly for answers that must be right;
# Code also drops the repeat penalty, which punishes the repetition code is made of (indentation, names).
SHIPPED_PRESETS: tuple[Preset, ...] = (
    Preset(
        "Balanced",
        None,
        SamplingParams(
            temperature=0.7, top_p=0.95, top_k=40, min_p=0.05, repeat_penalty=1.1, max_tokens=1024
        ),
        builtin=True,
    ),
    Preset(
        "Precise",
        "Answer accurately and concisely. If you are not sure, say so.",
        SamplingParams(temperature=0.2, top_p=0.9, top_k=20, min_p=0.1, repeat_penalty=1.05, max_tokens=1024),
        builtin=True,
    ),
    Preset(
        "Creative",
        None,
        SamplingParams(
            temperature=1.0, top_p=0.98, top_k=80, min_p=0.02, repeat_penalty=1.15, max_tokens=2048
        ),
        builtin=True,
    ),
    Preset(
        "Code",
        "You are a careful programming assistant. Answer with working code in fenced code blocks and explain "
        "it briefly.",
        SamplingParams(
            temperature=0.2, top_p=0.95, top_k=40, min_p=0.05, repeat_penalty=1.0, max_tokens=2048
        ),
        builtin=True,
    ),
)


def presets_path(home: Path) -> Path:
    return Path(home) / PRESETS_FILE


def list_presets(home: Path) -> list[Preset]:
    """The shipped presets, then the user's in name order. Never fails: a damaged file is set aside."""
    return [*SHIPPED_PRESETS, *sorted(_read_user_presets(home), key=lambda p: p.name.casefold())]


def save_preset(home: Path, preset: Preset) -> Preset:
    """Add the preset, or replace the user's preset of the same name. Raises HearthError for a bad name
    or bad settings, and for the name of a shipped preset."""
    name = " ".join(preset.name.split())
    if not name:
        raise HearthError("A preset needs a name.")
    if len(name) > MAX_NAME_CHARS:
        raise HearthError(f"A preset name can be at most {MAX_NAME_CHARS} characters long.")
    if _shipped(name) is not None:
        raise HearthError(f"“{name}” is one of Hearth's own presets; save yours under another name.")
    saved = Preset(
        name,
        preset.system_prompt if preset.system_prompt and preset.system_prompt.strip() else None,
        preset.sampling,
        preset.context_length,
    )
    # The same rules as a conversation's settings: raises HearthError for a value out of range.
    clean_generation_settings(saved.settings())
    others = [p for p in _read_user_presets(home) if p.name.casefold() != name.casefold()]
    _write(home, [*others, saved])
    return saved


def delete_preset(home: Path, name: str) -> None:
    """Raises HearthError for a shipped preset or a name that is not saved."""
    shipped = _shipped(name)
    if shipped is not None:
        raise HearthError(f"“{shipped.name}” is one of Hearth's own presets and cannot be deleted.")
    presets = _read_user_presets(home)
    remaining = [p for p in presets if p.name.casefold() != name.casefold()]
    if len(remaining) == len(presets):
        raise HearthError(f"There is no preset named “{name}”.")
    _write(home, remaining)


def _shipped(name: str) -> Preset | None:
    return next((p for p in SHIPPED_PRESETS if p.name.casefold() == name.strip().casefold()), None)


def _write(home: Path, presets: list[Preset]) -> None:
    data = {
        "schema_version": SCHEMA_VERSION,
        "presets": [
            {"name": p.name, "system_prompt": p.system_prompt, "settings": p.settings()}
            for p in sorted(presets, key=lambda p: p.name.casefold())
        ],
    }
    path = presets_path(home)
    try:
        write_text_atomically(path, json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    except OSError as exc:
        raise HearthError(f"Could not save the presets in {path}: {exc.strerror or exc}.") from exc


def _read_user_presets(home: Path) -> list[Preset]:
    path = presets_path(home)
    entries = read_section(path, "presets", list, "user presets")
    if entries is None:
        return []
    presets = []
    for index, entry in enumerate(entries):
        try:
            presets.append(_preset(entry))
        except HearthError as exc:
            # One bad entry (a hand edit) should not hide the others.
            log.warning("preset %d in %s is left out: %s", index + 1, path, exc)
    return presets


def _preset(entry: object) -> Preset:
    if not isinstance(entry, dict):
        raise HearthError("it is not an object")
    name, system_prompt, settings = entry.get("name"), entry.get("system_prompt"), entry.get("settings", {})
    if not isinstance(name, str) or not name.strip():
        raise HearthError("it has no name")
    if system_prompt is not None and not isinstance(system_prompt, str):
        raise HearthError("its system_prompt is not text")
    if not isinstance(settings, dict):
        raise HearthError("its settings are not an object")
    values = clean_generation_settings(settings)
    context_length = values.pop("context_length", None)
    defaults = dataclasses.asdict(SamplingParams())
    return Preset(name, system_prompt, SamplingParams(**{**defaults, **values}), context_length)
