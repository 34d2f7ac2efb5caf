"""Respond through the engine (issue 30): the approver's text is the call's answer, the tool never runs, the ledger
records the call as answered by a person, the audit has the decision, and the same rules as every decision apply."""

from __future__ import annotations

import pytest

from bot.engine.errors import NotAnApprover
from bot.engine.ledger import ledger_key
from bot.engine.model import AdminRequest, DecisionRequest
from bot.engine.presentation import outcome_sentence
from bot.engine.responding import RespondNotAllowed
from bot.hitl.respond import HUMAN_RESPONSE_PREFIX
from bot.tools import Tool, tool
from tests.fakes.engine_kit import ADMIN, CHANNEL, OTHER, PLATFORM, REQUESTER, WORKSPACE, asks_for, says, sent_to_llm


def respondable_tools(ran: list[str]) -> list[Tool]:
    @tool(respondable=True)
    def restart_service(service: str) -> str:
        """Restart a service.

        :param service: The service.
        """
        ran.append(service)
        return f"restarted {service}"

    return [restart_service]


def decision(view, action: str, actor: str = REQUESTER, **kwargs) -> DecisionRequest:
    return DecisionRequest(view.approval_id, actor, action, place=view.thread.place, **kwargs)


async def test_a_respond_answers_in_the_tools_place(harnesses, database_url):
    ran: list[str] = []
    h = await harnesses.open(
        replies=[asks_for("restart_service", service="web"), says("ok, noted")],
        extra_tools=respondable_tools(ran),
        database_url=database_url,
    )
    [view] = await h.paused_approvals("restart web")
    assert view.respondable

    await h.engine.decide(decision(view, "respond", feedback="  I restarted it by hand  "))
    await h.engine.wait_idle()

    assert ran == [], "the tool never runs"
    decided = await h.engine.get_approval(view.approval_id)
    assert decided.status == "responded" and decided.feedback == "I restarted it by hand"
    assert outcome_sentence(decided).endswith("instead of running the tool: I restarted it by hand")
    [answer] = [m for m in sent_to_llm(h.generator) if m.tool_call_result is not None]
    assert answer.tool_call_result.result == HUMAN_RESPONSE_PREFIX + "I restarted it by hand"
    assert not answer.tool_call_result.error
    record = await h.engine.storage.approvals.get(view.approval_id)
    entry = await h.engine.storage.ledger.get(ledger_key(view.run_id, record.tool_call_id))
    assert entry is not None and entry.status == "done"
    assert entry.result == HUMAN_RESPONSE_PREFIX + "I restarted it by hand"
    [audited] = await h.audit("responded")
    assert audited.actor == REQUESTER and audited.details["feedback"] == "I restarted it by hand"
    assert (await h.run_of(view.run_id)).status == "finished"


async def test_respond_is_refused_on_a_tool_that_is_not_respondable_and_without_text(harnesses):
    ran: list[str] = []
    h = await harnesses.open(
        replies=[asks_for("delete_file", path="a.txt"), asks_for("restart_service", service="web"), says("ok")],
        extra_tools=respondable_tools(ran),
    )
    [view] = await h.paused_approvals("delete a.txt")
    assert not view.respondable
    with pytest.raises(RespondNotAllowed, match="respondable is off"):
        await h.engine.decide(decision(view, "respond", feedback="done by hand"))
    assert (await h.engine.get_approval(view.approval_id)).is_pending
    refused = await h.audit()
    assert any("refused" in e.action for e in refused)

    await h.engine.decide(decision(view, "confirm"))
    await h.engine.wait_idle()
    [web] = h.surface.renders[-1].approvals
    with pytest.raises(RespondNotAllowed, match="needs some text"):
        await h.engine.decide(decision(web, "respond", feedback="   "))
    assert (await h.engine.get_approval(web.approval_id)).is_pending


async def test_only_an_approver_may_respond_and_a_respond_closes_a_quorum(harnesses):
    ran: list[str] = []
    h = await harnesses.open(
        replies=[asks_for("restart_service", service="web"), says("ok")], extra_tools=respondable_tools(ran)
    )
    await h.engine.admin(
        AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, f"approvers restart_service <@{ADMIN}> <@{REQUESTER}>")
    )
    assert "quorum=2" in await h.engine.admin(
        AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, "quorum restart_service 2")
    )
    [view] = await h.paused_approvals("restart web")
    with pytest.raises(NotAnApprover):
        await h.engine.decide(decision(view, "respond", actor=OTHER, feedback="by hand"))

    result = await h.engine.decide(decision(view, "confirm", actor=ADMIN))
    assert result.approval.is_pending, "one vote of two"
    await h.engine.decide(decision(view, "respond", actor=REQUESTER, feedback="INC-4411"))
    await h.engine.wait_idle()

    assert ran == []
    assert (await h.engine.get_approval(view.approval_id)).status == "responded"


async def test_a_respond_is_one_vote_of_a_quorum_and_the_reached_quorum_answers_with_it(harnesses, database_url):
    """Quorum 2, Respond first, then Approve: the Respond alone decides nothing (1/2); the Approve reaches the quorum
    and, a Respond being among the votes, the call is answered by a person with that text (the tool never runs)."""
    ran: list[str] = []
    h = await harnesses.open(
        replies=[asks_for("restart_service", service="web"), says("ok")],
        extra_tools=respondable_tools(ran),
        database_url=database_url,
    )
    await h.engine.admin(
        AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, f"approvers restart_service <@{ADMIN}> <@{REQUESTER}>")
    )
    await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, "quorum restart_service 2"))
    [view] = await h.paused_approvals("restart web")

    first = await h.engine.decide(decision(view, "respond", actor=REQUESTER, feedback="restarted it by hand"))
    assert first.approval.is_pending and first.message == "Your answer was recorded (1/2)."
    assert first.approval.votes == (REQUESTER,)
    [voted] = await h.audit("voted")
    assert voted.details["vote"] == "respond" and voted.details["feedback"] == "restarted it by hand"

    await h.engine.decide(decision(view, "confirm", actor=ADMIN))
    await h.engine.wait_idle()

    assert ran == []
    decided = await h.engine.get_approval(view.approval_id)
    assert decided.status == "responded" and decided.feedback == "restarted it by hand"
    [answer] = [m for m in sent_to_llm(h.generator) if m.tool_call_result is not None]
    assert answer.tool_call_result.result == HUMAN_RESPONSE_PREFIX + "restarted it by hand"
    record = await h.engine.storage.approvals.get(view.approval_id)
    entry = await h.engine.storage.ledger.get(ledger_key(view.run_id, record.tool_call_id))
    assert entry is not None and entry.result == HUMAN_RESPONSE_PREFIX + "restarted it by hand"
    [audited] = await h.audit("responded")
    assert audited.actor == ADMIN and audited.details["feedback"] == "restarted it by hand"


async def test_an_admin_allows_respond_on_a_tool_by_policy_and_turns_it_off_again(harnesses, database_url):
    h = await harnesses.open(
        replies=[asks_for("delete_file", path="a.txt"), says("ok"), asks_for("delete_file", path="b.txt")],
        database_url=database_url,
    )
    answer = await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, "respondable delete_file on"))
    assert answer == "Approvers of delete_file may now answer in its place (Respond)."
    [audited] = await h.audit("respondable")
    assert audited.actor == ADMIN and audited.details["fields"] == {"respondable": "on"}
    refused = await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, OTHER, "respondable delete_file off"))
    assert "admin" in refused.lower()

    [view] = await h.paused_approvals("delete a.txt")
    assert view.respondable
    await h.engine.decide(decision(view, "respond", feedback="I deleted it by hand"))
    await h.engine.wait_idle()
    assert (await h.engine.get_approval(view.approval_id)).status == "responded"
    assert h.tools.runs_of("delete_file") == []

    await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, "respondable delete_file off"))
    [later] = await h.paused_approvals("delete b.txt")
    assert not later.respondable
    with pytest.raises(RespondNotAllowed, match="respondable is off"):
        await h.engine.decide(decision(later, "respond", feedback="by hand"))
