"""Settings file: typed values, defaults for anything bad, corrupt files kept, atomic writes, no secrets."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from app.chat.engine import ChatEngine
from app.core import Core
from app.errors import HearthError
from app.paths import HearthPaths
from app.settings import (
    _VALIDATORS,
    SCHEMA_VERSION,
    Settings,
    SettingsStore,
    clean_generation_settings,
    load_settings,
    save_settings,
)


@pytest.fixture
def settings_path(tmp_path: Path) -> Path:
    return HearthPaths(tmp_path / "home").ensure().settings_path


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data), encoding="utf-8")


def test_every_setting_is_validated_on_load() -> None:
    # A field without a validator would be silently reset to its default on every start.
    assert set(_VALIDATORS) == {f.name for f in dataclasses.fields(Settings)} - {"schema_version"}


def test_missing_file_gives_defaults_and_creates_nothing(settings_path: Path) -> None:
    assert load_settings(settings_path) == Settings()
    assert not settings_path.exists()


@pytest.mark.parametrize(
    "settings",
    [
        Settings(),
        Settings(
            context_length=8192,
            n_threads=6,
            gpu_layers=20,
            default_model="smollm2-135m",
            temperature=0.2,
            top_p=0.9,
            top_k=0,
            min_p=0.0,
            repeat_penalty=1.3,
            max_tokens=2048,
            hf_endpoint="https://hf-mirror.example",
        ),
    ],
)
def test_round_trip(settings_path: Path, settings: Settings) -> None:
    save_settings(settings_path, settings)

    assert load_settings(settings_path) == settings
    stored = json.loads(settings_path.read_text(encoding="utf-8"))
    assert stored["schema_version"] == SCHEMA_VERSION
    assert set(stored) == {f.name for f in dataclasses.fields(Settings)}


def test_partial_file_keeps_defaults_for_missing_keys_and_ignores_unknown_ones(settings_path: Path) -> None:
    write_json(settings_path, {"temperature": 0.3, "window_geometry": [1, 2, 3], "schema_version": 1})

    assert load_settings(settings_path) == Settings(temperature=0.3)


def test_integer_for_a_float_setting_is_read_as_float(settings_path: Path) -> None:
    write_json(settings_path, {"temperature": 1, "repeat_penalty": 2})

    loaded = load_settings(settings_path)

    assert (loaded.temperature, loaded.repeat_penalty) == (1.0, 2.0)
    assert isinstance(loaded.temperature, float)


@pytest.mark.parametrize(
    ("key", "bad"),
    [
        ("context_length", "4096"),
        ("context_length", True),
        ("context_length", 0),
        ("context_length", 4096.0),
        ("n_threads", -2),
        ("gpu_layers", "all"),
        ("gpu_layers", -1),
        ("gpu_layers", None),
        ("default_model", 3),
        ("temperature", "hot"),
        ("temperature", -0.5),
        ("temperature", None),
        ("top_p", 1.5),
        ("top_p", 0),
        ("top_k", 2.5),
        ("min_p", [0.1]),
        ("repeat_penalty", 0),
        ("max_tokens", {"n": 1}),
        ("hf_endpoint", False),
    ],
)
def test_wrong_type_or_range_falls_back_to_that_keys_default(
    settings_path: Path, caplog: pytest.LogCaptureFixture, key: str, bad: object
) -> None:
    other = "top_k" if key == "max_tokens" else "max_tokens"
    write_json(settings_path, {key: bad, other: 7})

    with caplog.at_level(logging.WARNING, logger="hearth.settings"):
        loaded = load_settings(settings_path)

    assert getattr(loaded, key) == getattr(Settings(), key)
    assert getattr(loaded, other) == 7
    assert any(key in record.getMessage() for record in caplog.records)


@pytest.mark.parametrize(
    ("key", "value", "allowed"),
    [
        ("temperature", 0, True),
        ("temperature", -0.01, False),
        ("top_p", 1, True),
        ("top_p", 0.0, False),
        ("top_k", 0, True),
        ("top_k", 40.0, False),
        ("min_p", 0, True),
        ("min_p", 1.0, True),
        ("min_p", 1.01, False),
        ("repeat_penalty", 0.01, True),
        ("repeat_penalty", 0, False),
        ("seed", None, True),
        ("seed", 2**32 - 1, True),
        ("seed", 2**32, False),
        ("seed", -1, False),
        ("seed", True, False),
        ("max_tokens", 1, True),
        ("max_tokens", 0, False),
        ("max_tokens", None, False),
    ],
)
def test_a_conversations_sampling_settings_have_the_bounds_of_the_global_ones(
    key: str, value: object, allowed: bool
) -> None:
    if allowed:
        assert clean_generation_settings({key: value}) == {key: value}
    else:
        with pytest.raises(HearthError, match=f"The setting {key} should be "):
            clean_generation_settings({key: value})


def test_non_finite_numbers_are_rejected(settings_path: Path) -> None:
    settings_path.write_text('{"temperature": NaN, "top_p": Infinity}', encoding="utf-8")

    loaded = load_settings(settings_path)

    assert (loaded.temperature, loaded.top_p) == (Settings().temperature, Settings().top_p)


def test_warning_names_the_type_not_the_value(settings_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pasted = "hf_pastedByMistakeIntoTheWrongField123"
    write_json(settings_path, {"context_length": pasted})

    with caplog.at_level(logging.DEBUG):
        load_settings(settings_path)

    assert pasted not in caplog.text
    assert "got str" in caplog.text


@pytest.mark.parametrize(
    "content",
    [b'{"temperature": 0.5,', b"[1, 2, 3]", b'"just a string"', b"\xff\xfe\x00garbage", b"", b"[" * 100_000],
)
def test_corrupt_file_is_kept_aside_and_defaults_used(
    settings_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    settings_path.write_bytes(content)

    with caplog.at_level(logging.WARNING, logger="hearth.settings"):
        loaded = load_settings(settings_path)

    assert loaded == Settings()
    assert not settings_path.exists()
    (kept,) = settings_path.parent.glob("settings.json.corrupt-*")
    assert kept.read_bytes() == content
    assert kept.name in caplog.text


def test_two_corrupt_files_in_the_same_second_are_both_kept(settings_path: Path) -> None:
    for content in (b"{broken one", b"{broken two"):
        settings_path.write_bytes(content)
        load_settings(settings_path)

    kept = sorted(path.read_bytes() for path in settings_path.parent.glob("settings.json.corrupt-*"))
    assert kept == [b"{broken one", b"{broken two"]


def test_corrupt_file_that_cannot_be_moved_is_left_in_place(
    settings_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settings_path.write_bytes(b"{broken")

    def refuse(self: Path, target: Path) -> Path:
        raise PermissionError("read-only directory")

    monkeypatch.setattr(Path, "replace", refuse)
    with caplog.at_level(logging.ERROR, logger="hearth.settings"):
        assert load_settings(settings_path) == Settings()

    assert settings_path.read_bytes() == b"{broken"
    assert "could not be moved aside" in caplog.text


def test_unreadable_file_gives_defaults(settings_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    settings_path.mkdir()  # reading a directory raises IsADirectoryError/PermissionError, both OSError

    with caplog.at_level(logging.WARNING, logger="hearth.settings"):
        assert load_settings(settings_path) == Settings()

    assert "Could not read settings file" in caplog.text


def test_file_from_a_newer_version_keeps_known_values(
    settings_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_json(settings_path, {"schema_version": SCHEMA_VERSION + 1, "top_k": 12, "new_thing": "x"})

    with caplog.at_level(logging.WARNING, logger="hearth.settings"):
        loaded = load_settings(settings_path)

    assert loaded == Settings(top_k=12)
    assert "newer Hearth" in caplog.text


@pytest.mark.parametrize(
    "key", ["hf_token", "api_key", "openai_api_key", "apikey", "password", "client_secret"]
)
def test_refuses_to_write_secret_looking_keys(settings_path: Path, key: str) -> None:
    value = "hf_abcdefghijklmnopqrstuvwxyz0123"
    leaky = dataclasses.make_dataclass(
        "LeakySettings", [(key, str, dataclasses.field(default=value))], bases=(Settings,), frozen=True
    )

    with pytest.raises(ValueError, match=key) as raised:
        save_settings(settings_path, leaky())

    assert value not in str(raised.value)
    assert [p.name for p in settings_path.parent.iterdir() if p.is_file()] == []


def test_existing_keys_are_not_mistaken_for_secrets(settings_path: Path) -> None:
    # max_tokens contains "token" but is a generation length.
    save_settings(settings_path, Settings(max_tokens=12))

    assert load_settings(settings_path).max_tokens == 12


def test_save_is_atomic_and_leaves_no_temp_files(settings_path: Path) -> None:
    save_settings(settings_path, Settings(top_k=1))
    save_settings(settings_path, Settings(top_k=2))

    assert load_settings(settings_path).top_k == 2
    assert sorted(p.name for p in settings_path.parent.iterdir() if p.is_file()) == ["settings.json"]


def test_failed_save_keeps_the_old_file_and_removes_the_temp_file(
    settings_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    save_settings(settings_path, Settings(top_k=1))
    before = settings_path.read_bytes()

    def disk_full(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_settings(settings_path, Settings(top_k=2))

    assert settings_path.read_bytes() == before
    assert sorted(p.name for p in settings_path.parent.iterdir() if p.is_file()) == ["settings.json"]


def test_save_creates_the_home_directory(tmp_path: Path) -> None:
    path = HearthPaths(tmp_path / "fresh").settings_path

    save_settings(path, Settings(context_length=2048))

    assert load_settings(path).context_length == 2048


def test_the_settings_store_swaps_the_value_whole_and_says_so() -> None:
    store = SettingsStore(Settings())
    before = store.current
    seen: list[Settings] = []
    store.changed.connect(seen.append)

    after = store.update(theme="dark", max_tokens=7)

    assert store.current is after and seen == [after]
    assert (after.theme, after.max_tokens) == ("dark", 7)
    assert (before.theme, before.max_tokens) == ("system", 1024)


def test_the_core_and_the_engine_read_the_one_store(core: Core) -> None:
    engine = ChatEngine(core.store, core.library, core.settings_store, runner_log=core.paths.runner_log_file)
    try:
        core.settings_store.update(max_tokens=7, overflow_policy="refuse")
        assert core.settings is engine.settings is core.settings_store.current
        assert engine.default_sampling().max_tokens == 7
    finally:
        engine.close()
