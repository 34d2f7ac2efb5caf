"""The connection pool of the PostgreSQL backend and the one place where driver errors become ``StorageError``.

Connections are in autocommit mode: a single statement is its own transaction, and a method that
needs several statements opens :meth:`PostgresDatabase.transaction` explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import select
import time
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, LiteralString, cast

import psycopg
from psycopg import pq
from psycopg.rows import TupleRow
from psycopg.sql import SQL
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from storage.codec import epoch
from storage.errors import DatabaseUnreachable, StorageError
from storage.priority import is_urgent
from storage.protocols import Instant
from storage.records import TimeReader

DEFAULT_POOL_MIN = 1
DEFAULT_POOL_MAX = 10
DEFAULT_STATEMENT_TIMEOUT_MS = 30_000
"""No statement may hold a connection (and its locks) longer than this."""
RECONNECT_GIVE_UP_SECONDS = 1.0
UNREACHABLE_ACQUIRE_TIMEOUT = 0.5
DEFAULT_ACQUIRE_TIMEOUT = 30.0
"""How long a statement waits for a pooled connection of a busy pool before :class:`StorageError` ("try again").

Long on purpose (``COUNTERSIGN_DB_POOL_TIMEOUT``): under a burst every connection is busy and a request queues
for one; the wait is backpressure, a delay, not an error. A server that refuses connections is noticed
sooner: while the pool's connect attempts fail, a request waits only ``UNREACHABLE_ACQUIRE_TIMEOUT``, so a
click or an event is still answered within Slack's 3 s deadline (a clear "try again", or a 503 that Slack
retries).
"""
URGENT_RESERVE = 1
"""Connections of the pool kept for urgent work (:func:`storage.priority.urgent`: storing people's messages)."""
FIRST_WAIT_SECONDS = 2.0
"""A wait for a connection longer than this goes on only while the pool can still connect (see ``_getconn``)."""
MAX_IDLE_UNCHECKED = 5.0
"""A pooled connection idle at most this long is handed out without an empty round trip to the server.

The pool's ``check`` costs a round trip per hand-out; under load a connection is back in the pool for
milliseconds, and a server that closed it in between (a restart, a terminated backend) has said so on its
socket, which a look at the socket (no round trip) sees. Longer idle connections, which a proxy or a
firewall may have dropped without a word, get the full check.
"""


def instant(now: Instant) -> datetime:
    """The aware UTC datetime of ``now`` (an aware datetime, epoch seconds, or ``None`` for now).

    >>> instant(60.0)
    datetime.datetime(1970, 1, 1, 0, 1, tzinfo=datetime.timezone.utc)
    """
    return datetime.fromtimestamp(epoch(now), tz=UTC)


def utc(value: datetime) -> datetime:
    """A ``timestamptz`` read back, in UTC whatever the session's time zone."""
    return value.astimezone(UTC)


def utc_or_none(value: datetime | None) -> datetime | None:
    """Like :func:`utc`, passing ``None`` through."""
    return None if value is None else value.astimezone(UTC)


def vouched(statement: str) -> LiteralString:
    """``statement`` as the ``LiteralString`` psycopg's stubs ask of a query, so that no value is formatted in.

    The stores assemble statements from constant fragments and validated column names (column lists, memory
    filters) and bind every value as a parameter; a type checker cannot follow that, so this is the one place
    that vouches for it.
    """
    return cast(LiteralString, statement)


class PostgresDatabase:
    """An open ``AsyncConnectionPool`` on one database (and schema, through the URL's ``search_path``).

    >>> db = await PostgresDatabase.open("postgresql://bot@db.internal/countersign")
    >>> async with db.connection() as conn:
    ...     await conn.execute("SELECT 1")
    >>> await db.close()
    """

    def __init__(self, pool: AsyncConnectionPool, *, acquire_timeout: float = DEFAULT_ACQUIRE_TIMEOUT) -> None:
        self.pool = pool
        self.acquire_timeout = acquire_timeout
        self.unreachable = False
        self.timeouts = 0
        max_size = getattr(pool, "max_size", 0)
        self._background = asyncio.Semaphore(max_size - URGENT_RESERVE) if max_size > URGENT_RESERVE else None
        """Bounds the work that is not urgent to all but ``URGENT_RESERVE`` connections (see :meth:`connection`)."""
        """Requests that gave up waiting for a connection (a wait that went on after a first slice is one request)."""
        """The pool's latest connect attempts all failed (set by the pool, cleared by the next new connection)."""

    @property
    def conninfo(self) -> str:
        """The connection string the pool opens connections with (a listener opens its own with it)."""
        conninfo = self.pool.conninfo
        if not isinstance(conninfo, str):
            raise StorageError("the pool was given a conninfo callable; a listener needs a connection string")
        return conninfo

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        min_size: int = DEFAULT_POOL_MIN,
        max_size: int = DEFAULT_POOL_MAX,
        statement_timeout_ms: int = DEFAULT_STATEMENT_TIMEOUT_MS,
        connect_timeout: float = 30.0,
        acquire_timeout: float = DEFAULT_ACQUIRE_TIMEOUT,
    ) -> PostgresDatabase:
        """Open the pool and wait for its first connection; ``StorageError`` if the server cannot be reached.

        ``connect_timeout`` bounds the wait at start; ``acquire_timeout`` every later wait for a connection.
        """
        sweeping: set[asyncio.Task[None]] = set()
        database: PostgresDatabase | None = None  # set below; the pool's callbacks only run once it exists
        returned: weakref.WeakKeyDictionary[psycopg.AsyncConnection[Any], float] = weakref.WeakKeyDictionary()

        async def check(conn: psycopg.AsyncConnection[Any]) -> None:
            # A connection the server dropped while it sat idle (a restart, a failover, a proxy's timeout) is
            # replaced instead of failing the caller's statement. A recently used one whose socket is quiet is
            # alive as far as anything short of a round trip can tell: see MAX_IDLE_UNCHECKED.
            since = returned.get(conn)
            if since is not None and time.monotonic() - since <= MAX_IDLE_UNCHECKED and _quiet(conn):
                return
            try:
                await AsyncConnectionPool.check_connection(conn)
            except Exception:
                # One dead connection means its idle siblings died with it. The pool would find them one by
                # one, backing off a second, then two, between them; check them all at once instead, so the
                # first statement after a restart waits only for one fresh connection.
                if not sweeping:
                    task = asyncio.create_task(pool.check(), name="countersign-pool-check")
                    sweeping.add(task)
                    task.add_done_callback(sweeping.discard)
                raise

        async def configure(conn: psycopg.AsyncConnection[Any]) -> None:
            if database is not None:
                database.unreachable = False
            await conn.execute(SQL("SET statement_timeout = {}").format(int(statement_timeout_ms)))
            returned[conn] = time.monotonic()

        async def reset(conn: psycopg.AsyncConnection[Any]) -> None:
            returned[conn] = time.monotonic()  # back in the pool, just used: see check

        def gave_up(_pool: AsyncConnectionPool) -> None:
            if database is not None:
                database.unreachable = True

        pool: AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True},
            configure=configure,
            reset=reset,
            check=check,
            timeout=acquire_timeout,
            # The pool retries a failed connect with a doubling back-off (1 s, 2 s, 4 s, …), so after an outage
            # it could come back long after the server. Give up a retry series early instead: the next caller
            # that finds no connection starts a fresh attempt at once, so the first request after the server
            # is back connects immediately, and while it is down each request costs one refused connect.
            reconnect_timeout=RECONNECT_GIVE_UP_SECONDS,
            reconnect_failed=gave_up,
            open=False,
            name="countersign",
        )
        try:
            await pool.open(wait=True, timeout=connect_timeout)
        except psycopg.Error as exc:
            await pool.close()
            raise DatabaseUnreachable(f"cannot connect to PostgreSQL: {_first_line(exc)}") from exc
        database = cls(pool, acquire_timeout=acquire_timeout)
        return database

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection (autocommit); any driver error leaves as :class:`StorageError`.

        Inside :meth:`bound` it is the bound transaction's connection instead: the statement joins it.
        """
        bound = _BOUND.get()
        if bound is not None and bound[0] is self:
            try:
                yield bound[1]
            except psycopg.Error as exc:
                raise StorageError(f"PostgreSQL error: {_first_line(exc)}") from exc
            return
        background = None if is_urgent() else self._background
        if background is not None:
            await self._enter(background)
        try:
            conn = await self._getconn()
            try:
                yield conn
            finally:
                await self.pool.putconn(conn)
        except psycopg.Error as exc:
            raise StorageError(f"PostgreSQL error: {_first_line(exc)}") from exc
        finally:
            if background is not None:
                background.release()

    async def _enter(self, background: asyncio.Semaphore) -> None:
        # Work that is not urgent (storage.priority) takes one of all but URGENT_RESERVE connections, so that a
        # person's message is stored (and acknowledged) ahead of the runs queued for a connection.
        if not background.locked():
            await background.acquire()
            return
        try:
            await asyncio.wait_for(background.acquire(), self.acquire_timeout)
        except TimeoutError:
            self.timeouts += 1
            raise StorageError(f"PostgreSQL error: no connection free after {self.acquire_timeout:.2f} sec") from None

    async def _getconn(self) -> psycopg.AsyncConnection[Any]:
        # While the server is known to refuse connections, waiting the full acquire timeout only delays the
        # "try again": wait just long enough for the one fresh attempt this request starts to succeed.
        if self.unreachable and self.pool.get_stats().get("pool_available", 0) == 0:
            return await self._counted_getconn(min(UNREACHABLE_ACQUIRE_TIMEOUT, self.acquire_timeout))
        # A busy pool is waited for (backpressure); a server that went away is told within Slack's deadline: wait
        # a first slice, and only if the pool's connect attempts are not failing meanwhile, the rest of the limit.
        first = min(FIRST_WAIT_SECONDS, self.acquire_timeout)
        began = time.monotonic()
        try:
            return await self.pool.getconn(first)
        except PoolTimeout:
            remaining = self.acquire_timeout - (time.monotonic() - began)
            if self.unreachable or remaining <= 0:
                self.timeouts += 1
                raise
        return await self._counted_getconn(remaining)

    async def _counted_getconn(self, seconds: float) -> psycopg.AsyncConnection[Any]:
        try:
            return await self.pool.getconn(seconds)
        except PoolTimeout:
            self.timeouts += 1
            raise

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection inside ``BEGIN … COMMIT`` (rolled back if the block raises).

        Inside :meth:`bound` it is the bound transaction itself, with no savepoint of its own: an error in the block
        leaves the batch, which rolls the whole transaction back (a batch is all or nothing), so a savepoint would
        only cost two more trips to the server per store call. A store method that catches a database error and
        carries on must open its own savepoint around the statement (``conn.transaction()``, as
        ``approvals.create_many`` does).
        """
        if self.in_bound():
            async with self.connection() as conn:
                yield conn
            return
        async with self.connection() as conn, conn.transaction():
            yield conn

    @asynccontextmanager
    async def bound(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """One transaction that every statement of this database made inside the block joins.

        The stores' own ``connection()``, ``transaction()``, ``fetchone()``… calls made by the current task
        (and only by it: the binding is a context variable) run on this transaction's connection, so a
        sequence of store methods commits, or rolls back, as one (:mod:`storage.postgres.batches`).

        The transaction is a pipeline's implicit one: the statements are sent in pipeline mode with no ``BEGIN``,
        a statement whose result is not read costs no round trip of its own, a result read flushes what is
        queued (no commit: only a ``Sync`` ends the implicit transaction), and the pipeline's one ``Sync`` at the
        end commits it. The block raising queues a ``ROLLBACK`` first; an error of the server's aborts the rest
        and the ``Sync`` rolls back; a connection lost before the ``Sync`` commits nothing. Inside, a store must
        not open a savepoint or read ``cursor.rowcount`` straight after ``execute`` (see :func:`rows_changed`).
        """
        if self.in_bound():
            async with self.connection() as conn:
                yield conn
            return
        async with self.connection() as conn, conn.pipeline():
            token = _BOUND.set((self, conn, set()))
            try:
                yield conn
            except BaseException:
                # Queued ahead of the pipeline's Sync, which then ends the implicit transaction rolled back. On a
                # pipeline already aborted by a failed statement (or a lost connection) it is skipped: nothing to undo.
                with contextlib.suppress(psycopg.Error):
                    await conn.execute("ROLLBACK")
                raise
            finally:
                _BOUND.reset(token)

    def in_bound(self) -> bool:
        """Whether the current task's statements join a :meth:`bound` transaction of this database."""
        bound = _BOUND.get()
        return bound is not None and bound[0] is self

    def bound_locks(self) -> set[tuple[Any, ...]] | None:
        """The locks the current task's :meth:`bound` transaction of this database holds (see :func:`held_locks`)."""
        bound = _BOUND.get()
        return bound[2] if bound is not None and bound[0] is self else None

    async def fetchone(self, sql: str, params: Any = None) -> Any:
        """The first row of one statement, or ``None``."""
        async with self.connection() as conn:
            cursor = await conn.execute(vouched(sql), params)
            return await cursor.fetchone()

    async def fetchall(self, sql: str, params: Any = None) -> list[Any]:
        """Every row of one statement."""
        async with self.connection() as conn:
            cursor = await conn.execute(vouched(sql), params)
            return await cursor.fetchall()

    async def execute(self, sql: str, params: Any = None) -> int:
        """Run one statement and return how many rows it changed."""
        async with self.connection() as conn:
            return await rows_changed(await conn.execute(vouched(sql), params))

    async def close(self) -> None:
        """Close every connection of the pool; later use raises :class:`StorageError`."""
        await self.pool.close()

    def pool_stats(self) -> dict[str, int]:
        """The pool's counters since it opened (psycopg_pool's names): ``requests_queued`` (requests that
        waited for a connection), ``requests_wait_ms``, ``requests_errors`` (waits that timed out), and the
        gauges ``pool_size``, ``pool_available``, ``requests_waiting``."""
        return {**self.pool.get_stats(), "requests_errors": self.timeouts}


_BOUND: contextvars.ContextVar[tuple[PostgresDatabase, psycopg.AsyncConnection[Any], set[tuple[Any, ...]]] | None] = (
    contextvars.ContextVar("countersign_postgres_bound", default=None)
)
"""The transaction :meth:`PostgresDatabase.bound` opened in this task, with its database and the locks it holds."""


def held_locks(conn: psycopg.AsyncConnection[Any]) -> set[tuple[Any, ...]] | None:
    """The locks the current task's :meth:`PostgresDatabase.bound` transaction on ``conn`` holds (``None``: none).

    A transaction's advisory locks and ``FOR SHARE`` row locks last until it ends, so a store method of a batch
    need not take again one that an earlier method of the same batch took: it notes the lock here and looks
    here first. Whoever changes what a noted lock stood for (a run's owner, for a fence) removes it.
    """
    bound = _BOUND.get()
    return bound[2] if bound is not None and bound[1] is conn else None


async def advisory_lock(conn: psycopg.AsyncConnection[Any], namespace: str, key: str) -> None:
    """``pg_advisory_xact_lock`` on (``namespace``, ``key``), once per bound transaction (see :func:`held_locks`)."""
    held = held_locks(conn)
    if held is not None and (namespace, key) in held:
        return
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", [namespace, key])
    if held is not None:
        held.add((namespace, key))


async def rows_changed(cursor: psycopg.AsyncCursor[Any]) -> int:
    """How many rows the statement just executed on ``cursor`` changed, in pipeline mode too.

    In a pipeline (:meth:`PostgresDatabase.bound`) ``execute`` only queues the statement: ``rowcount`` is known
    once its result is read, which a fetch forces (a flush, not a ``Sync``: the transaction goes on). A statement
    that returns no rows answers the fetch with ``ProgrammingError`` after reading its result; any error of the
    statement itself is raised as it is.
    """
    if cursor.connection.info.pipeline_status != pq.PipelineStatus.OFF:
        try:
            await cursor.fetchall()
        except psycopg.ProgrammingError:
            if cursor.pgresult is None or cursor.pgresult.status != pq.ExecStatus.COMMAND_OK:
                raise
    return cursor.rowcount


def _quiet(conn: psycopg.AsyncConnection[Any]) -> bool:
    """Whether an idle connection's socket has nothing to read (a server that ends a session says so on it)."""
    try:
        fd = conn.pgconn.socket
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return False
    return not readable


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


POSTGRES_TIMES = TimeReader(utc, utc_or_none)
"""PostgreSQL keeps times as ``timestamptz``; the shared row mappers read them through this."""
