"""Long-term memories in SQLite: :class:`SQLiteMemoryStore`, FTS5 with BM25 ranking, in the same file.

Each memory is a row of ``memories``; ``memories_fts`` (external content, porter stemming) indexes its
text and scope tokens and is kept in step by triggers. A search ORs the words of the query in one ``MATCH``,
with the scope's tokens, and applies scope and filters as plain conditions on the joined row. A scoped search
ranks its candidates with BM25 over the scope (:mod:`storage.sqlite.bm25`) from the stems each memory keeps in
``terms``, and reads the full rows of the best ``top_k`` alone; a search without a scope, or whose scope has
more than :data:`MAX_CANDIDATES` candidates, is ordered by FTS5's ``bm25()``.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Sequence
from typing import Any

from sqlite_utils import Database

from bot.messages import ChatMessage
from storage.codec import dumps, loads
from storage.memory_filters import SQLITE_DIALECT, scope_token, token_prefilter
from storage.memory_rows import (
    check_delete,
    check_top_k,
    exact_conditions,
    memory_rows,
    query_terms,
    search_conditions,
)
from storage.protocols import Memory
from storage.sqlite.bm25 import bm25_scores_of_stems, stems
from storage.sqlite.connection import connector_for

_COLUMNS = "m.id, m.text, m.user_id, m.run_id, m.agent_id, m.metadata"
MAX_CANDIDATES = 300
"""A scoped search ranks at most this many candidates itself; a broader one lets FTS5's bm25() rank."""


class SQLiteMemoryStore:
    """Memories in the SQLite file, searched with FTS5 (BM25).

    >>> store = SQLiteMemoryStore("countersign.db")
    >>> store.add_memories(["checkout deploys need two approvers"], user_id="U_ANA")
    ['5f0c…']
    >>> [m.text for m in store.search_memories("who approves checkout deploys?", user_id="U_ANA")]
    ['checkout deploys need two approvers']

    ``path_or_db`` is a file path, a :class:`storage.Storage` (shares its connections) or a sqlite-utils
    ``Database``. The scoping rules are those of :class:`storage.protocols.MemoryStore`.
    """

    # Its public path, which saved agent configurations name (see storage/memories/): the class moved to
    # storage.sqlite, the serialised "type" and pickles did not.
    __module__ = "storage.memories"

    def __init__(self, path_or_db: str | pathlib.Path | Database | Any) -> None:
        self.connector, self._owned = connector_for(path_or_db)

    def add_memories(
        self,
        messages_or_texts: Sequence[ChatMessage | str],
        *,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[str]:
        """Store memories (secrets masked) and return their ids; adding one again adds nothing.

        >>> store.add_memories(["our staging cluster is eu-2"], metadata={"channel": "C1"})
        ['9a1e…']
        """
        rows = memory_rows(messages_or_texts, user_id=user_id, run_id=run_id, agent_id=agent_id, metadata=metadata)
        if rows:
            now = time.time()
            with self.connector.writing() as db:
                db.conn.executemany(
                    "INSERT INTO memories (id, text, user_id, run_id, agent_id, metadata, created_at, scope_tokens, "
                    "terms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                    [
                        (
                            r.id,
                            r.text,
                            r.user_id,
                            r.run_id,
                            r.agent_id,
                            dumps(r.metadata),
                            now,
                            r.scope_tokens,
                            stems(r.text),
                        )
                        for r in rows
                    ],
                )
        return [r.id for r in rows]

    def search_memories(
        self,
        query: str | None,
        *,
        filters: dict[str, Any] | None = None,
        top_k: int = 5,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> list[Memory]:
        """The ``top_k`` memories in scope that best match ``query`` (any of its words), best first.

        Without query words: the newest memories in scope, with score 0.

        >>> store.search_memories("staging cluster", filters={"field": "meta.channel", "operator": "==", "value": "C1"})
        [Memory(id='9a1e…', text='our staging cluster is eu-2', score=1.2, …)]
        """
        k = check_top_k(top_k)
        conditions, params = search_conditions(
            SQLITE_DIALECT, filters, user_id=user_id, run_id=run_id, agent_id=agent_id
        )
        terms = query_terms(query)
        if terms:
            words, scope = _match(terms, filters, user_id=user_id, agent_id=agent_id)
            match = f"{words} AND {scope}" if scope else words
            where = " AND ".join(["memories_fts MATCH ?", *conditions])
            if scope:
                ranked = self._rank_in_scope(terms, scope, match, where, params, k)
                if ranked is not None:
                    return ranked
            # Ranked on the text alone: the scope tokens weigh nothing.
            statement = (
                f"SELECT {_COLUMNS}, -bm25(memories_fts, 1.0, 0.0) FROM memories_fts JOIN memories m "
                f"ON m.seq = memories_fts.rowid WHERE {where} ORDER BY bm25(memories_fts, 1.0, 0.0) LIMIT ?"
            )
            arguments = [match, *params, k]
        else:
            where = " AND ".join(conditions) or "1"
            statement = f"SELECT {_COLUMNS}, 0.0 FROM memories m WHERE {where} ORDER BY m.seq DESC LIMIT ?"
            arguments = [*params, k]
        with self.connector.reading() as db:
            rows = db.execute(statement, arguments).fetchall()
        return [_memory(row) for row in rows]

    def _rank_in_scope(
        self, terms: list[str], scope: str, match: str, where: str, params: list[Any], k: int
    ) -> list[Memory] | None:
        """BM25 over the scope's memories (see :mod:`storage.sqlite.bm25`); ``None`` when the scope has too many.

        The candidates bring only their stored stems; the full rows are read for the ``k`` best alone.
        """
        with self.connector.reading() as db:
            candidates = db.execute(
                "SELECT m.seq, m.terms FROM memories_fts JOIN memories m ON m.seq = memories_fts.rowid "
                f"WHERE {where} LIMIT ?",
                [match, *params, MAX_CANDIDATES + 1],
            ).fetchall()
            if len(candidates) > MAX_CANDIDATES:
                return None
            if not candidates:
                return []
            in_scope = db.execute("SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH ?", [scope]).fetchone()[0]
            scores = bm25_scores_of_stems(terms, [row[1] for row in candidates], in_scope)
            # Best first; among equal scores the newest (the highest rowid came last from the index, and the sort
            # is stable).
            order = sorted(range(len(candidates) - 1, -1, -1), key=scores.__getitem__, reverse=True)[:k]
            seqs = [candidates[i][0] for i in order]
            rows = db.execute(
                f"SELECT m.seq, {_COLUMNS} FROM memories m WHERE m.seq IN ({', '.join('?' * len(seqs))})", seqs
            ).fetchall()
        by_seq = {row[0]: row[1:] for row in rows}
        # A memory deleted between the two reads is left out, never shown after its delete.
        return [_memory((*by_seq[seq], scores[i])) for seq, i in zip(seqs, order, strict=True) if seq in by_seq]

    def delete_memories(
        self,
        ids: Sequence[str] | None = None,
        *,
        filters: dict[str, Any] | None = None,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> int:
        """Delete the memories with these ids and/or matching the filters and scope; return how many went.

        >>> store.delete_memories(["9a1e…"], user_id="U_ANA")
        1
        """
        id_list = check_delete(ids, filters, (user_id, run_id, agent_id))
        conditions, params = exact_conditions(
            SQLITE_DIALECT, filters, user_id=user_id, run_id=run_id, agent_id=agent_id
        )
        if id_list is not None:
            if not id_list:
                return 0
            conditions.append(f"id IN ({', '.join('?' * len(id_list))})")
            params.extend(id_list)
        with self.connector.writing() as db:
            return db.execute(f"DELETE FROM memories WHERE {' AND '.join(conditions) or '1'}", params).rowcount

    def count_memories(
        self,
        *,
        filters: dict[str, Any] | None = None,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> int:
        """How many memories match the filters and scope (every memory without either).

        >>> store.count_memories(user_id="U_ANA")
        1
        """
        conditions, params = exact_conditions(
            SQLITE_DIALECT, filters, user_id=user_id, run_id=run_id, agent_id=agent_id
        )
        with self.connector.reading() as db:
            where = " AND ".join(conditions) or "1"
            return db.execute(f"SELECT COUNT(*) FROM memories WHERE {where}", params).fetchone()[0]

    def to_dict(self) -> dict[str, Any]:
        """``{"type", "init_parameters": {"path_or_db": <file>}}``; an in-memory database cannot be serialised."""
        if self.connector.path in ("", ":memory:"):
            raise ValueError("an in-memory memory store cannot be serialised: give it a file")
        return {"type": "storage.memories.SQLiteMemoryStore", "init_parameters": {"path_or_db": self.connector.path}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SQLiteMemoryStore:
        """Inverse of :meth:`to_dict`: opens (and migrates) the file."""
        return cls(data["init_parameters"]["path_or_db"])

    def close(self) -> None:
        """Close the connections if this store opened the file itself."""
        if self._owned:
            self.connector.close()


def _match(terms: list[str], filters: Any, *, user_id: str | None, agent_id: str | None) -> tuple[str, str | None]:
    """The FTS5 queries of a search: any of the words; the scope's tokens when the scope or filters allow."""
    words = " OR ".join(f'"{term}"' for term in terms)
    scope = [
        f'"{scope_token(field, value)}"'
        for field, value in (("user_id", user_id), ("agent_id", agent_id))
        if value is not None
    ]
    prefilter = token_prefilter(filters) if filters is not None else None
    if prefilter is not None:
        scope.append(f"({prefilter})")
    return f"{{text}} : ({words})", (f"{{scope_tokens}} : ({' AND '.join(scope)})" if scope else None)


def _memory(row: Sequence[Any]) -> Memory:
    memory_id, text, user_id, run_id, agent_id, metadata, score = row
    return Memory(
        id=memory_id,
        text=text,
        score=float(score),
        user_id=user_id,
        run_id=run_id,
        agent_id=agent_id,
        metadata=loads(metadata, kind="memory", record_id=memory_id),
    )
