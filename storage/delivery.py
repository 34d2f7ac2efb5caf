"""Handing results from storage threads back to asyncio, one event-loop wakeup per batch.

``loop.run_in_executor`` wakes the event loop once per call (a write to its self-pipe, a system call).
Under load the storage threads finish calls in batches, so they deliver a whole batch of results to
each loop with one ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import queue
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class AsyncTarget:
    """Where an asyncio caller waits for one result."""

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]

    @classmethod
    def here(cls) -> AsyncTarget:
        """A target on the running loop."""
        loop = asyncio.get_running_loop()
        return cls(loop, loop.create_future())


Target = concurrent.futures.Future | AsyncTarget
Outcome = tuple[Target, bool, Any]
"""A target, whether the call succeeded, and its value or exception."""


def start(target: Target) -> bool:
    """Whether the call should still run (a cancelled thread-pool future is skipped)."""
    if isinstance(target, AsyncTarget):
        return True
    return target.set_running_or_notify_cancel()


def deliver(outcomes: Iterable[Outcome]) -> None:
    """Resolve every target: thread-pool futures directly, asyncio futures with one wakeup per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for target, ok, value in outcomes:
        if isinstance(target, AsyncTarget):
            by_loop.setdefault(target.loop, []).append((target.future, ok, value))
        elif ok:
            target.set_result(value)
        else:
            target.set_exception(value)
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting any more
            loop.call_soon_threadsafe(_settle, items)


def _settle(items: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in items:
        if future.done():  # cancelled while the call ran
            continue
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)


STOP = object()
"""Put on a work queue to stop one worker after the work queued before it."""


def batches(work: queue.SimpleQueue[Any], max_batch: int) -> Iterator[list[tuple[Callable[[], Any], Target]]]:
    """Yield what is queued, at most ``max_batch`` items at a time (waiting for the first), until :data:`STOP`."""
    while True:
        first = work.get()
        if first is STOP:
            return
        batch = [first]
        stopping = False
        while len(batch) < max_batch:
            try:
                item = work.get_nowait()
            except queue.Empty:
                break
            if item is STOP:
                stopping = True
                break
            batch.append(item)
        yield batch
        if stopping:
            return
