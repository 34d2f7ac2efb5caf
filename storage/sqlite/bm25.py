"""BM25 over a few candidate memories, for ranking a person's or a channel's memories without a global pass.

FTS5's ``bm25()`` computes each word's document frequency over the whole index, once per query: a full pass
over the word's posting list, which for a common word at 100,000 memories costs milliseconds. A scoped search
has only tens of candidates (the memories in scope that have any of the words), and BM25 over the scope is
what a person means anyway: how rare a word is among *their* memories and their channel's. Candidates and
query go through the same light stemmer, so a word counts the same on both sides.

A memory's words are stemmed once, when it is written (:func:`stems`, kept in ``memories.terms``), so a
search only counts the query's stems in each candidate. Changing :func:`stem` therefore needs a migration
that recomputes the stored stems.
"""

from __future__ import annotations

import functools
import math
import re
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


def stems(text: str) -> str:
    """The stems of a text's words, in order and space-separated: what BM25 counts, computed once per memory.

    >>> stems("Checkout deploys need 2 approvers")
    'checkout deploy need 2 approv'
    """
    return " ".join(stem(word) for word in _WORD.findall(text.lower()))


def bm25_scores(terms: Sequence[str], texts: Sequence[str], n_docs: int) -> list[float]:
    """The BM25 score of each text for the query ``terms``, in a collection of ``n_docs`` documents.

    The texts are every document of the collection that has one of the terms (so their document frequencies
    are exact); their mean length stands for the collection's.

    >>> [round(s, 2) for s in bm25_scores(["staging"], ["staging is eu-2", "billing is Ana's"], 2)]
    [0.69, 0.0]
    """
    return bm25_scores_of_stems(terms, [stems(text) for text in texts], n_docs)


def bm25_scores_of_stems(terms: Sequence[str], stemmed: Sequence[str], n_docs: int) -> list[float]:
    """:func:`bm25_scores` over texts already passed through :func:`stems` (as ``memories.terms`` holds them).

    Each memory's score sums its words' parts in the order of the query, so memories that match equally well
    score exactly the same.

    >>> [round(s, 2) for s in bm25_scores_of_stems(["staging"], ["stag is eu 2", "bill is ana s"], 2)]
    [0.69, 0.0]
    """
    if not stemmed:
        return []
    wanted = dict.fromkeys(stem(term) for term in terms)
    # Per query word: (candidate, occurrences) of the candidates that have it. A set intersection per candidate
    # keeps the work per candidate in C; a candidate has one or two of the words.
    found: dict[str, list[tuple[int, int]]] = {word: [] for word in wanted}
    lengths = []
    for i, text in enumerate(stemmed):
        words = text.split()
        lengths.append(len(words))
        for word in wanted.keys() & words:
            found[word].append((i, words.count(word)))
    average = sum(lengths) / len(lengths) or 1.0
    total = max(n_docs, len(stemmed))
    scores = [0.0] * len(stemmed)
    for hits in found.values():
        if hits:
            df = len(hits)
            idf = math.log((total - df + 0.5) / (df + 0.5) + 1.0)
            for i, tf in hits:
                scores[i] += idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * lengths[i] / average))
    return scores
