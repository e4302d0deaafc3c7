"""Bar P5: the conversation store at scale (10,000 conversations, 1,000,000 messages).

    .venv/bin/python -m bench.conversation_store [--conversations 10000] [--messages 1000000]
        [--long 5000] [--runs 15] [--keep DIR] [--no-publish]

Builds a database with the app's own schema (migrations included) in a temporary folder, fills it with
multi-row inserts (the search triggers are set aside meanwhile and the index is built in one pass after, as
a bulk import would), then times what the user waits for, through the real ConversationStore:

- the conversation list (all of it, pinned first),
- full-text search, for words from rare to common, with snippets,
- opening a 5,000-message conversation (its visible path, as the transcript loads it),

and, for the record, deleting a conversation (which compacts the search index to leave no deleted words).
Prints the median and the worst of --runs runs against the targets (50 / 100 / 200 ms), and writes every
run to docs/bench/conversation_store.json and the README's table (bench/results.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from app.conversations.store import ConversationStore, match_expression
from app.storage.db import Database
from bench import results

SEED = 20240601
VOCABULARY = 30_000
# Words planted at known rates, so searches of every selectivity have a known answer.
PLANTED = {"lighthouse": 0.0001, "harbour": 0.001, "lantern": 0.01, "river": 0.1}
TARGETS_MS = {"list": 50.0, "search": 100.0, "open": 200.0}
SAMPLING_JSON = json.dumps({"max_tokens": 1024, "min_p": 0.05, "repeat_penalty": 1.1, "seed": None,
                            "temperature": 0.7, "top_k": 40, "top_p": 0.95}, sort_keys=True)  # fmt: skip
T0 = datetime(2023, 1, 1, tzinfo=UTC)
LONG_ID = 1
T = TypeVar("T")


def _words(rng: random.Random) -> list[str]:
    syllables = [
        "ka",
        "lo",
        "mi",
        "ren",
        "sa",
        "to",
        "vel",
        "qua",
        "dor",
        "ni",
        "pe",
        "shu",
        "ar",
        "bel",
        "cy",
    ]
    words: set[str] = set()
    while len(words) < VOCABULARY:
        words.add("".join(rng.choices(syllables, k=rng.randint(1, 4))))
    return sorted(words - set(PLANTED))


def _stamp(moment: datetime) -> str:
    return moment.isoformat(timespec="microseconds")


def _text_source(rng: random.Random) -> Iterator[str]:
    """Message texts of 4 to 60 words, Zipf-distributed like real language, with the planted words."""
    vocabulary = _words(rng)
    cumulative = list(itertools.accumulate(1.0 / rank for rank in range(1, len(vocabulary) + 1)))
    planted = list(PLANTED.items())
    while True:
        # One random.choices call per thousand messages keeps generation fast.
        lengths = [rng.randint(4, 60) for _ in range(1000)]
        pool = rng.choices(vocabulary, cum_weights=cumulative, k=sum(lengths))
        start = 0
        for length in lengths:
            words = pool[start : start + length]
            start += length
            for word, rate in planted:
                if rng.random() < rate:
                    words[rng.randrange(length)] = word
            yield " ".join(words).capitalize() + "."


def build(path: Path, conversations: int, messages: int, long: int) -> float:
    """Returns the seconds it took. Conversation LONG_ID is the long one."""
    started = time.perf_counter()
    Database.open(path, path.parent / "backups").dispose()  # the real schema, through the migrations
    rng = random.Random(SEED)
    texts = _text_source(rng)
    rest = messages - long
    per_conversation = [long] + [rest // (conversations - 1)] * (conversations - 1)
    for i in range(rest % (conversations - 1)):
        per_conversation[1 + i] += 1
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-262144")  # 256 MiB
        dependents = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
        ).fetchall()
        conn.execute("BEGIN")
        for name, _sql in dependents:
            conn.execute(f"DROP TRIGGER {name}")
        message_id = 0
        conversation_rows = []
        for conversation_id, count in enumerate(per_conversation, start=1):
            created = T0 + timedelta(minutes=conversation_id * 37)
            rows = []
            for i in range(count):
                message_id += 1
                role = "user" if i % 2 == 0 else "assistant"
                moment = _stamp(created + timedelta(seconds=20 * i))
                parent = message_id - 1 if i else None
                rows.append(
                    (message_id, conversation_id, parent, role, next(texts), "complete",
                     "SmolLM2-135M-Instruct-Q4_1" if role == "assistant" else None,
                     SAMPLING_JSON if role == "assistant" else None, moment, moment)
                )  # fmt: skip
            conn.executemany(
                "INSERT INTO messages (id, conversation_id, parent_id, role, content, status, model_name, "
                "sampling_json, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
            updated = _stamp(created + timedelta(seconds=20 * count))
            conversation_rows.append(
                (conversation_id, f"Chat {conversation_id}: {next(texts)[:40]}", _stamp(created), updated,
                 message_id if count else None, conversation_id % 500 == 0, count)
            )  # fmt: skip
        conn.executemany(
            "INSERT INTO conversations (id, title, created_at, updated_at, current_leaf_id, pinned, "
            "message_count) VALUES (?, ?, ?, ?, ?, ?, ?)",
            conversation_rows,
        )
        for _name, sql in dependents:
            conn.execute(sql)
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')")
        conn.execute("INSERT INTO conversations_fts(conversations_fts) VALUES ('rebuild')")
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return time.perf_counter() - started


def timed(action: Callable[[], T], runs: int) -> tuple[list[float], T]:
    """Milliseconds of a first run and `runs` more; and the last result."""
    times = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        result = action()
        times.append((time.perf_counter() - started) * 1000.0)
    return times, result


def operation(
    label: str, target: float | None, times: list[float], *, cold_first: bool = True, **extra: object
) -> dict[str, Any]:
    """One timed operation: with `cold_first`, its first run apart (cold caches), the median and worst of
    the rest."""
    rest = times[1:] if cold_first else times
    median = statistics.median(rest)
    row: dict[str, Any] = {
        "label": label,
        "target_ms": target,
        "first_ms": times[0] if cold_first else None,
        "median_ms": median,
        "worst_ms": max(rest),
        "runs_ms": times,
        **extra,
    }
    verdict = "" if target is None else f"  target < {target:.0f} ms: {'ok' if median < target else 'OVER'}"
    counts = "".join(f"  ({key} {value:,})" for key, value in extra.items())
    print(
        f"{label:<46} median {row['median_ms']:7.1f}  worst {row['worst_ms']:7.1f} ms{verdict}{counts}",
        flush=True,
    )
    return row


def measure(path: Path, runs: int) -> list[dict[str, Any]]:
    database = Database.open(path, path.parent / "backups")
    store = ConversationStore(database)
    most_common = _words(random.Random(SEED))[0]  # rank 1 in the Zipf distribution
    rows = []
    try:
        times, listed = timed(store.list_conversations, runs)
        rows.append(
            operation("conversation list (pinned first)", TARGETS_MS["list"], times, rows=len(listed))
        )

        for query in ["lighthouse", "harbour", "lantern", "river", most_common, "harbour lantern", "lanter"]:
            times, hits = timed(partial(store.search, query), runs)
            assert all(h.snippet for h in hits)
            with closing(sqlite3.connect(path)) as conn:
                count = conn.execute(
                    "SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?", (match_expression(query),)
                ).fetchone()[0]
            kind = {
                most_common: ", the most common word",
                "harbour lantern": ", two words",
                "lanter": ", a prefix",
            }
            label = f"search {query!r}{kind.get(query, '')}"
            rows.append(operation(label, TARGETS_MS["search"], times, matches=count))

        times, messages = timed(partial(store.list_messages, LONG_ID), runs)
        rows.append(
            operation(
                "open the long conversation (its visible path)",
                TARGETS_MS["open"],
                times,
                messages=len(messages),
            )
        )

        times = []
        for victim in listed[-3:]:
            started = time.perf_counter()
            store.delete_conversation(victim.id)
            times.append((time.perf_counter() - started) * 1000.0)
        # Each deletion compacts the search index so no deleted word stays on disk; every one counts.
        rows.append(operation("delete a conversation", None, times, cold_first=False))
    finally:
        database.dispose()
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--long", type=int, default=5_000, help="messages in the one long conversation")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument(
        "--keep",
        type=Path,
        metavar="DIR",
        help="build (or reuse) the database here; each run deletes 3 chats",
    )

    results.add_publish_option(parser)
    args = parser.parse_args(argv)
    session = results.begin("conversation_store", args, argv)

    folder = args.keep or Path(tempfile.mkdtemp(prefix="hearth-p5-"))
    path = folder / "hearth.sqlite3"
    built_s: float | None = None
    try:
        if not path.exists():
            folder.mkdir(parents=True, exist_ok=True)
            built_s = build(path, args.conversations, args.messages, args.long)
        size = path.stat().st_size / (1 << 20)
        print(
            f"{args.conversations:,} conversations / {args.messages:,} messages "
            f"({size:,.0f} MiB; built in {built_s or 0:.0f} s) with SQLite {sqlite3.sqlite_version}"
        )
        operations = measure(path, args.runs)
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)
    data = {
        "conversations": args.conversations,
        "messages": args.messages,
        "long": args.long,
        "runs": args.runs,
        "sqlite": sqlite3.sqlite_version,
        "built_s": built_s,
        "size_mib": size,
        "operations": operations,
    }
    print(render_table(data))
    if not args.no_publish:
        print(f"wrote {session.publish(data)}")
    return 0


def render_table(data: Mapping[str, Any]) -> str:
    rows = ["| operation | median | worst | first run | target |", "|---|---|---|---|---|"]
    for op in data["operations"]:
        label = op["label"]
        if "matches" in op:
            label += f" ({op['matches']:,} matching messages)"
        elif "rows" in op:
            label = f"conversation list (all {op['rows']:,}, pinned first)"
        elif "messages" in op:
            label = f"open the {op['messages']:,}-message conversation (its visible path)"
        target = "—" if op["target_ms"] is None else f"< {op['target_ms']:.0f} ms"
        first = "—" if op["first_ms"] is None else f"{op['first_ms']:,.1f} ms"
        rows.append(
            f"| {label} | {op['median_ms']:,.1f} ms | {op['worst_ms']:,.1f} ms | {first} | {target} |"
        )
    over = [
        op["label"] for op in data["operations"] if op["target_ms"] and op["median_ms"] >= op["target_ms"]
    ]
    built = "" if data["built_s"] is None else f", built in {data['built_s']:,.0f} s"
    deletions = next(op for op in data["operations"] if op["target_ms"] is None)
    return "\n".join(
        [
            *rows,
            "",
            f"{data['conversations']:,} conversations, {data['messages']:,} messages (one of them "
            f"{data['long']:,} long), {data['size_mib']:,.0f} MiB{built}; SQLite {data['sqlite']}. Median "
            f"and worst of {data['runs']} runs after a first one; deletion: {len(deletions['runs_ms'])} "
            f"conversations, one run each. "
            + ("Every median is within its target." if not over else f"Over the target: {'; '.join(over)}."),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
