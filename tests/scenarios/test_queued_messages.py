"""A message that arrives while its thread's run is active waits in the inbox, and the person is shown so."""

from __future__ import annotations

import io
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from rich.console import Console

from adapters.console.surface import ConsoleSurface
from adapters.teams.surface import TeamsSurface
from bot.engine.model import ThreadRef
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage
from tests.fakes.bot_connector import FakeBotConnector, FakeBotFrameworkIssuer, trust_issuer
from tests.fakes.engine_kit import says
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_stack import SlackStack
from tests.fakes.teams_stack import CHANNEL as TEAMS_CHANNEL
from tests.fakes.teams_stack import CHANNEL_THREAD, PERSONAL_CHAT, TENANT, TeamsStack

ALICE = "U0ALICE"
CHANNEL = "C0OPS"


def echo(messages: list[ChatMessage]) -> ChatMessage:
    users = [m for m in messages if m.role == "user"]
    return ChatMessage.from_assistant(f"echo {users[-1].text}")


@pytest.fixture
async def stack(tmp_path: Path, slack: FakeSlackAPI) -> AsyncIterator[SlackStack]:
    running = await SlackStack.start(
        db_path=tmp_path / "cs.db", slack=slack, generator=ScriptedChatGenerator([echo] * 5), tools=[]
    )
    yield running
    await running.stop()


async def _run_elsewhere(stack: SlackStack, thread_ts: str) -> str:
    """A run another process is working on in the thread; returns its id."""
    key = f"slack:{stack.requests.team_id}:{CHANNEL}:{thread_ts}"
    await stack.engine.storage.runs.create(
        "run-elsewhere",
        chat_history_id=key,
        platform="slack",
        workspace=stack.requests.team_id,
        channel=CHANNEL,
        thread=thread_ts,
        requester=ALICE,
    )
    return key


async def test_slack_shows_a_queued_message_on_the_thread_status_line_and_answers_it_after_the_run(
    stack: SlackStack, slack: FakeSlackAPI
) -> None:
    root = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> first")
    key = await _run_elsewhere(stack, root["ts"])
    second = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> second", thread_ts=root["ts"])
    assert (await stack.requests.event(second)).status == 200
    await stack.settle()

    [status] = slack.calls_to("assistant.threads.setStatus")
    assert (status.args["channel_id"], status.args["thread_ts"]) == (CHANNEL, root["ts"])
    assert "after the current one" in status.args["status"]
    assert slack.calls_to("chat.postMessage") == [], "nobody is asked to send it again"
    assert len(await stack.engine.storage.inbox.waiting(key)) == 1

    await stack.engine.storage.runs.transition("run-elsewhere", "running", "finished")
    await stack.engine.recover()  # the sweep finds the orphaned message
    await stack.engine.wait_idle()
    [answer] = slack.calls_to("chat.postMessage")
    assert answer.args["text"] == "echo second" and answer.args["thread_ts"] == root["ts"]


async def test_a_status_line_slack_refuses_changes_nothing_else(stack: SlackStack, slack: FakeSlackAPI) -> None:
    slack.failures["assistant.threads.setStatus"] = "not_allowed_token_type"
    root = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> first")
    key = await _run_elsewhere(stack, root["ts"])
    await stack.requests.event(stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> second", thread_ts=root["ts"]))
    await stack.settle()

    assert len(slack.calls_to("assistant.threads.setStatus")) == 1
    assert slack.calls_to("chat.postMessage") == []
    assert len(await stack.engine.storage.inbox.waiting(key)) == 1


async def test_teams_shows_a_queued_message_as_typing(tmp_path, monkeypatch) -> None:

    async with FakeBotConnector() as connector, FakeBotFrameworkIssuer() as issuer:
        trust_issuer(monkeypatch, issuer)
        stack = await TeamsStack.open(tmp_path, connector, issuer, replies=[says("Hi."), says("Hi.")])
        try:
            await stack.say("hello")  # in the channel: its reply chain's reference is stored
            await stack.say("hello", conversation=PERSONAL_CHAT, conversation_type="personal")
            await stack.engine.wait_idle()
            thread = ThreadRef("teams", TENANT, PERSONAL_CHAT, PERSONAL_CHAT)
            surface = TeamsSurface(stack.plugin.adapter, stack.engine)
            before = len(connector.typing())
            await surface.show_queued(thread, None)
            await connector.wait_for(lambda r: r.activity_type == "typing", count=before + 1)
            assert len(connector.posted()) == 2, "a typing indicator, no message"
            # a channel's reply chain gets no typing (Teams shows none there; the Playground refuses it)
            await surface.show_queued(ThreadRef("teams", TENANT, TEAMS_CHANNEL, CHANNEL_THREAD), None)
            assert len(connector.typing()) == before + 1
        finally:
            await stack.aclose()


async def test_the_console_notes_a_queued_message() -> None:

    buffer = io.StringIO()
    here = ThreadRef("console", "local", "console", "ops")
    surface = ConsoleSurface(Console(file=buffer, width=120, color_system=None), thread=here)
    await surface.show_queued(here, None)
    assert "queued: I'll answer this after the current one" in buffer.getvalue()


async def test_slack_acknowledges_a_message_only_once_it_is_stored(stack: SlackStack, slack: FakeSlackAPI) -> None:
    raw = sqlite3.connect(stack.config.db_path)
    raw.execute("ALTER TABLE inbox RENAME TO inbox_unavailable")  # storing fails, as a full disk would
    raw.commit()
    event = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> hello")

    refused = await stack.requests.event(event, event_id="Ev0STORE")
    await stack.settle()
    assert refused.status == 503, "Slack must deliver again a message that was not stored"
    assert slack.calls_to("chat.postMessage") == []

    raw.execute("ALTER TABLE inbox_unavailable RENAME TO inbox")
    raw.commit()
    raw.close()
    retried = await stack.requests.event(event, event_id="Ev0STORE", retry_num=1)
    await stack.settle()
    assert retried.status == 200
    [answer] = slack.calls_to("chat.postMessage")
    assert answer.args["text"] == "echo hello"
