"""The lifecycle stores: one active run per thread, leases, the thread inbox, the outbox, batch expiry."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlite_utils import Database

from bot.messages import ChatMessage
from storage import LATEST_VERSION, ActiveRunExists, ThreadAddress, migrate, open_storage
from storage.approval_rows import CLOSED_RUN_APPROVALS_REASON
from storage.sqlite.migrations import MIGRATIONS, _run_lifecycle
from tests.fakes.storage_data import NOW, THREAD, create_run, new_approval

RUN_LIFECYCLE_VERSION = MIGRATIONS.index(_run_lifecycle) + 1
"""The schema version that made one active run per thread a database rule (the upgrade tested below)."""

ADDRESS = ThreadAddress(THREAD, "slack", "T1", "C1", THREAD.rsplit(":", 1)[-1])
LEASE = timedelta(seconds=30)


def test_a_thread_never_gets_a_second_active_run(storage):
    create_run(storage, "run-1", status="paused")
    with pytest.raises(ActiveRunExists):
        create_run(storage, "run-2")
    storage.runs.transition("run-1", "paused", "finished")
    assert create_run(storage, "run-2").status == "running"


def test_two_processes_creating_a_run_in_one_thread_at_once_open_exactly_one(tmp_path):
    path = tmp_path / "countersign.db"
    open_storage(path).close()
    outcomes: list[str] = []
    barrier = threading.Barrier(8)

    def contend(n: int) -> None:
        with open_storage(path) as mine:  # its own connection, as another process has
            barrier.wait()
            try:
                create_run(mine, f"run-{n}")
                outcomes.append("created")
            except ActiveRunExists:
                outcomes.append("refused")

    workers = [threading.Thread(target=contend, args=(n,)) for n in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert sorted(outcomes) == ["created"] + ["refused"] * 7


def test_only_an_expired_lease_is_taken_over_and_only_once(storage):
    storage.inbox.enqueue(ADDRESS, "U_ANA", ChatMessage.from_user("deploy").to_dict(), now=NOW)
    run, _item = storage.inbox.start_next(THREAD, "run-1", "host-a", NOW + LEASE, now=NOW)
    assert (run.owner, run.lease_expires_at) == ("host-a", NOW + LEASE)
    assert storage.leases.expired(now=NOW + timedelta(seconds=10)) == []
    assert storage.leases.claim_expired("run-1", "host-b", NOW + 2 * LEASE, now=NOW + timedelta(seconds=10)) is None

    # The owner's heartbeat moves the lease on; then the owner dies and the lease runs out.
    assert storage.leases.renew("host-a", NOW + timedelta(seconds=50)) == ["run-1"]
    assert storage.leases.expired(now=NOW + timedelta(seconds=40)) == []
    later = NOW + timedelta(seconds=51)
    assert [r.run_id for r in storage.leases.expired(now=later)] == ["run-1"]
    taken = storage.leases.claim_expired("run-1", "host-b", later + LEASE, now=later)
    assert (taken.owner, taken.recoveries) == ("host-b", 1)
    assert storage.leases.claim_expired("run-1", "host-c", later + LEASE, now=later) is None
    assert storage.leases.renew("host-a", later + LEASE) == [], "the old owner no longer renews it"


def test_a_released_run_can_be_taken_over_at_once_and_a_paused_run_has_no_owner(storage):
    storage.inbox.enqueue(ADDRESS, "U_ANA", ChatMessage.from_user("deploy").to_dict(), now=NOW)
    storage.inbox.start_next(THREAD, "run-1", "host-a", NOW + LEASE, now=NOW)
    assert storage.leases.release("host-a", now=NOW) == 1
    assert storage.leases.claim_expired("run-1", "host-b", NOW + LEASE, now=NOW).owner == "host-b"
    storage.runs.transition("run-1", "running", "paused", snapshot_json={"step": 1}, step=1)
    paused = storage.runs.get("run-1")
    assert (paused.owner, paused.lease_expires_at) == (None, None)
    assert storage.leases.claim_paused("run-1", "host-c", NOW + LEASE)
    assert not storage.leases.claim_paused("run-1", "host-d", NOW + LEASE)
    assert storage.runs.get("run-1").owner == "host-c"


def test_a_paused_run_is_due_a_resume_only_once_its_step_is_fully_decided(storage):
    create_run(storage, "run-1", status="paused")
    storage.runs.transition("run-1", "paused", "paused", step=1)
    a, b = storage.approvals.create_many([new_approval(tool_call_id="call_a"), new_approval(tool_call_id="call_b")])
    assert storage.leases.decided_paused() == []
    storage.approvals.decide(a.approval_id, status="approved", decided_by="U_BOB", now=NOW)
    assert storage.leases.decided_paused() == []
    storage.approvals.decide(b.approval_id, status="rejected", decided_by="U_BOB", now=NOW)
    assert [r.run_id for r in storage.leases.decided_paused()] == ["run-1"]


def test_the_inbox_starts_messages_in_arrival_order_one_run_at_a_time(storage):
    first, second = ChatMessage.from_user("one"), ChatMessage.from_user("two")
    storage.inbox.enqueue(ADDRESS, "U_ANA", first.to_dict(), message_ref="171.1", now=NOW)
    storage.inbox.enqueue(ADDRESS, "U_BOB", second.to_dict(), now=NOW)
    run, item = storage.inbox.start_next(THREAD, "run-1", "host-a", NOW + LEASE, now=NOW)
    assert (run.requester, item.message_ref, item.message["text"]) == ("U_ANA", "171.1", "one")
    assert [m.id for m in storage.messages.retrieve_messages(THREAD)] == [first.id], "moved into the history"
    assert storage.inbox.start_next(THREAD, "run-2", "host-a", NOW + LEASE, now=NOW) is None, "the thread is busy"
    assert [i.message["text"] for i in storage.inbox.waiting(THREAD)] == ["two"]
    assert storage.inbox.orphaned() == [], "its thread has a running run"

    storage.runs.transition("run-1", "running", "finished")
    [orphan] = storage.inbox.orphaned()
    assert orphan.message["text"] == "two"
    run, item = storage.inbox.start_next(THREAD, "run-2", "host-b", NOW + LEASE, now=NOW)
    assert (run.requester, run.owner) == ("U_BOB", "host-b")
    assert storage.inbox.waiting(THREAD) == [] and not storage.inbox.is_waiting(item.id)


def test_an_outbox_message_is_owed_until_delivered_and_claimed_by_one_process_at_a_time(storage):
    assert storage.outbox.add(
        "answer:run-1", ADDRESS, "Deleted.", claimed_by="host-a", claim_until=NOW + LEASE, now=NOW
    )
    assert not storage.outbox.add("answer:run-1", ADDRESS, "Deleted.", now=NOW), "the same key is owed once"
    assert storage.outbox.due(["slack"], now=NOW) == [], "claimed by its writer"
    # host-a died before posting: its claim expires and another process takes the message.
    later = NOW + LEASE + timedelta(seconds=1)
    [due] = storage.outbox.due(["slack"], now=later)
    assert (due.key, due.text, due.address) == ("answer:run-1", "Deleted.", ADDRESS)
    assert storage.outbox.due(["teams"], now=later) == []
    assert storage.outbox.claim("answer:run-1", "host-b", later + LEASE, now=later)
    assert not storage.outbox.claim("answer:run-1", "host-c", later + LEASE, now=later)
    assert storage.outbox.retry_later("answer:run-1", later + timedelta(seconds=30))
    assert storage.outbox.due(["slack"], now=later) == []
    [again] = storage.outbox.due(["slack"], now=later + timedelta(seconds=30))
    assert again.attempts == 1
    assert storage.outbox.delivered("answer:run-1", now=later)
    assert storage.outbox.undelivered() == [] and storage.outbox.due(["slack"], now=later + LEASE * 10) == []


def test_due_approvals_expire_in_batches_each_exactly_once_across_processes(tmp_path):
    path = tmp_path / "countersign.db"
    with open_storage(path) as storage:
        create_run(storage, status="paused")
        storage.approvals.create_many([new_approval(tool_call_id=f"call_{n}") for n in range(1200)])
    after = NOW + timedelta(hours=2)
    claimed: list[str] = []
    barrier = threading.Barrier(3)

    def sweep() -> None:
        with open_storage(path) as mine:
            barrier.wait()
            while batch := mine.approvals.expire_due(now=after, limit=100):
                claimed.extend(a.approval_id for a in batch)
                assert all(a.status == "expired" and a.decided_by == "countersign" for a in batch)

    sweepers = [threading.Thread(target=sweep) for _ in range(3)]
    for sweeper in sweepers:
        sweeper.start()
    for sweeper in sweepers:
        sweeper.join()
    assert len(claimed) == len(set(claimed)) == 1200
    with open_storage(path) as storage:
        assert storage.approvals.due_for_expiry(now=after) == []


def test_an_upgrade_keeps_the_newest_active_run_of_a_thread_and_closes_older_ones_and_their_approvals(tmp_path):
    path = tmp_path / "c.db"
    db = Database(path)
    migrate(db, target=RUN_LIFECYCLE_VERSION - 1)
    t = NOW.timestamp()
    for n, status in enumerate(["paused", "paused", "finished"], start=1):
        db["runs"].insert(
            {
                "run_id": f"run-{n}",
                "chat_history_id": THREAD,
                "platform": "slack",
                "workspace": "T1",
                "channel": "C1",
                "thread": "1",
                "requester": "U_ANA",
                "status": status,
                "step": 0,
                "created_at": t + n,
                "updated_at": t + n,
            }
        )
    # Each paused run waits on one approval (possible before one active run per thread was enforced).
    for n in (1, 2):
        db["approvals"].insert(_pending_approval_row(f"appr-{n}", f"run-{n}", t))
    db.close()
    with open_storage(path) as storage:
        assert storage.schema_version() == LATEST_VERSION
        assert [storage.runs.get(f"run-{n}").status for n in (1, 2, 3)] == ["failed", "paused", "finished"]
        closed, kept = storage.approvals.get("appr-1"), storage.approvals.get("appr-2")
        assert (closed.status, closed.decided_by, closed.feedback) == (
            "cancelled",
            "countersign",
            CLOSED_RUN_APPROVALS_REASON,
        ), "the closed run's approval can no longer be clicked"
        assert closed.decided_at is not None
        assert kept.status == "pending", "the kept run still waits on its approval"
        assert [a.approval_id for a in storage.approvals.pending()] == ["appr-2"]
        assert storage.runs.get("run-2").owner is None and storage.runs.get("run-2").recoveries == 0
        with pytest.raises(ActiveRunExists):
            create_run(storage, "run-4")


def test_a_redelivered_event_is_stored_in_the_inbox_once(storage):
    message = ChatMessage.from_user("deploy").to_dict()
    first = storage.inbox.enqueue(ADDRESS, "U_ANA", message, event_key="slack:event:Ev1", now=NOW)
    assert first is not None
    assert storage.inbox.enqueue(ADDRESS, "U_ANA", message, event_key="slack:event:Ev1", now=NOW) is None
    assert [i.id for i in storage.inbox.waiting(THREAD)] == [first]
    assert not storage.events.first_time("slack:event:Ev1"), "the same key as the event dedupe"


def test_a_runs_answer_is_owed_in_the_same_write_that_finishes_the_run(storage):
    storage.inbox.enqueue(ADDRESS, "U_ANA", ChatMessage.from_user("deploy").to_dict(), now=NOW)
    storage.inbox.start_next(THREAD, "run-1", "host-a", NOW + LEASE, now=NOW)
    assert storage.outbox.add(
        "answer:run-1",
        ADDRESS,
        "Deployed.",
        claimed_by="host-a",
        claim_until=NOW + LEASE,
        now=NOW,
        finishes_run="run-1",
    )
    run = storage.runs.get("run-1")
    assert (run.status, run.owner) == ("finished", None)
    assert [m.key for m in storage.outbox.undelivered(THREAD)] == ["answer:run-1"]


def _pending_approval_row(approval_id: str, run_id: str, t: float) -> dict:
    return {
        "approval_id": approval_id,
        "run_id": run_id,
        "step": 1,
        "tool_call_id": "call_1",
        "tool_name": "delete_file",
        "arguments_json": "{}",
        "args_digest": "d",
        "requester": "U_ANA",
        "mode": "always",
        "approvers_json": "[]",
        "quorum": 1,
        "four_eyes": 0,
        "platform": "slack",
        "chat_history_id": THREAD,
        "status": "pending",
        "created_at": t,
        "expires_at": t + 3600,
    }
