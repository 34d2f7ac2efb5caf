"""The agent loop: why a run ends, what it counts, and how it treats tool failures."""

from __future__ import annotations

import logging

import pytest

from bot.agent import Agent
from bot.hitl.dataclasses import ConfirmationUIResult
from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ChatRole
from bot.redaction import MASK
from bot.tools import ToolInvocationError, tool
from tests.fakes.agent_kit import ToolBox, asks, blocking, call, dangling_free, says

USER = ChatMessage.from_user("please help")


def tool_messages(result: dict) -> list[ChatMessage]:
    return [m for m in result["messages"] if m.role == ChatRole.TOOL]


# --- exit reasons ----------------------------------------------------------------------------------


async def test_a_text_reply_without_tool_calls_ends_the_run_with_exit_reason_text() -> None:
    gen = ScriptedChatGenerator([says("Hello!")])

    result = await Agent(gen).run_async([USER])

    assert result["exit_reason"] == "text"
    assert result["step_count"] == 1
    assert result["last_message"].text == "Hello!"
    assert [m.role for m in result["messages"]] == [ChatRole.USER, ChatRole.ASSISTANT]


@pytest.mark.parametrize("reason", ["length", "content_filter"])
async def test_a_cut_off_text_reply_ends_the_run_with_its_finish_reason_and_is_kept(reason: str) -> None:
    gen = ScriptedChatGenerator([says("The answer is fort", finish_reason=reason), says("never reached")])

    result = await Agent(gen).run_async([USER])

    assert result["exit_reason"] == reason
    assert result["last_message"].text == "The answer is fort"
    assert gen.remaining == 1


@pytest.mark.parametrize("reason", ["length", "content_filter"])
async def test_a_cut_off_reply_with_tool_calls_runs_none_and_closes_each_call_with_an_error(reason: str) -> None:
    box = ToolBox()
    restart = box.make("restart")
    calls = [call("restart", "c1", target="web"), call("restart", "c2", target="db")]
    gen = ScriptedChatGenerator([asks(*calls, finish_reason=reason)])

    result = await Agent(gen, tools=[restart]).run_async([USER])

    assert result["exit_reason"] == reason
    assert box.executed == []
    assert result["tool_call_counts"] == {}
    results = tool_messages(result)
    assert [m.tool_call_result.origin.id for m in results] == ["c1", "c2"]
    assert all(m.tool_call_result.error for m in results)
    assert all(f"finish_reason={reason}" in m.tool_call_result.result for m in results)
    assert dangling_free(result["messages"])


async def test_a_cut_off_empty_reply_ends_the_run_with_its_finish_reason() -> None:
    gen = ScriptedChatGenerator([says(None, finish_reason="content_filter")])

    result = await Agent(gen).run_async([USER])

    assert result["exit_reason"] == "content_filter"


@pytest.mark.parametrize("empty_text", [None, "", "   \n"])
async def test_one_empty_assistant_reply_is_retried_once(empty_text: str | None) -> None:
    gen = ScriptedChatGenerator([says(empty_text), says("Here you go.")])

    result = await Agent(gen).run_async([USER])

    assert result["exit_reason"] == "text"
    assert result["step_count"] == 2
    assert result["last_message"].text == "Here you go."
    assert len(gen.calls) == 2


async def test_two_empty_replies_in_a_row_end_the_run_with_exit_reason_empty() -> None:
    gen = ScriptedChatGenerator([says(None) for _ in range(100)])

    result = await Agent(gen).run_async([USER])

    assert result["exit_reason"] == "empty"
    assert len(gen.calls) == 2
    assert result["step_count"] == 2
    assert [m.role for m in result["messages"]] == [ChatRole.USER]


async def test_a_generator_that_returns_no_replies_at_all_is_asked_twice_then_the_run_ends() -> None:
    replies: list[int] = []

    class NoReplies:
        """A generator whose server sent no choices: it answers with no replies at all."""

        async def run_async(self, **kwargs: object) -> dict:
            replies.append(1)
            return {"replies": []}

    result = await Agent(NoReplies()).run_async([USER])

    assert result["exit_reason"] == "empty"
    assert len(replies) == 2


async def test_an_empty_reply_after_a_tool_step_gets_its_own_retry() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator(
        [says(None), asks(call("poll", "c1", target="queue")), says(""), says("Queue is empty.")]
    )

    result = await Agent(gen, tools=[box.make("poll")]).run_async([USER])

    assert result["exit_reason"] == "text"
    assert box.names() == ["poll"]
    assert result["last_message"].text == "Queue is empty."


async def test_a_successful_exit_condition_tool_ends_the_run_with_its_name() -> None:
    box = ToolBox()
    submit = box.make("submit")
    gen = ScriptedChatGenerator([asks(call("submit", "c1", target="42"))])

    result = await Agent(gen, tools=[submit], exit_conditions=["submit"]).run_async([USER])

    assert result["exit_reason"] == "submit"
    assert box.names() == ["submit"]
    assert result["last_message"].tool_call_result.result == "submit done on 42 x1"
    assert gen.remaining == 0  # the LLM was not asked again


async def test_a_text_reply_ends_the_run_even_when_only_tools_are_exit_conditions() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([says("Let me think."), asks(call("submit", "c1", target="42"))])

    result = await Agent(gen, tools=[box.make("submit")], exit_conditions=["submit"]).run_async([USER])

    assert result["exit_reason"] == "text"
    assert result["step_count"] == 1
    assert result["last_message"].text == "Let me think."
    assert gen.remaining == 1  # the model was not sent back for another round
    assert box.executed == []


async def test_the_first_exit_condition_call_in_call_order_decides_the_exit() -> None:
    box = ToolBox()
    tools = [box.make("submit"), box.make("abort"), box.make("note")]
    gen = ScriptedChatGenerator(
        [asks(call("note", "c0", target="x"), call("abort", "c1", target="a"), call("submit", "c2", target="s"))]
    )

    result = await Agent(gen, tools=tools, exit_conditions=["submit", "abort"]).run_async([USER])

    assert result["exit_reason"] == "abort"
    assert sorted(box.names()) == ["abort", "note", "submit"]


async def test_an_errored_exit_tool_cancels_the_exit_even_when_a_later_exit_tool_succeeds() -> None:
    box = ToolBox()
    tools = [box.failing("abort"), box.make("submit")]
    gen = ScriptedChatGenerator(
        [asks(call("abort", "c1", target="a"), call("submit", "c2", target="s")), says("I could not abort.")]
    )

    result = await Agent(gen, tools=tools, exit_conditions=["text", "abort", "submit"]).run_async([USER])

    assert result["exit_reason"] == "text"
    assert result["step_count"] == 2


async def test_a_rejected_exit_tool_cancels_the_exit_and_is_not_executed() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(call("submit", "c1", target="42")), says("OK, not submitting.")])
    agent = Agent(
        gen,
        tools=[box.make("submit")],
        exit_conditions=["text", "submit"],
        confirmation_strategies={"submit": blocking(ConfirmationUIResult(action="reject"))},
    )

    result = await agent.run_async([USER])

    assert result["exit_reason"] == "text"
    assert box.executed == []


async def test_the_run_stops_at_max_agent_steps_with_a_logged_warning(caplog: pytest.LogCaptureFixture) -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(call("poll", f"c{i}", target="queue")) for i in range(5)])
    agent = Agent(gen, tools=[box.make("poll")], max_agent_steps=3)

    with caplog.at_level(logging.WARNING, logger="bot.agent"):
        result = await agent.run_async([USER])

    assert result["exit_reason"] == "max_agent_steps"
    assert result["step_count"] == 3
    assert box.names() == ["poll"] * 3
    assert gen.remaining == 2
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("Agent reached maximum agent steps of 3, stopping." in r.getMessage() for r in warnings)


def test_negative_max_agent_steps_are_refused() -> None:
    with pytest.raises(ValueError, match="max_agent_steps"):
        Agent(ScriptedChatGenerator([]), max_agent_steps=-1)


def test_an_exit_condition_naming_an_unknown_tool_is_refused() -> None:
    with pytest.raises(ValueError, match="submit"):
        Agent(ScriptedChatGenerator([]), exit_conditions=["text", "submit"])


# --- counters ----------------------------------------------------------------------------------------


async def test_token_usage_sums_the_usage_of_every_reply() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator(
        [
            asks(
                call("lookup", "c1", target="x"),
                usage={"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            ),
            says("done", usage={"prompt_tokens": 30, "completion_tokens": 7, "total_tokens": 37}),
        ]
    )

    result = await Agent(gen, tools=[box.make("lookup")]).run_async([USER])

    assert result["token_usage"] == {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52}


async def test_tool_call_counts_count_executed_failed_and_unknown_calls_but_not_rejected_ones() -> None:
    box = ToolBox()
    tools = [box.make("lookup"), box.failing("broken"), box.make("delete")]
    gen = ScriptedChatGenerator(
        [
            asks(
                call("lookup", "c1", target="a"),
                call("lookup", "c2", target="b"),
                call("broken", "c3", target="c"),
                call("nonexistent", "c4", target="d"),
                call("delete", "c5", target="e"),
            ),
            says("done"),
        ]
    )
    agent = Agent(gen, tools=tools, confirmation_strategies={"delete": blocking(ConfirmationUIResult(action="reject"))})

    result = await agent.run_async([USER])

    assert result["tool_call_counts"] == {"lookup": 2, "broken": 1, "nonexistent": 1}
    assert "delete" not in box.names()


# --- tool failures -----------------------------------------------------------------------------------


async def test_a_failing_tool_becomes_an_error_tool_message_the_llm_sees() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(call("broken", "c1", target="disk")), says("Sorry, it failed.")])

    result = await Agent(gen, tools=[box.failing("broken", "disk on fire")]).run_async([USER])

    (failure,) = tool_messages(result)
    assert failure.tool_call_result.error is True
    assert failure.tool_call_result.result == "Error invoking tool 'broken': RuntimeError: disk on fire"
    assert gen.calls[1]["messages"][-1].tool_call_result.result == failure.tool_call_result.result
    assert result["exit_reason"] == "text"


async def test_raise_on_tool_invocation_failure_raises_instead_of_reporting() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(call("broken", "c1", target="disk")), says("unreachable")])
    agent = Agent(gen, tools=[box.failing("broken")], raise_on_tool_invocation_failure=True)

    with pytest.raises(ToolInvocationError, match="disk on fire") as info:
        await agent.run_async([USER])

    assert info.value.tool_name == "broken"
    assert gen.remaining == 1


async def test_an_unknown_tool_gets_a_not_found_result_listing_the_available_tools() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(call("launch_rocket", "c1", target="moon")), says("ok")])

    result = await Agent(gen, tools=[box.make("lookup"), box.make("delete")]).run_async([USER])

    (missing,) = tool_messages(result)
    assert missing.tool_call_result.error is True
    assert missing.tool_call_result.result == "Tool 'launch_rocket' not found. Available tools: delete, lookup"


async def test_a_tool_error_never_echoes_a_secret_argument_value() -> None:
    secret = "xoxb-1234-very-secret"

    @tool
    def call_api(endpoint: str, api_token: str) -> str:
        """Call an API.

        :param endpoint: The endpoint.
        :param api_token: The credential.
        """
        raise PermissionError(f"token {api_token} rejected by {endpoint}")

    gen = ScriptedChatGenerator(
        [asks(call("call_api", "c1", endpoint="/deploy", api_token=secret)), says("It was refused.")]
    )

    result = await Agent(gen, tools=[call_api]).run_async([USER])

    (failure,) = tool_messages(result)
    assert secret not in failure.tool_call_result.result
    assert (
        failure.tool_call_result.result
        == f"Error invoking tool 'call_api': PermissionError: token {MASK} rejected by /deploy"
    )
    assert all(
        secret not in (m.tool_call_result.result if m.tool_call_result else "") for m in gen.calls[1]["messages"]
    )


async def test_invalid_arguments_are_refused_with_an_error_result_and_the_tool_does_not_run() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([asks(call("restart", "c1", target="web", count="many")), says("oops")])

    result = await Agent(gen, tools=[box.make("restart")]).run_async([USER])

    (refused,) = tool_messages(result)
    assert box.executed == []
    assert refused.tool_call_result.error is True
    assert "Invalid parameters for tool 'restart'" in refused.tool_call_result.result
    assert "count" in refused.tool_call_result.result


async def test_an_invalid_secret_argument_is_not_echoed_in_the_refusal() -> None:
    @tool
    def login(user: str, password: int) -> str:
        """Log in.

        :param user: Who.
        :param password: A numeric PIN.
        """
        return "in"

    gen = ScriptedChatGenerator([asks(call("login", "c1", user="ana", password="hunter22")), says("no")])

    result = await Agent(gen, tools=[login]).run_async([USER])

    (refused,) = tool_messages(result)
    assert refused.tool_call_result.error is True
    assert "hunter22" not in refused.tool_call_result.result


# --- run / run_async ----------------------------------------------------------------------------------


def _script() -> list[ChatMessage]:
    return [
        asks(call("lookup", "c1", target="a"), call("broken", "c2", target="b"), usage={"total_tokens": 3}),
        says("All done.", usage={"total_tokens": 4}),
    ]


def _shape(result: dict) -> list:
    messages = [
        (m.role, m.text, [c.id for c in m.tool_calls], m.tool_call_result and m.tool_call_result.result)
        for m in result["messages"]
    ]
    return [messages, result["exit_reason"], result["step_count"], result["token_usage"], result["tool_call_counts"]]


async def test_run_and_run_async_give_the_same_result() -> None:
    sync_box, async_box = ToolBox(), ToolBox()
    sync_agent = Agent(ScriptedChatGenerator(_script()), tools=[sync_box.make("lookup"), sync_box.failing("broken")])
    async_agent = Agent(ScriptedChatGenerator(_script()), tools=[async_box.make("lookup"), async_box.failing("broken")])

    # Called from a coroutine: run() must not trip over the running loop.
    from_sync = sync_agent.run([USER])
    from_async = await async_agent.run_async([USER])

    assert _shape(from_sync) == _shape(from_async)
    assert sorted(sync_box.names()) == sorted(async_box.names()) == ["broken", "lookup"]


def test_run_works_without_a_running_event_loop() -> None:
    result = Agent(ScriptedChatGenerator([says("hi")])).run([USER])

    assert result["exit_reason"] == "text"


# --- state -------------------------------------------------------------------------------------------


@tool(outputs_to_state={"documents": {"source": "docs"}, "last_city": {"source": "city"}})
def fetch_docs(city: str) -> dict:
    """Fetch documents about a city.

    :param city: The city.
    """
    return {"docs": [f"{city}-1", f"{city}-2"], "city": city}


@tool(inputs_from_state={"documents": "docs"})
def count_docs(kind: str, docs: list) -> str:
    """Count the documents gathered so far.

    :param kind: What to count.
    """
    return f"{len(docs)} {kind}"


async def test_tools_share_the_run_state_through_inputs_from_state_and_outputs_to_state() -> None:
    gen = ScriptedChatGenerator(
        [asks(call("fetch_docs", "c1", city="Oslo")), asks(call("count_docs", "c2", kind="documents")), says("3")]
    )
    agent = Agent(
        gen,
        tools=[fetch_docs, count_docs],
        state_schema={"documents": {"type": list}, "last_city": {"type": str}},
    )

    result = await agent.run_async([USER], documents=["seed"])

    assert "docs" not in count_docs.parameters["properties"]  # the LLM never sees state-fed params
    assert result["documents"] == ["seed", "Oslo-1", "Oslo-2"]
    assert result["last_city"] == "Oslo"
    assert tool_messages(result)[1].tool_call_result.result == "3 documents"


async def test_an_output_handler_decides_how_a_result_merges_into_the_state() -> None:
    @tool(outputs_to_state={"total": {"handler": lambda old, new: (old or 0) + new}})
    def add(amount: int) -> int:
        """Add to the total.

        :param amount: How much.
        """
        return amount

    gen = ScriptedChatGenerator([asks(call("add", "c1", amount=2), call("add", "c2", amount=5)), says("7")])

    result = await Agent(gen, tools=[add], state_schema={"total": {"type": int}}).run_async([USER])

    assert result["total"] == 7


@pytest.mark.parametrize("key", ["step_count", "token_usage", "tool_call_counts", "exit_reason"])
def test_a_state_schema_may_not_redefine_a_reserved_key(key: str) -> None:
    with pytest.raises(ValueError, match=key):
        Agent(ScriptedChatGenerator([]), state_schema={key: {"type": int}})


async def test_state_passed_to_run_must_be_declared_in_the_schema() -> None:
    agent = Agent(ScriptedChatGenerator([says("hi")]), state_schema={"documents": {"type": list}})

    with pytest.raises(ValueError, match="colour"):
        await agent.run_async([USER], colour="blue")


# --- prompts and tools offered -----------------------------------------------------------------------


async def test_the_system_prompt_goes_first_and_only_the_selected_tools_are_offered() -> None:
    box = ToolBox()
    gen = ScriptedChatGenerator([says("hi")])
    agent = Agent(gen, tools=[box.make("lookup"), box.make("delete")], system_prompt="Be brief.")

    await agent.run_async([USER], tools=["lookup"], generation_kwargs={"temperature": 0})

    sent = gen.calls[0]
    assert [(m.role, m.text) for m in sent["messages"]] == [
        (ChatRole.SYSTEM, "Be brief."),
        (ChatRole.USER, "please help"),
    ]
    assert sent["tools"] == ["lookup"]
    assert sent["generation_kwargs"] == {"temperature": 0}
