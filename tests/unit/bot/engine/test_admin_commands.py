"""End to end through the engine: every admin command, by an admin and by someone who is not one."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.engine.admin_syntax import USAGE
from bot.engine.model import AdminRequest, DecisionRequest
from tests.fakes.engine_kit import (
    ADMIN,
    CHANNEL,
    OTHER,
    PLATFORM,
    REQUESTER,
    WORKSPACE,
    asks_for,
    echoes_results,
)

NOT_AN_ADMIN = "Only countersign admins can change policies."
WORKSPACE_SCOPE = f"workspace:{PLATFORM}:{WORKSPACE}"
KNOWN_TOOLS = "Known tools: delete_file, read_logs, remember, scale_service, set_secret."

# (command, the rule it leaves in the table, the answer's fragment)
CHANGES = [
    ("policy set delete_file deny", {"mode": "deny"}, "delete_file in this workspace: mode=deny"),
    ("policy set * once", {"tool": "*", "mode": "once"}, "* in this workspace: mode=once"),
    ("policy set delete_file never #C_OPS", {"scope": "channel:slack:T1:C_OPS", "mode": "never"}, "mode=never"),
    ("approvers delete_file @U_ANA <@U_BEN|ben>", {"approvers": ("U_ANA", "U_BEN")}, "approvers=U_ANA, U_BEN"),
    ("quorum delete_file 2", {"quorum": 2}, "quorum=2"),
    ("four-eyes delete_file on", {"four_eyes": True}, "four_eyes=on"),
    ("ttl delete_file 4h", {"ttl_seconds": 4 * 3600}, "ttl=4h"),
]


async def command(h, text: str, actor: str = ADMIN, channel: str = CHANNEL) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, channel, actor, text))


async def rules(h) -> list[dict]:
    return await h.engine.policy_table(PLATFORM, WORKSPACE)


@pytest.mark.parametrize(("text", "rule", "answer"), CHANGES, ids=[c[0] for c in CHANGES])
async def test_an_admin_change_is_stored_answered_with_the_rule_and_audited(harnesses, text, rule, answer):
    h = await harnesses.open()

    reply = await command(h, text)

    assert reply.startswith("Rule updated: ") and answer in reply
    [row] = await rules(h)
    expected = {"scope": WORKSPACE_SCOPE, "tool": "delete_file", **rule}
    assert {k: row[k] for k in expected} == expected
    [audited] = await h.audit()
    assert audited.actor == ADMIN and audited.subject == f"{row['scope']}/{row['tool']}"
    words = text.split()
    assert audited.action == (" ".join(words[:2]) if words[0] == "policy" else words[0])


@pytest.mark.parametrize("text", [c[0] for c in CHANGES] + ["policy reset delete_file"])
async def test_a_change_by_someone_who_is_not_an_admin_is_refused_and_audited(harnesses, text):
    h = await harnesses.open()

    reply = await command(h, text, actor=REQUESTER)

    assert reply == NOT_AN_ADMIN
    assert await rules(h) == []
    [audited] = await h.audit()
    assert (audited.actor, audited.action) == (REQUESTER, "policy change refused")
    assert audited.details == {"command": text, "workspace": f"{PLATFORM}:{WORKSPACE}"}


async def test_policy_reset_removes_the_rule_and_says_when_there_was_none(harnesses):
    h = await harnesses.open()
    await command(h, "policy set delete_file deny")
    await command(h, "policy set delete_file never #C_OPS")

    assert await command(h, "policy reset delete_file") == "Rule for delete_file in this workspace removed."
    assert await command(h, "policy reset delete_file") == "There was no rule for delete_file in this workspace."
    assert [(r["scope"], r["mode"]) for r in await rules(h)] == [("channel:slack:T1:C_OPS", "never")]
    assert [e.action for e in await h.audit()][:2] == ["policy reset", "policy reset"]


async def test_approvers_none_goes_back_to_the_requester_and_admins(harnesses):
    h = await harnesses.open()
    await command(h, "approvers delete_file @U_ANA")

    reply = await command(h, "approvers delete_file none")

    assert "approvers=requester and admins" in reply
    assert (await rules(h))[0]["approvers"] == ()


async def test_policy_list_shows_every_tools_effective_policy_to_anyone(harnesses):
    h = await harnesses.open()
    await command(h, "policy set delete_file once #C_OPS")
    await command(h, "quorum scale_service 2")

    for actor in (ADMIN, OTHER):
        here = await command(h, "policy list", actor=actor)
        there = await command(h, "policy list #C_OPS", actor=actor)
        assert here.splitlines()[:6] == [
            f"Effective policies in #{CHANNEL}:",
            "  delete_file: always; approvers: requester and admins; quorum 1; four-eyes off; ttl 1d; "
            "requester may approve their own call",
            "  read_logs: never; approvers: requester and admins; quorum 1; four-eyes off; ttl 1d",
            "  remember: never; approvers: requester and admins; quorum 1; four-eyes off; ttl 1d",
            "  scale_service: always; approvers: requester and admins; quorum 2; four-eyes off; ttl 1d; "
            "requester may approve their own call",
            "  set_secret: always; approvers: requester and admins; quorum 1; four-eyes off; ttl 1d; "
            "requester may approve their own call",
        ]
        assert (
            "  delete_file: once; approvers: requester and admins; quorum 1; four-eyes off; ttl 1d; "
            "requester may approve their own call"
        ) in there
        assert "  delete_file @ channel:slack:T1:C_OPS: mode=once" in there
    assert await h.audit() == [a for a in await h.audit() if a.actor == ADMIN], "listing is not a change"


async def test_policy_list_says_where_the_requester_may_approve_their_own_call(harnesses):
    h = await harnesses.open()
    await command(h, "four-eyes delete_file on")
    await command(h, "approvers set_secret <@U_SEC>")

    lines = {line.split(":")[0].strip(): line for line in (await command(h, "policy list")).splitlines()[1:6]}

    assert "may approve their own call" not in lines["delete_file"], "four-eyes on: someone else must approve"
    assert "may approve their own call" not in lines["read_logs"], "a tool that never asks has no approval"
    assert lines["scale_service"].endswith("; requester may approve their own call")
    assert lines["set_secret"].endswith("; requester may approve their own call if an approver")


async def test_pending_lists_the_waiting_approvals_to_anyone(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    assert await command(h, "pending", actor=OTHER) == "No approvals are waiting."
    [approval] = await h.paused_approvals("delete a.txt")

    expected = f"delete_file asked by {REQUESTER}, expires 2026-12-01 09:00 UTC (id {approval.approval_id[:8]})"
    for actor in (ADMIN, OTHER):
        assert await command(h, "pending", actor=actor) == expected

    await h.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place))
    await h.engine.wait_idle()
    assert await command(h, "pending") == "No approvals are waiting."


async def test_pending_does_not_show_another_workspaces_approvals(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    await h.paused_approvals("delete a.txt")

    elsewhere = await h.engine.admin(AdminRequest(PLATFORM, "T_OTHER_ORG", "C9", ADMIN, "pending"))

    assert elsewhere == "No approvals are waiting."


async def test_audit_shows_the_latest_entries_to_anyone(harnesses):
    h = await harnesses.open()
    assert await command(h, "audit") == "The audit log is empty."
    for n in (1, 2, 3):
        await command(h, f"quorum delete_file {n}")

    for actor in (ADMIN, OTHER):
        lines = (await command(h, "audit 2", actor=actor)).splitlines()
        assert len(lines) == 2
        assert all(line.endswith(f"{ADMIN} quorum {WORKSPACE_SCOPE}/delete_file") for line in lines)
    assert len((await command(h, "audit")).splitlines()) == 3


async def test_audit_shows_only_the_askers_workspace(harnesses):
    # Issue 27: a Teams user saw a console user's approvals. Scoped like pending: this workspace's entries only.
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    [approval] = await h.paused_approvals("delete a.txt")
    await h.engine.decide(DecisionRequest(approval.approval_id, ADMIN, "confirm", place=approval.thread.place))
    await h.engine.wait_idle()
    await command(h, "quorum delete_file 2")
    here = (await command(h, "audit 50", actor=OTHER)).splitlines()
    assert any(approval.approval_id in line for line in here), here
    assert any(line.endswith(f"quorum {WORKSPACE_SCOPE}/delete_file") for line in here), here
    for platform, workspace in ((PLATFORM, "T_OTHER_ORG"), ("teams", WORKSPACE), ("console", "local")):
        elsewhere = await h.engine.admin(AdminRequest(platform, workspace, "C9", OTHER, "audit 50"))
        assert elsewhere == "The audit log is empty.", (platform, workspace, elsewhere)


@pytest.mark.parametrize("actor", [ADMIN, OTHER])
async def test_help_answers_with_the_usage(harnesses, actor):
    h = await harnesses.open()
    assert await command(h, "help", actor=actor) == USAGE
    assert await command(h, "", actor=actor) == USAGE


@pytest.mark.parametrize(
    "text",
    [
        "frobnicate",
        "policy",
        "policy set delete_file",
        "policy set delete_file sometimes",
        "policy list not-a-channel",
        "quorum delete_file zero",
        "quorum delete_file 11",
        "four-eyes delete_file maybe",
        "ttl delete_file soon",
        "audit lots",
        "pending now",
        "approvers delete_file @U1 <!channel>",
    ],
)
@pytest.mark.parametrize("actor", [ADMIN, OTHER])
async def test_bad_syntax_gets_the_usage_and_changes_nothing(harnesses, text, actor):
    h = await harnesses.open()

    reply = await command(h, text, actor=actor)

    if text == "frobnicate":  # not a command: every command's usage
        assert reply.endswith(USAGE) and reply != USAGE
    else:  # a command typed wrong: what was wrong, then that command's usage line only
        problem, usage = reply.splitlines()
        assert usage.startswith(f"usage: {text.split()[0]}") and USAGE not in reply
    assert await rules(h) == [] and await h.audit() == []


@pytest.mark.parametrize(
    "text",
    [
        "policy set nuke_everything deny",
        "policy reset nuke_everything",
        "approvers nuke_everything @U1",
        "quorum nuke_everything 2",
        "four-eyes nuke_everything on",
        "ttl nuke_everything 1h",
    ],
)
async def test_an_unknown_tool_is_refused_with_the_known_tools(harnesses, text):
    h = await harnesses.open()

    reply = await command(h, text)

    assert reply == f"Unknown tool 'nuke_everything'. {KNOWN_TOOLS}"
    assert await rules(h) == []


async def test_a_policy_change_applies_to_the_next_message(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])

    await command(h, "policy set delete_file never")
    await h.say("delete a.txt")

    assert h.surface.renders == [] and h.tools.executed == [("delete_file", {"path": "a.txt"})]


# --- bounds -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("ttl delete_file 99999999999999d", "A ttl can be at most 90d (90 days), not '99999999999999d'."),
        ("ttl delete_file 91d", "A ttl can be at most 90d (90 days), not '91d'."),
        ("ttl delete_file 7776001", "A ttl can be at most 90d (90 days), not '7776001'."),
        ("ttl delete_file 0", "A ttl must be longer than zero, not '0'."),
        ("ttl delete_file 0m", "A ttl must be longer than zero, not '0m'."),
        ("ttl delete_file -1h", "A ttl must be longer than zero, not '-1h'."),
    ],
)
async def test_a_ttl_outside_one_second_to_ninety_days_is_refused_in_one_sentence(harnesses, text, answer):
    h = await harnesses.open()

    assert await command(h, text) == answer
    assert await rules(h) == [] and await h.audit() == []


async def test_the_longest_ttl_is_accepted_and_a_refused_one_leaves_the_tool_usable(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])

    assert (await command(h, "ttl delete_file 99999999999999d")).startswith("A ttl can be at most")
    assert "ttl=90d" in await command(h, "ttl delete_file 90d")
    [approval] = await h.paused_approvals("delete a.txt")

    assert approval.expires_at - approval.created_at == timedelta(days=90)


async def test_an_oversize_ttl_already_in_the_database_waits_ninety_days_instead_of_breaking_calls(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    # As an older version (before the bound) stored it: the storage layer takes any positive number.
    oversize = 99999999999999 * 86400
    await h.engine.storage.policies.set_rule(WORKSPACE_SCOPE, "delete_file", updated_by=ADMIN, ttl_seconds=oversize)

    [approval] = await h.paused_approvals("delete a.txt")

    assert approval.expires_at - approval.created_at == timedelta(days=90)
    assert "delete_file: always; approvers: requester and admins; quorum 1; four-eyes off; ttl 90d" in await command(
        h, "policy list"
    )


async def test_a_quorum_the_named_approvers_could_never_reach_is_refused(harnesses):
    h = await harnesses.open()
    await command(h, "approvers delete_file @U_ANA @U_BEN")

    refused = await command(h, "quorum delete_file 3")
    assert refused == (
        "A quorum of 3 can't be reached: delete_file has 2 approver(s) here. "
        "Name more approvers first, or choose a smaller quorum."
    )
    [row] = await rules(h)
    assert row["quorum"] is None

    assert "quorum=2" in await command(h, "quorum delete_file 2")
    assert await command(h, "approvers delete_file @U_ANA @U_ANA") == (
        "delete_file needs a quorum of 2 here, so name at least 2 approvers (or lower the quorum first)."
    )
    [row] = await rules(h)
    assert (row["approvers"], row["quorum"]) == (("U_ANA", "U_BEN"), 2)
    # without named approvers the requester and admins decide: any quorum up to 10 is allowed
    assert "quorum=5" in await command(h, "quorum scale_service 5")


async def test_serve_warns_at_start_while_no_tool_has_four_eyes_and_admins_are_configured(harnesses):
    from bot.self_approval import SELF_APPROVAL_WARNING, self_approval_warning

    h = await harnesses.open()
    storage = h.engine.storage

    assert await self_approval_warning(storage, {ADMIN}) == SELF_APPROVAL_WARNING
    assert await self_approval_warning(storage, set()) is None, "no admins: nobody expects a second person"
    await command(h, "four-eyes delete_file on")
    assert await self_approval_warning(storage, {ADMIN}) is None
    await command(h, "four-eyes delete_file off")
    assert await self_approval_warning(storage, {ADMIN}) == SELF_APPROVAL_WARNING
