"""AgentSnapshot: lossless serialisation, refusal of what cannot be resumed, and reading its calls."""

from __future__ import annotations

import json
import math
from dataclasses import fields
from pathlib import Path

import pytest

from bot import jsonio
from bot.agent import Agent, AgentSnapshot, SnapshotError, get_tool_calls_and_descriptions_from_snapshot
from bot.agent.snapshot import SNAPSHOT_SCHEMA_VERSION, snapshot_data, snapshot_from_data
from bot.hitl import BreakpointConfirmationStrategy, HITLBreakpointException, ToolExecutionDecision
from bot.llm import ScriptedChatGenerator
from bot.llm.scripted import _light_copy
from bot.messages import ChatMessage, ChatRole, ToolCall, message_data, message_from_data
from tests.fakes.agent_kit import ToolBox, asks, call


async def paused_snapshot() -> AgentSnapshot:
    box = ToolBox()
    gen = ScriptedChatGenerator(
        [asks(call("delete", "c1", target="a.log"), call("lookup", "c2", target="disk"), usage={"total_tokens": 7})]
    )
    agent = Agent(
        gen,
        tools=[box.make("delete"), box.make("lookup")],
        system_prompt="Be careful.",
        state_schema={"notes": {"type": list}},
        confirmation_strategies={"delete": BreakpointConfirmationStrategy()},
    )
    with pytest.raises(HITLBreakpointException) as info:
        await agent.run_async([ChatMessage.from_user("clean up")], notes=["from the user"])
    return info.value.snapshot


async def test_a_snapshot_round_trips_through_json_losslessly() -> None:
    snapshot = await paused_snapshot()

    restored = AgentSnapshot.from_json(snapshot.to_json())

    assert restored.to_dict() == snapshot.to_dict()
    assert [m.id for m in restored.messages] == [m.id for m in snapshot.messages]
    assert restored.pending_tool_calls == snapshot.pending_tool_calls
    assert restored.decisions == snapshot.decisions
    assert restored.state == {"notes": ["from the user"]}
    assert restored.token_usage == {"total_tokens": 7}


async def test_to_json_and_from_json_agree_exactly_with_to_dict_and_from_dict() -> None:
    # to_json/from_json skip the deep copies of to_dict/from_dict; the data must be the same.
    snapshot = await paused_snapshot()
    snapshot.messages.append(
        ChatMessage.from_tool(
            "ok", origin=snapshot.step_message.tool_calls[1], meta={"nested": {"a": [1, {"b": None}]}}
        )
    )

    assert json.loads(snapshot.to_json()) == snapshot.to_dict()
    from_json = AgentSnapshot.from_json(snapshot.to_json())
    from_dict = AgentSnapshot.from_dict(json.loads(json.dumps(snapshot.to_dict())))
    assert from_json == from_dict
    assert from_json.messages[-1].meta is not snapshot.messages[-1].meta


async def test_a_snapshot_holds_everything_needed_to_resume() -> None:
    snapshot = await paused_snapshot()
    data = snapshot.to_dict()

    assert data["schema_version"] == SNAPSHOT_SCHEMA_VERSION
    assert data["tools_fingerprint"]
    assert [m["role"] for m in data["messages"]] == ["system", "user", "assistant"]
    assert data["pending_tool_calls"] == [{"tool_name": "delete", "arguments": {"target": "a.log"}, "id": "c1"}]
    assert data["decisions"] == [
        ToolExecutionDecision("lookup", True, tool_call_id="c2", final_tool_params={"target": "disk"}).to_dict()
    ]
    assert data["step_count"] == 1
    assert snapshot.step_message.tool_calls[0].id == "c1"


def test_a_snapshot_of_an_unknown_schema_version_is_refused() -> None:
    with pytest.raises(SnapshotError, match="schema version 99"):
        AgentSnapshot.from_dict({"schema_version": 99, "run_id": "r"})


async def test_a_malformed_snapshot_is_refused_with_a_snapshot_error() -> None:
    data = (await paused_snapshot()).to_dict()
    del data["messages"]

    with pytest.raises(SnapshotError, match="Malformed"):
        AgentSnapshot.from_dict(data)


def test_text_that_is_not_json_is_refused_with_a_snapshot_error() -> None:
    with pytest.raises(SnapshotError, match="not valid JSON"):
        AgentSnapshot.from_json("{not json")


def test_a_snapshot_whose_state_is_not_json_serialisable_says_so() -> None:
    snapshot = AgentSnapshot(run_id="r", messages=[], pending_tool_calls=[], state={"handle": object()})

    with pytest.raises(SnapshotError, match="not JSON-serialisable"):
        snapshot.to_json()


def test_a_snapshot_error_is_a_value_error() -> None:
    assert issubclass(SnapshotError, ValueError)


async def test_the_pending_calls_and_their_descriptions_can_be_read_from_a_snapshot() -> None:
    snapshot = AgentSnapshot.from_json((await paused_snapshot()).to_json())

    calls, descriptions = get_tool_calls_and_descriptions_from_snapshot(snapshot)
    every_call, every_description = get_tool_calls_and_descriptions_from_snapshot(snapshot, breakpoint_tool_only=False)

    assert calls == [{"tool_name": "delete", "arguments": {"target": "a.log"}, "id": "c1"}]
    assert descriptions == {"delete": "The delete tool."}
    assert [c["id"] for c in every_call] == ["c1", "c2"]
    assert every_description == {"delete": "The delete tool.", "lookup": "The lookup tool."}
    json.dumps([calls, descriptions])  # ready to render or to send


OLD_SNAPSHOT = Path(__file__).parents[3] / "fixtures" / "snapshot_v1_stdlib_json.json"
"""A snapshot as countersign wrote it before orjson: json.dumps's spacing, and a NaN in its state."""


def test_a_snapshot_written_by_the_standard_library_encoder_still_loads() -> None:
    text = OLD_SNAPSHOT.read_text(encoding="utf-8")

    restored = AgentSnapshot.from_json(text)

    assert restored.run_id == "run-old-1"
    assert [m.role for m in restored.messages] == [ChatRole.SYSTEM, ChatRole.USER, ChatRole.ASSISTANT]
    assert restored.messages[1].text == "nettoie «prod» ✓"
    assert restored.messages[1].meta == {"id": "m-user", "nested": {"a": [1, {"b": None}]}}
    assert [c.id for c in restored.pending_tool_calls] == ["c1"]
    assert math.isnan(restored.state["ratio"])
    # The parsed old text and the new encoding hold the same data (NaN aside, which never equals itself).
    old, new = json.loads(text), json.loads(restored.to_json())
    old["state"].pop("ratio"), new["state"].pop("ratio")
    assert {key: new[key] for key in old} == old  # newer snapshots only add fields (with their defaults)
    assert AgentSnapshot.from_dict(json.loads(text)) == restored


def test_snapshot_from_data_takes_fresh_data_over_and_agrees_with_from_dict() -> None:
    data = json.loads(OLD_SNAPSHOT.read_text(encoding="utf-8"))
    del data["state"]["ratio"]  # NaN never equals itself
    text = json.dumps(data)

    taken = snapshot_from_data(data)

    assert taken == AgentSnapshot.from_dict(json.loads(text))
    assert json.loads(jsonio.dumps(snapshot_data(taken))) == json.loads(json.dumps(taken.to_dict()))


def test_a_message_with_an_unknown_role_is_refused_on_the_fast_path_too() -> None:
    data = json.loads(OLD_SNAPSHOT.read_text(encoding="utf-8"))
    data["messages"][1]["role"] = "robot"

    with pytest.raises(SnapshotError, match="robot"):
        snapshot_from_data(data)
    with pytest.raises(SnapshotError, match="robot"):
        AgentSnapshot.from_json(json.dumps(data))


def test_the_fast_message_paths_fill_every_field_of_a_chat_message() -> None:
    # message_from_data and the scripted generator's light copies set fields one by one (speed): a field
    # added to ChatMessage must be added there too, or messages built on those paths would lack it.
    message = ChatMessage.from_tool("ok", origin=ToolCall("delete", {"target": "a.log"}, id="c1"), meta={"k": 1})
    every_field = {f.name for f in fields(ChatMessage)}

    assert set(vars(message_from_data(json.loads(jsonio.dumps(message_data(message)))))) == every_field
    assert set(vars(_light_copy(message))) == every_field
    assert set(message_data(message)) == set(message.to_dict()) == every_field
