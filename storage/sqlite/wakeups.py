"""Wake-ups on SQLite: delivered within the process only.

SQLite is one file on one host, so there is no server to carry a signal between processes: processes
sharing a file find each other's waiting messages with the periodic sweep. This class satisfies
:class:`~storage.protocols.InboxWakeups` so the engine needs no branch on the backend.
"""

from __future__ import annotations

import asyncio

from storage.protocols import ThreadAddress, Wakeup


class LocalWakeups:
    """In-process wake-ups: :meth:`wake` is received by this process's own :meth:`next`.

    >>> wakeups = LocalWakeups()
    >>> await wakeups.wake(address)
    >>> (await wakeups.next()).address == address
    True
    """

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Wakeup] = asyncio.Queue()

    async def listen(self) -> None:
        """Nothing to connect: wake-ups are received from now on."""

    async def wake(self, address: ThreadAddress | None = None) -> None:
        """Queue a wake-up for this process."""
        self._queue.put_nowait(Wakeup(address))

    async def next(self) -> Wakeup:
        """The next queued wake-up."""
        return await self._queue.get()

    async def aclose(self) -> None:
        """Nothing held open."""
