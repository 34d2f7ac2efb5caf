"""Debugging breakpoints: stop before the model's or the tool invoker's N-th visit, then resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.agent import Agent, AgentBreakpoint, AgentSnapshot, Breakpoint, BreakpointException, SnapshotError
from bot.hitl import BreakpointConfirmationStrategy, HITLBreakpointException
from bot.hooks import HookEvent
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ChatRole
from tests.fakes.agent_kit import ToolBox, approve, asks, call, says

USER = ChatMessage.from_user("check the disks")


def looping_agent(box: ToolBox, **kwargs: object) -> tuple[Agent, ScriptedChatGenerator]:
    """Three steps that call tools (lookup, lookup, delete), then an answer: four model calls."""
    gen = ScriptedChatGenerator(
        [
            asks(call("lookup", "c1", target="sda")),
            asks(call("lookup", "c2", target="sdb")),
            asks(call("delete", "c3", target="tmp")),
            says("all clean"),
        ]
    )
    return Agent(gen, tools=[box.make("lookup"), box.make("delete")], **kwargs), gen  # type: ignore[arg-type]


async def stop_at(
    agent: Agent, point: Breakpoint | AgentBreakpoint, *messages: ChatMessage, snapshot: AgentSnapshot | None = None
) -> BreakpointException:
    with pytest.raises(BreakpointException) as info:
        if snapshot is not None:
            await agent.run_async([], snapshot=snapshot, break_point=point)
        else:
            await agent.run_async(list(messages) or [USER], break_point=point)
    return info.value


@pytest.mark.parametrize("visit", [0, 1, 3])
async def test_a_chat_generator_breakpoint_stops_before_that_model_call_and_resumes_to_the_same_answer(
    visit: int,
) -> None:
    box = ToolBox()
    agent, gen = looping_agent(box)

    stop = await stop_at(agent, Breakpoint("chat_generator", visit_count=visit))

    assert len(gen.calls) == visit
    assert stop.component == "chat_generator"
    assert stop.snapshot.stage == "chat_generator"
    assert stop.snapshot.component_visits.get("chat_generator", 0) == visit
    assert not isinstance(stop, HITLBreakpointException)
    ran_before = list(box.names())

    restored = AgentSnapshot.from_json(stop.snapshot.to_json())
    result = await agent.run_async([], snapshot=restored)

    assert len(gen.calls) == 4
    assert box.names() == ["lookup", "lookup", "delete"]
    assert box.names()[: len(ran_before)] == ran_before
    assert result["last_message"].text == "all clean"
    assert result["step_count"] == 4


@pytest.mark.parametrize("visit", [0, 2])
async def test_a_tool_invoker_breakpoint_stops_before_that_step_runs_its_tools(visit: int) -> None:
    box = ToolBox()
    fired: list[str] = []

    def note(event: HookEvent) -> None:
        assert event.tool_call is not None
        fired.append(event.tool_call.id or "")

    agent, gen = looping_agent(box, hooks={"before_tool": [note]})

    stop = await stop_at(agent, AgentBreakpoint(Breakpoint("tool_invoker", visit_count=visit)))

    assert stop.component == "tool_invoker"
    assert len(box.executed) == visit  # the steps before it ran; this one has not
    assert len(gen.calls) == visit + 1  # the model already asked for the step's calls
    assert [c.id for c in stop.snapshot.pending_tool_calls] == [f"c{visit + 1}"]
    assert len(fired) == visit  # before_tool fires when the step is resumed, once

    result = await agent.run_async([], snapshot=AgentSnapshot.from_json(stop.snapshot.to_json()))

    assert box.names() == ["lookup", "lookup", "delete"]
    assert fired == ["c1", "c2", "c3"]
    assert result["exit_reason"] == "text"
    assert result["tool_call_counts"] == {"lookup": 2, "delete": 1}


async def test_resuming_with_a_later_breakpoint_stops_again_there() -> None:
    box = ToolBox()
    agent, gen = looping_agent(box)

    first = await stop_at(agent, Breakpoint("tool_invoker", visit_count=0))
    second = await stop_at(agent, Breakpoint("tool_invoker", visit_count=1), snapshot=first.snapshot)
    third = await stop_at(agent, Breakpoint("chat_generator", visit_count=3), snapshot=second.snapshot)

    assert box.names() == ["lookup", "lookup", "delete"]
    assert len(gen.calls) == 3
    assert third.snapshot.component_visits == {"chat_generator": 3, "tool_invoker": 3}
    result = await agent.run_async([], snapshot=third.snapshot)
    assert result["last_message"].text == "all clean"


async def test_the_same_breakpoint_does_not_stop_a_run_resumed_from_it() -> None:
    agent, gen = looping_agent(ToolBox())
    point = Breakpoint("chat_generator", visit_count=1)

    stop = await stop_at(agent, point)
    result = await agent.run_async([], snapshot=stop.snapshot, break_point=point)

    assert result["last_message"].text == "all clean"
    assert len(gen.calls) == 4


async def test_a_breakpoint_writes_its_snapshot_into_the_folder(tmp_path: Path) -> None:
    agent, _ = looping_agent(ToolBox())
    folder = tmp_path / "snapshots"

    first = await stop_at(agent, Breakpoint("chat_generator", visit_count=1, snapshot_file_path=str(folder)))
    second = await stop_at(
        agent, Breakpoint("tool_invoker", visit_count=1, snapshot_file_path=str(folder)), snapshot=first.snapshot
    )

    files = sorted(folder.iterdir())
    assert len(files) == 2  # no two stops overwrite each other
    assert first.snapshot_file_path is not None and Path(first.snapshot_file_path).parent == folder
    assert str(first.snapshot_file_path) in str(first)
    text = Path(second.snapshot_file_path or "").read_text(encoding="utf-8")  # noqa: ASYNC240 - a test's tmp file
    loaded = AgentSnapshot.from_json(text)
    assert loaded.stage == "tool_invoker"
    assert json.loads(loaded.to_json())["break_point"] == {
        "component_name": "tool_invoker",
        "visit_count": 1,
        "snapshot_file_path": str(folder),
    }
    result = await agent.run_async([], snapshot=loaded)
    assert result["last_message"].text == "all clean"


async def test_a_breakpoint_snapshot_is_refused_by_an_agent_with_other_tools() -> None:
    box = ToolBox()
    agent, _ = looping_agent(box)
    stop = await stop_at(agent, Breakpoint("tool_invoker", visit_count=0))

    # The same names, but delete now takes other parameters.
    other = Agent(ScriptedChatGenerator([says("hi")]), tools=[box.make("lookup"), box.failing("delete")])

    with pytest.raises(SnapshotError, match="different tool set"):
        await other.run_async([], snapshot=stop.snapshot)
    assert box.executed == []


async def test_a_breakpoint_and_an_approval_pause_share_one_run() -> None:
    box = ToolBox()
    agent, _ = looping_agent(box, confirmation_strategies={"delete": BreakpointConfirmationStrategy()})

    stop = await stop_at(agent, Breakpoint("chat_generator", visit_count=2))
    with pytest.raises(HITLBreakpointException) as pause:
        await agent.run_async([], snapshot=stop.snapshot)
    snapshot = pause.value.snapshot
    assert snapshot is not None and snapshot.stage == "decide"
    result = await agent.run_async(
        [],
        snapshot=AgentSnapshot.from_json(snapshot.to_json()),
        tool_execution_decisions=[approve(snapshot.pending_tool_calls[0])],
    )

    assert box.names() == ["lookup", "lookup", "delete"]
    assert result["exit_reason"] == "text"
    assert [m.role for m in result["messages"]].count(ChatRole.TOOL) == 3


def test_breakpoints_are_validated_and_serialise() -> None:
    with pytest.raises(ValueError, match="component_name"):
        Breakpoint("llm")
    with pytest.raises(ValueError, match="visit_count"):
        Breakpoint("chat_generator", visit_count=-1)
    point = AgentBreakpoint(Breakpoint("tool_invoker", 2, "/tmp/x"), agent_name="ops")
    assert AgentBreakpoint.from_dict(json.loads(json.dumps(point.to_dict()))) == point
