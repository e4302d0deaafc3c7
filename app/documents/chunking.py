"""Cutting an extracted document into passages for retrieval.

Structure first: a chunk never spans two sections (pages, headings' bodies, slides, blocks of rows), so its
location is exact. Within a section, text is packed at the coarsest boundary that fits the target:
paragraphs, then sentences (". ! ?" and Chinese "。！？"), then lines, then words. A chunk is cut mid-word
only when one word alone is longer than the target; CJK text has no spaces, so there every ideograph or
kana is a word of its own. Consecutive chunks of a section overlap: the next one starts with the last
sentences (or, failing those, words) of the previous one that fit in `overlap_tokens`."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Final

from app.documents.model import ExtractedDocument

TokenCounter = Callable[[str], int]

# A passage's length at most by `estimate_tokens`: e5's 512-token window leaves room for its error.
PASSAGE_TOKENS: Final = 400

# Ideographs, kana, bopomofo and CJK punctuation: scripts written without spaces between words.
_IDEOGRAPHIC: Final = (
    "\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\uf900-\ufaff\ufe30-\ufe4f\uff00-\uffef"
)
# For counting, Hangul too: Korean keeps spaces between words but costs about a token per syllable.
_CJK_RE: Final = re.compile(f"[{_IDEOGRAPHIC}\uac00-\ud7af]")
_PARAGRAPH_BREAK_RE: Final = re.compile(r"\n[ \t]*\n\s*")
# A sentence ends at . ! ? (with closing quotes or brackets) before whitespace, or at 。！？ (and their
# closers) before anything: Chinese puts no space after a full stop.
_SENTENCE_END_RE: Final = re.compile(r"""(?:[.!?…]+["'”’)\]]*\s+|[。！？]+[”’」』）)]*\s*)""")
_LINE_BREAK_RE: Final = re.compile(r"\n")
# Words are runs of non-space characters, except that each ideograph, kana and CJK punctuation mark stands
# alone.
_WORD_RE: Final = re.compile(f"[{_IDEOGRAPHIC}]|[^\\s{_IDEOGRAPHIC}]+")


@dataclass(frozen=True)
class Chunk:
    """A passage: its text, the location of the section it came from, and its place (0, 1, …) among the
    document's chunks."""

    text: str
    location: str
    ordinal: int


def estimate_tokens(text: str) -> int:
    """A cheap token count for when the embedding model's tokenizer is not at hand: one token per CJK
    character (ideographs, kana, Hangul, CJK punctuation; BPE vocabularies of multilingual models come
    close to that) and one per four other characters, spaces included (the usual figure for English)."""
    cjk = len(text) - len(_CJK_RE.sub("", text))
    return cjk + math.ceil((len(text) - cjk) / 4)


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    tokens: int


def chunk(
    doc: ExtractedDocument,
    *,
    target_tokens: int = PASSAGE_TOKENS,
    overlap_tokens: int = 60,
    count_tokens: TokenCounter | None = None,
) -> list[Chunk]:
    """The document's chunks in reading order, each at most `target_tokens` long by `count_tokens` (the
    estimate above by default; pass the embedding model's own counter for exact sizes). A chunk's count is
    the sum of its pieces' counts, which a real tokenizer may put a token or two off the count of the
    joined text."""
    if target_tokens < 1:
        raise ValueError("target_tokens must be at least 1")
    if not 0 <= overlap_tokens < target_tokens:
        raise ValueError("overlap_tokens must be at least 0 and less than target_tokens")
    counter = count_tokens or estimate_tokens
    chunks: list[Chunk] = []
    for section in doc.sections:
        for text in _chunk_section(section.text, target_tokens, overlap_tokens, counter):
            chunks.append(Chunk(text, section.location, len(chunks)))
    return chunks


def _chunk_section(text: str, target: int, overlap: int, count: TokenCounter) -> Iterator[str]:
    pieces = list(_pieces(text, 0, len(text), target, count, 0))
    start = end = -1
    tokens = 0
    for piece in pieces:
        if start >= 0 and tokens + piece.tokens > target:
            yield _trim(text[start:end])
            start, tokens = _overlap(text, start, end, min(overlap, target - piece.tokens), count)
        if start < 0:
            start = piece.start
        end = piece.end
        tokens += piece.tokens
    if start >= 0:
        yield _trim(text[start:end])


def _trim(text: str) -> str:
    # Leading spaces stay: a chunk of code keeps its first line's indentation.
    return text.rstrip().lstrip("\r\n")


_SPLITTERS: Final = (_PARAGRAPH_BREAK_RE, _SENTENCE_END_RE, _LINE_BREAK_RE)


def _pieces(text: str, start: int, end: int, target: int, count: TokenCounter, level: int) -> Iterator[_Span]:
    """Spans of text[start:end] each within the target, cut at the coarsest boundary that gets there:
    paragraphs, sentences, lines, words, and characters only inside a word longer than the target."""
    tokens = count(text[start:end])
    if tokens <= target:
        if text[start:end].strip():
            yield _Span(start, end, tokens)
        return
    if level < len(_SPLITTERS):
        bounds = _split(_SPLITTERS[level], text, start, end)
        if len(bounds) > 1:
            for piece_start, piece_end in bounds:
                yield from _pieces(text, piece_start, piece_end, target, count, level + 1)
            return
        yield from _pieces(text, start, end, target, count, level + 1)
        return
    words = [(match.start(), match.end()) for match in _WORD_RE.finditer(text, start, end)]
    if len(words) > 1:
        for word_start, word_end in words:
            yield from _pieces(text, word_start, word_end, target, count, level)
        return
    yield from _characters(text, start, end, target, count)


def _split(pattern: re.Pattern[str], text: str, start: int, end: int) -> list[tuple[int, int]]:
    """text[start:end] cut after each match of `pattern`; the separator stays with the piece before it."""
    bounds = []
    position = start
    for match in pattern.finditer(text, start, end):
        if match.end() > position and match.end() < end:
            bounds.append((position, match.end()))
            position = match.end()
    bounds.append((position, end))
    return [(a, b) for a, b in bounds if text[a:b].strip()]


def _characters(text: str, start: int, end: int, target: int, count: TokenCounter) -> Iterator[_Span]:
    """A single word longer than the target (a hash, a URL, a line of minified code) in target-sized
    slices; the slice length is found by halving, so a real tokenizer is asked O(log n) times per slice."""
    position = start
    while position < end:
        # No tokenizer packs 32 characters into a token on average, so the slice lies within that window.
        low, high = position + 1, min(end, position + 32 * target)
        while low < high:
            middle = (low + high + 1) // 2
            if count(text[position:middle]) <= target:
                low = middle
            else:
                high = middle - 1
        yield _Span(position, low, count(text[position:low]))
        position = low


def _overlap(text: str, start: int, end: int, budget: int, count: TokenCounter) -> tuple[int, int]:
    """Where the next chunk starts, and its tokens so far: the last sentences of text[start:end] that fit
    the budget or, when even the last sentence does not, its last words. Never the whole previous chunk."""
    if budget <= 0:
        return -1, 0
    best = -1
    best_tokens = 0
    for cuts in (_sentence_starts(text, start, end), _word_starts(text, start, end)):
        for cut in reversed(cuts):
            if cut <= start:
                break
            tokens = count(text[cut:end])
            if tokens > budget:
                break
            best, best_tokens = cut, tokens
        if best >= 0:
            return best, best_tokens
    return -1, 0


def _sentence_starts(text: str, start: int, end: int) -> list[int]:
    return [match.end() for match in _SENTENCE_END_RE.finditer(text, start, end) if match.end() < end]


def _word_starts(text: str, start: int, end: int) -> list[int]:
    # Only the chunk's tail can fit an overlap budget; words are looked for in its last stretch alone.
    window = max(start, end - 4096)
    return [match.start() for match in _WORD_RE.finditer(text, window, end)]
