"""Write batches on both backends: a step's writes in one call and one transaction, all or nothing.

A pause is the model case: the run's usage, its approvals, the run's move to ``paused`` (a compare-and-set
under the owner's fence) and the audit entry. Either every write lands, or, when the compare-and-set loses
or any write fails, none does, and the audit chain stays intact either way. Each write and read of a
:class:`storage.Batch` is named by the handle adding it returned, and its result is read through that handle.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest

from bot.messages import ChatMessage
from storage import (
    Batch,
    CorruptRecord,
    Handle,
    NotFound,
    Results,
    RunFence,
    StorageError,
    StoreMethod,
    ThreadAddress,
    TokenUsage,
    call,
    stores,
)
from tests.fakes.storage_contract import create_run
from tests.fakes.storage_data import NOW, THREAD, new_approval

ADDRESS = ThreadAddress(THREAD, "slack", "T1", "C1", THREAD.rsplit(":", 1)[-1])
LEASE = timedelta(seconds=30)


class Pause:
    """The writes of a pause as the engine makes them, each with its handle; ``audited`` adds the audit entry,
    which comes last, so a test may add reads of its own before it."""

    def __init__(
        self,
        run_id: str = "run-1",
        *,
        approval_id: str = "a-1",
        fence: RunFence | None = None,
        batch: Batch | None = None,
    ) -> None:
        self.run_id, self.approval_id = run_id, approval_id
        self.batch = Batch() if batch is None else batch
        self.usage = self.batch.write(stores.runs.record_usage, run_id, TokenUsage(21, 7, 28))
        self.created = self.batch.write(
            stores.approvals.create_many, [new_approval(run_id, f"call_{approval_id}", approval_id=approval_id)]
        )
        self.moved = self.batch.require(
            stores.runs.transition, run_id, "running", "paused", fence=fence, step=1, snapshot_json={"step": 1}
        )

    def audited(self) -> Handle[int]:
        return self.batch.write(
            stores.audit.append, "U_ANA", "paused", self.run_id, {"approvals": [self.approval_id]}, now=NOW
        )


def _pause(run_id: str = "run-1", *, approval_id: str = "a-1", fence: RunFence | None = None) -> Batch:
    """The whole pause, audit entry included."""
    pause = Pause(run_id, approval_id=approval_id, fence=fence)
    pause.audited()
    return pause.batch


async def _nothing_of_the_pause(storage, run_id: str = "run-1") -> None:
    run = await storage.runs.get(run_id)
    assert run.status == "running" and run.step == 0 and not run.has_snapshot
    assert await storage.approvals.for_run(run_id) == []
    assert (await storage.runs.usage(platform="slack", workspace="T1", since=NOW - LEASE)).total_tokens == 0
    assert await storage.audit.recent(5, subject=run_id) == []


async def test_a_batch_applies_every_write_in_order_and_each_result_is_read_through_its_handle(storage):
    await create_run(storage)
    pause = Pause()
    audit_id = pause.audited()

    outcome = await storage.batches.apply(pause.batch)

    assert outcome.applied and outcome.refused_by is None
    assert outcome[pause.usage] is None
    assert [a.approval_id for a in outcome[pause.created]] == ["a-1"]
    assert (outcome[pause.moved], outcome[audit_id]) == (True, 1)
    run = await storage.runs.get("run-1")
    assert (run.status, run.step, await storage.runs.snapshot("run-1")) == ("paused", 1, {"step": 1})
    assert [a.status for a in await storage.approvals.for_run("run-1")] == ["pending"]
    assert (await storage.runs.usage(platform="slack", workspace="T1", since=NOW - LEASE)).total_tokens == 28
    assert [e.action for e in await storage.audit.recent(5)] == ["paused"]


async def test_a_lost_compare_and_set_rolls_back_every_write_and_names_its_handle(storage):
    await create_run(storage)
    assert await storage.runs.transition("run-1", "running", "failed", error="stopped elsewhere")
    pause = Pause()
    pause.audited()

    outcome = await storage.batches.apply(pause.batch)

    assert not outcome.applied and outcome.refused_by is pause.moved
    assert outcome.get(pause.created) is None
    with pytest.raises(LookupError, match="refused"):
        outcome[pause.created]
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
    pause = Pause(fence=stale)
    pause.audited()

    outcome = await storage.batches.apply(pause.batch)

    assert not outcome.applied and outcome.refused_by is pause.moved
    taken = await storage.runs.get("run-1")
    assert (taken.status, taken.owner, taken.step) == ("running", "host-b", 0)
    assert await storage.approvals.for_run("run-1") == []
    assert await storage.audit.recent(5) == []


async def test_a_fence_that_held_earlier_in_a_batch_is_checked_again_once_the_batch_has_ended_the_run(storage):
    # PostgreSQL checks a fence once per batch (the row stays locked), until the batch itself moves the run.
    await storage.inbox.enqueue(ADDRESS, "U_ANA", ChatMessage.from_user("delete a.txt").to_dict(), now=NOW)
    run, _item = await storage.inbox.start_next(THREAD, "run-1", "host-a", NOW + LEASE, now=NOW)
    fence = RunFence.of(run)
    batch = Batch()
    batch.write(stores.messages.write_messages, THREAD, [ChatMessage.from_assistant("done")], fence=fence)
    batch.require(stores.runs.transition, "run-1", "running", "finished", fence=fence)
    late = batch.require(stores.outbox.add, "answer:run-1", ADDRESS, "done", fence=fence, now=NOW)

    outcome = await storage.batches.apply(batch)

    assert not outcome.applied and outcome.refused_by is late
    assert (await storage.runs.get("run-1")).status == "running"
    assert [m.text for m in await storage.messages.retrieve_messages(THREAD)] == ["delete a.txt"]


async def test_a_write_that_raises_rolls_back_the_batch_and_the_error_reaches_the_caller(storage):
    await create_run(storage)
    batch = Batch()
    batch.write(stores.runs.record_usage, "run-1", TokenUsage(21, 7, 28))
    batch.write(stores.approvals.create_many, [new_approval("run-1", "call_a-1", approval_id="a-1")])
    batch.write(stores.runs.record_usage, "run-404", TokenUsage(1, 1, 2))

    with pytest.raises(NotFound, match="run-404"):
        await storage.batches.apply(batch)

    await _nothing_of_the_pause(storage)
    # The storage is usable afterwards: the same pause applies cleanly.
    assert (await storage.batches.apply(_pause())).applied


async def test_a_connection_lost_in_the_middle_of_a_batch_writes_nothing_and_the_storage_goes_on(storage, backend):
    await create_run(storage)
    batch = Batch()
    batch.write(stores.runs.record_usage, "run-1", TokenUsage(21, 7, 28))
    batch.write(stores.approvals.create_many, [new_approval("run-1", "call_a-1", approval_id="a-1")])

    def severed(done: Results) -> Any:
        backend.sever()  # after two writes were made, before the third: the connection is gone
        return call(stores.runs.transition, "run-1", "running", "paused", step=1, snapshot_json={"step": 1})

    batch.write_from(stores.runs.transition, severed, required=True)
    batch.write(stores.audit.append, "U_ANA", "paused", "run-1", {"approvals": ["a-1"]}, now=NOW)

    with pytest.raises(StorageError):
        await storage.batches.apply(batch)

    await _nothing_of_the_pause(await backend.open_another())
    await _nothing_of_the_pause(storage)
    assert (await storage.batches.apply(_pause())).applied  # a fresh connection: the same pause applies


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
    batched = _pause("run-1")
    batched.write(
        stores.audit.append_many, [("U_BOB", "seen", "a-1", {"n": 1}), ("U_BOB", "seen", "a-1", {"n": 2})], now=NOW
    )
    assert (await storage.batches.apply(batched)).applied
    assert not (await storage.batches.apply(_pause("run-1", approval_id="a-9"))).applied  # paused already
    assert (await storage.batches.apply(_pause("run-2", approval_id="a-2"))).applied
    await storage.audit.append("U_ANA", "asked", "run-2", {}, now=NOW)

    verification = await storage.audit.verify()
    assert verification.ok, verification.problems
    assert [e.id for e in await storage.audit.since(None)] == [1, 2, 3, 4, 5, 6]
    assert [e.action for e in await storage.audit.since(None)] == ["asked", "paused", "seen", "seen", "paused", "asked"]


def test_a_batch_is_checked_as_it_is_built():
    batch = Batch()
    batch.write(stores.audit.append, "U_ANA", "paused", "run-1", {})
    with pytest.raises(ValueError, match="audit appends come last"):
        batch.write(stores.runs.record_usage, "run-1", TokenUsage(1, 1, 2))
    with pytest.raises(TypeError, match="through storage.batch.stores"):
        Batch().write(print, "not a store method")
    assert len(batch.handles) == 1 and batch.handles[0].index == 0
    # ``stores`` names only the stores a batch can call, and only their public methods.
    assert not hasattr(stores, "batches") and not hasattr(stores.runs, "_get")


async def test_a_batch_naming_no_store_s_method_is_refused_before_anything_is_written(storage):
    # Only a hand-made StoreMethod can name one (``stores`` has none): the backend refuses the batch, writing nothing.
    await create_run(storage)
    for method, problem in [
        (StoreMethod("batches", "apply"), "cannot write to 'batches'"),
        (StoreMethod("nowhere", "write"), "cannot write to 'nowhere'"),
        (StoreMethod("runs", "_get"), "cannot call runs._get"),
    ]:
        pause = Pause()
        pause.batch.write(method, "run-1")  # type: ignore[arg-type]  # what the type checker would refuse
        with pytest.raises(ValueError, match=problem):
            await storage.batches.apply(pause.batch)
    await _nothing_of_the_pause(storage)
    assert (await storage.batches.apply(Batch())).applied


async def test_one_more_write_in_a_batch_shifts_no_other_handle_s_result(storage):
    await create_run(storage)
    await create_run(storage, "run-2", thread=THREAD + "9")
    plain, longer = Pause("run-1"), Pause("run-2", approval_id="a-2")
    # The longer batch has one more write after the compare-and-set and one more read after it.
    extra = longer.batch.write(stores.events.first_time, "slack:Ev1", now=NOW)
    read = longer.batch.read(stores.runs.get, "run-2")

    first, second = await storage.batches.apply(plain.batch), await storage.batches.apply(longer.batch)

    assert first.applied and second.applied
    assert (first[plain.moved], second[longer.moved], second[extra]) == (True, True, True)
    assert [a.approval_id for a in second[longer.created]] == ["a-2"]
    assert second[read] == await storage.runs.get("run-2")
    assert second[read].status == "paused"


async def test_a_handle_reads_only_the_outcome_of_its_own_batch(storage):
    await create_run(storage)
    one, other = Batch(), Batch()
    mine = one.read(stores.runs.get, "run-1")
    other.read(stores.runs.get, "run-1")

    outcome = await storage.batches.apply(other)

    with pytest.raises(ValueError, match="another batch"):
        outcome[mine]


async def test_a_decision_batch_claims_the_run_only_with_the_decision_that_completes_the_step(storage):
    await create_run(storage)
    await storage.approvals.create_many(
        [new_approval(approval_id="a-1"), new_approval("run-1", "call_2", approval_id="a-2")]
    )
    assert await storage.runs.transition("run-1", "running", "paused", step=1)

    def decision(approval_id: str, voter: str) -> tuple[Batch, Handle[bool], Handle[Any]]:
        batch = Batch()
        decided = batch.require(stores.approvals.decide, approval_id, status="approved", decided_by=voter, now=NOW)
        claim = batch.write(stores.leases.claim_paused, "run-1", "host-a", NOW + LEASE, decided=True)
        batch.write(stores.audit.append, voter, "approved", approval_id, {}, now=NOW)
        return batch, decided, claim

    batch, _decided, claim = decision("a-1", "U_BOB")
    first = await storage.batches.apply(batch)
    assert first.applied and first[claim] is None  # a-2 still waits: the run stays paused
    assert (await storage.runs.get("run-1")).status == "paused"
    batch, decided, claim = decision("a-1", "U_CAROL")  # a second click on a-1 changes nothing
    again = await storage.batches.apply(batch)
    assert not again.applied and again.refused_by is decided
    batch, _decided, claim = decision("a-2", "U_CAROL")
    last = await storage.batches.apply(batch)
    run = await storage.runs.get("run-1")
    assert last.applied and last[claim] == run  # the run as the claim wrote it
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

    def decision(approval_id: str, voter: str) -> tuple[Batch, list[Handle[Any]]]:
        batch = Batch()
        decided = batch.require(stores.approvals.decide, approval_id, status="approved", decided_by=voter, now=NOW)
        claim = batch.write(
            stores.leases.claim_paused, "run-1", "host-a", NOW + LEASE, decided=True, step=1, start=True
        )
        step = batch.read(stores.approvals.step, "run-1", 1)
        audit_id: list[Handle[int]] = []

        def history_of_claimed_step(done: Results):
            seen.append((done[decided], done[claim], done[step], _missing(done, audit_id[0])))
            if not done[claim]:
                return None
            snapshot = done[step].snapshot or {}
            return call(
                stores.messages.retrieve_messages, done[step].run.chat_history_id, last_k=10, up_to=snapshot["up_to"]
            )

        read = batch.read_from(stores.messages.retrieve_messages, history_of_claimed_step)
        audit_id.append(batch.write(stores.audit.append, voter, "approved", approval_id, {}, now=NOW))
        return batch, [decided, claim, step, read]

    batch, (_decided, claim, _step, read) = decision("a-1", "U_BOB")
    first = await storage.batches.apply(batch)
    assert first.applied and first[claim] is None and first[read] is None  # a-2 waits: nothing read
    assert (await storage.runs.get("run-1")).status == "paused"
    batch, (decided, claim, step, read) = decision("a-2", "U_CAROL")
    last = await storage.batches.apply(batch)

    assert last.applied
    run = await storage.runs.get("run-1")
    assert last[claim] == run == last[step].run and (run.status, run.owner) == ("running", "host-a")  # with its claim
    assert [m.id for m in last[read]] == [m.id for m in history]
    # Each time, the derived read was given exactly the results before it: the decision, the claim and the step.
    assert len(seen) == 2 and seen[1] == (last[decided], last[claim], last[step], True)
    assert seen[0][3]


def _missing(done: Results, handle: Handle[Any]) -> bool:
    """Whether ``done`` has no result for ``handle`` yet (it comes later in the batch)."""
    try:
        done[handle]
    except LookupError:
        return True
    return False


async def test_a_read_whose_arguments_cannot_be_worked_out_is_skipped_and_the_batch_applies(storage):
    await create_run(storage)
    pause = Pause()

    def malformed(done: Results):
        # The usage write returned None: a TypeError, as bad data would give.
        return call(stores.messages.retrieve_messages, done[pause.usage]["history_id"])  # type: ignore[index]

    unread = pause.batch.read_from(stores.messages.retrieve_messages, malformed)
    skipped = pause.batch.read_from(stores.runs.get, lambda done: None)
    derived = pause.batch.read_from(stores.runs.get, lambda done: call(stores.runs.get, "run-1"))
    pause.audited()

    outcome = await storage.batches.apply(pause.batch)

    assert outcome.applied
    assert (outcome[unread], outcome[skipped], outcome[derived]) == (None, None, await storage.runs.get("run-1"))
    assert (await storage.runs.get("run-1")).status == "paused"  # every write of the batch stands


# --- reads in batches ------------------------------------------------------------------------------------


async def test_a_read_in_a_batch_sees_the_writes_before_it_and_not_those_after_and_its_result_is_its_own(storage):
    message = ChatMessage.from_user("delete a.txt").to_dict()
    batch = Batch()
    before = batch.read(stores.inbox.waiting, THREAD)
    item_id = batch.require(stores.inbox.enqueue, ADDRESS, "U_ANA", message, now=NOW)
    waiting = batch.read(stores.inbox.waiting, THREAD)
    started = batch.write(stores.inbox.start_next, THREAD, "run-1", "host-a", NOW + LEASE, now=NOW)
    history = batch.read(stores.messages.retrieve_messages, THREAD, last_k=5)
    read_run = batch.read(stores.runs.get, "run-1")

    outcome = await storage.batches.apply(batch)

    assert outcome.applied
    run_and_item = outcome[started]
    assert run_and_item is not None
    run, item = run_and_item
    assert outcome[before] == [] and [i.id for i in outcome[waiting]] == [outcome[item_id]] == [item.id]
    assert [m.text for m in outcome[history]] == ["delete a.txt"]  # start_next stored the message: the read sees it
    assert (outcome[read_run].run_id, outcome[read_run].status) == (run.run_id, "running")
    assert await storage.inbox.waiting(THREAD) == []


async def test_a_refused_batch_returns_no_read_results_and_writes_nothing(storage):
    await create_run(storage)
    assert await storage.runs.transition("run-1", "running", "failed", error="stopped elsewhere")
    batch = Batch()
    read = batch.read(stores.runs.get, "run-1")
    pause = Pause(batch=batch)
    pause.audited()

    outcome = await storage.batches.apply(batch)

    assert not outcome.applied and outcome.refused_by is pause.moved and outcome.get(read) is None
    assert await storage.approvals.for_run("run-1") == []


async def test_a_read_batch_makes_every_read_in_one_call_and_answers_each_by_its_handle(storage):
    await create_run(storage)
    await storage.access.allow("slack:T1", "U_ANA", updated_by="U_ADMIN", now=NOW)
    run = await storage.runs.get("run-1")
    batch = Batch()
    latest = batch.read(stores.runs.latest_for_thread, run.chat_history_id)
    rules = batch.read(stores.access.rules, ["slack:T1:C1", "slack:T1"])
    waiting = batch.read(stores.inbox.waiting, run.chat_history_id)

    outcome = await storage.batches.read(batch)

    assert outcome[latest] == await storage.runs.latest_for_thread(run.chat_history_id)
    assert [(r.scope, r.principal) for r in outcome[rules]] == [("slack:T1", "U_ANA")]
    assert outcome[waiting] == []
    assert (await storage.batches.read(Batch())).applied


async def test_a_read_batch_takes_only_reads_of_known_stores(storage):
    def with_a_write(batch: Batch) -> None:
        batch.write(stores.runs.get, "run-1")

    def with_a_derived_read(batch: Batch) -> None:
        batch.read_from(stores.runs.get, lambda done: call(stores.runs.get, "run-1"))

    def reading(method: StoreMethod) -> Any:
        return lambda batch: batch.read(method, "run-1")

    for build, problem in [
        (with_a_write, "takes only reads"),
        (reading(StoreMethod("batches", "read")), "cannot read from 'batches'"),
        (reading(StoreMethod("runs", "_get")), "cannot call runs._get"),
        (with_a_derived_read, "not args_from"),
    ]:
        batch = Batch()
        build(batch)
        with pytest.raises(ValueError, match=problem):
            await storage.batches.read(batch)


async def test_a_read_batch_raises_the_error_of_a_read(storage):
    batch = Batch()
    batch.read(stores.runs.latest_for_thread, THREAD)
    batch.read(stores.runs.get, "nope")
    with pytest.raises(NotFound):
        await storage.batches.read(batch)


async def test_a_dependent_read_that_finds_a_corrupt_record_is_skipped_and_the_batch_applies(storage, backend):
    # A decision's batch reads the history its step's snapshot points to: a stored message that no longer decodes
    # must fail the run's resume (which reads again), never the decision itself.
    await create_run(storage)
    await storage.messages.write_messages(THREAD, [ChatMessage.from_user("delete a.txt")])
    await backend.execute("UPDATE messages SET data = '[]'")
    with pytest.raises(CorruptRecord):
        await storage.messages.retrieve_messages(THREAD)
    pause = Pause()
    history = pause.batch.read_from(
        stores.messages.retrieve_messages, lambda done: call(stores.messages.retrieve_messages, THREAD, last_k=5)
    )
    pause.audited()

    outcome = await storage.batches.apply(pause.batch)

    assert outcome.applied and outcome[history] is None and outcome[pause.moved]
    assert (await storage.runs.get("run-1")).status == "paused"
    plain = Batch()
    plain.read(stores.messages.retrieve_messages, THREAD, last_k=5)
    with pytest.raises(CorruptRecord):  # a read given its arguments is no different from a read alone
        await storage.batches.apply(plain)


async def test_a_write_can_take_its_arguments_from_the_writes_before_it_or_be_skipped(storage):
    # An expiry sweep's batch: the approvals one write expired, and their audit entries from its result.
    await create_run(storage)
    await storage.approvals.create_many(
        [new_approval("run-1", "call_1", approval_id="a-1", expires_at=NOW + timedelta(seconds=1))]
    )

    def expiring() -> tuple[Batch, Handle, Handle]:
        batch = Batch()
        expired = batch.write(stores.approvals.expire_due, now=NOW + LEASE)
        audited = batch.write_from(
            stores.audit.append_many,
            lambda done: (
                call(
                    stores.audit.append_many,
                    [("countersign", "expired", r.approval_id, {}) for r in done[expired]],
                    now=NOW,
                )
                if done[expired]
                else None
            ),
        )
        return batch, expired, audited

    batch, expired, audited = expiring()
    first = await storage.batches.apply(batch)
    assert first.applied and [r.approval_id for r in first[expired]] == ["a-1"] and first[audited] == 1
    assert [e.subject for e in await storage.audit.recent(5, subject="a-1")] == ["a-1"]
    batch, expired, audited = expiring()
    again = await storage.batches.apply(batch)  # nothing due: the audit write is skipped
    assert again.applied and (again[expired], again[audited]) == ([], None)

    refusing = Batch()
    refusing.write(stores.runs.record_usage, "run-1", TokenUsage(21, 7, 28))
    skipped = refusing.write_from(stores.runs.request_stop, lambda done: None, required=True)
    refused = await storage.batches.apply(refusing)
    assert not refused.applied and refused.refused_by is skipped, "a required write skipped refuses the batch"
    assert (await storage.runs.usage(platform="slack", workspace="T1", since=NOW - LEASE)).total_tokens == 0


async def test_a_derived_write_whose_arguments_fail_fails_the_batch(storage):
    await create_run(storage)

    def broken(done: Results):
        raise KeyError("history_id")

    later = Batch().read(stores.runs.get, "run-1")  # not of the batch below: asking for its result is a bug
    for derive, error in [
        (broken, KeyError),
        (lambda done: call(stores.audit.append, done[later].requester, "x", "y", {}), ValueError),
    ]:
        batch = Batch()
        batch.write(stores.runs.record_usage, "run-1", TokenUsage(21, 7, 28))
        batch.write_from(stores.audit.append, derive)
        with pytest.raises(error):  # a write's arguments are never guessed: the batch fails, nothing is written
            await storage.batches.apply(batch)
    assert (await storage.runs.usage(platform="slack", workspace="T1", since=NOW - LEASE)).total_tokens == 0
