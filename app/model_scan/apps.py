"""Where LM Studio, GPT4All and Jan keep model files: plain folders of `.gguf` files, found by walking.

Assumed layouts (from these apps' documentation and their files on disk; none publishes a stable spec):
- LM Studio: `~/.lmstudio/models/<publisher>/<repo>/<file>.gguf` (before 0.3: `~/.cache/lm-studio/models`);
  `~/.lmstudio-home-pointer` names a moved `.lmstudio`; the folder chosen in its settings is
  `downloadsFolder` in `settings.json`, in `~/.lmstudio` or in its app data folder.
- GPT4All: its data folder (`~/.local/share/nomic.ai/GPT4All` on Linux, `~/Library/Application Support/
  nomic.ai/GPT4All` on macOS, `%LOCALAPPDATA%\\nomic.ai\\GPT4All` on Windows), or `modelPath` in
  `~/.config/nomic.ai/GPT4All.ini`.
- Jan: `~/jan/models` (before 0.5), `<data>/models` (0.5) and `<data>/llamacpp/models/<id>/model.gguf`
  (0.6), the data folder being `Jan/data` in the platform's config or data folder.
"""

from __future__ import annotations

import configparser
import json
import sys
from collections.abc import Mapping
from pathlib import Path

from app.model_scan.candidates import GPT4ALL, JAN, LMSTUDIO, Location


def lmstudio_folders(home: Path, environ: Mapping[str, str]) -> list[Path]:
    lmstudio_home = home / ".lmstudio"
    pointer = _first_line(home / ".lmstudio-home-pointer")
    if pointer:
        lmstudio_home = Path(pointer).expanduser()
    folders = [lmstudio_home / "models", home / ".cache" / "lm-studio" / "models"]
    app_settings = _app_data(home, environ) / "LM Studio" / "settings.json"
    for settings in (lmstudio_home / "settings.json", app_settings):
        chosen = _json_string(settings, "downloadsFolder")
        if chosen:
            folders.append(Path(chosen).expanduser())
    return folders


def gpt4all_folders(home: Path, environ: Mapping[str, str]) -> list[Path]:
    if sys.platform == "win32":
        data = Path(environ.get("LOCALAPPDATA") or home / "AppData" / "Local")
    elif sys.platform == "darwin":
        data = home / "Library" / "Application Support"
    else:
        data = Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    folders = [data / "nomic.ai" / "GPT4All"]
    chosen = _ini_value(_config_home(home, environ) / "nomic.ai" / "GPT4All.ini", "modelPath")
    if chosen:
        folders.append(Path(chosen).expanduser())
    return folders


def jan_folders(home: Path, environ: Mapping[str, str]) -> list[Path]:
    data_folders = [_app_data(home, environ) / "Jan" / "data"]
    if not sys.platform.startswith(("win", "darwin")):
        data_folders.append(Path(environ.get("XDG_DATA_HOME") or home / ".local" / "share") / "Jan" / "data")
    folders = [home / "jan" / "models"]
    for data in data_folders:
        folders += [data / "models", data / "llamacpp" / "models"]
    return folders


def folder_apps(home: Path, environ: Mapping[str, str]) -> list[Location]:
    """Every folder these apps may use, whether it exists or not."""
    found: list[Location] = []
    for app, folders in (
        (LMSTUDIO, lmstudio_folders(home, environ)),
        (GPT4ALL, gpt4all_folders(home, environ)),
        (JAN, jan_folders(home, environ)),
    ):
        found += [Location(app, folder) for folder in _unique(folders)]
    return found


def _unique(folders: list[Path]) -> list[Path]:
    seen: set[Path] = set()
    kept = []
    for folder in folders:
        key = folder.absolute()
        if key not in seen:
            seen.add(key)
            kept.append(folder)
    return kept


def _app_data(home: Path, environ: Mapping[str, str]) -> Path:
    """Where Electron and Tauri apps keep their settings: APPDATA, Application Support, ~/.config."""
    if sys.platform == "win32":
        return Path(environ.get("APPDATA") or home / "AppData" / "Roaming")
    if sys.platform == "darwin":
        return home / "Library" / "Application Support"
    return _config_home(home, environ)


def _config_home(home: Path, environ: Mapping[str, str]) -> Path:
    return Path(environ.get("XDG_CONFIG_HOME") or home / ".config")


def _first_line(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return text.strip().splitlines()[0].strip() if text.strip() else None


def _json_string(path: Path, key: str) -> str | None:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return None
    value = data.get(key) if isinstance(data, dict) else None
    return value if isinstance(value, str) and value.strip() else None


def _ini_value(path: Path, key: str) -> str | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(path.read_text(encoding="utf-8", errors="replace"))
    except (OSError, configparser.Error):
        return None
    for section in parser.sections():
        value = parser.get(section, key, fallback=None)
        if value and value.strip():
            return value.strip().strip('"')
    return None
