"""Previews and Respond in Teams (issue 30): the card shows the preview; "Respond" is a card input whose text the
model gets instead of running the tool.

The real ``countersign serve`` app with the Teams plugin, signed activities, the fake Bot Connector and the
real engine (the fixtures of ``tests/adapters/teams/test_flow.py``).
"""

# ruff: noqa: F811 - the fixtures of tests/adapters/teams/test_flow.py are imported, and test arguments name them

from __future__ import annotations

import json

from adapters.teams.cards import SHOW_MORE_LABEL, respond_input_id
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


class WithLongPlan(RecordingTools):
    def standard(self) -> list[Tool]:
        tools = self

        def plan(service: str) -> str:
            return "\n".join(f"pod {service}-{n} will restart" for n in range(400)) + "\nend of plan"

        @tool(preview=plan)
        def restart_service(service: str) -> str:
            """Restart a service.

            :param service: The service.
            """
            tools.record("restart_service", {"service": service})
            return "restarted"

        return [*super().standard(), restart_service]


async def test_a_long_preview_is_cut_on_the_card_and_shown_whole_behind_show_more(open_stack):
    stack = await open_stack(replies=[asks_for("restart_service", service="web"), says("ok")], tools=WithLongPlan())

    await stack.say("restart web")
    card = await stack.view_as(ANA)

    assert_valid_card(card)
    shown = [a for a in _actions(card) if a.get("title") == SHOW_MORE_LABEL]
    assert len(shown) == 1 and shown[0]["type"] == "Action.ShowCard"
    whole = " ".join(texts_of(shown[0]["card"]))
    on_the_card = json.loads(json.dumps(card))
    for action in _actions(on_the_card):
        action.pop("card", None)  # what shows before anyone opens a ShowCard
    assert "pod web-1 will restart" in " ".join(texts_of(on_the_card))
    assert "pod web-200 will restart" in whole and "pod web-200 will restart" not in " ".join(texts_of(on_the_card))
    assert "(+" in whole, "cut at the bigger limit, saying how much is left"


def _actions(node) -> list[dict]:
    found: list[dict] = []
    if isinstance(node, dict):
        if str(node.get("type", "")).startswith("Action."):
            found.append(node)
        for value in node.values():
            found += _actions(value)
    elif isinstance(node, list):
        for value in node:
            found += _actions(value)
    return found
