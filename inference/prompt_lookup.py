"""Prompt-lookup drafts for speculative decoding: the tokens that followed the last earlier occurrence of the
reply's most recent n-gram, anywhere in the prompt or the reply so far.

A reply that repeats what the conversation holds (code given back with a small change, a quoted passage,
names and numbers from a document) predicts itself from it; the runner decodes such a draft in one batch and
keeps the part the model's own sampling agrees with, so the reply is the one plain decoding would give.
Why not llama-cpp-python's LlamaPromptLookupDecoding: it rescans the whole history with numpy for every
token, and belongs to the high-level generate loop this runner does not use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

# Measured in bench/speculative.py: a one-token match drafts on every common word and wastes batches.
MIN_NGRAM: Final = 2
MAX_NGRAM: Final = 4


class PromptLookup:
    """The history's n-grams (MIN_NGRAM to MAX_NGRAM tokens) by where they last ended, kept up to date as
    tokens are appended. The n-grams ending at the newest token are indexed only once another follows, so
    a lookup of the history's own tail finds an earlier occurrence with a continuation, never itself."""

    def __init__(self, history: Iterable[int]) -> None:
        self._tokens: list[int] = []
        self._ends: list[dict[tuple[int, ...], int]] = [{} for _ in range(MAX_NGRAM - MIN_NGRAM + 1)]
        for token in history:
            self.append(token)

    def append(self, token: int) -> None:
        tokens = self._tokens
        last = len(tokens) - 1
        for offset, ends in enumerate(self._ends):
            size = MIN_NGRAM + offset
            if last + 1 >= size:
                ends[tuple(tokens[last + 1 - size : last + 1])] = last
        tokens.append(token)

    def draft(self, limit: int) -> list[int]:
        """Up to `limit` tokens that followed the longest n-gram the history ends with, the last time it
        occurred; empty when none did."""
        tokens = self._tokens
        if limit <= 0:
            return []
        for offset in range(len(self._ends) - 1, -1, -1):
            size = MIN_NGRAM + offset
            if len(tokens) < size:
                continue
            end = self._ends[offset].get(tuple(tokens[-size:]))
            if end is not None:
                return tokens[end + 1 : end + 1 + limit]
        return []
