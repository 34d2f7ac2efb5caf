"""Who may ask: access rules per workspace and channel, the direct-message switch, polite audited refusals."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bot.engine.access import DM_REFUSED, REFUSED
from bot.engine.model import AdminRequest
from bot.llm import ScriptedChatGenerator
from tests.adapters.slack.test_admin import command as slack_command
from tests.fakes.engine_kit import ADMIN, CHANNEL, OTHER, PLATFORM, REQUESTER, WORKSPACE, says
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_stack import SlackStack

NOT_AN_ADMIN = "Only countersign admins can change policies."
DEFAULT = "Everyone may ask the bot, in every channel of this workspace (no access rules). Direct messages: allowed."


async def command(h, text: str, actor: str = ADMIN) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, actor, text))


async def asked(h, text: str, user: str, **where) -> bool:
    """Send a message; whether the bot answered it (a reply appeared in its thread)."""
    inbound = h.inbound(text, user=user, thread=f"t-{text}", **where)
    await h.engine.handle_message(inbound)
    await h.engine.wait_idle()
    return bool(h.surface.replies_in(inbound.thread_ref))


async def test_by_default_everyone_may_ask_and_access_list_says_so_plainly(harnesses):
    h = await harnesses.open(replies=[says("hi")])
    assert await command(h, "access list", actor=OTHER) == DEFAULT
    assert await asked(h, "hello", OTHER)


async def test_a_channel_rule_refuses_others_privately_audits_it_and_leaves_other_channels_open(harnesses):
    h = await harnesses.open(replies=[says("one"), says("two"), says("three")])
    assert await command(h, "access allow #C1 @U_ANA") == "U_ANA may ask the bot in this channel."

    assert not await asked(h, "restart api", OTHER)
    assert await asked(h, "restart web", "U_ANA")
    assert await asked(h, "restart db", OTHER, channel="C2")  # no rule there: everyone
    assert await asked(h, "restart all", ADMIN)  # admins always may

    [tell] = h.surface.tells
    assert (tell.user, tell.text) == (OTHER, REFUSED)
    [refused] = await h.audit("ask refused")
    assert refused.actor == OTHER and refused.subject.startswith(f"{PLATFORM}:{WORKSPACE}:C1:")
    assert "#C1: U_ANA" in await command(h, "access list")


async def test_a_workspace_rule_may_name_a_group_and_revoking_the_last_rule_opens_it_again(harnesses):
    h = await harnesses.open(replies=[says("one"), says("two")])
    await command(h, "group set oncall @U_ANA")
    assert await command(h, "access allow * @oncall") == "@oncall may ask the bot in the whole workspace."

    assert not await asked(h, "restart api", OTHER)
    assert await asked(h, "restart web", "U_ANA")

    answer = await command(h, "access revoke * @oncall")
    assert answer.endswith("The whole workspace has no rules left: everyone may ask there again.")
    assert await asked(h, "restart db", OTHER)
    assert await command(h, "access list") == DEFAULT


async def test_access_allow_everyone_in_a_channel_overrides_a_workspace_limit(harnesses):
    h = await harnesses.open(replies=[says("one")])
    await command(h, "access allow * @U_ANA")
    await command(h, "access allow #C_OPEN everyone")
    assert await asked(h, "hello", OTHER, channel="C_OPEN")
    assert not await asked(h, "hello again", OTHER)


async def test_direct_messages_can_be_turned_off_and_on(harnesses):
    h = await harnesses.open(replies=[says("hi")])
    assert await command(h, "dm off") == "Direct messages to the bot are turned off."
    direct = replace(h.inbound("hello", user=OTHER, thread="dm"), is_direct=True, mentioned=False)

    await h.engine.handle_message(direct)
    await h.engine.wait_idle()
    assert [t.text for t in h.surface.tells] == [DM_REFUSED]
    assert "Direct messages: turned off." in await command(h, "access list")

    await command(h, "dm on")
    await h.engine.handle_message(replace(direct, event_id="Ev-again"))
    assert h.surface.replies_in(direct.thread_ref) == ["hi"]


@pytest.mark.parametrize("text", ["access allow * @U_ANA", "access revoke * @U_ANA", "dm off", "dm on"])
async def test_an_access_change_by_someone_who_is_not_an_admin_is_refused_and_audited(harnesses, text):
    h = await harnesses.open()
    assert await command(h, text, actor=REQUESTER) == NOT_AN_ADMIN
    assert await h.engine.storage.access.rules() == []
    [audited] = await h.audit()
    assert (audited.actor, audited.action, audited.details) == (
        REQUESTER,
        "policy change refused",
        {"command": text, "workspace": f"{PLATFORM}:{WORKSPACE}"},
    )


async def test_every_access_change_is_audited(harnesses):
    h = await harnesses.open()
    await command(h, "access allow #C1 everyone")
    await command(h, "access revoke #C1 everyone")
    await command(h, "dm off")
    audited = [(e.action, e.subject) for e in reversed(await h.audit())]
    assert audited == [
        ("access allow", f"channel:{PLATFORM}:{WORKSPACE}:C1/everyone"),
        ("access revoke", f"channel:{PLATFORM}:{WORKSPACE}:C1/everyone"),
        ("dm", f"workspace:{PLATFORM}:{WORKSPACE}"),
    ]


# ---------------------------------------------------------------------- Slack, end to end


async def test_slack_an_access_rule_refuses_and_allows_requests(tmp_path: Path, slack: FakeSlackAPI) -> None:
    model = ScriptedChatGenerator([says("on it")] * 3)
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db", slack=slack, generator=model, tools=[], admins={"U0ADMIN"}
    )
    try:
        answer = await slack_command(stack, slack, "access allow <#C0OPS|ops> <@U0ALICE>", "U0ADMIN")
        assert "U0ALICE may ask the bot in #ops." in answer
        await stack.requests.event(stack.requests.mention("U0MALLORY", "C0OPS", "<@U0BOT> drop the database"))
        await stack.requests.event(stack.requests.mention("U0ALICE", "C0OPS", "<@U0BOT> restart api"))
        await stack.settle()
    finally:
        await stack.stop()

    assert [c.args["text"] for c in slack.calls_to("chat.postMessage")] == ["on it"]
    [refusal] = slack.calls_to("chat.postEphemeral")
    assert refusal.args["user"] == "U0MALLORY" and "an admin has limited who may" in refusal.args["text"]
    assert len(model.calls) == 1
