"""Review after acting in Teams: the tool runs once, its result waits on an Adaptive Card with Approve /
Edit result / Reject, and what the reviewer decides is what the model sees.

The real ``countersign serve`` app with the Teams plugin, signed activities, the fake Bot Connector and the
real engine on SQLite (the fixtures of ``tests/adapters/teams/test_flow.py``).
"""

# ruff: noqa: F811 - the fixtures of tests/adapters/teams/test_flow.py are imported, and test arguments name them

from __future__ import annotations

from adapters.teams.cards import feedback_input_id, result_input_id
from tests.adapters.teams.test_flow import open_stack  # noqa: F401 - a fixture
from tests.fakes.engine_kit import asks_for, echoes_results
from tests.fakes.teams_stack import ADA, ANA, TeamsStack, approval_ids, execute_actions, texts_of


async def review_card(open_stack, **kwargs) -> tuple[TeamsStack, str, dict]:
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), echoes_results], **kwargs)
    await stack.say("policy set delete_file review", person=ADA)
    await stack.say("delete old.log")
    card = await stack.view_as(ANA)
    [review_id] = approval_ids(card)
    return stack, review_id, card


async def test_the_tool_runs_at_once_and_approve_releases_the_result(open_stack):
    stack, review_id, card = await review_card(open_stack)

    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]
    shown = " ".join(texts_of(card))
    assert "Review the result of " in shown and "deleted old.log" in shown
    [(_, [field])] = [(a, i) for a, i in execute_actions(card) if a["verb"] == "edit"]
    assert field["id"] == result_input_id(review_id) and field["value"] == "deleted old.log"

    status, body = await stack.click("approve", ANA, review_id)

    assert status == 200
    assert any("Result approved by Ana Lopez" in t for t in texts_of(body["value"]))
    assert stack.connector.texts()[-1] == "results: deleted old.log"
    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]


async def test_edit_result_gives_the_model_the_typed_text(open_stack):
    stack, review_id, _ = await review_card(open_stack)

    status, body = await stack.click("edit", ANA, review_id, typed={result_input_id(review_id): "one log removed"})

    assert status == 200
    assert any("Result edited by Ana Lopez" in t for t in texts_of(body["value"]))
    assert stack.connector.texts()[-1] == "results: one log removed"


async def test_edit_result_unchanged_is_a_plain_approval(open_stack):
    stack, review_id, _ = await review_card(open_stack)

    await stack.click("edit", ANA, review_id)

    assert stack.connector.texts()[-1] == "results: deleted old.log"
    assert (await stack.engine.get_approval(review_id)).status == "approved"


async def test_reject_with_feedback_withholds_the_result(open_stack):
    stack, review_id, _ = await review_card(open_stack)

    await stack.click("reject", ANA, review_id, typed={feedback_input_id(review_id): "not for the model"})

    answer = stack.connector.texts()[-1]
    assert "rejected by a reviewer" in answer and "not for the model" in answer and "deleted old.log" not in answer


async def test_an_expired_review_withholds_the_result_and_says_so_on_the_card(open_stack):
    stack, review_id, _ = await review_card(open_stack)

    stack.clock.advance(days=2)
    assert await stack.engine.sweep_expired() == 1
    await stack.settle()

    assert any("withheld" in t for t in texts_of(stack.connector.updates()[-1].cards[0]))
    assert stack.connector.texts()[-1] == "results: result withheld: not reviewed in time"
    assert stack.tools.executed == [("delete_file", {"path": "old.log"})]


async def test_a_restart_between_the_tool_and_the_review_runs_nothing_twice(open_stack):
    stack, review_id, card = await review_card(open_stack)

    restarted = await stack.restart(replies=[echoes_results])
    status, body = await restarted.click("approve", ANA, card=card)
    await restarted.aclose()

    assert status == 200 and approval_ids(body["value"]) == []
    assert restarted.tools.executed == [("delete_file", {"path": "old.log"})]
    assert restarted.connector.posted()[-1].text == "results: deleted old.log"


async def test_a_forged_or_overlong_edit_decides_nothing(open_stack):
    stack, review_id, _ = await review_card(open_stack)

    status, body = await stack.click("edit", ANA, review_id, typed={result_input_id(review_id): "x" * 5000})

    assert status == 200 and "Nothing was decided" in " ".join(texts_of(body["value"]))
    assert (await stack.engine.get_approval(review_id)).is_pending
