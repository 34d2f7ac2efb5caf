"""MCP calls in flight: a stop cancels the run's calls (never another run's, never an answered one)."""

from __future__ import annotations

import asyncio

import pytest

from bot.call_context import CallContext, calling
from bot.mcp.inflight import CallCancelled, CallsInFlight


async def test_a_stop_cancels_only_that_runs_call_and_says_who_stopped_it():
    calls = CallsInFlight()
    started, other_started = asyncio.Event(), asyncio.Event()

    async def slow(event: asyncio.Event) -> str:
        event.set()
        await asyncio.sleep(30)
        return "late"

    async def call(run_id: str, event: asyncio.Event) -> str:
        with calling(CallContext(run_id, "call_1", "t__slow")):
            return await calls.run("t", "slow", 60, lambda: slow(event))

    mine = asyncio.create_task(call("run-1", started))
    other = asyncio.create_task(call("run-2", other_started))
    await asyncio.wait_for(asyncio.gather(started.wait(), other_started.wait()), 5)

    assert calls.cancel_run("run-1", "U1") == ["t__slow"]
    with pytest.raises(CallCancelled, match="cancelled because U1 stopped the run"):
        await asyncio.wait_for(mine, 5)
    assert not other.done()
    assert calls.asking("t") == ("run-2", "t__slow")
    other.cancel()
    await asyncio.gather(other, return_exceptions=True)


async def test_an_answered_call_keeps_its_result_and_nothing_is_left_to_cancel():
    calls = CallsInFlight()

    async def quick() -> str:
        return "done"

    with calling(CallContext("run-1", "call_1", "t__quick")):
        assert await calls.run("t", "quick", 5, quick) == "done"
    assert calls.cancel_run("run-1", "U1") == []
    assert calls.asking("t") == (None, None)


async def test_the_timeout_still_applies():
    calls = CallsInFlight()
    with pytest.raises(TimeoutError):
        await calls.run("t", "slow", 0.05, lambda: asyncio.sleep(5))
