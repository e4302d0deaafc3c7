"""Terms for the passage full-text index (SQLite FTS5 with the `unicode61` tokenizer), in any language.

`unicode61` splits text at spaces and punctuation, which is right for English, French or Russian, but
Chinese and Japanese are written without spaces: a whole sentence would be one token, and a question could
only match a passage holding exactly the same sentence. So before the text reaches FTS5, every run of
Han, Hiragana, Katakana or Hangul characters is rewritten as its single characters and its overlapping
character bigrams, separated by spaces ("全文检索" -> "全 全文 文 文检 检 检索 索"); everything else passes
through for `unicode61` to split, fold case and strip diacritics as it does for messages.

Why bigrams and not a dictionary segmenter such as jieba:

- Nothing to ship or keep current. jieba needs its dictionary (about 5 MB, plus an HMM for unknown words)
  and only knows Chinese; Japanese and Korean would need two more. Bigrams need no data at all.
- Recall on names and terms. A dictionary segments words it does not know (a product, a person, new
  jargon, a project's own identifiers: exactly what people look up in their documents) unpredictably, and
  a question only matches when it is cut the same way as the passage. Every two-character stretch of a
  passage is a bigram, so any such stretch of the question finds it, however the words would be cut.
- It is the established answer: Lucene's CJKAnalyzer (StandardTokenizer + CJKBigramFilter, also behind
  Elasticsearch's `cjk` analyzer) indexes overlapping bigrams of Han, Hiragana, Katakana and Hangul and
  keeps a lone character as a unigram. Here single characters are indexed too, so a one-character
  question ("猫") matches inside longer runs; questions use bigrams only, as Lucene does, because a common
  single character (的, 是) would match most Chinese passages and cost time without ranking anything.
- Precision is what bigrams give up (a bigram can straddle two words); bm25 rewards passages matching
  many of the question's bigrams, and the dense vectors fused with it (app.documents.index) do not
  depend on segmentation at all.

Both sides are NFKC-normalised first, so full-width Latin letters and digits (ＰＤＦ２０２４), common in
Chinese and Japanese text, match their ASCII forms.

`index_terms` is part of the stored index: FTS5 external-content rows are deleted by handing back the
terms they were indexed with, which app.documents.index recomputes from the chunk text. Changing its
output therefore needs a migration that rebuilds `document_chunks_fts` (its 'delete-all' command, then
every chunk again).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator, Sequence

# Scripts written without spaces between words (Hangul is spaced, but by phrase, and Lucene bigrams it
# too). The Katakana middle dot U+30FB is punctuation and stays a separator.
_CJK_CHARS = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u2e80-\u2fdf"  # CJK and Kangxi radicals
    "\u3005\u3007\u3021-\u3029\u3038-\u303b"  # 々 〇 and the Hangzhou numerals
    "\u3040-\u309f"  # Hiragana
    "\u30a0-\u30fa\u30fc-\u30ff"  # Katakana
    "\u3130-\u318f"  # Hangul compatibility Jamo
    "\u31f0-\u31ff"  # Katakana phonetic extensions
    "\u3400-\u4dbf"  # CJK extension A
    "\u4e00-\u9fff"  # CJK unified ideographs
    "\ua960-\ua97f\uac00-\ud7ff"  # Hangul Jamo extended, syllables
    "\uf900-\ufaff"  # CJK compatibility ideographs
    "\uff66-\uff9f"  # half-width Katakana
    "\U00020000-\U000323af"  # CJK extensions B to H
)
_CJK_RUN = re.compile(f"[{_CJK_CHARS}]+")
# What unicode61 keeps as token characters (letters and numbers), outside CJK runs.
_QUERY_PIECE = re.compile(f"(?P<cjk>[{_CJK_CHARS}]+)|(?P<word>[^\\W_{_CJK_CHARS}]+)")

# A question is usually a sentence; a pasted paragraph would otherwise become an OR of hundreds of terms,
# each one a posting list to read.
MAX_QUERY_TERMS = 64


def _grams(run: str) -> list[str]:
    """The characters of a CJK run and its overlapping bigrams, in reading order."""
    terms: list[str] = []
    for i, char in enumerate(run):
        terms.append(char)
        if i + 1 < len(run):
            terms.append(run[i : i + 2])
    return terms


def _bigrams(run: str) -> list[str]:
    return [run[i : i + 2] for i in range(len(run) - 1)] or [run]


def _query_pieces(text: str) -> Iterator[str]:
    for piece in _QUERY_PIECE.finditer(text):
        cjk = piece.group("cjk")
        if cjk is None:
            yield piece.group("word")
        else:
            yield from _bigrams(cjk)


def index_terms(text: str) -> str:
    """The text FTS5 indexes for a passage: CJK runs as characters and bigrams, the rest as it is."""
    text = unicodedata.normalize("NFKC", text)
    # Spaces around each rewritten run keep it apart from Latin letters next to it ("Python编程").
    return _CJK_RUN.sub(lambda run: " " + " ".join(_grams(run.group())) + " ", text)


def question_terms(text: str, *, max_terms: int = MAX_QUERY_TERMS) -> list[str]:
    """The terms of a question: its words and the bigrams of its CJK runs (a lone CJK character as it
    is), each once (case aside), at most `max_terms`, in the order they appear."""
    terms: dict[str, str] = {}
    for term in _query_pieces(unicodedata.normalize("NFKC", text)):
        # unicode61 folds case, so "Linux" and "linux" are one term.
        terms.setdefault(term.lower(), term)
        if len(terms) == max_terms:
            break
    return list(terms.values())


def match_any(terms: Sequence[str]) -> str:
    """An FTS5 MATCH expression true for a passage holding any of `terms`, each a quoted string."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def query_terms(text: str, *, max_terms: int = MAX_QUERY_TERMS) -> str:
    """A safe FTS5 MATCH expression for a question: its words and CJK bigrams, each quoted, OR-joined.

    Any term may match (recall first: bm25 ranks passages matching more and rarer terms higher). Every
    term is a quoted string holding only letters and digits, so what the user typed (quotes, AND, OR,
    NOT, NEAR, `*`, `^`, `:`, parentheses, `-`) is never FTS5 syntax. Returns "" when there is nothing
    to search for.
    """
    return match_any(question_terms(text, max_terms=max_terms))
