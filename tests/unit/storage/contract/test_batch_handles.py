"""Typed batches on both backends: each write and read is named by its handle, and read back through it.

The same pause, decision and expiry steps as :mod:`tests.unit.storage.contract.test_batches`, built with
:class:`storage.Batch`: results come by handle, so a write added to a batch moves no other handle's result.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.messages import ChatMessage
from storage import Batch, CorruptRecord, Handle, RunFence, ThreadAddress, TokenUsage, call, stores
from tests.fakes.storage_contract import create_run
from tests.fakes.storage_data import NOW, THREAD, new_approval

ADDRESS = ThreadAddress(THREAD, "slack", "T1", "C1", THREAD.rsplit(":", 1)[-1])
LEASE = timedelta(seconds=30)


class Pause:
    """The writes of a pause as the engine makes them, each with its handle."""

    def __init__(self, run_id: str = "run-1", *, approval_id: str = "a-1", fence: RunFence | None = None) -> None:
        self.batch = Batch()
        self.usage = self.batch.write(stores.runs.record_usage, run_id, TokenUsage(21, 7, 28))
        self.created = self.batch.write(
            stores.approvals.create_many, [new_approval(run_id, f"call_{approval_id}", approval_id=approval_id)]
        )
        self.moved = self.batch.require(
            stores.runs.transition, run_id, "running", "paused", fence=fence, step=1, snapshot_json={"step": 1}
        )

    def audited(self, run_id: str = "run-1") -> Handle[int]:
        return self.batch.write(stores.audit.append, "U_ANA", "paused", run_id, {"approvals": ["a-1"]}, now=NOW)


async def test_each_result_is_read_through_the_handle_its_write_returned(storage):
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


async def test_one_more_write_in_a_batch_shifts_no_other_handle_s_result(storage):
    await create_run(storage)
    await create_run(storage, "run-2", thread=THREAD + "9")
    plain, longer = Pause("run-1"), Pause("run-2", approval_id="a-2")
    # The longer batch has one more write before the compare-and-set and one more read after it.
    extra = longer.batch.write(stores.events.first_time, "slack:Ev1", now=NOW)
    read = longer.batch.read(stores.runs.get, "run-2")

    first, second = await storage.batches.apply(plain.batch), await storage.batches.apply(longer.batch)

    assert first.applied and second.applied
    assert (first[plain.moved], second[longer.moved], second[extra]) == (True, True, True)
    assert [a.approval_id for a in second[longer.created]] == ["a-2"]
    assert second[read] == await storage.runs.get("run-2")
    assert second[read].status == "paused"


async def test_a_required_write_that_answers_no_refuses_the_batch_and_names_its_handle(storage):
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
    assert await storage.audit.recent(5, subject="run-1") == []


async def test_a_read_in_a_batch_sees_the_writes_before_it(storage):
    message = ChatMessage.from_user("delete a.txt").to_dict()
    batch = Batch()
    before = batch.read(stores.inbox.waiting, THREAD)
    item_id = batch.require(stores.inbox.enqueue, ADDRESS, "U_ANA", message, now=NOW)
    waiting = batch.read(stores.inbox.waiting, THREAD)
    started = batch.write(stores.inbox.start_next, THREAD, "run-1", "host-a", NOW + LEASE, now=NOW)
    history = batch.read(stores.messages.retrieve_messages, THREAD, last_k=5)

    outcome = await storage.batches.apply(batch)

    assert outcome.applied and outcome[before] == []
    assert [item.id for item in outcome[waiting]] == [outcome[item_id]]
    run_and_item = outcome[started]
    assert run_and_item is not None and run_and_item[1].id == outcome[item_id]
    assert [m.text for m in outcome[history]] == ["delete a.txt"]  # start_next stored it: the read sees it
    assert await storage.inbox.waiting(THREAD) == []


async def test_a_write_takes_its_arguments_from_an_earlier_handle_or_is_skipped(storage):
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
    assert [r.approval_id for r in first[expired]] == ["a-1"] and first[audited] == 1
    batch, expired, audited = expiring()
    again = await storage.batches.apply(batch)  # nothing due: the audit write is skipped
    assert again.applied and (again[expired], again[audited]) == ([], None)

    refusing = Batch()
    refusing.write(stores.runs.record_usage, "run-1", TokenUsage(21, 7, 28))
    skipped = refusing.write_from(stores.runs.request_stop, lambda done: None, required=True)
    refused = await storage.batches.apply(refusing)
    assert refused.refused_by is skipped, "a required write skipped refuses the batch"
    assert (await storage.runs.usage(platform="slack", workspace="T1", since=NOW - LEASE)).total_tokens == 0


async def test_a_derived_write_whose_arguments_fail_fails_the_batch(storage):
    await create_run(storage)
    batch = Batch()
    batch.write(stores.runs.record_usage, "run-1", TokenUsage(21, 7, 28))
    later = Batch().read(stores.runs.get, "run-1")  # not of this batch: asking for its result is a bug
    batch.write_from(stores.audit.append, lambda done: call(stores.audit.append, done[later].requester, "x", "y", {}))

    with pytest.raises(ValueError, match="another batch"):  # a write's arguments are never guessed
        await storage.batches.apply(batch)
    assert (await storage.runs.usage(platform="slack", workspace="T1", since=NOW - LEASE)).total_tokens == 0


async def test_a_decision_reads_the_history_its_claimed_step_points_to_through_handles(storage):
    await create_run(storage)
    history = [ChatMessage.from_user("delete a.txt and b.txt"), ChatMessage.from_assistant("on it")]
    await storage.messages.write_messages(THREAD, history)
    await storage.approvals.create_many(
        [new_approval(approval_id="a-1"), new_approval("run-1", "call_2", approval_id="a-2")]
    )
    assert await storage.runs.transition(
        "run-1", "running", "paused", step=1, snapshot_json={"history_id": THREAD, "up_to": history[-1].id}
    )

    def decision(approval_id: str, voter: str) -> tuple[Batch, Handle, Handle]:
        batch = Batch()
        batch.require(stores.approvals.decide, approval_id, status="approved", decided_by=voter, now=NOW)
        claim = batch.write(
            stores.leases.claim_paused, "run-1", "host-a", NOW + LEASE, decided=True, step=1, start=True
        )
        step = batch.read(stores.approvals.step, "run-1", 1)
        read = batch.read_from(
            stores.messages.retrieve_messages,
            lambda done: (
                call(
                    stores.messages.retrieve_messages,
                    done[step].run.chat_history_id,
                    last_k=10,
                    up_to=(done[step].snapshot or {})["up_to"],
                )
                if done[claim]
                else None
            ),
        )
        batch.write(stores.audit.append, voter, "approved", approval_id, {}, now=NOW)
        return batch, claim, read

    batch, claim, read = decision("a-1", "U_BOB")
    first = await storage.batches.apply(batch)
    assert first.applied and first[claim] is None and first[read] is None  # a-2 still waits: nothing read
    batch, claim, read = decision("a-2", "U_CAROL")
    last = await storage.batches.apply(batch)

    assert last.applied and last[claim] == await storage.runs.get("run-1")
    history_read = last[read]
    assert history_read is not None and [m.id for m in history_read] == [m.id for m in history]


async def test_a_derived_read_that_finds_a_corrupt_record_is_skipped_and_the_batch_applies(storage, backend):
    await create_run(storage)
    await storage.messages.write_messages(THREAD, [ChatMessage.from_user("delete a.txt")])
    await backend.execute("UPDATE messages SET data = '[]'")
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


async def test_a_read_batch_answers_each_read_by_its_handle(storage):
    await create_run(storage)
    await storage.access.allow("slack:T1", "U_ANA", updated_by="U_ADMIN", now=NOW)
    batch = Batch()
    latest = batch.read(stores.runs.latest_for_thread, THREAD)
    rules = batch.read(stores.access.rules, ["slack:T1:C1", "slack:T1"])

    outcome = await storage.batches.read(batch)

    assert outcome[latest] == await storage.runs.latest_for_thread(THREAD)
    assert [(r.scope, r.principal) for r in outcome[rules]] == [("slack:T1", "U_ANA")]


async def test_a_handle_reads_only_the_outcome_of_its_own_batch(storage):
    await create_run(storage)
    one, other = Batch(), Batch()
    mine = one.read(stores.runs.get, "run-1")
    other.read(stores.runs.get, "run-1")

    outcome = await storage.batches.apply(other)

    with pytest.raises(ValueError, match="another batch"):
        outcome[mine]


def test_a_batch_is_checked_as_it_is_built():
    batch = Batch()
    batch.write(stores.audit.append, "U_ANA", "paused", "run-1", {})
    with pytest.raises(ValueError, match="audit appends come last"):
        batch.write(stores.runs.record_usage, "run-1", TokenUsage(1, 1, 2))
    with pytest.raises(TypeError, match="through storage.batch.stores"):
        Batch().write(print, "not a store method")
    assert len(batch) == 1 and batch.handles[0].index == 0
