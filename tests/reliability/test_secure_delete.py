"""Deleting a conversation (or a message) leaves none of its text in the database file, its write-ahead
log or the full-text index, while the database is still open as it is in the running app."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import text

from app.conversations.store import ConversationStore
from app.storage.db import Database
from tests.reliability.conftest import RecordFault, messages_missing

CATEGORY = "Conversations"

SAMPLING = {"temperature": 0.7, "top_p": 0.95, "max_tokens": 256, "seed": None}
SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
HOW = {
    "delete": "conversation deleted",
    "trash-then-purge": "conversation trashed, then the trash emptied",
    "delete-message": "message deleted, conversation renamed",
}


def search_index_bytes(db: Database) -> bytes:
    """Everything the FTS5 shadow tables hold: terms and positions, not the text itself."""
    with db.read_session() as session:
        blobs = session.execute(
            text("SELECT block FROM messages_fts_data UNION ALL SELECT block FROM conversations_fts_data")
        ).scalars()
        return b"".join(bytes(b) for b in blobs if b is not None)


@pytest.mark.parametrize("how", ["delete", "trash-then-purge", "delete-message"])
def test_deleted_text_is_gone_from_the_database_and_wal_files(
    store: ConversationStore, db: Database, how: str, fault: RecordFault
) -> None:
    secret = uuid.uuid4().hex  # one search term (the tokenizer splits "SECRET-…" at the dash)
    marker = f"SECRET-{secret}"
    keep = store.create_conversation("unrelated")
    store.add_message(keep.id, "user", "nothing to see")
    conversation = store.create_conversation(f"title {marker}", system_prompt=f"system {marker}")
    first = store.add_message(conversation.id, "user", f"short {marker}")
    # Long enough to spill into overflow pages.
    store.add_message(conversation.id, "user", f"long {marker} " * 2000)
    reply = store.start_assistant_message(
        conversation.id, model_name="m", model_sha256=SHA, sampling=SAMPLING, seed=None
    )
    for n in range(1, 6):
        store.flush_streaming_text(reply.id, f"streaming {marker} " * n)
    store.finish_message(
        reply.id, content=f"final {marker}", status="complete", reasoning=f"thinking about {marker}"
    )
    # An alternative reply on another branch, and many more index segments after the secret's.
    store.start_assistant_message(
        conversation.id, model_name="m", model_sha256=SHA, sampling=SAMPLING, seed=None, parent_id=first.id
    )
    for i in range(50):
        store.add_message(keep.id, "user", f"later message {i} {uuid.uuid4().hex}")

    wal = Path(f"{db.path}-wal")
    needle = secret.encode()
    assert needle in db.path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    assert needle in search_index_bytes(db), "the test must see the secret in the search index first"
    assert {h.conversation_id for h in store.search(secret)} == {conversation.id}

    # What must survive: every message of the other conversations (all of this one's hold the secret).
    def kept() -> list[tuple[int, str]]:
        others = [c for c in store.list_conversations() if c.id != conversation.id]
        return [(m.id, m.content) for c in others for m in store.list_all_messages(c.id)]

    before = kept()
    if how == "delete":
        store.delete_conversation(conversation.id)
    elif how == "trash-then-purge":
        store.trash_conversation(conversation.id)
        assert store.search(secret) == []
        assert store.purge_trashed() == 1
    else:
        store.rename_conversation(conversation.id, "renamed")
        store.set_conversation_settings(conversation.id, None, {})
        store.delete_message(first.id)

    missing = messages_missing(before, kept())
    fault(
        CATEGORY,
        f"secure delete ({HOW[how]})",
        trials=1,
        outcome="no deleted text left in the database, its WAL or the search index; nothing else deleted",
        lost={"messages": missing},
    )
    assert missing == 0
    # Checked while the database is still open, as it would be in the running app.
    assert needle not in search_index_bytes(db)
    assert needle not in db.path.read_bytes()
    assert not wal.exists() or needle not in wal.read_bytes()
    assert store.search(secret) == []
    assert store.list_messages(keep.id)[0].content == "nothing to see"
