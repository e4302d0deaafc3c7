"""The user's own model folders, kept in the Hearth home."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.errors import HearthError
from app.model_scan import add_folder, list_folders, remove_folder
from app.model_scan.folders import folders_path


def test_add_list_remove_round_trip(tmp_path: Path) -> None:
    home = tmp_path / "hearth"
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()

    assert list_folders(home) == []
    assert add_folder(home, first) == first.resolve()
    add_folder(home, second)
    add_folder(home, first)  # listed already: nothing changes
    assert list_folders(home) == [first.resolve(), second.resolve()]
    assert json.loads(folders_path(home).read_text())["folders"] == [
        str(first.resolve()),
        str(second.resolve()),
    ]

    assert remove_folder(home, first) == first.resolve()
    assert list_folders(home) == [second.resolve()]
    assert first.is_dir()  # only forgotten
    with pytest.raises(HearthError, match="is not one of the model folders"):
        remove_folder(home, first)


def test_a_folder_that_does_not_exist_cannot_be_added(tmp_path: Path) -> None:
    with pytest.raises(HearthError, match="is not a folder"):
        add_folder(tmp_path / "hearth", tmp_path / "nope")
    assert list_folders(tmp_path / "hearth") == []


def test_a_damaged_file_is_set_aside(tmp_path: Path) -> None:
    home = tmp_path / "hearth"
    home.mkdir()
    folders_path(home).write_text("{broken")
    assert list_folders(home) == []
    assert [p.name.startswith("model-folders.json.corrupt-") for p in home.iterdir()] == [True]
