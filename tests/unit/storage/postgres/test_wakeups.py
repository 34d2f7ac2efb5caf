"""Wake-ups between PostgreSQL replicas: ``NOTIFY`` on the schema's channel, heard on a dedicated connection.

Replicas here are storages opened on one schema of the test server, each with its own pool and its own
listening connection. Each sends a final "marker" wake-up after what is checked: notifications are
delivered in commit order, so receiving the marker first proves that nothing else was sent.
"""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from bot.messages import ChatMessage
from storage import ThreadAddress, open_async_storage
from storage.protocols import Wakeup
from tests.fakes.postgres import postgres_test_url
from tests.fakes.storage_data import NOW, THREAD

ADDRESS = ThreadAddress(THREAD, "slack", "T1", "C1", THREAD.rsplit(":", 1)[-1])
MARKER = ThreadAddress("slack:T1:C0:marker", "slack", "T1", "C0", "marker")
WITHIN = 5.0


def user(text: str) -> dict:
    return ChatMessage.from_user(text).to_dict()


@pytest.fixture
async def replicas(tmp_path, postgres_url):
    opened = [await open_async_storage(tmp_path / "unused.db", database_url=postgres_url) for _ in range(2)]
    for storage in opened:
        await storage.wakeups.listen()
    yield opened
    for storage in opened:
        await storage.aclose()


async def next_wakeup(storage) -> Wakeup:
    return await asyncio.wait_for(storage.wakeups.next(), WITHIN)


async def test_a_wake_from_one_replica_is_heard_by_every_replica(replicas):
    a, b = replicas
    await a.wakeups.wake(ADDRESS)

    assert await next_wakeup(a) == Wakeup(ADDRESS)
    assert await next_wakeup(b) == Wakeup(ADDRESS)


async def test_a_message_behind_another_replicas_running_run_wakes_that_owner_and_only_then(replicas):
    a, b = replicas
    await a.inbox.enqueue(ADDRESS, "U_ANA", user("first"), now=NOW)  # a free thread: no wake-up
    assert await a.inbox.start_next(THREAD, "run-1", "host-a", NOW, now=NOW) is not None

    await b.inbox.enqueue(ADDRESS, "U_BOB", user("second"), now=NOW)
    await b.wakeups.wake(MARKER)

    assert await next_wakeup(a) == Wakeup(ADDRESS, owner="host-a")
    assert await next_wakeup(a) == Wakeup(MARKER)


async def test_a_replica_on_another_schema_hears_nothing(replicas, postgres_schemas, tmp_path):
    a, _b = replicas
    other_url = postgres_schemas.take()
    other = await open_async_storage(tmp_path / "unused.db", database_url=other_url)
    try:
        await other.wakeups.listen()
        await a.wakeups.wake(ADDRESS)
        await other.wakeups.wake(MARKER)
        assert await next_wakeup(other) == Wakeup(MARKER)
    finally:
        await other.aclose()
        postgres_schemas.release(other_url)


async def test_a_lost_listening_connection_is_reopened_and_says_wakeups_may_have_been_missed(replicas):
    a, b = replicas
    pid = a.wakeups.backend_pid
    async with await psycopg.AsyncConnection.connect(postgres_test_url(), autocommit=True) as admin:
        cursor = await admin.execute("SELECT pg_terminate_backend(%s, 5000)", [pid])
        assert (await cursor.fetchone())[0]

    assert await next_wakeup(a) == Wakeup()  # reconnected: check everything, as a sweep would
    assert a.wakeups.backend_pid not in (None, pid)
    await b.wakeups.wake(ADDRESS)
    assert await next_wakeup(a) == Wakeup(ADDRESS)
