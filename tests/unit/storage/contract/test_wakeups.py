"""Wake-ups on both backends: a wake is received by the listening process (on PostgreSQL, by every replica).

SQLite delivers within the process only; PostgreSQL through ``NOTIFY`` on the schema's channel, so the
PostgreSQL cases also check a second storage (another replica) hears it, and a replica on another
schema of the same server does not.
"""

from __future__ import annotations

import asyncio

from storage import ThreadAddress
from storage.protocols import Wakeup
from tests.fakes.storage_data import THREAD

ADDRESS = ThreadAddress(THREAD, "slack", "T1", "C1", THREAD.rsplit(":", 1)[-1])
WITHIN = 5.0


async def test_a_wake_is_received_by_the_listening_process(storage):
    await storage.wakeups.listen()
    await storage.wakeups.wake(ADDRESS)
    await storage.wakeups.wake()

    assert await asyncio.wait_for(storage.wakeups.next(), WITHIN) == Wakeup(ADDRESS)
    assert await asyncio.wait_for(storage.wakeups.next(), WITHIN) == Wakeup()


async def test_listening_twice_is_harmless_and_closing_stops_it(storage):
    await storage.wakeups.listen()
    await storage.wakeups.listen()
    await storage.wakeups.aclose()
    await storage.wakeups.aclose()
