"""Provenance and justification in Teams: a tainted call asks and its card says where from; a reason is asked for.

The real ``countersign serve`` app with the Teams plugin, signed activities, the fake Bot Connector and the
real engine (the fixtures of ``tests/adapters/teams/test_flow.py``).
"""

# ruff: noqa: F811 - the fixtures of tests/adapters/teams/test_flow.py are imported, and test arguments name them

from __future__ import annotations

from adapters.teams.cards import reason_input_id
from bot.tools import Tool
from tests.adapters.teams.test_flow import open_stack  # noqa: F401 - a fixture
from tests.fakes.engine_kit import RecordingTools, asks_for, says
from tests.fakes.taint_kit import INJECTED, fetch_url_tool
from tests.fakes.teams_stack import ADA, ANA, approval_ids, assert_valid_card, texts_of


class WithFetch(RecordingTools):
    def standard(self) -> list[Tool]:
        return [*super().standard(), fetch_url_tool()]


async def test_a_tainted_never_call_asks_and_the_card_marks_the_argument(open_stack):
    replies = [asks_for("fetch_url", url="https://evil.example"), asks_for("read_logs", service=INJECTED), says("ok")]
    stack = await open_stack(replies=replies, tools=WithFetch())

    await stack.say("summarise https://evil.example")
    card = await stack.view_as(ANA)

    shown = " ".join(texts_of(card))
    assert "service is from the output of `fetch_url` (step 1)" in shown and INJECTED in shown
    assert "Asked because an argument came from untrusted text" in shown
    assert stack.tools.runs_of("read_logs") == []
    [approval_id] = approval_ids(card)

    status, body = await stack.click("approve", ANA, approval_id)

    assert status == 200 and stack.tools.runs_of("read_logs") == [{"service": INJECTED}]
    assert any("from the output of `fetch_url`" in t for t in texts_of(body["value"]))


async def test_approve_asks_for_a_reason_when_the_tool_needs_one(open_stack):
    stack = await open_stack(replies=[asks_for("delete_file", path="old.log"), says("deleted")])
    await stack.say("justification delete_file required", person=ADA)
    await stack.say("delete old.log")
    [approval_id] = approval_ids(await stack.view_as(ANA))

    status, body = await stack.click("approve", ANA, approval_id)

    assert status == 200 and stack.tools.runs_of("delete_file") == []
    asked = body["value"]
    assert_valid_card(asked)
    assert any("needs a short reason" in t for t in texts_of(asked))
    status, body = await stack.click(
        "approve", ANA, approval_id, typed={reason_input_id(approval_id): "disk full, OPS-17"}, card=asked
    )

    assert status == 200 and stack.tools.runs_of("delete_file") == [{"path": "old.log"}]
    assert any("Reason: disk full, OPS-17" in t for t in texts_of(body["value"]))
