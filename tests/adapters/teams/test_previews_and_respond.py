"""Previews and Respond in Teams (issue 30): the card shows the preview; "Respond" is a card input whose text the
model gets instead of running the tool.

The real ``countersign serve`` app with the Teams plugin, signed activities, the fake Bot Connector and the
real engine (the fixtures of ``tests/adapters/teams/test_flow.py``).
"""

# ruff: noqa: F811 - the fixtures of tests/adapters/teams/test_flow.py are imported, and test arguments name them

from __future__ import annotations

from adapters.teams.cards import respond_input_id
from bot.tools import Tool, tool
from tests.adapters.teams.test_flow import open_stack  # noqa: F401 - a fixture
from tests.fakes.engine_kit import RecordingTools, asks_for, says
from tests.fakes.teams_stack import ANA, approval_ids, assert_valid_card, texts_of


class WithRestart(RecordingTools):
    def standard(self) -> list[Tool]:
        tools = self

        def plan(service: str) -> str:
            return f"3 pods of {service} will restart"

        @tool(preview=plan, respondable=True)
        def restart_service(service: str) -> str:
            """Restart a service.

            :param service: The service.
            """
            tools.record("restart_service", {"service": service})
            return "restarted"

        return [*super().standard(), restart_service]


async def test_the_card_shows_the_preview_and_respond_answers_in_the_tools_place(open_stack):
    stack = await open_stack(replies=[asks_for("restart_service", service="web"), says("noted")], tools=WithRestart())

    await stack.say("restart web")
    card = await stack.view_as(ANA)
    assert_valid_card(card)
    texts = texts_of(card)
    assert "3 pods of web will restart" in texts
    assert respond_input_id(approval_ids(card)[0]) in str(card), "the Respond input is on the card"
    [approval_id] = approval_ids(card)

    status, body = await stack.click(
        "respond", ANA, approval_id, typed={respond_input_id(approval_id): "I restarted it by hand"}, card=card
    )

    assert status == 200 and stack.tools.runs_of("restart_service") == []
    assert any("instead of running the tool: I restarted it by hand" in t for t in texts_of(body["value"]))


async def test_an_empty_answer_decides_nothing(open_stack):
    stack = await open_stack(replies=[asks_for("restart_service", service="web"), says("noted")], tools=WithRestart())
    await stack.say("restart web")
    card = await stack.view_as(ANA)
    [approval_id] = approval_ids(card)

    status, body = await stack.click(
        "respond", ANA, approval_id, typed={respond_input_id(approval_id): "  "}, card=card
    )

    assert status == 200 and stack.tools.runs_of("restart_service") == []
    assert "needs some text" in str(body)
    assert (await stack.engine.get_approval(approval_id)).is_pending
