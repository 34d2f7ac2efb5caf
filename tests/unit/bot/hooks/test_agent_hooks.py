"""Hooks at the points of the agent loop: what each may change, what it may not, and how a hook stops a run."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.agent import Agent, AgentSnapshot
from bot.hitl import BreakpointConfirmationStrategy, HITLBreakpointException, NeverAskPolicy
from bot.hooks import ConfirmationHook, HookError, HookEvent, ToolResultReview
from bot.hooks.review import REVIEW_EXPIRED_RESULT
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ChatRole
from tests.fakes import hook_kit
from tests.fakes.agent_kit import ToolBox, approve, asks, call, dangling_free, says

USER = ChatMessage.from_user("clean up the server")


def tool_results(messages: list[ChatMessage]) -> list[tuple[str | None, str, bool]]:
    return [
        (m.tool_call_result.origin.id, m.tool_call_result.result, m.tool_call_result.error)
        for m in messages
        if m.role == ChatRole.TOOL and m.tool_call_result is not None
    ]


def agent_with(box: ToolBox, replies: list[ChatMessage], **kwargs: Any) -> tuple[Agent, ScriptedChatGenerator]:
    gen = ScriptedChatGenerator(replies)
    return Agent(gen, tools=[box.make("delete"), box.make("lookup")], **kwargs), gen


# --- before_llm -------------------------------------------------------------------------------------------


async def test_before_llm_changes_what_the_model_sees_but_not_the_transcript() -> None:
    def add_note(event: HookEvent) -> None:
        event.messages.append(ChatMessage.from_system("Answer in French."))

    agent, gen = agent_with(ToolBox(), [says("bonjour")], hooks={"before_llm": [add_note]})

    result = await agent.run_async([USER])

    assert [m.text for m in gen.calls[0]["messages"]] == ["clean up the server", "Answer in French."]
    assert [m.text for m in result["messages"]] == ["clean up the server", "bonjour"]


async def test_before_llm_may_not_replace_the_message_list() -> None:
    def replace_all(event: HookEvent) -> None:
        event.messages = []

    agent, gen = agent_with(ToolBox(), [says("hi")], hooks={"before_llm": [replace_all]})

    with pytest.raises(AttributeError, match="cannot change 'messages' at before_llm"):
        await agent.run_async([USER])
    assert gen.calls == []


async def test_before_llm_stop_ends_the_run_without_calling_the_model() -> None:
    async def out_of_budget(event: HookEvent) -> None:
        event.stop("budget_exhausted")

    agent, gen = agent_with(ToolBox(), [says("hi")], hooks={"before_llm": [out_of_budget]})

    result = await agent.run_async([USER])

    assert result["exit_reason"] == "budget_exhausted"
    assert gen.calls == []
    assert "stop_run" not in result


# --- after_llm --------------------------------------------------------------------------------------------


async def test_after_llm_sees_the_reply_but_changing_it_changes_nothing() -> None:
    seen: list[str | None] = []

    def tamper(event: HookEvent) -> None:
        assert event.reply is not None
        seen.append(event.reply.text)
        event.reply.text = "tampered"

    agent, _ = agent_with(ToolBox(), [says("the real answer")], hooks={"after_llm": [tamper]})

    result = await agent.run_async([USER])

    assert seen == ["the real answer"]
    assert result["last_message"].text == "the real answer"


async def test_after_llm_stop_keeps_the_reply_and_runs_none_of_its_calls() -> None:
    box = ToolBox()

    def stop_before_acting(event: HookEvent) -> None:
        if event.reply is not None and event.reply.tool_calls:
            event.stop("needs_a_human")

    agent, gen = agent_with(
        box, [asks(call("delete", "c1", target="a.log")), says("never")], hooks={"after_llm": [stop_before_acting]}
    )

    result = await agent.run_async([USER])

    assert result["exit_reason"] == "needs_a_human"
    assert box.executed == []
    assert len(gen.calls) == 1
    assert tool_results(result["messages"]) == [("c1", "Not run: the run was stopped (needs_a_human).", True)]
    assert dangling_free(result["messages"])


async def test_without_pending_tool_recovery_a_stopped_call_is_left_to_the_application() -> None:
    box = ToolBox()

    def stop_before_acting(event: HookEvent) -> None:
        event.stop("app_handles_it")

    agent, _ = agent_with(
        box,
        [asks(call("delete", "c1", target="a.log"))],
        hooks={"after_llm": [stop_before_acting]},
        enable_pending_tool_recovery=False,
    )

    result = await agent.run_async([USER])

    assert result["exit_reason"] == "app_handles_it"
    assert result["messages"][-1].tool_calls[0].id == "c1"
    assert not dangling_free(result["messages"])
    assert box.executed == []


async def test_without_pending_tool_recovery_a_dangling_call_reaches_the_model_as_it_is() -> None:
    box = ToolBox()
    dangling = asks(call("delete", "old", target="x"))
    for recovery, expected_tool_messages in ((True, 1), (False, 0)):
        gen = ScriptedChatGenerator([says("ok")])
        agent = Agent(gen, tools=[box.make("delete")], enable_pending_tool_recovery=recovery)

        await agent.run_async([USER, dangling, ChatMessage.from_user("and now?")])

        sent = gen.calls[0]["messages"]
        assert sum(m.role == ChatRole.TOOL for m in sent) == expected_tool_messages
    assert box.executed == []  # a dangling call is never executed


# --- before_tool ------------------------------------------------------------------------------------------


async def test_before_tool_changes_arguments_in_place_and_the_tool_runs_with_them() -> None:
    box = ToolBox()

    def sandbox(event: HookEvent) -> None:
        assert event.tool_call is not None and event.tool is not None
        event.tool_call.arguments["target"] = "/sandbox/" + event.tool_call.arguments["target"]

    agent, gen = agent_with(
        box, [asks(call("delete", "c1", target="a.log")), says("done")], hooks={"before_tool": [sandbox]}
    )

    result = await agent.run_async([USER])

    assert box.executed == [("delete", {"target": "/sandbox/a.log", "count": 1})]
    # The transcript (and so the model) shows the call that actually ran.
    assert gen.calls[1]["messages"][1].tool_calls[0].arguments == {"target": "/sandbox/a.log"}
    assert result["exit_reason"] == "text"


async def test_before_tool_may_not_rename_the_tool_or_set_a_result() -> None:
    def rename(event: HookEvent) -> None:
        assert event.tool_call is not None
        event.tool_call.tool_name = "lookup"

    agent, _ = agent_with(ToolBox(), [asks(call("delete", "c1", target="a"))], hooks={"before_tool": [rename]})
    with pytest.raises(HookError, match="only the arguments"):
        await agent.run_async([USER])

    def set_result(event: HookEvent) -> None:
        event.result = "fake"

    box = ToolBox()
    agent, _ = agent_with(box, [asks(call("delete", "c1", target="a"))], hooks={"before_tool": [set_result]})
    with pytest.raises(AttributeError, match="cannot change 'result' at before_tool"):
        await agent.run_async([USER])
    assert box.executed == []


async def test_user_hooks_run_before_the_confirmation_hook_so_people_approve_what_will_run() -> None:
    box = ToolBox()
    order: list[str] = []

    def sandbox(event: HookEvent) -> None:
        order.append("user")
        assert event.tool_call is not None
        event.tool_call.arguments["target"] = "safe.log"

    confirmation = ConfirmationHook({"delete": BreakpointConfirmationStrategy()})
    # Registered first, the ConfirmationHook still runs last.
    agent, _ = agent_with(
        box, [asks(call("delete", "c1", target="/etc/passwd"))], hooks={"before_tool": [confirmation, sandbox]}
    )
    assert agent.hooks["before_tool"] == [sandbox, confirmation]

    with pytest.raises(HITLBreakpointException) as pause:
        await agent.run_async([USER])

    assert order == ["user"]
    assert pause.value.pending_tool_calls[0].arguments == {"target": "safe.log"}
    assert box.executed == []


async def test_before_tool_stop_keeps_the_call_from_running_and_ends_after_the_step() -> None:
    box = ToolBox()

    def guard(event: HookEvent) -> None:
        assert event.tool_call is not None
        if event.tool_call.tool_name == "delete":
            event.stop("dangerous_call")

    agent, gen = agent_with(
        box,
        [asks(call("lookup", "c1", target="disk"), call("delete", "c2", target="a"), call("lookup", "c3", target="b"))],
        hooks={"before_tool": [guard]},
    )

    result = await agent.run_async([USER])

    assert result["exit_reason"] == "dangerous_call"
    assert box.names() == ["lookup"]  # the call before the stop runs; the stopped one and the rest do not
    assert len(gen.calls) == 1
    results = dict((i, (r, e)) for i, r, e in tool_results(result["messages"]))
    assert results["c2"] == ("Not run: the run was stopped (dangerous_call).", True)
    assert results["c3"] == ("Not run: the run was stopped (dangerous_call).", True)
    assert dangling_free(result["messages"])


async def test_a_user_hook_can_ask_for_approval_before_a_call() -> None:
    box = ToolBox()

    def ask_for_deletes(event: HookEvent) -> None:
        assert event.tool_call is not None
        if event.tool_call.tool_name == "delete":
            event.request_approval("deletes need a human")

    agent, _ = agent_with(
        box,
        [asks(call("delete", "c1", target="a"), call("lookup", "c2", target="b")), says("done")],
        hooks={"before_tool": [ask_for_deletes]},
    )

    with pytest.raises(HITLBreakpointException) as pause:
        await agent.run_async([USER])
    assert [c.id for c in pause.value.pending_tool_calls] == ["c1"]
    assert box.executed == []

    snapshot = pause.value.snapshot
    assert snapshot is not None
    decision = approve(snapshot.pending_tool_calls[0])
    result = await agent.run_async([], snapshot=snapshot, tool_execution_decisions=[decision])
    assert box.names() == ["delete", "lookup"]
    assert result["exit_reason"] == "text"


# --- after_tool -------------------------------------------------------------------------------------------


async def test_after_tool_changes_the_result_the_model_sees() -> None:
    box = ToolBox()
    agent, gen = agent_with(
        box, [asks(call("lookup", "c1", target="disk")), says("ok")], hooks={"after_tool": [hook_kit.shout_result]}
    )

    result = await agent.run_async([USER])

    assert tool_results(result["messages"]) == [("c1", "LOOKUP DONE ON DISK X1", False)]
    assert gen.calls[1]["messages"][-1].tool_call_result.result == "LOOKUP DONE ON DISK X1"


async def test_after_tool_may_not_change_the_arguments_or_give_a_non_text_result() -> None:
    box = ToolBox()

    def rewrite_call(event: HookEvent) -> None:
        assert event.tool_call is not None
        event.tool_call.arguments["target"] = "elsewhere"

    agent, _ = agent_with(
        box, [asks(call("lookup", "c1", target="disk")), says("ok")], hooks={"after_tool": [rewrite_call]}
    )
    result = await agent.run_async([USER])
    assert result["messages"][1].tool_calls[0].arguments == {"target": "disk"}

    def number(event: HookEvent) -> None:
        event.result = 42  # type: ignore[assignment]

    agent, _ = agent_with(box, [asks(call("lookup", "c1", target="disk"))], hooks={"after_tool": [number]})
    with pytest.raises(TypeError, match="must be a str"):
        await agent.run_async([USER])


async def test_after_tool_stop_keeps_the_results_and_ends_the_run() -> None:
    box = ToolBox()

    def enough(event: HookEvent) -> None:
        event.stop("found_it")

    agent, gen = agent_with(
        box, [asks(call("lookup", "c1", target="disk")), says("never")], hooks={"after_tool": [enough]}
    )

    result = await agent.run_async([USER])

    assert result["exit_reason"] == "found_it"
    assert tool_results(result["messages"]) == [("c1", "lookup done on disk x1", False)]
    assert len(gen.calls) == 1


async def test_stop_run_state_key_ends_the_run_too() -> None:
    agent, gen = agent_with(
        ToolBox(),
        [asks(call("lookup", "c1", target="disk")), says("never")],
        hooks={"after_tool": [hook_kit.stop_on_budget]},
    )

    result = await agent.run_async([USER])

    assert result["exit_reason"] == "budget"
    assert len(gen.calls) == 1


# --- review after acting (agent level) ------------------------------------------------------------------


async def review_pause(box: ToolBox) -> tuple[Agent, ScriptedChatGenerator, AgentSnapshot]:
    agent, gen = agent_with(
        box,
        [asks(call("lookup", "c1", target="disk"), call("delete", "c2", target="a")), says("done")],
        hooks={"after_tool": [hook_kit.review_everything]},
    )
    with pytest.raises(HITLBreakpointException) as pause:
        await agent.run_async([USER])
    assert pause.value.snapshot is not None
    return agent, gen, pause.value.snapshot


@pytest.mark.parametrize(
    ("reviews", "expected"),
    [
        (
            [("approve", None, None), ("approve", None, None)],
            [("c1", "lookup done on disk x1", False), ("c2", "delete done on a x1", False)],
        ),
        (
            [("edit", "disk is fine", None), ("approve", None, None)],
            [("c1", "disk is fine", False), ("c2", "delete done on a x1", False)],
        ),
        (
            [("approve", None, None), ("reject", None, "wrong file")],
            [
                ("c1", "lookup done on disk x1", False),
                ("c2", "The result of tool 'delete' was rejected by a reviewer. Reviewer feedback: wrong file", True),
            ],
        ),
        (
            [("expire", None, None), ("expire", None, None)],
            [("c1", REVIEW_EXPIRED_RESULT, True), ("c2", REVIEW_EXPIRED_RESULT, True)],
        ),
    ],
)
async def test_a_reviewed_result_reaches_the_model_as_the_reviewer_decided(
    reviews: list[tuple[str, str | None, str | None]], expected: list[tuple[str, str, bool]]
) -> None:
    box = ToolBox()
    agent, gen, snapshot = await review_pause(box)
    assert snapshot.stage == "review"
    assert [c.id for c in snapshot.pending_tool_calls] == ["c1", "c2"]
    assert box.names() == ["lookup", "delete"]
    assert len(gen.calls) == 1  # the model has not seen the results

    restored = AgentSnapshot.from_json(snapshot.to_json())
    decisions = [
        ToolResultReview(c.tool_name, c.id, action, result=text, feedback=feedback)
        for c, (action, text, feedback) in zip(restored.pending_tool_calls, reviews, strict=True)
    ]
    result = await agent.run_async([], snapshot=restored, tool_result_reviews=decisions)

    assert tool_results(result["messages"]) == expected
    assert gen.calls[1]["messages"][-2:] == result["messages"][-3:-1]
    assert box.names() == ["lookup", "delete"]  # resuming a review never runs a tool again
    assert result["exit_reason"] == "text"


async def test_a_review_pause_refuses_a_resume_without_every_review() -> None:
    box = ToolBox()
    agent, _, snapshot = await review_pause(box)

    with pytest.raises(ValueError, match="No decision for tool call"):
        await agent.run_async([], snapshot=snapshot, tool_result_reviews=[ToolResultReview("lookup", "c1", "approve")])
    with pytest.raises(ValueError, match="need a snapshot"):
        await agent.run_async([USER], tool_result_reviews=[ToolResultReview("lookup", "c1", "approve")])
    assert box.names() == ["lookup", "delete"]

    paused = Agent(
        ScriptedChatGenerator([asks(call("delete", "c1", target="x"))]),
        tools=[box.make("delete")],
        confirmation_strategies={"delete": BreakpointConfirmationStrategy()},
    )
    with pytest.raises(HITLBreakpointException) as before:
        await paused.run_async([USER])
    assert before.value.snapshot is not None
    with pytest.raises(ValueError, match="apply only to a step paused for review"):
        await paused.run_async(
            [], snapshot=before.value.snapshot, tool_result_reviews=[ToolResultReview("delete", "c1", "approve")]
        )


# --- on_finish --------------------------------------------------------------------------------------------


async def test_on_finish_runs_at_every_end_and_never_at_a_pause() -> None:
    ends: list[str | None] = []

    def note(event: HookEvent) -> None:
        ends.append(event.exit_reason)

    box = ToolBox()
    hooks: dict[str, list[Any]] = {"on_finish": [note]}
    await agent_with(box, [says("hi")], hooks=hooks)[0].run_async([USER])
    gen = ScriptedChatGenerator([asks(call("submit", "c1", target="x"))])
    await Agent(gen, tools=[box.make("submit")], exit_conditions=["submit"], hooks=hooks).run_async([USER])
    gen = ScriptedChatGenerator([asks(call("lookup", "c1", target="x"))] * 2)
    await Agent(gen, tools=[box.make("lookup")], max_agent_steps=2, hooks=hooks).run_async([USER])
    await agent_with(box, [says("hi")], hooks={**hooks, "before_llm": [hook_kit.stop_on_budget]})[0].run_async([USER])
    await agent_with(box, [], hooks=hooks)[0].run_async([])
    paused = Agent(
        ScriptedChatGenerator([asks(call("delete", "c1", target="x"))]),
        tools=[box.make("delete")],
        confirmation_strategies={"delete": BreakpointConfirmationStrategy()},
        hooks=hooks,
    )
    with pytest.raises(HITLBreakpointException):
        await paused.run_async([USER])

    assert ends == ["text", "submit", "max_agent_steps", "budget", "no_input"]


async def test_on_finish_stop_renames_the_end() -> None:
    def relabel(event: HookEvent) -> None:
        if event.exit_reason == "text":
            event.stop("answered")

    result = await agent_with(ToolBox(), [says("hi")], hooks={"on_finish": [relabel]})[0].run_async([USER])

    assert result["exit_reason"] == "answered"


# --- the ConfirmationHook and registration --------------------------------------------------------------


@pytest.mark.parametrize("point", ["before_llm", "after_llm", "after_tool", "on_finish"])
def test_a_confirmation_hook_anywhere_but_before_tool_is_refused_when_the_agent_is_built(point: str) -> None:
    hook = ConfirmationHook({"delete": BreakpointConfirmationStrategy()})
    with pytest.raises(ValueError, match="ConfirmationHook can only be registered at 'before_tool'"):
        agent_with(ToolBox(), [], hooks={point: [hook]})


def test_two_ways_of_confirming_and_unknown_points_are_refused() -> None:
    hook = ConfirmationHook({"delete": BreakpointConfirmationStrategy()})
    with pytest.raises(ValueError, match="not both"):
        agent_with(
            ToolBox(),
            [],
            hooks={"before_tool": [hook]},
            confirmation_strategies={"delete": BreakpointConfirmationStrategy()},
        )
    with pytest.raises(ValueError, match="Only one ConfirmationHook"):
        agent_with(ToolBox(), [], hooks={"before_tool": [hook, ConfirmationHook({})]})
    with pytest.raises(ValueError, match="Unknown hook point 'after_everything'"):
        agent_with(ToolBox(), [], hooks={"after_everything": [hook_kit.record_point]})
    with pytest.raises(ValueError, match="names unknown tool .nope."):
        agent_with(ToolBox(), [], hooks={"before_tool": [ConfirmationHook({"nope": BreakpointConfirmationStrategy()})]})


def test_confirmation_strategies_is_the_shorthand_for_a_confirmation_hook() -> None:
    strategy = BreakpointConfirmationStrategy()
    agent, _ = agent_with(ToolBox(), [], confirmation_strategies={"delete": strategy})

    (hook,) = agent.hooks["before_tool"]
    assert isinstance(hook, ConfirmationHook)
    assert hook.confirmation_strategies == {"delete": strategy}


# --- serialisation --------------------------------------------------------------------------------------


def test_hooks_survive_to_dict_and_from_dict_as_importable_callables() -> None:
    gen = ScriptedChatGenerator([])
    from tests.fakes.agent_kit import delete_file, lookup_weather

    agent = Agent(
        gen,
        tools=[lookup_weather, delete_file],
        hooks={
            "before_llm": [hook_kit.record_point],
            "after_tool": [hook_kit.shout_result, hook_kit.review_everything],
            "before_tool": [
                ConfirmationHook({"delete_file": BreakpointConfirmationStrategy(confirmation_policy=NeverAskPolicy())})
            ],
        },
        enable_pending_tool_recovery=False,
    )

    data = json.loads(json.dumps(agent.to_dict()))
    params = data["init_parameters"]
    assert params["hooks"]["before_llm"] == ["tests.fakes.hook_kit.record_point"]
    assert params["hooks"]["after_tool"] == [
        "tests.fakes.hook_kit.shout_result",
        "tests.fakes.hook_kit.review_everything",
    ]
    assert params["hooks"]["before_tool"][0]["type"] == "bot.hooks.confirmation.ConfirmationHook"
    assert params["enable_pending_tool_recovery"] is False

    restored = Agent.from_dict(data)

    assert restored.hooks["before_llm"] == [hook_kit.record_point]
    assert restored.hooks["after_tool"] == [hook_kit.shout_result, hook_kit.review_everything]
    (confirmation,) = restored.hooks["before_tool"]
    assert isinstance(confirmation, ConfirmationHook)
    assert isinstance(confirmation.confirmation_strategies["delete_file"].confirmation_policy, NeverAskPolicy)
    assert restored.enable_pending_tool_recovery is False
    assert restored.to_dict() == data


def test_the_shorthand_serialises_as_confirmation_strategies_not_as_a_hook() -> None:
    from tests.fakes.agent_kit import delete_file

    agent = Agent(
        ScriptedChatGenerator([]),
        tools=[delete_file],
        confirmation_strategies={"delete_file": BreakpointConfirmationStrategy()},
    )

    params = agent.to_dict()["init_parameters"]

    assert params["hooks"] == {}
    assert Agent.from_dict(agent.to_dict()).to_dict() == agent.to_dict()


def test_a_hook_that_cannot_be_imported_back_is_refused_at_to_dict() -> None:
    agent, _ = agent_with(ToolBox(), [], hooks={"before_llm": [lambda event: None]})

    with pytest.raises(ValueError, match="cannot be serialised"):
        agent.to_dict()


async def test_hooks_survive_a_snapshot_resumed_by_an_agent_rebuilt_from_its_dict() -> None:
    from tests.fakes.agent_kit import delete_file

    hook_kit.SEEN.clear()
    agent = Agent(
        ScriptedChatGenerator([asks(call("delete_file", "c1", path="a.txt")), says("done")]),
        tools=[delete_file],
        confirmation_strategies={"delete_file": BreakpointConfirmationStrategy()},
        hooks={"after_tool": [hook_kit.shout_result], "on_finish": [hook_kit.record_point]},
    )
    with pytest.raises(HITLBreakpointException) as pause:
        await agent.run_async([USER])
    assert pause.value.snapshot is not None
    stored = pause.value.snapshot.to_json()

    data = agent.to_dict()
    data["init_parameters"]["chat_generator"]["init_parameters"]["replies"] = [says("done").to_dict()]
    rebuilt = Agent.from_dict(data)
    snapshot = AgentSnapshot.from_json(stored)
    decision = approve(snapshot.pending_tool_calls[0])
    result = await rebuilt.run_async([], snapshot=snapshot, tool_execution_decisions=[decision])

    assert tool_results(result["messages"]) == [("c1", "DELETED A.TXT", False)]
    assert [("on_finish", snapshot.run_id)] == hook_kit.SEEN
