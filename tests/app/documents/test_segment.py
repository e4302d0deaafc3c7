"""Terms for the passage index: CJK bigrams, and questions that can never be FTS5 syntax."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from contextlib import closing

import pytest

from app.documents.segment import MAX_QUERY_TERMS, index_terms, query_terms, question_terms

PASSAGES = {
    1: "全文检索是一种从大量文本中快速找到信息的技术。",
    2: "向量数据库把文本转换成嵌入向量，再按相似度排序。",
    3: "The printer driver for Linux is installed with the package manager.",
    4: "東京の天気は晴れです。カタカナも検索できます。",
    5: "한국어 문서도 검색할 수 있습니다.",
    6: "Python编程入门：从零开始学习。",
    7: "Le café est fermé le dimanche.",
}


@pytest.fixture
def fts() -> Iterator[sqlite3.Connection]:
    """An FTS5 table tokenized as the app's passage index is, holding PASSAGES."""
    with closing(sqlite3.connect(":memory:")) as conn:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(terms, tokenize='unicode61 remove_diacritics 2')")
        conn.executemany(
            "INSERT INTO t (rowid, terms) VALUES (?, ?)", [(k, index_terms(v)) for k, v in PASSAGES.items()]
        )
        yield conn


def search(conn: sqlite3.Connection, question: str) -> list[int]:
    match = query_terms(question)
    if not match:
        return []
    return [row[0] for row in conn.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank", (match,))]


def test_latin_text_is_left_for_unicode61() -> None:
    text = "The printer driver, v2.1 (Linux) — café"
    assert index_terms(text) == text


def test_cjk_runs_become_characters_and_overlapping_bigrams() -> None:
    assert index_terms("全文检索").split() == ["全", "全文", "文", "文检", "检", "检索", "索"]
    assert index_terms("猫").split() == ["猫"]


def test_a_cjk_run_is_kept_apart_from_the_latin_letters_next_to_it() -> None:
    assert index_terms("Python编程").split() == ["Python", "编", "编程", "程"]
    assert index_terms("第3章").split() == ["第", "3", "章"]


def test_japanese_and_korean_are_segmented_too() -> None:
    assert "カタ" in index_terms("カタカナ").split()
    assert "ひら" in index_terms("ひらがな").split()
    assert "한국" in index_terms("한국어").split()
    # The Katakana middle dot is punctuation, not part of a word.
    assert "ア・" not in index_terms("ア・イ").split()


def test_full_width_letters_and_digits_match_their_ascii_forms() -> None:
    assert index_terms("ＰＤＦ２０２４") == "PDF2024"
    assert query_terms("ＰＤＦ") == '"PDF"'


def test_a_question_uses_bigrams_and_a_lone_character_as_it_is() -> None:
    assert question_terms("全文检索") == ["全文", "文检", "检索"]
    assert question_terms("猫 和 狗") == ["猫", "和", "狗"]
    assert query_terms("如何安装") == '"如何" OR "何安" OR "安装"'


def test_repeated_words_count_once_whatever_their_case() -> None:
    assert question_terms("Linux linux LINUX kernel") == ["Linux", "kernel"]


def test_a_long_question_keeps_its_first_terms() -> None:
    words = [f"word{i}" for i in range(200)]
    assert question_terms(" ".join(words)) == words[:MAX_QUERY_TERMS]
    assert len(question_terms("一二三四五六七八九十" * 20, max_terms=5)) == 5


def test_nothing_to_search_for_is_an_empty_expression() -> None:
    for question in ("", "   ", "?!…", "()", '""', "***", "— · —"):
        assert query_terms(question) == ""


HOSTILE = (
    '"',
    '"unbalanced',
    'say "hi',
    "AND",
    "OR",
    "NOT",
    "a AND",
    "OR b",
    "NOT c",
    "NEAR(a b, 2)",
    "NEAR",
    "*",
    "prefix*",
    "^start",
    "col:value",
    "terms:driver",
    "{terms}: driver",
    "(",
    ")",
    "((a)",
    "-driver",
    "a - b",
    "+",
    "'; DROP TABLE t; --",
    "\x00",
    "\x00driver\x00",
    "a\nb\tc",
    "🙂 driver 🙂",
    "driver\u200bprinter",
    "\ufeffdriver",
    '检索" OR "',
    "rank:1",
    "rowid",
    "t",
)


@pytest.mark.parametrize("question", HOSTILE)
def test_fts5_syntax_in_a_question_is_plain_text(fts: sqlite3.Connection, question: str) -> None:
    search(fts, question)  # never an FTS5 syntax error
    for term in question_terms(question):
        assert all(char.isalnum() for char in term), term


def test_a_random_mix_of_syntax_and_text_never_breaks_the_query(fts: sqlite3.Connection) -> None:
    alphabet = list("\"*^:()-+{},.;'\\/ \t\n\x00") + list("abcANDORNOTNEAR") + list("检索文本한국カタ🙂éß")
    rng = random.Random(15)
    for _ in range(2000):
        question = "".join(rng.choices(alphabet, k=rng.randint(1, 30)))
        search(fts, question)


def test_a_chinese_question_finds_its_passage(fts: sqlite3.Connection) -> None:
    assert search(fts, "如何快速检索文本信息？")[0] == 1
    assert search(fts, "按相似度排序的向量")[0] == 2
    # One character matches inside longer runs.
    assert search(fts, "晴") == [4]


def test_english_japanese_korean_and_mixed_questions_find_their_passages(fts: sqlite3.Connection) -> None:
    assert search(fts, "how do I install the printer driver on linux?")[0] == 3
    assert search(fts, "カタカナ")[0] == 4
    assert search(fts, "한국어 검색")[0] == 5
    assert search(fts, "python 编程")[0] == 6
    # unicode61 folds the diacritics on both sides.
    assert search(fts, "cafe") == [7]
