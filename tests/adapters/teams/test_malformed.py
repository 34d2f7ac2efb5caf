"""Garbled and forged requests to ``POST /api/messages``: never a 500, never a decision, one log line.

Real stack (engine on SQLite, the served app behind the SDK's JWT check, a fake Bot Connector). A card
click whose ``value`` is missing, mistyped or not ours is answered 200 with one sentence; a click
carrying values its card never offered gets the card back with the problem by the field; a body
that is not a Teams activity gets a 400 naming the wrong fields. Nothing is decided, nothing runs,
nobody sees a traceback, and the log gets exactly one line.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import pytest

from adapters.teams.agent import GENERIC_FAILURE, NOT_OURS
from adapters.teams.cards import feedback_input_id, invoke_message_response, param_input_id
from bot.tools import tool
from tests.fakes.bot_connector import FakeBotConnector, FakeBotFrameworkIssuer, trust_issuer
from tests.fakes.engine_kit import RecordingTools, asks_for, echoes_results
from tests.fakes.teams_stack import ANA, TeamsStack, action_value, approval_ids, texts_of

MESSAGE_TYPE = "application/vnd.microsoft.activity.message"


class ToolsWithChoices(RecordingTools):
    """The standard tools plus ``deploy``, whose ``region`` is a choice list on the card."""

    def standard(self) -> list[Any]:
        """The standard tools and ``deploy``."""
        tools = self

        @tool
        def deploy(
            service: str, region: Literal["eu-west-1", "us-east-1"], replicas: int = 1, canary: float = 0.1
        ) -> str:
            """Deploy a service.

            :param service: The service.
            :param region: Where to deploy.
            :param replicas: How many replicas.
            :param canary: The share of traffic the new version gets first.
            """
            tools.record("deploy", {"service": service, "region": region, "replicas": replicas})
            return f"{service} deployed to {region}"

        return [*super().standard(), deploy]


@pytest.fixture
async def stack(tmp_path, monkeypatch):
    async with FakeBotConnector() as connector, FakeBotFrameworkIssuer() as issuer:
        trust_issuer(monkeypatch, issuer)
        opened = await TeamsStack.open(
            tmp_path,
            connector,
            issuer,
            tools=ToolsWithChoices(),
            replies=[asks_for("deploy", service="web", region="eu-west-1", replicas=3), echoes_results],
        )
        yield opened
        await opened.aclose()


async def pending_card(stack: TeamsStack) -> tuple[str, dict[str, Any], str]:
    """Ask for a deploy; the card's activity id, the card, and the approval id."""
    assert await stack.say("deploy web") == 202
    request, _ = stack.last_card()
    card = await stack.view_as(ANA)  # the requester's own view, with the buttons
    [approval_id] = approval_ids(card)
    return request.answered_id, card, approval_id


def warnings_and_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.WARNING]


async def assert_nothing_decided(stack: TeamsStack, approval_id: str) -> None:
    assert stack.tools.executed == []
    assert stack.connector.updates() == []
    assert (await stack.engine.get_approval(approval_id)).is_pending


GARBLED_VALUES = {
    "no value": None,
    "a list instead of an object": ["approve"],
    "a string": "approve",
    "action is null": {"action": None},
    "action is a list": {"action": [{"verb": "approve"}]},
    "no action type": {"action": {"verb": "approve", "data": {"approval_id": "{id}"}}},
    "data is a list": {"action": {"type": "Action.Execute", "verb": "approve", "data": ["{id}"]}},
    "data is null": {"action": {"type": "Action.Execute", "verb": "approve", "data": None}},
    "no approval id": {"action": {"type": "Action.Execute", "verb": "approve", "data": {"verb": "approve"}}},
    "approval id is null": {"action": {"type": "Action.Execute", "verb": "approve", "data": {"approval_id": None}}},
    "approval id is a number": {"action": {"type": "Action.Execute", "verb": "approve", "data": {"approval_id": 7}}},
    "verb is a list": {"action": {"type": "Action.Execute", "verb": ["approve"], "data": {"approval_id": "{id}"}}},
    "unknown verb": {"action": {"type": "Action.Execute", "verb": "launch", "data": {"approval_id": "{id}"}}},
}


def with_id(value: Any, approval_id: str) -> Any:
    if isinstance(value, dict):
        return {k: with_id(v, approval_id) for k, v in value.items()}
    if isinstance(value, list):
        return [with_id(v, approval_id) for v in value]
    return approval_id if value == "{id}" else value


async def test_a_garbled_click_is_answered_200_with_one_sentence_and_decides_nothing(stack, caplog):
    card_id, _, approval_id = await pending_card(stack)
    for case, value in GARBLED_VALUES.items():
        caplog.clear()
        invoke = stack.invoke({}, ANA, card_activity_id=card_id)
        invoke["value"] = with_id(value, approval_id)

        with caplog.at_level(logging.INFO):
            status, body = await stack.post(invoke)
            await stack.settle()

        assert status == 200, case
        assert body == {"statusCode": 200, "type": MESSAGE_TYPE, "value": NOT_OURS}, case
        [line] = warnings_and_errors(caplog)
        assert line.getMessage() == "card click not understood; nothing decided" and line.exc_info is None, case
    await assert_nothing_decided(stack, approval_id)


async def test_a_click_on_an_unknown_approval_says_so(stack, caplog):
    card_id, card, approval_id = await pending_card(stack)
    value = action_value(card, "approve")
    value["action"]["data"]["approval_id"] = "ap-does-not-exist"

    status, body = await stack.post(stack.invoke(value, ANA, card_activity_id=card_id))
    await stack.settle()

    assert status == 200 and body["type"] == MESSAGE_TYPE and body["value"] == "This approval no longer exists."
    await assert_nothing_decided(stack, approval_id)


FORGED_EDITS = {
    "a choice the list never offered": ("region", "mars-north-1", "region must be one of: eu-west-1, us-east-1"),
    "a word for a whole number": ("replicas", "three", "replicas must be a whole number"),
    "not a number for a number": ("canary", "NaN", "canary must be a finite number"),
    "infinity for a number": ("canary", "1e999", "canary must be a finite number"),
    "a parameter the tool does not have": ("image", "evil:latest", "image cannot be edited on this card"),
    "a list instead of text": ("service", ["web", "api"], "service was not sent as text"),
    "null instead of text": ("service", None, "service was not sent as text"),
}


async def test_a_forged_edit_comes_back_with_the_problem_by_the_field_and_decides_nothing(stack, caplog):
    card_id, card, approval_id = await pending_card(stack)
    for case, (field, sent, problem) in FORGED_EDITS.items():
        value = action_value(card, "edit", approval_id)
        value["action"]["data"][param_input_id(approval_id, field)] = sent
        caplog.clear()

        with caplog.at_level(logging.INFO):
            status, body = await stack.post(stack.invoke(value, ANA, card_activity_id=card_id))
            await stack.settle()

        assert status == 200 and body["type"] == "application/vnd.microsoft.card.adaptive", case
        shown = texts_of(body["value"])
        assert shown[0].startswith("Nothing was decided: ") and problem in shown[0], case
        assert problem in shown[1:], f"{case}: the problem is also shown by the field"
        assert approval_ids(body["value"]) == [approval_id], f"{case}: the card keeps its buttons"
        [line] = warnings_and_errors(caplog)
        assert line.getMessage() == "card click refused: invalid values; nothing decided", case
        assert line.exc_info is None, case
    await assert_nothing_decided(stack, approval_id)


async def test_a_forged_reject_feedback_decides_nothing(stack):
    card_id, card, approval_id = await pending_card(stack)
    for feedback in (["no"], "x" * 1_001):
        value = action_value(card, "reject", approval_id)
        value["action"]["data"][feedback_input_id(approval_id)] = feedback

        status, body = await stack.post(stack.invoke(value, ANA, card_activity_id=card_id))
        await stack.settle()

        assert status == 200
        assert texts_of(body["value"])[0].startswith("Nothing was decided: the feedback"), feedback
    await assert_nothing_decided(stack, approval_id)


async def test_unknown_extra_fields_outside_the_form_are_ignored_and_the_click_works(stack):
    card_id, card, approval_id = await pending_card(stack)
    value = action_value(card, "edit", approval_id, typed={param_input_id(approval_id, "replicas"): "5"})
    value["action"]["data"]["utm_source"] = "newsletter"
    value["trigger"] = "automatic"

    status, _ = await stack.post(stack.invoke(value, ANA, card_activity_id=card_id))
    await stack.settle()

    assert status == 200
    assert stack.tools.runs_of("deploy") == [{"service": "web", "region": "eu-west-1", "replicas": 5}]


def garble(activity: dict[str, Any], field: str, value: Any) -> dict[str, Any]:
    garbled = dict(activity)
    if value is DROP:
        del garbled[field]
    else:
        garbled[field] = value
    return garbled


DROP = object()
GARBLED_MESSAGES = {
    "no sender": ("from", DROP, "the activity has no sender (from.id)"),
    "sender is null": ("from", None, "invalid or wrongly typed field(s): from"),
    "sender is a string": ("from", "29:1ana", "invalid or wrongly typed field(s): from"),
    "sender without an id": ("from", {"name": "Ana"}, "the activity has no sender (from.id)"),
    "no conversation": ("conversation", DROP, "the activity has no type or no conversation id"),
    "conversation is null": ("conversation", None, "invalid or wrongly typed field(s): conversation"),
    "text is a number": ("text", 42, "invalid or wrongly typed field(s): text"),
    "text is a list": ("text", ["delete", "all"], "invalid or wrongly typed field(s): text"),
    "no recipient": ("recipient", DROP, "the activity has no recipient"),
    "no service url": ("serviceUrl", DROP, "the activity has no http(s) serviceUrl to answer to"),
    "service url not http": ("serviceUrl", "file:///etc/passwd", "the activity has no http(s) serviceUrl to answer to"),
    "entities is a string": ("entities", "mention", "invalid or wrongly typed field(s): entities"),
    "conflicting product info": (
        "entities",
        [{"type": "ProductInfo", "id": "not-teams"}],
        "the activity is inconsistent (Exception)",
    ),
}


async def test_a_garbled_message_gets_a_400_naming_the_problem_and_reaches_nobody(stack, caplog):
    for case, (field, value, reason) in GARBLED_MESSAGES.items():
        caplog.clear()
        message = stack.message("delete everything")
        if case == "conflicting product info":
            message["channelId"] = "msteams:sub-channel"
        with caplog.at_level(logging.INFO):
            status, body = await stack.post(garble(message, field, value))
            await stack.settle()

        assert status == 400, case
        assert body == {"error": f"not a valid activity: {reason}"}, case
        [line] = warnings_and_errors(caplog)
        assert (line.getMessage(), line.reason, line.exc_info) == ("teams request rejected", reason, None), case
    assert stack.connector.requests == [] and stack.generator.calls == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [(b"{not json", "the body is not JSON"), (b"[1, 2]", "not a valid activity: the body is not a JSON object")],
    ids=["not json", "a list"],
)
async def test_a_body_that_is_not_an_activity_gets_a_400(stack, body, reason):
    headers = {"Authorization": f"Bearer {stack.token()}", "Content-Type": "application/json"}
    async with stack.session.post(f"{stack.url}/api/messages", data=body, headers=headers) as response:
        assert response.status == 400
        assert await response.json() == {"error": reason}
    assert stack.connector.requests == []


async def test_after_garbage_the_bot_still_answers_normally(stack):
    await stack.post(garble(stack.message("x"), "text", 42))
    card_id, _, approval_id = await pending_card(stack)

    status, _ = await stack.click("approve", ANA, approval_id)

    assert status == 200
    assert stack.tools.runs_of("deploy") == [{"service": "web", "region": "eu-west-1", "replicas": 3}]


async def test_when_the_sdk_fails_outside_the_turn_a_click_still_gets_its_200_and_a_message_a_400(stack, caplog):
    # A recipient that claims an "agentic" identity makes the SDK look for agentic ids and raise
    # before our handler runs (it used to be a 500). Nobody is told more than one sentence.
    card_id, card, approval_id = await pending_card(stack)
    agentic = {"id": "28:bot", "name": "countersign", "role": "agenticUser"}
    click = stack.invoke(action_value(card, "approve"), ANA, card_activity_id=card_id)
    caplog.clear()

    with caplog.at_level(logging.INFO):
        click_status, click_body = await stack.post(garble(click, "recipient", agentic))
        message_status, message_body = await stack.post(garble(stack.message("hi"), "recipient", agentic))
        await stack.settle()

    assert click_status == 200 and click_body == invoke_message_response(GENERIC_FAILURE)
    assert message_status == 400 and message_body == {"error": "the bot could not handle this activity"}
    await assert_nothing_decided(stack, approval_id)
    assert [r.getMessage() for r in warnings_and_errors(caplog)] == ["teams request failed"] * 2
