"""The PostgreSQL server of the tests: a schema of its own for every test, made ahead in parallel batches.

The server is ``COUNTERSIGN_TEST_DATABASE_URL``, or the project machines' ``127.0.0.1:5432`` (trust
authentication, database ``test``). Other suites use the same server at the same time, so nothing here
touches a fixed name: each test gets a fresh ``cs_<random>`` schema, reached through the URL's
``search_path``, dropped after the test. Creating a schema's tables takes tens of milliseconds of server
time, mostly waiting, so a background loop keeps a stock of migrated schemas, made eight at a time on
eight connections while the tests run; whatever is left is dropped when the session ends.

>>> schemas = SchemaFactory(postgres_test_url())
>>> url = schemas.take()          # migrated to the latest version, nobody else's
>>> storage = await open_postgres_storage(url)
"""

from __future__ import annotations

import asyncio
import os
import secrets
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg

from storage.postgres.migrations import migrate

DEFAULT_TEST_DATABASE_URL = "postgresql://postgres@127.0.0.1:5432/test"
BATCH = 8
T = TypeVar("T")


def postgres_test_url() -> str:
    """The server the tests use: ``COUNTERSIGN_TEST_DATABASE_URL``, else the machines' local one."""
    return os.environ.get("COUNTERSIGN_TEST_DATABASE_URL") or DEFAULT_TEST_DATABASE_URL


def schema_url(base_url: str, schema: str) -> str:
    """``base_url`` with its connections' ``search_path`` set to ``schema`` (as an operator would write it).

    The tests' connections also commit without waiting for the WAL flush (``synchronous_commit=off``):
    a commit then costs microseconds instead of a disk sync, and nothing a test observes changes (only
    durability across a server crash, which no test relies on).
    """
    parts = urlsplit(base_url)
    option = "options=" + quote(f"-csearch_path={schema} -csynchronous_commit=off")
    query = f"{parts.query}&{option}" if parts.query else option
    return urlunsplit(parts._replace(query=query))


def shown(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


class PostgresUnreachable(Exception):
    """The test server cannot be reached (the message says where and why)."""


class SchemaFactory:
    """Hands out fresh schemas on one server and drops each one after its test.

    A private event loop in a background thread owns the factory's connections: it keeps a stock of
    migrated schemas (refilled :data:`BATCH` at a time while the tests run) and drops returned ones.
    """

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="countersign-test-schemas", daemon=True)
        self._thread.start()
        self._stock: list[str] = []
        self._refills: set[asyncio.Task[None]] = set()
        self._drops: set[asyncio.Task[None]] = set()
        self._made: set[str] = set()
        self._handed_out: dict[str, str] = {}  # URL -> schema
        self._changed: asyncio.Condition | None = None

    def _call(self, make: Callable[[], Awaitable[T]]) -> T:
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result()  # type: ignore[arg-type]

    def check(self) -> None:
        """Raise :class:`PostgresUnreachable` unless the server answers."""

        async def ping() -> None:
            async with await psycopg.AsyncConnection.connect(self.base_url, connect_timeout=5) as conn:
                await conn.execute("SELECT 1")

        try:
            self._call(ping)
        except (psycopg.Error, OSError) as exc:
            raise PostgresUnreachable(
                f"PostgreSQL is not reachable at {shown(self.base_url)} ({str(exc).strip()}). Start the server, "
                "or point COUNTERSIGN_TEST_DATABASE_URL at one: these tests must run, they are never skipped."
            ) from exc

    def take(self, *, migrated: bool = True) -> str:
        """The URL of a schema nobody else uses: migrated to the latest version, or empty."""
        schema = self._call(lambda: self._take(migrated))
        url = schema_url(self.base_url, schema)
        self._handed_out[url] = schema
        return url

    def release(self, url: str) -> None:
        """Drop the schema of ``url`` (in the background; :meth:`close` waits for it)."""
        schema = self._handed_out.pop(url)
        self._loop.call_soon_threadsafe(self._drop_later, schema)

    def _drop_later(self, schema: str) -> None:
        task = self._loop.create_task(self._drop([schema]))
        self._drops.add(task)
        task.add_done_callback(self._drops.discard)

    async def _take(self, migrated: bool) -> str:
        if not migrated:
            return await self._create(migrated=False)
        if self._changed is None:
            self._changed = asyncio.Condition()
        async with self._changed:
            if len(self._stock) + BATCH * len(self._refills) < BATCH:
                refill = asyncio.create_task(self._refill())
                self._refills.add(refill)
                refill.add_done_callback(self._refills.discard)
            while not self._stock:
                if not self._refills:  # a refill failed: make one here, and let its error surface
                    return await self._create(migrated=True)
                await self._changed.wait()
            return self._stock.pop()

    async def _refill(self) -> None:
        assert self._changed is not None
        created = await asyncio.gather(*(self._create(migrated=True) for _ in range(BATCH)), return_exceptions=True)
        async with self._changed:
            self._stock.extend(name for name in created if isinstance(name, str))
            self._changed.notify_all()

    async def _create(self, *, migrated: bool) -> str:
        schema = f"cs_{secrets.token_hex(6)}"
        self._made.add(schema)
        async with await psycopg.AsyncConnection.connect(self.base_url, autocommit=True) as conn:
            await conn.execute(f"CREATE SCHEMA {schema}")
            if migrated:
                await conn.execute(f"SET search_path TO {schema}")
                await migrate(conn)
        return schema

    async def _drop(self, schemas: list[str]) -> None:
        async with await psycopg.AsyncConnection.connect(self.base_url, autocommit=True) as conn:
            for schema in schemas:
                await conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
                self._made.discard(schema)

    def close(self) -> None:
        """Wait for pending work, drop every schema still there (used or not), stop the loop."""

        async def finish() -> None:
            await asyncio.gather(*self._refills, *self._drops, return_exceptions=True)
            left = sorted(self._made)
            await asyncio.gather(*(self._drop(left[i::BATCH]) for i in range(BATCH) if left[i::BATCH]))

        try:
            self._call(finish)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()
