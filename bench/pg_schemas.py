"""Fresh PostgreSQL schemas for the benchmarks: one per run, each dropped afterwards.

A run's engine or storage connects with the schema as its ``search_path`` (:func:`with_schema`), so runs
never see each other's tables and the server is left as it was found.
"""

from __future__ import annotations

import secrets
from urllib.parse import quote, urlsplit, urlunsplit


def with_schema(url: str, schema: str) -> str:
    """``url`` with its connections' ``search_path`` set to ``schema``."""
    parts = urlsplit(url)
    option = "options=" + quote(f"-csearch_path={schema}")
    return urlunsplit(parts._replace(query=f"{parts.query}&{option}" if parts.query else option))


class Schemas:
    """Fresh schemas on a PostgreSQL server (one per run), all dropped by :meth:`drop_all`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.made: list[str] = []
        self.server_version: int | None = None
        """The server's version number (e.g. 150020), once :meth:`new` has connected."""

    async def new(self) -> str:
        """A URL on a new, empty schema (the engine or storage migrates it when it opens)."""
        import psycopg

        schema = f"cs_bench_{secrets.token_hex(6)}"
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await conn.execute(f"CREATE SCHEMA {schema}")
            self.server_version = conn.info.server_version
        self.made.append(schema)
        return with_schema(self.url, schema)

    async def drop_all(self) -> None:
        """Drop every schema :meth:`new` made."""
        import psycopg

        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            for schema in self.made:
                await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        self.made.clear()
