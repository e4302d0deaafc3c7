"""An image for an installed model, through the engine the window uses: refused before anything is stored
or loaded, with the sentence that says which model can see; the conversation is as it was."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from PIL import Image

from app.chat.documents import TurnDocuments
from app.chat.engine import ChatEngine
from app.core import Core
from app.errors import HearthError
from app.settings import SettingsStore
from tests.conftest import starter_name


def test_an_image_for_a_text_only_model_is_refused_before_anything_is_stored(
    core: Core, tmp_path: Path
) -> None:
    documents = core.documents()
    engine = ChatEngine(
        core.store,
        core.library,
        SettingsStore(dataclasses.replace(core.settings)),
        runner_log=core.paths.runner_log_file,
        documents=documents,
    )
    try:
        picture = tmp_path / "chart.png"
        Image.new("RGB", (40, 30), "navy").save(picture)
        attached = documents.attach(picture)
        assert (attached.kind, attached.mime_type, attached.pages) == ("image", "image/png", None)
        with pytest.raises(HearthError, match=r"can't see images \(chart\.png\): it is a text-only model"):
            engine.run_turn("What does it show?", starter_name(core), documents=TurnDocuments((attached,)))
        assert core.store.list_conversations() == []
        assert engine.loaded is None, "nothing was loaded for a turn that could not happen"
    finally:
        engine.close()
        documents.close()
