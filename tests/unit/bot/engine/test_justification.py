"""Justification through the engine: ``justification <tool> required`` makes Approve need a reason, kept with the
decision, on the decided card and in the audit."""

from __future__ import annotations

import pytest

from bot.engine.justification import JustificationRequired, request_reason, request_reason_lines
from bot.engine.model import AdminRequest, DecisionRequest
from bot.engine.presentation import outcome_sentence
from tests.fakes.engine_kit import ADMIN, CHANNEL, PLATFORM, REQUESTER, WORKSPACE, asks_for, says


async def command(h, text: str, actor: str = ADMIN) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, actor, text))


def decision(view, action: str = "confirm", **kwargs) -> DecisionRequest:
    return DecisionRequest(view.approval_id, REQUESTER, action, place=view.thread.place, **kwargs)


async def test_approve_without_a_reason_decides_nothing_and_with_one_it_is_kept_everywhere(harnesses, database_url):
    h = await harnesses.open(replies=[asks_for("delete_file", path="old.log"), says("done")], database_url=database_url)
    assert "needs a short reason" in await command(h, "justification delete_file required")
    [view] = await h.paused_approvals("delete old.log")

    with pytest.raises(JustificationRequired, match="needs a short reason"):
        await h.engine.decide(decision(view))
    assert (await h.engine.get_approval(view.approval_id)).is_pending and h.tools.runs_of("delete_file") == []
    with pytest.raises(JustificationRequired):
        await h.engine.decide(decision(view, feedback="   "))

    await h.engine.decide(decision(view, feedback="disk full on web-3, ticket OPS-17"))
    await h.engine.wait_idle()

    assert h.tools.runs_of("delete_file") == [{"path": "old.log"}]
    decided = await h.engine.get_approval(view.approval_id)
    assert decided.feedback == "disk full on web-3, ticket OPS-17"
    assert outcome_sentence(decided).endswith("Reason: disk full on web-3, ticket OPS-17")
    [approved] = await h.audit("approved")
    assert approved.details["feedback"] == "disk full on web-3, ticket OPS-17"


async def test_off_lists_and_only_admins_change_it(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.log"), says("done")])
    assert "Only countersign admins" in await command(h, "justification delete_file required", actor=REQUESTER)
    assert await command(h, "justification list") == "No tool needs a reason."
    await command(h, "justification delete_file required")
    assert await command(h, "justification list") == "Approving needs a reason for: delete_file"
    assert "no longer needs" in await command(h, "justification delete_file off")
    assert "Unknown tool" in await command(h, "justification nope required")
    [view] = await h.paused_approvals("delete a.log")

    await h.engine.decide(decision(view))
    await h.engine.wait_idle()

    assert h.tools.runs_of("delete_file") == [{"path": "a.log"}]
    assert [e.details["fields"] for e in await h.audit("justification")] == [
        {"justification": "off"},
        {"justification": "required"},
    ]


async def test_reject_needs_no_reason_and_an_edit_does(harnesses):
    h = await harnesses.open(replies=[asks_for("scale_service", service="api", replicas=3), says("ok")])
    await command(h, "justification scale_service required")
    [view] = await h.paused_approvals("scale api")

    with pytest.raises(JustificationRequired):
        await h.engine.decide(decision(view, "modify", edited_params={"replicas": 4}))
    await h.engine.decide(decision(view, "reject"))
    assert (await h.engine.get_approval(view.approval_id)).status == "rejected"


async def test_the_requesters_request_may_carry_the_reason_instead(harnesses, database_url):
    h = await harnesses.open(replies=[asks_for("delete_file", path="old.log"), says("done")], database_url=database_url)
    await command(h, "justification delete_file required")
    [view] = await h.paused_approvals("delete old.log because the disk is full, OPS-17")

    assert view.request_reason == "the disk is full, OPS-17"
    assert request_reason_lines(view) == ["Reason given by the requester: the disk is full, OPS-17"]
    [paused] = await h.audit("paused")
    assert paused.details["request_reasons"] == {view.approval_id: "the disk is full, OPS-17"}

    await h.engine.decide(decision(view))  # no reason of the approver's own: the request's stands
    await h.engine.wait_idle()

    assert h.tools.runs_of("delete_file") == [{"path": "old.log"}]
    decided = await h.engine.get_approval(view.approval_id)
    assert decided.request_reason == "the disk is full, OPS-17" and decided.feedback is None
    assert request_reason_lines(decided), "still shown on the decided card"
    [approved] = await h.audit("approved")
    assert approved.details["request_reason"] == "the disk is full, OPS-17"


async def test_a_request_without_because_still_needs_the_approvers_reason(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="old.log"), says("done")])
    await command(h, "justification delete_file required")
    [view] = await h.paused_approvals("delete old.log, because")

    assert view.request_reason is None and request_reason_lines(view) == []
    with pytest.raises(JustificationRequired):
        await h.engine.decide(decision(view))


def test_the_reason_is_the_text_after_the_first_because():
    assert request_reason("<@B1> restart api BECAUSE: the disk is\n full") == "the disk is full"
    assert request_reason("restart it because of OPS-17 because why not") == "of OPS-17 because why not"
    assert request_reason("restart the becauseway service") is None, "a whole word only"
    assert request_reason("restart it") is None and request_reason(None) is None
    assert len(request_reason("because " + "x" * 900) or "") == 500
