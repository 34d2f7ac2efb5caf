"""Provenance end to end through the engine: a tainted call asks, its card and audit entry say where from."""

from __future__ import annotations

import pytest

from bot.engine.conditions import parse_condition
from bot.engine.model import AdminRequest, DecisionRequest
from bot.engine.provenance import provenance_lines
from tests.fakes.engine_kit import (
    ADMIN,
    CHANNEL,
    OTHER,
    PLATFORM,
    REQUESTER,
    WORKSPACE,
    asks_for,
    says,
)
from tests.fakes.taint_kit import INJECTED, fetch_url_tool


async def command(h, text: str) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, text))


def injected_run(service: str = INJECTED) -> list:
    """The model fetches a page, then calls ``read_logs`` (a ``never`` tool) with what the page told it."""
    return [asks_for("fetch_url", url="https://evil.example"), asks_for("read_logs", service=service), says("done")]


async def test_a_never_tool_asks_when_its_argument_came_from_an_untrusted_result(harnesses, database_url):
    h = await harnesses.open(replies=injected_run(), extra_tools=[fetch_url_tool()], database_url=database_url)

    [view] = await h.paused_approvals("summarise https://evil.example")

    assert view.tool_name == "read_logs" and view.policy_mode == "always", "never, asked because tainted"
    assert h.tools.runs_of("read_logs") == []
    [taint] = view.provenance["tainted"]
    assert (taint["path"], taint["tool"], taint["step"]) == ("service", "fetch_url", 1)
    assert view.provenance["escalated"] is True
    lines = provenance_lines(view.provenance)
    assert lines[0].startswith("⚠ service is from the output of `fetch_url` (step 1)") and INJECTED in lines[0]
    [paused] = await h.audit("paused")
    assert paused.details["tainted"] == {
        view.approval_id: [{"path": "service", "tool": "fetch_url", "step": 1, "user": None}]
    }
    stored = await h.engine.storage.approvals.get(view.approval_id)
    assert stored.provenance == view.provenance, "stored with the approval"


async def test_the_taint_survives_a_restart_and_shows_on_the_decided_card(harnesses):
    h = await harnesses.open(replies=injected_run(), extra_tools=[fetch_url_tool()])
    [view] = await h.paused_approvals("summarise https://evil.example")
    h2 = await harnesses.reopen(h)

    await h2.engine.decide(DecisionRequest(view.approval_id, REQUESTER, "confirm", place=view.thread.place))
    await h2.engine.wait_idle()

    assert h2.tools.runs_of("read_logs") == [{"service": INJECTED}]
    decided = await h2.engine.get_approval(view.approval_id)
    assert decided.status == "approved" and decided.provenance == view.provenance


async def test_no_taint_for_what_the_requester_typed_or_short_strings(harnesses):
    replies = [
        asks_for("fetch_url", url="https://evil.example"),
        asks_for("read_logs", service=INJECTED),
        asks_for("read_logs", service="rm -rf"),
        says("done"),
    ]
    h = await harnesses.open(replies=replies, extra_tools=[fetch_url_tool()])

    await h.say(f"fetch the page, then read the logs of {INJECTED}")

    assert h.surface.renders == [], "nothing asked"
    assert h.tools.runs_of("read_logs") == [{"service": INJECTED}, {"service": "rm -rf"}]


async def test_another_persons_message_in_the_thread_taints_the_requesters_run(harnesses):
    h = await harnesses.open(
        replies=[says("noted"), asks_for("read_logs", service=INJECTED), says("done")], reply_mode="all"
    )
    await h.say(f"someone please read the logs of {INJECTED}", user=OTHER)

    [view] = await h.paused_approvals("do what they said")

    assert view.provenance["tainted"][0]["user"] == OTHER
    assert "a message by another person" in provenance_lines(view.provenance)[0]


async def test_when_tainted_rules(harnesses):
    h = await harnesses.open(replies=injected_run(), extra_tools=[fetch_url_tool()])
    assert "tainted" in await command(h, "policy set read_logs never when tainted")
    await h.say("summarise https://evil.example")
    assert h.surface.renders == [] and h.tools.runs_of("read_logs") == [{"service": INJECTED}], "the admin chose"

    h2 = await harnesses.open(replies=injected_run(), extra_tools=[fetch_url_tool()])
    await command(h2, "policy set delete_file never")
    await command(h2, "policy set read_logs deny when tainted")
    await h2.say("summarise https://evil.example")
    assert h2.surface.renders == [] and h2.tools.runs_of("read_logs") == [], "denied"


async def test_when_tainted_always_asks_a_tool_that_runs_untainted_calls(harnesses):
    h = await harnesses.open(
        replies=[asks_for("read_logs", service="payments-api"), says("ok"), *injected_run()],
        extra_tools=[fetch_url_tool()],
    )
    await command(h, "policy set read_logs always when tainted")
    await h.say("read the logs of payments-api")
    assert h.surface.renders == []

    [view] = await h.paused_approvals("summarise https://evil.example", thread="t2")
    assert view.policy_mode == "always" and view.provenance["escalated"] is False, "asked by the rule"


def test_the_tainted_condition_parses_and_matches_only_a_marked_call():
    condition = parse_condition("env=prod and TAINTED")

    assert condition.text == "env=prod and tainted"
    assert parse_condition(condition.text) == condition
    assert not condition.matches({"env": "prod"})
    from bot.engine.conditions import TAINT_FIELD

    assert condition.matches({"env": "prod", TAINT_FIELD: True})


@pytest.mark.parametrize("mode", ["deny"])
async def test_a_deny_tool_stays_denied_when_tainted(harnesses, mode):
    h = await harnesses.open(replies=injected_run(), extra_tools=[fetch_url_tool()])
    await command(h, f"policy set read_logs {mode}")
    await h.say("summarise https://evil.example")
    assert h.surface.renders == [] and h.tools.runs_of("read_logs") == []


async def test_a_process_resuming_the_run_rebuilds_the_index_from_its_history(harnesses, database_url):
    replies = [
        asks_for("fetch_url", url="https://evil.example"),
        asks_for("delete_file", path="/tmp/cache"),  # always: pauses, untainted
        asks_for("read_logs", service=INJECTED),  # in the new process: tainted by the result before the pause
        says("done"),
    ]
    h = await harnesses.open(replies=replies, extra_tools=[fetch_url_tool()], database_url=database_url)
    [first] = await h.paused_approvals("summarise https://evil.example")
    assert first.tool_name == "delete_file" and first.provenance is None
    h2 = await harnesses.reopen(h)
    before = len(h2.surface.renders)

    await h2.engine.decide(DecisionRequest(first.approval_id, REQUESTER, "confirm", place=first.thread.place))
    await h2.engine.wait_idle()

    [second] = h2.surface.renders[before].approvals
    assert second.tool_name == "read_logs" and second.provenance["tainted"][0]["tool"] == "fetch_url"
    assert h2.tools.runs_of("read_logs") == [], "asked in the new process too"
