"""Approver groups: named groups managed by admins, Slack user groups, and who may decide with them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import Config
from bot.engine.errors import NotAnApprover
from bot.engine.model import AdminRequest, DecisionRequest
from tests.adapters.slack.test_admin import command as slack_command
from tests.adapters.slack.test_approvals import ALICE, Clock, Ops, ask, start_stack
from tests.fakes.engine_kit import ADMIN, CHANNEL, OTHER, PLATFORM, REQUESTER, WORKSPACE, asks_for, says
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_stack import SlackStack, button_values

NOT_AN_ADMIN = "Only countersign admins can change policies."
ANA, BEN = "U_ANA", "U_BEN"


async def command(h, text: str, actor: str = ADMIN) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, actor, text))


async def decide(h, approval, actor: str) -> None:
    await h.engine.decide(DecisionRequest(approval.approval_id, actor, "confirm", place=approval.thread.place))
    await h.engine.wait_idle()


# ---------------------------------------------------------------------- the commands


async def test_an_admin_sets_lists_and_deletes_a_group_and_every_change_is_audited(harnesses):
    h = await harnesses.open()

    assert await command(h, "group set OnCall @U_ANA <@U_BEN|ben>") == "Approver group @oncall: U_ANA, U_BEN"
    assert await command(h, "group list", actor=OTHER) == "Approver groups:\n  @oncall: U_ANA, U_BEN"
    assert await command(h, "group delete oncall") == "Approver group @oncall deleted."
    assert await command(h, "group list") == "No approver groups yet. Create one with: group set oncall @ana @ben"

    audited = [(e.actor, e.action, e.subject, e.details.get("members")) for e in reversed(await h.audit())]
    assert audited == [
        (ADMIN, "group set", "group:oncall", ["U_ANA", "U_BEN"]),
        (ADMIN, "group delete", "group:oncall", None),
    ]


@pytest.mark.parametrize("text", ["group set oncall @U_ANA", "group delete oncall"])
async def test_a_group_change_by_someone_who_is_not_an_admin_is_refused_and_audited(harnesses, text):
    h = await harnesses.open()
    await h.engine.storage.approver_groups.set_group("oncall", [BEN], updated_by=ADMIN)

    assert await command(h, text, actor=REQUESTER) == NOT_AN_ADMIN

    assert [g.members for g in await h.engine.storage.approver_groups.list_groups()] == [(BEN,)]
    [audited] = await h.audit()
    assert (audited.actor, audited.action, audited.details) == (
        REQUESTER,
        "policy change refused",
        {"command": text, "workspace": f"{PLATFORM}:{WORKSPACE}"},
    )


async def test_a_group_may_not_share_a_name_with_a_tool_and_its_members_are_people(harnesses):
    h = await harnesses.open()
    await command(h, "group set oncall @U_ANA")

    assert "already names a tool" in await command(h, "group set delete_file @U_ANA")
    assert "'everyone' is reserved" in await command(h, "group set everyone @U_ANA")
    assert await command(h, "group set leads @oncall") == "A group's members are people; '@oncall' is a group."
    assert [g.name for g in await h.engine.storage.approver_groups.list_groups()] == ["oncall"]


async def test_approvers_mix_groups_and_people_and_listings_show_the_group_by_name(harnesses):
    h = await harnesses.open()
    await command(h, "group set oncall @U_ANA @U_BEN")

    reply = await command(h, "approvers delete_file @oncall @U_CAL")

    assert reply.endswith("approvers=@oncall, U_CAL")
    [row] = await h.engine.policy_table(PLATFORM, WORKSPACE)
    assert row["approvers"] == ("group:oncall", "U_CAL")
    assert "delete_file: always; approvers: @oncall, U_CAL;" in await command(h, "policy list", actor=OTHER)


async def test_a_quorum_counts_the_members_of_a_named_group(harnesses):
    h = await harnesses.open()
    await command(h, "group set oncall @U_ANA @U_BEN")
    await command(h, "approvers delete_file @oncall")

    assert (await command(h, "quorum delete_file 2")).startswith("Rule updated")
    assert "can't be reached" in await command(h, "quorum delete_file 3")


# ---------------------------------------------------------------------- deciding


async def test_a_group_member_decides_and_a_non_member_is_refused(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("Deleted.")])
    await command(h, "group set oncall @U_ANA")
    await command(h, "approvers delete_file @oncall")
    [approval] = await h.paused_approvals("delete a.txt")

    with pytest.raises(NotAnApprover):
        await decide(h, approval, OTHER)
    await decide(h, approval, ANA)

    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    assert (await h.engine.get_approval(approval.approval_id)).decided_by == ANA


async def test_group_membership_is_read_when_the_decision_is_made(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("Deleted.")])
    await command(h, "group set oncall @U_ANA")
    await command(h, "approvers delete_file @oncall")
    [approval] = await h.paused_approvals("delete a.txt")

    await command(h, "group set oncall @U_BEN")  # the rotation changed while the call waited
    with pytest.raises(NotAnApprover):
        await decide(h, approval, ANA)
    await decide(h, approval, BEN)

    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]


async def test_a_member_of_an_admin_group_may_change_policy(harnesses):
    h = await harnesses.open(admins=Config.from_env({"COUNTERSIGN_ADMINS": "@leads"}).admins)
    await h.engine.storage.approver_groups.set_group("leads", [ANA], updated_by="setup")

    assert (await command(h, "policy set delete_file never", actor=ANA)).startswith("Rule updated")
    assert await command(h, "policy set delete_file always", actor=BEN) == NOT_AN_ADMIN


# ---------------------------------------------------------------------- Slack user groups, end to end


async def test_a_slack_user_group_whose_membership_changes_between_the_pause_and_the_click(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer
) -> None:
    stack: SlackStack = await start_stack(tmp_path, slack, openai, Ops(), Clock())
    try:
        slack.usergroups["S0ONCALL"] = ["U0BOB"]
        answer = await slack_command(stack, slack, "approvers delete_file <!subteam^S0ONCALL|@oncall>", "U0ADMIN")
        assert "approvers=@oncall" in answer
        openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
        openai.enqueue_text("Deleted.")
        thread_ts, approval = await ask(stack, slack, "delete old.log")
        [approval_id] = button_values(approval.args["blocks"], "cs_approve")

        slack.usergroups["S0ONCALL"] = ["U0CAROL"]  # the on-call rotation moved on
        for user in ("U0BOB", "U0CAROL"):
            await stack.requests.click(
                "cs_approve",
                approval_id,
                user=user,
                channel="C0OPS",
                message_ts=approval.response["ts"],
                thread_ts=thread_ts,
            )
            await stack.settle()

        decided = await stack.engine.get_approval(approval_id)
        assert (decided.status, decided.decided_by) == ("approved", "U0CAROL")
        [refusal] = slack.calls_to("chat.postEphemeral", lambda c: c.args["user"] == "U0BOB")
        assert "not one of the approvers" in refusal.args["text"]
        assert len(slack.calls_to("usergroups.users.list")) >= 2  # read again at each click
        assert ALICE not in [c.args["user"] for c in slack.calls_to("chat.postEphemeral")]
    finally:
        await stack.stop()
