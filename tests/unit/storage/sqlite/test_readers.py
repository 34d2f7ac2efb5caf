"""Reader threads of the async facade: every caller gets its own result, errors included, in batches."""

from __future__ import annotations

import asyncio
import threading

import pytest

from storage import AsyncStorage, NotFound, open_storage
from storage.sqlite.readers import READER_THREAD_NAME, ReadWorkers


async def test_many_concurrent_reads_each_get_their_own_result():
    readers = ReadWorkers(threads=2)
    try:
        results = await asyncio.gather(*(readers.run(lambda i=i: i * i) for i in range(500)))
        assert results == [i * i for i in range(500)]
    finally:
        readers.close()


async def test_a_failing_read_raises_in_its_caller_only():
    readers = ReadWorkers(threads=1)

    def broken() -> None:
        raise LookupError("no such row")

    try:
        ok, failed = await asyncio.gather(readers.run(lambda: "fine"), readers.run(broken), return_exceptions=True)
        assert ok == "fine"
        assert isinstance(failed, LookupError)
    finally:
        readers.close()


async def test_a_caller_that_gives_up_does_not_disturb_the_others():
    readers = ReadWorkers(threads=1)
    release = threading.Event()
    try:
        held = asyncio.ensure_future(readers.run(lambda: release.wait(10)))
        abandoned = asyncio.ensure_future(readers.run(lambda: "too late"))
        kept = asyncio.ensure_future(readers.run(lambda: "kept"))
        await asyncio.sleep(0)
        abandoned.cancel()
        release.set()
        assert await held is True
        assert await kept == "kept"
        assert abandoned.cancelled()
    finally:
        readers.close()


async def test_store_reads_run_on_reader_threads_and_report_store_errors(tmp_path):
    db = AsyncStorage(open_storage(tmp_path / "cs.db"))
    try:
        seen: list[str] = []

        def where() -> str:
            seen.append(threading.current_thread().name)
            return "ok"

        assert await db.readers.run(where) == "ok"
        assert seen[0].startswith(READER_THREAD_NAME)
        with pytest.raises(NotFound):
            await db.runs.get("no-such-run")
    finally:
        await db.aclose()
