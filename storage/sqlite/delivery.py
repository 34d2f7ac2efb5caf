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
from typing import Any

Target = concurrent.futures.Future | asyncio.Future
"""Where a caller waits for one result: a thread-pool future, or an asyncio future (on its own loop)."""
Outcome = tuple[Target, bool, Any]
"""A target, whether the call succeeded, and its value or exception."""


def here() -> asyncio.Future[Any]:
    """A target on the running loop (the asyncio future itself: it knows its loop)."""
    return asyncio.get_running_loop().create_future()


def start(target: Target) -> bool:
    """Whether the call should still run (a cancelled thread-pool future is skipped)."""
    if isinstance(target, concurrent.futures.Future):
        return target.set_running_or_notify_cancel()
    return True


def deliver(outcomes: Iterable[Outcome]) -> None:
    """Resolve every target: thread-pool futures directly, asyncio futures with one wakeup per loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
    for outcome in outcomes:
        target = outcome[0]
        if isinstance(target, concurrent.futures.Future):
            if outcome[1]:
                target.set_result(outcome[2])
            else:
                target.set_exception(outcome[2])
            continue
        loop = target.get_loop()
        items = by_loop.get(loop)
        if items is None:
            by_loop[loop] = [outcome]
        else:
            items.append(outcome)
    for loop, items in by_loop.items():
        with contextlib.suppress(RuntimeError):  # the loop has closed: nobody is waiting any more
            loop.call_soon_threadsafe(_settle, items)


def _settle(items: list[Outcome]) -> None:
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
