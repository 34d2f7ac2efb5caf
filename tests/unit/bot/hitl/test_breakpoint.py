"""BreakpointConfirmationStrategy and HITLBreakpointException on their own."""

from __future__ import annotations

import pytest

from bot.hitl import (
    AlwaysAskPolicy,
    AskOncePolicy,
    BreakpointConfirmationStrategy,
    ConfirmationStrategy,
    ConfirmationUIResult,
    HITLBreakpointException,
    NeverAskPolicy,
    ToolExecutionDecision,
)
from bot.hitl.serialization import component_from_dict, component_to_dict

CALL = {"tool_name": "delete_file", "tool_description": "Delete a file", "tool_params": {"path": "a.txt"}}


def test_the_breakpoint_strategy_pauses_by_default_naming_the_tool_and_the_call() -> None:
    strategy = BreakpointConfirmationStrategy(snapshot_file_path="/var/snapshots")

    with pytest.raises(HITLBreakpointException) as info:
        strategy.run(**CALL, tool_call_id="call_7")

    pause = info.value
    assert (pause.tool_name, pause.tool_call_id, pause.snapshot_file_path) == (
        "delete_file",
        "call_7",
        "/var/snapshots",
    )
    assert "delete_file" in str(pause)
    assert pause.snapshot is None and pause.pending_tool_calls == []


async def test_the_async_twin_pauses_too() -> None:
    with pytest.raises(HITLBreakpointException):
        await BreakpointConfirmationStrategy().run_async(**CALL, tool_call_id="call_7")


def test_a_policy_that_does_not_ask_approves_the_call_unchanged() -> None:
    params = {"path": "a.txt"}
    strategy = BreakpointConfirmationStrategy(confirmation_policy=NeverAskPolicy())

    decision = strategy.run(
        tool_name="delete_file", tool_description="Delete a file", tool_params=params, tool_call_id="c1"
    )

    assert decision == ToolExecutionDecision(
        "delete_file", True, tool_call_id="c1", final_tool_params={"path": "a.txt"}
    )
    assert decision.final_tool_params is not params  # the caller's dict is not shared


def test_the_policy_sees_the_call_it_is_asked_about() -> None:
    policy = AskOncePolicy()
    strategy = BreakpointConfirmationStrategy(confirmation_policy=policy)
    policy.update_after_confirmation(
        "delete_file", "Delete a file", {"path": "a.txt"}, ConfirmationUIResult(action="confirm")
    )

    approved = strategy.run(**CALL)
    with pytest.raises(HITLBreakpointException):
        strategy.run(tool_name="delete_file", tool_description="Delete a file", tool_params={"path": "b.txt"})

    assert approved.execute is True


def test_the_breakpoint_strategy_is_a_confirmation_strategy() -> None:
    assert isinstance(BreakpointConfirmationStrategy(), ConfirmationStrategy)


def test_the_breakpoint_strategy_round_trips_through_to_dict_with_its_folder_and_policy() -> None:
    strategy = BreakpointConfirmationStrategy(snapshot_file_path="snaps/", confirmation_policy=NeverAskPolicy())

    data = component_to_dict(strategy)
    rebuilt = component_from_dict(data)

    assert data["type"] == "bot.hitl.breakpoint.BreakpointConfirmationStrategy"
    assert isinstance(rebuilt, BreakpointConfirmationStrategy)
    assert rebuilt.snapshot_file_path == "snaps/"
    assert isinstance(rebuilt.confirmation_policy, NeverAskPolicy)


def test_the_default_policy_survives_serialisation_as_always_ask() -> None:
    rebuilt = BreakpointConfirmationStrategy.from_dict(BreakpointConfirmationStrategy().to_dict())

    assert isinstance(rebuilt.confirmation_policy, AlwaysAskPolicy)
    assert rebuilt.snapshot_file_path is None
