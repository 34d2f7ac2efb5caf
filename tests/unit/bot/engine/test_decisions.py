"""End to end through the engine: clicks become decisions that resume the paused run exactly once.

Real engine, real SQLite file, scripted model, recording surface; tools record every execution.
"""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from bot.engine.errors import (
    AlreadyDecided,
    ApprovalClosed,
    DatabaseUnavailable,
    DecidedButUnfinished,
    InvalidEdit,
    NotAnApprover,
    NotShownHere,
    UnknownAction,
)
from bot.engine.model import AdminRequest, DecisionRequest, conversation_place, home_place
from bot.hitl.blocking import REJECTION_FEEDBACK_TEMPLATE
from bot.messages import ChatRole, ToolCall
from tests.fakes.engine_kit import (
    ADMIN,
    CHANNEL,
    OTHER,
    PLATFORM,
    REQUESTER,
    WORKSPACE,
    asks,
    asks_for,
    bounded,
    call,
    dangling_calls,
    echoes_results,
    says,
    sent_to_llm,
    tool_results,
)
from tests.fakes.recording_surface import RecordingSurface


async def admin(h, text: str, actor: str = ADMIN) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, actor, text))


def decision(approval, actor: str = REQUESTER, action: str = "confirm", **kwargs) -> DecisionRequest:
    """A click on ``approval`` in its own thread (pass ``place=`` for a click elsewhere)."""
    kwargs.setdefault("place", approval.thread.place)
    return DecisionRequest(approval.approval_id, actor, action, **kwargs)


# --- approve, reject, modify ---------------------------------------------------------------------------


async def test_approving_runs_the_tool_once_and_posts_the_answer(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    [approval] = await h.paused_approvals("delete old.log")
    assert approval.tool_name == "delete_file" and approval.arguments == {"path": "old.log"}
    assert h.tools.executed == []
    assert (await h.run_of(approval.run_id)).status == "paused"

    result = await h.engine.decide(decision(approval))
    assert result.resumed and result.approval.status == "approved" and result.approval.decided_by == REQUESTER
    reply = await h.surface.next_reply()
    await h.engine.wait_idle()

    assert h.tools.executed == [("delete_file", {"path": "old.log"})]
    assert reply.text == "results: deleted old.log"
    assert (await h.run_of(approval.run_id)).status == "finished"
    assert h.surface.last_update_for(approval.approval_id).status == "approved"
    assert h.surface.updates[-1].message_ref == h.surface.renders[-1].message_ref
    assert [e.subject for e in await h.audit("approved")] == [approval.approval_id]
    assert dangling_calls(await h.history()) == []


class SlowUpdates(RecordingSurface):
    """A surface whose re-renders wait until the test releases them (a slow chat API)."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    async def update_approvals(self, thread, message_ref, approvals) -> None:
        await self.release.wait()
        await super().update_approvals(thread, message_ref, approvals)


async def test_render_later_returns_once_the_decision_is_stored_and_wait_idle_waits_for_the_rest(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    [approval] = await h.paused_approvals("delete old.log")
    slow = SlowUpdates()
    h.engine.register_surface(PLATFORM, slow)

    result = await bounded(h.engine.decide(decision(approval), render_later=True))

    assert result.approval.status == "approved" and slow.updates == [] and h.tools.executed == []
    assert [e.subject for e in await h.audit("approved")] == [approval.approval_id]
    slow.release.set()
    await bounded(h.engine.wait_idle())  # waits for the re-render and the resume it scheduled
    assert slow.updates[-1].approvals[0].status == "approved"
    assert h.tools.executed == [("delete_file", {"path": "old.log"})]


async def test_rejecting_with_feedback_tells_the_model_and_never_runs_the_tool(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="prod.db"), echoes_results])
    [approval] = await h.paused_approvals("delete prod.db")

    result = await h.engine.decide(decision(approval, action="reject", feedback="that is the production database"))
    await h.engine.wait_idle()

    assert result.approval.status == "rejected" and result.resumed
    assert h.tools.executed == []
    told = tool_results(sent_to_llm(h.generator))
    expected = REJECTION_FEEDBACK_TEMPLATE.format(tool_name="delete_file")
    assert told == [("delete_file", f"{expected} With user feedback: that is the production database", True)]
    assert h.surface.last_update_for(approval.approval_id).feedback == "that is the production database"
    assert dangling_calls(sent_to_llm(h.generator)) == []


async def test_modifying_runs_the_tool_with_exactly_the_merged_params_coerced_by_schema(harnesses):
    h = await harnesses.open(replies=[asks_for("scale_service", service="web", replicas=2), echoes_results])
    [approval] = await h.paused_approvals("scale web")

    edited = {"replicas": "5", "dry_run": "true", "zones": '["eu-1", "eu-2"]'}
    result = await h.engine.decide(decision(approval, action="modify", edited_params=edited))
    await h.engine.wait_idle()

    final = {"service": "web", "replicas": 5, "dry_run": True, "zones": ["eu-1", "eu-2"]}
    assert h.tools.executed == [("scale_service", final)]
    assert result.approval.status == "modified" and result.approval.final_arguments == final
    stored = await h.engine.storage.approvals.get(approval.approval_id)
    assert stored.final_arguments == final and stored.arguments == {"service": "web", "replicas": 2}
    sent = sent_to_llm(h.generator)
    assert any(m.role == ChatRole.USER and '"replicas": 5' in (m.text or "") for m in sent), "the model is told"
    assert tool_results(sent) == [("scale_service", "web scaled to 5", False)]
    [audited] = await h.audit("modified")
    assert audited.details["changed"] == ["dry_run", "replicas", "zones"]


async def test_modifying_to_the_same_values_is_a_plain_approval(harnesses):
    h = await harnesses.open(replies=[asks_for("scale_service", service="web", replicas=2), echoes_results])
    [approval] = await h.paused_approvals("scale web")

    result = await h.engine.decide(decision(approval, action="modify", edited_params={"replicas": "2"}))
    await h.engine.wait_idle()

    assert result.approval.status == "approved"
    assert h.tools.runs_of("scale_service") == [{"service": "web", "replicas": 2, "dry_run": False, "zones": None}]


async def test_an_invalid_modification_is_refused_per_field_and_decides_nothing(harnesses):
    h = await harnesses.open(replies=[asks_for("scale_service", service="web", replicas=2), echoes_results])
    [approval] = await h.paused_approvals("scale web")

    with pytest.raises(InvalidEdit) as refused:
        await h.engine.decide(decision(approval, action="modify", edited_params={"replicas": "many", "colour": "blue"}))
    await h.engine.wait_idle()

    assert set(refused.value.errors) == {"replicas", "colour"}
    assert "replicas" in str(refused.value)
    assert (await h.engine.get_approval(approval.approval_id)).status == "pending"
    assert (await h.run_of(approval.run_id)).status == "paused"
    assert h.tools.executed == [] and len(h.generator.calls) == 1
    [audited] = await h.audit("decision refused")
    assert audited.details["reason"] == "InvalidEdit"

    await h.engine.decide(decision(approval, action="modify", edited_params={"replicas": "3"}))
    await h.engine.wait_idle()
    assert h.tools.runs_of("scale_service") == [{"service": "web", "replicas": 3, "dry_run": False, "zones": None}]


# --- exactly once ---------------------------------------------------------------------------------------


async def test_fifty_concurrent_approvers_make_one_decision_and_one_execution(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    approvers = [f"U_AP{i:02d}" for i in range(50)]
    assert (await admin(h, "approvers delete_file " + " ".join(f"@{a}" for a in approvers))).startswith("Rule updated")
    [approval] = await h.paused_approvals("delete a.txt")

    outcomes = await bounded(
        asyncio.gather(*(h.engine.decide(decision(approval, actor=a)) for a in approvers), return_exceptions=True),
        within=20,
    )
    await h.engine.wait_idle()

    won = [o for o in outcomes if not isinstance(o, BaseException)]
    lost = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(won) == 1 and len(lost) == 49
    winner = won[0].approval.decided_by
    assert winner in approvers
    assert all(isinstance(o, AlreadyDecided) and o.decided_by == winner for o in lost), lost[:3]
    assert all(winner in str(o) for o in lost)
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert len(h.generator.calls) == 2 and len(h.surface.replies) == 1
    assert len(await h.audit("approved")) == 1 and len(await h.audit("decision refused")) == 49


async def test_a_double_click_decides_once_and_tells_the_second_click_who_decided(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")

    both = await asyncio.gather(
        h.engine.decide(decision(approval)), h.engine.decide(decision(approval)), return_exceptions=True
    )
    with pytest.raises(AlreadyDecided) as later:
        await h.engine.decide(decision(approval, action="reject"))
    await h.engine.wait_idle()

    assert sorted(type(o).__name__ for o in both) == ["AlreadyDecided", "DecisionResult"]
    assert later.value.decided_by == REQUESTER and later.value.status == "approved"
    assert str(later.value) == f"This approval was already approved by {REQUESTER}."
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert (await h.engine.get_approval(approval.approval_id)).status == "approved"


async def test_an_unauthorized_actor_changes_nothing_and_is_audited(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")

    with pytest.raises(NotAnApprover) as refused:
        await h.engine.decide(decision(approval, actor=OTHER))
    with pytest.raises(NotAnApprover):
        await h.engine.check_can_decide(approval.approval_id, OTHER, approval.thread.place)
    await h.engine.wait_idle()

    assert "Only the person who asked" in str(refused.value)
    assert (await h.engine.get_approval(approval.approval_id)).status == "pending"
    assert h.tools.executed == [] and h.surface.updates == []
    [audited] = await h.audit("decision refused")
    assert (audited.actor, audited.subject, audited.details["reason"]) == (OTHER, approval.approval_id, "NotAnApprover")
    assert await h.engine.pending_for(PLATFORM, OTHER) == []
    assert [v.approval_id for v in await h.engine.pending_for(PLATFORM, ADMIN)] == [approval.approval_id]

    await h.engine.decide(decision(approval, actor=ADMIN))  # an admin may decide for the requester
    await h.engine.wait_idle()
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]


async def test_after_the_decision_someone_who_may_not_decide_learns_neither_the_outcome_nor_who_decided(harnesses):
    h = await harnesses.open(
        replies=[asks(call("delete_file", path="a.txt"), call("delete_file", path="b.txt")), echoes_results]
    )
    first, second = await h.paused_approvals("clean up")
    await h.engine.approve_all(first.approval_id, REQUESTER, place=first.thread.place)
    await h.engine.wait_idle()

    refusals = []
    for attempt in (
        h.engine.decide(decision(first, actor=OTHER)),
        h.engine.decide(decision(second, actor=OTHER, action="reject")),
        h.engine.check_can_decide(first.approval_id, OTHER, first.thread.place),
        h.engine.approve_all(first.approval_id, OTHER, place=first.thread.place),
    ):
        with pytest.raises(NotAnApprover) as refused:
            await attempt
        refusals.append(str(refused.value))

    for sentence in refusals:
        assert sentence == "Only the person who asked and countersign admins can decide this call."
        assert "approved" not in sentence and REQUESTER not in sentence
    # someone who may decide is told what happened
    with pytest.raises(AlreadyDecided, match=f"approved by {REQUESTER}"):
        await h.engine.approve_all(first.approval_id, ADMIN, place=first.thread.place)


async def test_a_closed_approval_is_reported_closed_only_to_someone_who_may_decide_it(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("ok"), says("ok")])
    [approval] = await h.paused_approvals("delete a.txt")
    await h.say("never mind")  # supersedes the paused call

    with pytest.raises(NotAnApprover):
        await h.engine.decide(decision(approval, actor=OTHER))
    with pytest.raises(ApprovalClosed):
        await h.engine.decide(decision(approval, actor=REQUESTER))
    assert h.tools.executed == []


# --- where a click comes from -----------------------------------------------------------------------------


async def test_a_click_from_a_conversation_the_approval_was_never_shown_in_is_refused_and_audited(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")
    elsewhere = conversation_place(PLATFORM, "C_ELSEWHERE")

    with pytest.raises(NotShownHere) as refused:
        await h.engine.decide(decision(approval, place=elsewhere))
    with pytest.raises(NotShownHere):
        await h.engine.approve_all(approval.approval_id, REQUESTER, place=elsewhere)
    with pytest.raises(NotShownHere):
        await h.engine.check_can_decide(approval.approval_id, REQUESTER, elsewhere)
    await h.engine.wait_idle()

    assert str(refused.value) == (
        "This approval can't be decided from here; use the message or list where it was shown to you."
    )
    assert (await h.engine.get_approval(approval.approval_id)).status == "pending"
    assert h.tools.executed == [] and h.surface.updates == []
    audited = await h.audit("decision refused")
    assert [(e.details["reason"], e.details["place"]) for e in audited] == [("NotShownHere", elsewhere)] * 3

    await h.engine.decide(decision(approval))  # from its own thread it still works
    await h.engine.wait_idle()
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]


async def test_a_click_that_names_no_place_is_refused(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")

    with pytest.raises(NotShownHere):
        await h.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, "confirm"))
    with pytest.raises(NotShownHere):
        await h.engine.approve_all(approval.approval_id, REQUESTER)
    await h.engine.wait_idle()
    assert h.tools.executed == []


async def test_a_personal_list_and_the_pending_listing_become_places_the_approval_can_be_decided_from(harnesses):
    h = await harnesses.open(
        replies=[asks(call("delete_file", path="a.txt"), call("delete_file", path="b.txt")), echoes_results]
    )
    first, second = await h.paused_approvals("clean up")
    home = home_place(PLATFORM, REQUESTER)
    admin_channel = conversation_place(PLATFORM, "C_ADMIN")

    await h.engine.pending_for(PLATFORM, REQUESTER)  # listed without being shown anywhere: no new place
    with pytest.raises(NotShownHere):
        await h.engine.decide(decision(first, place=home))
    with pytest.raises(NotShownHere):
        await h.engine.decide(decision(second, place=admin_channel))
    with pytest.raises(NotShownHere):  # another person's App Home shows them nothing
        await h.engine.decide(decision(first, place=home_place(PLATFORM, ADMIN)))

    listed = await h.engine.pending_for(PLATFORM, REQUESTER, place=home)
    assert [v.approval_id for v in listed] == [first.approval_id, second.approval_id]
    await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, "C_ADMIN", OTHER, "pending"))
    with pytest.raises(NotShownHere):  # listed to someone who may not decide it: the channel is no place for it
        await h.engine.decide(decision(second, place=admin_channel))
    await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, "C_ADMIN", ADMIN, "pending"))
    await h.engine.decide(decision(first, place=home))
    await h.engine.decide(decision(second, place=admin_channel))
    await h.engine.wait_idle()

    assert sorted(h.tools.runs_of("delete_file"), key=str) == [{"path": "a.txt"}, {"path": "b.txt"}]


async def test_an_unknown_action_decides_nothing(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")

    with pytest.raises(UnknownAction):
        await h.engine.decide(decision(approval, action="approve_everything"))
    await h.engine.wait_idle()

    assert (await h.engine.get_approval(approval.approval_id)).status == "pending"
    assert h.tools.executed == [] and len(h.generator.calls) == 1
    [audited] = await h.audit("decision refused")
    assert audited.details["reason"] == "UnknownAction"


# --- quorum and four-eyes ---------------------------------------------------------------------------------


async def test_quorum_two_records_the_first_vote_refuses_a_repeat_and_decides_on_the_second(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    await admin(h, "approvers delete_file @U_ANA @U_BEN")
    assert "quorum=2" in await admin(h, "quorum delete_file 2")
    [approval] = await h.paused_approvals("delete a.txt")
    assert approval.quorum == 2

    first = await h.engine.decide(decision(approval, actor="U_ANA"))
    assert first.message == "Your approval was recorded (1/2)." and not first.resumed
    assert first.approval.status == "pending" and first.approval.votes == ("U_ANA",)
    assert h.surface.last_update_for(approval.approval_id).votes == ("U_ANA",)
    with pytest.raises(AlreadyDecided):
        await h.engine.decide(decision(approval, actor="U_ANA"))
    await h.engine.wait_idle()
    assert h.tools.executed == [] and (await h.run_of(approval.run_id)).status == "paused"

    second = await h.engine.decide(decision(approval, actor="U_BEN"))
    await h.engine.wait_idle()

    assert second.resumed and second.approval.status == "approved" and second.approval.decided_by == "U_BEN"
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert [e.actor for e in await h.audit("voted")] == ["U_ANA"]


async def test_under_a_quorum_one_reject_by_an_approver_rejects(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    await admin(h, "approvers delete_file @U_ANA @U_BEN")
    await admin(h, "quorum delete_file 2")
    [approval] = await h.paused_approvals("delete a.txt")

    await h.engine.decide(decision(approval, actor="U_ANA"))
    result = await h.engine.decide(decision(approval, actor="U_BEN", action="reject", feedback="not today"))
    await h.engine.wait_idle()

    assert result.resumed and result.approval.status == "rejected" and result.approval.decided_by == "U_BEN"
    assert h.tools.executed == []
    assert [r[2] for r in tool_results(sent_to_llm(h.generator))] == [True]


async def test_a_call_that_needs_a_quorum_cannot_be_edited(harnesses):
    h = await harnesses.open(replies=[asks_for("scale_service", service="web", replicas=2), echoes_results])
    await admin(h, "approvers scale_service @U_ANA @U_BEN")
    await admin(h, "quorum scale_service 2")
    [approval] = await h.paused_approvals("scale web")

    with pytest.raises(InvalidEdit):
        await h.engine.decide(decision(approval, actor="U_ANA", action="modify", edited_params={"replicas": "9"}))

    view = await h.engine.get_approval(approval.approval_id)
    assert view.status == "pending" and view.votes == ()
    assert h.tools.executed == []


async def test_four_eyes_refuses_the_requester_and_lets_another_approver_decide(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    await admin(h, "four-eyes delete_file on")
    [approval] = await h.paused_approvals("delete a.txt")

    with pytest.raises(NotAnApprover) as refused:
        await h.engine.decide(decision(approval, actor=REQUESTER))
    assert "Four-eyes" in str(refused.value)
    assert (await h.engine.get_approval(approval.approval_id)).status == "pending"

    await h.engine.decide(decision(approval, actor=ADMIN))
    await h.engine.wait_idle()
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]


# --- several approvals in one step ------------------------------------------------------------------------


async def test_a_step_with_two_approvals_resumes_only_after_both_are_decided(harnesses):
    h = await harnesses.open(
        replies=[
            asks(
                call("delete_file", path="a.txt"), call("read_logs", service="web"), call("delete_file", path="b.txt")
            ),
            echoes_results,
        ]
    )
    first, second = await h.paused_approvals("clean up")
    assert [a.arguments for a in (first, second)] == [{"path": "a.txt"}, {"path": "b.txt"}]
    assert h.tools.executed == [], "nothing in a paused step runs before it is decided"

    partial = await h.engine.decide(decision(first))
    await h.engine.wait_idle()
    assert not partial.resumed and h.tools.executed == []
    assert [v.status for v in partial.step] == ["approved", "pending"]

    final = await h.engine.decide(decision(second, action="reject"))
    await h.engine.wait_idle()

    assert final.resumed
    assert sorted(h.tools.executed) == [("delete_file", {"path": "a.txt"}), ("read_logs", {"service": "web"})]
    results = tool_results(sent_to_llm(h.generator))
    assert sorted(r[0] for r in results) == ["delete_file", "delete_file", "read_logs"]
    assert dangling_calls(sent_to_llm(h.generator)) == []


async def test_approve_all_decides_every_pending_call_of_the_step_at_once(harnesses):
    h = await harnesses.open(
        replies=[asks(call("delete_file", path="a.txt"), call("delete_file", path="b.txt")), echoes_results]
    )
    first, second = await h.paused_approvals("clean up")

    result = await h.engine.approve_all(first.approval_id, REQUESTER, place=first.thread.place)
    await h.engine.wait_idle()

    assert result.message == "Approved 2 call(s)."
    assert [v.status for v in await h.engine.step_approvals(second.approval_id)] == ["approved", "approved"]
    assert sorted(h.tools.runs_of("delete_file"), key=str) == [{"path": "a.txt"}, {"path": "b.txt"}]
    assert len(h.surface.replies) == 1


async def test_approve_all_by_someone_who_may_not_decide_approves_nothing(harnesses):
    h = await harnesses.open(
        replies=[asks(call("delete_file", path="a.txt"), call("delete_file", path="b.txt")), echoes_results]
    )
    first, _ = await h.paused_approvals("clean up")

    with pytest.raises(NotAnApprover):
        await h.engine.approve_all(first.approval_id, OTHER, place=first.thread.place)
    await h.engine.wait_idle()

    assert [v.status for v in await h.engine.step_approvals(first.approval_id)] == ["pending", "pending"]
    assert h.tools.executed == []


async def test_two_approvals_decided_at_the_same_moment_resume_the_run_once(harnesses):
    h = await harnesses.open(
        replies=[asks(call("delete_file", path="a.txt"), call("delete_file", path="b.txt")), echoes_results]
    )
    first, second = await h.paused_approvals("clean up")

    results = await asyncio.gather(h.engine.decide(decision(first)), h.engine.decide(decision(second, actor=ADMIN)))
    await h.engine.wait_idle()

    assert any(r.resumed for r in results)
    assert sorted(h.tools.runs_of("delete_file"), key=str) == [{"path": "a.txt"}, {"path": "b.txt"}]
    assert len(h.generator.calls) == 2 and len(h.surface.replies) == 1


async def test_concurrent_votes_on_a_quorum_make_one_decision(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    voters = [f"U_V{i}" for i in range(10)]
    await admin(h, "approvers delete_file " + " ".join(f"@{v}" for v in voters))
    await admin(h, "quorum delete_file 3")
    [approval] = await h.paused_approvals("delete a.txt")

    outcomes = await bounded(
        asyncio.gather(*(h.engine.decide(decision(approval, actor=v)) for v in voters), return_exceptions=True)
    )
    await h.engine.wait_idle()

    counted = [o for o in outcomes if not isinstance(o, BaseException)]
    decided = [o for o in counted if o.message == "Approved."]
    refused = [o for o in outcomes if isinstance(o, BaseException)]
    assert len(decided) == 1 and decided[0].resumed
    assert all(o.message.startswith("Your approval was recorded") for o in counted if o is not decided[0])
    assert refused and all(isinstance(o, AlreadyDecided) for o in refused)
    assert len(await h.audit("approved")) == 1
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert len(h.surface.replies) == 1


async def test_a_run_that_pauses_twice_is_resumed_twice_and_each_call_runs_once(harnesses):
    h = await harnesses.open(
        replies=[asks_for("delete_file", path="a.txt"), asks_for("delete_file", path="b.txt"), echoes_results]
    )
    [first] = await h.paused_approvals("delete a.txt then b.txt")

    await h.engine.decide(decision(first))
    assert (await h.surface.next_render()).approvals[0].approval_id == first.approval_id
    second_rendering = await h.surface.next_render()  # the resumed run paused again
    await h.engine.wait_idle()
    [second] = second_rendering.approvals
    assert second.arguments == {"path": "b.txt"} and second.run_id == first.run_id
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    assert (await h.run_of(first.run_id)).status == "paused"

    await h.engine.decide(decision(second))
    await h.engine.wait_idle()

    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}, {"path": "b.txt"}]
    assert h.surface.replies_in(h.thread()) == ["results: deleted b.txt"]
    assert dangling_calls(await h.history()) == []


async def test_a_call_id_shaped_like_name_colon_number_is_still_bound_to_its_decision(harnesses):
    # vLLM and some other OpenAI-compatible servers name calls like this; it is a real id, not a stand-in.
    odd = ToolCall("delete_file", {"path": "a.txt"}, id="functions.delete_file:0")
    harness = await harnesses.open(replies=[asks(odd), says("Deleted.")])
    [approval] = await harness.paused_approvals("delete a.txt")
    await harness.engine.decide(decision(approval))
    await harness.engine.wait_idle()
    assert harness.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    assert harness.surface.replies[-1].text == "Deleted."


async def test_a_decision_whose_follow_up_fails_in_the_database_is_not_reported_as_nothing_decided(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    await admin(h, "policy set delete_file once")
    [approval] = await h.paused_approvals("delete a.txt")
    # The database fails right after the decision (and its audit entry) is stored: the ask-once confirmation it
    # remembers next is refused.
    with sqlite3.connect(h.db_path) as raw:
        raw.execute(
            "CREATE TRIGGER confirmations_down BEFORE INSERT ON confirmations "
            "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
        )

    with pytest.raises(DecidedButUnfinished) as told:
        await h.engine.decide(decision(approval))
    await h.engine.wait_idle()

    assert "recorded" in str(told.value) and "nothing was decided" not in str(told.value)
    assert (await h.engine.get_approval(approval.approval_id)).status == "approved"
    assert [e.action for e in await h.audit() if e.subject == approval.approval_id] == ["approved"]
    # The decision claimed the run for its resume in the same write: the resume is not left behind.
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    assert h.surface.replies_in(h.thread())[-1] == "results: deleted a.txt"
    with pytest.raises(AlreadyDecided):  # deciding again changes nothing
        await h.engine.decide(decision(approval))
    with sqlite3.connect(h.db_path) as raw:
        raw.execute("DROP TRIGGER confirmations_down")
    await h.engine.lifecycle.recover()  # nothing is left to resume: the call ran once
    await h.engine.wait_idle()
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]


async def test_a_decision_whose_audit_entry_cannot_be_written_is_not_decided_and_can_be_made_again(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")
    # The decision and its audit entry are one write: a refused audit entry leaves the approval undecided.
    with sqlite3.connect(h.db_path) as raw:
        raw.execute(
            "CREATE TRIGGER audit_down BEFORE INSERT ON audit WHEN NEW.action = 'approved' "
            "BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
        )

    with pytest.raises(DatabaseUnavailable, match="nothing was decided"):
        await h.engine.decide(decision(approval))

    assert (await h.engine.get_approval(approval.approval_id)).status == "pending"
    assert h.tools.runs_of("delete_file") == []
    with sqlite3.connect(h.db_path) as raw:
        raw.execute("DROP TRIGGER audit_down")
    await h.engine.decide(decision(approval))
    await h.engine.wait_idle()
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    assert [e.action for e in await h.audit() if e.subject == approval.approval_id] == ["approved"]
