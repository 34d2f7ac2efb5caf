"""Never a 500 from ``POST /slack/events``: forged, garbled, oversized and malformed requests.

Unsigned or wrongly signed → 401; signed but unreadable → 400; too large → 413; each logged in one
line, no traceback, no listener run. Signed interactivity whose fields are wrong (no actions, a
garbled ``private_metadata``, missing form state, an option the modal never offered) tells the person
(a field error or an ephemeral message) and decides nothing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from adapters.slack.guard import MAX_BODY_BYTES
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ToolCall
from bot.tools import Tool
from tests.fakes.slack_api import FakeSlackAPI, SlackCall
from tests.fakes.slack_requests import SlackReply, form, number_input, select, text_input
from tests.fakes.slack_stack import SlackStack, button_values

ALICE = "U0ALICE"
CHANNEL = "C0OPS"
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


class Scaler:
    """One sensitive tool with an enum; records every run."""

    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    def tool(self) -> Tool:
        return Tool(
            name="scale_service",
            description="Change how many replicas of a service run.",
            parameters={
                "type": "object",
                "properties": {
                    "service": {"type": "string"},
                    "replicas": {"type": "integer"},
                    "region": {"type": "string", "enum": ["eu", "us"]},
                },
                "required": ["service", "replicas"],
            },
            function=self.scale,
        )

    def scale(self, service: str, replicas: int, region: str = "eu") -> str:
        self.runs.append({"service": service, "replicas": replicas, "region": region})
        return "scaled"


@pytest.fixture
def scaler() -> Scaler:
    return Scaler()


@pytest.fixture
def model() -> ScriptedChatGenerator:
    call = ToolCall("scale_service", {"service": "api", "replicas": 3})
    return ScriptedChatGenerator([ChatMessage.from_assistant(tool_calls=[call]), ChatMessage.from_assistant("Done.")])


@pytest.fixture
async def stack(
    tmp_path: Path, slack: FakeSlackAPI, scaler: Scaler, model: ScriptedChatGenerator
) -> AsyncIterator[SlackStack]:
    running = await SlackStack.start(db_path=tmp_path / "cs.db", slack=slack, generator=model, tools=[scaler.tool()])
    yield running
    await running.stop()


async def post_raw(stack: SlackStack, body: bytes, headers: dict[str, str]) -> SlackReply:
    """POST exactly these bytes and headers (no signing)."""
    started = time.perf_counter()
    async with stack.session.post(stack.requests.url, data=body, headers=headers) as response:
        text = await response.text()
    return SlackReply(response.status, text, time.perf_counter() - started)


def sent(slack: FakeSlackAPI) -> list[SlackCall]:
    """What the bot sent to Slack after its start-up check (``auth.test``)."""
    return [c for c in slack.calls if c.method != "auth.test"]


def refusals(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "slack request refused" in r.getMessage()]


async def ask_for_approval(stack: SlackStack, slack: FakeSlackAPI) -> tuple[str, SlackCall]:
    """Mention the bot; return the mention's ts and the approval message it posted."""
    mention = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> scale api to 3")
    assert (await stack.requests.event(mention)).status == 200
    [approval] = await slack.wait_for("chat.postMessage")
    await stack.settle()
    return mention["ts"], approval


async def open_edit_modal(stack: SlackStack, slack: FakeSlackAPI) -> tuple[str, dict[str, Any]]:
    """Ask, click Edit; return the approval id and the modal as sent to ``views.open``."""
    mention_ts, approval = await ask_for_approval(stack, slack)
    [approval_id] = button_values(approval.args["blocks"], "cs_edit")
    await stack.requests.click(
        "cs_edit", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    [opened] = await slack.wait_for("views.open")
    return approval_id, opened.args["view"]


GARBLED_BODIES = {
    "truncated JSON": ('{"type": "event_callback", "event": {"type": "app_me', JSON),
    "a JSON array": ('[{"type": "event_callback"}]', JSON),
    "a JSON string": ('"event_callback"', JSON),
    "payload= that is not JSON": (urlencode({"payload": "{not json"}), FORM),
    "payload= that is a JSON list": (urlencode({"payload": "[1, 2]"}), FORM),
    "a 1 MB body": ("{" + "x" * 1_000_000, JSON),
    "an empty body": ("", JSON),
}


# ---------------------------------------------------------------------- 401: not signed correctly


async def test_unsigned_garbled_bodies_get_401_and_one_log_line_each(
    stack: SlackStack, slack: FakeSlackAPI, model: ScriptedChatGenerator, caplog: pytest.LogCaptureFixture
) -> None:
    statuses = {}
    for name, (body, content_type) in GARBLED_BODIES.items():
        statuses[name] = (await stack.requests.send(body, content_type, signature="v0=" + "0" * 64)).status
    await stack.settle()

    assert statuses == dict.fromkeys(GARBLED_BODIES, 401)
    assert len(refusals(caplog)) == len(GARBLED_BODIES)
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)
    assert sent(slack) == [] and model.calls == []


BAD_SIGNATURE_HEADERS = {
    "no signature headers": {},
    "a word as timestamp": {"X-Slack-Request-Timestamp": "soon", "X-Slack-Signature": "v0=00"},
    "non-ASCII digits": {"X-Slack-Request-Timestamp": "١٢٣", "X-Slack-Signature": "v0=00"},
    "a 400-digit timestamp": {"X-Slack-Request-Timestamp": "9" * 400, "X-Slack-Signature": "v0=00"},
    "no signature": {"X-Slack-Request-Timestamp": str(int(time.time()))},
}


async def test_missing_or_non_numeric_signature_headers_get_401(
    stack: SlackStack, slack: FakeSlackAPI, caplog: pytest.LogCaptureFixture
) -> None:
    event = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> hello")
    body = json.dumps({"type": "event_callback", "event": event, "event_id": "Ev1"}).encode()

    statuses = {}
    for name, headers in BAD_SIGNATURE_HEADERS.items():
        statuses[name] = (await post_raw(stack, body, {"Content-Type": JSON, **headers})).status
    await stack.settle()

    assert statuses == dict.fromkeys(BAD_SIGNATURE_HEADERS, 401)
    assert len(refusals(caplog)) == len(BAD_SIGNATURE_HEADERS) and "Traceback" not in caplog.text
    assert sent(slack) == []


async def test_a_body_that_is_not_utf8_gets_401(stack: SlackStack, slack: FakeSlackAPI) -> None:
    stamp = str(int(time.time()))
    reply = await post_raw(
        stack,
        b'{"type": "\xff\xfe"}',
        {"Content-Type": JSON, "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": "v0=" + "0" * 64},
    )
    assert reply.status == 401
    assert sent(slack) == []


async def test_a_body_over_the_limit_gets_413_signed_or_not(stack: SlackStack, slack: FakeSlackAPI) -> None:
    body = json.dumps({"type": "event_callback", "event": {"type": "app_mention", "text": "x" * MAX_BODY_BYTES}})

    signed = await stack.requests.send(body, JSON)
    unsigned = await stack.requests.send(body, JSON, signature="v0=00")

    assert [signed.status, unsigned.status] == [413, 413]
    assert sent(slack) == []


# ---------------------------------------------------------------------- 400: signed but unreadable


async def test_signed_garbled_bodies_get_400_and_no_listener_runs(
    stack: SlackStack, slack: FakeSlackAPI, model: ScriptedChatGenerator, caplog: pytest.LogCaptureFixture
) -> None:
    statuses = {}
    for name, (body, content_type) in GARBLED_BODIES.items():
        statuses[name] = (await stack.requests.send(body, content_type)).status
    await stack.settle()

    assert statuses == dict.fromkeys(GARBLED_BODIES, 400)
    assert len(refusals(caplog)) == len(GARBLED_BODIES)
    assert "Traceback" not in caplog.text and not any(r.exc_info for r in caplog.records)
    assert sent(slack) == [] and model.calls == []


UNROUTABLE_PAYLOADS = {
    "event a list": {"type": "event_callback", "event": []},
    "user a number": {"type": "event_callback", "event": {"type": "app_mention", "user": 7, "channel": "C1"}},
    "authorizations a dict": {"type": "event_callback", "authorizations": {"team_id": "T1"}, "event": {"type": "x"}},
    "team a number": {"type": "event_callback", "team": 5, "event": {"type": "app_mention"}},
    "view without callback": {"type": "view_submission", "user": {"id": ALICE}, "view": {"type": "modal"}},
    "type a number": {"type": 3},
    "no type": {"team_id": "T1"},
    "command without response_url": {"command": "/countersign", "user_id": ALICE, "text": "help"},
}


async def test_signed_json_payloads_bolt_cannot_route_get_400(
    stack: SlackStack, slack: FakeSlackAPI, model: ScriptedChatGenerator
) -> None:
    statuses = {}
    for name, payload in UNROUTABLE_PAYLOADS.items():
        statuses[name] = (await stack.requests.send(json.dumps(payload), JSON)).status
    await stack.settle()

    assert statuses == dict.fromkeys(UNROUTABLE_PAYLOADS, 400)
    assert sent(slack) == [] and model.calls == []


# ---------------------------------------------------------------------- signed, malformed interactivity


def click_payload(approval: SlackCall, thread_ts: str, actions: Any) -> dict[str, Any]:
    """A block_actions payload on the approval message, by Alice, with these ``actions``."""
    return {
        "type": "block_actions",
        "team": {"id": "T0TEAM"},
        "user": {"id": ALICE, "username": "alice"},
        "channel": {"id": CHANNEL},
        "container": {"type": "message", "message_ts": approval.response["ts"], "channel_id": CHANNEL},
        "message": {"ts": approval.response["ts"], "thread_ts": thread_ts},
        "trigger_id": "trig-1",
        "actions": actions,
    }


UNREADABLE_ACTIONS = {"no actions": [], "null": None, "a string": "cs_approve", "no action_id": [{"value": "x"}]}
UNREADABLE_ACTIONS["not an object"] = [7]
BAD_VALUES = {"null": None, "a number": 17, "empty": "", "unknown": "no-such-approval"}


async def test_clicks_without_a_readable_action_are_told_privately_and_decide_nothing(
    stack: SlackStack, slack: FakeSlackAPI, scaler: Scaler
) -> None:
    mention_ts, approval = await ask_for_approval(stack, slack)
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")
    buttons = [
        *UNREADABLE_ACTIONS.values(),
        *([{"type": "button", "action_id": action, "block_id": "b", "value": value}] for value in BAD_VALUES.values()
          for action in ("cs_approve", "cs_edit")),
    ]  # fmt: skip

    statuses = [(await stack.requests.interaction(click_payload(approval, mention_ts, actions))).status
                for actions in buttons]  # fmt: skip
    await stack.settle()

    assert statuses == [200] * len(buttons)
    told = slack.calls_to("chat.postEphemeral")
    assert len(told) == len(buttons)
    assert {(t.args["user"], t.args["thread_ts"]) for t in told} == {(ALICE, mention_ts)}
    assert sum("nothing was decided" in t.args["text"] for t in told) >= len(UNREADABLE_ACTIONS)
    assert (await stack.engine.get_approval(approval_id)).is_pending and scaler.runs == []
    assert slack.calls_to("views.open") == []


MALFORMED_SUBMISSIONS = {
    "metadata null": {"private_metadata": None},
    "metadata a list": {"private_metadata": ["x"]},
    "metadata garbled": {"private_metadata": "garbled\x00id"},
    "state missing": {"state": None},
    "values a string": {"state": {"values": "region=us"}},
    "values null": {"state": {"values": None}},
    "selected option a string": {"state": {"values": form(region={"type": "static_select", "selected_option": "us"})}},
    "selected option without value": {"state": {"values": form(region=select({"text": "us"}))}},
    "number value a list": {"state": {"values": form(replicas={"type": "number_input", "value": ["5"]})}},
}


async def test_malformed_edit_submissions_are_answered_in_the_modal_and_decide_nothing(
    stack: SlackStack, slack: FakeSlackAPI, scaler: Scaler
) -> None:
    approval_id, view = await open_edit_modal(stack, slack)
    answers = {}
    for name, change in MALFORMED_SUBMISSIONS.items():
        payload = {
            "type": "view_submission",
            "team": {"id": slack.team_id},
            "user": {"id": ALICE, "username": "alice"},
            "trigger_id": "trig-2",
            "view": {**view, "id": "VMODAL", "state": {"values": form(replicas=number_input("5"))}, **change},
        }
        reply = await stack.requests.interaction(payload)
        assert reply.status == 200, name
        answers[name] = reply.json()
    await stack.settle()

    for name, answer in answers.items():
        if answer["response_action"] == "errors":
            assert set(answer["errors"]) <= {"service", "replicas", "region"}, name  # only the modal's own inputs
        else:
            assert answer["response_action"] == "update" and answer["view"]["type"] == "modal", name
    assert (await stack.engine.get_approval(approval_id)).is_pending and scaler.runs == []
    assert slack.calls_to("chat.update") == []


async def test_null_field_values_are_empty_fields_as_slack_sends_them(
    stack: SlackStack, slack: FakeSlackAPI, scaler: Scaler
) -> None:
    approval_id, view = await open_edit_modal(stack, slack)
    # a null for a prefilled field means the person cleared it: required, so refused by the field
    values = form(region=select(None), service=text_input(None), replicas=number_input("4"))
    refused = await stack.requests.submit(view, values, user=ALICE)
    assert refused.json()["errors"]["service"].startswith("is required")
    assert scaler.runs == []

    values = form(region=select(None), service=text_input("api"), replicas=number_input("4"))
    reply = await stack.requests.submit(view, values, user=ALICE)
    await stack.settle()

    assert reply.text == ""
    assert scaler.runs == [{"service": "api", "replicas": 4, "region": "eu"}]  # the optional one: its default


async def test_an_option_the_modal_never_offered_is_a_field_error(
    stack: SlackStack, slack: FakeSlackAPI, scaler: Scaler
) -> None:
    approval_id, view = await open_edit_modal(stack, slack)

    forged = [{"text": {"type": "plain_text", "text": "moon"}, "value": '"moon"'}, {"value": "moon"}, {"value": 5}]
    answers = [(await stack.requests.submit(view, form(region=select(option)), user=ALICE)).json() for option in forged]
    await stack.settle()

    assert answers == [{"response_action": "errors", "errors": {"region": "choose one of the offered options"}}] * 3
    assert (await stack.engine.get_approval(approval_id)).is_pending and scaler.runs == []
    assert slack.calls_to("chat.update") == []

    offered = next(b for b in view["blocks"] if b.get("block_id") == "region")["element"]["options"]
    us = next(o for o in offered if o["value"] == '"us"')
    reply = await stack.requests.submit(view, form(region=select(us), service=text_input("web")), user=ALICE)
    await stack.settle()
    assert reply.text == ""
    assert scaler.runs == [{"service": "web", "replicas": 3, "region": "us"}]


async def test_a_reject_submission_without_metadata_decides_nothing(
    stack: SlackStack, slack: FakeSlackAPI, scaler: Scaler
) -> None:
    mention_ts, approval = await ask_for_approval(stack, slack)
    [approval_id] = button_values(approval.args["blocks"], "cs_reject")
    await stack.requests.click(
        "cs_reject", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    [opened] = await slack.wait_for("views.open")
    view = {k: v for k, v in opened.args["view"].items() if k != "private_metadata"}

    reply = await stack.requests.submit(view, {"cs_feedback": {"feedback": text_input("no")}}, user=ALICE)
    await stack.settle()

    assert reply.json()["response_action"] == "errors"
    assert (await stack.engine.get_approval(approval_id)).is_pending and scaler.runs == []


# ---------------------------------------------------------------------- a slow Slack API and the modal's ack


async def test_an_edit_submission_is_acked_before_the_message_update_completes(
    stack: SlackStack, slack: FakeSlackAPI, scaler: Scaler
) -> None:
    approval_id, view = await open_edit_modal(stack, slack)
    released = slack.hold("chat.update")  # Slack is slow: chat.update waits until the test releases it

    reply = await asyncio.wait_for(stack.requests.submit(view, form(replicas=number_input("5")), user=ALICE), 5)

    assert reply.status == 200 and reply.text == ""
    assert slack.calls_to("chat.update") == []  # not answered yet, and the ack is already back
    assert (await stack.engine.get_approval(approval_id)).status == "modified"  # decided before the ack
    await slack.wait_for("chat.update:held")
    released.set()
    await stack.settle()
    [updated] = slack.calls_to("chat.update")
    assert updated.response["ok"]
    assert scaler.runs == [{"service": "api", "replicas": 5, "region": "eu"}]
