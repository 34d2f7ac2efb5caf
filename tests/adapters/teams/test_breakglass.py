"""Break-glass in Teams: after the delay the requester's own view of the card offers Break glass with a required
reason; the call runs once, the card turns red, the break-glass channel gets a top-level post and the approver a
DM through the Bot Connector, and another person reviews it from the card (Review: OK / Review: Not OK with a note).

The real ``countersign serve`` app with the Teams plugin, signed activities, the fake Bot Connector and the
real engine (the fixtures of ``tests/adapters/teams/test_flow.py``).
"""

# ruff: noqa: F811 - the fixtures of tests/adapters/teams/test_flow.py are imported, and test arguments name them

from __future__ import annotations

from dataclasses import replace
from typing import Any

from adapters.teams.cards import approval_card, breakglass_input_id, review_note_input_id
from tests.adapters.teams.test_flow import open_stack  # noqa: F401 - a fixture
from tests.fakes.engine_kit import asks_for, says
from tests.fakes.teams_stack import ADA, ANA, BEN, CHANNEL, TeamsStack, action_value, execute_actions, texts_of

BEN_CHAT = "a:1personal-chat-with-ben"


def verbs(card: dict[str, Any]) -> set[str]:
    return {a["verb"] for a, _ in execute_actions(card)}


def containers(card: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in card["body"] if item.get("type") == "Container"]


def latest_card(stack: TeamsStack) -> dict[str, Any]:
    """The approval card as it stands for everyone (its last update, else as posted)."""
    updates = [r for r in stack.connector.updates() if r.cards]
    return updates[-1].cards[-1] if updates else stack.last_card()[1]


async def test_break_glass_on_the_card_after_the_delay_runs_once_red_announced_and_reviewed(open_stack):
    stack = await open_stack(
        replies=[asks_for("delete_file", path="old.log"), says("deleted")], breakglass_channel=CHANNEL
    )
    await stack.say("policy list", person=BEN, conversation=BEN_CHAT, conversation_type="personal")  # Ben's chat
    await stack.say(f"approvers delete_file <at>{BEN.name}</at>", person=ADA, mentions=[BEN])
    await stack.say("policy set delete_file always breakglass after 5m", person=ADA)
    await stack.say("delete old.log")
    posted = stack.last_card()[1]
    assert posted["refresh"]["userIds"] == [BEN.id]
    approval_id = posted["refresh"]["action"]["data"]["approval_id"]
    assert "breakglass" not in verbs(await stack.view_as(BEN)), "not before the delay"

    # An early click (an old or forged card): refused with the time left, nothing decided.
    forged = approval_card([replace(await stack.engine.get_approval(approval_id), breakglass_open=True)])
    status, body = await stack.click("breakglass", ANA, approval_id, {breakglass_input_id(approval_id): "x"}, forged)
    assert status == 200 and any("wait 5m" in t for t in texts_of(body["value"]))
    assert stack.tools.runs_of("delete_file") == []

    stack.clock.advance(minutes=5)
    assert await stack.engine.offer_breakglass_due() == 1
    await stack.settle()
    offered = latest_card(stack)
    assert sorted(offered["refresh"]["userIds"]) == sorted([ANA.id, BEN.id])
    anas = await stack.view_as(ANA, offered)
    assert verbs(anas) == {"breakglass"}, "the requester: Break glass only (she may not approve)"
    assert any("Ana Lopez may break glass" in t for t in texts_of(anas))
    bens = await stack.view_as(BEN, offered)
    assert "approve" in verbs(bens) and "breakglass" not in verbs(bens)

    status, body = await stack.click(  # Ben forges the button: only the requester may break glass
        "breakglass", BEN, approval_id, {breakglass_input_id(approval_id): "I want to"}, forged
    )
    assert body["value"] == "Only the person who asked for this call can break glass."
    assert stack.tools.runs_of("delete_file") == []

    status, body = await stack.click(
        "breakglass", ANA, approval_id, {breakglass_input_id(approval_id): "prod is down"}, anas
    )
    assert status == 200 and stack.tools.runs_of("delete_file") == [{"path": "old.log"}], "ran once"
    red = latest_card(stack)
    [section] = containers(red)
    assert section["style"] == "attention"
    shown = texts_of(red)
    assert "break-glass by Ana Lopez: prod is down" in shown
    assert any(t.startswith("🔴 BREAK GLASS: run by Ana Lopez") for t in shown)
    assert {"breakglass_ok", "breakglass_not_ok"} <= verbs(red) and "approve" not in verbs(red)

    # The channel's top-level post and Ben's DM went through the Bot Connector (proactive posts).
    [post] = [r for r in stack.connector.posted() if r.conversation_id == CHANNEL]
    assert post.kind == "send" and "replyToId" not in post.body, "a new post at the channel's top level"
    post_text = " ".join(texts_of(post.cards[0]))
    assert {"breakglass_ok", "breakglass_not_ok"} <= verbs(post.cards[0]), "the review request has the buttons"
    assert "Break glass" in post_text and "prod is down" in post_text and "Ana Lopez ran delete_file" in post_text
    [dm] = [
        r
        for r in stack.connector.posted()
        if r.conversation_id == BEN_CHAT and r.cards and "breakglass_ok" in verbs(r.cards[0])
    ]
    assert "Ana Lopez ran delete_file" in " ".join(texts_of(dm.cards[0]))

    status, body = await stack.click("breakglass_ok", ANA, approval_id, card=red)  # never one's own break-glass
    assert body["value"] == "You broke glass on this call, so someone else must review it."
    status, body = await stack.click("breakglass_not_ok", BEN, approval_id, card=red)  # a note is required
    assert "needs a note" in body["value"]

    async def review_in_dm(verb: str, typed: dict[str, str]) -> Any:  # Ben reviews from the DM's buttons
        value = action_value(dm.cards[0], verb, approval_id, typed)
        status, body = await stack.post(
            stack.invoke(value, BEN, card_activity_id=dm.answered_id, conversation=BEN_CHAT)
        )
        await stack.settle()
        assert status == 200
        return body["value"]

    assert "recorded: not-ok" in await review_in_dm(
        "breakglass_not_ok", {review_note_input_id(approval_id): "too broad"}
    )
    assert "No open break-glass review" in await review_in_dm("breakglass_ok", {})
    reviewed = latest_card(stack)
    assert any(t.startswith("Review: not OK by Ben Okafor") and "too broad" in t for t in texts_of(reviewed))
    assert not {"breakglass_ok", "breakglass_not_ok"} & verbs(reviewed)
    assert containers(reviewed)[0]["style"] == "attention"
    assert stack.tools.runs_of("delete_file") == [{"path": "old.log"}], "still once"
