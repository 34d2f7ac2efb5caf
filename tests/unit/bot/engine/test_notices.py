"""Telling approvers: direct messages with the same buttons, one decision updating every copy, a reminder
sent once, and the expiry notice to the requester."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from adapters.slack.mrkdwn import note_markup
from bot.engine.errors import NotAnAdmin
from bot.engine.model import AdminRequest, DecisionRequest, Mention, Note
from tests.adapters.slack.test_admin import command as slack_command
from tests.adapters.slack.test_approvals import Clock, Ops, ask, start_stack
from tests.fakes.engine_kit import ADMIN, CHANNEL, PLATFORM, REQUESTER, WORKSPACE, asks_for, says
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_stack import SlackStack, button_values
from tests.fakes.teams_stack import ADA as TEAMS_ADA
from tests.fakes.teams_stack import ANA as TEAMS_ANA
from tests.fakes.teams_stack import BEN as TEAMS_BEN
from tests.fakes.teams_stack import TENANT, TeamsStack, approval_ids, execute_actions, running_teams, texts_of

ANA, BEN = "U_ANA", "U_BEN"


async def command(h, text: str) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, text))


async def test_each_designated_approver_gets_the_buttons_and_one_decision_updates_every_copy(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("Deleted.")])
    h.surface.direct = {ANA, BEN, REQUESTER}
    await command(h, "group set oncall @U_ANA @U_BEN @U_REQ")
    await command(h, "approvers delete_file @oncall")

    await h.say("delete a.txt")
    renders = h.surface.renders
    assert [r.thread.channel for r in renders] == [CHANNEL, "D-U_ANA", "D-U_BEN"]  # not the requester
    [approval] = renders[0].approvals
    assert {r.approvals[0].approval_id for r in renders} == {approval.approval_id}  # the same buttons

    await h.engine.decide(DecisionRequest(approval.approval_id, BEN, "confirm", place=f"{PLATFORM}:D-U_BEN"))
    await h.engine.wait_idle()

    updated = {(u.thread.channel, u.approvals[0].status) for u in h.surface.updates}
    assert updated == {(CHANNEL, "approved"), ("D-U_ANA", "approved"), ("D-U_BEN", "approved")}
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]


async def test_without_named_approvers_nobody_gets_a_direct_message(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    h.surface.direct = {ADMIN, REQUESTER}
    await h.say("delete a.txt")
    assert [r.thread.channel for r in h.surface.renders] == [CHANNEL]


async def test_approvers_who_have_not_answered_are_reminded_once_at_half_the_ttl(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")])
    h.surface.direct = {ANA}
    await command(h, "approvers delete_file @U_ANA @U_BEN")  # Ben has no direct conversation: told in the thread
    await h.say("delete a.txt")

    h.clock.advance(hours=11)
    assert await h.engine.remind_due() == 0
    h.clock.advance(hours=2)  # past 12 of the 24 hours
    assert await h.engine.remind_due() == 2
    h.clock.advance(hours=5)
    assert await h.engine.remind_due() == 0  # once

    [dm] = [r for r in h.surface.replies if r.thread.channel == "D-U_ANA"]
    assert dm.text.startswith(f"Reminder: a call of delete_file asked by {REQUESTER} is waiting for your decision.")
    assert Mention(REQUESTER) in dm.note.parts  # the surface shows the requester as a real mention
    [tell] = h.surface.tells
    assert tell.user == BEN and tell.thread.channel == CHANNEL and tell.text == dm.text
    [audited] = await h.audit("reminded")
    assert audited.details == {"people": [ANA, BEN]}


async def test_when_an_approval_expires_the_requester_is_told_in_the_thread(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), says("I did not delete it.")])
    await h.say("delete a.txt")
    h.clock.advance(hours=25)

    assert await h.engine.sweep_expired() == 1
    await h.engine.wait_idle()

    replies = h.surface.replies_in(h.thread())
    assert replies[0] == f"{REQUESTER}: the approval for delete_file expired without a decision, so it was not run."
    assert "I did not delete it." in replies


async def test_a_reminder_is_sent_once_even_when_the_ttl_outlasts_the_event_dedupe(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")], default_ttl_seconds=20 * 86400)
    h.surface.direct = {ANA}
    await command(h, "approvers delete_file @U_ANA")
    await h.say("delete a.txt")

    h.clock.advance(hours=10 * 24 + 1)  # past half of the 20 days
    assert await h.engine.remind_due() == 1
    h.clock.advance(hours=8 * 24)
    await h.engine.storage.events.prune(7 * 86400, now=h.clock())  # as the sweep does: a week of event dedupe
    assert await h.engine.remind_due() == 0  # still once
    assert len([r for r in h.surface.replies if r.thread.channel == "D-U_ANA"]) == 1


async def test_reminders_can_be_turned_off(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt")], remind_at=0.0)
    h.surface.direct = {ANA}
    await command(h, "approvers delete_file @U_ANA")
    await h.say("delete a.txt")
    h.clock.advance(hours=20)
    assert await h.engine.remind_due() == 0


# ---------------------------------------------------------------------- Slack, end to end


async def test_slack_the_approver_decides_in_their_dm_and_the_channel_message_and_app_home_update(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer
) -> None:
    stack: SlackStack = await start_stack(tmp_path, slack, openai, Ops(), Clock())
    try:
        await slack_command(stack, slack, "approvers delete_file <@U0BOB>", "U0ADMIN")
        openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
        openai.enqueue_text("Deleted.")
        thread_ts, approval = await ask(stack, slack, "delete old.log")

        [opened] = slack.calls_to("conversations.open")
        assert opened.args["users"] == "U0BOB"
        [dm] = slack.calls_to("chat.postMessage", lambda c: c.args["channel"] == "DU0BOB")
        [approval_id] = button_values(dm.args["blocks"], "cs_approve")
        assert button_values(approval.args["blocks"], "cs_approve") == [approval_id]

        await stack.requests.click(
            "cs_approve", approval_id, user="U0BOB", channel="DU0BOB", message_ts=dm.response["ts"]
        )
        await stack.settle()
    finally:
        await stack.stop()

    assert {c.args["channel"] for c in slack.calls_to("chat.update")} == {"C0OPS", "DU0BOB"}
    assert all(button_values(c.args["blocks"], "cs_approve") == [] for c in slack.calls_to("chat.update"))
    home = slack.calls_to("views.publish")[-1].args  # and Bob's App Home, shown again without it
    assert home["user_id"] == "U0BOB" and button_values(home["view"]["blocks"], "cs_approve") == []


async def test_slack_reminders_and_the_expiry_notice_name_the_requester_with_a_real_mention(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer
) -> None:
    clock = Clock()
    stack: SlackStack = await start_stack(tmp_path, slack, openai, Ops(), clock)
    try:
        await slack_command(stack, slack, "approvers delete_file <@U0BOB>", "U0ADMIN")
        openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
        openai.enqueue_text("I did not delete it.")
        thread_ts, _ = await ask(stack, slack, "delete old.log")

        clock.now += timedelta(minutes=31)  # past half of the hour
        assert await stack.engine.remind_due() == 1
        clock.now += timedelta(minutes=30)
        assert await stack.engine.sweep_expired() == 1
        await stack.settle()
    finally:
        await stack.stop()

    reminder = slack.calls_to("chat.postMessage", lambda c: c.args["channel"] == "DU0BOB")[-1].args["text"]
    assert reminder.startswith("Reminder: a call of delete_file asked by <@U0ALICE> is waiting for your decision.")
    [notice] = slack.calls_to("chat.postMessage", lambda c: "expired without a decision" in c.args["text"])
    assert notice.args["thread_ts"] == thread_ts
    assert notice.args["text"] == (
        "<@U0ALICE>: the approval for delete_file expired without a decision, so it was not run."
    )


def test_slack_notes_mention_only_the_ids_the_engine_names_and_escape_everything_else() -> None:
    note = Note(
        (
            "<!channel> <@U0EVIL> token=abc123 ",
            Mention("U0ANA"),
            ", ",
            Mention("<!here>"),
            ", ",
            Mention("usergroup:S0OPS|@ops"),
            ", ",
            Mention("group:oncall"),
        )
    )
    assert note_markup(note) == "&lt;!channel&gt; &lt;@U0EVIL&gt; token=•••••• <@U0ANA>, &lt;!here&gt;, @ops, @oncall"


# ---------------------------------------------------------------------- Approve and always allow here


async def test_only_an_admins_own_copy_offers_approve_and_always_allow_and_it_writes_an_audited_rule(harnesses):
    h = await harnesses.open(
        replies=[
            asks_for("delete_file", path="a.txt"),
            says("Deleted."),
            asks_for("delete_file", path="b.txt"),
            says("Deleted b."),
        ],
    )
    h.surface.direct = {ADMIN, ANA}
    await command(h, "approvers delete_file @U_ADMIN @U_ANA")
    await h.say("delete a.txt")
    channel, *copies = h.surface.renders
    offers = {r.thread.channel: r.approvals[0].offer_always_allow for r in copies}
    assert offers == {"D-U_ADMIN": True, "D-U_ANA": False}
    assert channel.approvals[0].offer_always_allow is False  # everyone sees the channel message
    approval_id = channel.approvals[0].approval_id

    with pytest.raises(NotAnAdmin):
        await h.engine.approve_and_always_allow(approval_id, ANA, place=f"{PLATFORM}:D-U_ANA")
    result = await h.engine.approve_and_always_allow(approval_id, ADMIN, place=f"{PLATFORM}:D-U_ADMIN")
    await h.engine.wait_idle()

    assert result.message == "Approved. delete_file will no longer ask here."
    here = f"channel:{PLATFORM}:{WORKSPACE}:{CHANNEL}"
    [rule] = [r for r in await h.engine.policy_table(PLATFORM, WORKSPACE) if r["scope"] == here]
    assert (rule["tool"], rule["mode"]) == ("delete_file", "never")
    [changed] = await h.audit("policy set")
    assert changed.actor == ADMIN and changed.details["from_approval"] == approval_id
    [refused] = await h.audit("decision refused")
    assert refused.actor == ANA and refused.details["reason"] == "NotAnAdmin"

    renders = len(h.surface.renders)
    await h.say("delete b.txt", thread="another")
    assert len(h.surface.renders) == renders  # no longer asked in this channel
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}, {"path": "b.txt"}]


async def test_always_allow_keeps_the_condition_of_the_rule_that_asked(harnesses):
    h = await harnesses.open(replies=[asks_for("scale_service", service="api", replicas=20), says("Scaled.")])
    await command(h, "policy set scale_service never")
    await command(h, "policy set scale_service always when replicas>10")
    await h.say("scale api to 20")
    [approval] = h.surface.renders[0].approvals
    await h.engine.note_shown(f"{PLATFORM}:D-admin", [approval.approval_id])

    result = await h.engine.approve_and_always_allow(approval.approval_id, ADMIN, place=f"{PLATFORM}:D-admin")

    assert result.message.endswith("scale_service when replicas>10 will no longer ask here.")
    [rule] = await h.engine.storage.conditions.rules([f"channel:{PLATFORM}:{WORKSPACE}:{CHANNEL}"])
    assert (rule.condition, rule.mode) == ("replicas>10", "never")


# ---------------------------------------------------------------------- Teams: user-specific views


@pytest.fixture
async def teams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TeamsStack]:
    replies = [asks_for("delete_file", path="old.log"), says("Deleted.")]
    async with running_teams(tmp_path, monkeypatch, replies=replies) as stack:
        yield stack


async def test_teams_approvers_see_the_buttons_everyone_else_the_status_and_an_admin_may_always_allow(teams):
    def verbs(card) -> set[str]:
        return {a.get("verb") for a, _ in execute_actions(card)} - {"refresh"}

    approvers = [TEAMS_BEN.id, TEAMS_ADA.id]
    await teams.engine.storage.policies.set_rule("global", "delete_file", updated_by=TEAMS_ADA.id, approvers=approvers)
    await teams.say("delete old.log")
    _, posted = teams.last_card()

    assert verbs(posted) == set()  # the status, for everyone
    assert sorted(posted["refresh"]["userIds"]) == sorted([TEAMS_ADA.id, TEAMS_BEN.id])
    assert verbs(await teams.view_as(TEAMS_ANA)) == set()  # the requester is not an approver here
    assert verbs(await teams.view_as(TEAMS_BEN)) == {"approve", "reject", "edit"}
    admin_view = await teams.view_as(TEAMS_ADA)
    assert verbs(admin_view) == {"approve", "reject", "edit", "approve_always"}
    assert any("Approval needed" in t for t in texts_of(admin_view))

    status, body = await teams.click("approve_always", TEAMS_ADA, card=admin_view)

    assert status == 200 and approval_ids(body["value"]) == []
    assert teams.tools.executed == [("delete_file", {"path": "old.log"})]
    [rule] = [r for r in await teams.engine.policy_table("teams", TENANT) if r["scope"].startswith("channel:")]
    assert (rule["tool"], rule["mode"]) == ("delete_file", "never")
