"""A paused call whose tool is not configured any more: the engine refuses to run it, in one sentence, and a
rejection ends the run with a sentence naming the tools (every surface gets the same words from the engine)."""

from __future__ import annotations

import pytest

from bot.engine.errors import ToolsNotConfigured
from bot.engine.model import DecisionRequest
from tests.fakes.engine_kit import REQUESTER, asks_for, bounded, echoes_results


async def paused_then_restarted_without_delete_file(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    [approval] = await h.paused_approvals("delete old.log")
    h.tool_list = [t for t in h.tool_list if t.name != "delete_file"]
    return await harnesses.reopen(h), approval


@pytest.mark.parametrize("action", ["confirm", "modify"])
async def test_approving_or_editing_a_call_whose_tool_is_gone_is_refused_naming_it(harnesses, action):
    again, approval = await paused_then_restarted_without_delete_file(harnesses)
    view = await again.engine.get_approval(approval.approval_id)
    assert isinstance(again.engine.not_configured(view), ToolsNotConfigured)

    edits = {"path": "other.log"} if action == "modify" else None
    request = DecisionRequest(approval.approval_id, REQUESTER, action, edited_params=edits, place=approval.thread.place)
    with pytest.raises(ToolsNotConfigured) as refused:
        await again.engine.decide(request)

    assert str(refused.value).startswith("delete_file is not configured here now")
    assert "COUNTERSIGN_TOOLS" in str(refused.value)
    assert (await again.engine.get_approval(approval.approval_id)).is_pending
    assert again.tools.executed == []


async def test_rejecting_it_ends_the_run_saying_which_tools_are_missing(harnesses):
    again, approval = await paused_then_restarted_without_delete_file(harnesses)

    await again.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, "reject", place=approval.thread.place))
    await bounded(again.engine.wait_idle())

    run = await again.run_of(approval.run_id)
    assert run.status == "failed"
    said = " ".join(str(c) for c in again.surface.calls)
    assert "it was using delete_file, which is not configured here now (COUNTERSIGN_TOOLS)" in said
    assert "something went wrong" not in said
    assert again.tools.executed == []


async def test_a_configured_tool_is_not_reported_missing(harnesses):
    h = await harnesses.open(replies=[asks_for("delete_file", path="old.log"), echoes_results])
    [approval] = await h.paused_approvals("delete old.log")
    assert h.engine.not_configured(approval) is None
