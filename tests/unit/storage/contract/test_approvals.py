"""Approvals on both backends: one decision per pending call, never after expiry; votes; expiry queries."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.canonical import args_digest
from storage import AlreadyExists, CorruptRecord, NotFound
from tests.fakes.storage_contract import create_run
from tests.fakes.storage_data import NOW, THREAD, new_approval

LATER = NOW + timedelta(minutes=5)
EXPIRY = NOW + timedelta(hours=1)


@pytest.fixture
async def approvals(storage):
    await create_run(storage)
    return storage.approvals


@pytest.fixture
async def approval(approvals):
    return (await approvals.create_many([new_approval()]))[0]


async def test_created_approvals_carry_everything_the_engine_needs(approvals):
    first, second = await approvals.create_many(
        [new_approval(tool_call_id="call_1"), new_approval(tool_call_id="call_2", arguments={"z": 1, "a": [2]})]
    )
    assert first.status == "pending"
    assert (first.run_id, first.step, first.tool_call_id, first.tool_name) == ("run-1", 1, "call_1", "delete_file")
    assert first.arguments == {"path": "/srv/app/a.txt"}
    assert first.args_digest == args_digest({"path": "/srv/app/a.txt"})
    assert first.approvers == ("U_BOB", "U_CAROL")
    assert (first.quorum, first.four_eyes, first.mode) == (1, False, "always")
    assert (first.created_at, first.expires_at) == (NOW, EXPIRY)
    assert first.message_ref is None and first.decided_by is None
    assert await approvals.get(second.approval_id) == second
    assert list(second.arguments) == ["z", "a"]  # shown to people in the order the model wrote them
    assert len({first.approval_id, second.approval_id}) == 2 and len(first.approval_id) >= 22


async def test_a_digest_that_does_not_match_the_arguments_is_refused(approvals):
    with pytest.raises(ValueError, match="args_digest"):
        await approvals.create_many([new_approval(args_digest=args_digest({"path": "/etc/passwd"}))])


async def test_create_many_stores_all_or_nothing(approvals):
    with pytest.raises(NotFound, match="run-404"):
        await approvals.create_many([new_approval(tool_call_id="call_1"), new_approval("run-404", "call_2")])
    await approvals.create_many([new_approval(tool_call_id="call_1")])
    with pytest.raises(AlreadyExists):
        await approvals.create_many([new_approval(tool_call_id="call_2"), new_approval(tool_call_id="call_1")])
    assert [a.tool_call_id for a in await approvals.for_run("run-1")] == ["call_1"]


async def test_the_first_decision_wins_and_later_ones_change_nothing(approvals, approval):
    assert await approvals.decide(
        approval.approval_id,
        status="modified",
        decided_by="U_BOB",
        feedback="only the copy",
        final_arguments={"path": "/srv/app/a.txt.bak"},
        now=LATER,
    )
    assert not await approvals.decide(approval.approval_id, status="rejected", decided_by="U_CAROL", now=LATER)
    decided = await approvals.get(approval.approval_id)
    assert (decided.status, decided.decided_by, decided.decided_at) == ("modified", "U_BOB", LATER)
    assert (decided.feedback, decided.final_arguments) == ("only the copy", {"path": "/srv/app/a.txt.bak"})


async def test_a_decision_after_expiry_or_of_an_unknown_approval_is_refused(approvals, approval):
    assert not await approvals.decide(approval.approval_id, status="approved", decided_by="U_BOB", now=EXPIRY)
    assert (await approvals.get(approval.approval_id)).status == "pending"
    with pytest.raises(ValueError):
        await approvals.decide(approval.approval_id, status="expired", decided_by="U_BOB", now=LATER)
    with pytest.raises(NotFound):
        await approvals.decide("forged-id", status="approved", decided_by="U_EVE", now=LATER)


async def test_expire_only_when_due_and_then_no_decision(approvals, approval):
    assert not await approvals.expire(approval.approval_id, now=LATER)
    assert await approvals.expire(approval.approval_id, now=EXPIRY)
    assert not await approvals.expire(approval.approval_id, now=EXPIRY)
    expired = await approvals.get(approval.approval_id)
    assert (expired.status, expired.decided_by) == ("expired", "countersign")
    assert not await approvals.decide(approval.approval_id, status="approved", decided_by="U_BOB", now=LATER)


async def test_due_for_expiry_lists_pending_due_approvals_soonest_first(approvals):
    short, long_, decided = await approvals.create_many(
        [
            new_approval(tool_call_id="call_short", ttl=timedelta(minutes=10)),
            new_approval(tool_call_id="call_long", ttl=timedelta(minutes=30)),
            new_approval(tool_call_id="call_decided", ttl=timedelta(minutes=5)),
        ]
    )
    await approvals.decide(decided.approval_id, status="approved", decided_by="U_BOB", now=NOW)
    assert await approvals.due_for_expiry(now=NOW + timedelta(minutes=9)) == []
    due = await approvals.due_for_expiry(now=NOW + timedelta(hours=1))
    assert [a.approval_id for a in due] == [short.approval_id, long_.approval_id]
    assert len(await approvals.due_for_expiry(now=NOW + timedelta(hours=1), limit=1)) == 1


async def test_closing_a_run_supersedes_only_its_pending_approvals(storage, approvals):
    await create_run(storage, "run-2", thread="slack:T1:C9:1.1")
    a, b, c = await approvals.create_many(
        [new_approval(tool_call_id="call_a"), new_approval(tool_call_id="call_b"), new_approval("run-2", "call_c")]
    )
    await approvals.decide(a.approval_id, status="approved", decided_by="U_BOB", now=LATER)
    assert await approvals.close_pending_for_run("run-1", "superseded", "a new message arrived") == [b.approval_id]
    assert await approvals.close_pending_for_run("run-1", "superseded", "again") == []
    closed = await approvals.get(b.approval_id)
    assert (closed.status, closed.feedback) == ("superseded", "a new message arrived")
    assert (await approvals.get(a.approval_id)).status == "approved"
    assert (await approvals.get(c.approval_id)).status == "pending"
    with pytest.raises(ValueError):
        await approvals.close_pending_for_run("run-2", "approved", "not a closing status")


async def test_votes_count_confirmations_once_per_voter(approvals):
    [approval] = await approvals.create_many([new_approval(quorum=2)])
    assert await approvals.add_vote(approval.approval_id, "U_BOB", "confirm", now=LATER) == 1
    assert await approvals.add_vote(approval.approval_id, "U_BOB", "confirm", now=LATER) == 1
    assert await approvals.add_vote(approval.approval_id, "U_DAN", "reject", now=LATER) == 1
    assert await approvals.add_vote(approval.approval_id, "U_CAROL", "confirm", now=LATER) == 2
    votes = await approvals.votes(approval.approval_id)
    assert [(v.voter, v.vote) for v in votes] == [("U_BOB", "confirm"), ("U_DAN", "reject"), ("U_CAROL", "confirm")]
    assert votes[0].voted_at == LATER
    with pytest.raises(ValueError):
        await approvals.add_vote(approval.approval_id, "U_EVE", "maybe", now=LATER)


async def test_a_respond_vote_counts_toward_quorum_and_keeps_the_latest_answer_as_pending_feedback(approvals):
    [approval] = await approvals.create_many([new_approval(quorum=3)])
    assert await approvals.add_vote(approval.approval_id, "U_BOB", "respond", now=LATER, feedback="done by hand") == 1
    assert await approvals.add_vote(approval.approval_id, "U_CAROL", "confirm", now=LATER) == 2
    assert await approvals.add_vote(approval.approval_id, "U_BOB", "respond", now=LATER, feedback="again") == 2
    stored = await approvals.get(approval.approval_id)
    assert stored.is_pending and stored.feedback == "done by hand", "a second vote of one voter changes nothing"


async def test_rejudging_tightens_a_pending_approval_and_voids_the_votes_that_no_longer_count(approvals):
    [approval, decided] = await approvals.create_many(
        [new_approval(quorum=2), new_approval(tool_call_id="call_2", quorum=2)]
    )
    await approvals.add_vote(approval.approval_id, "U_ANN", "confirm", now=LATER)
    await approvals.add_vote(approval.approval_id, "U_BOB", "confirm", now=LATER)
    assert await approvals.rejudge(
        approval.approval_id, approvers=["@sre", "U_BOB"], quorum=3, four_eyes=True, void_voters=["U_ANN"]
    )
    stored = await approvals.get(approval.approval_id)
    assert (stored.approvers, stored.quorum, stored.four_eyes) == (("@sre", "U_BOB"), 3, True)
    assert [(v.voter, v.vote) for v in await approvals.votes(approval.approval_id)] == [
        ("U_ANN", "void"),
        ("U_BOB", "confirm"),
    ]
    assert await approvals.add_vote(approval.approval_id, "U_CAROL", "confirm", now=LATER) == 2, "void is not counted"

    await approvals.decide(decided.approval_id, status="rejected", decided_by="U_BOB", now=LATER)
    assert not await approvals.rejudge(decided.approval_id, approvers=["@sre"], quorum=3, four_eyes=True)
    assert (await approvals.get(decided.approval_id)).quorum == 2, "a decided approval is never rejudged"
    with pytest.raises(NotFound):
        await approvals.rejudge("nope", approvers=[], quorum=1, four_eyes=False)


async def test_no_votes_once_decided_or_expired(approvals):
    decided, expired = await approvals.create_many(
        [new_approval(tool_call_id="call_1"), new_approval(tool_call_id="call_2")]
    )
    await approvals.decide(decided.approval_id, status="rejected", decided_by="U_BOB", now=LATER)
    assert await approvals.add_vote(decided.approval_id, "U_CAROL", "confirm", now=LATER) is None
    assert await approvals.add_vote(expired.approval_id, "U_CAROL", "confirm", now=EXPIRY) is None
    assert await approvals.votes(expired.approval_id) == []


async def test_the_rendered_message_is_remembered_and_steps_list_in_call_order(approvals):
    a, b = await approvals.create_many([new_approval(tool_call_id="call_z"), new_approval(tool_call_id="call_a")])
    await approvals.create_many([new_approval(tool_call_id="call_m", step=2)])
    ref = {"channel": "C1", "ts": "1700000000.000200"}
    assert await approvals.set_message_ref([a.approval_id, b.approval_id], ref) == 2
    assert await approvals.set_message_ref([], ref) == 0
    assert (await approvals.get(b.approval_id)).message_ref == ref
    assert [x.tool_call_id for x in await approvals.for_run("run-1", step=1)] == ["call_z", "call_a"]
    assert [x.tool_call_id for x in await approvals.for_run("run-1")] == ["call_z", "call_a", "call_m"]


async def test_pending_filters_by_platform_thread_and_approver(approvals):
    listed, open_to_requester = await approvals.create_many(
        [new_approval(tool_call_id="call_1"), new_approval(tool_call_id="call_2", approvers=[])]
    )
    assert [a.approval_id for a in await approvals.pending(approver="U_CAROL")] == [listed.approval_id]
    assert [a.approval_id for a in await approvals.pending(approver="U_ANA")] == [open_to_requester.approval_id]
    assert await approvals.pending(approver="U_EVE") == []
    assert len(await approvals.pending(platform="slack", chat_history_id=THREAD)) == 2
    assert await approvals.pending(platform="teams") == []
    await approvals.decide(listed.approval_id, status="approved", decided_by="U_BOB", now=LATER)
    assert [a.approval_id for a in await approvals.pending()] == [open_to_requester.approval_id]


async def test_a_review_keeps_the_full_result_and_its_edited_version(approvals):
    full = "line\n" * 5000  # far longer than any surface shows: storage keeps all of it
    (review,) = await approvals.create_many(
        [new_approval(tool_call_id="call_9", kind="review", result=full, mode="review")]
    )
    assert (review.kind, review.result, review.final_result, review.mode) == ("review", full, None, "review")

    assert await approvals.decide(
        review.approval_id, status="modified", decided_by="U_BOB", final_result="edited for the model", now=LATER
    )
    assert not await approvals.decide(review.approval_id, status="approved", decided_by="U_CAROL", now=LATER)
    decided = await approvals.get(review.approval_id)
    assert (decided.status, decided.result, decided.final_result) == ("modified", full, "edited for the model")
    assert [(a.kind, a.result) for a in await approvals.for_run("run-1")] == [("review", full)]


async def test_an_approval_and_a_review_of_the_same_call_live_side_by_side(approvals):
    (before,) = await approvals.create_many([new_approval(tool_call_id="call_1", mode="always+review")])
    assert (before.kind, before.result) == ("approval", None)
    assert await approvals.decide(before.approval_id, status="approved", decided_by="U_BOB", now=LATER)
    (after,) = await approvals.create_many(
        [new_approval(tool_call_id="call_1", step=2, kind="review", result="done", mode="always+review")]
    )
    assert [(a.step, a.kind, a.status) for a in await approvals.for_run("run-1")] == [
        (1, "approval", "approved"),
        (2, "review", "pending"),
    ]
    expired = await approvals.expire_due(now=EXPIRY + timedelta(hours=1))
    assert [(a.approval_id, a.kind) for a in expired] == [(after.approval_id, "review")]


async def test_a_review_without_its_result_or_of_an_unknown_kind_is_refused(approvals):
    with pytest.raises(ValueError, match="carries the result"):
        await approvals.create_many([new_approval(kind="review")])
    with pytest.raises(ValueError, match="carries the result"):
        await approvals.create_many([new_approval(result="a result on an approval")])
    with pytest.raises(ValueError, match="kind"):
        await approvals.create_many([new_approval(kind="audit")])


async def test_an_approval_is_marked_reminded_once_and_only_while_pending(approvals):
    first, second = await approvals.create_many(
        [new_approval(tool_call_id="call_1"), new_approval(tool_call_id="call_2")]
    )
    assert await approvals.mark_reminded(first.approval_id, now=LATER)
    assert not await approvals.mark_reminded(first.approval_id, now=EXPIRY + timedelta(days=30))  # for good
    assert await approvals.decide(second.approval_id, status="approved", decided_by="U_BOB", now=LATER)
    assert not await approvals.mark_reminded(second.approval_id, now=LATER)  # decided: nobody to remind
    with pytest.raises(NotFound):
        await approvals.mark_reminded("forged-id", now=LATER)


async def test_a_click_reads_the_approval_and_whether_it_was_shown_in_the_clicks_place_together(storage, approvals):
    a, b = await approvals.create_many([new_approval(tool_call_id="call_a"), new_approval(tool_call_id="call_b")])
    await storage.places.record([a.approval_id], "slack:C1", now=NOW)
    clicked = await approvals.get_clicked(a.approval_id, "slack:C1")
    assert (clicked.record, clicked.shown_here) == (await approvals.get(a.approval_id), True)
    assert not (await approvals.get_clicked(a.approval_id, "slack:C2")).shown_here  # shown elsewhere only
    assert not (await approvals.get_clicked(b.approval_id, "slack:C1")).shown_here  # the other call, never shown
    assert not (await approvals.get_clicked(a.approval_id, None)).shown_here  # no place: never shown "there"
    assert not (await approvals.get_clicked(a.approval_id, "")).shown_here
    with pytest.raises(NotFound):
        await approvals.get_clicked("nope", "slack:C1")


async def test_a_step_is_read_with_its_run_in_call_order_and_only_that_step(storage, approvals):
    a, b = await approvals.create_many([new_approval(tool_call_id="call_z"), new_approval(tool_call_id="call_a")])
    await approvals.create_many([new_approval(tool_call_id="call_m", step=2)])
    await approvals.decide(a.approval_id, status="approved", decided_by="U_BOB", now=LATER)
    paused = await approvals.step("run-1", 1)
    assert paused.run == await storage.runs.get("run-1")
    assert paused.approvals == await approvals.for_run("run-1", step=1)
    assert [(x.tool_call_id, x.status) for x in paused.approvals] == [("call_z", "approved"), ("call_a", "pending")]
    assert [x.tool_call_id for x in (await approvals.step("run-1", 2)).approvals] == ["call_m"]
    empty = await approvals.step("run-1", 3)  # a step without approvals: the run, and nothing else
    assert (empty.run.run_id, empty.approvals) == ("run-1", [])
    with pytest.raises(NotFound):
        await approvals.step("no-such-run", 1)


async def test_marking_approvals_rendered_returns_their_statuses_as_they_are_now(approvals):
    a, b = await approvals.create_many([new_approval(tool_call_id="call_a"), new_approval(tool_call_id="call_b")])
    await approvals.decide(b.approval_id, status="rejected", decided_by="U_BOB", now=LATER)  # a click before
    ref = {"channel": "C1", "ts": "1700000000.000300"}
    assert await approvals.mark_rendered([b.approval_id, a.approval_id], ref) == {
        b.approval_id: "rejected",
        a.approval_id: "pending",
    }
    assert [(await approvals.get(x.approval_id)).message_ref for x in (a, b)] == [ref, ref]
    assert await approvals.mark_rendered([], ref) == {}
    assert await approvals.mark_rendered(["nope"], ref) == {}


async def test_a_fully_decided_step_is_read_with_its_snapshot_and_only_then(backend):
    storage = backend.storage
    await create_run(storage)
    await storage.runs.transition("run-1", "running", "paused", snapshot_json={"stage": "decide", "n": 1}, step=1)
    a, b = await storage.approvals.create_many(
        [new_approval(tool_call_id="call_a"), new_approval(tool_call_id="call_b")]
    )
    await storage.approvals.create_many([new_approval(tool_call_id="call_old", step=0)])

    assert (await storage.approvals.step("run-1", 1)).snapshot is None  # two calls still to decide
    await storage.approvals.decide(a.approval_id, status="approved", decided_by="U_BOB", now=LATER)
    assert (await storage.approvals.step("run-1", 1)).snapshot is None  # one still to decide
    await storage.approvals.decide(b.approval_id, status="rejected", decided_by="U_BOB", now=LATER)
    decided = await storage.approvals.step("run-1", 1)
    assert decided.snapshot == await storage.runs.snapshot("run-1") == {"stage": "decide", "n": 1}
    # An older step's snapshot was replaced by this one: an older step never comes with a snapshot.
    await storage.approvals.decide(
        (await storage.approvals.step("run-1", 0)).approvals[0].approval_id,
        status="approved",
        decided_by="U_BOB",
        now=LATER,
    )
    assert (await storage.approvals.step("run-1", 0)).snapshot is None
    assert (await storage.approvals.step("run-1", 2)).snapshot is None  # a step without approvals
    # A damaged snapshot (not a JSON object) is not handed over: reading it alone says why.
    await backend.execute("UPDATE runs SET snapshot_json = '[1, 2]' WHERE run_id = 'run-1'")
    assert (await storage.approvals.step("run-1", 1)).snapshot is None
    with pytest.raises(CorruptRecord):
        await storage.runs.snapshot("run-1")


async def test_an_approvals_provenance_is_stored_and_read_back(approvals):
    provenance = {
        "tainted": [{"path": "host", "excerpt": "db-1; rm -rf /", "tool": "fetch_url", "step": 2, "user": None}],
        "escalated": True,
    }
    tainted, clean = await approvals.create_many(
        [new_approval(tool_call_id="call_1", provenance=provenance), new_approval(tool_call_id="call_2")]
    )

    assert tainted.provenance == provenance and clean.provenance is None
    assert (await approvals.get(tainted.approval_id)).provenance == provenance
    assert await approvals.decide(tainted.approval_id, status="approved", decided_by="U_BOB", now=LATER)
    assert (await approvals.get(tainted.approval_id)).provenance == provenance, "kept through the decision"


async def test_an_approvals_preview_is_stored_and_read_back(approvals):
    preview = {
        "status": "ok",
        "text": "3 pods will restart",
        "digest": "d" * 64,
        "approved": {"status": "ok", "text": "2 pods will restart", "digest": "a" * 64},
        "reason": "The preview changed since you approved.",
    }
    previewed, plain = await approvals.create_many(
        [
            new_approval(tool_call_id="call_1", preview=preview, provenance={"tainted": []}),
            new_approval(tool_call_id="call_2"),
        ]
    )

    assert previewed.preview == preview and plain.preview is None
    assert previewed.provenance == {"tainted": []}, "the column before it is not shifted"
    assert (await approvals.get(previewed.approval_id)).preview == preview
    assert await approvals.decide(previewed.approval_id, status="approved", decided_by="U_BOB", now=LATER)
    assert (await approvals.get(previewed.approval_id)).preview == preview, "kept through the decision"
    assert [r.preview for r in await approvals.for_run("run-1")] == [preview, None]
