"""What both memory backends agree on: the rows an add writes, the words a query ranks, the scope a call means.

Kept here so that SQLite and PostgreSQL cannot drift: ids and masking happen before either database
sees a memory, the query words are the same, and the scope rules of :class:`storage.protocols.MemoryStore`
are written once as SQL conditions over plain columns (``user_id``, ``run_id``, ``agent_id``).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.canonical import canonical_json
from bot.messages import ChatMessage
from bot.redaction import mask_for_display, mask_text
from storage.memory_filters import SCOPE_FIELDS, Dialect, compile_filter, scope_token

MAX_QUERY_TERMS = 32
"""A longer question keeps its first words: ranking on 32 words already finds the fact, and each term costs."""
MAX_TOP_K = 1000
_WORD = re.compile(r"\w+", re.UNICODE)
# Words that carry no meaning for finding a fact: a question's "what is the …" would otherwise match
# almost every memory (slow, and noise in the ranking).
STOPWORDS = frozenset(
    {
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "so",
        "that",
        "the",
        "their",
        "there",
        "these",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    }
)


@dataclass(frozen=True)
class MemoryRow:
    """One memory as it is written: masked text and metadata, its id and scope."""

    id: str
    text: str
    user_id: str | None
    run_id: str | None
    agent_id: str | None
    metadata: dict[str, Any]

    @property
    def scope_tokens(self) -> str:
        """One full-text token per scope value and string metadata value (see :func:`scope_token`)."""
        pairs = [
            *zip(SCOPE_FIELDS, (self.user_id, self.run_id, self.agent_id), strict=True),
            *((f"meta.{key}", value) for key, value in self.metadata.items()),
        ]
        return " ".join(scope_token(field, value) for field, value in pairs if isinstance(value, str))


def memory_rows(
    messages_or_texts: Sequence[ChatMessage | str],
    *,
    user_id: str | None,
    run_id: str | None,
    agent_id: str | None,
    metadata: dict[str, Any] | None,
) -> list[MemoryRow]:
    """The rows to write for an add: secrets masked, one id each (the message's, or a digest of scope and text).

    Messages without text are skipped; so are repeats within one call.

    >>> [r.text for r in memory_rows(["deploy token=abc123"], user_id="U1", run_id=None, agent_id=None, metadata=None)]
    ['deploy token=••••••']
    """
    if isinstance(messages_or_texts, (str, ChatMessage)):
        raise TypeError("add_memories takes a list of messages or texts")
    for name, value in (("user_id", user_id), ("run_id", run_id), ("agent_id", agent_id)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} must be a string or None")
    if metadata is not None and not isinstance(metadata, dict):
        raise TypeError("metadata must be a dict or None")
    meta = mask_for_display(dict(metadata or {}))
    rows: dict[str, MemoryRow] = {}
    for item in messages_or_texts:
        if isinstance(item, ChatMessage):
            if not item.text or not item.text.strip():
                continue
            text, memory_id = mask_text(item.text.strip()), item.id
        elif isinstance(item, str):
            if not item.strip():
                continue
            text = mask_text(item.strip())
            memory_id = text_memory_id(text, user_id=user_id, run_id=run_id, agent_id=agent_id, metadata=meta)
        else:
            raise TypeError(f"a memory is a ChatMessage or a str, not {type(item).__name__}")
        rows.setdefault(memory_id, MemoryRow(memory_id, text, user_id, run_id, agent_id, meta))
    return list(rows.values())


def text_memory_id(
    text: str, *, user_id: str | None, run_id: str | None, agent_id: str | None, metadata: dict[str, Any]
) -> str:
    """The id of a text memory: a digest of its scope, metadata and text, so adding it again adds nothing.

    >>> len(text_memory_id("eu-2", user_id=None, run_id=None, agent_id=None, metadata={}))
    16
    """
    key = canonical_json([user_id, run_id, agent_id, metadata, text])
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


def query_terms(query: str | None) -> list[str]:
    """The lower-cased words of ``query`` that a search ranks on (stopwords dropped unless nothing else is left).

    >>> query_terms("What is our staging cluster?")
    ['staging', 'cluster']
    """
    if not query:
        return []
    if not isinstance(query, str):
        raise TypeError("query must be a string or None")
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))
    meaningful = [w for w in words if w not in STOPWORDS]
    return (meaningful or words)[:MAX_QUERY_TERMS]


def check_top_k(top_k: Any) -> int:
    """``top_k`` if it is a whole number from 1 to :data:`MAX_TOP_K`, else ``ValueError``."""
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k must be a whole number from 1 to {MAX_TOP_K}, not {top_k!r}")
    return top_k


def search_conditions(
    dialect: Dialect, filters: Any, *, user_id: str | None, run_id: str | None, agent_id: str | None
) -> tuple[list[str], list[Any]]:
    """SQL conditions and parameters of a search's scope and filters (see :class:`storage.protocols.MemoryStore`)."""
    conditions: list[str] = []
    params: list[Any] = []
    for column, value in (("user_id", user_id), ("agent_id", agent_id)):
        if value is not None:
            conditions.append(f"{column} = {dialect.placeholder}")
            params.append(value)
    if run_id is None:
        conditions.append("run_id IS NULL")
    else:
        conditions.append(f"(run_id IS NULL OR run_id = {dialect.placeholder})")
        params.append(run_id)
    return _with_filters(dialect, filters, conditions, params)


def exact_conditions(
    dialect: Dialect, filters: Any, *, user_id: str | None, run_id: str | None, agent_id: str | None
) -> tuple[list[str], list[Any]]:
    """SQL conditions and parameters of a count's or delete's scope (each value given must match) and filters."""
    conditions: list[str] = []
    params: list[Any] = []
    for column, value in (("user_id", user_id), ("run_id", run_id), ("agent_id", agent_id)):
        if value is not None:
            conditions.append(f"{column} = {dialect.placeholder}")
            params.append(value)
    return _with_filters(dialect, filters, conditions, params)


def _with_filters(
    dialect: Dialect, filters: Any, conditions: list[str], params: list[Any]
) -> tuple[list[str], list[Any]]:
    if filters is not None:
        sql, more = compile_filter(filters, dialect)
        conditions.append(f"({sql})")
        params.extend(more)
    return conditions, params


def check_delete(ids: Sequence[str] | None, filters: Any, scope: Sequence[Any]) -> list[str] | None:
    """The ids of a delete as a list; ``ValueError`` for a delete that names nothing (it would erase everything)."""
    if isinstance(ids, str):
        raise TypeError("ids must be a list of memory ids")
    id_list = None if ids is None else [str(i) for i in ids]
    if id_list is None and filters is None and all(value is None for value in scope):
        raise ValueError("delete_memories needs ids, filters or a scope: refusing to delete every memory")
    return id_list
