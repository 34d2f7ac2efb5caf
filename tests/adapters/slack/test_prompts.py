"""Slack's AI-app surface: opening the assistant thread offers at most 4 prompts from the configured tools."""

from __future__ import annotations

import json
from pathlib import Path

from adapters.slack.prompts import suggested_prompts
from bot.tools import tool
from tests.fakes.engine_kit import RecordingTools, ScriptedChatGenerator
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_stack import SlackStack


async def test_an_opened_assistant_thread_gets_up_to_four_prompts_from_the_tools(tmp_path: Path, slack: FakeSlackAPI):
    @tool
    def get_time() -> str:
        """Tell the time. In UTC."""
        return "now"

    tools = [*RecordingTools().standard(), get_time]  # five tools
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db", slack=slack, generator=ScriptedChatGenerator([]), tools=tools
    )
    try:
        event = {
            "type": "assistant_thread_started",
            "assistant_thread": {"user_id": "U0ALICE", "channel_id": "D0ALICE", "thread_ts": "1710000000.000200"},
            "event_ts": "1710000000.000201",
        }
        reply = await stack.requests.event(event)
        assert reply.status == 200
        [call] = await slack.wait_for("assistant.threads.setSuggestedPrompts")
    finally:
        await stack.stop()

    assert call.response["ok"] is True
    prompts = call.args["prompts"]
    prompts = json.loads(prompts) if isinstance(prompts, str) else prompts
    assert call.args["channel_id"] == "D0ALICE" and call.args["thread_ts"] == "1710000000.000200"
    assert [p["title"] for p in prompts] == ["Delete file", "Scale service", "Read logs", "Set secret"]  # 4 of 5
    assert prompts[0]["message"] == "Help me with delete_file: delete a file in the sandbox"


def test_no_tools_no_prompts_and_never_more_than_four():
    assert suggested_prompts([]) == []
    assert len(suggested_prompts(RecordingTools().standard() * 3)) == 4
