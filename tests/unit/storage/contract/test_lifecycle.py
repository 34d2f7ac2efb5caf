"""The run lifecycle on both backends: one active run per thread, leases, the inbox, the outbox, batch expiry.

The concurrency cases race a second storage opened on the same database (another process, or replica)
against the first: on PostgreSQL each call holds its own pooled connection, so the conditional
statements really race inside the server.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from bot.messages import ChatMessage
from storage import ActiveRunExists, AlreadyExists, RunFence, ThreadAddress
from tests.fakes.storage_contract import create_run
from tests.fakes.storage_data import NOW, THREAD, new_approval

ADDRESS = ThreadAddress(THREAD, "slack", "T1", "C1", THREAD.rsplit(":", 1)[-1])
OTHER_THREAD = "slack:T1:C9:1700000000.000200"
OTHER_ADDRESS = ThreadAddress(OTHER_THREAD, "slack", "T1", "C9", OTHER_THREAD.rsplit(":", 1)[-1])
LEASE = timedelta(seconds=30)
CONTENDERS = 8


def user(text: str) -> dict:
    return ChatMessage.from_user(text).to_dict()


async def started(storage, run_id: str = "run-1", owner: str = "host-a"):
    """A run started from the inbox by ``owner`` at NOW, leased for :data:`LEASE`."""
    await storage.inbox.enqueue(ADDRESS, "U_ANA", user("deploy"), now=NOW)
    run, _item = await storage.inbox.start_next(THREAD, run_id, owner, NOW + LEASE, now=NOW)
    return run


# --- one active run per thread --------------------------------------------------------------------------


async def test_a_thread_never_gets_a_second_active_run(storage):
    await create_run(storage, "run-1", status="paused")
    with pytest.raises(ActiveRunExists) as refused:
        await create_run(storage, "run-2")
    assert refused.value.chat_history_id == THREAD
    assert isinstance(refused.value, AlreadyExists)
    with pytest.raises(AlreadyExists) as taken:
        await create_run(storage, "run-1", thread=OTHER_THREAD)  # a taken id is not a busy thread
    assert not isinstance(taken.value, ActiveRunExists)
    assert (await create_run(storage, "run-done", status="finished")).status == "finished"  # ended runs: any number
    await storage.runs.transition("run-1", "paused", "finished")
    assert (await create_run(storage, "run-2")).status == "running"


async def test_two_processes_creating_a_run_in_one_thread_at_once_open_exactly_one(backend):
    other = await backend.open_another()
    outcomes = await asyncio.gather(
        *(create_run((backend.storage, other)[n % 2], f"run-{n}") for n in range(CONTENDERS)), return_exceptions=True
    )
    assert sum(not isinstance(o, BaseException) for o in outcomes) == 1
    assert [type(o) for o in outcomes if isinstance(o, BaseException)] == [ActiveRunExists] * (CONTENDERS - 1)
    [active] = await backend.storage.runs.list_by_status("running")
    assert (await other.runs.active_for_thread(THREAD)).run_id == active.run_id


# --- leases ----------------------------------------------------------------------------------------------


async def test_only_an_expired_lease_is_taken_over_and_only_once(storage):
    run = await started(storage)
    assert (run.owner, run.lease_expires_at, run.recoveries) == ("host-a", NOW + LEASE, 0)
    assert await storage.leases.expired(now=NOW + timedelta(seconds=10)) == []
    early = NOW + timedelta(seconds=10)
    assert await storage.leases.claim_expired("run-1", "host-b", NOW + 2 * LEASE, now=early) is None

    # The owner's heartbeat moves the lease on; then the owner dies and the lease runs out.
    assert await storage.leases.renew("host-a", NOW + timedelta(seconds=50)) == ["run-1"]
    assert await storage.leases.renew("host-nobody", NOW + timedelta(seconds=50)) == []
    assert await storage.leases.expired(now=NOW + timedelta(seconds=40)) == []
    later = NOW + timedelta(seconds=51)
    assert [r.run_id for r in await storage.leases.expired(now=later)] == ["run-1"]
    taken = await storage.leases.claim_expired("run-1", "host-b", later + LEASE, now=later)
    assert (taken.owner, taken.lease_expires_at, taken.recoveries) == ("host-b", later + LEASE, 1)
    assert await storage.leases.claim_expired("run-1", "host-c", later + LEASE, now=later) is None
    assert await storage.leases.renew("host-a", later + LEASE) == [], "the old owner no longer renews it"
    assert (await storage.runs.get("run-1")).owner == "host-b"


async def test_two_processes_taking_over_an_expired_run_at_once_have_one_winner(backend):
    await started(backend.storage)
    other = await backend.open_another()
    later = NOW + LEASE + timedelta(seconds=1)
    owners = [f"host-{n}" for n in range(CONTENDERS)]
    taken = await asyncio.gather(
        *(
            (backend.storage, other)[n % 2].leases.claim_expired("run-1", owner, later + LEASE, now=later)
            for n, owner in enumerate(owners)
        )
    )
    [winner] = [run for run in taken if run is not None]
    assert winner.recoveries == 1
    assert (await other.runs.get("run-1")).owner == winner.owner


async def test_a_released_run_can_be_taken_over_at_once_and_a_paused_run_has_no_owner(storage):
    await started(storage)
    assert await storage.leases.release("host-a", now=NOW) == 1
    released = await storage.runs.get("run-1")
    assert (released.owner, released.lease_expires_at) == (None, NOW)
    assert (await storage.leases.claim_expired("run-1", "host-b", NOW + LEASE, now=NOW)).owner == "host-b"
    await storage.runs.transition("run-1", "running", "paused", snapshot_json={"step": 1}, step=1)
    paused = await storage.runs.get("run-1")
    assert (paused.owner, paused.lease_expires_at) == (None, None)
    assert await storage.leases.expired(now=NOW + LEASE * 10) == [], "a paused run waits for people"
    assert await storage.leases.claim_paused("run-1", "host-c", NOW + LEASE)
    assert not await storage.leases.claim_paused("run-1", "host-d", NOW + LEASE)
    resuming = await storage.runs.get("run-1")
    assert (resuming.status, resuming.owner, resuming.lease_expires_at) == ("resuming", "host-c", NOW + LEASE)
    await storage.runs.transition("run-1", "resuming", "finished")
    assert (await storage.runs.get("run-1")).owner is None


async def test_two_processes_resuming_one_paused_run_at_once_have_one_winner(backend):
    await create_run(backend.storage, status="paused")
    other = await backend.open_another()
    won = await asyncio.gather(
        *(
            (backend.storage, other)[n % 2].leases.claim_paused("run-1", f"host-{n}", NOW + LEASE)
            for n in range(CONTENDERS)
        )
    )
    winners = [run for run in won if run is not None]
    assert len(winners) == 1
    assert (await other.runs.get("run-1")).owner == winners[0].owner == f"host-{won.index(winners[0])}"


async def test_a_claim_returns_the_run_as_claimed_and_with_a_step_only_takes_the_run_paused_at_that_step(storage):
    await create_run(storage, "run-1", status="paused")
    await storage.runs.transition("run-1", "paused", "paused", step=2)
    assert await storage.leases.claim_paused("run-1", "host-c", NOW + LEASE, step=1) is None, "paused again since"
    assert (await storage.runs.get("run-1")).status == "paused"
    claimed = await storage.leases.claim_paused("run-1", "host-c", NOW + LEASE, step=2)
    assert claimed == await storage.runs.get("run-1")  # exactly the row the claim wrote: its owner can fence with it
    assert (claimed.status, claimed.owner, claimed.lease_expires_at, claimed.step) == (
        "resuming",
        "host-c",
        NOW + LEASE,
        2,
    )
    assert await storage.leases.claim_paused("run-1", "host-d", NOW + LEASE, step=2) is None


async def test_a_claim_that_starts_moves_the_paused_run_to_running_owned_and_leased_in_one_statement(storage):
    await create_run(storage, "run-1", status="paused")
    await storage.runs.transition("run-1", "paused", "paused", step=1)
    with pytest.raises(ValueError, match="needs the step"):
        await storage.leases.claim_paused("run-1", "host-c", NOW + LEASE, start=True)
    assert await storage.leases.claim_paused("run-1", "host-c", NOW + LEASE, step=2, start=True) is None

    claimed = await storage.leases.claim_paused("run-1", "host-c", NOW + LEASE, step=1, start=True)

    assert claimed == await storage.runs.get("run-1")  # never seen resuming: the claim and the start are one
    assert (claimed.status, claimed.owner, claimed.lease_expires_at, claimed.step) == (
        "running",
        "host-c",
        NOW + LEASE,
        1,
    )
    assert await storage.leases.claim_paused("run-1", "host-d", NOW + LEASE, step=1, start=True) is None
    assert await storage.leases.claim_paused("run-1", "host-d", NOW + LEASE) is None
    # Its owner works under the fence it claimed with (its lease renews, its next status change passes the fence),
    # and there is no start left to make.
    fence = RunFence.of(claimed)
    assert not await storage.runs.transition("run-1", "resuming", "running", fence=fence)
    assert await storage.leases.renew("host-c", NOW + LEASE * 2) == ["run-1"]
    assert await storage.runs.transition("run-1", "running", "paused", fence=fence, step=2)


async def test_claiming_a_paused_run_when_decided_waits_for_every_approval_of_its_step(storage):
    await create_run(storage, "run-1")
    await storage.approvals.create_many([new_approval(approval_id="a-old", step=1)])
    await storage.approvals.decide("a-old", status="approved", decided_by="U_BOB", now=NOW)
    await storage.approvals.create_many(
        [new_approval(approval_id="a-1", step=2), new_approval("run-1", "call_2", approval_id="a-2", step=2)]
    )
    await storage.runs.transition("run-1", "running", "paused", step=2)

    assert not await storage.leases.claim_paused("run-1", "host-a", NOW + LEASE, decided=True)
    await storage.approvals.decide("a-1", status="approved", decided_by="U_BOB", now=NOW)
    assert not await storage.leases.claim_paused("run-1", "host-a", NOW + LEASE, decided=True)  # a-2 waits
    await storage.approvals.decide("a-2", status="rejected", decided_by="U_BOB", now=NOW)
    assert await storage.leases.claim_paused("run-1", "host-a", NOW + LEASE, decided=True)
    assert not await storage.leases.claim_paused("run-1", "host-b", NOW + LEASE, decided=True)
    assert (await storage.runs.get("run-1")).owner == "host-a"

    await create_run(storage, "run-never-paused", thread=OTHER_THREAD, status="paused")  # no approvals at all
    assert not await storage.leases.claim_paused("run-never-paused", "host-a", NOW + LEASE, decided=True)


async def test_a_paused_run_is_due_a_resume_only_once_its_step_is_fully_decided(storage):
    await create_run(storage, "run-1", status="paused")
    await storage.runs.transition("run-1", "paused", "paused", step=1)
    await create_run(storage, "run-never-paused", thread=OTHER_THREAD, status="paused")  # no approvals at all
    a, b = await storage.approvals.create_many(
        [new_approval(tool_call_id="call_a"), new_approval(tool_call_id="call_b")]
    )
    assert await storage.leases.decided_paused() == []
    await storage.approvals.decide(a.approval_id, status="approved", decided_by="U_BOB", now=NOW)
    assert await storage.leases.decided_paused() == []
    await storage.approvals.decide(b.approval_id, status="rejected", decided_by="U_BOB", now=NOW)
    assert [r.run_id for r in await storage.leases.decided_paused()] == ["run-1"]


async def test_expired_leases_are_listed_oldest_first_and_bounded(storage):
    for n, (thread, address) in enumerate([(THREAD, ADDRESS), (OTHER_THREAD, OTHER_ADDRESS)]):
        await storage.inbox.enqueue(address, "U_ANA", user("go"), now=NOW)
        await storage.inbox.start_next(thread, f"run-{n}", "host-a", NOW + LEASE, now=NOW + timedelta(seconds=n))
    later = NOW + LEASE * 2
    assert [r.run_id for r in await storage.leases.expired(now=later)] == ["run-0", "run-1"]
    assert [r.run_id for r in await storage.leases.expired(now=later, limit=1)] == ["run-0"]


# --- the thread inbox ------------------------------------------------------------------------------------


async def test_the_inbox_starts_messages_in_arrival_order_one_run_at_a_time(storage):
    first, second = ChatMessage.from_user("one"), ChatMessage.from_user("two")
    one = await storage.inbox.enqueue(ADDRESS, "U_ANA", first.to_dict(), message_ref="171.1", now=NOW)
    two = await storage.inbox.enqueue(ADDRESS, "U_BOB", second.to_dict(), now=NOW)
    assert one < two
    run, item = await storage.inbox.start_next(THREAD, "run-1", "host-a", NOW + LEASE, now=NOW)
    assert (run.status, run.requester, run.owner, run.created_at) == ("running", "U_ANA", "host-a", NOW)
    assert (item.id, item.message_ref, item.message["text"], item.address) == (one, "171.1", "one", ADDRESS)
    assert item.received_at == NOW
    assert [m.id for m in await storage.messages.retrieve_messages(THREAD)] == [first.id], "moved into the history"
    assert await storage.inbox.start_next(THREAD, "run-2", "host-a", NOW + LEASE, now=NOW) is None, "thread busy"
    assert [i.message["text"] for i in await storage.inbox.waiting(THREAD)] == ["two"]
    assert await storage.inbox.orphaned() == [], "its thread has a running run"
    assert await storage.inbox.is_waiting(two) and not await storage.inbox.is_waiting(one)

    await storage.runs.transition("run-1", "running", "finished")
    [orphan] = await storage.inbox.orphaned()
    assert orphan.message["text"] == "two"
    run, item = await storage.inbox.start_next(THREAD, "run-2", "host-b", NOW + LEASE, now=NOW)
    assert (run.requester, run.owner) == ("U_BOB", "host-b")
    assert await storage.inbox.waiting(THREAD) == [] and not await storage.inbox.is_waiting(item.id)
    assert [m.id for m in await storage.messages.retrieve_messages(THREAD)] == [first.id, second.id]
    assert await storage.inbox.start_next(THREAD, "run-3", "host-b", NOW + LEASE, now=NOW) is None, "none waits"


async def test_a_message_behind_a_paused_run_is_not_started_but_listed_for_the_sweep(storage):
    await create_run(storage, "run-1", status="paused")
    await storage.inbox.enqueue(ADDRESS, "U_BOB", user("and also"), now=NOW)
    assert await storage.inbox.start_next(THREAD, "run-2", "host-a", NOW + LEASE, now=NOW) is None
    # A paused run has no process working on it: the sweep is told about the waiting message.
    assert [i.message["text"] for i in await storage.inbox.orphaned()] == ["and also"]


async def test_orphans_are_the_oldest_waiting_message_of_each_free_thread(storage):
    await storage.inbox.enqueue(ADDRESS, "U_ANA", user("a1"), now=NOW)
    await storage.inbox.enqueue(OTHER_ADDRESS, "U_ANA", user("b1"), now=NOW)
    await storage.inbox.enqueue(ADDRESS, "U_ANA", user("a2"), now=NOW)
    await storage.inbox.enqueue(OTHER_ADDRESS, "U_ANA", user("b2"), now=NOW)
    assert [i.message["text"] for i in await storage.inbox.orphaned()] == ["a1", "b1"]
    assert [i.message["text"] for i in await storage.inbox.orphaned(limit=1)] == ["a1"]


async def test_a_message_already_in_the_history_is_not_written_twice_when_started(storage):
    message = ChatMessage.from_user("deploy")
    await storage.messages.write_messages(THREAD, [message])
    await storage.inbox.enqueue(ADDRESS, "U_ANA", message.to_dict(), now=NOW)
    assert await storage.inbox.start_next(THREAD, "run-1", "host-a", NOW + LEASE, now=NOW) is not None
    assert await storage.messages.count_messages(THREAD) == 1


async def test_two_processes_draining_one_thread_at_once_start_one_run(backend):
    other = await backend.open_another()
    for n in range(3):
        await backend.storage.inbox.enqueue(ADDRESS, "U_ANA", user(f"m{n}"), now=NOW)
    outcomes = await asyncio.gather(
        *(
            (backend.storage, other)[n % 2].inbox.start_next(THREAD, f"run-{n}", f"host-{n}", NOW + LEASE, now=NOW)
            for n in range(CONTENDERS)
        )
    )
    [(run, item)] = [o for o in outcomes if o is not None]
    assert item.message["text"] == "m0"
    assert [i.message["text"] for i in await other.inbox.waiting(THREAD)] == ["m1", "m2"]
    assert (await backend.storage.runs.active_for_thread(THREAD)).run_id == run.run_id
    assert [m.text for m in await other.messages.retrieve_messages(THREAD)] == ["m0"]


async def test_messages_enqueued_by_two_processes_start_in_the_order_they_were_stored(backend):
    other = await backend.open_another()
    stored: list[tuple[int, str]] = []

    async def send(storage, text: str) -> None:
        stored.append((await storage.inbox.enqueue(ADDRESS, "U_ANA", user(text), now=NOW), text))

    await asyncio.gather(*(send((backend.storage, other)[n % 2], f"m{n}") for n in range(CONTENDERS)))
    started_texts = []
    for n in range(CONTENDERS):
        run, item = await (other, backend.storage)[n % 2].inbox.start_next(
            THREAD, f"run-{n}", "host-a", NOW + LEASE, now=NOW
        )
        started_texts.append(item.message["text"])
        await backend.storage.runs.transition(run.run_id, "running", "finished")
    assert started_texts == [text for _id, text in sorted(stored)]
    assert [m.text for m in await backend.storage.messages.retrieve_messages(THREAD, last_k=20)] == started_texts


async def test_a_redelivered_event_is_stored_in_the_inbox_once(storage):
    message = user("deploy")
    first = await storage.inbox.enqueue(ADDRESS, "U_ANA", message, event_key="slack:event:Ev1", now=NOW)
    assert first is not None
    assert await storage.inbox.enqueue(ADDRESS, "U_ANA", message, event_key="slack:event:Ev1", now=NOW) is None
    assert [i.id for i in await storage.inbox.waiting(THREAD)] == [first]
    assert not await storage.events.first_time("slack:event:Ev1"), "the same key as the event dedupe"
    assert await storage.inbox.enqueue(ADDRESS, "U_ANA", user("again"), now=NOW) is not None, "no key: no dedupe"


async def test_a_redelivery_racing_the_first_delivery_on_two_processes_is_stored_once(backend):
    other = await backend.open_another()
    ids = await asyncio.gather(
        *(
            (backend.storage, other)[n % 2].inbox.enqueue(ADDRESS, "U_ANA", user("deploy"), event_key="slack:event:Ev2")
            for n in range(CONTENDERS)
        )
    )
    [stored] = [i for i in ids if i is not None]
    assert [i.id for i in await other.inbox.waiting(THREAD)] == [stored]


# --- the outbox ------------------------------------------------------------------------------------------


async def test_an_outbox_message_is_owed_until_delivered_and_claimed_by_one_process_at_a_time(storage):
    assert await storage.outbox.add(
        "answer:run-1", ADDRESS, "Deleted.", claimed_by="host-a", claim_until=NOW + LEASE, now=NOW
    )
    assert not await storage.outbox.add("answer:run-1", ADDRESS, "Other.", now=NOW), "the same key is owed once"
    assert await storage.outbox.due(["slack"], now=NOW) == [], "claimed by its writer"
    [owed] = await storage.outbox.undelivered(THREAD)
    assert (owed.text, owed.claimed_by, owed.attempts, owed.created_at) == ("Deleted.", "host-a", 0, NOW)
    assert await storage.outbox.undelivered(OTHER_THREAD) == []
    # host-a died before posting: its claim expires and another process takes the message.
    later = NOW + LEASE + timedelta(seconds=1)
    [due] = await storage.outbox.due(["slack"], now=later)
    assert (due.key, due.text, due.address, due.delivered_at) == ("answer:run-1", "Deleted.", ADDRESS, None)
    assert await storage.outbox.due(["teams"], now=later) == [] and await storage.outbox.due([], now=later) == []
    assert await storage.outbox.claim("answer:run-1", "host-b", later + LEASE, now=later)
    assert not await storage.outbox.claim("answer:run-1", "host-c", later + LEASE, now=later)
    assert await storage.outbox.retry_later("answer:run-1", later + timedelta(seconds=30))
    assert await storage.outbox.due(["slack"], now=later) == []
    [again] = await storage.outbox.due(["slack"], now=later + timedelta(seconds=30))
    assert (again.attempts, again.claimed_by, again.next_attempt_at) == (1, None, later + timedelta(seconds=30))
    assert await storage.outbox.delivered("answer:run-1", now=later)
    assert not await storage.outbox.delivered("answer:run-1", now=later), "delivered once"
    assert not await storage.outbox.claim("answer:run-1", "host-d", later + LEASE * 10, now=later + LEASE * 9)
    assert not await storage.outbox.retry_later("answer:run-1", later)
    assert await storage.outbox.undelivered() == []
    assert await storage.outbox.due(["slack"], now=later + LEASE * 10) == []


async def test_a_runs_answer_is_owed_in_the_same_write_that_finishes_the_run(storage):
    await started(storage)
    assert await storage.outbox.add(
        "answer:run-1",
        ADDRESS,
        "Deployed.",
        claimed_by="host-a",
        claim_until=NOW + LEASE,
        now=NOW,
        finishes_run="run-1",
    )
    run = await storage.runs.get("run-1")
    assert (run.status, run.owner, run.lease_expires_at) == ("finished", None, None)
    assert [m.key for m in await storage.outbox.undelivered(THREAD)] == ["answer:run-1"]
    # A run that is no longer working is left as it is; the message is still owed once.
    await create_run(storage, "run-2", thread=OTHER_THREAD, status="paused")
    assert await storage.outbox.add("note:run-2", OTHER_ADDRESS, "Noted.", now=NOW, finishes_run="run-2")
    assert (await storage.runs.get("run-2")).status == "paused"


async def test_the_write_that_finishes_a_run_with_its_answer_records_the_runs_token_usage(storage):
    from storage import TokenUsage

    await started(storage)
    usage = TokenUsage(21, 7, 28)
    assert await storage.outbox.add("answer:run-1", ADDRESS, "Deployed.", now=NOW, finishes_run="run-1", usage=usage)
    assert (await storage.runs.get("run-1")).status == "finished"
    since = NOW - timedelta(days=1)
    assert await storage.runs.usage(platform="slack", workspace="T1", since=since) == TokenUsage(21, 7, 28, runs=1)
    with pytest.raises(ValueError):  # usage belongs to the run the message finishes
        await storage.outbox.add("note:x", ADDRESS, "Noted.", now=NOW, usage=usage)
    assert [m.key for m in await storage.outbox.undelivered(THREAD)] == ["answer:run-1"]


async def test_due_outbox_messages_come_oldest_first_per_platform(storage):
    await storage.outbox.add("b", ADDRESS, "second", now=NOW + timedelta(seconds=1))
    await storage.outbox.add("a", ADDRESS, "first", now=NOW)
    await storage.outbox.add("t", ThreadAddress("teams:x", "teams", "w", "c", "t"), "teams", now=NOW)
    later = NOW + timedelta(seconds=5)
    assert [m.key for m in await storage.outbox.due(["slack"], now=later)] == ["a", "b"]
    assert [m.key for m in await storage.outbox.due(["slack", "teams"], now=later, limit=2)] == ["a", "t"]
    assert [m.key for m in await storage.outbox.undelivered()] == ["a", "t", "b"]


async def test_two_processes_claiming_one_outbox_message_at_once_have_one_winner(backend):
    await backend.storage.outbox.add("answer:run-1", ADDRESS, "Deleted.", now=NOW)
    other = await backend.open_another()
    won = await asyncio.gather(
        *(
            (backend.storage, other)[n % 2].outbox.claim("answer:run-1", f"host-{n}", NOW + LEASE, now=NOW)
            for n in range(CONTENDERS)
        )
    )
    assert won.count(True) == 1
    [owed] = await other.outbox.undelivered()
    assert owed.claimed_by == f"host-{won.index(True)}"


# --- batch expiry ----------------------------------------------------------------------------------------


async def test_due_approvals_expire_in_batches_each_exactly_once(storage):
    await create_run(storage, status="paused")
    approvals = await storage.approvals.create_many(
        [new_approval(tool_call_id=f"call_{n}", ttl=timedelta(minutes=n + 1)) for n in range(5)]
    )
    at = NOW + timedelta(minutes=3)  # the first three are due
    first = await storage.approvals.expire_due(now=at, limit=2)
    assert {a.approval_id for a in first} == {approvals[0].approval_id, approvals[1].approval_id}, "soonest first"
    assert all((a.status, a.decided_by, a.decided_at) == ("expired", "countersign", at) for a in first)
    [third] = await storage.approvals.expire_due(now=at, limit=2)
    assert third.approval_id == approvals[2].approval_id
    assert await storage.approvals.expire_due(now=at) == []
    assert [a.status for a in await storage.approvals.for_run("run-1")] == ["expired"] * 3 + ["pending"] * 2


async def test_two_processes_sweeping_at_once_expire_each_approval_exactly_once(backend):
    await create_run(backend.storage, status="paused")
    await backend.storage.approvals.create_many([new_approval(tool_call_id=f"call_{n}") for n in range(300)])
    await backend.storage.approvals.decide(
        (await backend.storage.approvals.for_run("run-1"))[0].approval_id,
        status="approved",
        decided_by="U_BOB",
        now=NOW,
    )
    other = await backend.open_another()
    after = NOW + timedelta(hours=2)
    claimed: list[str] = []

    async def sweep(storage) -> None:
        while batch := await storage.approvals.expire_due(now=after, limit=25):
            claimed.extend(a.approval_id for a in batch)

    await asyncio.gather(*(sweep(s) for s in (backend.storage, other, backend.storage, other)))
    assert len(claimed) == len(set(claimed)) == 299
    assert await other.approvals.due_for_expiry(now=after) == []


async def test_audit_entries_are_appended_many_at_once_in_order(storage):
    assert await storage.audit.append_many([], now=NOW) == 0
    entries = [("countersign", "expired", f"appr-{n}", {"tool": "delete_file", "n": n}) for n in range(3)]
    assert await storage.audit.append_many(entries, now=NOW) == 3
    newest_first = await storage.audit.recent(5)
    assert [(e.actor, e.action, e.subject, e.details, e.at) for e in reversed(newest_first)] == [
        (actor, action, subject, details, NOW) for actor, action, subject, details in entries
    ]


async def test_a_restarted_process_takes_back_its_own_runs_at_once_with_a_fencing_bump(storage):
    """Under the same instance id after a restart, the runs its previous life held are claimed before the lease ends."""
    run = await started(storage, owner="host-a")
    old_fence = RunFence.of(run)
    early = NOW + timedelta(seconds=1)  # the lease has 29 s to go: no other process may take the run yet
    assert await storage.leases.claim_expired("run-1", "host-b", early + LEASE, now=early) is None
    assert await storage.leases.claim_own("host-b", early + LEASE) == []
    [taken] = await storage.leases.claim_own("host-a", early + LEASE)
    assert (taken.run_id, taken.owner, taken.lease_expires_at, taken.recoveries) == (
        "run-1",
        "host-a",
        early + LEASE,
        1,
    )
    assert not old_fence.holds_for(taken), "the previous life's writes are fenced out"
    assert RunFence.of(taken).holds_for(await storage.runs.get("run-1"))
    await storage.runs.transition("run-1", "running", "paused", snapshot_json={"step": 1}, step=1)
    assert await storage.leases.claim_own("host-a", early + LEASE) == [], "a paused run has no owner"
