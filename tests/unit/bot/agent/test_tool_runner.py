"""Running the tool calls of a step: concurrency, call order, and the execution ledger."""

from __future__ import annotations

import asyncio
import threading

import pytest

from bot.agent import OUTCOME_UNKNOWN, Agent, ToolRunner
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ChatRole, ToolCall
from bot.tools import tool
from tests.fakes.agent_kit import InMemoryLedger, ToolBox, asks, call, says

USER = ChatMessage.from_user("go")
GUARD = 5.0  # seconds; only bounds a failing test, never synchronises a passing one


class Gate:
    """Async tools that hold until released, so a test can see how many run at once."""

    def __init__(self, hold_until_in_flight: int) -> None:
        self.hold_until_in_flight = hold_until_in_flight
        self.in_flight = 0
        self.max_in_flight = 0
        self.reached = asyncio.Event()
        self.release: dict[str, asyncio.Event] = {}
        self.finished: list[str] = []

    def tool(self):  # noqa: ANN201 - returns a Tool
        @tool
        async def hold(label: str) -> str:
            """Hold until released.

            :param label: Which call this is.
            """
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            if self.in_flight >= self.hold_until_in_flight:
                self.reached.set()
            await self.release.setdefault(label, asyncio.Event()).wait()
            self.in_flight -= 1
            self.finished.append(label)
            return f"result {label}"

        return hold

    def open(self, label: str) -> None:
        self.release.setdefault(label, asyncio.Event()).set()


def _hold_calls(labels: list[str]) -> ChatMessage:
    return asks(*[call("hold", f"c-{label}", label=label) for label in labels])


async def _settle() -> None:
    # Let every task that is ready run; asyncio runs ready tasks within one loop iteration each.
    for _ in range(10):
        await asyncio.sleep(0)


async def test_tools_of_one_step_run_concurrently_up_to_four_by_default() -> None:
    gate = Gate(hold_until_in_flight=4)
    labels = ["a", "b", "c", "d", "e"]
    gen = ScriptedChatGenerator([_hold_calls(labels), says("done")])
    run = asyncio.create_task(Agent(gen, tools=[gate.tool()]).run_async([USER]))

    await asyncio.wait_for(gate.reached.wait(), GUARD)
    await _settle()
    assert gate.in_flight == 4  # the fifth waits for a free slot
    for label in labels:
        gate.open(label)
    result = await asyncio.wait_for(run, GUARD)

    assert gate.max_in_flight == 4
    assert result["exit_reason"] == "text"


async def test_max_workers_in_tool_invoker_kwargs_limits_how_many_tools_run_at_once() -> None:
    gate = Gate(hold_until_in_flight=2)
    labels = ["a", "b", "c", "d"]
    gen = ScriptedChatGenerator([_hold_calls(labels), says("done")])
    agent = Agent(gen, tools=[gate.tool()], tool_invoker_kwargs={"max_workers": 2})
    run = asyncio.create_task(agent.run_async([USER]))

    await asyncio.wait_for(gate.reached.wait(), GUARD)
    await _settle()
    assert gate.in_flight == 2
    for label in labels:
        gate.open(label)
    await asyncio.wait_for(run, GUARD)

    assert gate.max_in_flight == 2


async def test_results_keep_call_order_when_tools_finish_in_another_order() -> None:
    gate = Gate(hold_until_in_flight=3)
    gen = ScriptedChatGenerator([_hold_calls(["a", "b", "c"]), says("done")])
    run = asyncio.create_task(Agent(gen, tools=[gate.tool()]).run_async([USER]))

    await asyncio.wait_for(gate.reached.wait(), GUARD)
    for label in ["c", "b", "a"]:  # finish in reverse
        gate.open(label)
        await _settle()
    result = await asyncio.wait_for(run, GUARD)

    assert gate.finished == ["c", "b", "a"]
    results = [m.tool_call_result for m in result["messages"] if m.role == ChatRole.TOOL]
    assert [r.origin.id for r in results] == ["c-a", "c-b", "c-c"]
    assert [r.result for r in results] == ["result a", "result b", "result c"]


async def test_sync_tools_of_one_step_run_at_the_same_time_in_worker_threads() -> None:
    # Each call waits at a barrier only the other can open: sequential execution would time out.
    barrier = threading.Barrier(2, timeout=GUARD)

    @tool
    def meet(who: str) -> str:
        """Wait for the other call.

        :param who: Who arrives.
        """
        barrier.wait()
        return f"{who} met"

    gen = ScriptedChatGenerator([asks(call("meet", "c1", who="left"), call("meet", "c2", who="right")), says("ok")])

    result = await Agent(gen, tools=[meet]).run_async([USER])

    results = [m.tool_call_result for m in result["messages"] if m.role == ChatRole.TOOL]
    assert [(r.result, r.error) for r in results] == [("left met", False), ("right met", False)]


# --- the execution ledger ------------------------------------------------------------------------------


async def test_the_runner_claims_a_call_in_the_ledger_before_running_it_and_records_the_outcome_after() -> None:
    ledger = InMemoryLedger()
    seen_at_execution: list[list[tuple]] = []

    @tool
    def deploy(service: str) -> str:
        """Deploy a service.

        :param service: Which one.
        """
        seen_at_execution.append(list(ledger.events))
        return f"deployed {service}"

    gen = ScriptedChatGenerator([asks(call("deploy", "c1", service="api")), says("done")])
    agent = Agent(gen, tools=[deploy], tool_invoker_kwargs={"ledger": ledger})

    await agent.run_async([USER], run_id="run-1")

    assert seen_at_execution == [[("begin", "c1")]]
    assert ledger.events == [("begin", "c1"), ("finish", "c1", True, "deployed api")]


async def test_a_failed_call_is_recorded_as_failed_in_the_ledger() -> None:
    ledger = InMemoryLedger()
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(call("broken", "c1", target="x")), says("done")])

    await Agent(gen, tools=[box.failing("broken")], tool_invoker_kwargs={"ledger": ledger}).run_async([USER])

    assert ledger.events[-1] == ("finish", "c1", False, "Error invoking tool 'broken': RuntimeError: disk on fire")


async def test_a_refused_claim_does_not_run_the_tool_and_yields_the_prior_result() -> None:
    ledger = InMemoryLedger(prior={"c1": (True, "deployed api (earlier)")})
    box = ToolBox()
    runner = ToolRunner({"deploy": box.make("deploy")}, ledger=ledger)

    (message,) = await runner.run(
        [ToolCall("deploy", {"target": "api"}, id="c1")], run_id="r", call_keys=["c1"], state={}
    )

    assert box.executed == []
    assert message.tool_call_result.result == "deployed api (earlier)"
    assert message.tool_call_result.error is False


async def test_a_call_left_executing_by_a_crash_is_not_rerun_and_its_outcome_is_unknown() -> None:
    ledger = InMemoryLedger(prior={"c1": None})
    box = ToolBox()
    runner = ToolRunner({"deploy": box.make("deploy")}, ledger=ledger)

    (message,) = await runner.run(
        [ToolCall("deploy", {"target": "api"}, id="c1")], run_id="r", call_keys=["c1"], state={}
    )

    assert box.executed == []
    assert message.tool_call_result.result == OUTCOME_UNKNOWN
    assert message.tool_call_result.error is True


async def test_the_ledger_is_never_consulted_for_an_unknown_tool() -> None:
    ledger = InMemoryLedger()
    runner = ToolRunner({}, ledger=ledger)

    (message,) = await runner.run([ToolCall("ghost", {}, id="c1")], run_id="r", call_keys=["c1"], state={})

    assert ledger.events == []
    assert message.tool_call_result.error is True


def test_a_runner_needs_at_least_one_worker() -> None:
    with pytest.raises(ValueError, match="max_workers"):
        ToolRunner({}, max_workers=0)
