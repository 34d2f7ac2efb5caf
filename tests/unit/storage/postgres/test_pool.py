"""The PostgreSQL pool under load: a busy pool is waited for (a delay), only its limit fails; both show in metrics."""

from __future__ import annotations

import asyncio
import re

import pytest

from bot.metrics import PrometheusObserver
from storage import StorageError
from storage.postgres import open_postgres_storage
from storage.priority import urgent


def _sample(observer: PrometheusObserver, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", observer.exposition().decode(), re.MULTILINE)
    assert match, f"{name} not exposed"
    return float(match.group(1))


async def test_a_request_waits_for_a_busy_pool_and_only_the_pool_timeout_fails_it_and_metrics_count_both(
    postgres_url: str,
):
    storage = await open_postgres_storage(postgres_url, pool_min=1, pool_max=2, acquire_timeout=0.5)
    observer = PrometheusObserver()
    try:
        inside: list[None] = []
        both_held = asyncio.Event()
        release = asyncio.Event()

        async def hold() -> None:  # urgent: the pool's last connection is kept for urgent work (storage.priority)
            with urgent():
                await hold_one()

        async def hold_one() -> None:
            async with storage.db.connection():
                inside.append(None)
                if len(inside) == 2:
                    both_held.set()
                await release.wait()

        holders = [asyncio.create_task(hold()) for _ in range(2)]
        await both_held.wait()
        with pytest.raises(StorageError):
            await storage.messages.count_messages("t")  # both connections held past the 0.5 s limit

        waiting = asyncio.create_task(storage.messages.count_messages("t"))
        async with asyncio.timeout(10):  # the pool signals no event when a request queues: read its state
            while storage.pool_stats().get("requests_waiting", 0) == 0:  # noqa: ASYNC110
                await asyncio.sleep(0.01)
        release.set()
        assert await waiting == 0  # a wait that ended in time is a delay, not an error
        await asyncio.gather(*holders)

        observer.set_pool_stats(storage.pool_stats())
        assert _sample(observer, "countersign_db_pool_timeouts_total") == 1
        assert _sample(observer, "countersign_db_pool_waits_total") >= 2
        assert _sample(observer, "countersign_db_pool_waiting") == 0
        observer.set_pool_stats(storage.pool_stats())  # read again: counters do not count twice
        assert _sample(observer, "countersign_db_pool_timeouts_total") == 1
    finally:
        await storage.aclose()


async def test_urgent_work_gets_the_reserved_connection_while_other_work_has_taken_all_the_rest(postgres_url: str):
    storage = await open_postgres_storage(postgres_url, pool_min=1, pool_max=3, acquire_timeout=0.5)
    try:
        inside: list[None] = []
        both_held, release = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with storage.db.connection():
                inside.append(None)
                if len(inside) == 2:
                    both_held.set()
                await release.wait()

        holders = [asyncio.create_task(hold()) for _ in range(2)]
        await both_held.wait()
        with pytest.raises(StorageError):  # other work queues behind the two: none is free for it
            await storage.messages.count_messages("t")
        with urgent():
            assert await storage.messages.count_messages("t") == 0  # a person's message is stored at once
        release.set()
        await asyncio.gather(*holders)
    finally:
        await storage.aclose()
