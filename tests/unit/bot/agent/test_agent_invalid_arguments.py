"""A tool call whose arguments break the tool's schema is answered with an error, never put to a human."""

from __future__ import annotations

from datetime import date

import pytest

from bot.agent import Agent
from bot.hitl.breakpoint import BreakpointConfirmationStrategy, HITLBreakpointException
from bot.hitl.dataclasses import ConfirmationUIResult
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ChatRole
from bot.redaction import MASK
from bot.tools import Tool
from tests.fakes.agent_kit import ToolBox, approve, asks, blocking, call, says
from tests.fakes.engine_kit import asks_for, dangling_calls, echoes_results
from tests.fakes.typed_tools import RECEIVED, schedule_change

USER = ChatMessage.from_user("rotate the key")
SECRET = "hunter2-not-long-enough"


def tool_results(result: dict) -> list[tuple[str, str, bool]]:
    return [
        (m.tool_call_result.origin.id, m.tool_call_result.result, m.tool_call_result.error)
        for m in result["messages"]
        if m.role == ChatRole.TOOL
    ]


def rotate_key_tool(box: ToolBox) -> Tool:
    def rotate_key(service: str, api_key: str, replicas: int = 1) -> str:
        box.record("rotate_key", {"service": service, "api_key": api_key, "replicas": replicas})
        return f"rotated {service}"

    schema = {
        "type": "object",
        "properties": {
            "service": {"type": "string"},
            "api_key": {"type": "string", "minLength": 32},
            "replicas": {"type": "integer"},
        },
        "required": ["service", "api_key"],
        "additionalProperties": False,
    }
    return Tool(name="rotate_key", description="Rotate a service's key.", parameters=schema, function=rotate_key)


async def test_invalid_arguments_get_an_error_result_naming_the_fields_and_nobody_is_asked() -> None:
    box = ToolBox()
    strategy = blocking()  # no answers prepared: asking would fail the call instead of erroring it
    gen = ScriptedChatGenerator(
        [asks(call("rotate_key", "c1", service="web", api_key=SECRET, replicas="many")), says("Sorry.")]
    )
    agent = Agent(gen, tools=[rotate_key_tool(box)], confirmation_strategies={"rotate_key": strategy})

    result = await agent.run_async([USER])

    assert strategy.confirmation_ui.shown == []
    assert box.executed == []
    [(call_id, text, error)] = tool_results(result)
    assert (call_id, error) == ("c1", True)
    assert "api_key" in text and "replicas" in text and "service" not in text.replace("rotate_key", "")
    assert SECRET not in text and MASK in text
    assert result["exit_reason"] == "text"
    assert result["tool_call_counts"] == {}


async def test_the_model_can_correct_an_invalid_call_in_the_next_step() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator(
        [
            asks(call("rotate_key", "c1", service="web", api_key="short")),
            asks(call("rotate_key", "c2", service="web", api_key="k" * 40)),
        ]
    )
    agent = Agent(
        gen, tools=[rotate_key_tool(box)], confirmation_strategies={"rotate_key": BreakpointConfirmationStrategy()}
    )

    with pytest.raises(HITLBreakpointException) as paused:
        await agent.run_async([USER])

    # the invalid call never reached the strategy (it would have paused on c1); the corrected one did
    assert [c.id for c in paused.value.pending_tool_calls] == ["c2"]
    sent_back = gen.calls[1]["messages"]
    assert sent_back[-1].role == ChatRole.TOOL and sent_back[-1].tool_call_result.error
    assert "api_key" in sent_back[-1].tool_call_result.result
    assert box.executed == []


async def test_an_invalid_call_beside_a_valid_one_leaves_only_the_valid_one_pending_and_resumes_cleanly() -> None:
    box = ToolBox()
    restart = box.make("restart")
    agent = Agent(
        ScriptedChatGenerator(
            [
                asks(
                    call("rotate_key", "bad", service="web"),
                    call("restart", "ok", target="web"),
                ),
                says("Restarted; the key call needs an api_key."),
            ]
        ),
        tools=[rotate_key_tool(box), restart],
        confirmation_strategies={"*": BreakpointConfirmationStrategy()},
    )

    with pytest.raises(HITLBreakpointException) as paused:
        await agent.run_async([USER])
    assert [c.id for c in paused.value.pending_tool_calls] == ["ok"]

    decision = approve(paused.value.pending_tool_calls[0])
    result = await agent.run_async([], snapshot=paused.value.snapshot, tool_execution_decisions=[decision])

    assert box.names() == ["restart"]
    by_id = {cid: (text, error) for cid, text, error in tool_results(result)}
    assert by_id["bad"][1] is True and "api_key" in by_id["bad"][0]
    assert by_id["ok"] == ("restart done on web x1", False)
    assert result["exit_reason"] == "text"


# --- through the engine: no approval is created, nothing is rendered, nothing runs ---------------------


async def test_the_engine_creates_no_approval_for_a_call_with_invalid_arguments(harnesses) -> None:
    secret = "sk-live-0123456789abcdef"
    h = await harnesses.open(replies=[asks_for("set_secret", api_key=[secret], note=7), echoes_results])

    await h.say("store the key")
    await h.engine.wait_idle()

    assert h.surface.renders == []
    assert h.tools.executed == []
    assert await h.engine.storage.approvals.pending() == []
    [answer] = h.surface.replies_in(h.thread())
    assert answer.startswith("results: Invalid parameters for tool 'set_secret'")
    assert "name" in answer and "api_key" in answer and "note" in answer
    assert secret not in answer
    assert dangling_calls(await h.history()) == []


async def test_a_date_the_model_got_wrong_is_an_error_result_and_a_right_one_runs_with_a_date() -> None:
    RECEIVED.clear()
    arguments = {
        "change": {"title": "Upgrade", "window": {"start": "2026-12-01T22:00:00Z"}},
        "owner": {"name": "Ana", "email": "ana@example.com"},
    }
    strategy = blocking(ConfirmationUIResult(action="confirm"))
    gen = ScriptedChatGenerator(
        [
            asks(call("schedule_change", "c1", on="next tuesday", **arguments)),
            asks(call("schedule_change", "c2", on="2026-12-01", **arguments)),
            says("Scheduled."),
        ]
    )
    agent = Agent(gen, tools=[schedule_change], confirmation_strategies={"schedule_change": strategy})

    result = await agent.run_async([USER])

    assert [name for name, _ in strategy.confirmation_ui.shown] == ["schedule_change"]  # only the valid call
    results = tool_results(result)
    assert results[0][0] == "c1" and results[0][2] is True and "on:" in results[0][1]
    assert results[1] == ("c2", "Upgrade on 2026-12-01", False)
    assert [got["on"] for got in RECEIVED] == [date(2026, 12, 1)]
