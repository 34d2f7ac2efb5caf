"""Slack serving and conversation: signatures, retries, mentions, threads, DMs, what the bot ignores."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage
from tests.fakes.slack_api import FakeSlackAPI, SlackCall
from tests.fakes.slack_stack import SlackStack

ALICE = "U0ALICE"
BOB = "U0BOB"
CHANNEL = "C0OPS"


def echo(messages: list[ChatMessage]) -> ChatMessage:
    """The model: repeats the last thing the user said, and how many user messages it saw."""
    users = [m for m in messages if m.role == "user"]
    return ChatMessage.from_assistant(f"echo {users[-1].text} ({len(users)} seen)")


@pytest.fixture
def model() -> ScriptedChatGenerator:
    return ScriptedChatGenerator([echo] * 30)


@pytest.fixture
async def stack(tmp_path: Path, slack: FakeSlackAPI, model: ScriptedChatGenerator) -> AsyncIterator[SlackStack]:
    running = await SlackStack.start(db_path=tmp_path / "cs.db", slack=slack, generator=model, tools=[])
    yield running
    await running.stop()


def replies(slack: FakeSlackAPI) -> list[SlackCall]:
    return slack.calls_to("chat.postMessage")


# ---------------------------------------------------------------------- signatures


async def test_a_bad_signature_gets_401_and_nothing_happens(
    stack: SlackStack, slack: FakeSlackAPI, model: ScriptedChatGenerator
) -> None:
    event = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> hello")

    forged = await stack.requests.event(event, signature="v0=" + "0" * 64)
    stale = await stack.requests.event(event, timestamp=int(time.time()) - 6 * 60)
    unsigned = await stack.requests.send(
        json.dumps({"type": "event_callback", "event": event}), "application/json", signature=""
    )
    await stack.settle()

    assert [forged.status, stale.status, unsigned.status] == [401, 401, 401]
    assert [c.method for c in slack.calls] == ["auth.test"] and model.calls == []  # only the start-up check
    assert await stack.engine.first_time(f"slack:event:msg:{CHANNEL}:{event['ts']}")  # never seen by the engine


async def test_a_correctly_signed_mention_is_acknowledged_at_once_and_answered_in_its_thread(
    stack: SlackStack, slack: FakeSlackAPI
) -> None:
    event = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> hello")

    reply = await stack.requests.event(event)

    assert reply.status == 200 and reply.seconds < 1.0
    [answer] = await slack.wait_for("chat.postMessage")
    assert answer.args == {**answer.args, "channel": CHANNEL, "thread_ts": event["ts"], "text": "echo hello (1 seen)"}
    assert answer.token == "xoxb-test-token"


async def test_url_verification_answers_the_challenge(stack: SlackStack) -> None:
    body = json.dumps({"token": "legacy", "challenge": "c-123", "type": "url_verification"})
    reply = await stack.requests.send(body, "application/json")
    assert reply.status == 200 and reply.json() == {"challenge": "c-123"}


async def test_healthz_needs_no_signature(stack: SlackStack) -> None:
    async with stack.session.get(stack.server.make_url("/healthz")) as response:
        assert response.status == 200 and await response.json() == {"status": "ok"}


# ---------------------------------------------------------------------- retries and double delivery


async def test_a_retried_event_is_processed_once(
    stack: SlackStack, slack: FakeSlackAPI, model: ScriptedChatGenerator
) -> None:
    event = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> hello")

    first, retry = await asyncio.gather(
        stack.requests.event(event, event_id="Ev0RETRY"),
        stack.requests.event(event, event_id="Ev0RETRY", retry_num=1),
    )
    late_retry = await stack.requests.event(event, event_id="Ev0RETRY", retry_num=2)
    await stack.settle()

    assert [first.status, retry.status, late_retry.status] == [200, 200, 200]
    assert len(model.calls) == 1
    assert len(replies(slack)) == 1
    assert len(slack.calls_to("assistant.threads.setStatus", lambda c: c.args["status"] == "is thinking…")) == 1


async def test_a_mention_in_a_thread_the_bot_is_in_is_answered_once(
    stack: SlackStack, slack: FakeSlackAPI, model: ScriptedChatGenerator
) -> None:
    root = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> first")
    await stack.requests.event(root)
    await stack.settle()
    # Slack sends both an app_mention and a message.channels event for this one message.
    ts = stack.requests.next_ts()
    text = "<@U0BOT> second"
    await asyncio.gather(
        stack.requests.event(stack.requests.mention(ALICE, CHANNEL, text, thread_ts=root["ts"], ts=ts)),
        stack.requests.event(stack.requests.message(ALICE, CHANNEL, text, thread_ts=root["ts"], ts=ts)),
    )
    await stack.settle()

    assert [c.args["text"] for c in replies(slack)] == ["echo first (1 seen)", "echo second (2 seen)"]


# ---------------------------------------------------------------------- threads and DMs


async def test_the_bot_continues_a_thread_with_its_requester_without_a_new_mention(
    stack: SlackStack, slack: FakeSlackAPI, model: ScriptedChatGenerator
) -> None:
    root = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> deploy?")
    await stack.requests.event(root)
    await stack.settle()

    await stack.requests.event(stack.requests.message(BOB, CHANNEL, "looks fine to me", thread_ts=root["ts"]))
    await stack.requests.event(stack.requests.message(ALICE, CHANNEL, "and staging?", thread_ts=root["ts"]))
    await stack.settle()

    answers = replies(slack)
    # Bob talks to Alice, not to the bot: no model call, nothing stored (the model saw 2 user messages).
    assert [c.args["text"] for c in answers] == ["echo deploy? (1 seen)", "echo and staging? (2 seen)"]
    assert {c.args["thread_ts"] for c in answers} == {root["ts"]}
    assert len(model.calls) == 2


@asynccontextmanager
async def serving(
    tmp_path: Path, slack: FakeSlackAPI, model: ScriptedChatGenerator, **config: object
) -> AsyncIterator[SlackStack]:
    """A stack with these settings, stopped at the end."""
    stack = await SlackStack.start(db_path=tmp_path / "cs.db", slack=slack, generator=model, tools=[], **config)
    try:
        yield stack
    finally:
        await stack.stop()


async def send(stack: SlackStack, event: dict) -> None:
    await stack.requests.event(event)
    await stack.settle()


async def test_in_all_mode_the_bot_answers_every_reply_in_its_thread(
    tmp_path: Path, slack: FakeSlackAPI, model: ScriptedChatGenerator
) -> None:
    async with serving(tmp_path, slack, model, reply_mode="all") as stack:
        root = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> deploy?")
        await send(stack, root)
        await send(stack, stack.requests.message(BOB, CHANNEL, "and staging?", thread_ts=root["ts"]))

    assert [c.args["text"] for c in replies(slack)] == ["echo deploy? (1 seen)", "echo and staging? (2 seen)"]


async def test_in_mention_mode_only_mentions_are_answered_even_from_the_requester(
    tmp_path: Path, slack: FakeSlackAPI, model: ScriptedChatGenerator
) -> None:
    async with serving(tmp_path, slack, model, reply_mode="mention") as stack:
        root = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> deploy?")
        await send(stack, root)
        await send(stack, stack.requests.message(ALICE, CHANNEL, "thinking aloud", thread_ts=root["ts"]))
        await send(stack, stack.requests.mention(BOB, CHANNEL, "<@U0BOT> and staging?", thread_ts=root["ts"]))

    assert [c.args["text"] for c in replies(slack)] == ["echo deploy? (1 seen)", "echo and staging? (2 seen)"]


async def test_the_bot_stays_out_of_threads_and_channel_chatter_it_was_not_asked_into(
    stack: SlackStack, slack: FakeSlackAPI, model: ScriptedChatGenerator
) -> None:
    other_thread = stack.requests.next_ts()
    await stack.requests.event(stack.requests.message(ALICE, CHANNEL, "lunch?", thread_ts=other_thread))
    await stack.requests.event(stack.requests.message(ALICE, CHANNEL, "top-level chatter"))
    await stack.settle()

    assert model.calls == [] and slack.calls_to("chat.postMessage") == []


async def test_direct_messages_are_one_conversation_answered_at_the_top_level(
    stack: SlackStack, slack: FakeSlackAPI
) -> None:
    for text in ("hi", "again"):
        await stack.requests.event(stack.requests.message(ALICE, "D0ALICE", text, channel_type="im"))
        await stack.settle()

    answers = replies(slack)
    assert [c.args["text"] for c in answers] == ["echo hi (1 seen)", "echo again (2 seen)"]
    assert all(c.args["channel"] == "D0ALICE" and c.args.get("thread_ts") is None for c in answers)


async def test_own_messages_other_bots_edits_and_deletions_are_ignored(
    stack: SlackStack, slack: FakeSlackAPI, model: ScriptedChatGenerator
) -> None:
    root = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> start")
    await stack.requests.event(root)
    await stack.settle()
    thread = root["ts"]
    ignored = [
        stack.requests.message(slack.bot_user_id, CHANNEL, "my own answer", thread_ts=thread, bot_id=slack.bot_id),
        stack.requests.message("U0OTHERBOT", CHANNEL, "beep", thread_ts=thread, bot_id="B0OTHER"),
        stack.requests.message(ALICE, CHANNEL, "edited", thread_ts=thread, subtype="message_changed"),
        stack.requests.message(ALICE, CHANNEL, "", thread_ts=thread, subtype="message_deleted"),
        stack.requests.message(ALICE, "D0ALICE", "bot in a DM", channel_type="im", bot_id="B0OTHER"),
        stack.requests.mention("U0OTHERBOT", CHANNEL, "<@U0BOT> loop?") | {"bot_id": "B0OTHER"},
    ]
    for event in ignored:
        assert (await stack.requests.event(event)).status == 200
    await stack.settle()

    assert len(model.calls) == 1
    assert len(replies(slack)) == 1


async def test_the_status_line_says_the_bot_is_thinking_until_the_answer_is_in(
    stack: SlackStack, slack: FakeSlackAPI
) -> None:
    event = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> hello")
    await stack.requests.event(event)
    await stack.settle()

    statuses = [
        (c.args["channel_id"], c.args["thread_ts"], c.args["status"])
        for c in slack.calls_to("assistant.threads.setStatus")
    ]
    assert statuses == [(CHANNEL, event["ts"], "is thinking…"), (CHANNEL, event["ts"], "")]
    cleared = slack.calls_to("assistant.threads.setStatus")[-1]
    assert slack.calls.index(cleared) > slack.calls.index(replies(slack)[0])
    assert [c for c in slack.calls if c.method.startswith("reactions.")] == []  # no reaction, no reactions:write


async def test_a_long_answer_is_split_into_messages_within_slack_limits(tmp_path: Path, slack: FakeSlackAPI) -> None:
    paragraphs = [f"Paragraph {i}: " + "word & more " * 60 for i in range(40)]  # ~30 k characters
    long_text = "\n\n".join(paragraphs)
    model = ScriptedChatGenerator([ChatMessage.from_assistant(long_text)])
    stack = await SlackStack.start(db_path=tmp_path / "cs.db", slack=slack, generator=model, tools=[])
    try:
        event = stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> essay")
        await stack.requests.event(event)
        await stack.settle()
    finally:
        await stack.stop()

    parts = [c.args["text"] for c in replies(slack)]
    assert len(parts) > 5 and all(len(p) <= 4_000 for p in parts)
    assert all(c.args["thread_ts"] == event["ts"] for c in replies(slack))
    assert "\n\n".join(parts).replace("&amp;", "&") == long_text


# ---------------------------------------------------------------------- the fake answers like Slack


async def test_the_fake_web_api_refuses_unknown_methods_and_oversized_blocks_like_slack() -> None:
    async with FakeSlackAPI() as api:  # not the fixture: these payloads are meant to be invalid
        client = AsyncWebClient(token="xoxb-test", base_url=api.base_url)
        with pytest.raises(SlackApiError) as raised:
            await client.api_call("files.upload.v3", json={})
        assert raised.value.response["error"] == "unknown_method"
        with pytest.raises(SlackApiError) as raised:
            await client.chat_postMessage(channel="C1", text="x", blocks=[{"type": "divider"}] * 51)
        assert raised.value.response["error"] == "invalid_blocks"
        huge = [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 2_900}}] * 5
        with pytest.raises(SlackApiError) as raised:
            await client.chat_postMessage(channel="C1", text="x", blocks=huge)
        assert raised.value.response["error"] == "msg_blocks_too_long"
        assert [c.method for c in api.calls] == ["files.upload.v3", "chat.postMessage", "chat.postMessage"]
