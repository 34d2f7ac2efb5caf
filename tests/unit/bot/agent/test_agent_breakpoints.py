"""Breakpoints: a step pauses with all its pending calls, and resumes exactly as the humans decided."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from bot.agent import Agent, AgentSnapshot, SnapshotError
from bot.hitl import (
    MODIFICATION_FEEDBACK_TEMPLATE,
    REJECTION_FEEDBACK_TEMPLATE,
    BreakpointConfirmationStrategy,
    HITLBreakpointException,
    NeverAskPolicy,
    ToolExecutionDecision,
)
from bot.hitl.dataclasses import ConfirmationUIResult
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ChatRole
from bot.tools import tool
from tests.fakes.agent_kit import ToolBox, approve, asks, blocking, call, dangling_free, reject, says

USER = ChatMessage.from_user("clean up the server")
DELETE = call("delete", "c-del", target="old.log")
RESTART = call("restart", "c-rst", target="nginx")
LOOKUP = call("lookup", "c-look", target="disk")


def three_call_agent(
    box: ToolBox, *later: ChatMessage, folder: Path | None = None
) -> tuple[Agent, ScriptedChatGenerator]:
    """delete and restart need approval, lookup does not; the first reply requests all three."""
    gen = ScriptedChatGenerator([asks(DELETE, LOOKUP, RESTART, usage={"total_tokens": 11}), *later])
    pause = BreakpointConfirmationStrategy(snapshot_file_path=str(folder) if folder else None)
    agent = Agent(
        gen,
        tools=[box.make("delete"), box.make("restart"), box.make("lookup")],
        confirmation_strategies={("delete", "restart"): pause},
    )
    return agent, gen


async def pause_of(agent: Agent, *messages: ChatMessage, **kwargs: Any) -> HITLBreakpointException:
    with pytest.raises(HITLBreakpointException) as info:
        await agent.run_async(list(messages) or [USER], **kwargs)
    return info.value


def tool_results(messages: list[ChatMessage]) -> list[tuple[str | None, str, bool]]:
    return [
        (m.tool_call_result.origin.id, m.tool_call_result.result, m.tool_call_result.error)
        for m in messages
        if m.role == ChatRole.TOOL
    ]


# --- pausing -------------------------------------------------------------------------------------------


async def test_a_step_pauses_with_every_call_that_needs_approval_and_runs_nothing_yet() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("done"))

    pause = await pause_of(agent)

    assert pause.pending_tool_calls == [DELETE, RESTART]
    assert box.executed == []  # lookup needs no approval, but waits with the others
    assert pause.snapshot is not None
    assert pause.snapshot.step_message.tool_calls == [DELETE, LOOKUP, RESTART]
    assert pause.snapshot.pending_tool_calls == [DELETE, RESTART]
    assert [d.tool_call_id for d in pause.snapshot.decisions] == ["c-look"]
    assert (pause.tool_name, pause.tool_call_id) == ("delete", "c-del")
    assert pause.snapshot.step_count == 1
    assert pause.snapshot.token_usage == {"total_tokens": 11}


async def test_resuming_runs_the_approved_and_the_waiting_calls_and_continues_to_an_answer() -> None:
    box = ToolBox()
    agent, gen = three_call_agent(box, says("Cleaned up."))
    pause = await pause_of(agent)

    result = await agent.run_async(
        [], snapshot=pause.snapshot, tool_execution_decisions=[approve(DELETE), approve(RESTART)]
    )

    assert sorted(box.names()) == ["delete", "lookup", "restart"]
    assert result["exit_reason"] == "text"
    assert result["last_message"].text == "Cleaned up."
    assert result["step_count"] == 2
    assert result["tool_call_counts"] == {"delete": 1, "restart": 1, "lookup": 1}
    assert [r[0] for r in tool_results(result["messages"])] == ["c-del", "c-look", "c-rst"]
    assert len(gen.calls) == 2  # the LLM was skipped for the paused step
    assert dangling_free(gen.calls[1]["messages"])


async def test_a_later_step_may_pause_again() -> None:
    box = ToolBox()
    first, second = call("delete", "c1", target="a.log"), call("delete", "c2", target="b.log")
    gen = ScriptedChatGenerator([asks(first), asks(second), says("Both gone.")])
    agent = Agent(gen, tools=[box.make("delete")], confirmation_strategies={"delete": BreakpointConfirmationStrategy()})

    pause1 = await pause_of(agent)
    with pytest.raises(HITLBreakpointException) as info:
        await agent.run_async([], snapshot=pause1.snapshot, tool_execution_decisions=[approve(first)])
    pause2 = info.value
    result = await agent.run_async([], snapshot=pause2.snapshot, tool_execution_decisions=[approve(second)])

    assert pause2.pending_tool_calls == [second]
    assert pause2.snapshot.step_count == 2
    assert pause2.snapshot.run_id == pause1.snapshot.run_id
    assert pause2.snapshot.tool_call_counts == {"delete": 1}
    assert box.executed == [("delete", {"target": "a.log", "count": 1}), ("delete", {"target": "b.log", "count": 1})]
    assert result["exit_reason"] == "text"
    assert result["run_id"] == pause1.snapshot.run_id


async def test_a_policy_that_does_not_ask_lets_the_breakpoint_strategy_approve_at_once() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(DELETE), says("done")])
    strategy = BreakpointConfirmationStrategy(confirmation_policy=NeverAskPolicy())
    agent = Agent(gen, tools=[box.make("delete")], confirmation_strategies={"*": strategy})

    result = await agent.run_async([USER])

    assert box.names() == ["delete"]
    assert result["exit_reason"] == "text"


# --- resuming: which decisions are accepted -------------------------------------------------------------


async def test_a_missing_decision_is_a_value_error_naming_the_call_and_nothing_runs() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("done"))
    pause = await pause_of(agent)

    with pytest.raises(ValueError, match="c-rst"):
        await agent.run_async([], snapshot=pause.snapshot, tool_execution_decisions=[approve(DELETE)])

    assert box.executed == []


async def test_a_decision_for_an_unknown_call_id_is_a_value_error() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("done"))
    pause = await pause_of(agent)
    stray = ToolExecutionDecision(tool_name="delete", execute=True, tool_call_id="c-nope")

    with pytest.raises(ValueError, match="c-nope"):
        await agent.run_async(
            [], snapshot=pause.snapshot, tool_execution_decisions=[approve(DELETE), approve(RESTART), stray]
        )

    assert box.executed == []


async def test_two_decisions_for_one_call_are_a_value_error() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("done"))
    pause = await pause_of(agent)

    with pytest.raises(ValueError, match="c-del"):
        await agent.run_async(
            [], snapshot=pause.snapshot, tool_execution_decisions=[approve(DELETE), reject(DELETE), approve(RESTART)]
        )

    assert box.executed == []


async def test_a_decision_for_a_call_that_was_decided_automatically_is_a_value_error() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("done"))
    pause = await pause_of(agent)

    with pytest.raises(ValueError, match="c-look"):
        await agent.run_async(
            [], snapshot=pause.snapshot, tool_execution_decisions=[approve(DELETE), approve(RESTART), reject(LOOKUP)]
        )


async def test_an_id_less_decision_does_not_match_a_call_that_has_an_id() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("done"))
    pause = await pause_of(agent)
    id_less = ToolExecutionDecision(tool_name="delete", execute=True)

    with pytest.raises(ValueError, match="delete"):
        await agent.run_async([], snapshot=pause.snapshot, tool_execution_decisions=[id_less, approve(RESTART)])


async def test_resuming_with_new_messages_is_refused() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("done"))
    pause = await pause_of(agent)

    with pytest.raises(ValueError, match="no new messages"):
        await agent.run_async(
            [ChatMessage.from_user("and also…")],
            snapshot=pause.snapshot,
            tool_execution_decisions=[approve(DELETE), approve(RESTART)],
        )

    assert box.executed == []


async def test_resuming_with_new_state_is_refused() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("done"))
    pause = await pause_of(agent)

    with pytest.raises(ValueError, match="cannot be passed when resuming"):
        await agent.run_async(
            [], snapshot=pause.snapshot, tool_execution_decisions=[approve(DELETE), approve(RESTART)], notes=["x"]
        )

    assert box.executed == []


async def test_decisions_without_a_snapshot_are_refused() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("done"))

    with pytest.raises(ValueError, match="snapshot"):
        await agent.run_async([USER], tool_execution_decisions=[approve(DELETE)])


async def test_a_snapshot_taken_with_another_tool_set_is_refused() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("done"))
    pause = await pause_of(agent)

    def restart(target: str, force: bool) -> str:
        """Restart a target, now with a required ``force`` the paused call does not have."""
        return target

    changed = Agent(
        ScriptedChatGenerator([says("done")]),
        tools=[box.make("delete"), tool(restart), box.make("lookup")],
    )

    with pytest.raises(SnapshotError, match="different tool set"):
        await changed.run_async(
            [], snapshot=pause.snapshot, tool_execution_decisions=[approve(DELETE), approve(RESTART)]
        )

    assert box.executed == []


async def test_a_snapshot_survives_json_and_resumes_in_a_fresh_agent_as_if_in_another_process() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box)
    pause = await pause_of(agent)
    stored = pause.snapshot.to_json()

    fresh_box = ToolBox()
    fresh, gen = three_call_agent(fresh_box)
    fresh.chat_generator = ScriptedChatGenerator([says("Done, in another process.", usage={"total_tokens": 5})])
    decisions = [approve(DELETE), reject(RESTART, "not during business hours")]
    wire = [ToolExecutionDecision.from_dict(json.loads(json.dumps(d.to_dict()))) for d in decisions]
    result = fresh.run([], snapshot=AgentSnapshot.from_json(stored), tool_execution_decisions=wire)

    assert box.executed == []
    assert sorted(fresh_box.names()) == ["delete", "lookup"]
    assert result["last_message"].text == "Done, in another process."
    assert result["token_usage"] == {"total_tokens": 16}
    assert result["run_id"] == pause.snapshot.run_id
    assert ("c-rst", "not during business hours", True) in tool_results(result["messages"])


# --- snapshot files (sync tests: they inspect the disk) -------------------------------------------------


def pause_now(agent: Agent, messages: list[ChatMessage], **kwargs: Any) -> HITLBreakpointException:
    with pytest.raises(HITLBreakpointException) as info:
        agent.run(messages, **kwargs)
    return info.value


def test_each_pause_writes_its_own_snapshot_file_named_for_the_run_and_the_step(tmp_path: Path) -> None:
    folder = tmp_path / "snapshots"
    box = ToolBox()
    first, second = call("delete", "c1", target="a.log"), call("delete", "c2", target="b.log")
    gen = ScriptedChatGenerator([asks(first), asks(second), says("done")])
    strategy = BreakpointConfirmationStrategy(snapshot_file_path=str(folder))
    agent = Agent(gen, tools=[box.make("delete")], confirmation_strategies={"delete": strategy})

    pause1 = pause_now(agent, [USER], run_id="run-42")
    pause2 = pause_now(agent, [], snapshot=pause1.snapshot, tool_execution_decisions=[approve(first)])

    files = sorted(folder.glob("*.json"))
    assert len(files) == 2
    assert {str(f) for f in files} == {pause1.snapshot_file_path, pause2.snapshot_file_path}
    name1, name2 = Path(pause1.snapshot_file_path).name, Path(pause2.snapshot_file_path).name
    assert name1 != name2
    assert pause2.snapshot_file_path in str(pause2)  # a log line of the pause says where to look
    assert "run-42" in name1 and "step001" in name1
    assert "run-42" in name2 and "step002" in name2
    on_disk = AgentSnapshot.from_json(Path(pause2.snapshot_file_path).read_text(encoding="utf-8"))
    assert on_disk.to_dict() == pause2.snapshot.to_dict()


def test_a_pause_without_a_snapshot_folder_writes_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    box = ToolBox()
    agent, _ = three_call_agent(box)

    pause = pause_now(agent, [USER])

    assert pause.snapshot_file_path is None
    assert list(tmp_path.iterdir()) == []


def test_a_run_id_cannot_steer_the_snapshot_file_out_of_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "snapshots"
    box = ToolBox()
    agent, _ = three_call_agent(box, folder=folder)

    pause = pause_now(agent, [USER], run_id="../../escaped")

    written = Path(pause.snapshot_file_path)
    assert written.parent == folder
    assert written.exists()
    assert list(tmp_path.glob("*.json")) == []


# --- decisions applied through the agent ---------------------------------------------------------------


async def test_a_rejected_call_is_split_into_its_own_message_with_the_feedback_as_an_error_result() -> None:
    box = ToolBox()
    agent, gen = three_call_agent(box, says("OK"))
    pause = await pause_of(agent)

    result = await agent.run_async(
        [], snapshot=pause.snapshot, tool_execution_decisions=[reject(DELETE, "keep the logs"), approve(RESTART)]
    )

    sent = gen.calls[1]["messages"]
    shape = [(m.role, [c.id for c in m.tool_calls], m.tool_call_result and m.tool_call_result.origin.id) for m in sent]
    assert shape == [
        (ChatRole.USER, [], None),
        (ChatRole.ASSISTANT, ["c-del"], None),
        (ChatRole.TOOL, [], "c-del"),
        (ChatRole.ASSISTANT, ["c-look", "c-rst"], None),
        (ChatRole.TOOL, [], "c-look"),
        (ChatRole.TOOL, [], "c-rst"),
    ]
    assert sent[2].tool_call_result.result == "keep the logs"
    assert sent[2].tool_call_result.error is True
    assert "delete" not in box.names()
    assert result["tool_call_counts"] == {"lookup": 1, "restart": 1}


async def test_a_rejection_without_feedback_uses_the_default_rejection_text() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("OK"))
    pause = await pause_of(agent)

    result = await agent.run_async(
        [], snapshot=pause.snapshot, tool_execution_decisions=[reject(DELETE), approve(RESTART)]
    )

    assert ("c-del", REJECTION_FEEDBACK_TEMPLATE.format(tool_name="delete"), True) in tool_results(result["messages"])


async def test_a_modified_call_runs_with_exactly_the_final_params_after_a_user_note() -> None:
    box = ToolBox()
    agent, gen = three_call_agent(box, says("OK"))
    pause = await pause_of(agent)

    await agent.run_async(
        [],
        snapshot=pause.snapshot,
        tool_execution_decisions=[approve(DELETE, target="old.log.1", count=2), approve(RESTART)],
    )

    assert ("delete", {"target": "old.log.1", "count": 2}) in box.executed
    sent = gen.calls[1]["messages"]
    notes = [m for m in sent if m.role == ChatRole.USER and m.meta.get("modification_of") == "c-del"]
    assert [n.text for n in notes] == [
        MODIFICATION_FEEDBACK_TEMPLATE.format(
            tool_name="delete", final_tool_params=json.dumps({"target": "old.log.1", "count": 2})
        )
    ]
    (last_call_message,) = [m for m in sent if m.role == ChatRole.ASSISTANT]
    assert sent.index(notes[0]) < sent.index(last_call_message)
    assert last_call_message.tool_calls[0].arguments == {"target": "old.log.1", "count": 2}
    assert last_call_message.id != pause.snapshot.step_message.id


async def test_a_modification_that_changes_nothing_is_a_confirmation() -> None:
    box = ToolBox()
    agent, gen = three_call_agent(box, says("OK"))
    pause = await pause_of(agent)

    await agent.run_async(
        [], snapshot=pause.snapshot, tool_execution_decisions=[approve(DELETE, target="old.log"), approve(RESTART)]
    )

    sent = gen.calls[1]["messages"]
    assert [m.role for m in sent].count(ChatRole.USER) == 1  # only the original request
    (assistant,) = [m for m in sent if m.role == ChatRole.ASSISTANT]
    assert assistant.id == pause.snapshot.step_message.id
    assert ("delete", {"target": "old.log", "count": 1}) in box.executed


async def test_an_invalid_edit_is_never_executed_and_gets_an_error_result() -> None:
    box = ToolBox()
    agent, _ = three_call_agent(box, says("OK"))
    pause = await pause_of(agent)

    result = await agent.run_async(
        [],
        snapshot=pause.snapshot,
        tool_execution_decisions=[approve(DELETE, target="old.log", count="all"), approve(RESTART)],
    )

    assert "delete" not in box.names()
    (refusal,) = [r for r in tool_results(result["messages"]) if r[0] == "c-del"]
    assert refusal[2] is True
    assert "The edited parameters were refused" in refusal[1] and "count" in refusal[1]


async def test_all_surviving_calls_sit_in_one_assistant_message_after_the_rejections_and_notes() -> None:
    box = ToolBox()
    calls = [call("delete", f"c{i}", target=f"{i}.log") for i in range(4)]
    gen = ScriptedChatGenerator([asks(*calls), says("OK")])
    agent = Agent(gen, tools=[box.make("delete")], confirmation_strategies={"delete": BreakpointConfirmationStrategy()})
    pause = await pause_of(agent)

    await agent.run_async(
        [],
        snapshot=pause.snapshot,
        tool_execution_decisions=[
            approve(calls[0]),
            reject(calls[1]),
            approve(calls[2], target="x.log"),
            reject(calls[3]),
        ],
    )

    sent = gen.calls[1]["messages"][1:]  # after the user's request
    assistants = [m for m in sent if m.role == ChatRole.ASSISTANT]
    assert [[c.id for c in m.tool_calls] for m in assistants] == [["c1"], ["c3"], ["c0", "c2"]]
    last = assistants[-1]
    assert all(m.role == ChatRole.TOOL for m in sent[sent.index(last) + 1 :])
    assert sorted(target for _, args in box.executed for target in [args["target"]]) == ["0.log", "x.log"]


class ExplodingStrategy:
    """A confirmation strategy whose approval backend is down."""

    def run(self, **kwargs: Any) -> ToolExecutionDecision:
        raise ConnectionError("approval service unreachable")

    async def run_async(self, **kwargs: Any) -> ToolExecutionDecision:
        raise ConnectionError("approval service unreachable")

    def to_dict(self) -> dict[str, Any]:
        return {"type": "tests.unit.bot.agent.test_agent_breakpoints.ExplodingStrategy", "init_parameters": {}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExplodingStrategy:
        return cls()


async def test_a_strategy_that_raises_rejects_the_call_with_an_error_result_and_logs_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(DELETE, LOOKUP), says("OK")])
    agent = Agent(
        gen, tools=[box.make("delete"), box.make("lookup")], confirmation_strategies={"delete": ExplodingStrategy()}
    )

    with caplog.at_level(logging.ERROR, logger="bot.agent"):
        result = await agent.run_async([USER])

    assert box.names() == ["lookup"]
    (refusal,) = [r for r in tool_results(result["messages"]) if r[0] == "c-del"]
    assert refusal[2] is True
    assert "rejected" in refusal[1] and "ConnectionError" in refusal[1]
    assert any(r.levelno >= logging.ERROR and "rejecting" in r.getMessage() for r in caplog.records)
    assert result["tool_call_counts"] == {"lookup": 1}


async def test_an_unknown_action_from_a_blocking_ui_rejects_the_call() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(DELETE), says("OK")])
    strategy = blocking(ConfirmationUIResult(action="approve_all"))
    agent = Agent(gen, tools=[box.make("delete")], confirmation_strategies={"delete": strategy})

    result = await agent.run_async([USER])

    assert box.executed == []
    ((call_id, text, error),) = tool_results(result["messages"])
    assert call_id == "c-del" and error is True
    assert "approve_all" in text and "rejected" in text


async def test_a_blocking_modification_runs_the_merged_params() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(DELETE), says("OK")])
    strategy = blocking(ConfirmationUIResult(action="modify", new_tool_params={"count": 3}))
    agent = Agent(gen, tools=[box.make("delete")], confirmation_strategies={"delete": strategy})

    await agent.run_async([USER])

    assert box.executed == [("delete", {"target": "old.log", "count": 3})]
