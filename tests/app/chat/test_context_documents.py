"""The context budget with documents, before Send and after: the meter's plan is the turn's plan (the real
starter model and its tokenizer), files too long to go whole are shown as searched, and a prompt edited
with its files keeps them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.chat.documents import TurnDocuments, prompt_attachments
from app.chat.engine import ChatEngine
from app.core import Core
from app.documents.library import DocumentLibrary
from tests.conftest import starter_name

# The meter plans with the settings' sampling, as the window's turns do: the test's turns take them too.
QUICK = {"temperature": 0.0, "max_tokens": 8}
QUESTION = "What is the keeper's name?"
# The passages framing says "Passages found in …" where the plan made before Send says "Nothing in … matched":
# a few tokens either way.
FRAMING_TOKENS = 8

pytestmark = pytest.mark.model


@pytest.fixture
def documents(core: Core) -> Iterator[DocumentLibrary]:
    library = core.documents()
    yield library
    library.close()


def lighthouse(tmp_path: Path) -> Path:
    notes = tmp_path / "lighthouse.txt"
    notes.write_text(
        "The lighthouse keeper's name is Maren. She rings the bell at dusk and logs every ship.\n" * 4,
        encoding="utf-8",
    )
    return notes


def harbour(tmp_path: Path) -> Path:
    """About 3,000 tokens: more than a 1,024-token context leaves for documents."""
    filler = "The harbour master logs every ship that enters, with its cargo and its crew. " * 6
    paragraphs = [f"Section {n}. {filler}" for n in range(24)]
    paragraphs[17] = "Section 17. The spare key to the lighthouse is kept under the third blue flowerpot."
    report = tmp_path / "harbour.txt"
    report.write_text("\n\n".join(paragraphs), encoding="utf-8")
    return report


def test_a_file_is_counted_before_send_as_the_turn_then_uses_it(
    core: Core, make_engine: Callable[..., ChatEngine], documents: DocumentLibrary, tmp_path: Path
) -> None:
    engine = make_engine(documents=documents, **QUICK)
    name = starter_name(core)
    attached = TurnDocuments((documents.attach(lighthouse(tmp_path)),))

    bare = engine.measure_context(None, QUESTION, name)
    usage = engine.measure_context(None, QUESTION, name, documents=attached)
    assert bare.document_tokens == 0
    assert usage.searched == () and usage.passage_tokens == 0 and not usage.estimated
    # Everything the file adds, its framing included, is counted as documents.
    assert usage.document_tokens == usage.used_tokens - bare.used_tokens > 60
    # A file in the tray counts before anything is typed.
    assert engine.measure_context(None, "", name, documents=attached).document_tokens > 60

    result = engine.run_turn(QUESTION, name, documents=attached)
    assert result.stats is not None
    assert result.stats.prompt_tokens == usage.used_tokens
    (prompt, _reply) = core.store.list_messages(result.conversation_id)
    assert prompt.attachments[0].meta["mode"] == "whole"

    # The next question: the file goes in again whole, and the meter says so.
    follow_up = engine.measure_context(result.conversation_id, "When does she ring the bell?", name)
    assert abs(follow_up.document_tokens - usage.document_tokens) <= 2


def test_a_file_too_long_to_go_whole_is_shown_as_searched_within_the_context(
    core: Core,
    make_engine: Callable[..., ChatEngine],
    documents: DocumentLibrary,
    embedding_model: Path,
    tmp_path: Path,
) -> None:
    engine = make_engine(documents=documents, context_length=1024, **QUICK)
    name = starter_name(core)
    notes, report = documents.attach(lighthouse(tmp_path)), documents.attach(harbour(tmp_path))
    attached = TurnDocuments((notes, report))
    question = "Where is the lighthouse key?"

    usage = engine.measure_context(None, question, name, documents=attached)
    assert usage.searched == ("harbour.txt",)
    # The small file goes whole; the long one's passages may take what is left, and no more.
    assert 0 < usage.passage_tokens < usage.document_tokens
    assert usage.used_tokens + usage.reserve_tokens <= usage.context_tokens == 1024
    assert usage.fits and usage.would_drop_messages == 0

    result = engine.run_turn(question, name, documents=attached)
    assert result.stats is not None and result.stats.prompt_tokens is not None
    modes = {p.name: p.meta["mode"] for p in core.store.list_messages(result.conversation_id)[0].attachments}
    assert modes == {"lighthouse.txt": "whole", "harbour.txt": "retrieved"}
    assert result.stats.prompt_tokens <= usage.used_tokens + FRAMING_TOKENS


def test_an_edited_prompt_keeps_its_files_or_goes_with_those_the_user_left(
    core: Core, make_engine: Callable[..., ChatEngine], documents: DocumentLibrary, tmp_path: Path
) -> None:
    engine = make_engine(documents=documents, **QUICK)
    name = starter_name(core)
    notes = documents.attach(lighthouse(tmp_path))
    first = engine.run_turn(QUESTION, name, documents=TurnDocuments((notes,)))
    (prompt, _reply) = core.store.list_messages(first.conversation_id)
    # What the window puts back in the tray when the prompt is edited.
    kept = prompt_attachments(prompt)
    assert kept == (notes,)

    edited_text = "Who rings the bell at dusk?"
    measured = engine.measure_context(
        first.conversation_id, edited_text, name, documents=TurnDocuments(kept), replacing=prompt.id
    )
    edited = engine.edit(prompt.id, edited_text, name, documents=TurnDocuments(kept))
    assert edited.stats is not None and edited.stats.prompt_tokens == measured.used_tokens
    new_prompt = core.store.get_message(edited.user_message_id)
    assert new_prompt.id != prompt.id and new_prompt.parent_id == prompt.parent_id
    assert new_prompt.sibling_count == 2 and new_prompt.content == edited_text
    assert [(p.name, p.file_sha256, p.mime_type, p.meta["mode"]) for p in new_prompt.attachments] == [
        ("lighthouse.txt", notes.sha256, "text/plain", "whole")
    ]

    # The user took the file off: the next version goes without it, the earlier ones keep theirs.
    bare = engine.edit(prompt.id, "Say hello.", name)
    assert core.store.get_message(bare.user_message_id).attachments == ()
    assert core.store.get_message(prompt.id).attachments == prompt.attachments
