"""User settings: typed, versioned JSON at `HearthPaths.settings_path`.

Never secrets (see app.secret_store)."""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from app.errors import HearthError
from app.events import Event
from app.fsutil import fsync_directory
from inference.projector import DEFAULT_MAX_IMAGE_SIDE
from inference.protocol import SAMPLING_SETTINGS, SamplingParams

log = logging.getLogger("hearth.settings")

SCHEMA_VERSION = 1

# Matches hf_token, api_key, openai_apikey, password... but not max_tokens.
_SECRET_KEY = re.compile(r"(?:^|_)(?:token|api_?key|password|passwd|secret)(?:$|_)", re.IGNORECASE)

# What the overflow policy does when a conversation no longer fits the context: leave out the oldest turns
# (the system prompt stays) and say so on the reply, or refuse to send and say why.
OVERFLOW_POLICIES = ("drop_oldest", "refuse")
# The window's look and language; "system" follows the desktop (colour scheme, locale).
THEMES = ("system", "light", "dark")
LANGUAGES = ("system", "en", "zh_CN")
# How a reply's reasoning is first shown: a collapsed "Thinking" section, expanded, or not at all.
THINKING_DISPLAYS = ("collapsed", "expanded", "hidden")
_SAMPLING = SamplingParams()
# llama.cpp's own limit on sequences in one context is 256; past a few dozen, on a desktop, each reply would
# crawl.
MAX_PARALLEL_SLOTS = 32


@dataclass(frozen=True)
class Settings:
    schema_version: int = SCHEMA_VERSION
    context_length: int = 4096
    n_threads: int | None = None
    gpu_layers: str | int = "auto"
    default_model: str | None = None
    # The global sampling settings: SamplingParams' defaults until the user changes them. A sampling
    # parameter without a field here (the seed) has only conversations' and models' values over its default.
    temperature: float = _SAMPLING.temperature
    top_p: float = _SAMPLING.top_p
    top_k: int = _SAMPLING.top_k
    min_p: float = _SAMPLING.min_p
    repeat_penalty: float = _SAMPLING.repeat_penalty
    max_tokens: int = _SAMPLING.max_tokens
    hf_endpoint: str | None = None
    overflow_policy: str = "drop_oldest"
    # Per model name: generation settings (GENERATION_KEYS) and "system_prompt" for its new conversations.
    # A conversation's own settings win over these, and these over the global ones above.
    model_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    theme: str = "system"
    language: str = "system"
    show_thinking: str = "collapsed"
    # An attached PDF also goes to a model that can see as pictures of its first pages (app.images.pdf_pages).
    pdf_pages_as_images: bool = False
    # The long side, in pixels, a picture is scaled down to before a model is given it (never up).
    image_max_side: int = DEFAULT_MAX_IMAGE_SIDE
    # Tools (app.tools): how many times in a row a reply may call tools before it must answer, and how long
    # one call may run before it is stopped and the model told.
    tool_rounds: int = 8
    tool_timeout_s: float = 60.0
    # The OpenAI-compatible API on 127.0.0.1 (app.local_api.server): off until the user turns it on.
    local_server_enabled: bool = False
    local_server_port: int = 8765
    # The library panel offered, once, the models other apps keep on this machine (app.model_scan).
    models_scan_offered: bool = False
    # Ask the Hub, at most once a day when the library opens, whether installed models changed upstream
    # (app.library.updates); off until the user turns it on, since it contacts the Hub unasked.
    check_updates_daily: bool = False
    # How many replies to local API requests the runner writes at once (continuous batching,
    # inference.decoding); more wait their turn. The window's own turn has a place beside them. All share the
    # context's KV cache.
    parallel_slots: int = 4

    @property
    def replies_at_once(self) -> int:
        """The runner's sequences: parallel_slots for the API's requests, one more for the window's turn."""
        return self.parallel_slots + 1


def _is_int(value: object) -> TypeGuard[int]:
    # JSON true/false arrive as bool, which Python counts as int.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> TypeGuard[float]:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)


_Rule = tuple[Callable[[object], bool], str]
_SAMPLING_RULES: dict[str, _Rule] = {
    name: (setting.allows, setting.expected) for name, setting in SAMPLING_SETTINGS.items()
}
_VALIDATORS: dict[str, _Rule] = {
    "context_length": (lambda v: _is_int(v) and v > 0, "a positive integer"),
    "n_threads": (lambda v: v is None or (_is_int(v) and v > 0), "a positive integer or null"),
    "gpu_layers": (lambda v: v == "auto" or (_is_int(v) and v >= 0), '"auto" or a number of layers'),
    "default_model": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "hf_endpoint": (lambda v: v is None or isinstance(v, str), "a string or null"),
    "overflow_policy": (lambda v: v in OVERFLOW_POLICIES, " or ".join(f'"{p}"' for p in OVERFLOW_POLICIES)),
    "theme": (lambda v: v in THEMES, " or ".join(f'"{t}"' for t in THEMES)),
    "language": (lambda v: v in LANGUAGES, " or ".join(f'"{t}"' for t in LANGUAGES)),
    "show_thinking": (lambda v: v in THINKING_DISPLAYS, " or ".join(f'"{t}"' for t in THINKING_DISPLAYS)),
    "local_server_enabled": (lambda v: isinstance(v, bool), "true or false"),
    "pdf_pages_as_images": (lambda v: isinstance(v, bool), "true or false"),
    "models_scan_offered": (lambda v: isinstance(v, bool), "true or false"),
    "check_updates_daily": (lambda v: isinstance(v, bool), "true or false"),
    "image_max_side": (lambda v: _is_int(v) and 224 <= v <= 8192, "a number of pixels from 224 to 8192"),
    "local_server_port": (lambda v: _is_int(v) and 1 <= v <= 65535, "a port number from 1 to 65535"),
    "tool_rounds": (lambda v: _is_int(v) and 1 <= v <= 64, "a number of rounds from 1 to 64"),
    "parallel_slots": (
        lambda v: _is_int(v) and 1 <= v <= MAX_PARALLEL_SLOTS,
        f"a number of replies from 1 to {MAX_PARALLEL_SLOTS}",
    ),
    "tool_timeout_s": (lambda v: _is_number(v) and 1 <= v <= 3600, "a number of seconds from 1 to 3600"),
    "model_defaults": (
        lambda v: _valid_model_defaults(v),
        "an object mapping model names to objects of generation settings",
    ),
}
_SETTINGS_FIELDS = {f.name: f for f in dataclasses.fields(Settings)}
_VALIDATORS.update({name: rule for name, rule in _SAMPLING_RULES.items() if name in _SETTINGS_FIELDS})
_FLOAT_FIELDS = {name for name, f in _SETTINGS_FIELDS.items() if isinstance(f.default, float)}
# The sampling parameters Settings holds a global value for.
GLOBAL_SAMPLING = tuple(name for name in SAMPLING_SETTINGS if name in _SETTINGS_FIELDS)

# What a conversation (or a model's defaults) may set for itself; the rest of Settings is machine-wide.
GENERATION_KEYS = (*SAMPLING_SETTINGS, "context_length")
_GENERATION_VALIDATORS: dict[str, _Rule] = {
    **_SAMPLING_RULES,
    "context_length": _VALIDATORS["context_length"],
}


def clean_generation_settings(
    values: Mapping[str, object], *, allow_system_prompt: bool = False
) -> dict[str, Any]:
    """Check settings meant for one conversation or one model; raises HearthError naming the first bad key.

    Float settings given as whole numbers come back as floats. `system_prompt` is accepted only for model
    defaults (a conversation keeps its system prompt in its own column).
    """
    cleaned: dict[str, Any] = {}
    for key, value in values.items():
        if key == "system_prompt" and allow_system_prompt:
            if value is not None and not isinstance(value, str):
                raise HearthError(
                    f"The setting system_prompt should be a string or null, not {type(value).__name__}."
                )
            cleaned[key] = value
            continue
        rule = _GENERATION_VALIDATORS.get(key)
        if rule is None:
            known = ", ".join(GENERATION_KEYS + (("system_prompt",) if allow_system_prompt else ()))
            raise HearthError(f"Unknown setting {key!r}; the settings are {known}.")
        valid, expected = rule
        if not valid(value):
            raise HearthError(f"The setting {key} should be {expected}, not {_shown(value)}.")
        cleaned[key] = float(value) if key in _FLOAT_FIELDS and isinstance(value, int | float) else value
    return cleaned


def _shown(value: object) -> str:
    # Numbers explain a range error; anything else could be long, or a secret pasted into the wrong field.
    if value is None or isinstance(value, bool | int | float):
        return repr(value)
    return f"a {type(value).__name__}"


def _valid_model_defaults(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    for name, defaults in value.items():
        if not isinstance(name, str) or not isinstance(defaults, dict):
            return False
        try:
            clean_generation_settings(defaults, allow_system_prompt=True)
        except HearthError:
            return False
    return True


def load_settings(path: Path) -> Settings:
    """Never fails: a missing file gives defaults, a bad value gives that key's default, a corrupt file is
    kept aside as `<name>.corrupt-<timestamp>` so the user's old settings can still be recovered."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Settings()
    except OSError as exc:
        log.warning("Could not read settings file %s (%s); using defaults", path, exc)
        return Settings()
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        _set_aside(path)
        return Settings()

    version = data.get("schema_version", SCHEMA_VERSION)
    if _is_int(version) and version > SCHEMA_VERSION:
        log.warning(
            "%s was written by a newer Hearth (settings schema %d); settings this version lacks are ignored",
            path,
            version,
        )
    values: dict[str, Any] = {}
    for name, (valid, expected) in _VALIDATORS.items():
        if name not in data:
            continue
        value = data[name]
        if not valid(value):
            # The type, not the value: a hand-edited file could hold anything, including pasted secrets.
            log.warning(
                "Setting %r in %s should be %s, got %s; using the default",
                name,
                path,
                expected,
                type(value).__name__,
            )
            continue
        if name == "model_defaults":
            value = {
                model: clean_generation_settings(d, allow_system_prompt=True) for model, d in value.items()
            }
        values[name] = float(value) if name in _FLOAT_FIELDS else value
    return Settings(**values)


def _set_aside(path: Path) -> None:
    try:
        target = set_aside(path)
    except OSError as exc:
        log.error(
            "Settings file %s is not valid JSON and could not be moved aside (%s); using defaults", path, exc
        )
        return
    log.warning("Settings file %s is not valid JSON; kept it as %s and using defaults", path, target.name)


def read_section(path: Path, key: str, kind: type[list[Any]] | type[dict[str, Any]], what: str) -> Any:
    """The `key` entry of the JSON object in `path` when it is a `kind`, else None: for a file that does not
    exist or cannot be read (logged), and for a damaged one (not JSON, or without that entry), which is set
    aside (set_aside) so what it held can be recovered. `what` names the file's contents in the log."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("could not read %s (%s); no %s are listed", path, exc, what)
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        data = None
    section = data.get(key) if isinstance(data, dict) else None
    if isinstance(section, kind):
        return section
    try:
        kept = set_aside(path)
    except OSError as exc:
        log.error("%s is damaged and could not be moved aside (%s)", path, exc)
    else:
        log.warning("%s is damaged; kept it as %s", path, kept.name)
    return None


def set_aside(path: Path) -> Path:
    """Rename a damaged file to `<name>.corrupt-<timestamp>`, so what it held can still be recovered.

    Returns the new path; raises OSError when the file cannot be renamed.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    counter = 1
    while target.exists():
        counter += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{counter}")
    path.replace(target)
    return target


def save_settings(path: Path, settings: Settings) -> None:
    """Atomic: readers see the old file or the new one, never a torn write, even after a power cut."""
    data = dataclasses.asdict(settings)
    secret_keys = sorted(key for key in data if _SECRET_KEY.search(key))
    if secret_keys:
        raise ValueError(
            f"Refusing to write secret-looking keys {secret_keys} to {path.name}; secrets go in the keyring"
        )
    write_text_atomically(path, json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n")


class SettingsStore:
    """The settings of a running Hearth, held once: the engine, the services and the window read them here,
    and every change goes through `update`, which tells `changed` (saving is one of its listeners)."""

    def __init__(self, settings: Settings) -> None:
        self._current = settings
        self.changed: Event[Settings] = Event()

    @property
    def current(self) -> Settings:
        # A frozen value swapped whole: a worker thread reading it mid-update sees the old or the new one.
        return self._current

    def update(self, **changes: Any) -> Settings:
        """Apply at once (the next turn uses them) and tell the listeners."""
        self._current = dataclasses.replace(self._current, **changes)
        self.changed.emit(self._current)
        return self._current


def write_text_atomically(path: Path, text: str) -> None:
    """Readers see the old file or the new one, never a torn write, even after a power cut."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # mkstemp creates the file 0600 and the rename keeps that mode, so settings, servers and presets are
    # owner-only without a chmod (HearthPaths.ensure makes their folder 0700).
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)
