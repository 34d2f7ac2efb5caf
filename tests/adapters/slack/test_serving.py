"""How Slack is served: Socket Mode instead of HTTP, acks before post-ack work, the plugin, the manifest."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.slack.app import BackgroundTasks
from adapters.slack.plugin import SlackPlugin
from bot.cli import main
from bot.config import Config
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ToolCall
from bot.tools import Tool
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_stack import BOT_TOKEN, SlackStack, assert_every_payload_valid, button_values

ROOT = Path(__file__).resolve().parents[3]
ALICE = "U0ALICE"
CHANNEL = "C0OPS"


@pytest.fixture
async def slack() -> AsyncIterator[FakeSlackAPI]:
    async with FakeSlackAPI() as api:
        yield api
        assert_every_payload_valid([c for c in api.calls if c.method != "socket"])


# ---------------------------------------------------------------------- Socket Mode


async def test_with_an_app_token_slack_is_served_over_socket_mode_not_http(tmp_path: Path, slack: FakeSlackAPI) -> None:
    cleaned: list[str] = []
    tool = Tool(
        name="clean_cache",
        description="Empty a cache.",
        parameters={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        function=lambda name: cleaned.append(name) or "cleaned",
    )
    model = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[ToolCall("clean_cache", {"name": "cdn"})]),
            ChatMessage.from_assistant("Cache emptied."),
        ]
    )
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=model,
        tools=[tool],
        slack_signing_secret=None,
        slack_app_token="xapp-test-token",
    )
    try:
        async with stack.session.post(stack.server.make_url("/slack/events"), data=b"{}") as response:
            assert response.status == 404  # no HTTP route in Socket Mode
        [opened] = slack.calls_to("apps.connections.open")
        assert opened.token == "xapp-test-token"

        mention = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> clean the cdn cache")
        envelope = {
            "envelope_id": "env-1",
            "type": "events_api",
            "accepts_response_payload": False,
            "retry_attempt": 0,
            "retry_reason": "",
            "payload": {"type": "event_callback", "team_id": slack.team_id, "event_id": "Ev1", "event": mention},
        }
        await slack.socket_send(envelope)
        [ack] = await slack.wait_for("socket")
        assert ack.args["envelope_id"] == "env-1"
        [approval] = await slack.wait_for("chat.postMessage")
        await stack.settle()
        [approval_id] = button_values(approval.args["blocks"], "cs_approve")

        click = {
            "type": "block_actions",
            "team": {"id": slack.team_id},
            "user": {"id": ALICE, "username": "alice"},
            "trigger_id": "trig-1",
            "container": {"type": "message", "message_ts": approval.response["ts"], "channel_id": CHANNEL},
            "channel": {"id": CHANNEL},
            "message": {"ts": approval.response["ts"], "thread_ts": mention["ts"]},
            "actions": [{"type": "button", "action_id": "cs_approve", "value": approval_id, "block_id": "b"}],
        }
        await slack.socket_send({"envelope_id": "env-2", "type": "interactive", "payload": click})
        await slack.wait_for("socket", count=2)
        await slack.wait_for("chat.postMessage", count=2)
        await stack.settle()
    finally:
        await stack.stop()

    assert cleaned == ["cdn"]
    assert slack.calls_to("chat.postMessage")[-1].args["text"] == "Cache emptied."


# ---------------------------------------------------------------------- background work


async def test_a_failing_background_task_is_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    tasks = BackgroundTasks()

    async def broken() -> None:
        raise RuntimeError("boom")

    tasks.spawn(broken(), name="broken")
    await tasks.wait_idle()
    assert "slack background task failed" in caplog.text


# ---------------------------------------------------------------------- plugin and manifest


def test_the_plugin_needs_a_bot_token_and_a_signing_secret_or_an_app_token() -> None:
    plugin = SlackPlugin()
    assert plugin.name == "slack"
    assert not plugin.is_configured(Config())
    assert not plugin.is_configured(Config(slack_bot_token="xoxb-1"))
    assert plugin.is_configured(Config(slack_bot_token="xoxb-1", slack_signing_secret="s"))
    assert plugin.is_configured(Config(slack_bot_token="xoxb-1", slack_app_token="xapp-1"))


def test_the_manifest_creates_the_whole_app_in_http_mode() -> None:
    manifest = (ROOT / "manifest.yml").read_text()
    listed = set(re.findall(r"^\s+- ([a-z_.:]+)\s*$", manifest, flags=re.M))

    scopes = {
        "app_mentions:read",
        "channels:history",
        "groups:history",
        "im:history",
        "chat:write",
        "commands",
        "usergroups:read",  # approvers and admins named by Slack user group
        "im:write",  # direct messages to approvers
    }
    events = {"app_mention", "message.channels", "message.groups", "message.im", "app_home_opened"}
    assert scopes | events <= listed
    # Nothing uses them: the status line replaced the :eyes: reaction, and no code reads users.
    assert not {"reactions:write", "users:read"} & listed
    assert re.search(r"^\s+home_tab_enabled: true$", manifest, flags=re.M)
    assert re.search(r"interactivity:\n\s+is_enabled: true\n\s+request_url: https://YOUR_HOST/slack/events", manifest)
    assert re.search(r"- command: /countersign\n\s+url: https://YOUR_HOST/slack/events", manifest)
    assert re.search(r"event_subscriptions:\n\s+request_url: https://YOUR_HOST/slack/events", manifest)
    assert re.search(r"^\s+socket_mode_enabled: false$", manifest, flags=re.M)
    assert "Socket Mode" in manifest and "connections:write" in manifest  # the comment on switching


# ---------------------------------------------------------------------- start-up and the Web API client


def cleaning_tool(cleaned: list[str]) -> Tool:
    return Tool(
        name="clean_cache",
        description="Empty a cache.",
        parameters={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
        function=lambda name: cleaned.append(name) or "cleaned",
    )


def clean_twice() -> ScriptedChatGenerator:
    return ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[ToolCall("clean_cache", {"name": "cdn"})]),
            ChatMessage.from_assistant("Cache emptied."),
        ]
    )


async def test_a_bad_bot_token_stops_serve_with_one_line_naming_the_variable_and_exit_code_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in list(os.environ):
        if name.startswith(("COUNTERSIGN_", "OPENAI_", "SLACK_", "CONNECTIONS__")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    async with FakeSlackAPI(tokens=frozenset({"xoxb-the-real-one"})) as api:
        monkeypatch.setenv("COUNTERSIGN_DB", str(tmp_path / "cs.db"))
        monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-revoked-long-ago")
        monkeypatch.setenv("SLACK_SIGNING_SECRET", "secret")
        monkeypatch.setenv("COUNTERSIGN_SLACK_API_URL", api.base_url)
        # `countersign serve` runs its own event loop; the fake answers from this one meanwhile.
        code = await asyncio.wait_for(asyncio.to_thread(main, ["serve", "--host", "127.0.0.1", "--port", "0"]), 30)
        [checked] = api.calls_to("auth.test")

    err = capsys.readouterr().err
    assert code == 2
    assert checked.response == {"ok": False, "error": "invalid_auth"}
    assert err.strip().splitlines()[-1] == (
        "countersign: configuration error: SLACK_BOT_TOKEN: Slack refused the bot token (invalid_auth)"
    )
    assert "Traceback" not in err and "xoxb-revoked-long-ago" not in err


async def test_slack_unwell_at_start_is_logged_and_serving_goes_on(
    tmp_path: Path, slack: FakeSlackAPI, caplog: pytest.LogCaptureFixture
) -> None:
    slack.failures["auth.test"] = "fatal_error"
    stack = await SlackStack.start(db_path=tmp_path / "cs.db", slack=slack, generator=clean_twice(), tools=[])
    try:
        assert "could not check SLACK_BOT_TOKEN with auth.test (fatal_error)" in caplog.text
        async with stack.session.get(stack.server.make_url("/healthz")) as response:
            assert response.status == 200
    finally:
        await stack.stop()


async def test_bolt_does_not_warn_that_a_token_is_unused(
    tmp_path: Path, slack: FakeSlackAPI, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", BOT_TOKEN)  # as under `countersign serve`: Bolt reads it too
    caplog.set_level(logging.INFO)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        stack = await SlackStack.start(db_path=tmp_path / "cs.db", slack=slack, generator=clean_twice(), tools=[])
        await stack.stop()

    assert "unused" not in caplog.text
    assert [r.getMessage() for r in caplog.records if r.name.startswith("slack_bolt") and r.levelno >= 30] == []
    assert [str(w.message) for w in caught if "slack" in w.filename] == []


async def test_web_api_calls_share_connections_instead_of_opening_one_each(tmp_path: Path, slack: FakeSlackAPI) -> None:
    cleaned: list[str] = []
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db", slack=slack, generator=clean_twice(), tools=[cleaning_tool(cleaned)]
    )
    try:
        mention = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> clean the cdn cache")
        await stack.requests.event(mention)
        [approval] = await slack.wait_for("chat.postMessage")
        await stack.settle()
        [approval_id] = button_values(approval.args["blocks"], "cs_approve")
        await stack.requests.click(
            "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"],
            thread_ts=mention["ts"],
        )  # fmt: skip
        await stack.settle()
    finally:
        await stack.stop()

    assert cleaned == ["cdn"]
    calls = [c for c in slack.calls if c.method != "response_url"]
    assert len(calls) >= 8  # auth.test, status lines, the card, App Homes, the update, the answer
    # Bolt's per-request clients and the surface share the plugin's session: a few kept-alive connections.
    assert len({c.peer for c in calls}) <= len(calls) // 2


async def test_events_at_start_do_not_each_wait_for_their_own_auth_test(tmp_path: Path, slack: FakeSlackAPI) -> None:
    stack = await SlackStack.start(db_path=tmp_path / "cs.db", slack=slack, generator=clean_twice(), tools=[])
    try:
        mentions = [stack.requests.mention(ALICE, CHANNEL, f"<@U0BOT> hello {i}") for i in range(5)]
        replies = await asyncio.gather(*(stack.requests.event(m) for m in mentions))
        assert [r.status for r in replies] == [200] * 5
        await stack.settle()
    finally:
        await stack.stop()

    # serve's own check at start; Bolt authorizes every event with its answer instead of asking again
    assert len(slack.calls_to("auth.test")) == 1


async def test_rate_limited_and_failing_web_api_calls_are_retried_by_slack_sdk(
    tmp_path: Path, slack: FakeSlackAPI
) -> None:
    cleaned: list[str] = []
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db", slack=slack, generator=clean_twice(), tools=[cleaning_tool(cleaned)]
    )
    try:
        slack.answer_status("chat.postMessage", 429, headers={"Retry-After": "0"})
        mention = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> clean the cdn cache")
        assert (await stack.requests.event(mention)).status == 200
        await stack.settle()
        throttled, approval = slack.calls_to("chat.postMessage")
        assert throttled.response == {"status": 429} and approval.response["ok"]

        slack.answer_status("chat.update", 503)
        [approval_id] = button_values(approval.args["blocks"], "cs_approve")
        await stack.requests.click(
            "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"],
            thread_ts=mention["ts"],
        )  # fmt: skip
        await stack.settle()
    finally:
        await stack.stop()

    failed, updated = slack.calls_to("chat.update")
    assert failed.response == {"status": 503} and updated.response["ok"]
    assert "Approved by" in updated.args["text"] or "cs_approve" not in str(updated.args["blocks"])
    assert cleaned == ["cdn"]


async def test_a_card_update_that_still_fails_is_logged_with_its_approval_id(
    tmp_path: Path, slack: FakeSlackAPI, caplog: pytest.LogCaptureFixture
) -> None:
    cleaned: list[str] = []
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db", slack=slack, generator=clean_twice(), tools=[cleaning_tool(cleaned)]
    )
    try:
        mention = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> clean the cdn cache")
        await stack.requests.event(mention)
        [approval] = await slack.wait_for("chat.postMessage")
        await stack.settle()
        slack.failures["chat.update"] = "message_not_found"
        [approval_id] = button_values(approval.args["blocks"], "cs_approve")
        await stack.requests.click(
            "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"],
            thread_ts=mention["ts"],
        )  # fmt: skip
        await stack.settle()
    finally:
        await stack.stop()

    [logged] = [r for r in caplog.records if "approval message not updated" in r.getMessage()]
    assert approval_id in logged.getMessage() and "message_not_found" in logged.getMessage()
    assert logged.levelno == logging.ERROR
    assert cleaned == ["cdn"]  # the decision stands
