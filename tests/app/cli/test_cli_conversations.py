"""`hearth conversations search | export | import`, driven as a script would."""

from __future__ import annotations

import io
import json
from pathlib import Path

from app.cli.main import main
from app.conversations.store import ConversationStore
from app.core import Core
from app.paths import resolve_home

CHATGPT_SAMPLE = Path(__file__).parents[2] / "data" / "chatgpt_conversations.json"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def seed() -> tuple[int, int]:
    """Two conversations written through the store, the way the app writes them."""
    core = Core.open(resolve_home())
    try:
        store: ConversationStore = core.store
        trip = store.create_conversation("Trip to Lisbon")
        store.add_message(trip.id, "user", "Where can I eat pastéis de nata near the river?")
        answer = store.add_message(trip.id, "assistant", "Try Belém: the pastry shop\nthere is famous.")
        other = store.create_conversation("Garden")
        store.add_message(other.id, "user", "When do I plant tulips?")
        return trip.id, answer.id
    finally:
        core.close()


def test_search_prints_hits_with_the_matches_marked() -> None:
    trip, answer = seed()
    code, out, _ = run("conversations", "search", "famous pastry")
    assert code == 0
    assert out == f"{trip}\t{answer}\tTrip to Lisbon\tTry Belém: the «pastry» shop there is «famous».\n"
    code, out, _ = run("conversations", "search", "lisbon")
    assert out == f"{trip}\t-\tTrip to Lisbon\tTrip to «Lisbon»\n"
    code, out, _ = run("conversations", "search", "nothing-like-this")
    assert code == 0 and "No conversations match" in out


def test_search_json() -> None:
    trip, answer = seed()
    code, out, _ = run("conversations", "search", "nata", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["query"] == "nata"
    (hit,) = data["hits"]
    assert (hit["conversation_id"], hit["message_id"], hit["title"], hit["role"]) == (
        trip,
        answer - 1,
        "Trip to Lisbon",
        "user",
    )
    assert hit["snippet"] == "Where can I eat pastéis de nata near the river?"
    [[start, end]] = hit["matches"]
    assert hit["snippet"][start:end] == "nata"
    assert isinstance(hit["rank"], float)


def test_export_all_then_import_each_file_back(tmp_path: Path) -> None:
    seed()
    code, out, _ = run(
        "conversations", "export", "--all", "--format", "json", "--output", str(tmp_path / "out")
    )
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"Exported 2 conversations to {tmp_path / 'out'}"
    files = [Path(line) for line in lines[1:]]
    assert sorted(f.name for f in files) == sorted(p.name for p in (tmp_path / "out").iterdir())
    for path in files:
        assert json.loads(path.read_text(encoding="utf-8"))["version"] == 2
        code, out, _ = run("conversations", "import", str(path))
        assert code == 0 and out.startswith("Imported 1 conversation (")
    code, out, _ = run("conversations", "list", "--json")
    assert len(json.loads(out)["conversations"]) == 4

    code, out, _ = run("conversations", "export", "--all", "--format", "md", "--output", str(tmp_path / "md"))
    assert code == 0 and len(list((tmp_path / "md").glob("*.md"))) == 4


def test_export_one_still_works_and_bad_combinations_exit_3(tmp_path: Path) -> None:
    trip, _ = seed()
    code, out, _ = run("conversations", "export", str(trip), "--format", "md")
    assert code == 0 and out.startswith("# Trip to Lisbon\n")
    for argv in (
        ("conversations", "export", "--format", "md"),
        ("conversations", "export", str(trip), "--all", "--format", "md", "--output", str(tmp_path)),
        ("conversations", "export", "--all", "--format", "md"),
    ):
        code, _, err = run(*argv)
        assert code == 3 and err.startswith("hearth: ") and len(err.splitlines()) == 1
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    code, _, err = run("conversations", "export", "--all", "--format", "json", "--output", str(a_file))
    assert code == 3 and "is a file" in err


def test_import_chatgpt_prints_what_was_imported() -> None:
    code, out, _ = run("conversations", "import", str(CHATGPT_SAMPLE))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "Imported 3 conversations (11 messages) from ChatGPT's conversations.json."
    assert lines[1] == "Left out 7 system, tool, hidden or empty messages."
    assert lines[2] == "Left out 1 conversation with no messages to import."
    assert [line.split("\t")[2] for line in lines[3:]] == [
        "Sourdough starter smells like acetone",
        "What does this chart show?",
        "Voix et langues",
    ]
    code, out, _ = run("conversations", "import", str(CHATGPT_SAMPLE), "--json")
    report = json.loads(out)
    assert (report["source"], report["conversations"], report["messages"], report["skipped"]) == (
        "chatgpt",
        3,
        11,
        7,
    )
    assert len(report["conversation_ids"]) == 3


def test_malformed_import_exits_3_and_imports_nothing(tmp_path: Path) -> None:
    seed()
    data = json.loads(CHATGPT_SAMPLE.read_text(encoding="utf-8"))
    data[2]["mapping"]["asst-3"]["parent"] = "missing-node"
    broken = tmp_path / "conversations.json"
    broken.write_text(json.dumps(data), encoding="utf-8")
    code, out, err = run("conversations", "import", str(broken))
    assert (code, out) == (3, "")
    assert err == (
        "hearth: conversations.json: conversation 3 ('Voix et langues'), node 'asst-3': its parent "
        "'missing-node' is not in the mapping. Nothing was imported.\n"
    )
    code, out, _ = run("conversations", "list", "--json")
    assert [c["title"] for c in json.loads(out)["conversations"]] == ["Garden", "Trip to Lisbon"]
