"""Memory on Slack, end to end: real Bolt app, the openai client against the fake model, the fake Web API.

A fact remembered in one thread answers in another thread of the channel; one person's memory never
reaches another person's run; ``/countersign memory forget`` forgets.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bot.llm import OpenAIChatGenerator
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI, SlackCall
from tests.fakes.slack_stack import SlackStack, button_values

ALICE = "U0ALICE"
BOB = "U0BOB"
CHANNEL = "C0OPS"
HEADER = "Relevant memories:"


def recall(body: dict[str, Any]) -> str:
    """The fake model's answer when nothing is queued: the memories it was shown, or "I don't know."."""
    shown = [m["content"] for m in body["messages"] if m["role"] == "system" and m["content"].startswith(HEADER)]
    return shown[0].split("\n", 1)[1] if shown else "I don't know."


@pytest.fixture
async def openai() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer(responder=recall) as server:
        yield server


@pytest.fixture
async def stack(tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer) -> AsyncIterator[SlackStack]:
    generator = OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0)
    running = await SlackStack.start(db_path=tmp_path / "cs.db", slack=slack, generator=generator, tools=[])
    yield running
    await running.stop()


async def mention(stack: SlackStack, slack: FakeSlackAPI, user: str, text: str) -> tuple[str, list[SlackCall]]:
    """Mention the bot in a new thread; the thread's ts and what the bot posted in it."""
    ts = stack.requests.next_ts()
    reply = await stack.requests.event(stack.requests.mention(user, CHANNEL, f"<@{slack.bot_user_id}> {text}", ts=ts))
    assert reply.status == 200
    await stack.settle()
    return ts, slack.calls_to("chat.postMessage", lambda c: c.args.get("thread_ts") == ts)


async def command(stack: SlackStack, slack: FakeSlackAPI, text: str, user: str) -> str:
    """``/countersign text``; the ephemeral answer."""
    before = len(slack.calls_to("response_url"))
    reply = await stack.requests.command(text, user=user, channel=CHANNEL, response_url=slack.response_url())
    assert reply.status == 200
    answers = await slack.wait_for("response_url", count=before + 1)
    await stack.settle()
    return "\n".join(a.args["text"] for a in answers[before:])


async def test_a_channel_fact_taught_in_one_thread_answers_in_another(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer
) -> None:
    openai.enqueue_tool_calls([("remember", {"fact": "checkout deploys need two approvers", "for_channel": True})])
    openai.enqueue_text("Noted for the channel.")
    taught_ts, [approval] = await mention(stack, slack, ALICE, "remember for all: checkout deploys need two approvers")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")  # a channel memory asks first
    await stack.requests.click(
        "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=taught_ts
    )
    await stack.settle()

    _, [answer] = await mention(stack, slack, BOB, "how many approvers do checkout deploys need?")

    assert "checkout deploys need two approvers" in answer.args["text"]
    assert "(from channel memory: checkout deploys need two approvers)" in answer.args["text"]
    sent = openai.requests[-1]["messages"]
    assert sent[1] == {"role": "system", "content": f"{HEADER}\n- checkout deploys need two approvers"}


async def test_a_persons_memory_never_reaches_another_and_forget_forgets(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer
) -> None:
    openai.enqueue_tool_calls([("remember", {"fact": "my staging cluster is eu-2"})])
    openai.enqueue_text("Noted.")
    _, taught = await mention(stack, slack, ALICE, "remember my staging cluster is eu-2")
    step, answer = (c.args["text"] for c in taught)  # one's own memory: no approval, one tool-step line
    assert step.startswith("remember(fact=my staging cluster is eu-2) → Remembered (your memory, id ")
    assert answer == "Noted."

    _, [bobs] = await mention(stack, slack, BOB, "which staging cluster?")
    assert bobs.args["text"] == "I don't know."
    assert all(HEADER not in m["content"] for m in openai.requests[-1]["messages"] if m["role"] == "system")

    _, [alices] = await mention(stack, slack, ALICE, "which staging cluster?")
    assert "my staging cluster is eu-2" in alices.args["text"]

    listing = await command(stack, slack, "memory list", ALICE)
    [memory_id] = re.findall(r"([0-9a-f]{16})  my staging cluster is eu-2", listing)
    assert "eu-2" not in await command(stack, slack, "memory list", BOB)
    assert f"No memory {memory_id} of yours." in await command(stack, slack, f"memory forget {memory_id}", BOB)
    assert f"Forgotten: {memory_id}." in await command(stack, slack, f"memory forget {memory_id}", ALICE)

    _, [after] = await mention(stack, slack, ALICE, "which staging cluster?")
    assert after.args["text"] == "I don't know."
