"""End to end in Teams: messages, approval cards, clicks, proactive answers, restarts.

Real engine on a SQLite file, the real ``countersign serve`` app with the Teams plugin (the SDK's
``CloudAdapter`` behind its JWT check) on 127.0.0.1; activities are signed by a fake Bot Framework
issuer and the bot talks back to a fake Bot Connector. Every card the bot sends is validated
against the Adaptive Card 1.5 schema.
"""

from __future__ import annotations

import pytest

from tests.fakes.bot_connector import FakeBotConnector, FakeBotFrameworkIssuer, trust_issuer
from tests.fakes.engine_kit import asks_for, echoes_results
from tests.fakes.teams_stack import (
    ANA,
    OUTGOING_TOKEN,
    TeamsStack,
    approval_ids,
    assert_valid_card,
    texts_of,
)


@pytest.fixture
async def fakes(monkeypatch):
    async with FakeBotConnector() as connector, FakeBotFrameworkIssuer() as issuer:
        trust_issuer(monkeypatch, issuer)
        yield connector, issuer
        for card in connector.all_cards():
            assert_valid_card(card)


@pytest.fixture
async def open_stack(tmp_path, fakes):
    opened: list[TeamsStack] = []

    async def make(**kwargs) -> TeamsStack:
        stack = await TeamsStack.open(tmp_path, *fakes, **kwargs)
        opened.append(stack)
        return stack

    yield make
    for stack in opened:
        await stack.aclose()


async def test_approving_on_the_card_runs_the_tool_once_updates_the_card_and_posts_the_answer(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    assert await stack.say("delete old.log") == 202
    card_request, card = stack.last_card()
    assert card_request.authorization == f"Bearer {OUTGOING_TOKEN}"
    assert stack.tools.executed == []
    [approval_id] = approval_ids(card)

    status, body = await stack.click("approve", ANA, approval_id)

    assert status == 200
    assert body["statusCode"] == 200 and body["type"] == "application/vnd.microsoft.card.adaptive"
    assert any("Approved by" in t for t in texts_of(body["value"]))
    assert approval_ids(body["value"]) == []
    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]
    update = stack.connector.updates()[-1]
    assert update.activity_id == card_request.answered_id
    assert approval_ids(update.cards[0]) == []
    assert stack.connector.texts()[-1] == "results: deleted old.log"

