"""Full-text search over conversation titles, messages and the tool calls replies made (SQLite FTS5), best
match first."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import text
from sqlalchemy.orm import Session

from app.conversations.records import ids_json
from app.storage.db import Database

# Search snippets mark each hit with these; the GUI turns them into highlighting, the CLI into «».
HIT_START = "\x02"
HIT_END = "\x03"
SNIPPET_TOKENS = 16
# Ranking costs about a microsecond per match: a word found in 100,000 messages would take 100 ms to rank.
# Beyond this many matches only the newest ones are ranked (all of them still count as found).
RANKED_MATCHES = 20_000
# A shorter last word matches too many words as a prefix to be worth the time while the user types.
PREFIX_MIN_CHARS = 3

_WORD = re.compile(r"\w")


@dataclass(frozen=True)
class SearchHit:
    conversation_id: int
    message_id: int | None  # None when the conversation's title matched
    title: str
    snippet: str  # the matching text with each hit between HIT_START and HIT_END
    rank: float  # bm25: lower is better; comparable only among hits of the same kind
    role: str | None = None  # the matching message's role
    in_reasoning: bool = False  # the snippet is from the reply's reasoning (its answer did not match)
    in_tool_call: bool = False  # the snippet is a call the reply made: the tool's name and arguments


def match_expression(query: str) -> str | None:
    """The FTS5 query for what the user typed: every word must occur, the last one also as a prefix.

    Each whitespace-separated piece is quoted, so FTS5 operators and stray quotes or brackets are plain
    text and can never be a syntax error. None when there is nothing to search for.
    """
    pieces = [piece for piece in query.split() if _WORD.search(piece)]
    if not pieces:
        return None
    quoted = ['"' + piece.replace('"', '""') + '"' for piece in pieces]
    # Search as you type: the word being typed matches the words it starts.
    last = pieces[-1]
    if _WORD.match(last[-1]) and len(last) >= PREFIX_MIN_CHARS:
        quoted[-1] += "*"
    return " ".join(quoted)


def search(db: Database, query: str, limit: int = 50) -> list[SearchHit]:
    """Conversations whose title matches come first, then messages, then the tool calls of replies that did
    not match otherwise, each best match first.

    Every word must occur (the last one may also be the start of a word). Conversations in the trash
    and replies still streaming are not searched. For words in more than RANKED_MATCHES messages,
    the best of the newest RANKED_MATCHES are returned.
    """
    match = match_expression(query)
    if match is None or limit < 1:
        return []
    with db.read_session() as session:
        titles = session.execute(
            text(
                "SELECT c.id, c.title, highlight(conversations_fts, 0, :start, :end) AS snippet, f.rank "
                "FROM conversations_fts AS f JOIN conversations AS c ON c.id = f.rowid "
                "WHERE conversations_fts MATCH :match AND c.trashed_at IS NULL "
                "ORDER BY f.rank LIMIT :limit"
            ),
            {"match": match, "start": HIT_START, "end": HIT_END, "limit": max(1, limit // 5)},
        ).all()
        hits = [SearchHit(row.id, None, row.title, row.snippet, row.rank) for row in titles]
        # Ids grow with time: the oldest of the newest RANKED_MATCHES matches (when there are more).
        oldest_ranked = session.execute(
            text(
                "SELECT rowid FROM messages_fts WHERE messages_fts MATCH :match "
                "ORDER BY rowid DESC LIMIT 1 OFFSET :offset"
            ),
            {"match": match, "offset": RANKED_MATCHES - 1},
        ).scalar()
        wanted = limit - len(hits)
        fetch = wanted
        while True:
            found = _message_hits(session, match, oldest_ranked or 0, fetch)
            shown = [hit for hit in found if hit is not None]
            # Trashed conversations are few and short-lived: asking again for more is rare.
            if len(shown) >= wanted or len(found) < fetch:
                break
            fetch *= 4
        hits += shown[:wanted]
        wanted = limit - len(hits)
        if wanted > 0:
            seen = {hit.message_id for hit in hits}
            calls = _tool_call_hits(session, match, RANKED_MATCHES)
            hits += [hit for hit in calls if hit.message_id not in seen][:wanted]
        return hits


def _message_hits(session: Session, match: str, oldest: int, limit: int) -> list[SearchHit | None]:
    """The best `limit` message hits, None for those in the trash.

    The FTS table is queried alone: FTS5 then sorts by rank itself and computes snippets only for the
    rows returned. Joined to other tables, SQLite would make a snippet for every match before sorting
    (100 ms for a word in 100,000 messages).
    """
    # A snippet per column: the answer's when it matched, else the reasoning's (FTS5's own choice of
    # column would not say which one it took).
    ranked = session.execute(
        text(
            "SELECT rowid AS id, rank, snippet(messages_fts, 0, :start, :end, '…', :tokens) AS snippet, "
            "snippet(messages_fts, 1, :start, :end, '…', :tokens) AS reasoning_snippet "
            "FROM messages_fts WHERE messages_fts MATCH :match AND rowid >= :oldest "
            "ORDER BY rank LIMIT :limit"
        ),
        {
            "match": match,
            "oldest": oldest,
            "limit": limit,
            "start": HIT_START,
            "end": HIT_END,
            "tokens": SNIPPET_TOKENS,
        },
    ).all()
    where = session.execute(
        text(
            "SELECT m.id, m.conversation_id, m.role, c.title, c.trashed_at IS NOT NULL AS trashed "
            "FROM messages AS m JOIN conversations AS c ON c.id = m.conversation_id "
            "WHERE m.id IN (SELECT value FROM json_each(:ids))"
        ),
        {"ids": ids_json(row.id for row in ranked)},
    )
    found = {row.id: row for row in where}
    hits: list[SearchHit | None] = []
    for row in ranked:
        in_reasoning = HIT_START not in row.snippet and HIT_START in (row.reasoning_snippet or "")
        hits.append(
            None
            if found[row.id].trashed
            else SearchHit(
                found[row.id].conversation_id,
                row.id,
                found[row.id].title,
                row.reasoning_snippet if in_reasoning else row.snippet,
                row.rank,
                found[row.id].role,
                in_reasoning,
            )
        )
    return hits


def _tool_call_hits(session: Session, match: str, limit: int) -> list[SearchHit]:
    """The calls that match, best first, one hit per reply (its best call), none in the trash. Calls are far
    fewer than messages: ranking them all is cheap."""
    rows = session.execute(
        text(
            "SELECT f.rowid AS part_id, f.rank, highlight(tool_calls_fts, 0, :start, :end) AS name, "
            "snippet(tool_calls_fts, 1, :start, :end, '…', :tokens) AS arguments "
            "FROM tool_calls_fts AS f WHERE tool_calls_fts MATCH :match ORDER BY f.rank LIMIT :limit"
        ),
        {"match": match, "start": HIT_START, "end": HIT_END, "tokens": SNIPPET_TOKENS, "limit": limit},
    ).all()
    where = session.execute(
        text(
            "SELECT p.id, m.id AS message_id, m.conversation_id, m.role, c.title "
            "FROM message_parts AS p JOIN messages AS m ON m.id = p.message_id "
            "JOIN conversations AS c ON c.id = m.conversation_id "
            "WHERE p.id IN (SELECT value FROM json_each(:ids)) AND c.trashed_at IS NULL "
            "AND m.status != 'streaming'"
        ),
        {"ids": ids_json(row.part_id for row in rows)},
    )
    found = {row.id: row for row in where}
    hits: dict[int, SearchHit] = {}
    for row in rows:
        part = found.get(row.part_id)
        if part is None or part.message_id in hits:
            continue
        hits[part.message_id] = SearchHit(
            part.conversation_id,
            part.message_id,
            part.title,
            f"{row.name} {row.arguments}",
            row.rank,
            part.role,
            in_tool_call=True,
        )
    return list(hits.values())
