"""BM25 over a few candidate texts, for ranking a person's or a channel's memories without a global pass.

FTS5's ``bm25()`` computes each word's document frequency over the whole index, once per query: a full pass
over the word's posting list, which for a common word at 100,000 memories costs milliseconds. A scoped search
has only tens of candidates (the memories in scope that have any of the words), and BM25 over the scope is
what a person means anyway: how rare a word is among *their* memories and their channel's. Candidates and
query go through the same light stemmer, so a word counts the same on both sides.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Sequence

K1 = 1.2
B = 0.75
_WORD = re.compile(r"\w+", re.UNICODE)
_SUFFIXES = ("ings", "ing", "ers", "er", "ies", "es", "ed", "s", "e")


@functools.lru_cache(maxsize=65_536)
def stem(word: str) -> str:
    """A light English stem: "approvers", "approves", "approved" → "approv"; numbers and short words stay.

    >>> stem("deploys"), stem("clusters"), stem("eu")
    ('deploy', 'clust', 'eu')
    """
    if len(word) <= 3 or not word.isalpha():
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def bm25_scores(terms: Sequence[str], texts: Sequence[str], n_docs: int) -> list[float]:
    """The BM25 score of each text for the query ``terms``, in a collection of ``n_docs`` documents.

    The texts are every document of the collection that has one of the terms (so their document frequencies
    are exact); their mean length stands for the collection's.

    >>> [round(s, 2) for s in bm25_scores(["staging"], ["staging is eu-2", "billing is Ana's"], 2)]
    [0.69, 0.0]
    """
    if not texts:
        return []
    wanted = {stem(term) for term in terms}
    docs: list[dict[str, int]] = []
    lengths: list[int] = []
    for text in texts:
        words = _WORD.findall(text.lower())
        counts: dict[str, int] = {}
        for word in words:
            stemmed = stem(word)
            if stemmed in wanted:
                counts[stemmed] = counts.get(stemmed, 0) + 1
        docs.append(counts)
        lengths.append(len(words))
    average = sum(lengths) / len(lengths) or 1.0
    total = max(n_docs, len(texts))
    df = Counter(term for doc in docs for term in doc)
    idf = {term: math.log((total - count + 0.5) / (count + 0.5) + 1.0) for term, count in df.items()}
    scores = []
    for doc, length in zip(docs, lengths, strict=True):
        norm = K1 * (1.0 - B + B * length / average)
        scores.append(sum((idf[t] * tf * (K1 + 1.0) / (tf + norm) for t, tf in doc.items()), 0.0))
    return scores
