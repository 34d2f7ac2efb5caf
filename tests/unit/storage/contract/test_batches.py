"""Write batches on both backends: a step's writes in one call and one transaction, all or nothing.

A pause is the model case: the run's usage, its approvals, the run's move to ``paused`` (a compare-and-set
under the owner's fence) and the audit entry. Either every write lands, or, when the compare-and-set loses
or any write fails, none does, and the audit chain stays intact either way.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from bot.messages import ChatMessage
from storage import CorruptRecord, NotFound, Read, RunFence, ThreadAddress, TokenUsage, Write
from tests.fakes.storage_contract import create_run
from tests.fakes.storage_data import NOW, THREAD, new_approval

ADDRESS = ThreadAddress(THREAD, "slack", "T1", "C1", THREAD.rsplit(":", 1)[-1])
LEASE = timedelta(seconds=30)


def _pause(run_id: str = "run-1", *, approval_id: str = "a-1", fence: RunFence | None = None) -> list[Write]:
    """The writes of a pause, as the engine makes them."""
    return [
        Write("runs", "record_usage", (run_id, TokenUsage(21, 7, 28))),
        Write("approvals", "create_many", ([new_approval(run_id, f"call_{approval_id}", approval_id=approval_id)],)),
        Write(
            "runs",
            "transition",
            (run_id, "running", "paused"),
            {"fence": fence, "step": 1, "snapshot_json": {"step": 1}},
            required=True,
        ),
        Write("audit", "append", ("U_ANA", "paused", run_id, {"approvals": [approval_id]}), {"now": NOW}),
    ]


async def _nothing_of_the_pause(storage, run_id: str = "run-1") -> None:
    run = await storage.runs.get(run_id)
    assert run.status == "running" and run.step == 0 and not run.has_snapshot
    assert await storage.approvals.for_run(run_id) == []
    assert (await storage.runs.usage(platform="slack", workspace="T1", since=NOW - LEASE)).total_tokens == 0
    assert await storage.audit.recent(5, subject=run_id) == []


async def test_a_batch_applies_every_write_in_order_and_returns_each_result(storage):
    await create_run(storage)
    outcome = await storage.batches.apply(_pause())

    assert outcome.applied and outcome.refused is None
    usage, created, moved, audit_id = outcome.results
    assert (usage, [a.approval_id for a in created], moved, audit_id) == (None, ["a-1"], True, 1)
    run = await storage.runs.get("run-1")
    assert (run.status, run.step, run.has_snapshot) == ("paused", 1, True)
    assert [a.status for a in await storage.approvals.for_run("run-1")] == ["pending"]
    assert (await storage.runs.usage(platform="slack", workspace="T1", since=NOW - LEASE)).total_tokens == 28
    assert [e.action for e in await storage.audit.recent(5)] == ["paused"]


async def test_a_lost_compare_and_set_rolls_back_every_write_of_the_batch(storage):
    await create_run(storage)
    assert await storage.runs.transition("run-1", "running", "failed", error="stopped elsewhere")

    outcome = await storage.batches.apply(_pause())

    assert (outcome.applied, outcome.refused, outcome.results) == (False, 2, ())
    assert await storage.approvals.for_run("run-1") == []
    assert (await storage.runs.get("run-1")).status == "failed"
    assert (await storage.runs.usage(platform="slack", workspace="T1", since=NOW - LEASE)).total_tokens == 0
    assert await storage.audit.recent(5) == []


async def test_a_pause_under_a_fence_lost_to_a_takeover_writes_nothing(storage):
    await storage.inbox.enqueue(ADDRESS, "U_ANA", ChatMessage.from_user("delete a.txt").to_dict(), now=NOW)
    run, _item = await storage.inbox.start_next(THREAD, "run-1", "host-a", NOW + LEASE, now=NOW)
    stale = RunFence.of(run)
    later = NOW + LEASE + timedelta(seconds=1)
    assert await storage.leases.claim_expired("run-1", "host-b", later + LEASE, now=later) is not None

    outcome = await storage.batches.apply(_pause(fence=stale))

    assert not outcome.applied and outcome.refused == 2
    taken = await storage.runs.get("run-1")
    assert (taken.status, taken.owner, taken.step) == ("running", "host-b", 0)
    assert await storage.approvals.for_run("run-1") == []
    assert await storage.audit.recent(5) == []


async def test_a_write_that_raises_rolls_back_the_batch_and_the_error_reaches_the_caller(storage):
    await create_run(storage)
    writes = [*_pause()[:2], Write("runs", "record_usage", ("run-404", TokenUsage(1, 1, 2)))]

    with pytest.raises(NotFound, match="run-404"):
        await storage.batches.apply(writes)

    await _nothing_of_the_pause(storage)
    # The storage is usable afterwards: the same pause applies cleanly.
    assert (await storage.batches.apply(_pause())).applied


async def test_two_batches_racing_for_one_compare_and_set_apply_exactly_once(storage):
    await create_run(storage)
    first, second = await asyncio.gather(
        storage.batches.apply(_pause(approval_id="a-1")), storage.batches.apply(_pause(approval_id="a-2"))
    )

    assert sorted([first.applied, second.applied]) == [False, True]
    winner = "a-1" if first.applied else "a-2"
    assert [a.approval_id for a in await storage.approvals.for_run("run-1")] == [winner]
    assert [e.details["approvals"] for e in await storage.audit.recent(5)] == [[winner]]


async def test_the_audit_chain_stays_valid_around_batched_and_refused_appends(storage):
    await create_run(storage, "run-1")
    await create_run(storage, "run-2", thread=THREAD + "2")
    await storage.audit.append("U_ANA", "asked", "run-1", {}, now=NOW)
    assert (
        await storage.batches.apply(
            [
                *_pause("run-1"),
                Write(
                    "audit",
                    "append_many",
                    ([("U_BOB", "seen", "a-1", {"n": 1}), ("U_BOB", "seen", "a-1", {"n": 2})],),
                    {"now": NOW},
                ),
            ]
        )
    ).applied
    assert not (await storage.batches.apply(_pause("run-1", approval_id="a-9"))).applied  # paused already
    assert (await storage.batches.apply(_pause("run-2", approval_id="a-2"))).applied
    await storage.audit.append("U_ANA", "asked", "run-2", {}, now=NOW)

    verification = await storage.audit.verify()
    assert verification.ok, verification.problems
    assert [e.id for e in await storage.audit.since(None)] == [1, 2, 3, 4, 5, 6]
    assert [e.action for e in await storage.audit.since(None)] == ["asked", "paused", "seen", "seen", "paused", "asked"]


async def test_a_batch_is_checked_before_anything_is_written(storage):
    await create_run(storage)
    audit_first = [_pause()[3], *_pause()[:3]]
    for writes, problem in [
        (audit_first, "audit appends come last"),
        ([Write("batches", "apply", ([],))], "cannot write to 'batches'"),
        ([Write("nowhere", "write")], "cannot write to 'nowhere'"),
        ([Write("runs", "_get", ("run-1",))], "cannot call runs._get"),
    ]:
        with pytest.raises(ValueError, match=problem):
            await storage.batches.apply(writes)
    await _nothing_of_the_pause(storage)
    assert (await storage.batches.apply([])).applied


async def test_a_decision_batch_claims_the_run_only_with_the_decision_that_completes_the_step(storage):
    await create_run(storage)
    await storage.approvals.create_many(
        [new_approval(approval_id="a-1"), new_approval("run-1", "call_2", approval_id="a-2")]
    )
    assert await storage.runs.transition("run-1", "running", "paused", step=1)

    def decision(approval_id: str, voter: str) -> list[Write]:
        return [
            Write(
                "approvals",
                "decide",
                (approval_id,),
                {"status": "approved", "decided_by": voter, "now": NOW},
                required=True,
            ),
            Write("leases", "claim_paused", ("run-1", "host-a", NOW + LEASE), {"decided": True}),
            Write("audit", "append", (voter, "approved", approval_id, {}), {"now": NOW}),
        ]

    first = await storage.batches.apply(decision("a-1", "U_BOB"))
    assert first.applied and first.results[1] is None  # a-2 still waits: the run stays paused
    assert (await storage.runs.get("run-1")).status == "paused"
    again = await storage.batches.apply(decision("a-1", "U_CAROL"))  # a second click on a-1 changes nothing
    assert (again.applied, again.refused) == (False, 0)
    last = await storage.batches.apply(decision("a-2", "U_CAROL"))
    run = await storage.runs.get("run-1")
    assert last.applied and last.results[1] == run  # the run as the claim wrote it
    assert (run.status, run.owner) == ("resuming", "host-a")
    assert [e.subject for e in await storage.audit.since(None)] == ["a-1", "a-2"]


async def test_a_decision_batch_that_completes_the_step_starts_the_run_and_reads_the_history_it_points_to(storage):
    await create_run(storage)
    history = [ChatMessage.from_user("delete a.txt and b.txt"), ChatMessage.from_assistant("on it")]
    await storage.messages.write_messages(THREAD, history)
    await storage.approvals.create_many(
        [new_approval(approval_id="a-1"), new_approval("run-1", "call_2", approval_id="a-2")]
    )
    assert await storage.runs.transition(
        "run-1", "running", "paused", step=1, snapshot_json={"history_id": THREAD, "up_to": history[-1].id}
    )
    seen: list[tuple] = []

    def history_of_claimed_step(done: tuple) -> tuple[tuple, dict] | None:
        seen.append(done)
        claim, step = done[1], done[2]
        if not claim:
            return None
        return (step.run.chat_history_id,), {"last_k": 10, "up_to": step.snapshot["up_to"]}

    def decision(approval_id: str, voter: str) -> list[Write | Read]:
        return [
            Write(
                "approvals",
                "decide",
                (approval_id,),
                {"status": "approved", "decided_by": voter, "now": NOW},
                required=True,
            ),
            Write(
                "leases", "claim_paused", ("run-1", "host-a", NOW + LEASE), {"decided": True, "step": 1, "start": True}
            ),
            Read("approvals", "step", ("run-1", 1)),
            Read("messages", "retrieve_messages", args_from=history_of_claimed_step),
            Write("audit", "append", (voter, "approved", approval_id, {}), {"now": NOW}),
        ]

    first = await storage.batches.apply(decision("a-1", "U_BOB"))
    assert first.applied and first.results[1] is None and first.results[3] is None  # a-2 waits: nothing read
    assert (await storage.runs.get("run-1")).status == "paused"
    last = await storage.batches.apply(decision("a-2", "U_CAROL"))

    assert last.applied
    _decided, claimed, step, read, _audit_id = last.results
    run = await storage.runs.get("run-1")
    assert claimed == run == step.run and (run.status, run.owner) == ("running", "host-a")  # started with its claim
    assert [m.id for m in read] == [m.id for m in history]
    # Each time, args_from was given exactly the results before it: the decision, the claim and the step.
    assert [len(done) for done in seen] == [3, 3] and seen[1] == last.results[:3]


async def test_a_read_whose_arguments_cannot_be_worked_out_is_skipped_and_the_batch_applies(storage):
    await create_run(storage)

    def malformed(done: tuple) -> tuple[tuple, dict] | None:
        return (done[0]["history_id"],), {}  # the usage write returned None: a TypeError, as bad data would give

    outcome = await storage.batches.apply(
        [
            *_pause()[:3],
            Read("messages", "retrieve_messages", args_from=malformed),
            Read("runs", "get", args_from=lambda done: None),
            Read("runs", "get", ("ignored",), args_from=lambda done: (("run-1",), {})),
            _pause()[3],
        ]
    )

    assert outcome.applied
    assert outcome.results[3:6] == (None, None, await storage.runs.get("run-1"))
    assert (await storage.runs.get("run-1")).status == "paused"  # every write of the batch stands


# --- reads in batches (storage.Read) ------------------------------------------------------------------


async def test_a_read_in_a_batch_sees_the_writes_before_it_and_not_those_after_and_its_result_is_in_place(storage):
    message = ChatMessage.from_user("delete a.txt").to_dict()
    outcome = await storage.batches.apply(
        [
            Read("inbox", "waiting", (THREAD,)),
            Write("inbox", "enqueue", (ADDRESS, "U_ANA", message), {"now": NOW}, required=True),
            Read("inbox", "waiting", (THREAD,)),
            Write("inbox", "start_next", (THREAD, "run-1", "host-a", NOW + LEASE), {"now": NOW}),
            Read("messages", "retrieve_messages", (THREAD,), {"last_k": 5}),
            Read("runs", "get", ("run-1",)),
        ]
    )

    assert outcome.applied
    before, item_id, waiting, (run, item), history, read_run = outcome.results
    assert before == [] and [i.id for i in waiting] == [item_id] == [item.id]
    assert [m.text for m in history] == ["delete a.txt"]  # start_next stored the message: the read sees it
    assert (read_run.run_id, read_run.status) == (run.run_id, "running")
    assert await storage.inbox.waiting(THREAD) == []


async def test_a_refused_batch_returns_no_read_results_and_writes_nothing(storage):
    await create_run(storage)
    assert await storage.runs.transition("run-1", "running", "failed", error="stopped elsewhere")

    outcome = await storage.batches.apply([Read("runs", "get", ("run-1",)), *_pause()])

    assert (outcome.applied, outcome.refused, outcome.results) == (False, 3, ())
    assert await storage.approvals.for_run("run-1") == []


async def test_a_read_batch_makes_every_read_in_one_call_and_returns_each_result_in_order(storage):
    await create_run(storage)
    await storage.access.allow("slack:T1", "U_ANA", updated_by="U_ADMIN", now=NOW)
    run = await storage.runs.get("run-1")

    latest, rules, waiting = await storage.batches.read(
        [
            Read("runs", "latest_for_thread", (run.chat_history_id,)),
            Read("access", "rules", (["slack:T1:C1", "slack:T1"],)),
            Read("inbox", "waiting", (run.chat_history_id,)),
        ]
    )

    assert latest == await storage.runs.latest_for_thread(run.chat_history_id)
    assert [(r.scope, r.principal) for r in rules] == [("slack:T1", "U_ANA")]
    assert waiting == []
    assert await storage.batches.read([]) == ()


async def test_a_read_batch_takes_only_reads_of_known_stores(storage):
    for reads, problem in [
        ([Write("runs", "get", ("run-1",))], "takes only reads"),
        ([Read("batches", "read", ([],))], "cannot read from 'batches'"),
        ([Read("runs", "_get", ("run-1",))], "cannot call runs._get"),
        ([Read("runs", "get", args_from=lambda done: (("run-1",), {}))], "not args_from"),
    ]:
        with pytest.raises(ValueError, match=problem):
            await storage.batches.read(reads)


async def test_a_read_batch_raises_the_error_of_a_read(storage):
    with pytest.raises(NotFound):
        await storage.batches.read([Read("runs", "latest_for_thread", (THREAD,)), Read("runs", "get", ("nope",))])


async def test_a_dependent_read_that_finds_a_corrupt_record_is_skipped_and_the_batch_applies(storage, backend):
    # A decision's batch reads the history its step's snapshot points to: a stored message that no longer decodes
    # must fail the run's resume (which reads again), never the decision itself.
    await create_run(storage)
    await storage.messages.write_messages(THREAD, [ChatMessage.from_user("delete a.txt")])
    await backend.execute("UPDATE messages SET data = '[]'")
    with pytest.raises(CorruptRecord):
        await storage.messages.retrieve_messages(THREAD)

    outcome = await storage.batches.apply(
        [
            *_pause()[:3],
            Read("messages", "retrieve_messages", args_from=lambda done: ((THREAD,), {"last_k": 5})),
            _pause()[3],
        ]
    )
    assert outcome.applied and outcome.results[3] is None
    assert (await storage.runs.get("run-1")).status == "paused"

    with pytest.raises(CorruptRecord):  # a read given its arguments is no different from a read alone
        await storage.batches.apply([Read("messages", "retrieve_messages", (THREAD,), {"last_k": 5})])


async def test_a_write_can_take_its_arguments_from_the_writes_before_it_or_be_skipped(storage):
    # An expiry sweep's batch: the approvals one write expired, and their audit entries from its result.
    await create_run(storage)
    await storage.approvals.create_many(
        [new_approval("run-1", "call_1", approval_id="a-1", expires_at=NOW + timedelta(seconds=1))]
    )

    def audited(done: tuple) -> tuple[tuple, dict] | None:
        return (([("countersign", "expired", r.approval_id, {}) for r in done[0]],), {"now": NOW}) if done[0] else None

    expiring = [
        Write("approvals", "expire_due", (), {"now": NOW + LEASE}),
        Write("audit", "append_many", args_from=audited),
    ]
    first = await storage.batches.apply(expiring)
    assert first.applied and [r.approval_id for r in first.results[0]] == ["a-1"] and first.results[1] == 1
    assert [e.subject for e in await storage.audit.recent(5, subject="a-1")] == ["a-1"]

    again = await storage.batches.apply(expiring)  # nothing due: the audit write is skipped
    assert again.applied and again.results == ([], None)
    refused = await storage.batches.apply(
        [
            Write("runs", "record_usage", ("run-1", TokenUsage(21, 7, 28))),
            Write("runs", "get", args_from=lambda done: None, required=True),
        ]
    )
    assert (refused.applied, refused.refused) == (False, 1), "a required write skipped refuses the batch"
    assert (await storage.runs.usage(platform="slack", workspace="T1", since=NOW - LEASE)).total_tokens == 0

    def broken(done: tuple) -> tuple[tuple, dict] | None:
        raise KeyError("history_id")

    with pytest.raises(KeyError):  # a write's arguments are never guessed: the batch fails, nothing is written
        await storage.batches.apply(
            [
                Write("runs", "record_usage", ("run-1", TokenUsage(21, 7, 28))),
                Write("audit", "append", args_from=broken),
            ]
        )
    assert (await storage.runs.usage(platform="slack", workspace="T1", since=NOW - LEASE)).total_tokens == 0
