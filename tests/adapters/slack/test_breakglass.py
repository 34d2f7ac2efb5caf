"""Break-glass in Slack: after the delay the requester gets a Break glass button and a modal asking the reason; the
call runs once, the card turns red, the break-glass channel and the approvers' DMs are told, and another person
reviews it from the card (Review: OK / Review: Not OK with a note).

Real Bolt AsyncApp over HTTP, the real Engine, the fake Slack Web API and a fake OpenAI endpoint.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.engine.model import AdminRequest
from tests.adapters.slack.test_approvals import ADMIN, ALICE, CHANNEL, Ops, ask, start_stack
from tests.fakes.clock import Clock
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI, SlackCall
from tests.fakes.slack_requests import form, text_input
from tests.fakes.slack_stack import SlackStack, all_text, button_values

BEN = "U0BEN"  # the tool's approver
GLASS_CHANNEL = "C0GLASS"


@pytest.fixture
def ops() -> Ops:
    return Ops()


@pytest.fixture
async def stack(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops, clock: Clock
) -> AsyncIterator[SlackStack]:
    running = await start_stack(tmp_path, slack, openai, ops, clock, breakglass_channel=GLASS_CHANNEL)
    yield running
    await running.stop()


async def admin(stack: SlackStack, slack: FakeSlackAPI, text: str) -> str:
    return await stack.engine.admin(AdminRequest("slack", slack.team_id, CHANNEL, ADMIN, text))


def card_blocks(call: SlackCall) -> list[dict[str, Any]]:
    """The blocks of a card and of its attachments (a break-glass card's red part)."""
    return [*call.args["blocks"], *(b for a in call.args.get("attachments") or [] for b in a["blocks"])]


async def ephemeral_to(slack: FakeSlackAPI, user: str, count: int) -> str:
    told = await slack.wait_for("chat.postEphemeral", count=count, where=lambda c: c.args.get("user") == user)
    return told[-1].args["text"]


async def test_break_glass_button_after_the_delay_runs_once_red_card_announced_and_reviewed_from_the_card(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops, clock: Clock
) -> None:
    await admin(stack, slack, f"approvers delete_file <@{BEN}>")
    assert "may break glass after 5m" in await admin(stack, slack, "policy set delete_file always breakglass after 5m")
    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    openai.enqueue_text("Deleted.")
    mention_ts, approval = await ask(stack, slack, "delete old.log")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")
    assert button_values(approval.args["blocks"], "cs_breakglass") == [], "not before the delay"

    async def click(action_id: str, user: str) -> None:
        reply = await stack.requests.click(
            action_id, approval_id, user=user, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
        )
        assert reply.status == 200
        await stack.settle()

    await click("cs_breakglass", ALICE)  # a click before the delay (a forged or an old button): refused
    assert "wait 5m" in await ephemeral_to(slack, ALICE, 1)
    assert slack.calls_to("views.open") == []

    clock.now += timedelta(minutes=5)
    assert await stack.engine.offer_breakglass_due() == 1
    await stack.settle()
    offered = slack.calls_to("chat.update")[-1]
    assert button_values(offered.args["blocks"], "cs_breakglass") == [approval_id]
    assert f"<@{ALICE}> may break glass" in all_text(offered.args["blocks"])
    [offer] = slack.calls_to("chat.postMessage", lambda c: "press Break glass" in c.args.get("text", ""))
    assert offer.args["thread_ts"] == mention_ts

    await click("cs_breakglass", BEN)  # the approver sees the button too; only the requester may use it
    assert "Only the person who asked for this call can break glass" in await ephemeral_to(slack, BEN, 1)
    assert slack.calls_to("views.open") == [] and ops.deleted == []

    await click("cs_breakglass", ALICE)
    [opened] = await slack.wait_for("views.open")
    modal = opened.args["view"]
    assert modal["callback_id"] == "cs_breakglass_modal" and modal["title"]["text"] == "Break glass"
    reply = await stack.requests.submit(modal, form("feedback", cs_feedback=text_input("prod is down")), user=ALICE)
    assert reply.status == 200 and reply.text == ""
    await stack.settle()

    assert ops.deleted == ["old.log"], "ran once"
    red = slack.calls_to("chat.update")[-1]
    [attachment] = red.args["attachments"]
    assert attachment["color"] == "#d40e0d"
    assert f"break-glass by <@{ALICE}>:* prod is down" in all_text(attachment["blocks"])
    assert "BREAK GLASS: run by" in all_text(red.args["blocks"])
    assert button_values(card_blocks(red), "cs_breakglass_ok") == [approval_id]
    assert button_values(card_blocks(red), "cs_breakglass_not_ok") == [approval_id]
    assert button_values(card_blocks(red), "cs_approve") == []

    # The break-glass channel's post (top level) and the approver's DM reached the Slack API.
    [post] = slack.calls_to("chat.postMessage", lambda c: c.args.get("channel") == GLASS_CHANNEL)
    assert "Break glass" in post.args["text"] and "prod is down" in post.args["text"]
    assert not post.args.get("thread_ts")
    assert post.args["attachments"][0]["color"] == "#d40e0d"
    assert button_values(post.args["attachments"][0]["blocks"], "cs_breakglass_ok") == [approval_id]
    assert {c.args["users"] for c in slack.calls_to("conversations.open")} == {BEN}
    [dm] = slack.calls_to("chat.postMessage", lambda c: c.args.get("channel") == f"D{BEN}" and not c.args.get("blocks"))
    assert "Break glass" in dm.args["text"] and "delete_file" in dm.args["text"] and "prod is down" in dm.args["text"]
    assert button_values(dm.args["attachments"][0]["blocks"], "cs_breakglass_not_ok") == [approval_id]

    updates = len(slack.calls_to("chat.update"))
    await click("cs_breakglass_ok", ALICE)  # the requester never reviews their own break-glass
    assert "someone else must review" in await ephemeral_to(slack, ALICE, 2)
    await click("cs_breakglass_not_ok", ALICE)
    assert "someone else must review" in await ephemeral_to(slack, ALICE, 3)
    assert len(slack.calls_to("chat.update")) == updates and len(slack.calls_to("views.open")) == 1

    # Ben reviews from the buttons of his DM.
    await stack.requests.click(
        "cs_breakglass_not_ok", approval_id, user=BEN, channel=f"D{BEN}", message_ts=dm.response["ts"]
    )
    await stack.settle()
    opened = (await slack.wait_for("views.open", count=2))[-1]
    modal = opened.args["view"]
    assert modal["callback_id"] == "cs_breakglass_review_modal"
    reply = await stack.requests.submit(modal, form("feedback", cs_feedback=text_input("too broad")), user=BEN)
    assert reply.status == 200 and "recorded: not-ok" in all_text(reply.json()["view"]["blocks"])
    await stack.settle()

    reviewed = slack.calls_to("chat.update")[-1]
    assert f"Review: not OK by <@{BEN}>" in all_text(card_blocks(reviewed)) and "too broad" in all_text(
        card_blocks(reviewed)
    )
    assert button_values(card_blocks(reviewed), "cs_breakglass_ok") == []
    assert reviewed.args["attachments"][0]["color"] == "#d40e0d"
    assert await admin(stack, slack, "breakglass list") == "No break-glass review is open."
    assert ops.deleted == ["old.log"], "still once"


async def test_review_ok_from_the_card_is_recorded_at_once(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops, clock: Clock
) -> None:
    await admin(stack, slack, "policy set delete_file always breakglass after 1m")
    openai.enqueue_tool_calls([("delete_file", {"path": "a.log"})])
    openai.enqueue_text("Deleted.")
    mention_ts, approval = await ask(stack, slack, "delete a.log")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")
    clock.now += timedelta(minutes=1)
    await stack.engine.offer_breakglass_due()
    await stack.settle()
    await stack.requests.click(
        "cs_breakglass",
        approval_id,
        user=ALICE,
        channel=CHANNEL,
        message_ts=approval.response["ts"],
        thread_ts=mention_ts,
    )
    [opened] = await slack.wait_for("views.open")
    await stack.requests.submit(opened.args["view"], form("feedback", cs_feedback=text_input("on fire")), user=ALICE)
    await stack.settle()
    assert ops.deleted == ["a.log"]

    await stack.requests.click(
        "cs_breakglass_ok",
        approval_id,
        user=ADMIN,
        channel=CHANNEL,
        message_ts=approval.response["ts"],
        thread_ts=mention_ts,
    )
    await stack.settle()
    assert "recorded: ok" in await ephemeral_to(slack, ADMIN, 1)
    reviewed = slack.calls_to("chat.update")[-1]
    assert f"Review: OK by <@{ADMIN}>" in all_text(card_blocks(reviewed))
    assert "reviewed. Reason: on fire" in all_text(reviewed.args["blocks"])
