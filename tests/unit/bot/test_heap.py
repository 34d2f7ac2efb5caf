"""The serving process's garbage collector: set up once after start-up, and pauses leave nothing for it."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

from bot.heap import YOUNG_THRESHOLD
from bot.hitl import HITLBreakpointException
from bot.messages import ChatMessage
from tests.fakes.agent_kit import ToolBox, says
from tests.unit.bot.agent.test_agent_breakpoints import three_call_agent


def _run(code: str) -> str:
    """Run ``code`` in a fresh interpreter (the collector's settings are the whole process's)."""
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_settling_for_serving_freezes_the_start_up_heap_and_makes_young_collections_rarer() -> None:
    out = _run(
        """
        import gc
        from bot.heap import settle_for_serving
        settle_for_serving()
        print(gc.get_threshold()[0], gc.get_freeze_count() > 0)
        """
    )
    assert out == f"{YOUNG_THRESHOLD} True"


def test_settling_for_serving_keeps_a_collector_that_was_switched_off_off() -> None:
    out = _run(
        """
        import gc
        from bot.heap import settle_for_serving
        gc.set_threshold(0)
        settle_for_serving()
        print(gc.get_threshold()[0])
        """
    )
    assert out == "0"


async def test_a_paused_run_leaves_no_reference_cycle_for_the_collector() -> None:
    # A cycle through the pause (its traceback, the frames that raised it) would keep the run's frames and
    # history alive until a full collection: with many runs paused at once, those collections dominate.
    agent, _ = three_call_agent(ToolBox(), says("done"))
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        try:
            await agent.run_async([ChatMessage.from_user("clean up the server")])
        except HITLBreakpointException as pause:
            pending = [c.id for c in pause.pending_tool_calls]
        gc.collect()
        left = [o for o in gc.garbage if isinstance(o, HITLBreakpointException)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert pending == ["c-del", "c-rst"]
    assert left == []
