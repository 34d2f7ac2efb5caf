"""MCP tools end to end in Slack: the real @modelcontextprotocol/server-filesystem (npm, from the lockfile in
tests/npm/mcp) behind the real Bolt app, the real OpenAI client against the fake endpoint, and the real file
system checked after each click (issue 25)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.llm import OpenAIChatGenerator
from bot.mcp import parse_mcp_config
from tests.fakes.npm_packages import installed_bin
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI, SlackCall
from tests.fakes.slack_requests import form, text_input
from tests.fakes.slack_stack import SlackStack, buttons

ALICE = "U0ALICE"
CHANNEL = "C0OPS"
NPM_FOLDER = Path(__file__).resolve().parents[2] / "npm" / "mcp"


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    folder = (tmp_path / "files").resolve()
    folder.mkdir()
    (folder / "notes.txt").write_text("hello from disk")
    return folder


@pytest.fixture
async def stack(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, sandbox: Path
) -> AsyncIterator[SlackStack]:
    filesystem = installed_bin(NPM_FOLDER) / "mcp-server-filesystem"
    servers = parse_mcp_config({"mcpServers": {"fs": {"command": str(filesystem), "args": [str(sandbox)]}}}, {})
    running = await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0),
        tools=[],
        mcp_servers=tuple(servers),
    )
    yield running
    await running.stop()


def has_blocks(call: SlackCall) -> bool:
    return bool(call.args.get("blocks"))


async def mention(stack: SlackStack, slack: FakeSlackAPI, text: str) -> str:
    ts = stack.requests.next_ts()
    reply = await stack.requests.event(stack.requests.mention(ALICE, CHANNEL, f"<@{slack.bot_user_id}> {text}", ts=ts))
    assert reply.status == 200
    await stack.settle()
    return ts


def tool_messages(openai: FakeOpenAIServer) -> list[str]:
    return [m["content"] for m in openai.requests[-1]["messages"] if m["role"] == "tool"]


async def test_a_read_only_mcp_tool_runs_without_a_card(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, sandbox: Path
) -> None:
    openai.enqueue_tool_calls([("fs__read_text_file", {"path": str(sandbox / "notes.txt")})])
    openai.enqueue_text("It says hello.")
    await mention(stack, slack, "read notes.txt")

    assert not any(buttons(c.args["blocks"]) for c in slack.calls_to("chat.postMessage", has_blocks))
    assert tool_messages(openai) == ["hello from disk"]
    offered = {t["function"]["name"]: t["function"] for t in openai.requests[0]["tools"]}
    assert offered["fs__write_file"]["parameters"]["required"] == ["path", "content"]
    assert slack.calls_to("chat.postMessage")[-1].args["text"] == "It says hello."


async def test_a_write_pauses_with_the_confirm_dialog_and_approve_writes_the_file_once(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, sandbox: Path
) -> None:
    target = sandbox / "approved.txt"
    openai.enqueue_tool_calls([("fs__write_file", {"path": str(target), "content": "approved"})])
    openai.enqueue_text("Written.")
    ts = await mention(stack, slack, "write approved.txt")
    [card] = slack.calls_to("chat.postMessage", has_blocks)
    [approve] = [b for b in buttons(card.args["blocks"]) if b["action_id"] == "cs_approve"]
    assert approve["confirm"]["title"]["text"] == "Run this call?"  # destructiveHint: Slack asks before the click
    assert not target.exists()

    await stack.requests.click(
        "cs_approve", approve["value"], user=ALICE, channel=CHANNEL, message_ts=card.response["ts"], thread_ts=ts
    )
    await stack.settle()

    assert target.read_text() == "approved"
    [written] = tool_messages(openai)
    assert "approved.txt" in written
    assert [m["role"] for m in openai.requests[-1]["messages"]].count("tool") == 1  # the call ran once


async def test_reject_writes_nothing_and_the_feedback_reaches_the_model(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, sandbox: Path
) -> None:
    target = sandbox / "never.txt"
    openai.enqueue_tool_calls([("fs__write_file", {"path": str(target), "content": "x"})])
    openai.enqueue_text("Left it alone.")
    ts = await mention(stack, slack, "write never.txt")
    [card] = slack.calls_to("chat.postMessage", has_blocks)
    [reject] = [b for b in buttons(card.args["blocks"]) if b["action_id"] == "cs_reject"]

    await stack.requests.click(
        "cs_reject", reject["value"], user=ALICE, channel=CHANNEL, message_ts=card.response["ts"], thread_ts=ts
    )
    [opened] = await slack.wait_for("views.open")
    await stack.requests.submit(opened.args["view"], form("feedback", cs_feedback=text_input("not now")), user=ALICE)
    await stack.settle()

    assert not target.exists()
    [told] = tool_messages(openai)
    assert "rejected" in told and "not now" in told
