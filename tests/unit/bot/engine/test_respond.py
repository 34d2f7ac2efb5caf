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
