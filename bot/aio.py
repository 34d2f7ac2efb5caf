"""Bridges between sync and async code.

``run_sync`` lets every sync twin (``Agent.run``, ``Tool.invoke``) work whether or not the caller is
already inside a running event loop: in that case the coroutine runs on a private loop in a worker
thread instead of failing with "asyncio.run() cannot be called from a running event loop".
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion from sync code and return its result."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="run-sync") as pool:
        return pool.submit(asyncio.run, coro).result()


@functools.lru_cache(maxsize=1024)
def _remembered_is_coroutine_function(function: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(function)


def is_coroutine_function(function: Callable[..., Any]) -> bool:
    """``inspect.iscoroutinefunction``, remembered per callable.

    The serving path asks it about the same few callables (store methods, hooks, tools) several times per
    conversation, and each answer unwraps partials and reads code flags. A callable that cannot be a
    dictionary key is asked afresh.
    """
    try:
        return _remembered_is_coroutine_function(function)
    except TypeError:  # unhashable
        return inspect.iscoroutinefunction(function)


async def call_store(method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call a store method from async code: an async one is awaited, a sync one (SQLite) runs in a thread.

    >>> await call_store(store.retrieve_messages, "t1", last_k=5)
    """
    if is_coroutine_function(method):
        return await method(*args, **kwargs)
    return await asyncio.to_thread(method, *args, **kwargs)
