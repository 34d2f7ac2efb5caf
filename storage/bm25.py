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

    >>> [round(s, 2) for s in bm25_scores_of_stems(["staging"], ["stag is eu 2", "bill is ana s"], 2)]
    [0.69, 0.0]
    """
    if not stemmed:
        return []
    # Each word between two spaces and two spaces between words: counting " word " then counts every
    # occurrence, and no word inside another. A search does this for tens of candidates, so it stays in C.
    padded = [f" {text.replace(' ', '  ')} " for text in stemmed]
    lengths = [text.count(" ") + 1 if text else 0 for text in stemmed]
    average = sum(lengths) / len(lengths) or 1.0
    total = max(n_docs, len(stemmed))
    norms = [K1 * (1.0 - B + B * length / average) for length in lengths]
    scores = [0.0] * len(stemmed)
    for word in dict.fromkeys(stem(term) for term in terms):
        needle = f" {word} "
        tfs = [text.count(needle) for text in padded]
        df = len(tfs) - tfs.count(0)
        if not df:
            continue
        idf = math.log((total - df + 0.5) / (df + 0.5) + 1.0)
        for i, tf in enumerate(tfs):
            if tf:
                scores[i] += idf * tf * (K1 + 1.0) / (tf + norms[i])
    return scores
