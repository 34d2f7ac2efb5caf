"""Agent.to_dict / Agent.from_dict: an agent's configuration survives JSON and still behaves the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.agent import Agent
from bot.hitl import (
    AskOncePolicy,
    BlockingConfirmationStrategy,
    BreakpointConfirmationStrategy,
    HITLBreakpointException,
    NeverAskPolicy,
    SimpleConsoleUI,
    ToolExecutionDecision,
)
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage
from tests.fakes.agent_kit import asks, call, delete_file, lookup_weather, says, submit_answer


def configured_agent(folder: str) -> Agent:
    return Agent(
        ScriptedChatGenerator([asks(call("delete_file", "c1", path="a.txt")), says("Deleted.")]),
        tools=[lookup_weather, delete_file, submit_answer],
        system_prompt="You operate the sandbox.",
        exit_conditions=["text", "submit_answer"],
        state_schema={"notes": {"type": list}, "city": {"type": str}},
        max_agent_steps=7,
        raise_on_tool_invocation_failure=True,
        confirmation_strategies={
            "delete_file": BreakpointConfirmationStrategy(snapshot_file_path=folder),
            ("lookup_weather", "submit_answer"): BlockingConfirmationStrategy(AskOncePolicy(), SimpleConsoleUI()),
            "*": BreakpointConfirmationStrategy(confirmation_policy=NeverAskPolicy()),
        },
        tool_invoker_kwargs={"max_workers": 2},
    )


def test_an_agent_survives_to_dict_json_and_from_dict(tmp_path: Path) -> None:
    original = configured_agent(str(tmp_path))

    data = json.loads(json.dumps(original.to_dict()))
    rebuilt = Agent.from_dict(data)

    assert [t.name for t in rebuilt.tools] == ["lookup_weather", "delete_file", "submit_answer"]
    assert rebuilt.tools[1].function is delete_file.function
    assert rebuilt.tools_fingerprint == original.tools_fingerprint
    assert rebuilt.system_prompt == "You operate the sandbox."
    assert rebuilt.exit_conditions == ["text", "submit_answer"]
    assert rebuilt.state_schema == {"notes": {"type": list}, "city": {"type": str}}
    assert rebuilt.max_agent_steps == 7
    assert rebuilt.raise_on_tool_invocation_failure is True
    assert rebuilt.tool_invoker_kwargs == {"max_workers": 2}
    assert rebuilt.to_dict() == original.to_dict()


def test_the_confirmation_strategy_map_keeps_its_tuple_key_and_wildcard(tmp_path: Path) -> None:
    rebuilt = Agent.from_dict(json.loads(json.dumps(configured_agent(str(tmp_path)).to_dict())))

    strategies = rebuilt.confirmation_strategies
    assert set(strategies) == {"delete_file", ("lookup_weather", "submit_answer"), "*"}
    assert isinstance(strategies["delete_file"], BreakpointConfirmationStrategy)
    assert strategies["delete_file"].snapshot_file_path == str(tmp_path)
    blocking = strategies[("lookup_weather", "submit_answer")]
    assert isinstance(blocking, BlockingConfirmationStrategy)
    assert isinstance(blocking.confirmation_policy, AskOncePolicy)
    assert isinstance(blocking.confirmation_ui, SimpleConsoleUI)
    assert isinstance(strategies["*"].confirmation_policy, NeverAskPolicy)


async def test_a_rebuilt_agent_pauses_and_resumes_like_the_original(tmp_path: Path) -> None:
    rebuilt = Agent.from_dict(configured_agent(str(tmp_path)).to_dict())

    with pytest.raises(HITLBreakpointException) as info:
        await rebuilt.run_async([ChatMessage.from_user("delete a.txt")])

    result = await rebuilt.run_async(
        [],
        snapshot=info.value.snapshot,
        tool_execution_decisions=[ToolExecutionDecision("delete_file", True, tool_call_id="c1")],
    )

    assert info.value.snapshot_file_path is not None and info.value.snapshot_file_path.startswith(str(tmp_path))
    assert result["last_message"].text == "Deleted."
    assert result["messages"][-2].tool_call_result.result == "deleted a.txt"
