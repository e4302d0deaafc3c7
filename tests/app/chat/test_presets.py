"""Presets (shipped and the user's own) and the settings beside them: model defaults, overflow policy."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.chat.presets import SHIPPED_PRESETS, Preset, delete_preset, list_presets, presets_path, save_preset
from app.conversations.store import ConversationStore
from app.errors import HearthError
from app.settings import Settings, clean_generation_settings, load_settings, save_settings
from app.storage.db import Database
from inference.protocol import SamplingParams


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def store(home: Path) -> Iterator[ConversationStore]:
    database = Database.open(home / "hearth.sqlite3", home / "backups")
    yield ConversationStore(database)
    database.dispose()


def names(presets: list[Preset]) -> list[str]:
    return [p.name for p in presets]


def test_shipped_presets_come_first_and_are_marked(home: Path) -> None:
    presets = list_presets(home)
    assert names(presets) == ["Balanced", "Precise", "Creative", "Code"]
    assert all(p.builtin for p in presets)
    assert not presets_path(home).exists()
    # Each one is a valid set of conversation settings.
    for preset in SHIPPED_PRESETS:
        assert clean_generation_settings(preset.settings()) == preset.settings()
    balanced = Settings()
    assert SHIPPED_PRESETS[0].sampling == SamplingParams(
        temperature=balanced.temperature,
        top_p=balanced.top_p,
        top_k=balanced.top_k,
        min_p=balanced.min_p,
        repeat_penalty=balanced.repeat_penalty,
        max_tokens=balanced.max_tokens,
    )


def test_save_replace_and_delete_user_presets(home: Path) -> None:
    mine = Preset(
        "  Story  time ", "Tell stories.", SamplingParams(temperature=1.2, seed=42), context_length=8192
    )
    saved = save_preset(home, mine)
    assert (saved.name, saved.builtin) == ("Story time", False)
    save_preset(home, Preset("alpha", None, SamplingParams()))
    assert names(list_presets(home)) == ["Balanced", "Precise", "Creative", "Code", "alpha", "Story time"]
    (story,) = [p for p in list_presets(home) if p.name == "Story time"]
    assert story == saved
    assert story.settings()["seed"] == 42 and story.settings()["context_length"] == 8192

    save_preset(home, Preset("story TIME", "Shorter stories.", SamplingParams(temperature=0.9)))
    (story,) = [p for p in list_presets(home) if p.name.casefold() == "story time"]
    assert (story.name, story.system_prompt, story.context_length) == ("story TIME", "Shorter stories.", None)

    delete_preset(home, "STORY time")
    assert names(list_presets(home))[4:] == ["alpha"]
    with pytest.raises(HearthError, match="no preset named"):
        delete_preset(home, "Story time")
    data = json.loads(presets_path(home).read_text(encoding="utf-8"))
    assert data["schema_version"] == 1 and [p["name"] for p in data["presets"]] == ["alpha"]


@pytest.mark.parametrize(
    ("preset", "expected"),
    [
        (Preset("Code", None, SamplingParams()), "one of Hearth's own presets"),
        (Preset("  ", None, SamplingParams()), "needs a name"),
        (Preset("x" * 61, None, SamplingParams()), "at most 60"),
        (
            Preset("hot", None, SamplingParams(temperature=-1.0)),
            "temperature should be a number ≥ 0, not -1.0",
        ),
        (
            Preset("wide", None, SamplingParams(), context_length=0),
            "context_length should be a positive integer",
        ),
    ],
)
def test_bad_presets_are_refused(home: Path, preset: Preset, expected: str) -> None:
    with pytest.raises(HearthError, match=expected):
        save_preset(home, preset)
    assert not presets_path(home).exists()


def test_shipped_presets_cannot_be_deleted(home: Path) -> None:
    with pytest.raises(HearthError, match="cannot be deleted"):
        delete_preset(home, "balanced")


def test_a_damaged_file_is_set_aside_and_bad_entries_are_skipped(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home.mkdir(parents=True)
    presets_path(home).write_text("{not json", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="hearth.presets"):
        assert names(list_presets(home)) == ["Balanced", "Precise", "Creative", "Code"]
    kept = [p for p in home.iterdir() if p.name.startswith("presets.json.corrupt-")]
    assert len(kept) == 1 and kept[0].read_text(encoding="utf-8") == "{not json"

    presets_path(home).write_text(
        json.dumps(
            {
                "schema_version": 1,
                "presets": [
                    {"name": "good", "system_prompt": None, "settings": {"top_k": 5}},
                    {"name": "bad", "settings": {"top_p": 7}},
                    {"settings": {}},
                    "nonsense",
                ],
            }
        ),
        encoding="utf-8",
    )
    with caplog.at_level(logging.WARNING, logger="hearth.presets"):
        presets = list_presets(home)
    assert names(presets)[4:] == ["good"] and presets[4].sampling.top_k == 5
    assert sum("left out" in r.getMessage() for r in caplog.records) == 3


def test_a_preset_applied_to_a_conversation(home: Path, store: ConversationStore) -> None:
    conversation = store.create_conversation()
    code = next(p for p in list_presets(home) if p.name == "Code")
    applied = store.set_conversation_settings(conversation.id, code.system_prompt, code.settings())
    assert applied.system_prompt == code.system_prompt
    assert applied.settings is not None and applied.settings["repeat_penalty"] == 1.0
    with pytest.raises(HearthError, match="Unknown setting 'colour'"):
        store.set_conversation_settings(conversation.id, None, {"colour": "blue"})
    assert store.get_conversation(conversation.id).settings == applied.settings
    cleared = store.set_conversation_settings(conversation.id, "  ", {})
    assert (cleared.system_prompt, cleared.settings) == (None, None)


def test_model_defaults_and_overflow_policy_are_saved_and_checked(home: Path) -> None:
    path = home / "settings.json"
    settings = Settings(
        overflow_policy="refuse",
        model_defaults={"SmolLM2": {"temperature": 0.1, "system_prompt": "Be brief.", "seed": None}},
    )
    save_settings(path, settings)
    assert load_settings(path) == settings

    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["model_defaults"]["SmolLM2"]["temperature"] = 1  # whole numbers are read as floats
    path.write_text(json.dumps(raw), encoding="utf-8")
    loaded = load_settings(path)
    assert loaded.model_defaults["SmolLM2"]["temperature"] == 1.0
    assert isinstance(loaded.model_defaults["SmolLM2"]["temperature"], float)

    for bad in ({"m": {"top_p": 5}}, {"m": {"unknown": 1}}, {"m": "fast"}, ["m"]):
        path.write_text(json.dumps({"model_defaults": bad, "overflow_policy": "truncate"}), encoding="utf-8")
        assert dataclasses.asdict(load_settings(path)) == dataclasses.asdict(Settings())
