"""A policy tightened while approvals wait (issue 30): each pending approval of the tool is judged again. ``deny``
closes it with a sentence; new approvers, a larger quorum or four-eyes re-render it and keep the votes that still
count (the others are shown as no longer counting); a looser policy changes nothing until someone decides."""

from __future__ import annotations

import pytest

from bot.engine.errors import NotAnApprover
from bot.engine.model import AdminRequest, DecisionRequest
from bot.engine.presentation import outcome_sentence
from bot.engine.rejudging import CLOSED_BY_POLICY, REJUDGED, denied_sentence
from tests.fakes.engine_kit import (
    ADMIN,
    CHANNEL,
    OTHER,
    PLATFORM,
    REQUESTER,
    WORKSPACE,
    asks_for,
    says,
    sent_to_llm,
)

ANN, BOB, SRE1, SRE2 = "U_ANN", "U_BOB", "U_SRE1", "U_SRE2"


async def admin(h, text: str) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, text))


def decision(view, actor: str, action: str = "confirm", **kwargs) -> DecisionRequest:
    return DecisionRequest(view.approval_id, actor, action, place=view.thread.place, **kwargs)


async def test_deny_closes_a_pending_approval_with_a_sentence_in_the_thread_the_card_and_the_audit(
    harnesses, database_url
):
    h = await harnesses.open(
        replies=[asks_for("delete_file", path="a.txt"), says("not deleted")], database_url=database_url
    )
    [view] = await h.paused_approvals("delete a.txt")

    answer = await admin(h, "policy set delete_file deny")
    await h.engine.wait_idle()

    assert "1 pending approval(s) closed (denied)" in answer
    closed = await h.engine.get_approval(view.approval_id)
    assert closed.status == "rejected" and closed.decided_by == ADMIN
    assert closed.feedback == denied_sentence("delete_file")
    card = h.surface.last_update_for(view.approval_id)
    assert card is not None and denied_sentence("delete_file") in outcome_sentence(card)
    assert any(denied_sentence("delete_file") in r.text for r in h.surface.replies), "said in the thread"
    assert h.tools.runs_of("delete_file") == []
    [result] = [m for m in sent_to_llm(h.generator) if m.tool_call_result is not None]
    assert denied_sentence("delete_file") in result.tool_call_result.result
    [audited] = await h.audit(CLOSED_BY_POLICY)
    assert audited.actor == ADMIN and audited.subject == view.approval_id
    assert (await h.run_of(view.run_id)).status == "finished"


async def test_new_approvers_and_a_larger_quorum_keep_the_votes_that_still_count_and_void_the_others(
    harnesses, database_url
):
    h = await harnesses.open(
        replies=[asks_for("delete_file", path="a.txt"), says("deleted")], database_url=database_url
    )
    await admin(h, f"approvers delete_file <@{ANN}> <@{BOB}> <@{SRE1}>")
    await admin(h, "quorum delete_file 3")
    [view] = await h.paused_approvals("delete a.txt")
    await h.engine.decide(decision(view, ANN))
    await h.engine.decide(decision(view, SRE1))
    await admin(h, f"group set sre <@{SRE1}> <@{SRE2}> <@{BOB}>")

    answer = await admin(h, "approvers delete_file @sre")
    await h.engine.wait_idle()

    assert "1 pending approval(s) now follow the stricter rule" in answer
    assert "1 earlier approval(s) no longer count" in answer
    record = await h.engine.get_approval(view.approval_id)
    assert record.is_pending and record.approvers == ("group:sre",) and record.votes == (SRE1,)
    assert record.void_votes == (ANN,)
    card = h.surface.last_update_for(view.approval_id)
    assert card is not None and card.approvers == ("group:sre",)
    assert f"{ANN}'s approval no longer counts: approvers are now @sre." in outcome_sentence(card)
    assert "(1/3 approvals)" in outcome_sentence(card)
    [audited] = await h.audit(REJUDGED)
    assert audited.details["no_longer_counted"] == [ANN] and audited.details["after"]["approvers"] == ["group:sre"]

    with pytest.raises(NotAnApprover):
        await h.engine.decide(decision(view, ANN))
    await h.engine.decide(decision(view, SRE2))
    assert (await h.engine.get_approval(view.approval_id)).is_pending, "2 of 3: Ann's vote is not counted"
    await h.engine.decide(decision(view, BOB))
    await h.engine.wait_idle()
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]


async def test_quorum_up_and_four_eyes_apply_to_a_waiting_call(harnesses, database_url):
    h = await harnesses.open(
        replies=[asks_for("delete_file", path="a.txt"), says("deleted")], database_url=database_url
    )
    await admin(h, f"approvers delete_file <@{REQUESTER}> <@{ANN}> <@{BOB}>")
    await admin(h, "quorum delete_file 2")
    [view] = await h.paused_approvals("delete a.txt")
    await h.engine.decide(decision(view, REQUESTER))

    await admin(h, "quorum delete_file 3")
    await admin(h, "four-eyes delete_file on")
    await h.engine.wait_idle()

    record = await h.engine.get_approval(view.approval_id)
    assert (record.quorum, record.four_eyes, record.votes, record.void_votes) == (3, True, (), (REQUESTER,))
    card = h.surface.last_update_for(view.approval_id)
    assert card is not None and "four-eyes is on, and they asked for this call" in outcome_sentence(card)
    await h.engine.decide(decision(view, ANN))
    await h.engine.decide(decision(view, BOB))
    assert (await h.engine.get_approval(view.approval_id)).is_pending, "needs 3 now, and the requester's is void"
    assert h.tools.runs_of("delete_file") == []


async def test_a_looser_policy_changes_nothing_until_someone_decides(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("deleted")])
    await admin(h, f"approvers delete_file <@{ANN}> <@{BOB}>")
    await admin(h, "quorum delete_file 2")
    [view] = await h.paused_approvals("delete a.txt")
    updates = len(h.surface.updates)

    answer = await admin(h, "quorum delete_file 1")
    answer += await admin(h, f"approvers delete_file <@{ANN}> <@{BOB}> <@{OTHER}>")
    answer += await admin(h, "policy set delete_file never")

    assert "Pending:" not in answer
    assert len(h.surface.updates) == updates, "not re-rendered"
    record = await h.engine.get_approval(view.approval_id)
    assert (record.approvers, record.quorum) == ((ANN, BOB), 2)
    with pytest.raises(NotAnApprover):
        await h.engine.decide(decision(view, OTHER))
    assert await h.audit(REJUDGED) == []


async def test_a_policy_change_in_another_channel_leaves_this_channels_approval_alone(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("deleted")])
    [view] = await h.paused_approvals("delete a.txt")

    await admin(h, "policy set delete_file deny #elsewhere")

    assert (await h.engine.get_approval(view.approval_id)).is_pending


async def test_deny_set_together_with_a_break_glass_delay_closes_the_waiting_call_too(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("not deleted")])
    [view] = await h.paused_approvals("delete a.txt")

    answer = await admin(h, "policy set delete_file deny breakglass off")
    await h.engine.wait_idle()

    assert "1 pending approval(s) closed (denied)" in answer
    assert (await h.engine.get_approval(view.approval_id)).status == "rejected"


async def test_a_group_losing_a_member_voids_their_vote_and_a_growing_group_changes_nothing(harnesses, database_url):
    h = await harnesses.open(
        replies=[asks_for("delete_file", path="a.txt"), says("deleted")], database_url=database_url
    )
    await admin(h, f"group set sre <@{SRE1}> <@{SRE2}> <@{BOB}>")
    await admin(h, "approvers delete_file @sre")
    await admin(h, "quorum delete_file 3")
    [view] = await h.paused_approvals("delete a.txt")
    await h.engine.decide(decision(view, SRE1))
    await h.engine.decide(decision(view, BOB))
    assert (await h.engine.get_approval(view.approval_id)).is_pending

    grown = await admin(h, f"group set sre <@{SRE1}> <@{SRE2}> <@{BOB}> <@{ANN}>")
    assert "Pending" not in grown, "a group that only grows changes nothing"
    assert await h.audit(REJUDGED) == []

    answer = await admin(h, f"group set sre <@{SRE1}> <@{SRE2}> <@{ANN}>")
    await h.engine.wait_idle()

    assert "1 earlier approval(s) no longer count" in answer
    record = await h.engine.get_approval(view.approval_id)
    assert record.is_pending and record.votes == (SRE1,) and record.void_votes == (BOB,)
    card = h.surface.last_update_for(view.approval_id)
    assert card is not None and f"{BOB}'s approval no longer counts: approvers are now @sre." in outcome_sentence(card)
    [audited] = await h.audit(REJUDGED)
    assert audited.details["no_longer_counted"] == [BOB]
    await h.engine.decide(decision(view, SRE2))
    assert (await h.engine.get_approval(view.approval_id)).is_pending, "2 of 3: Bob's vote is not counted"
    await h.engine.decide(decision(view, ANN))
    await h.engine.wait_idle()
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]
