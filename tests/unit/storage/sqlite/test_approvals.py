"""Approvals: one decision per pending call, never after expiry; votes; expiry queries."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.canonical import args_digest
from storage import AlreadyExists, NotFound, open_storage
from tests.fakes.storage_data import NOW, THREAD, create_run, new_approval

LATER = NOW + timedelta(minutes=5)
EXPIRY = NOW + timedelta(hours=1)


@pytest.fixture
def storage(tmp_path):
    storage = open_storage(tmp_path / "countersign.db")
    create_run(storage)
    yield storage
    storage.close()


@pytest.fixture
def approval(storage):
    return storage.approvals.create_many([new_approval()])[0]


def test_created_approvals_carry_everything_the_engine_needs(storage):
    first, second = storage.approvals.create_many(
        [new_approval(tool_call_id="call_1"), new_approval(tool_call_id="call_2", arguments={"path": "b"})]
    )
    assert first.status == "pending"
    assert (first.run_id, first.step, first.tool_call_id, first.tool_name) == ("run-1", 1, "call_1", "delete_file")
    assert first.arguments == {"path": "/srv/app/a.txt"}
    assert first.args_digest == args_digest({"path": "/srv/app/a.txt"})
    assert first.approvers == ("U_BOB", "U_CAROL")
    assert (first.quorum, first.four_eyes, first.mode) == (1, False, "always")
    assert (first.created_at, first.expires_at) == (NOW, EXPIRY)
    assert first.message_ref is None and first.decided_by is None
    assert storage.approvals.get(second.approval_id) == second


def test_approval_ids_are_unguessable(storage):
    records = storage.approvals.create_many([new_approval(tool_call_id=f"call_{i}") for i in range(20)])
    ids = {r.approval_id for r in records}
    assert len(ids) == 20
    assert all(len(i) >= 22 for i in ids)


def test_a_digest_that_does_not_match_the_arguments_is_refused(storage):
    with pytest.raises(ValueError, match="args_digest"):
        storage.approvals.create_many([new_approval(args_digest=args_digest({"path": "/etc/passwd"}))])


def test_create_many_stores_all_or_nothing(storage):
    with pytest.raises(NotFound, match="run-404"):
        storage.approvals.create_many([new_approval(tool_call_id="call_1"), new_approval("run-404", "call_2")])
    assert storage.approvals.for_run("run-1") == []


def test_one_pending_approval_per_tool_call(storage, approval):
    with pytest.raises(AlreadyExists):
        storage.approvals.create_many([new_approval(tool_call_id="call_1")])


def test_an_approval_that_expires_before_it_exists_is_refused(storage):
    with pytest.raises(ValueError, match="expire"):
        storage.approvals.create_many([new_approval(ttl=timedelta(0))])


def test_the_first_decision_wins_and_later_ones_change_nothing(storage, approval):
    assert storage.approvals.decide(
        approval.approval_id,
        status="modified",
        decided_by="U_BOB",
        feedback="only the copy",
        final_arguments={"path": "/srv/app/a.txt.bak"},
        now=LATER,
    )
    assert not storage.approvals.decide(approval.approval_id, status="rejected", decided_by="U_CAROL", now=LATER)
    decided = storage.approvals.get(approval.approval_id)
    assert (decided.status, decided.decided_by, decided.decided_at) == ("modified", "U_BOB", LATER)
    assert (decided.feedback, decided.final_arguments) == ("only the copy", {"path": "/srv/app/a.txt.bak"})


def test_a_decision_after_expiry_is_refused(storage, approval):
    assert not storage.approvals.decide(approval.approval_id, status="approved", decided_by="U_BOB", now=EXPIRY)
    late = EXPIRY + timedelta(days=2)
    assert not storage.approvals.decide(approval.approval_id, status="approved", decided_by="U_BOB", now=late)
    assert storage.approvals.get(approval.approval_id).status == "pending"


def test_only_decisions_are_accepted_by_decide(storage, approval):
    with pytest.raises(ValueError):
        storage.approvals.decide(approval.approval_id, status="expired", decided_by="U_BOB", now=LATER)


def test_deciding_an_unknown_approval_is_not_found(storage):
    with pytest.raises(NotFound):
        storage.approvals.decide("forged-id", status="approved", decided_by="U_EVE", now=LATER)


def test_expire_only_when_due_and_then_no_decision(storage, approval):
    assert not storage.approvals.expire(approval.approval_id, now=LATER)
    assert storage.approvals.expire(approval.approval_id, now=EXPIRY)
    assert not storage.approvals.expire(approval.approval_id, now=EXPIRY)
    assert storage.approvals.get(approval.approval_id).status == "expired"
    assert not storage.approvals.decide(approval.approval_id, status="approved", decided_by="U_BOB", now=LATER)


def test_a_decided_approval_does_not_expire(storage, approval):
    storage.approvals.decide(approval.approval_id, status="approved", decided_by="U_BOB", now=LATER)
    assert not storage.approvals.expire(approval.approval_id, now=EXPIRY)
    assert storage.approvals.get(approval.approval_id).status == "approved"


def test_due_for_expiry_lists_pending_due_approvals_soonest_first(storage):
    short, long_, decided = storage.approvals.create_many(
        [
            new_approval(tool_call_id="call_short", ttl=timedelta(minutes=10)),
            new_approval(tool_call_id="call_long", ttl=timedelta(minutes=30)),
            new_approval(tool_call_id="call_decided", ttl=timedelta(minutes=5)),
        ]
    )
    storage.approvals.decide(decided.approval_id, status="approved", decided_by="U_BOB", now=NOW)
    assert storage.approvals.due_for_expiry(now=NOW + timedelta(minutes=9)) == []
    due = storage.approvals.due_for_expiry(now=NOW + timedelta(hours=1))
    assert [a.approval_id for a in due] == [short.approval_id, long_.approval_id]
    assert len(storage.approvals.due_for_expiry(now=NOW + timedelta(hours=1), limit=1)) == 1


def test_the_expiry_query_reads_an_index(storage):
    plan = " ".join(
        row["detail"]
        for row in storage.db.query(
            "EXPLAIN QUERY PLAN SELECT approval_id FROM approvals WHERE status = 'pending' AND expires_at <= ? "
            "ORDER BY expires_at LIMIT 100",
            [0.0],
        )
    )
    assert "USING INDEX approvals_status_expiry (status=? AND expires_at<?)" in plan
    assert "TEMP B-TREE" not in plan


def test_closing_a_run_supersedes_only_its_pending_approvals(storage):
    create_run(storage, "run-2", thread="slack:T1:C1:1700000000.000200")
    a, b, c = storage.approvals.create_many(
        [new_approval(tool_call_id="call_a"), new_approval(tool_call_id="call_b"), new_approval("run-2", "call_c")]
    )
    storage.approvals.decide(a.approval_id, status="approved", decided_by="U_BOB", now=LATER)
    assert storage.approvals.close_pending_for_run("run-1", "superseded", "a new message arrived") == [b.approval_id]
    assert storage.approvals.close_pending_for_run("run-1", "superseded", "again") == []
    closed = storage.approvals.get(b.approval_id)
    assert (closed.status, closed.feedback) == ("superseded", "a new message arrived")
    assert storage.approvals.get(a.approval_id).status == "approved"
    assert storage.approvals.get(c.approval_id).status == "pending"
    with pytest.raises(ValueError):
        storage.approvals.close_pending_for_run("run-2", "approved", "not a closing status")


def test_votes_count_confirmations_once_per_voter(storage):
    [approval] = storage.approvals.create_many([new_approval(quorum=2)])
    assert storage.approvals.add_vote(approval.approval_id, "U_BOB", "confirm", now=LATER) == 1
    assert storage.approvals.add_vote(approval.approval_id, "U_BOB", "confirm", now=LATER) == 1
    assert storage.approvals.add_vote(approval.approval_id, "U_DAN", "reject", now=LATER) == 1
    assert storage.approvals.add_vote(approval.approval_id, "U_CAROL", "confirm", now=LATER) == 2
    votes = storage.approvals.votes(approval.approval_id)
    assert [(v.voter, v.vote) for v in votes] == [("U_BOB", "confirm"), ("U_DAN", "reject"), ("U_CAROL", "confirm")]
    assert votes[0].voted_at == LATER


def test_no_votes_once_decided_or_expired(storage):
    decided, expired = storage.approvals.create_many(
        [new_approval(tool_call_id="call_1"), new_approval(tool_call_id="call_2")]
    )
    storage.approvals.decide(decided.approval_id, status="rejected", decided_by="U_BOB", now=LATER)
    assert storage.approvals.add_vote(decided.approval_id, "U_CAROL", "confirm", now=LATER) is None
    assert storage.approvals.add_vote(expired.approval_id, "U_CAROL", "confirm", now=EXPIRY) is None
    assert storage.approvals.votes(expired.approval_id) == []


def test_the_rendered_message_is_remembered(storage):
    a, b = storage.approvals.create_many([new_approval(tool_call_id="call_1"), new_approval(tool_call_id="call_2")])
    ref = {"channel": "C1", "ts": "1700000000.000200"}
    assert storage.approvals.set_message_ref([a.approval_id, b.approval_id], ref) == 2
    assert storage.approvals.get(b.approval_id).message_ref == ref


def test_for_run_lists_a_steps_approvals_in_call_order(storage):
    storage.approvals.create_many([new_approval(tool_call_id="call_z"), new_approval(tool_call_id="call_a")])
    storage.approvals.create_many([new_approval(tool_call_id="call_m", step=2)])
    assert [a.tool_call_id for a in storage.approvals.for_run("run-1", step=1)] == ["call_z", "call_a"]
    assert [a.tool_call_id for a in storage.approvals.for_run("run-1")] == ["call_z", "call_a", "call_m"]


def test_pending_filters_by_platform_thread_and_approver(storage):
    listed, open_to_requester = storage.approvals.create_many(
        [new_approval(tool_call_id="call_1"), new_approval(tool_call_id="call_2", approvers=[])]
    )
    assert [a.approval_id for a in storage.approvals.pending(approver="U_CAROL")] == [listed.approval_id]
    assert [a.approval_id for a in storage.approvals.pending(approver="U_ANA")] == [open_to_requester.approval_id]
    assert storage.approvals.pending(approver="U_EVE") == []
    assert len(storage.approvals.pending(platform="slack", chat_history_id=THREAD)) == 2
    assert storage.approvals.pending(platform="teams") == []
    storage.approvals.decide(listed.approval_id, status="approved", decided_by="U_BOB", now=LATER)
    assert [a.approval_id for a in storage.approvals.pending()] == [open_to_requester.approval_id]


def test_places_an_approval_was_shown_in_are_recorded_once_and_only_those_count(storage, approval):
    assert not storage.places.shown_in(approval.approval_id, "slack:C1")  # shown nowhere yet

    storage.places.record([approval.approval_id], "slack:C1", now=NOW)
    storage.places.record([approval.approval_id, approval.approval_id], "slack:C1", now=LATER)  # again: no-op
    storage.places.record([approval.approval_id], "slack:home:U_BOB", now=LATER)

    assert storage.places.shown_in(approval.approval_id, "slack:C1")
    assert storage.places.shown_in(approval.approval_id, "slack:home:U_BOB")
    assert not storage.places.shown_in(approval.approval_id, "slack:C2")
    assert not storage.places.shown_in(approval.approval_id, "slack:home:U_CAROL")
    assert storage.db.execute("SELECT COUNT(*) FROM approval_places").fetchone()[0] == 2
    with pytest.raises(ValueError):
        storage.places.record([approval.approval_id], "")
