"""Export (Markdown, JSON, all at once) and import (Hearth JSON v1/v2, ChatGPT's conversations.json)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from app.conversations.importers import AUDIO_PLACEHOLDER, IMAGE_PLACEHOLDER
from app.conversations.store import ConversationStore, Message
from app.errors import HearthError

SHA = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
CHATGPT_SAMPLE = Path(__file__).parents[2] / "data" / "chatgpt_conversations.json"


def branched_conversation(store: ConversationStore) -> int:
    """Two alternative replies, an edited prompt, provenance, settings, a pin: everything export keeps."""
    conversation = store.create_conversation("Trip to Kyoto 京都", system_prompt="You are a travel guide.")
    store.set_conversation_settings(
        conversation.id, "You are a travel guide.", {"temperature": 0.3, "context_length": 2048}
    )
    store.set_pinned(conversation.id, True)
    question = store.add_message(conversation.id, "user", "Where should I stay?")
    for text, note in (
        ("Gion, near the temples.", None),
        ("Near Kyoto Station.", "2 earlier messages were left out"),
    ):
        reply = store.start_assistant_message(
            conversation.id,
            model_name="SmolLM2",
            model_sha256=SHA,
            sampling={"temperature": 0.3},
            seed=11,
            parent_id=question.id,
            template="gguf",
            quantization="Q4_1",
            context_note=note,
        )
        store.finish_message(reply.id, content=text, status="complete", prompt_tokens=30, ttft_ms=12.5)
    store.add_message(conversation.id, "user", "What about food? 🍜")
    store.add_message(conversation.id, "user", "Where should I stay on a budget?", parent_id=None)
    store.switch_to(question.id)
    return conversation.id


def shape(messages: list[Message]) -> list[tuple[object, ...]]:
    """The tree with ids replaced by positions, so two copies of it compare equal."""
    index = {m.id: i for i, m in enumerate(messages)}
    return [
        (
            index.get(m.parent_id) if m.parent_id is not None else None,
            m.role,
            m.content,
            m.status,
            m.sibling_index,
            m.sibling_count,
            m.model_sha256,
            m.template,
            m.quantization,
            m.context_note,
            m.seed,
            m.sampling,
            m.prompt_tokens,
            m.ttft_ms,
        )
        for m in messages
    ]


def test_json_export_round_trips_the_whole_tree(store: ConversationStore, tmp_path: Path) -> None:
    original = branched_conversation(store)
    exported = tmp_path / "kyoto.json"
    exported.write_text(json.dumps(store.export_json(original)), encoding="utf-8")

    report = store.import_file(exported)
    assert (report.conversations, report.messages, report.skipped, report.source) == (1, 5, 0, "hearth")
    (copy_id,) = report.conversation_ids
    assert copy_id != original
    before, after = store.get_conversation(original), store.get_conversation(copy_id)
    assert (after.title, after.system_prompt, after.settings, after.pinned) == (
        before.title,
        before.system_prompt,
        before.settings,
        before.pinned,
    )
    assert after.created_at == before.created_at and after.message_count == 5
    assert shape(store.list_all_messages(copy_id)) == shape(store.list_all_messages(original))
    # The branch that was showing is the one showing after the import.
    assert [m.content for m in store.list_messages(copy_id)] == [
        m.content for m in store.list_messages(original)
    ]
    assert store.export_markdown(copy_id) == store.export_markdown(original)


def test_version_1_files_import_as_a_chain(store: ConversationStore, tmp_path: Path) -> None:
    old = tmp_path / "v1.json"
    old.write_text(
        json.dumps(
            {
                "format": "hearth.conversation",
                "version": 1,
                "conversation": {
                    "id": 7,
                    "title": "Old export",
                    "system_prompt": None,
                    "model_name": "m",
                    "created_at": "2025-01-02T03:04:05.000006+00:00",
                    "updated_at": "2025-01-02T03:05:00+00:00",
                },
                "messages": [
                    {
                        "id": 3,
                        "role": "user",
                        "content": "hi",
                        "status": "complete",
                        "created_at": "2025-01-02T03:04:05+00:00",
                    },
                    {
                        "id": 4,
                        "role": "assistant",
                        "content": "hello",
                        "status": "streaming",
                        "created_at": "2025-01-02T03:04:06",
                    },
                ],
            }
        ),
        encoding="utf-8",
    )
    report = store.import_file(old)
    (conversation_id,) = report.conversation_ids
    messages = store.list_messages(conversation_id)
    assert [(m.role, m.content, m.status) for m in messages] == [
        ("user", "hi", "complete"),
        ("assistant", "hello", "interrupted"),  # nothing is streaming into an imported reply
    ]
    assert messages[1].parent_id == messages[0].id
    assert messages[1].created_at == datetime(2025, 1, 2, 3, 4, 6, tzinfo=UTC)  # no offset: taken as UTC


def test_chatgpt_export_keeps_branches_and_leaves_out_what_was_never_shown(
    store: ConversationStore,
) -> None:
    report = store.import_file(CHATGPT_SAMPLE)
    assert report.source == "chatgpt"
    assert (report.conversations, report.messages, report.skipped, report.skipped_conversations) == (
        3,
        11,
        7,
        1,
    )
    starter, chart, voice = (store.get_conversation(i) for i in report.conversation_ids)

    # Regenerated reply and edited prompt: both alternatives kept, oldest first; the branch on screen in
    # ChatGPT (current_node) is the one shown.
    assert starter.title == "Sourdough starter smells like acetone"
    assert starter.created_at == datetime.fromtimestamp(1712345678.123456, UTC)
    shown = store.list_messages(starter.id)
    assert [(m.role, m.sibling_index, m.sibling_count) for m in shown] == [
        ("user", 1, 1),
        ("assistant", 2, 2),
        ("user", 2, 2),
        ("assistant", 1, 1),
    ]
    assert shown[0].content == "My sourdough starter smells like nail polish remover. Is it dead?"
    assert shown[1].content.startswith("No! An acetone smell") and shown[1].model_name == "gpt-4o"
    assert shown[3].content.startswith("Once a week is enough in the fridge.")
    other = store.switch_to(store.siblings(shown[2].id)[0].id)
    assert [m.content for m in other][2:] == [
        "How often should I feed it? 🍞",
        "Twice a day at room temperature. 一日两次 is the usual rhythm for a young starter.",
    ]
    assert store.siblings(shown[1].id)[0].content.startswith("Not dead")
    # The hidden custom instructions and the system message are not part of the chat.
    assert all("weekends" not in m.content for m in store.list_all_messages(starter.id))

    # The image is named, not lost silently; the code-interpreter call and its output are left out and the
    # final answer follows the prompt directly.
    prompt, answer = store.list_messages(chart.id)
    assert prompt.content.startswith(f"{IMAGE_PLACEHOLDER}\n\nWhat does this chart show?")
    assert answer.parent_id == prompt.id and answer.content.startswith("Sales fell from 120")

    question, spoken = store.list_messages(voice.id)
    assert question.content == f"Bonjour, comment dit-on « merci » en arabe ?\n\n{AUDIO_PLACEHOLDER}"
    assert spoken.content == "On dit « شكرا » (shukran)."
    assert "New chat" not in [c.title for c in store.list_conversations()]
    # Imported text is searchable right away.
    assert [h.conversation_id for h in store.search("acetone") if h.message_id is None] == [starter.id]


def _sample() -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(CHATGPT_SAMPLE.read_text(encoding="utf-8"))
    return data


def _mapping(data: list[dict[str, Any]], conversation: int) -> dict[str, Any]:
    mapping: dict[str, Any] = data[conversation]["mapping"]
    return mapping


def _missing_parent(data: list[dict[str, Any]]) -> None:
    _mapping(data, 1)["final-2"]["parent"] = "gone-2"


def _loop(data: list[dict[str, Any]]) -> None:
    _mapping(data, 2)["root-3"]["parent"] = "asst-3"


def _bad_role(data: list[dict[str, Any]]) -> None:
    _mapping(data, 1)["user-2a"]["message"]["author"]["role"] = 5


def _bad_parts(data: list[dict[str, Any]]) -> None:
    _mapping(data, 2)["user-3"]["message"]["content"]["parts"] = "just a string"


def _bad_time(data: list[dict[str, Any]]) -> None:
    _mapping(data, 1)["final-2"]["message"]["create_time"] = "yesterday"


def _bad_current(data: list[dict[str, Any]]) -> None:
    data[0]["current_node"] = "nowhere"


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        (
            _missing_parent,
            r"conversation 2 \('What does this chart show\?'\), node 'final-2': its parent 'gone-2'",
        ),
        (_loop, r"conversation 3 .*form a loop of parents"),
        (_bad_role, r"node 'user-2a': \"message.author.role\" should be a string"),
        (_bad_parts, r"node 'user-3': \"message.content.parts\" should be a list"),
        (_bad_time, r"node 'final-2', create_time: should be seconds since 1970, not \"yesterday\""),
        (_bad_current, r"conversation 1 .*\"current_node\" \"nowhere\" is not in the mapping"),
    ],
)
def test_a_malformed_chatgpt_export_imports_nothing_and_says_where(
    store: ConversationStore,
    tmp_path: Path,
    spoil: Callable[[list[dict[str, Any]]], None],
    expected: str,
) -> None:
    store.create_conversation("Already here")
    data = _sample()
    spoil(data)
    broken = tmp_path / "conversations.json"
    broken.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(HearthError, match=expected) as caught:
        store.import_file(broken)
    assert str(caught.value).startswith("conversations.json: ") and "Nothing was imported" in str(
        caught.value
    )
    assert [c.title for c in store.list_conversations()] == ["Already here"]


def _hearth(store: ConversationStore) -> dict[str, Any]:
    conversation = store.create_conversation("Source")
    first = store.add_message(conversation.id, "user", "one")
    store.add_message(conversation.id, "assistant", "two", parent_id=first.id)
    return store.export_json(conversation.id)


@pytest.mark.parametrize(
    ("spoil", "expected"),
    [
        (lambda d: d.update(version=5), r"newer Hearth \(format version 5"),
        (lambda d: d.update(version="2"), r"\"version\" should be a number from 1 to 4, not \"2\""),
        (
            lambda d: d["messages"][1].update(parent_id=999),
            r"message 2: parent_id 999 is not an earlier message",
        ),
        (
            lambda d: d["messages"][0].update(role="tool"),
            r"message 1: \"role\" should be one of system, user, assistant, not \"tool\"",
        ),
        (
            lambda d: (d.update(version=4), d["messages"][1].update(role="tool")),
            r"message 2: \"tool_call_id\" should be a string, not null",
        ),
        (
            lambda d: d["messages"][1].update(content=None),
            r"message 2: \"content\" should be a string, not null",
        ),
        (lambda d: d["messages"][1].update(id=d["messages"][0]["id"]), r"message 2: id \d+ is used twice"),
        (lambda d: d["messages"].append([]), r"message 3: should be an object"),
        (lambda d: d["conversation"].update(settings={"temperature": -1}), r"temperature should be a number"),
        (lambda d: d["conversation"].update(current_leaf_id=1234), r"current_leaf_id 1234 is not one of"),
        (lambda d: d["conversation"].update(created_at="soon"), r"created_at: \"soon\" is not an ISO-8601"),
    ],
)
def test_a_malformed_hearth_export_imports_nothing_and_says_where(
    store: ConversationStore, tmp_path: Path, spoil: Callable[[dict[str, Any]], None], expected: str
) -> None:
    data = copy.deepcopy(_hearth(store))
    spoil(data)
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(HearthError, match=expected):
        store.import_file(broken)
    assert [c.title for c in store.list_conversations()] == ["Source"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            b'{"format": "hearth.conversation", "version": 2,',
            r"not valid JSON \(line 1, column 48: Expecting property name",
        ),
        (b"\xff\xfe garbage", r"not UTF-8 text"),
        (b'{"hello": "world"}', r"neither a Hearth conversation export .* nor ChatGPT's conversations.json"),
        (b"[1, 2, 3]", r"neither a Hearth"),
        (b"[" * 100_000 + b"]" * 100_000, r"nested too deeply"),
    ],
)
def test_files_that_are_not_exports_are_refused(
    store: ConversationStore, tmp_path: Path, content: bytes, expected: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    with pytest.raises(HearthError, match=expected):
        store.import_file(bad)
    with pytest.raises(HearthError, match="Could not read"):
        store.import_file(tmp_path / "missing.json")
    assert store.list_conversations() == []


def test_one_bad_conversation_stops_the_whole_file(store: ConversationStore, tmp_path: Path) -> None:
    data = _sample()
    data.append(copy.deepcopy(data[0]))
    data[-1]["mapping"]["aaa3d4e5-3333-4c4d-9e5f-000000000004"]["message"]["content"]["parts"] = [42]
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(HearthError, match=r"conversation 5 .*a part of the message is 42"):
        store.import_file(path)
    assert store.list_conversations() == []
    assert store.search("acetone") == []


def test_export_all_writes_one_safely_named_file_per_conversation(
    store: ConversationStore, tmp_path: Path
) -> None:
    titles = ["../../etc/passwd", "CON", "  Plan: A/B test?  ", "日本語のメモ", "🍞🍞🍞", "x" * 300]
    ids = []
    for title in titles:
        conversation = store.create_conversation(title)
        store.add_message(conversation.id, "user", f"about {title}")
        ids.append(conversation.id)
    trashed = store.create_conversation("In the trash")
    store.trash_conversation(trashed.id)

    folder = tmp_path / "out" / "nested"
    written = store.export_all(folder, "md").written
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in written)
    assert len(written) == len(titles)
    for path in written:
        assert path.parent == folder and path.suffix == ".md"
        assert len(path.name.encode()) < 100 and not path.name.startswith(".")
        assert all(ch not in path.name for ch in '<>:"/\\|?*')
    names = {p.name for p in written}
    assert f"{ids[0]:05d}-etc-passwd.md" in names
    assert f"{ids[1]:05d}-CON.md" in names
    assert f"{ids[3]:05d}-日本語のメモ.md" in names
    assert f"{ids[4]:05d}-chat.md" in names
    assert "about CON" in (folder / f"{ids[1]:05d}-CON.md").read_text(encoding="utf-8")

    # JSON files import back one by one.
    json_files = store.export_all(tmp_path / "json", "json").written
    for path in json_files:
        store.import_file(path)
    assert len(store.list_conversations()) == 2 * len(titles)


def test_markdown_export_shows_the_current_branch_and_notes(store: ConversationStore) -> None:
    conversation_id = branched_conversation(store)
    markdown = store.export_markdown(conversation_id)
    assert "Where should I stay?" in markdown and "on a budget" not in markdown
    assert "Near Kyoto Station." in markdown and "Gion" not in markdown
    assert "*[2 earlier messages were left out]*" in markdown
    assert "2 messages on other branches are not" in markdown
