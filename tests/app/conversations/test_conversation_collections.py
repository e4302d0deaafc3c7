"""The collections a conversation answers from, stored with it (migration 0006): kept in the order chosen,
read back with the conversation and its list, and gone with the collection or the conversation."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from app.conversations.store import ConversationStore
from app.documents.collections import CollectionStore
from app.documents.index import ChunkIndex
from app.errors import ConversationNotFound
from app.storage.db import Database


@pytest.fixture
def collections(db: Database, tmp_path: Path) -> CollectionStore:
    notes = tmp_path / "notes"
    notes.mkdir()
    made = CollectionStore(db, ChunkIndex(db))
    for name in ("handbook", "tides", "recipes"):
        made.create(name, [notes])
    return made


def test_the_choice_is_stored_in_order_and_read_with_the_conversation_and_the_list(
    store: ConversationStore, collections: CollectionStore
) -> None:
    chat = store.create_conversation("Keys")
    other = store.create_conversation("Other")
    saved = store.set_conversation_collections(chat.id, ["tides", "handbook", "tides"])
    assert saved.collections == ("tides", "handbook")
    assert store.get_conversation(chat.id).collections == ("tides", "handbook")
    listed = {c.id: c.collections for c in store.list_conversations()}
    assert listed == {chat.id: ("tides", "handbook"), other.id: ()}

    # A new choice replaces the old one whole; none clears it.
    assert store.set_conversation_collections(chat.id, ["recipes"]).collections == ("recipes",)
    assert store.set_conversation_collections(chat.id, []).collections == ()


def test_a_collection_removed_leaves_the_chats_that_answered_from_it(
    store: ConversationStore, collections: CollectionStore, db: Database
) -> None:
    chat = store.create_conversation("Keys")
    store.set_conversation_collections(chat.id, ["handbook", "tides"])
    collections.remove("handbook")
    assert store.get_conversation(chat.id).collections == ("tides",)
    # A name that no longer exists (removed while the choice was being made) is left out, not an error.
    assert store.set_conversation_collections(chat.id, ["handbook", "tides"]).collections == ("tides",)

    store.delete_conversation(chat.id)
    with db.read_session() as session:
        assert session.execute(text("SELECT count(*) FROM conversation_collections")).scalar_one() == 0


def test_choosing_for_a_conversation_that_is_gone_says_so(
    store: ConversationStore, collections: CollectionStore
) -> None:
    chat = store.create_conversation("Keys")
    store.delete_conversation(chat.id)
    with pytest.raises(ConversationNotFound):
        store.set_conversation_collections(chat.id, ["tides"])
