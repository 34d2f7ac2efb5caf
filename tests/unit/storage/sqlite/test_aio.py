"""AsyncStorage: every store method is awaitable and runs on the countersign-db executor."""

from __future__ import annotations

import asyncio
import sqlite3
import threading

import pytest

from bot.messages import ChatMessage
from storage import AsyncStorage, NotFound
from storage.sqlite.runs import SQLiteRunStore
from tests.fakes.storage_data import THREAD, create_run


class ThreadRecordingRunStore(SQLiteRunStore):
    """The real run store, noting which thread each ``get`` ran on."""

    def __init__(self, connector) -> None:
        super().__init__(connector)
        self.threads: list[str] = []

    def get(self, run_id: str):
        self.threads.append(threading.current_thread().name)
        return super().get(run_id)


async def test_store_methods_are_awaitable_and_run_on_the_db_executor(storage):
    storage.runs = ThreadRecordingRunStore(storage.connector)
    create_run(storage)
    db = AsyncStorage(storage)
    run = await db.runs.get("run-1")
    assert run.requester == "U_ANA"
    assert storage.runs.threads[0].startswith("countersign-db")
    assert storage.runs.threads[0] != threading.current_thread().name
    db.close()


async def test_every_store_is_there(storage):
    db = AsyncStorage(storage)
    assert await db.messages.write_messages(THREAD, [ChatMessage.from_user("hi")]) == 1
    assert [m.text for m in await db.messages.retrieve_messages(THREAD)] == ["hi"]
    assert await db.events.first_time("slack:Ev1")
    assert await db.ledger.begin("call_1", "digest")
    assert await db.audit.append("U_BOB", "test", "s", {}) == 1
    await db.conversations.save("k", {"a": 1})
    assert await db.conversations.load("k") == {"a": 1}
    assert (await db.policies.resolve("x", platform="slack", workspace="T1", channel="C1")).mode is None
    assert await db.approvals.pending() == []
    assert db.messages.last_k == 10  # plain attributes are passed through
    await db.aclose()


async def test_errors_reach_the_awaiting_coroutine(storage):
    db = AsyncStorage(storage)
    with pytest.raises(NotFound, match="run-404"):
        await db.runs.get("run-404")
    db.close()


async def test_a_waiting_write_does_not_block_the_event_loop(storage):
    db = AsyncStorage(storage)
    blocker = sqlite3.connect(storage.path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # another process holds the write lock
    write = asyncio.ensure_future(db.events.first_time("slack:Ev1"))
    with pytest.raises(TimeoutError):
        # the loop keeps running (this timeout fires) while the write waits for the lock
        await asyncio.wait_for(asyncio.shield(write), timeout=0.05)
    assert not write.done()
    blocker.execute("COMMIT")
    assert await write
    blocker.close()
    await db.aclose()


async def test_many_concurrent_calls_share_the_small_pool(storage):
    db = AsyncStorage(storage)
    results = await asyncio.gather(*(db.events.first_time(f"slack:Ev{i % 10}") for i in range(100)))
    assert sum(results) == 10
    names = await asyncio.gather(*(db.run(lambda: threading.current_thread().name) for _ in range(20)))
    assert {n.rsplit("_", 1)[0] for n in names} == {"countersign-db"}
    assert len(set(names)) <= 4
    await db.aclose()


async def test_each_method_wrapper_is_built_once_and_calls_the_stores_current_method(storage):
    create_run(storage)
    db = AsyncStorage(storage)
    try:
        assert db.runs.get is db.runs.get  # cached on first use: no wrapper is built per call
        assert (await db.runs.get("run-1")).run_id == "run-1"
        recording = ThreadRecordingRunStore(storage.connector)
        db.runs._store = recording  # the store is swapped after the wrapper exists
        await db.runs.get("run-1")
        assert recording.threads  # the cached wrapper ran the store's method as it is now
    finally:
        await db.aclose()
