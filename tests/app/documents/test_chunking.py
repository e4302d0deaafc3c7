"""Chunking by structure, paragraphs, sentences and words, with overlap, in English and Chinese."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from app.documents import Chunk, DocumentKind, ExtractedDocument, Section, chunk, estimate_tokens, extract
from tests.helpers.document_files import pdf_bytes, write


def document(*sections: tuple[str, str]) -> ExtractedDocument:
    return ExtractedDocument(
        DocumentKind.TEXT, "text/plain", tuple(Section(text, where) for text, where in sections), None, None
    )


def words(text: str) -> list[str]:
    return text.split()


def word_count(text: str) -> int:
    return len(text.split())


ENGLISH = " ".join(
    f"Sentence number {n} talks about local models and private documents in some detail." for n in range(60)
)
CHINESE = "".join(f"第{n}句讲的是本地模型如何在不联网的情况下回答关于私人文档的问题。" for n in range(60))


def test_estimate_counts_cjk_per_character_and_latin_per_four() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd" * 25) == 25
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("本地模型") == 4
    assert estimate_tokens("用 Python 写") == 2 + 2
    assert estimate_tokens("한국어") == 3


def test_a_small_document_is_one_chunk_per_section() -> None:
    doc = document(("Short intro.", "page 1"), ("Second page.", "page 2"))
    assert chunk(doc) == [Chunk("Short intro.", "page 1", 0), Chunk("Second page.", "page 2", 1)]


def test_chunks_fit_the_target_and_cover_the_text_in_order() -> None:
    doc = document((ENGLISH, "Intro"), ("Other section text.", "Next"))
    chunks = chunk(doc, target_tokens=100, overlap_tokens=20)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert all(estimate_tokens(c.text) <= 100 for c in chunks)
    assert chunks[-1] == Chunk("Other section text.", "Next", len(chunks) - 1)
    intro = [c for c in chunks if c.location == "Intro"]
    assert len(intro) > 5
    # Every chunk is a run of the section's own words, and the runs advance through all of them.
    source = words(ENGLISH)
    position = 0
    for piece in intro:
        piece_words = words(piece.text)
        start = next(i for i in range(len(source)) if source[i : i + len(piece_words)] == piece_words)
        assert start <= position
        position = start + len(piece_words)
    assert position == len(source)


def test_cuts_fall_at_sentence_ends_and_consecutive_chunks_overlap() -> None:
    chunks = chunk(document((ENGLISH, "Intro")), target_tokens=100, overlap_tokens=30)
    for piece in chunks:
        assert piece.text.startswith("Sentence number") and piece.text.endswith("detail.")
    for before, after in itertools.pairwise(chunks):
        shared = next(
            size for size in range(len(after.text), 0, -1) if before.text.endswith(after.text[:size])
        )
        overlap = after.text[:shared].strip()
        assert overlap.startswith("Sentence number")
        assert 0 < estimate_tokens(overlap) <= 30
        assert overlap != before.text


def test_no_overlap_across_sections_or_when_asked_for_none() -> None:
    doc = document(("Alpha section. " * 40, "A"), ("Beta section. " * 40, "B"))
    chunks = chunk(doc, target_tokens=50, overlap_tokens=10)
    first_b = next(c for c in chunks if c.location == "B")
    assert "Alpha" not in first_b.text
    plain = chunk(doc, target_tokens=50, overlap_tokens=0)
    assert sum(word_count(c.text) for c in plain) == word_count(doc.text)


def test_paragraphs_are_kept_whole_when_they_fit() -> None:
    first = "First paragraph. " * 10
    second = "Second paragraph. " * 10
    chunks = chunk(document((f"{first}\n\n{second}", "s")), target_tokens=60, overlap_tokens=0)
    assert [c.text for c in chunks] == [first.strip(), second.strip()]


def test_chinese_is_cut_at_full_stops_without_spaces() -> None:
    chunks = chunk(document((CHINESE, "第一章")), target_tokens=120, overlap_tokens=40)
    assert len(chunks) > 5
    assert all(estimate_tokens(c.text) <= 120 for c in chunks)
    sentence = re.compile(r"^(第\d+句讲的是本地模型如何在不联网的情况下回答关于私人文档的问题。)+$")
    assert all(sentence.match(c.text) for c in chunks)
    # The overlap is whole sentences too: each chunk after the first opens with its predecessor's last.
    for before, after in itertools.pairwise(chunks):
        last = before.text.split("。")[-2] + "。"
        assert after.text.startswith(last)


def test_a_chinese_sentence_longer_than_the_target_is_cut_between_characters() -> None:
    long_sentence = "本地模型" * 100 + "。"
    chunks = chunk(document((long_sentence, "s")), target_tokens=50, overlap_tokens=10)
    assert all(estimate_tokens(c.text) <= 50 for c in chunks)
    assert "".join(c.text[10:] if i else c.text for i, c in enumerate(chunks)) == long_sentence


def test_words_are_never_split_unless_one_is_longer_than_the_target() -> None:
    text = " ".join(["supercalifragilistic"] * 200)
    chunks = chunk(document((text, "s")), target_tokens=40, overlap_tokens=5)
    assert all(set(words(c.text)) == {"supercalifragilistic"} for c in chunks)
    digest = "f" * 1000
    pieces = chunk(document((f"hash {digest} end", "s")), target_tokens=100, overlap_tokens=0)
    assert all(estimate_tokens(p.text) <= 100 for p in pieces)
    assert "".join(p.text for p in pieces).replace(" ", "") == f"hash{digest}end"


def test_lines_are_a_boundary_for_tables_and_code() -> None:
    table = "\n".join(f"| row {n} | value {n * 7} |" for n in range(100))
    chunks = chunk(document((table, "sheet Budget, rows 1–100")), target_tokens=60, overlap_tokens=0)
    assert all(
        line.startswith("| row ") and line.endswith("|") for c in chunks for line in c.text.split("\n")
    )
    assert sum(len(c.text.split("\n")) for c in chunks) == 100


def test_a_real_counter_decides_the_sizes() -> None:
    chunks = chunk(document((ENGLISH, "s")), target_tokens=30, overlap_tokens=0, count_tokens=word_count)
    assert all(word_count(c.text) <= 30 for c in chunks)
    assert max(word_count(c.text) for c in chunks) > 20


def test_extracted_pdf_chunks_carry_page_locations(tmp_path: Path) -> None:
    pages = [
        [f"Page {page} line {line} has a sentence about retrieval." for line in range(40)] for page in (1, 2)
    ]
    doc = extract(write(tmp_path / "two.pdf", pdf_bytes(pages)))
    chunks = chunk(doc, target_tokens=120, overlap_tokens=20)
    assert {c.location for c in chunks} == {"page 1", "page 2"}
    assert all(c.text.startswith(f"Page {c.location[-1]} ") for c in chunks)


@pytest.mark.parametrize(("target", "overlap"), [(0, 0), (100, 100), (100, -1)])
def test_impossible_sizes_are_rejected(target: int, overlap: int) -> None:
    with pytest.raises(ValueError):
        chunk(document(("text", "s")), target_tokens=target, overlap_tokens=overlap)


def test_code_chunks_keep_their_indentation() -> None:
    code = "\n".join(f"    value_{n} = compute({n})  # step {n}" for n in range(60))
    chunks = chunk(document((code, "lines 1–60")), target_tokens=50, overlap_tokens=0)
    assert len(chunks) > 1
    assert all(line.startswith("    value_") for c in chunks for line in c.text.split("\n"))
