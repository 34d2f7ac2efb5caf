"""Token usage: stored with each run (across a pause), written in the audit entry of its end, summed by `usage`."""

from __future__ import annotations

import pytest

from bot.engine.model import AdminRequest, DecisionRequest
from bot.messages import ChatMessage, ToolCall
from storage import TokenUsage
from tests.fakes.engine_kit import ADMIN, CHANNEL, OTHER, PLATFORM, REQUESTER, WORKSPACE


def used(prompt: int, completion: int) -> dict:
    return {"usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}}


def asks_to_delete(path: str) -> ChatMessage:
    call = ToolCall("delete_file", {"path": path}, id=f"call-{path}")
    return ChatMessage.from_assistant(tool_calls=[call], meta=used(100, 20))


async def usage(h, text: str = "usage", actor: str = OTHER) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, actor, text))


async def test_a_paused_and_resumed_run_stores_its_whole_usage_and_audits_it_when_it_finishes(harnesses):
    answer = ChatMessage.from_assistant("Deleted.", meta=used(40, 5))
    h = await harnesses.open(replies=[asks_to_delete("a.txt"), answer])

    approval = (await h.paused_approvals("delete a.txt"))[0]
    run_id = approval.run_id
    paused = await h.engine.storage.runs.usage(platform=PLATFORM, workspace=WORKSPACE, since=0)
    assert paused == TokenUsage(100, 20, 120, runs=1)
    await h.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place))
    await h.engine.wait_idle()

    totals = await h.engine.storage.runs.usage(platform=PLATFORM, workspace=WORKSPACE, since=0)
    assert (totals.prompt_tokens, totals.completion_tokens, totals.total_tokens, totals.runs) == (140, 25, 165, 1)
    finished = await h.audit("finished")
    assert [(e.subject, e.details["usage"], e.details["exit_reason"]) for e in finished] == [
        (run_id, {"prompt_tokens": 140, "completion_tokens": 25, "total_tokens": 165}, "text")
    ]


async def test_usage_sums_the_workspace_or_one_channel_over_the_days_asked(harnesses):
    h = await harnesses.open(
        replies=[
            ChatMessage.from_assistant("one", meta=used(1000, 200)),
            ChatMessage.from_assistant("two", meta=used(30, 3)),
        ]
    )
    await h.say("hello")
    h.clock.advance(days=10)
    await h.say("hello again", channel="C_OPS", thread="2.0")

    assert await usage(h) == (
        "Token usage in this workspace over the last 7 days: 33 tokens (30 prompt, 3 completion) in 1 run(s)."
    )
    assert await usage(h, "usage 30") == (
        "Token usage in this workspace over the last 30 days: 1,233 tokens (1,030 prompt, 203 completion) in 2 run(s)."
    )
    assert await usage(h, f"usage #{CHANNEL} 30", actor=ADMIN) == (
        "Token usage in this channel over the last 30 days: 1,200 tokens (1,000 prompt, 200 completion) in 1 run(s)."
    )
    assert await usage(h, "usage <#C_OPS|ops> 1") == (
        "Token usage in #C_OPS over the last day: 33 tokens (30 prompt, 3 completion) in 1 run(s)."
    )


@pytest.mark.parametrize("text", ["usage 0", "usage 367", "usage week", "usage #C1 7 more"])
async def test_usage_with_a_bad_period_answers_with_the_reason_and_the_help(harnesses, text):
    h = await harnesses.open()

    answer = await usage(h, text)

    assert "usage [#channel] [days]" in answer
    assert not answer.startswith("Token usage")
