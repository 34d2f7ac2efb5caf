"""A rate limit counted from the audit log (``audit.fewer_than``) on both backends: it counts one person's entries
of one action in a window, and checked in a batch just before the append that counts one more, concurrent batches
(on one storage, and on two opened on the same database, as two processes do) never pass the limit together."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from storage import Batch, stores
from tests.fakes.storage_data import NOW

DAY = timedelta(hours=24)


async def test_it_counts_one_persons_entries_of_one_action_since_a_time(storage):
    await storage.audit.append("U_ANA", "break-glass", "a-old", {}, now=NOW - timedelta(hours=25))
    await storage.audit.append("U_ANA", "break-glass", "a-1", {}, now=NOW)
    await storage.audit.append("U_BOB", "break-glass", "a-2", {}, now=NOW)
    await storage.audit.append("U_ANA", "approved", "a-3", {}, now=NOW)

    assert await storage.audit.fewer_than(2, "U_ANA", "break-glass", since=NOW - DAY), "one in the window"
    assert not await storage.audit.fewer_than(1, "U_ANA", "break-glass", since=NOW - DAY)
    assert not await storage.audit.fewer_than(2, "U_ANA", "break-glass"), "since None: every entry"
    assert await storage.audit.fewer_than(1, "U_CAROL", "break-glass", since=NOW - DAY)
    assert not await storage.audit.fewer_than(0, "U_CAROL", "break-glass"), "a limit of 0 lets nobody through"


def _limited(subject: str, limit: int) -> tuple[Batch, object]:
    batch = Batch()
    check = batch.require(stores.audit.fewer_than, limit, "U_ANA", "break-glass", NOW - DAY)
    batch.write(stores.audit.append, "U_ANA", "break-glass", subject, {"tool": "delete_file"}, now=NOW)
    return batch, check


async def test_concurrent_checked_appends_by_one_person_never_pass_the_limit_across_two_storages(backend):
    other = await backend.open_another()
    limit, contenders = 2, 8
    batches = [_limited(f"a-{i}", limit) for i in range(contenders)]

    outcomes = await asyncio.gather(
        *((backend.storage if i % 2 else other).batches.apply(batch) for i, (batch, _) in enumerate(batches))
    )

    assert sum(o.applied for o in outcomes) == limit
    assert all(o.refused_by is check for o, (_, check) in zip(outcomes, batches, strict=True) if not o.applied)
    entries = [e for e in await backend.storage.audit.recent(50) if e.action == "break-glass"]
    assert len(entries) == limit
    assert (await backend.storage.audit.verify()).ok
