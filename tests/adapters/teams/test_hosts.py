"""Hosts other than Teams (the Agents Playground's ``emulator`` channel, webchat, Outlook): buttons on the
shared card where user-specific views are not asked for, ``COUNTERSIGN_TEAMS_USER_VIEWS``, cleared fields in
Edit, and the card's summary. Real HTTP to the fake Bot Connector; the real engine and SQLite."""

from __future__ import annotations

import pytest

from adapters.teams.cards import param_input_id
from adapters.teams.hosts import may_stream, may_type, uses_user_views
from tests.fakes.bot_connector import FakeBotConnector, FakeBotFrameworkIssuer, trust_issuer
from tests.fakes.engine_kit import asks, asks_for, call, echoes_results
from tests.fakes.teams_stack import ADA, ANA, BEN, CHANNEL, TeamsStack, action_value, approval_ids, texts_of


@pytest.fixture
async def fakes(monkeypatch):
    async with FakeBotConnector() as connector, FakeBotFrameworkIssuer() as issuer:
        trust_issuer(monkeypatch, issuer)
        yield connector, issuer


@pytest.fixture
async def open_stack(tmp_path, fakes):
    opened: list[TeamsStack] = []

    async def make(**kwargs) -> TeamsStack:
        stack = await TeamsStack.open(tmp_path, *fakes, **kwargs)
        opened.append(stack)
        return stack

    yield make
    for stack in opened:
        await stack.aclose()


def record(channel_id: str | None, conversation_type: str | None, conversation_id: str = "c") -> dict:
    conversation = {"id": conversation_id, **({"conversationType": conversation_type} if conversation_type else {})}
    return {"conversation_reference": {"channelId": channel_id, "conversation": conversation}}


@pytest.mark.parametrize(
    ("mode", "channel", "kind", "expected"),
    [
        ("auto", "msteams", "personal", True),
        ("auto", "msteams", "groupChat", True),
        ("auto", "msteams", "channel", True),
        ("auto", "msteams", None, False),
        ("auto", "emulator", "personal", False),
        ("auto", "webchat", None, False),
        ("auto", "directline", "channel", False),
        ("on", "emulator", "personal", True),
        ("off", "msteams", "channel", False),
    ],
)
def test_user_views_are_used_only_where_the_host_asks_for_them(mode, channel, kind, expected):
    assert uses_user_views(mode, record(channel, kind)) is expected


def test_streams_only_in_personal_chats_and_typing_never_in_a_channel_reply_chain():
    assert may_stream(record("msteams", "personal"))
    assert may_stream(record("webchat", None))
    assert not may_stream(record("msteams", "groupChat"))
    assert not may_stream(record("msteams", "channel", "19:x@thread.tacv2;messageid=1"))
    assert may_type(record("msteams", "groupChat")) and may_type(record("msteams", "personal"))
    assert not may_type(record("msteams", "channel", "19:x@thread.tacv2;messageid=1"))
    assert not may_type(record("emulator", None, "team-id;messageid=17"))


async def test_in_the_playground_channel_the_shared_card_has_the_buttons_and_clicks_are_still_checked(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results], channel_id="emulator")
    await stack.say("delete old.log")
    _, posted = stack.last_card()
    assert "refresh" not in posted and len(approval_ids(posted)) == 1  # no user views: buttons for all

    status, refused = await stack.click("approve", BEN, card=posted)  # a bystander clicks the shared button
    assert status == 200 and stack.tools.executed == []
    assert refused["type"] == "application/vnd.microsoft.activity.message"  # one sentence, decided nothing

    status, body = await stack.click("approve", ANA, card=posted)
    assert status == 200 and any("Approved by" in t for t in texts_of(body["value"]))
    again = await stack.click("approve", ANA, card=posted)  # the shared button, clicked twice
    assert again[0] == 200
    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]  # once
    update = stack.connector.updates()[-1]
    assert approval_ids(update.cards[0]) == [] and "refresh" not in update.cards[0]
    assert update.body.get("summary", "").startswith("delete_file: approved by")


@pytest.mark.parametrize(("mode", "views"), [("off", False), ("on", True)])
async def test_the_setting_overrides_the_host(open_stack, mode, views):
    channel = "msteams" if mode == "off" else "emulator"
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log")], user_views=mode, channel_id=channel)
    await stack.say("delete old.log")
    _, posted = stack.last_card()
    assert ("refresh" in posted) is views
    assert (approval_ids(posted) == []) is views


async def test_a_cleared_required_field_is_refused_by_the_field_and_nothing_runs(open_stack):
    stack = await open_stack(replies=[asks_for("scale_service", service="nginx", replicas=2, dry_run=False)])
    await stack.say("scale nginx")
    own = await stack.view_as(ANA)
    [approval_id] = approval_ids(own)
    service = param_input_id(approval_id, "service")
    assert any(e.get("id") == service and e.get("isRequired") and e.get("errorMessage") for e in inputs(own))

    status, body = await stack.click("edit", ANA, typed={service: "", param_input_id(approval_id, "dry_run"): "true"})

    assert status == 200 and stack.tools.executed == []
    shown = " ".join(texts_of(body["value"]))
    assert "Nothing was decided" in shown and "service is required" in shown
    assert await stack.engine.get_approval(approval_id) is not None
    assert (await stack.engine.get_approval(approval_id)).is_pending


async def test_a_cleared_optional_field_takes_its_default_and_the_card_shows_it_edited(open_stack):
    stack = await open_stack(
        replies=[asks_for("scale_service", service="nginx", replicas=2, zones=["eu-1"]), echoes_results]
    )
    await stack.say("scale nginx")
    [approval_id] = approval_ids(await stack.view_as(ANA))

    status, body = await stack.click("edit", ANA, typed={param_input_id(approval_id, "zones"): ""})

    assert status == 200
    [(_, ran)] = stack.tools.executed
    assert ran["zones"] is None and ran["service"] == "nginx"  # the default, not the old ["eu-1"]
    assert 'edited; was ["eu-1"]' in " ".join(texts_of(body["value"]))


def inputs(card) -> list[dict]:
    found: list[dict] = []

    def walk(node):
        if isinstance(node, dict):
            if str(node.get("type", "")).startswith("Input."):
                found.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(card)
    return found


async def test_admin_answers_name_people_and_the_channel_not_their_ids(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log")])
    named_channel = stack.message("delete old.log")
    named_channel["channelData"]["channel"] = {"id": CHANNEL, "name": "ops-alerts"}
    await stack.post(named_channel)
    await stack.settle()

    await stack.say("pending", person=ADA)
    await stack.say("policy list", person=ADA)

    pending, policies = (" ".join(texts_of(r.cards[0])) for r in stack.connector.posted()[-2:])
    assert "asked by Ana Lopez" in pending and ANA.id not in pending
    assert "ops-alerts" in policies and CHANNEL not in policies


async def test_a_refused_approve_all_names_who_decided(open_stack):
    stack = await open_stack(replies=[asks(call("delete_file", path="a.log"), call("delete_file", path="b.log"))])
    await stack.say("delete a.log and b.log")
    own = await stack.view_as(ANA)
    first, _ = approval_ids(own)
    await stack.click("approve", ANA, first)

    stale = action_value(own, "approve_all")  # the old card, still offering Approve all
    status, body = await stack.post(stack.invoke(stale, ADA, card_activity_id=stack.last_card()[0].answered_id))
    await stack.settle()

    shown = " ".join(texts_of(body["value"])) if body.get("type", "").endswith("adaptive") else body["value"]
    assert status == 200 and "Ana Lopez" in shown and ANA.id not in shown
