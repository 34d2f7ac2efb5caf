"""Fresh PostgreSQL schemas for the benchmarks: one per run, each dropped afterwards.

A run's engine or storage connects with the schema as its ``search_path`` (:func:`with_schema`), so runs
never see each other's tables and the server is left as it was found.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit, urlunsplit


def with_schema(url: str, schema: str) -> str:
    """``url`` with its connections' ``search_path`` set to ``schema``, and ``schema`` as their
    ``application_name`` (how :func:`backend_cpu_s` finds the server processes serving them)."""
    parts = urlsplit(url)
    option = "options=" + quote(f"-csearch_path={schema}") + f"&application_name={schema}"
    return urlunsplit(parts._replace(query=f"{parts.query}&{option}" if parts.query else option))


def schema_of(url: str) -> str | None:
    """The schema (and application name) :func:`with_schema` put into ``url``; ``None`` for another URL."""
    names = parse_qs(urlsplit(url).query).get("application_name")
    return names[-1] if names else None


async def backend_cpu_s(url: str, application_name: str) -> dict[int, float] | None:
    """CPU seconds (user + system, from ``/proc/<pid>/stat``) of each server process now serving a connection named
    ``application_name``, by pid; ``None`` when the server is not on this machine (its processes are not here)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND pid <> pg_backend_pid()",
            (application_name,),
        )
        pids = [pid for (pid,) in await cursor.fetchall()]
    return processes_cpu_s(pids)


def processes_cpu_s(pids: list[int]) -> dict[int, float] | None:
    """CPU seconds (utime + stime, fields 14 and 15 of ``/proc/<pid>/stat``) of each process, by pid."""
    tick = os.sysconf("SC_CLK_TCK")
    cpu: dict[int, float] = {}
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()
        cpu[pid] = (int(fields[11]) + int(fields[12])) / tick
    return cpu


def cpu_spent_s(before: dict[int, float] | None, after: dict[int, float] | None) -> float | None:
    """The server CPU spent between two :func:`backend_cpu_s` readings (connections opened since count whole)."""
    if before is None or after is None:
        return None
    return sum(spent - before.get(pid, 0.0) for pid, spent in after.items())


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
