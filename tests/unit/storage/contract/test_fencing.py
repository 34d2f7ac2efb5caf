"""Fencing: a run owner's writes hold only while the run is still its own (both backends).

A process that stalled past its lease wakes up with the fence it claimed the run with; a takeover has
changed the run's owner and bumped its generation, so every write it tries is refused and nothing of it
reaches the history, the ledger, the run or the outbox.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.messages import ChatMessage, ToolCall
from storage import Batch, FencedOut, RunFence, ThreadAddress, stores
from tests.fakes.storage_data import NOW, THREAD

ADDRESS = ThreadAddress(THREAD, "slack", "T1", "C1", THREAD.rsplit(":", 1)[-1])
LEASE = timedelta(seconds=30)
LATER = NOW + LEASE + timedelta(seconds=1)
UNKNOWN = "outcome unknown: the bot stopped while this tool was running"


async def _started_and_taken_over(storage, new_owner: str = "host-b"):
    """run-1 started by host-a (its fence returned), then taken over by ``new_owner`` after the lease."""
    await storage.inbox.enqueue(ADDRESS, "U_ANA", ChatMessage.from_user("deploy").to_dict(), now=NOW)
    run, _item = await storage.inbox.start_next(THREAD, "run-1", "host-a", NOW + LEASE, now=NOW)
    stale = RunFence.of(run)
    taken = await storage.leases.claim_expired("run-1", new_owner, LATER + LEASE, now=LATER)
    return stale, RunFence.of(taken)


async def test_a_stale_fence_is_refused_by_every_write_and_the_new_owners_fence_is_not(storage):
    call = ToolCall(tool_name="deploy", arguments={}, id="call_1")
    assert await storage.ledger.begin("run-1:call_1", "digest", run_id="run-1", tool_name="deploy")
    stale, current = await _started_and_taken_over(storage)
    assert (stale.generation, current.generation, current.owner) == (0, 1, "host-b")

    # The recoverer records "outcome unknown"; the stalled owner's real result does not overwrite it.
    assert await storage.ledger.mark_unknown("run-1:call_1", UNKNOWN)
    assert not await storage.ledger.finish("run-1:call_1", True, "deployed", fence=stale)
    entry = await storage.ledger.get("run-1:call_1")
    assert (entry.status, entry.result) == ("failed", UNKNOWN)

    before = await storage.messages.count_messages(THREAD)
    step = ChatMessage.from_assistant(tool_calls=[call])
    with pytest.raises(FencedOut) as refused:
        await storage.messages.write_messages(
            THREAD, [step, ChatMessage.from_tool("deployed", origin=call)], fence=stale
        )
    assert refused.value.run_id == "run-1"
    assert await storage.messages.count_messages(THREAD) == before

    assert not await storage.runs.transition("run-1", ("running", "resuming"), "finished", fence=stale)
    assert not await storage.outbox.add(
        "answer:run-1:a", ADDRESS, "Deployed.", now=LATER, finishes_run="run-1", fence=stale
    )
    run = await storage.runs.get("run-1")
    assert (run.status, run.owner) == ("running", "host-b")
    assert await storage.outbox.undelivered(THREAD) == []

    # The same writes under the new owner's fence go through.
    assert (
        await storage.messages.write_messages(
            THREAD, [step, ChatMessage.from_tool(UNKNOWN, origin=call, error=True)], fence=current
        )
        == 2
    )
    assert await storage.outbox.add(
        "answer:run-1:b", ADDRESS, "Outcome unknown.", now=LATER, finishes_run="run-1", fence=current
    )
    assert (await storage.runs.get("run-1")).status == "finished"
    # A finished run fences out everyone, its last owner included.
    assert not await storage.runs.transition("run-1", ("running", "resuming"), "failed", fence=current)


async def test_an_unfinished_call_is_finished_under_a_holding_fence_only(storage):
    assert await storage.ledger.begin("run-1:call_1", "digest", run_id="run-1", tool_name="deploy")
    stale, current = await _started_and_taken_over(storage)
    # The recoverer has not marked the call yet: the stalled owner still may not record its outcome.
    assert not await storage.ledger.finish("run-1:call_1", True, "deployed", fence=stale)
    assert (await storage.ledger.get("run-1:call_1")).status == "executing"
    assert await storage.ledger.finish("run-1:call_1", True, "deployed", fence=current)
    assert (await storage.ledger.get("run-1:call_1")).status == "done"


async def test_a_process_that_takes_over_its_own_run_fences_out_its_earlier_work(storage):
    stale, current = await _started_and_taken_over(storage, new_owner="host-a")
    assert (stale.owner, current.owner) == ("host-a", "host-a")
    assert not await storage.runs.transition(
        "run-1", "running", "paused", fence=stale, snapshot_json={"step": 1}, step=1
    )
    assert await storage.runs.transition("run-1", "running", "paused", fence=current, snapshot_json={"step": 1}, step=1)


async def test_a_fence_guards_only_its_own_run(storage):
    stale, _current = await _started_and_taken_over(storage)
    with pytest.raises(ValueError):
        await storage.runs.transition("run-2", "running", "finished", fence=stale)


async def test_a_stale_fence_begins_no_call_and_the_new_owners_fence_does(storage):
    # The new owner may be running the run's next step, whose calls the ledger has never seen: only the fence
    # keeps the stalled owner from starting one of them beside it.
    stale, current = await _started_and_taken_over(storage)
    with pytest.raises(FencedOut) as refused:
        await storage.ledger.begin("run-1:call_2", "digest", run_id="run-1", tool_name="deploy", fence=stale)
    assert refused.value.run_id == "run-1"
    assert await storage.ledger.get("run-1:call_2") is None, "nothing written"
    assert await storage.ledger.begin("run-1:call_2", "digest", run_id="run-1", tool_name="deploy", fence=current)
    assert not await storage.ledger.begin(
        "run-1:call_2", "digest", run_id="run-1", tool_name="deploy", fence=current
    ), "still once per call under a holding fence"
    assert (await storage.ledger.get("run-1:call_2")).status == "executing"


async def test_a_fenced_begin_in_a_batch_rolls_the_batch_back(storage):
    # The engine stores the model's reply with the first call's begin: a stale owner stores neither.
    stale, _current = await _started_and_taken_over(storage)
    before = await storage.messages.count_messages(THREAD)
    reply = ChatMessage.from_assistant(tool_calls=[ToolCall(tool_name="deploy", arguments={}, id="call_3")])
    batch = Batch()
    batch.write(stores.messages.write_messages, THREAD, [reply])
    batch.write(stores.ledger.begin, "run-1:call_3", "digest", run_id="run-1", fence=stale)
    with pytest.raises(FencedOut):
        await storage.batches.apply(batch)
    assert await storage.messages.count_messages(THREAD) == before
    assert await storage.ledger.get("run-1:call_3") is None
