"""Admission: at most so many runs work at once in this process; the others wait their turn, in order.

A burst of messages must not become a burst of runs. asyncio's ready queue is FIFO: with hundreds of runs
working, every await of an event's acknowledgement waits behind hundreds of run steps, and Slack's 3 s pass.
So the runs of this process (a new message's run, a resume after a decision, a recovery) each take a place
first, and at most ``COUNTERSIGN_MAX_ACTIVE_RUNS`` hold one at a time. New messages are still stored and
acknowledged at once (storing a message needs no place); their runs wait, oldest first.

Waiting is a delay, never an error, and nothing about it is stored: a message waiting for a place is still
"waiting" in its thread's inbox, and a run claimed by a decision is still owned under a lease the heartbeat
renews. If the process dies meanwhile, the sweep starts the message, or takes over the run, as it does for
any other (see :mod:`bot.engine.lifecycle`). A thread's messages keep their order: a thread's work holds the
thread's lock while it waits, and the run for the thread's next message starts only after it.

A run that waits for a person in the middle of its step (an MCP server's question) gives its place back
meanwhile (:meth:`Admission.aside`) and queues again for one when the answer comes.

>>> admission = Admission(limit=2)
>>> async with admission.admitted("run-1"):
...     ...  # at most two runs are in here at once
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Admission:
    """A FIFO gate of ``limit`` places for this process's runs (see the module docstring)."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("an admission limit is at least 1")
        self.limit = limit
        self.active = 0
        """Places held now (runs working, or a place reserved for a message's run about to start)."""
        self._queue: collections.deque[asyncio.Future[None]] = collections.deque()
        self._holders: collections.Counter[str] = collections.Counter()
        self.most_active = 0
        """The most places held at once since start (for tests and metrics)."""

    @property
    def waiting(self) -> int:
        """How many wait for a place now."""
        return sum(1 for f in self._queue if not f.done())

    def try_enter(self) -> bool:
        """Take a place if one is free and nobody waits for one (no barging); whether it was taken."""
        if self.active < self.limit and not self.waiting:
            self._took()
            return True
        return False

    async def enter(self) -> None:
        """Take a place, waiting behind those who asked first."""
        if self.try_enter():
            return
        place = asyncio.get_running_loop().create_future()
        self._queue.append(place)
        try:
            await place
        except asyncio.CancelledError:
            if place.done() and not place.cancelled():
                self.leave()  # handed a place while being cancelled: pass it on
            raise

    def leave(self) -> None:
        """Give a place back: it goes to the oldest waiter, if any."""
        while self._queue:
            place = self._queue.popleft()
            if not place.done():
                place.set_result(None)  # the place changes hands; ``active`` stays
                return
        self.active -= 1

    def _took(self) -> None:
        self.active += 1
        self.most_active = max(self.most_active, self.active)

    @asynccontextmanager
    async def admitted(self, run_id: str, *, reserved: bool = False) -> AsyncIterator[None]:
        """Hold a place for ``run_id``'s work within the block; ``reserved``: the caller took it already."""
        if not reserved:
            await self.enter()
        self._holders[run_id] += 1
        try:
            yield
        finally:
            if self._holders[run_id] > 0:  # not if cancelled in :meth:`aside` while queueing again
                self._drop(run_id)
                self.leave()

    @asynccontextmanager
    async def aside(self, run_id: str) -> AsyncIterator[None]:
        """While ``run_id`` waits for a person, its place (if it holds one) serves another run meanwhile."""
        if self._holders.get(run_id, 0) <= 0:
            yield
            return
        self._drop(run_id)
        self.leave()
        try:
            yield
        finally:
            await self.enter()
            self._holders[run_id] += 1

    def _drop(self, run_id: str) -> None:
        self._holders[run_id] -= 1
        if self._holders[run_id] <= 0:
            del self._holders[run_id]
