"""A running MCP tool's question in Slack: a message in the thread with Answer / Decline; Answer opens a modal built
from the question's schema, whose bad values come back as field errors; only the requester (or an admin) can
answer; a link stays a link. Real Bolt over HTTP, the real Engine, the fake Slack Web API and OpenAI endpoint,
tests/fakes/mcp_server.py over stdio.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.llm import OpenAIChatGenerator
from bot.mcp import parse_mcp_config
from tests.fakes.clock import Clock
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI, SlackCall
from tests.fakes.slack_requests import form, number_input, select, text_input
from tests.fakes.slack_stack import SlackStack, all_text, assert_valid_view, button_values

ROOT = Path(__file__).resolve().parents[3]
ALICE, ADMIN, MALLORY, CHANNEL = "U0ALICE", "U0ADMIN", "U0MALLORY", "C0OPS"


@pytest.fixture
async def stack(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, clock: Clock
) -> AsyncIterator[SlackStack]:
    spec = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(tmp_path / "log.jsonl")]}
    spec["cwd"] = str(ROOT)
    running = await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0),
        tools=[],
        admins={ADMIN},
        clock=clock,
        mcp_servers=tuple(parse_mcp_config({"mcpServers": {"t": spec}}, {})),
    )
    yield running
    await running.stop()


def is_question(call: SlackCall) -> bool:
    text = all_text(call.args.get("blocks") or [])
    return "asks" in text and bool(call.args.get("blocks"))


async def ask(stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, tool: str, **args: Any) -> tuple:
    openai.enqueue_tool_calls([(tool, args)])
    openai.enqueue_text("Done.")
    ts = stack.requests.next_ts()
    await stack.requests.event(stack.requests.mention(ALICE, CHANNEL, f"<@{slack.bot_user_id}> go", ts=ts))
    [posted] = await slack.wait_for("chat.postMessage", where=is_question, seconds=20)
    return ts, posted


def option(modal: dict[str, Any], block_id: str, value: str) -> dict[str, Any]:
    [block] = [b for b in modal["blocks"] if b.get("block_id") == block_id]
    return next(o for o in block["element"]["options"] if o["value"] == value)


def server_events(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]


async def test_answer_opens_a_modal_from_the_schema_and_a_bad_value_is_a_field_error(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, tmp_path: Path
):
    ts, posted = await ask(stack, slack, openai, "t__deploy", service="api")
    assert "How should api be deployed?" in all_text(posted.args["blocks"])
    [question_id] = button_values(posted.args["blocks"], "cs_question_answer")
    click = {"user": ALICE, "channel": CHANNEL, "message_ts": posted.response["ts"], "thread_ts": ts}

    await stack.requests.click("cs_question_answer", question_id, **click)
    [opened] = await slack.wait_for("views.open")
    modal = opened.args["view"]
    assert_valid_view(modal)
    kinds = {b["block_id"]: b["element"]["type"] for b in modal["blocks"] if b["type"] == "input"}
    assert kinds == {
        "environment": "static_select",
        "replicas": "number_input",
        "canary": "static_select",
        "reason": "plain_text_input",
        "api_token": "plain_text_input",
    }
    values = form(
        environment=select(option(modal, "environment", "production")),
        replicas=number_input("11"),
        canary=select(option(modal, "canary", "true")),
        reason=text_input("release"),
    )
    refused = await stack.requests.submit(modal, values, user=ALICE)
    assert refused.status == 200 and set(json.loads(refused.text)["errors"]) == {"replicas"}

    values["replicas"] = {"value": number_input("2")}
    accepted = await stack.requests.submit(modal, values, user=ALICE)
    assert accepted.status == 200 and accepted.text == ""
    await stack.settle()

    [event] = [e for e in server_events(tmp_path) if e.get("event") == "accept"]
    assert (event["environment"], event["replicas"], event["canary"]) == ("production", 2, True)
    updated = [c for c in slack.calls_to("chat.update") if c.args.get("ts") == posted.response["ts"]]
    assert "Answered by <@U0ALICE>" in all_text(updated[-1].args["blocks"])
    assert not button_values(updated[-1].args["blocks"], "cs_question_answer")


async def test_decline_and_someone_else_is_refused(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, tmp_path: Path
):
    ts, posted = await ask(stack, slack, openai, "t__deploy", service="api")
    [question_id] = button_values(posted.args["blocks"], "cs_question_decline")
    where = {"channel": CHANNEL, "message_ts": posted.response["ts"], "thread_ts": ts}

    await stack.requests.click("cs_question_answer", question_id, user=MALLORY, **where)
    await stack.requests.click("cs_question_decline", question_id, user=MALLORY, **where)
    notes = await slack.wait_for("chat.postEphemeral", count=2, where=lambda c: c.args.get("user") == MALLORY)
    assert len(notes) == 2 and all("Only the person who asked" in c.args["text"] for c in notes)
    assert slack.calls_to("views.open") == []
    assert [e["event"] for e in server_events(tmp_path)] == ["started"]

    await stack.requests.click("cs_question_decline", question_id, user=ALICE, **where)
    await stack.settle()
    assert [e["event"] for e in server_events(tmp_path)] == ["started", "decline"]
    updated = [c for c in slack.calls_to("chat.update") if c.args.get("ts") == posted.response["ts"]]
    assert "Declined by <@U0ALICE>" in all_text(updated[-1].args["blocks"])


async def test_a_link_is_a_link_with_done(stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer):
    ts, posted = await ask(stack, slack, openai, "t__login")
    blocks = posted.args["blocks"]
    assert "<https://auth.example.com/device?code=ABC|" in all_text(blocks)
    assert not button_values(blocks, "cs_question_answer")
    [question_id] = button_values(blocks, "cs_question_done")
    await stack.requests.click(
        "cs_question_done", question_id, user=ALICE, channel=CHANNEL, message_ts=posted.response["ts"], thread_ts=ts
    )
    await stack.settle()
    assert "login accept" in json.dumps(openai.requests[-1])
    updated = [c for c in slack.calls_to("chat.update") if c.args.get("ts") == posted.response["ts"]]
    assert "Answered by <@U0ALICE>" in all_text(updated[-1].args["blocks"])
