"""Operations on both backends: gauges, the readiness probe, snapshot retention and pruning.

Retention must never touch what is still in use: an active run, a pending approval, a tool call still
executing, or the history of a thread whose run is active.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.messages import ChatMessage
from storage.protocols import PruneCounts
from tests.fakes.storage_contract import create_run
from tests.fakes.storage_data import NOW, new_approval, tool_exchange

ENDED_THREAD = "slack:T1:C1:1600000000.000100"
ACTIVE_THREAD = "slack:T1:C1:1700000000.000100"
SNAPSHOT = {"schema_version": 1, "messages": [], "step": 1}


async def _ended_and_active(storage) -> None:
    """One finished run with a decided approval, a done tool call and history; one paused run with a pending
    approval, an executing tool call and history; one finished run whose approval is (oddly) still pending."""
    await create_run(storage, "run-ended", thread=ENDED_THREAD)
    [decided] = await storage.approvals.create_many(
        [new_approval("run-ended", "call_old", chat_history_id=ENDED_THREAD)]
    )
    assert await storage.approvals.decide(decided.approval_id, status="rejected", decided_by="U_BOB", now=NOW)
    assert await storage.ledger.begin("run-ended:call_x", "d1", run_id="run-ended", tool_name="read_logs")
    assert await storage.ledger.finish("run-ended:call_x", True, "ok")
    await storage.messages.write_messages(
        ENDED_THREAD, [ChatMessage.from_user("read the logs"), *tool_exchange(("read_logs", {"service": "api"}))]
    )
    assert await storage.runs.transition("run-ended", "running", "finished", snapshot_json=SNAPSHOT)

    await create_run(storage, "run-active", thread=ACTIVE_THREAD)
    await storage.approvals.create_many([new_approval("run-active", "call_new")])
    assert await storage.ledger.begin("run-active:call_y", "d2", run_id="run-active", tool_name="read_logs")
    await storage.messages.write_messages(ACTIVE_THREAD, [ChatMessage.from_user("delete a.txt")])
    assert await storage.runs.transition("run-active", "running", "paused", snapshot_json=SNAPSHOT, step=1)

    await create_run(storage, "run-odd", thread="slack:T1:C2:1")
    await storage.approvals.create_many([new_approval("run-odd", "call_odd", chat_history_id="slack:T1:C2:1")])
    assert await storage.runs.transition("run-odd", "running", "finished")


async def test_gauges_count_pending_approvals_by_tool_and_the_inbox(storage):
    assert await storage.ops.pending_by_tool() == {}
    assert await storage.ops.inbox_depth() == 0
    await _ended_and_active(storage)
    assert await storage.ops.pending_by_tool() == {"delete_file": 2}


async def test_a_migrated_writable_database_is_ready(storage):
    assert await storage.ops.readiness_problem() is None


async def test_snapshots_of_ended_runs_are_dropped_after_retention_never_a_paused_runs(storage):
    await _ended_and_active(storage)
    assert await storage.ops.drop_snapshots(finished_before=NOW) == 0  # ended after NOW: still kept
    assert await storage.ops.drop_snapshots(finished_before=_future()) == 1
    assert not (await storage.runs.get("run-ended")).has_snapshot
    assert (await storage.runs.get("run-active")).has_snapshot
    assert await storage.runs.snapshot("run-active") == SNAPSHOT


async def test_pruning_deletes_ended_work_and_leaves_active_runs_and_pending_approvals(storage):
    await _ended_and_active(storage)
    assert await storage.ops.prune(older_than=NOW - timedelta(days=1)) == PruneCounts()
    expected = PruneCounts(runs=1, approvals=1, ledger=1, messages=3)
    assert await storage.ops.prune(older_than=_future(), dry_run=True) == expected
    assert (await storage.runs.get("run-ended")).status == "finished"  # the dry run deleted nothing

    assert await storage.ops.prune(older_than=_future()) == expected
    assert [r.run_id for r in await storage.runs.list_by_status("running", "paused", "finished")] == [
        "run-active",
        "run-odd",
    ]
    assert [a.tool_call_id for a in await storage.approvals.pending()] == ["call_new", "call_odd"]
    assert await storage.ledger.get("run-ended:call_x") is None
    assert (await storage.ledger.get("run-active:call_y")).status == "executing"
    assert await storage.messages.count_messages(ENDED_THREAD) == 0
    assert await storage.messages.count_messages(ACTIVE_THREAD) == 1
    assert await storage.ops.prune(older_than=_future()) == PruneCounts()


def _future() -> datetime:
    """A cutoff after everything the tests wrote (stores stamp updates with the real time)."""
    return datetime.now(UTC) + timedelta(days=1)


async def test_a_writer_that_saw_a_thread_before_it_was_pruned_writes_into_it_again(backend):
    storage, other = backend.storage, await backend.open_another()  # two processes on one database
    await _ended_and_active(storage)
    await other.ops.prune(older_than=_future())
    await other.messages.write_messages("slack:T1:C9:1.0", [ChatMessage.from_user("a new thread")])

    assert await storage.messages.write_messages(ENDED_THREAD, [ChatMessage.from_user("back again")]) == 1

    assert [m.text for m in await other.messages.retrieve_messages(ENDED_THREAD)] == ["back again"]
    assert [m.text for m in await other.messages.retrieve_messages("slack:T1:C9:1.0")] == ["a new thread"]
    assert [m.text for m in await other.messages.retrieve_messages(ACTIVE_THREAD)] == ["delete a.txt"]


async def test_every_terminal_status_is_pruned_and_loses_its_snapshot(storage):
    # Derived from the run-status definition: a terminal status added later is covered (or this test fails).
    from storage.protocols import TERMINAL_RUN_STATUSES

    for status in TERMINAL_RUN_STATUSES:
        await create_run(storage, f"run-{status}", thread=f"slack:T1:C9:{status}")
        assert await storage.runs.transition(f"run-{status}", "running", status, snapshot_json=SNAPSHOT)
    assert await storage.ops.drop_snapshots(finished_before=_future()) == len(TERMINAL_RUN_STATUSES)
    counts = await storage.ops.prune(older_than=_future())
    assert counts.runs == len(TERMINAL_RUN_STATUSES)
    assert await storage.runs.list_by_status(*TERMINAL_RUN_STATUSES) == []
