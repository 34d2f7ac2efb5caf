"""Group commit: queued writes share one transaction; each still succeeds or fails on its own, durably."""

from __future__ import annotations

import asyncio
import threading

import pytest

from storage import AsyncStorage, open_storage
from storage.sqlite.group_commit import GroupCommitWriter


@pytest.fixture
def storage(tmp_path):
    opened = open_storage(tmp_path / "cs.db")
    yield opened
    opened.close()


def _hold_the_writer(writer: GroupCommitWriter) -> threading.Event:
    """Occupy the writer thread until the returned event is set, so later writes queue up together."""
    release = threading.Event()
    started = threading.Event()

    def wait() -> None:
        started.set()
        assert release.wait(10)

    writer.submit(wait)
    assert started.wait(10)
    return release


def test_queued_writes_commit_together_in_one_transaction(storage):
    writer = GroupCommitWriter(storage.connector)
    try:
        release = _hold_the_writer(writer)
        futures = [writer.submit(lambda i=i: storage.events.first_time(f"ev-{i}")) for i in range(50)]
        commits_before = writer.commits
        release.set()
        assert [f.result(10) for f in futures] == [True] * 50
        assert writer.commits - commits_before == 2  # the held write's batch, then all 50 at once
    finally:
        writer.close()
    assert storage.events.first_time("ev-7") is False


def test_a_failing_write_is_undone_alone_and_the_rest_of_its_batch_commits(storage):
    writer = GroupCommitWriter(storage.connector)

    def write_then_fail() -> None:
        storage.events.first_time("doomed")
        raise ValueError("the write's own error")

    try:
        release = _hold_the_writer(writer)
        failing = writer.submit(write_then_fail)
        fine = writer.submit(lambda: storage.events.first_time("kept"))
        release.set()
        with pytest.raises(ValueError, match="the write's own error"):
            failing.result(10)
        assert fine.result(10) is True
    finally:
        writer.close()
    assert storage.events.first_time("doomed") is True  # rolled back: never seen before
    assert storage.events.first_time("kept") is False


def test_a_write_is_visible_to_other_connections_when_its_caller_learns_of_it(storage, tmp_path):
    writer = GroupCommitWriter(storage.connector)
    try:
        assert writer.submit(lambda: storage.events.first_time("seen")).result(10) is True
        with open_storage(tmp_path / "cs.db") as other:
            assert other.events.first_time("seen") is False
    finally:
        writer.close()


async def test_compare_and_set_through_the_async_facade_has_one_winner(tmp_path):
    db = AsyncStorage(open_storage(tmp_path / "cs.db"))
    try:
        assert db.writer is not None
        results = await asyncio.gather(*(db.events.first_time("same-event") for _ in range(100)))
        assert results.count(True) == 1
    finally:
        await db.aclose()


def test_writes_after_close_are_refused(storage):
    from storage import StorageError

    writer = GroupCommitWriter(storage.connector)
    writer.close()
    with pytest.raises(StorageError):
        writer.submit(lambda: None)
