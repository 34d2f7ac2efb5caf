"""A running MCP tool's question in Teams: an Adaptive Card with inputs built from its schema, Send / Decline; a bad
value brings the card back with the message; only the requester (or an admin) can answer; a link is an
Action.OpenUrl, never an input. The real app with the Teams plugin, signed activities, the fake Bot Connector,
tests/fakes/mcp_server.py over stdio.
"""

# ruff: noqa: F811 - the fixtures of tests/adapters/teams/test_flow.py are imported, and test arguments name them

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from adapters.teams.questions import answer_input_id
from bot.mcp import parse_mcp_config
from tests.adapters.teams.test_flow import open_stack  # noqa: F401 - a fixture
from tests.fakes.engine_kit import asks_for, echoes_results
from tests.fakes.teams_stack import ANA, BEN, action_value, assert_valid_card, execute_actions, texts_of

ROOT = Path(__file__).resolve().parents[3]


def servers(tmp_path: Path) -> tuple:
    spec = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(tmp_path / "log.jsonl")]}
    spec["cwd"] = str(ROOT)
    return tuple(parse_mcp_config({"mcpServers": {"t": spec}}, {}))


def server_events(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]


def is_question(request: Any) -> bool:
    return any("asks" in " ".join(texts_of(card)) for card in request.cards)


async def asked(stack: Any) -> tuple[Any, dict[str, Any]]:
    await stack.post(stack.message("go"))  # the run waits for the answer: no settle here
    request = await stack.connector.wait_for(is_question, within=20)
    return request, request.cards[-1]


async def click(stack: Any, card: dict, verb: str, request: Any, person: Any = ANA, typed: dict | None = None):
    value = action_value(card, verb, typed=typed)
    return await stack.post(stack.invoke(value, person, card_activity_id=request.answered_id))


async def test_the_card_has_inputs_from_the_schema_and_a_bad_value_comes_back(open_stack, tmp_path: Path):
    stack = await open_stack(
        replies=[asks_for("t__deploy", service="api"), echoes_results], mcp_servers=servers(tmp_path)
    )
    request, card = await asked(stack)
    assert_valid_card(card)
    assert "How should api be deployed?" in texts_of(card)
    inputs = {i["id"]: i["type"] for _, ins in execute_actions(card) for i in ins}
    assert inputs == {
        answer_input_id("environment"): "Input.ChoiceSet",
        answer_input_id("replicas"): "Input.Number",
        answer_input_id("canary"): "Input.Toggle",
        answer_input_id("reason"): "Input.Text",
        answer_input_id("api_token"): "Input.Text",
    }
    typed = {
        answer_input_id("environment"): "staging",
        answer_input_id("replicas"): "0",
        answer_input_id("canary"): "true",
        answer_input_id("reason"): "hotfix",
    }

    status, body = await click(stack, card, "question_answer", request, typed=typed)
    assert status == 200 and body["type"] == "application/vnd.microsoft.card.adaptive"
    assert any("Nothing was sent" in t and "replicas" in t for t in texts_of(body["value"]))
    assert [e["event"] for e in server_events(tmp_path)] == ["started"]

    typed[answer_input_id("replicas")] = "5"
    status, body = await click(stack, card, "question_answer", request, typed=typed)
    await stack.settle()
    assert status == 200 and any("Answered by" in t for t in texts_of(body["value"]))
    [event] = [e for e in server_events(tmp_path) if e["event"] == "accept"]
    assert (event["environment"], event["replicas"], event["canary"]) == ("staging", 5, True)
    update = stack.connector.updates()[-1]
    assert update.activity_id == request.answered_id
    assert any("Answered by" in t for t in texts_of(update.cards[-1]))


async def test_someone_else_is_refused_and_decline_declines(open_stack, tmp_path: Path):
    stack = await open_stack(
        replies=[asks_for("t__deploy", service="api"), echoes_results], mcp_servers=servers(tmp_path)
    )
    request, card = await asked(stack)

    status, body = await click(stack, card, "question_decline", request, person=BEN)
    assert status == 200 and "Only the person who asked" in body["value"]
    assert [e["event"] for e in server_events(tmp_path)] == ["started"]

    status, body = await click(stack, card, "question_decline", request)
    await stack.settle()
    assert any("Declined by" in t for t in texts_of(body["value"]))
    assert [e["event"] for e in server_events(tmp_path)] == ["started", "decline"]


async def test_a_link_is_an_open_url_action_never_an_input(open_stack, tmp_path: Path):
    stack = await open_stack(replies=[asks_for("t__login"), echoes_results], mcp_servers=servers(tmp_path))
    request, card = await asked(stack)
    assert_valid_card(card)
    assert {
        "type": "Action.OpenUrl",
        "title": "Open the page",
        "url": "https://auth.example.com/device?code=ABC",
    } in card["actions"]
    assert all(not ins for _, ins in execute_actions(card))
    status, body = await click(stack, card, "question_answer", request)
    await stack.settle()
    assert status == 200 and any("Answered by" in t for t in texts_of(body["value"]))
    assert "login accept" in " ".join(m.text or "" for m in stack.connector.posted())
