"""Fencing through the engine: an owner that stalled past its lease and wakes after a takeover writes nothing.

Two engines share one database (a SQLite file, or PostgreSQL), as two processes would. Engine A's
tool blocks on an event (A "stalls"); the clock passes A's lease and engine B's recovery takes the run
over, records "outcome unknown" for the call and finishes the run. Then A's tool returns: its heartbeat
has not run (it is an hour long here), so only the fence in each write keeps A's late result out of the
history and A's answer out of the thread.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import pytest

from bot.agent.tool_runner import OUTCOME_UNKNOWN
from bot.engine.ledger import StorageExecutionLedger, ledger_key
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ToolCall
from bot.tools import tool
from storage import FencedOut, RunFence, ThreadAddress
from tests.fakes.engine_kit import asks_for, bounded, dangling_calls, says, tool_results


async def test_a_stalled_owner_whose_run_was_taken_over_adds_no_second_result_and_no_second_answer(
    harnesses, database_url
):
    started, release = asyncio.Event(), asyncio.Event()

    @tool(confirmation_default="never")
    async def slow_job(name: str) -> str:
        """Run a slow job.

        :param name: The job.
        """
        started.set()
        await release.wait()
        return f"job {name} done"

    a = await harnesses.open(
        replies=[asks_for("slow_job", name="stall"), says("A's answer")],
        extra_tools=[slow_job],
        # A's heartbeat never notices the takeover: the fence alone must hold.
        heartbeat_seconds=3600.0,
        database_url=database_url,
    )
    working = asyncio.create_task(a.engine.handle_message(a.inbound("run job stall")))
    await bounded(started.wait())
    [run] = await a.engine.storage.runs.list_by_status("running")

    a.clock.advance(seconds=a.engine.config.lease_seconds + 1)
    b = await harnesses.reopen(a, generator=ScriptedChatGenerator([says("B's answer")]))
    await b.engine.lifecycle.recover()
    await b.engine.wait_idle()
    taken = await b.run_of(run.run_id)
    assert (taken.status, taken.recoveries) == ("finished", 1)

    release.set()  # A wakes up: its tool returns the real result
    await bounded(working)

    history = await b.history()
    results = tool_results(history)
    assert results == [("slow_job", OUTCOME_UNKNOWN, True)], "exactly one result for the call"
    call_ids = [m.tool_call_result.origin.id for m in history if m.tool_call_result is not None]
    assert [n for n in Counter(call_ids).values() if n > 1] == []
    assert dangling_calls(history) == []
    assert [m.text for m in history if m.text == "A's answer"] == []
    assert a.surface.replies == [], "A posts nothing for a run it lost"
    assert [r.text for r in b.surface.replies][-1] == "B's answer"
    assert len(a.generator.calls) == 1, "A never asked the model about its late result"

    # The ledger keeps what the thread was told; the real, late result is kept in the audit log.
    [step] = [m for m in history if m.tool_calls]
    entry = await b.engine.storage.ledger.get(f"{run.run_id}:{step.tool_calls[0].id}")
    assert (entry.status, entry.result) == ("failed", OUTCOME_UNKNOWN)
    [late] = await b.audit("late_result")
    assert (late.subject, late.details["result"], late.details["ok"]) == (entry.tool_call_id, "job stall done", True)
    assert (await b.run_of(run.run_id)).status == "finished"


async def test_a_recovery_cut_short_after_marking_a_call_unknown_still_tells_the_thread(harnesses, database_url):
    # A recoverer can be fenced out (or die) between marking a call "outcome unknown" in the ledger and
    # writing that result: the next recoverer finds the mark, not a running call, and must still say so.
    started, release = asyncio.Event(), asyncio.Event()

    @tool(confirmation_default="never")
    async def slow_job(name: str) -> str:
        """Run a slow job.

        :param name: The job.
        """
        started.set()
        await release.wait()
        return f"job {name} done"

    a = await harnesses.open(
        replies=[asks_for("slow_job", name="stall")],
        extra_tools=[slow_job],
        heartbeat_seconds=3600.0,
        database_url=database_url,
    )
    working = asyncio.create_task(a.engine.handle_message(a.inbound("run job stall")))
    await bounded(started.wait())
    [run] = await a.engine.storage.runs.list_by_status("running")
    [entry] = await a.engine.storage.ledger.executing(run.run_id)
    assert await a.engine.storage.ledger.mark_unknown(entry.tool_call_id, OUTCOME_UNKNOWN)

    a.clock.advance(seconds=a.engine.config.lease_seconds + 1)
    b = await harnesses.reopen(a, generator=ScriptedChatGenerator([says("B's answer")]))
    await b.engine.lifecycle.recover()
    await b.engine.wait_idle()
    release.set()
    await bounded(working)

    notices = [r.text for r in b.surface.replies if r.text.startswith("I was restarted")]
    assert len(notices) == 1 and "The outcome of slow_job is unknown" in notices[0], notices
    assert tool_results(await b.history()) == [("slow_job", OUTCOME_UNKNOWN, True)]


class StallingGenerator:
    """A model that asks for ``delete_file`` once ``release`` is set (the process "stalls" while it thinks)."""

    def __init__(self) -> None:
        self.started, self.release = asyncio.Event(), asyncio.Event()
        self.calls = 0

    async def run_async(self, messages, tools=None, generation_kwargs=None, streaming_callback=None):
        self.calls += 1
        self.started.set()
        await self.release.wait()
        return {"replies": [asks_for("delete_file", path="a.txt")]}


async def test_an_owner_taken_over_while_the_model_answered_stores_no_approval_and_renders_nothing(
    harnesses, database_url
):
    stalling = StallingGenerator()
    a = await harnesses.open(generator=stalling, heartbeat_seconds=3600.0, database_url=database_url)
    working = asyncio.create_task(a.engine.handle_message(a.inbound("delete a.txt")))
    await bounded(stalling.started.wait())
    [run] = await a.engine.storage.runs.list_by_status("running")

    a.clock.advance(seconds=a.engine.config.lease_seconds + 1)
    b = await harnesses.reopen(a, generator=ScriptedChatGenerator([asks_for("delete_file", path="a.txt")]))
    await b.engine.lifecycle.recover()
    await b.engine.wait_idle()
    [b_approval] = await b.engine.storage.approvals.for_run(run.run_id)  # B paused the run it took over

    stalling.release.set()  # A's model answers: A pauses a run that is no longer its own
    await bounded(working)

    assert await a.engine.storage.approvals.for_run(run.run_id) == [b_approval], "A stored no approval"
    assert a.surface.renders == [], "A renders nothing for a run it lost"
    assert len(b.surface.renders) == 1
    paused = await b.run_of(run.run_id)
    assert (paused.status, paused.step, paused.recoveries) == ("paused", b_approval.step, 1)


async def test_the_engines_ledger_begins_no_call_of_a_run_taken_over(harnesses, database_url):
    # A call whose begin carries no history write (a step's later call, a recoverer's decided call) is kept from
    # running by the fence on begin alone: the new owner may be running the run's next step, with other call ids.
    a = await harnesses.open(replies=[], database_url=database_url)
    storage = a.engine.storage
    thread = a.inbound("deploy").thread_ref
    address = ThreadAddress(thread.key, thread.platform, thread.workspace, thread.channel, thread.thread)
    now = a.clock()
    await storage.inbox.enqueue(address, "U_ANA", ChatMessage.from_user("deploy").to_dict(), now=now)
    run, _item = await storage.inbox.start_next(thread.key, "run-x", "host-a", now + timedelta(seconds=30), now=now)
    stale = RunFence.of(run)
    later = now + timedelta(seconds=31)
    taken = await storage.leases.claim_expired("run-x", "host-b", later + timedelta(seconds=30), now=later)
    ledger = StorageExecutionLedger(storage, {"run-x": stale}.get)
    call = ToolCall(tool_name="deploy", arguments={"env": "prod"}, id="call_2")
    with pytest.raises(FencedOut):
        await ledger.begin("run-x", "call_2", call)
    assert await storage.ledger.get(ledger_key("run-x", "call_2")) is None, "the stalled owner began nothing"

    granted = await StorageExecutionLedger(storage, {"run-x": RunFence.of(taken)}.get).begin("run-x", "call_2", call)
    assert granted.granted, "the new owner begins it"
