"""Compare-and-set on both backends: among concurrent callers exactly one wins, whatever the backend.

On SQLite the callers share the executor's threads; on PostgreSQL each holds its own pooled connection,
so the conditional ``UPDATE``s really race inside the server.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from tests.fakes.storage_contract import create_run
from tests.fakes.storage_data import NOW, new_approval

CONTENDERS = 20
LATER = NOW + timedelta(minutes=5)


async def test_twenty_concurrent_decisions_have_exactly_one_winner(storage):
    await create_run(storage, status="paused")
    [approval] = await storage.approvals.create_many([new_approval()])
    deciders = [f"U_{i:02d}" for i in range(CONTENDERS)]
    won = await asyncio.gather(
        *(storage.approvals.decide(approval.approval_id, status="approved", decided_by=d, now=LATER) for d in deciders)
    )
    assert won.count(True) == 1
    assert (await storage.approvals.get(approval.approval_id)).decided_by == deciders[won.index(True)]


async def test_a_tool_call_begins_once_among_twenty(storage):
    began = await asyncio.gather(
        *(storage.ledger.begin("call_1", "d1", run_id="run-1", tool_name=f"t{i}") for i in range(CONTENDERS))
    )
    assert began.count(True) == 1
    assert (await storage.ledger.get("call_1")).tool_name == f"t{began.index(True)}"


async def test_a_run_resumes_once_among_twenty(storage):
    await create_run(storage, status="paused")
    moved = await asyncio.gather(
        *(storage.runs.transition("run-1", "paused", "resuming", error=f"r{i}") for i in range(CONTENDERS))
    )
    assert moved.count(True) == 1
    assert (await storage.runs.get("run-1")).error == f"r{moved.index(True)}"


async def test_an_event_is_first_once_among_twenty(storage):
    firsts = await asyncio.gather(*(storage.events.first_time("slack:Ev1") for _ in range(CONTENDERS)))
    assert firsts.count(True) == 1


async def test_concurrent_votes_each_see_every_earlier_vote(storage):
    await create_run(storage, status="paused")
    [approval] = await storage.approvals.create_many([new_approval(quorum=CONTENDERS)])
    voters = [f"U_{i:02d}" for i in range(CONTENDERS)]
    counts = await asyncio.gather(
        *(storage.approvals.add_vote(approval.approval_id, voter, "confirm", now=LATER) for voter in voters)
    )
    # Serialised per approval: the counts are 1..20, so exactly one voter sees the quorum reached.
    assert sorted(counts) == list(range(1, CONTENDERS + 1))
