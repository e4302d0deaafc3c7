"""Bar P11's other half: an attachment that fits the context is extracted once, when it is attached, and
Send reads the stored text; nothing is chunked or embedded for it, on the first turn or a follow-up.

Counted by wrapping the document library's own extract / chunk functions (the real ones still run), with
the real starter model answering."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import app.documents.library as library_module
from app.chat.documents import TurnDocuments
from app.chat.engine import ChatEngine
from app.core import Core
from app.documents.index import IndexCounts
from app.settings import SettingsStore
from inference.protocol import ChatMessage, SamplingParams
from tests.conftest import starter_name
from tests.helpers.document_files import pdf_bytes

PAGES = [
    ["Harbour report, page one.", "The north pier was rebuilt in the spring."],
    ["Page two.", "Ferry traffic rose by a fifth over the summer."],
    ["Page three.", "The lighthouse keeper retired in October."],
]
SAMPLING = SamplingParams(temperature=0.0, max_tokens=4, seed=1)


def counting(calls: Counter[str], name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return function(*args, **kwargs)

    return counted


@pytest.mark.model
def test_an_attachment_that_fits_is_extracted_once_and_never_embedded(
    core: Core, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: Counter[str] = Counter()
    for name in ("extract", "extract_bytes", "chunk"):
        monkeypatch.setattr(library_module, name, counting(calls, name, getattr(library_module, name)))
    documents = core.documents()
    engine = ChatEngine(
        core.store,
        core.library,
        SettingsStore(dataclasses.replace(core.settings, temperature=0.0)),
        runner_log=core.paths.runner_log_file,
        documents=documents,
    )
    try:
        pdf = tmp_path / "harbour.pdf"
        pdf.write_bytes(pdf_bytes(PAGES))
        attached = documents.attach(pdf)
        assert calls == Counter(extract=1)

        first = engine.run_turn(
            "When was the pier rebuilt?",
            starter_name(core),
            sampling=SAMPLING,
            documents=TurnDocuments((attached,)),
        )
        follow_up = engine.run_turn(
            "And the lighthouse keeper?",
            starter_name(core),
            conversation_id=first.conversation_id,
            sampling=SAMPLING,
        )
        text = documents.attached_text(attached.name, attached.sha256).text
        text_tokens = engine.client.count_tokens((ChatMessage("user", text),)).n_tokens
    finally:
        engine.close()
        documents.close()

    # Send read the text stored at attach time, for the turn and again for the follow-up's history.
    assert calls == Counter(extract=1)
    assert documents.index.counts() == IndexCounts(contents=0, chunks=0, embedded=0)
    user = next(m for m in core.store.list_messages(first.conversation_id) if m.role == "user")
    assert [part.meta["mode"] for part in user.attachments] == ["whole"]
    # The whole text went to the model both times: the first prompt holds it, the follow-up's again.
    assert "pier was rebuilt" in text and "lighthouse keeper retired" in text
    assert first.stats is not None and first.stats.prompt_tokens is not None
    assert follow_up.stats is not None and follow_up.stats.prompt_tokens is not None
    assert first.stats.prompt_tokens > text_tokens
    assert follow_up.stats.prompt_tokens > first.stats.prompt_tokens + first.stats.completion_tokens
