"""Long-term memories on PostgreSQL: :class:`PostgresMemoryStore`, full-text search over a GIN-indexed tsvector.

The semantics are those of :class:`storage.SQLiteMemoryStore` (scoping, idempotent adds, masking, filters);
a search ORs the query's words in one ``tsquery`` (each word quoted, and passed as a parameter) and ranks
the matches with ``ts_rank``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from bot.messages import ChatMessage
from storage.memory_filters import Dialect
from storage.memory_rows import (
    check_delete,
    check_top_k,
    exact_conditions,
    memory_rows,
    query_terms,
    search_conditions,
)
from storage.postgres.database import PostgresDatabase
from storage.postgres.opening import open_migrated_database
from storage.protocols import Memory

_COLUMNS = "id, text, user_id, run_id, agent_id, metadata::text"


def _meta(key: str) -> tuple[str, list[Any]]:
    # A JSON null reads as SQL NULL, as json_extract gives it on SQLite. The key is written out (it is checked
    # against the filters' key pattern), so the channel's expression index serves the comparison.
    return f"NULLIF(metadata -> '{key}', 'null'::jsonb)", []


POSTGRES_DIALECT = Dialect(
    placeholder="%s", meta=_meta, value=json.dumps, value_sql="%s::jsonb", null_safe_ne="IS DISTINCT FROM"
)
"""PostgreSQL: metadata is ``jsonb``; a compared value binds as JSON, so numbers compare as numbers."""


class PostgresMemoryStore:
    """Memories in PostgreSQL, with the semantics of :class:`storage.SQLiteMemoryStore` (every method async).

    >>> store = PostgresMemoryStore("postgresql://bot@db.internal/countersign")  # opened on first use
    >>> await store.add_memories(["our staging cluster is eu-2"], metadata={"channel": "C1"})
    ['9a1e…']
    >>> [m.text for m in await store.search_memories("which staging cluster?")]
    ['our staging cluster is eu-2']

    ``db_or_url`` is an open :class:`PostgresDatabase` (shared with the other stores) or a URL; a URL's
    pool is opened, and the schema migrated, by the first call, on that call's event loop.
    """

    def __init__(self, db_or_url: PostgresDatabase | str) -> None:
        self.url = db_or_url if isinstance(db_or_url, str) else None
        self._db = None if isinstance(db_or_url, str) else db_or_url
        self._opening = asyncio.Lock()

    async def _database(self) -> PostgresDatabase:
        if self._db is not None:
            return self._db
        async with self._opening:
            if self._db is None:
                self._db = await open_migrated_database(self.url or "")
        return self._db

    async def add_memories(
        self,
        messages_or_texts: Sequence[ChatMessage | str],
        *,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> list[str]:
        """Store memories (secrets masked) and return their ids; adding one again adds nothing."""
        rows = memory_rows(messages_or_texts, user_id=user_id, run_id=run_id, agent_id=agent_id, metadata=metadata)
        if rows:
            db = await self._database()
            await db.execute(
                "INSERT INTO memories (id, text, user_id, run_id, agent_id, metadata, created_at) "
                "SELECT id, text, user_id, run_id, agent_id, metadata::jsonb, now() "
                "FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[]) "
                "AS t(id, text, user_id, run_id, agent_id, metadata) ON CONFLICT (id) DO NOTHING",
                [
                    [r.id for r in rows],
                    [r.text for r in rows],
                    [r.user_id for r in rows],
                    [r.run_id for r in rows],
                    [r.agent_id for r in rows],
                    [json.dumps(r.metadata, ensure_ascii=False) for r in rows],
                ],
            )
        return [r.id for r in rows]

    async def search_memories(
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
        """
        k = check_top_k(top_k)
        conditions, params = search_conditions(
            POSTGRES_DIALECT, filters, user_id=user_id, run_id=run_id, agent_id=agent_id
        )
        terms = query_terms(query)
        if terms:
            # Words are \\w+ only, each quoted: nothing in them can be tsquery syntax. '|' ORs them.
            tsquery = " | ".join(f"'{term}'" for term in terms)
            where = " AND ".join(["search @@ q", *conditions])
            statement = (
                f"SELECT {_COLUMNS}, ts_rank(search, q) AS score FROM memories, "
                f"to_tsquery('english'::regconfig, %s) AS q WHERE {where} ORDER BY score DESC, seq DESC LIMIT %s"
            )
            arguments = [tsquery, *params, k]
        else:
            where = " AND ".join(conditions) or "TRUE"
            statement = f"SELECT {_COLUMNS}, 0.0 FROM memories WHERE {where} ORDER BY seq DESC LIMIT %s"
            arguments = [*params, k]
        db = await self._database()
        rows = await db.fetchall(statement, arguments)
        return [_memory(row) for row in rows]

    async def delete_memories(
        self,
        ids: Sequence[str] | None = None,
        *,
        filters: dict[str, Any] | None = None,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> int:
        """Delete the memories with these ids and/or matching the filters and scope; return how many went."""
        id_list = check_delete(ids, filters, (user_id, run_id, agent_id))
        conditions, params = exact_conditions(
            POSTGRES_DIALECT, filters, user_id=user_id, run_id=run_id, agent_id=agent_id
        )
        if id_list is not None:
            if not id_list:
                return 0
            conditions.append("id = ANY(%s)")
            params.append(id_list)
        db = await self._database()
        return await db.execute(f"DELETE FROM memories WHERE {' AND '.join(conditions) or 'TRUE'}", params)

    async def count_memories(
        self,
        *,
        filters: dict[str, Any] | None = None,
        user_id: str | None = None,
        run_id: str | None = None,
        agent_id: str | None = None,
    ) -> int:
        """How many memories match the filters and scope (every memory without either)."""
        conditions, params = exact_conditions(
            POSTGRES_DIALECT, filters, user_id=user_id, run_id=run_id, agent_id=agent_id
        )
        db = await self._database()
        row = await db.fetchone(f"SELECT COUNT(*) FROM memories WHERE {' AND '.join(conditions) or 'TRUE'}", params)
        return int(row[0])

    def to_dict(self) -> dict[str, Any]:
        """``{"type", "init_parameters": {"db_or_url": <url>}}``; only a store built from a URL without a password.

        A password would be written wherever the configuration goes: give it through ``PGPASSWORD`` or
        ``~/.pgpass`` instead.
        """
        if self.url is None:
            raise ValueError("a PostgresMemoryStore on an open database cannot be serialised: build it from a URL")
        if urlsplit(self.url).password is not None:
            raise ValueError("the URL holds a password: pass it through PGPASSWORD or ~/.pgpass to serialise the store")
        return {"type": "storage.postgres.memories.PostgresMemoryStore", "init_parameters": {"db_or_url": self.url}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PostgresMemoryStore:
        """Inverse of :meth:`to_dict` (the pool opens on first use)."""
        return cls(data["init_parameters"]["db_or_url"])

    async def aclose(self) -> None:
        """Close the pool if this store opened it from a URL."""
        if self.url is not None and self._db is not None:
            await self._db.close()
            self._db = None


def _memory(row: Sequence[Any]) -> Memory:
    memory_id, text, user_id, run_id, agent_id, metadata, score = row
    return Memory(
        id=memory_id,
        text=text,
        score=float(score),
        user_id=user_id,
        run_id=run_id,
        agent_id=agent_id,
        metadata=json.loads(metadata),
    )
