"""Full-text search over titles and messages (SQLite FTS5), against a real database."""

from __future__ import annotations

import random
import sqlite3
from contextlib import closing

import pytest

import app.conversations.search as search_module
from app.conversations.store import HIT_END, HIT_START, ConversationStore, match_expression
from app.storage.db import Database

SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


def marked(text: str) -> str:
    return text.replace(HIT_START, "[").replace(HIT_END, "]")


def index_is_consistent(db: Database) -> None:
    with closing(sqlite3.connect(db.path)) as conn:
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
        conn.execute("INSERT INTO conversations_fts(conversations_fts) VALUES ('integrity-check')")


def test_titles_first_then_messages_with_marked_snippets(store: ConversationStore) -> None:
    bread = store.create_conversation("Sourdough bread at home")
    question = store.add_message(bread.id, "user", "How long should sourdough bread proof in a cold kitchen?")
    store.add_message(bread.id, "assistant", "In a cold kitchen, give the dough 8 to 12 hours.")
    other = store.create_conversation("Weekend plans")
    answer = store.add_message(other.id, "assistant", "Bake some bread, then walk by the river.")

    hits = store.search("bread")
    assert (hits[0].conversation_id, hits[0].message_id) == (bread.id, None)
    assert marked(hits[0].snippet) == "Sourdough [bread] at home"
    messages = {h.message_id: h for h in hits[1:]}
    assert set(messages) == {question.id, answer.id}
    assert marked(messages[answer.id].snippet) == "Bake some [bread], then walk by the river."
    assert (messages[answer.id].conversation_id, messages[answer.id].title) == (other.id, "Weekend plans")
    assert messages[answer.id].role == "assistant"
    # Every word must occur, in any order.
    assert [h.message_id for h in store.search("kitchen cold")] == [question.id, question.id + 1]
    assert store.search("bread river dough") == []


def test_snippets_of_long_messages_show_the_hit_in_context(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    filler = " ".join(f"word{i}" for i in range(500))
    store.add_message(conversation.id, "assistant", f"{filler} the lighthouse keeper {filler}")
    (hit,) = store.search("lighthouse")
    assert f"{HIT_START}lighthouse{HIT_END}" in hit.snippet
    assert len(hit.snippet) < 250 and hit.snippet.startswith("…") and hit.snippet.endswith("…")


@pytest.mark.parametrize(
    ("query", "finds"),
    [
        ("bread AND", True),  # operators are plain words here: "and" is in the text
        ("NOT", True),
        ('"unbalanced', False),
        ("NEAR(bread", False),  # the phrase "near bread"
        ("(((", False),
        ("*", False),
        ("-bread", True),
        ("content:bread", False),  # not a column filter: the phrase "content bread"
        ("^bread", True),
        ("bread OR", False),
        ("a\"b'c", False),
        ("{}[]", False),
        ("🍞 bread", True),
        ("\x00", False),
        ("   ", False),
        ("", False),
    ],
)
def test_any_text_is_a_valid_query(store: ConversationStore, query: str, finds: bool) -> None:
    conversation = store.create_conversation()
    store.add_message(conversation.id, "user", "bread and butter, not jam")
    assert len(store.search(query)) == finds


def test_random_garbage_never_raises(store: ConversationStore) -> None:
    conversation = store.create_conversation()
    store.add_message(conversation.id, "user", "plain words to search")
    rng = random.Random(7)
    alphabet = "\"'()*:^-+{}[]<>,.;!?&|~ ANDORNEAR\\/\t\n日本語"
    for _ in range(500):
        store.search("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20))))


def test_match_expression_quotes_every_word() -> None:
    assert match_expression("bread AND") == '"bread" "AND"*'
    assert match_expression('say "hi"') == '"say" """hi"""'
    assert match_expression("e-mail c++") == '"e-mail" "c++"'
    assert match_expression(" ( ) ") is None
    assert match_expression("go to") == '"go" "to"'  # two letters: too many words start with them


def test_the_word_being_typed_matches_as_a_prefix_and_accents_are_ignored(store: ConversationStore) -> None:
    conversation = store.create_conversation("Café recipes")
    store.add_message(conversation.id, "user", "My sourdough starter is bubbly")
    assert len(store.search("sourd")) == 1
    assert store.search("sourd starter") == []  # only the last word is a prefix
    assert len(store.search("starter sourd")) == 1
    assert [h.message_id for h in store.search("cafe")] == [None]
    # Text separated by spaces is found in any script; a CJK word must be typed whole or from its start.
    store.add_message(conversation.id, "user", "東京 の 天気 は 晴れ")
    assert len(store.search("天気")) == 1


def test_trash_streaming_renames_and_deletes(store: ConversationStore, db: Database) -> None:
    kept = store.create_conversation("Kept")
    store.add_message(kept.id, "user", "the zebra question")
    trashed = store.create_conversation("Trashed zebra notes")
    store.add_message(trashed.id, "user", "another zebra")
    store.trash_conversation(trashed.id)
    assert {h.conversation_id for h in store.search("zebra")} == {kept.id}
    store.restore_conversation(trashed.id)
    assert {h.conversation_id for h in store.search("zebra")} == {kept.id, trashed.id}

    # A reply is searchable once it stops streaming, not while its text is still changing.
    reply = store.start_assistant_message(kept.id, model_name="m", model_sha256=SHA, sampling={}, seed=None)
    store.flush_streaming_text(reply.id, "a quokka is a small")
    assert store.search("quokka") == []
    store.finish_message(reply.id, content="a quokka is a small marsupial", status="complete")
    assert [h.message_id for h in store.search("quokka")] == [reply.id]

    store.rename_conversation(kept.id, "Animals")
    assert [h.title for h in store.search("animals")] == ["Animals"]
    assert [h.message_id for h in store.search("kept")] == []
    store.delete_message(reply.id)
    assert store.search("quokka") == []
    store.delete_conversation(trashed.id)
    assert {h.conversation_id for h in store.search("zebra")} == {kept.id}
    index_is_consistent(db)


def test_limit(store: ConversationStore) -> None:
    conversation = store.create_conversation("Numbers")
    for i in range(30):
        store.add_message(conversation.id, "user", f"number {i}")
    assert len(store.search("number", limit=10)) == 10
    assert len(store.search("number", limit=100)) == 31  # the title and every message
    assert store.search("number", limit=0) == []


def test_a_very_common_word_ranks_only_the_newest_matches(
    store: ConversationStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(search_module, "RANKED_MATCHES", 5)
    conversation = store.create_conversation()
    oldest = store.add_message(conversation.id, "user", "zebra zebra zebra")
    newer = [
        store.add_message(conversation.id, "user", f"a zebra and {i} other words here") for i in range(8)
    ]
    assert {h.message_id for h in store.search("zebra")} == {m.id for m in newer[-5:]}
    monkeypatch.setattr(search_module, "RANKED_MATCHES", 100)
    assert store.search("zebra")[0].message_id == oldest.id  # the best match, once it is ranked
