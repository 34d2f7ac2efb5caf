"""The engine's taps for :mod:`bot.metrics`: model calls are timed by wrapping the generator once, here.

Tool calls are timed by :class:`bot.engine.ledger.StorageExecutionLedger` (its ``begin``/``finish``
bracket every execution), decisions and run outcomes by the engine itself.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Any, Protocol, runtime_checkable

from bot.metrics import Observer, token_counts


@runtime_checkable
class WarmsUp(Protocol):
    """A generator whose client loads lazily, and can be loaded ahead of its first call."""

    async def warm_up(self) -> None: ...


@runtime_checkable
class Closes(Protocol):
    """A generator that holds connections (an HTTP session) until it is closed."""

    async def aclose(self) -> None: ...


class ObservedChatGenerator:
    """A chat generator that reports each call's latency, error and tokens, and otherwise is ``inner``.

    Every other attribute (``to_dict``, a scripted generator's ``calls``, …) is the inner generator's.

    >>> generator = ObservedChatGenerator(OpenAIChatGenerator(model="gpt-4o-mini"), observer)
    """

    def __init__(self, inner: Any, observer: Observer) -> None:
        self.inner = inner
        self.observer = observer
        # The agent reads which keywords the generator takes from its methods' signatures (Haystack-style
        # generators take no ``tools``): each wrapper method shows the inner method's signature, and ``run``
        # exists only when the inner generator has one.
        inner_run = getattr(inner, "run", None)
        inner_run_async = getattr(inner, "run_async", None)

        async def run_async(**kwargs: Any) -> dict[str, Any]:
            started = time.perf_counter()
            try:
                if inner_run_async is not None:
                    output = await inner_run_async(**kwargs)
                else:
                    sync_run = inner_run
                    assert sync_run is not None  # a generator has one of the two
                    output = await asyncio.to_thread(lambda: sync_run(**kwargs))
            except Exception as exc:
                self._report(started, None, exc)
                raise
            self._report(started, output, None)
            return output

        wrapped = inner_run_async or inner_run
        self.run_async = functools.wraps(wrapped)(run_async) if wrapped is not None else run_async
        if inner_run is not None:

            def run(**kwargs: Any) -> dict[str, Any]:
                started = time.perf_counter()
                try:
                    output = inner_run(**kwargs)
                except Exception as exc:
                    self._report(started, None, exc)
                    raise
                self._report(started, output, None)
                return output

            self.run = functools.wraps(inner_run)(run)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def warm_up(self) -> None:
        """Load the inner generator's client now, if it loads lazily (:class:`WarmsUp`); else nothing."""
        if isinstance(self.inner, WarmsUp):
            await self.inner.warm_up()

    async def aclose(self) -> None:
        """Close the inner generator's connections, if it holds any (:class:`Closes`); else nothing."""
        if isinstance(self.inner, Closes):
            await self.inner.aclose()

    def _report(self, started: float, output: dict[str, Any] | None, error: Exception | None) -> None:
        replies = (output or {}).get("replies") or []
        prompt, completion = token_counts(replies[0].meta if replies else None)
        self.observer.llm_call(
            time.perf_counter() - started,
            error=type(error).__name__ if error is not None else None,
            prompt_tokens=prompt,
            completion_tokens=completion,
        )
