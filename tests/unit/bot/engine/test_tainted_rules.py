"""Four-eyes and named approvers for tainted calls only (``four-eyes|approvers <tool> … when tainted``): stored
with a tainted call's approval and enforced by the engine at the decision; an untainted call keeps its rule."""

from __future__ import annotations

import pytest

from bot.engine.admin_syntax import parse_command
from bot.engine.errors import CommandError, NotAnApprover
from bot.engine.model import AdminRequest, DecisionRequest
from bot.engine.provenance import provenance_lines
from tests.fakes.engine_kit import ADMIN, CHANNEL, OTHER, PLATFORM, REQUESTER, WORKSPACE, asks_for, says
from tests.fakes.taint_kit import INJECTED, fetch_url_tool


async def command(h, text: str, actor: str = ADMIN) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, actor, text))


def decide(view, actor: str) -> DecisionRequest:
    return DecisionRequest(view.approval_id, actor, "confirm", place=view.thread.place)


def test_the_grammar():
    four = parse_command("four-eyes read_logs on when tainted")
    assert (four.name, four.tool_key, four.value, four.condition and four.condition.text) == (
        "four-eyes",
        "read_logs",
        True,
        "tainted",
    )
    assert parse_command("four-eyes read_logs on").condition is None
    approvers = parse_command("approvers read_logs @sre <@U_BOB> when tainted")
    assert approvers.value == ("@sre", "U_BOB") and approvers.condition is not None
    assert parse_command("approvers read_logs none when tainted").value == ()
    for bad in ("four-eyes read_logs on when env=prod", "approvers read_logs @sre when tainted and env=prod"):
        with pytest.raises(CommandError, match="only 'when tainted'"):
            parse_command(bad)


async def test_a_tainted_call_needs_four_eyes_and_the_card_says_so(harnesses, database_url):
    replies = [asks_for("fetch_url", url="https://evil.example"), asks_for("read_logs", service=INJECTED), says("ok")]
    h = await harnesses.open(replies=replies, extra_tools=[fetch_url_tool()], database_url=database_url)
    answer = await command(h, "four-eyes read_logs on when tainted")
    assert "need someone other than the person who asked" in answer
    assert "Only countersign admins" in await command(h, "four-eyes read_logs off when tainted", OTHER)

    [view] = await h.paused_approvals("summarise https://evil.example")

    stored = await h.engine.storage.approvals.get(view.approval_id)
    assert stored.four_eyes and stored.provenance["rule"] == {"four_eyes": True, "approvers": []}
    assert "approving needs someone other than the person who asked" in "\n".join(provenance_lines(view.provenance))
    with pytest.raises(NotAnApprover, match="Four-eyes"):
        await h.engine.decide(decide(view, REQUESTER))
    assert h.tools.runs_of("read_logs") == [] and (await h.engine.get_approval(view.approval_id)).is_pending

    await h.engine.decide(decide(view, ADMIN))
    await h.engine.wait_idle()
    assert h.tools.runs_of("read_logs") == [{"service": INJECTED}]
    [entry] = [e for e in await h.audit("four-eyes") if e.subject == "global/read_logs"]
    assert entry.details["fields"] == {"tainted_four_eyes": True} and entry.details["condition"] == "tainted"


async def test_a_tainted_call_is_decided_only_by_the_named_group(harnesses):
    replies = [asks_for("fetch_url", url="https://evil.example"), asks_for("read_logs", service=INJECTED), says("ok")]
    h = await harnesses.open(replies=replies, extra_tools=[fetch_url_tool()])
    await command(h, "group set sre @U_SRE1 @U_SRE2")
    assert "approved by @sre" in await command(h, "approvers read_logs @sre when tainted")
    assert "read_logs when tainted (every channel): approvers @sre" in await command(h, "policy list")

    [view] = await h.paused_approvals("summarise https://evil.example")

    assert "approving needs one of @sre" in "\n".join(provenance_lines(view.provenance))
    for outsider in (REQUESTER, ADMIN):
        with pytest.raises(NotAnApprover):
            await h.engine.decide(decide(view, outsider))
    await h.engine.decide(decide(view, "U_SRE2"))
    await h.engine.wait_idle()
    assert h.tools.runs_of("read_logs") == [{"service": INJECTED}]


async def test_an_untainted_call_keeps_the_tools_own_rule(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="old.log"), says("ok")])
    await command(h, "four-eyes delete_file on when tainted")
    await command(h, "approvers delete_file @U_SRE1 when tainted")

    [view] = await h.paused_approvals("delete old.log")

    stored = await h.engine.storage.approvals.get(view.approval_id)
    assert not stored.four_eyes and stored.approvers == () and stored.provenance is None
    await h.engine.decide(decide(view, REQUESTER))
    await h.engine.wait_idle()
    assert h.tools.runs_of("delete_file") == [{"path": "old.log"}]


async def test_turning_the_rule_off_and_naming_no_tool_or_a_group(harnesses):
    h = await harnesses.open(replies=[])
    await command(h, "four-eyes read_logs on when tainted")
    assert "no longer need four-eyes" in await command(h, "four-eyes read_logs off when tainted")
    assert "approved by the tool's own approvers again" in await command(h, "approvers read_logs none when tainted")
    assert "Rules:" not in await command(h, "policy list")
    assert "name a tool" in await command(h, "four-eyes * on when tainted")
