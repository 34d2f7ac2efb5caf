"""``/countersign`` admin commands and the App Home tab, end to end through the real Bolt app."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ToolCall
from bot.tools import Tool
from tests.fakes.mcp_server import configured
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_stack import SlackStack, all_text, button_values

ALICE = "U0ALICE"
ADMIN = "U0ADMIN"
MALLORY = "U0MALLORY"
CHANNEL = "C0OPS"


class Restarts:
    """A ``restart_service`` tool that records its calls."""

    def __init__(self) -> None:
        self.restarted: list[str] = []

    def tool(self) -> Tool:
        return Tool(
            name="restart_service",
            description="Restart a service.",
            parameters={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
            function=self.restart,
        )

    def restart(self, name: str) -> str:
        self.restarted.append(name)
        return f"restarted {name}"


@pytest.fixture
def restarts() -> Restarts:
    return Restarts()


@pytest.fixture
def model() -> ScriptedChatGenerator:
    call = ChatMessage.from_assistant(tool_calls=[ToolCall("restart_service", {"name": "api"})])
    return ScriptedChatGenerator([call, ChatMessage.from_assistant("Restarted api.")] * 5)


@pytest.fixture
async def stack(
    tmp_path: Path, slack: FakeSlackAPI, model: ScriptedChatGenerator, restarts: Restarts
) -> AsyncIterator[SlackStack]:
    running = await SlackStack.start(
        db_path=tmp_path / "cs.db", slack=slack, generator=model, tools=[restarts.tool()], admins={ADMIN}
    )
    yield running
    await running.stop()


async def command(stack: SlackStack, slack: FakeSlackAPI, text: str, user: str) -> str:
    """Run ``/countersign text``; return the ephemeral answer sent to the response URL."""
    before = len(slack.calls_to("response_url"))
    reply = await stack.requests.command(text, user=user, channel=CHANNEL, response_url=slack.response_url())
    assert reply.status == 200 and reply.text == ""  # acknowledged at once, nothing shown in the channel
    answers = await slack.wait_for("response_url", count=before + 1)
    await stack.settle()
    assert all(a.args["response_type"] == "ephemeral" for a in answers)
    return "\n".join(a.args["text"] for a in answers[before:])


async def test_an_admin_sets_a_policy_and_it_applies_to_the_next_request(
    stack: SlackStack, slack: FakeSlackAPI, restarts: Restarts
) -> None:
    answer = await command(stack, slack, "policy set restart_service never", ADMIN)

    assert "Rule updated" in answer and "restart_service" in answer
    [rule] = await stack.engine.policy_table("slack", slack.team_id)
    assert (rule["tool"], rule["mode"]) == ("restart_service", "never")

    await stack.requests.event(stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> restart api"))
    await stack.settle()
    assert restarts.restarted == ["api"]  # no approval asked any more
    posted = [c.args.get("blocks") or [] for c in slack.calls_to("chat.postMessage")]
    assert not any(button_values(blocks, "cs_approve") for blocks in posted)
    # it ran without approval, so the thread shows it as one tool-step line
    assert any(b.get("type") == "context" and "restart_service" in all_text([b]) for bl in posted for b in bl)


async def test_a_non_admin_cannot_change_a_policy_and_is_told_privately(stack: SlackStack, slack: FakeSlackAPI) -> None:
    answer = await command(stack, slack, "policy set restart_service never", MALLORY)

    assert "Only countersign admins can change policies." in answer
    assert await stack.engine.policy_table("slack", slack.team_id) == []
    assert slack.calls_to("chat.postMessage") == []


async def test_mcp_list_for_anyone_and_mcp_reload_for_admins_by_slash_command(
    tmp_path: Path, slack: FakeSlackAPI, model: ScriptedChatGenerator, restarts: Restarts, monkeypatch
) -> None:
    running = await SlackStack.start(
        db_path=tmp_path / "mcp.db",
        slack=slack,
        generator=model,
        tools=[restarts.tool()],
        admins={ADMIN},
        mcp_servers=configured(tmp_path / "log"),
    )
    try:
        assert "MCP servers:\n  t (stdio): ready, 10 tools" in await command(running, slack, "mcp list", MALLORY)
        assert "Only countersign admins can reload the MCP servers." in await command(
            running, slack, "mcp reload", MALLORY
        )
        config = tmp_path / "mcp.json"
        config.write_text('{"mcpServers": {"t": {"url": "ftp://nowhere"}}}')
        monkeypatch.setenv("COUNTERSIGN_MCP_CONFIG", str(config))
        answer = await command(running, slack, "mcp reload", ADMIN)
        assert "Not reloaded: COUNTERSIGN_MCP_CONFIG: server 't': 'url' must be an http" in answer
        assert running.engine.mcp is not None and running.engine.mcp.degraded() == []
    finally:
        await running.stop()


async def test_a_command_whose_text_contains_the_word_payload_is_still_a_command(
    stack: SlackStack, slack: FakeSlackAPI
) -> None:
    answer = await command(stack, slack, "policy set payload_sync never", ADMIN)

    assert "payload_sync" in answer


async def test_command_answers_are_escaped(stack: SlackStack, slack: FakeSlackAPI) -> None:
    answer = await command(stack, slack, "policy set <!channel> never", ADMIN)

    assert "<!channel>" not in answer and "&lt;!channel&gt;" in answer


async def test_anyone_may_list_policies_and_read_the_help(stack: SlackStack, slack: FakeSlackAPI) -> None:
    listing = await command(stack, slack, "policy list", MALLORY)
    assert "restart_service" in listing
    assert "policy set" in await command(stack, slack, "help", MALLORY)


async def test_the_home_tab_shows_what_the_viewer_may_decide_and_the_policy_table(
    stack: SlackStack, slack: FakeSlackAPI
) -> None:
    await command(stack, slack, "quorum restart_service 1", ADMIN)
    await stack.requests.event(stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> restart api"))
    await stack.settle()
    [approval_id] = button_values(slack.calls_to("chat.postMessage")[-1].args["blocks"], "cs_approve")

    for viewer in (ALICE, MALLORY):
        await stack.requests.event(stack.requests.home_opened(viewer))
    await stack.settle()

    homes = {c.args["user_id"]: c.args for c in slack.calls_to("views.publish")}
    alice_home, mallory_home = homes[ALICE], homes[MALLORY]
    assert alice_home["view"]["type"] == "home"
    assert button_values(alice_home["view"]["blocks"], "cs_approve") == [approval_id]
    assert "restart_service" in all_text(alice_home["view"]["blocks"])
    assert "Policies" in all_text(alice_home["view"]["blocks"])
    assert button_values(mallory_home["view"]["blocks"], "cs_approve") == []
    assert "Nothing is waiting for you" in all_text(mallory_home["view"]["blocks"])


async def test_approving_from_the_home_tab_decides_and_refreshes_it(
    stack: SlackStack, slack: FakeSlackAPI, restarts: Restarts
) -> None:
    await stack.requests.event(stack.requests.mention(ALICE, CHANNEL, "<@U0BOT> restart api"))
    await stack.settle()
    [approval_id] = button_values(slack.calls_to("chat.postMessage")[-1].args["blocks"], "cs_approve")

    refused = await stack.requests.home_click("cs_approve", approval_id, user=MALLORY)
    await stack.settle()
    assert refused.status == 200 and restarts.restarted == []
    [mallory_home] = slack.calls_to("views.publish")
    assert "can't be decided from here" in all_text(mallory_home.args["view"]["blocks"])  # never in her Home

    await stack.requests.event(stack.requests.home_opened(ALICE))
    await stack.settle()
    await stack.requests.home_click("cs_approve", approval_id, user=ALICE)
    await stack.settle()
    assert restarts.restarted == ["api"]
    alice_home = slack.calls_to("views.publish")[-1].args
    assert alice_home["user_id"] == ALICE and button_values(alice_home["view"]["blocks"], "cs_approve") == []
    assert "Approved by <@U0ALICE>" in all_text(slack.calls_to("chat.update")[-1].args["blocks"])


def test_slash_command_names_give_channels_their_names():
    from adapters.slack.app import channel_names

    assert channel_names("C1", "ops", "policy set x never <#C2|prod> <#C3>") == {"C2": "prod", "C1": "ops"}
    assert channel_names("D1", "directmessage", "usage") == {}
