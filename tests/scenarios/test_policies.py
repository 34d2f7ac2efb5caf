"""End to end through the engine: per-channel policies decide which calls pause, and events run once."""

from __future__ import annotations

import asyncio

from bot.engine.confirmation import BLOCKED_FEEDBACK
from bot.engine.model import AdminRequest, DecisionRequest
from tests.fakes.engine_kit import (
    ADMIN,
    CHANNEL,
    PLATFORM,
    REQUESTER,
    WORKSPACE,
    asks_for,
    echoes_results,
    sent_to_llm,
    tool_results,
)


async def admin(h, text: str) -> str:
    answer = await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, text))
    assert answer.startswith("Rule updated"), answer
    return answer


async def test_a_tool_without_any_policy_is_asked_about(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])

    [approval] = await h.paused_approvals("delete a.txt")

    assert approval.policy_mode == "always"
    assert h.tools.executed == []


async def test_deny_blocks_the_call_without_asking_and_tells_the_model(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    await admin(h, "policy set delete_file deny")

    await h.say("delete a.txt")

    assert h.surface.renders == []
    assert h.tools.executed == []
    blocked = BLOCKED_FEEDBACK.format(tool_name="delete_file")
    assert tool_results(sent_to_llm(h.generator)) == [("delete_file", blocked, True)]
    assert h.surface.replies_in(h.thread()) == [f"results: {blocked}"]


async def test_never_runs_the_call_without_asking(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    await admin(h, "policy set delete_file never")

    await h.say("delete a.txt")

    assert h.surface.renders == []
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]
    assert h.surface.replies_in(h.thread()) == ["results: deleted a.txt"]


async def test_a_tools_own_never_default_runs_without_asking_until_a_stored_rule_overrides_it(harnesses):
    h = await harnesses.open(
        replies=[asks_for("read_logs", service="web"), echoes_results, asks_for("read_logs", service="db")]
    )

    await h.say("show the web logs", thread="t1")
    assert h.surface.renders == [] and h.tools.runs_of("read_logs") == [{"service": "web"}]

    await admin(h, "policy set read_logs always")
    [approval] = await h.paused_approvals("show the db logs", thread="t2")
    assert approval.tool_name == "read_logs" and h.tools.runs_of("read_logs") == [{"service": "web"}]


async def test_a_channel_rule_overrides_the_workspace_rule_only_in_that_channel(harnesses):
    h = await harnesses.open(
        replies=[asks_for("delete_file", path="a.txt"), echoes_results, asks_for("delete_file", path="a.txt")]
    )
    await admin(h, "policy set delete_file never #C_OPS")

    await h.say("delete a.txt", channel="C_OPS")
    assert h.surface.renders == [] and len(h.tools.executed) == 1

    await h.paused_approvals("delete a.txt", channel=CHANNEL)
    assert len(h.tools.executed) == 1


async def test_ask_once_asks_the_first_time_then_runs_the_same_call_in_that_channel_without_asking(harnesses):
    h = await harnesses.open(
        replies=[
            asks_for("delete_file", path="a.txt"),
            echoes_results,
            asks_for("delete_file", path="a.txt"),  # same call, same channel: no question
            echoes_results,
            asks_for("delete_file", path="b.txt"),  # other arguments: asked
            asks_for("delete_file", path="a.txt"),  # same call, other channel: asked
        ]
    )
    await admin(h, "policy set delete_file once")

    [first] = await h.paused_approvals("delete a.txt", thread="t1")
    assert first.policy_mode == "once"
    await h.engine.decide(DecisionRequest(first.approval_id, REQUESTER, "confirm", place=first.thread.place))
    await h.engine.wait_idle()
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]

    await h.say("delete a.txt again", thread="t2")
    assert len(h.surface.renders) == 1, "the same call in the same channel was not asked about again"
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}, {"path": "a.txt"}]

    [other_args] = await h.paused_approvals("delete b.txt", thread="t3")
    assert other_args.arguments == {"path": "b.txt"}
    [other_channel] = await h.paused_approvals("delete a.txt", thread="t4", channel="C_ELSEWHERE")
    assert other_channel.arguments == {"path": "a.txt"}
    assert len(h.tools.runs_of("delete_file")) == 2


async def test_a_rejection_under_ask_once_is_not_remembered(harnesses):
    h = await harnesses.open(
        replies=[asks_for("delete_file", path="a.txt"), echoes_results, asks_for("delete_file", path="a.txt")]
    )
    await admin(h, "policy set delete_file once")

    [first] = await h.paused_approvals("delete a.txt", thread="t1")
    await h.engine.decide(DecisionRequest(first.approval_id, REQUESTER, "reject", place=first.thread.place))
    await h.engine.wait_idle()

    await h.paused_approvals("delete a.txt", thread="t2")
    assert h.tools.executed == []


async def test_the_same_event_twice_starts_one_run(harnesses):
    h = await harnesses.open(replies=[asks_for("read_logs", service="web"), echoes_results])
    inbound = h.inbound("show the web logs", event_id="Ev-retried")

    await asyncio.gather(h.engine.handle_message(inbound), h.engine.handle_message(inbound))
    await h.engine.handle_message(inbound)

    assert len(h.generator.calls) == 2, "one run: one tool step and one answer"
    assert h.tools.executed == [("read_logs", {"service": "web"})]
    assert h.surface.replies_in(h.thread()) == ["results: logs of web: all quiet"]
    assert len(await h.engine.storage.runs.list_by_status("finished")) == 1


async def test_adapter_level_dedupe_and_conversation_references_are_durable(harnesses):
    h = await harnesses.open()
    assert await h.engine.first_time("teams:invoke:abc") is True
    assert await h.engine.first_time("teams:invoke:abc") is False
    await h.engine.save_conversation("teams:conv1", {"serviceUrl": "http://127.0.0.1:1/", "id": "conv1"})
    await h.close()

    again = await harnesses.reopen(h)
    assert await again.engine.first_time("teams:invoke:abc") is False
    assert await again.engine.load_conversation("teams:conv1") == {"serviceUrl": "http://127.0.0.1:1/", "id": "conv1"}
    assert await again.engine.load_conversation("teams:unknown") is None


async def test_a_call_to_a_tool_that_does_not_exist_is_answered_not_found_without_asking(harnesses):
    h = await harnesses.open(replies=[asks_for("format_disk", device="/dev/sda"), echoes_results])

    await h.say("format the disk")

    assert h.surface.renders == [] and h.tools.executed == []
    [(name, result, error)] = tool_results(sent_to_llm(h.generator))
    assert (name, error) == ("format_disk", True) and "not found" in result
