"""A run's policies read ahead at its start, on both backends: they only ever make a call *ask*, and the pause checks
them in its own transaction, so a policy an admin changes while the model thinks applies to that very call.

A message's arrival reads the policy views of the agent's tools with the write that starts its run (issue 17: the
read after the model named a tool is gone). Here the model's reply lands only after an admin changed the policy
(the fake model awaits the admin's command before it answers), so the change falls between that read-ahead and the
pause: the pause is refused, nothing of it is stored, and the step is decided again on fresh reads without asking
the model again.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest

from bot.engine.confirmation import BLOCKED_FEEDBACK
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage
from bot.tools import Tool
from tests.fakes.bench_modules import engine_bench
from tests.fakes.engine_kit import (
    PLATFORM,
    WORKSPACE,
    Harnesses,
    asks,
    asks_for,
    call,
    dangling_calls,
    echoes_results,
    sent_to_llm,
    tool_results,
)
from tests.unit.bot.engine.test_decisions import admin, decision


class AdminActsWhileThinking:
    """A model (the scripted one) that, before its ``answer``-th reply (0: the first), awaits ``change``: an admin's
    command landing while the model thinks, after the run's start read its policies."""

    def __init__(self, replies: Sequence[Any], change: Callable[[], Awaitable[Any]], answer: int = 0) -> None:
        self.scripted = ScriptedChatGenerator(list(replies))
        self.change: Callable[[], Awaitable[Any]] | None = change
        self.answer = answer

    @property
    def calls(self) -> list[list[ChatMessage]]:
        """What the model was sent, call by call."""
        return self.scripted.calls

    async def run_async(
        self,
        messages: list[ChatMessage],
        tools: Sequence[Tool] | None = None,
        generation_kwargs: dict[str, Any] | None = None,
        streaming_callback: Any = None,
    ) -> dict[str, list[ChatMessage]]:
        """The scripted reply, once the admin's change (at the given call) is stored."""
        if self.change is not None and len(self.scripted.calls) == self.answer:
            change, self.change = self.change, None
            await change()
        return await self.scripted.run_async(
            messages, tools=tools, generation_kwargs=generation_kwargs, streaming_callback=streaming_callback
        )


async def _open(
    harnesses, database_url, replies, commands: Sequence[str], *, before: Sequence[str] = (), answer: int = 0
):
    """A harness whose model answers only after an admin ran ``commands``; ``before``: commands run first."""
    holder: dict = {}

    async def change() -> None:
        for text in commands:
            assert (await admin(holder["h"], text)).startswith("Rule updated"), text

    h = holder["h"] = await harnesses.open(
        generator=AdminActsWhileThinking(replies, change, answer), database_url=database_url
    )
    for text in before:
        assert (await admin(h, text)).startswith("Rule updated"), text
    return h


async def _nothing_paused(h) -> None:
    assert h.surface.renders == []
    [run] = await h.engine.storage.runs.list_by_status("finished")
    assert await h.engine.storage.approvals.for_run(run.run_id) == []


@pytest.mark.parametrize("mode_at_start", ["always", "never"])
async def test_a_policy_tightened_to_deny_while_the_model_thinks_blocks_the_call_and_nothing_waits(
    harnesses, database_url, mode_at_start
):
    h = await _open(
        harnesses,
        database_url,
        [asks_for("delete_file", path="a.txt"), echoes_results],
        ["policy set delete_file deny"],
        before=[f"policy set delete_file {mode_at_start}"],
    )

    await h.say("delete a.txt")

    assert h.tools.executed == []
    await _nothing_paused(h)
    blocked = BLOCKED_FEEDBACK.format(tool_name="delete_file")
    assert tool_results(sent_to_llm(h.generator)) == [("delete_file", blocked, True)]
    assert h.surface.replies_in(h.thread()) == [f"results: {blocked}"]
    assert len(h.generator.calls) == 2  # the step was decided again without asking the model again


async def test_a_policy_loosened_to_never_while_the_model_thinks_runs_the_call_once_without_asking(
    harnesses, database_url
):
    h = await _open(
        harnesses,
        database_url,
        [asks_for("delete_file", path="a.txt"), echoes_results],
        ["policy set delete_file never"],
    )

    await h.say("delete a.txt")

    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]
    await _nothing_paused(h)
    assert h.surface.replies_in(h.thread()) == ["results: deleted a.txt"]
    history = await h.history()
    assert tool_results(history) == [("delete_file", "deleted a.txt", False)] and dangling_calls(history) == []
    assert len(h.generator.calls) == 2


async def test_approvers_quorum_and_ttl_changed_while_the_model_thinks_are_those_of_the_stored_approval(
    harnesses, database_url
):
    h = await _open(
        harnesses,
        database_url,
        [asks_for("delete_file", path="a.txt"), echoes_results],
        ["approvers delete_file @U_BOB @U_CAROL", "quorum delete_file 1", "ttl delete_file 2h"],
        before=[
            "policy set delete_file always",
            "approvers delete_file @U_ANA @U_BEN",
            "quorum delete_file 2",
            "ttl delete_file 10m",
        ],
    )

    [approval] = await h.paused_approvals("delete a.txt")

    assert (approval.policy_mode, approval.approvers, approval.quorum) == ("always", ("U_BOB", "U_CAROL"), 1)
    assert approval.expires_at - approval.created_at == timedelta(hours=2)
    [stored] = await h.engine.storage.approvals.for_run(approval.run_id)
    assert (stored.approvers, stored.quorum, stored.expires_at - stored.created_at) == (
        ("U_BOB", "U_CAROL"),
        1,
        timedelta(hours=2),
    )
    assert h.tools.executed == [] and len(h.generator.calls) == 1


async def test_a_refused_pause_loses_none_of_the_runs_earlier_results_and_counts_its_usage_once(
    harnesses, database_url
):
    usage = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    first = asks(call("read_logs", service="api"))
    first.meta["usage"] = dict(usage)
    second = asks(call("delete_file", path="a.txt"))
    second.meta["usage"] = dict(usage)
    # The change lands while the model thinks about its second reply: read_logs ran, its result waits for a write.
    h = await _open(
        harnesses,
        database_url,
        [first, second, echoes_results],
        ["approvers delete_file @U_BOB"],
        before=["policy set delete_file always"],
        answer=1,
    )

    [approval] = await h.paused_approvals("read the logs, then delete a.txt")

    assert approval.approvers == ("U_BOB",)
    assert h.tools.executed == [("read_logs", {"service": "api"})]
    history = await h.history()
    assert tool_results(history) == [("read_logs", "logs of api: all quiet", False)]
    run = await h.run_of(approval.run_id)
    assert run.status == "paused"
    spent = await h.engine.storage.runs.usage(platform=PLATFORM, workspace=WORKSPACE, since=h.clock() - timedelta(1))
    assert spent.total_tokens == 50  # two model calls, each counted once
    assert len(h.generator.calls) == 2

    await h.engine.decide(decision(approval, actor="U_BOB"))
    await h.engine.wait_idle()
    assert h.tools.runs_of("delete_file") == [{"path": "a.txt"}]


async def test_a_policy_unchanged_since_the_run_started_pauses_with_no_read_of_its_own(harnesses, database_url):
    h = await _open(
        harnesses,
        database_url,
        [asks_for("delete_file", path="a.txt"), echoes_results],
        ["policy set scale_service deny"],
        before=["policy set delete_file always", "approvers delete_file @U_BOB"],
    )

    [approval] = await h.paused_approvals("delete a.txt")  # another tool's policy changed: this one did not

    assert (approval.policy_mode, approval.approvers) == ("always", ("U_BOB",))
    assert len(h.generator.calls) == 1


async def test_a_call_asked_about_from_its_policy_read_ahead_makes_no_policy_read_of_its_own(tmp_path):
    bench = engine_bench()
    h = await Harnesses(tmp_path).open(replies=[asks_for("delete_file", path="a.txt"), echoes_results])
    try:
        await admin(h, "approvers delete_file @U_BOB")
        profile = bench.StorageProfile(h.engine.storage, timing=True)

        [approval] = await h.paused_approvals("delete a.txt")

        assert approval.approvers == ("U_BOB",)
        calls = dict(profile.stats)
        assert "SQLitePolicyStore.view" not in calls and "SQLitePolicyStore.resolve" not in calls
        [pause] = [name for name in calls if "approvals.create_many" in name]
        assert "policies.unchanged" in pause  # the view read ahead, checked in the pause's own write
        [start] = [name for name in calls if "inbox.start_next" in name]
        assert "policies.views" in start
    finally:
        await h.close()
