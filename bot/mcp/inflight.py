"""MCP calls in flight: which run each belongs to, so a stop from chat can cancel it and a question can reach it.

Each call runs in a task of its own under the server's ``timeout``. Cancelling that task makes the ``mcp`` SDK
send ``notifications/cancelled`` to the server (its dispatcher does so for a caller-cancelled request); the
caller then gets :class:`CallCancelled` instead of a cancellation of its own task, so the run goes on to record
the outcome and stop. While the server waits for a person's answer (elicitation) the timeout is paused.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from bot.call_context import current_call


class CallCancelled(Exception):  # noqa: N818 - an outcome, like asyncio's CancelledError
    """The call was cancelled because ``actor`` stopped its run; the server may or may not have acted."""

    def __init__(self, actor: str) -> None:
        super().__init__(f"cancelled because {actor} stopped the run")
        self.actor = actor


@dataclass
class _Call:
    server: str
    tool: str
    run_id: str | None
    timeout: float
    task: asyncio.Task[Any] | None = None
    scope: asyncio.Timeout | None = None
    cancelled_by: str | None = None


class CallsInFlight:
    """The MCP calls of this process that have been sent and not answered."""

    def __init__(self) -> None:
        self._calls: dict[int, _Call] = {}
        self._ids = itertools.count()

    async def run(self, server: str, tool: str, seconds: float, send: Callable[[], Awaitable[Any]]) -> Any:
        """Await ``send()`` (the SDK's ``call_tool``) within ``seconds``; :class:`TimeoutError` past it,
        :class:`CallCancelled` if the run was stopped meanwhile."""
        ctx = current_call()
        # The agent's name for the tool (``<server>__<tool>``) where a run calls it: what people are shown.
        shown = ctx.tool_name if ctx is not None else f"{server}__{tool}"
        call = _Call(server, shown, ctx.run_id if ctx is not None else None, seconds)

        async def timed() -> Any:
            async with asyncio.timeout(seconds) as scope:
                call.scope = scope
                return await send()

        key = next(self._ids)
        call.task = asyncio.ensure_future(timed())
        self._calls[key] = call
        try:
            return await call.task
        except asyncio.CancelledError:
            this = asyncio.current_task()
            if call.cancelled_by is not None and (this is None or not this.cancelling()):
                raise CallCancelled(call.cancelled_by) from None
            raise
        finally:
            del self._calls[key]

    def cancel_run(self, run_id: str, actor: str) -> list[str]:
        """Cancel every call of ``run_id`` in flight; the tools cancelled (an answered call is not)."""
        cancelled: list[str] = []
        for call in self._calls.values():
            if call.run_id == run_id and call.task is not None and not call.task.done() and call.cancelled_by is None:
                call.cancelled_by = actor
                call.task.cancel()
                cancelled.append(call.tool)
        return cancelled

    def asking(self, server: str) -> tuple[str | None, str | None]:
        """The run and tool that a request from ``server`` belongs to: the one run with calls in flight there, or
        ``(None, None)`` when there is none or several (the request cannot be tied to one person)."""
        calls = [c for c in self._calls.values() if c.server == server and c.run_id is not None]
        runs = {c.run_id for c in calls}
        if len(runs) != 1:
            return None, None
        return calls[0].run_id, calls[0].tool

    def ended(self, server: str, run_id: str) -> list[asyncio.Task[Any]]:
        """The tasks of the run's calls to ``server`` (a question ends when they do)."""
        return [c.task for c in self._calls.values() if c.server == server and c.run_id == run_id and c.task]

    @contextmanager
    def waiting_for_person(self, server: str, run_id: str) -> Iterator[None]:
        """Pause the timeout of the run's calls to ``server`` inside the block; each gets its full time after."""
        calls = [c for c in self._calls.values() if c.server == server and c.run_id == run_id]
        for call in calls:
            if call.scope is not None:
                call.scope.reschedule(None)
        try:
            yield
        finally:
            loop = asyncio.get_running_loop()
            for call in calls:
                if call.scope is not None and call.task is not None and not call.task.done():
                    call.scope.reschedule(loop.time() + call.timeout)
