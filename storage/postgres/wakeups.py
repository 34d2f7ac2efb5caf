"""Wake-ups on PostgreSQL: ``NOTIFY`` on the schema's channel, ``LISTEN`` on a dedicated connection.

The listening connection is not taken from the pool: it stays open for the life of the process and is
only ever waiting for notifications. When it is lost (a restart, a failover, a network cut) it is opened
again with a growing back-off, and a catch-all wake-up is queued, since notifications sent meanwhile were
lost. TCP keepalives find a connection whose peer vanished silently.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import psycopg
from psycopg import sql
from typing_extensions import TypedDict

from storage.errors import StorageError
from storage.postgres.database import PostgresDatabase
from storage.protocols import ThreadAddress, Wakeup

logger = logging.getLogger(__name__)

CHANNEL_SQL = "'countersign_inbox_' || left(md5(current_schema()), 16)"
"""The channel of the connection's schema: replicas on other schemas of the same database hear nothing.

(A hash, since a channel name is limited to 63 bytes and a schema name may use them all.)"""
LISTEN_TIMEOUT_SECONDS = 10.0
RECONNECT_FIRST_DELAY = 0.05
RECONNECT_MAX_DELAY = 5.0


class ConnectionSettings(TypedDict, closed=True):
    """The libpq parameters of the listening connection.

    Closed (no other keys), so a type checker can match ``**CONNECTION`` to ``connect()``'s keyword parameters.
    """

    connect_timeout: int
    keepalives: int
    keepalives_idle: int
    keepalives_interval: int
    keepalives_count: int


CONNECTION = ConnectionSettings(
    connect_timeout=5,
    keepalives=1,
    keepalives_idle=10,
    keepalives_interval=5,
    keepalives_count=3,
)
"""A connect attempt gives up after 5 s; a peer that vanished without closing the connection is noticed within
about 25 s (TCP keepalives: the listening connection never sends anything by itself)."""


def payload(address: ThreadAddress | None, owner: str | None = None) -> str:
    """The JSON text a wake-up travels as (well under ``NOTIFY``'s 8000-byte limit).

    >>> payload(None)
    '{}'
    """
    if address is None:
        return "{}"
    return json.dumps(
        {
            "id": address.chat_history_id,
            "platform": address.platform,
            "workspace": address.workspace,
            "channel": address.channel,
            "thread": address.thread,
            "owner": owner,
        }
    )


def parse(text: str) -> Wakeup:
    """The wake-up of a payload; a payload that cannot be read becomes a catch-all wake-up (never dropped)."""
    try:
        data = json.loads(text)
        if not data:
            return Wakeup()
        address = ThreadAddress(data["id"], data["platform"], data["workspace"], data["channel"], data["thread"])
        return Wakeup(address, data.get("owner"))
    except (ValueError, KeyError, TypeError):
        logger.warning("unreadable wake-up; checking every thread instead", extra={"payload": text[:200]})
        return Wakeup()


class PostgresWakeups:
    """Wake-ups between replicas (see :class:`~storage.protocols.InboxWakeups`).

    >>> await storage.wakeups.listen()
    >>> await storage.wakeups.wake(address)      # from any replica
    >>> (await storage.wakeups.next()).address == address
    True
    """

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db
        self._queue: asyncio.Queue[Wakeup] = asyncio.Queue()
        self._listening = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.backend_pid: int | None = None
        """The server process of the listening connection while it is open (for operators and fault tests)."""

    async def listen(self) -> None:
        """Open the listening connection (once) and wait until ``LISTEN`` is in effect."""
        if self._task is None:
            self._task = asyncio.create_task(self._listen_forever(), name="countersign-listen")
        try:
            await asyncio.wait_for(self._listening.wait(), LISTEN_TIMEOUT_SECONDS)
        except TimeoutError:
            # The connection keeps being retried: wake-ups start arriving once it is back.
            raise StorageError("cannot LISTEN for wake-ups: PostgreSQL is unreachable") from None

    async def wake(self, address: ThreadAddress | None = None) -> None:
        """``NOTIFY`` every listening replica of this schema (this one included)."""
        await self.db.execute(f"SELECT pg_notify({CHANNEL_SQL}, %s)", [payload(address)])

    async def next(self) -> Wakeup:
        """The next wake-up received."""
        return await self._queue.get()

    async def aclose(self) -> None:
        """Close the listening connection."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._listening.clear()

    async def _listen_forever(self) -> None:
        delay = RECONNECT_FIRST_DELAY
        connected_before = False
        while True:
            try:
                conn = await psycopg.AsyncConnection.connect(self.db.conninfo, autocommit=True, **CONNECTION)
                async with conn:
                    cursor = await conn.execute(f"SELECT {CHANNEL_SQL}")
                    channel = (await cursor.fetchone())[0]  # type: ignore[index]
                    await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
                    if connected_before:
                        logger.info("listening for wake-ups again")
                        self._queue.put_nowait(Wakeup())  # what was sent while we were away is lost
                    connected_before = True
                    self.backend_pid = conn.info.backend_pid
                    delay = RECONNECT_FIRST_DELAY
                    self._listening.set()
                    async for notification in conn.notifies():
                        self._queue.put_nowait(parse(notification.payload))
            except psycopg.Error as exc:
                level = logging.WARNING if self._listening.is_set() else logging.DEBUG
                logger.log(level, "lost the connection listening for wake-ups; reconnecting", extra={"error": str(exc)})
            self._listening.clear()
            self.backend_pid = None
            await asyncio.sleep(delay)  # a back-off between connection attempts, not a wait for another task
            delay = min(delay * 2, RECONNECT_MAX_DELAY)


NOTIFY_OWNER_SQL = (
    f"SELECT pg_notify({CHANNEL_SQL}, json_build_object('id', %s::text, 'platform', %s::text, "
    "'workspace', %s::text, 'channel', %s::text, 'thread', %s::text, 'owner', owner)::text) "
    "FROM runs WHERE chat_history_id = %s AND status IN ('running', 'resuming') AND owner IS NOT NULL"
)
"""What ``enqueue``'s statement runs with its insert (a CTE): ``NOTIFY`` (on commit) the owner of the thread's
running run."""


def notify_owner_params(address: ThreadAddress) -> list[Any]:
    """The parameters of :data:`NOTIFY_OWNER_SQL` for ``address``."""
    return [
        address.chat_history_id,
        address.platform,
        address.workspace,
        address.channel,
        address.thread,
        address.chat_history_id,
    ]
