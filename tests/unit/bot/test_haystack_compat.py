"""Haystack users' code runs unchanged (issue 18): one test group per incompatibility that was fixed.

The tests follow Haystack 2.x's own unit tests for the Agent and the human-in-the-loop package (same
inputs, same assertions, same error and warning texts), with the module names changed to ``bot.*``.
Generators written the Haystack way (``run(messages)``, ``run(messages, tools=None)``) are real classes
here, as a Haystack user would write them: test data, not mocks of our code.
"""

from __future__ import annotations

import asyncio
import io
import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from bot.agent import Agent, SnapshotError
from bot.hitl import (
    AlwaysAskPolicy,
    AskOncePolicy,
    BlockingConfirmationStrategy,
    BreakpointConfirmationStrategy,
    ConfirmationUIResult,
    HITLBreakpointException,
    NeverAskPolicy,
    RichConsoleUI,
    SimpleConsoleUI,
    ToolExecutionDecision,
)
from bot.hitl.serialization import component_from_dict
from bot.llm import ScriptedChatGenerator
from bot.llm.base import StreamingChunk
from bot.messages import ChatMessage, ChatRole, ToolCall
from bot.tools import Tool, tool
from storage.sqlite.messages import SQLiteChatMessageStore
from tests.fakes.agent_kit import ToolBox, approve, asks, call, says

USER = ChatMessage.from_user("What is the weather in Berlin?")


@tool
def weather_tool(location: str) -> str:
    """Tell the weather at a location.

    :param location: Where.
    """
    return f"sunny in {location}"


class TextOnlyGenerator:
    """A Haystack-style generator whose ``run`` takes only the messages (it knows nothing of tools)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def run(self, messages: list[ChatMessage]) -> dict[str, list[ChatMessage]]:
        """Answer with one text reply."""
        self.calls.append({"messages": list(messages)})
        return {"replies": [ChatMessage.from_assistant("Hello from a text generator")]}


class ToolsOnlyGenerator:
    """A Haystack-style generator with ``run(messages, tools=None)`` and no ``run_async``."""

    def __init__(self, *replies: ChatMessage) -> None:
        self.replies = list(replies)
        self.calls: list[dict[str, Any]] = []
        self.threads: list[int] = []

    def run(self, messages: list[ChatMessage], tools: list[Tool] | None = None) -> dict[str, list[ChatMessage]]:
        """Replay the next reply, recording what it was given and on which thread."""
        self.calls.append({"messages": list(messages), "tools": tools})
        self.threads.append(threading.get_ident())
        return {"replies": [self.replies.pop(0)]}


# --- 1. generator keywords ---------------------------------------------------------------------------


class TestGeneratorKeywords:
    def test_a_generator_without_tools_parameter_runs_when_the_agent_has_no_tools(self) -> None:
        generator = TextOnlyGenerator()

        result = Agent(chat_generator=generator).run([USER])

        assert result["last_message"].text == "Hello from a text generator"
        assert generator.calls == [{"messages": [USER]}]

    def test_tools_for_a_generator_that_cannot_take_them_are_refused_when_the_agent_is_built(self) -> None:
        with pytest.raises(TypeError, match="TextOnlyGenerator does not accept tools parameter in its run method"):
            Agent(chat_generator=TextOnlyGenerator(), tools=[weather_tool])

    def test_only_the_keywords_that_are_set_are_passed_and_empty_tools_are_an_empty_list(self) -> None:
        generator = ToolsOnlyGenerator(ChatMessage.from_assistant("hi"))

        Agent(chat_generator=generator).run([USER])

        assert generator.calls[0]["tools"] == []

    def test_the_agents_tools_reach_the_generator(self) -> None:
        generator = ToolsOnlyGenerator(ChatMessage.from_assistant("hi"))

        Agent(chat_generator=generator, tools=[weather_tool]).run([USER])

        assert [t.name for t in generator.calls[0]["tools"]] == ["weather_tool"]

    def test_run_async_falls_back_to_run_in_a_worker_thread(self) -> None:
        generator = ToolsOnlyGenerator(asks(call("weather_tool", "c1", location="Berlin")), says("Sunny."))
        agent = Agent(chat_generator=generator, tools=[weather_tool])

        async def main() -> tuple[dict[str, Any], int]:
            return await agent.run_async([USER]), threading.get_ident()

        result, loop_thread = asyncio.run(main())

        assert result["last_message"].text == "Sunny."
        assert result["messages"][2].tool_call_result.result == "sunny in Berlin"
        assert len(generator.threads) == 2
        assert loop_thread not in generator.threads

    def test_generation_kwargs_and_the_streaming_callback_are_passed_when_set(self) -> None:
        generator = ScriptedChatGenerator([says("Sunny.")])
        chunks: list[StreamingChunk] = []

        Agent(chat_generator=generator, streaming_callback=chunks.append).run(
            [USER], generation_kwargs={"temperature": 0}
        )

        assert generator.calls[0]["generation_kwargs"] == {"temperature": 0}
        assert [c.content for c in chunks] == ["Sunny."]


# --- 2. message equality -----------------------------------------------------------------------------


class TestMessageEquality:
    def test_messages_with_the_same_content_are_equal_and_keep_their_own_ids(self) -> None:
        first, second = ChatMessage.from_user("x"), ChatMessage.from_user("x")

        assert first == second
        assert first.meta["id"] != second.meta["id"]

    def test_content_roles_and_other_meta_still_count(self) -> None:
        assert ChatMessage.from_user("x") != ChatMessage.from_user("y")
        assert ChatMessage.from_user("x") != ChatMessage.from_system("x")
        assert ChatMessage.from_user("x", meta={"lang": "en"}) != ChatMessage.from_user("x", meta={"lang": "de"})
        origin = ToolCall(tool_name="weather_tool", arguments={"location": "Berlin"}, id="c1")
        assert ChatMessage.from_tool("sunny", origin) == ChatMessage.from_tool("sunny", origin)
        assert ChatMessage.from_tool("sunny", origin) != ChatMessage.from_tool("sunny", origin, error=True)

    def test_transcripts_compare_with_equals(self) -> None:
        agent = Agent(chat_generator=ScriptedChatGenerator([says("Sunny.")]))

        result = agent.run([ChatMessage.from_user("What is the weather in Berlin?")])

        assert result["messages"][0] == USER
        assert result["messages"] == [USER, ChatMessage.from_assistant("Sunny.", meta=result["messages"][1].meta)]

    def test_messages_stay_unhashable_like_haystacks(self) -> None:
        with pytest.raises(TypeError):
            hash(ChatMessage.from_user("x"))

    def test_the_store_still_keeps_equal_messages_apart_by_id(self, tmp_path: Path) -> None:
        store = SQLiteChatMessageStore(str(tmp_path / "history.db"))
        first, second = ChatMessage.from_user("again"), ChatMessage.from_user("again")

        assert store.write_messages("t1", [first, second]) == 2
        assert store.write_messages("t1", [first]) == 0  # idempotent by id, not by content

        assert [m.id for m in store.retrieve_messages("t1")] == [first.id, second.id]


# --- 3. tools at run time ----------------------------------------------------------------------------


class TestRunTimeTools:
    def test_a_new_tool_is_accepted_at_run_time(self) -> None:
        box = ToolBox()
        new_tool = box.make("restart")
        generator = ScriptedChatGenerator([asks(call("restart", "c1", target="nginx")), says("Restarted.")])
        agent = Agent(chat_generator=generator, tools=[weather_tool])

        result = agent.run([USER], tools=[new_tool])

        assert generator.calls[0]["tools"] == ["restart"]
        assert box.names() == ["restart"]
        assert result["last_message"].text == "Restarted."

    def test_names_select_among_the_agents_own_tools(self) -> None:
        box = ToolBox()
        generator = ScriptedChatGenerator([says("ok")])
        agent = Agent(chat_generator=generator, tools=[box.make("delete"), box.make("lookup")])

        agent.run([USER], tools=["lookup"])

        assert generator.calls[0]["tools"] == ["lookup"]

    def test_an_unknown_tool_name_is_refused(self) -> None:
        agent = Agent(chat_generator=ScriptedChatGenerator([says("ok")]), tools=[weather_tool])

        with pytest.raises(ValueError, match="The following tool names are not valid"):
            agent.run([USER], tools=["nope"])

    def test_names_need_tools_configured_at_initialization(self) -> None:
        agent = Agent(chat_generator=ScriptedChatGenerator([says("ok")]))

        with pytest.raises(ValueError, match="No tools were configured for the Agent at initialization."):
            agent.run([USER], tools=["weather_tool"])

    def test_a_snapshot_resumes_with_the_run_time_tools_it_was_paused_with(self) -> None:
        box = ToolBox()
        new_tool = box.make("restart")
        restart = call("restart", "c1", target="nginx")
        generator = ScriptedChatGenerator([asks(restart), says("Restarted.")])
        agent = Agent(
            chat_generator=generator,
            tools=[weather_tool],
            confirmation_strategies={"*": BreakpointConfirmationStrategy()},
        )
        with pytest.raises(HITLBreakpointException) as pause:
            agent.run([USER], tools=[new_tool])
        snapshot = pause.value.snapshot
        assert snapshot.tool_names == ["restart"]

        with pytest.raises(SnapshotError, match="pass them again"):
            agent.run([], snapshot=snapshot, tool_execution_decisions=[approve(restart)])
        result = agent.run([], snapshot=snapshot, tool_execution_decisions=[approve(restart)], tools=[new_tool])

        assert box.names() == ["restart"]
        assert result["exit_reason"] == "text"

    def test_a_tool_added_to_the_agent_does_not_strand_a_paused_run(self) -> None:
        box = ToolBox()
        delete = call("delete", "c1", target="old.log")
        strategies = {"delete": BreakpointConfirmationStrategy()}
        agent = Agent(
            ScriptedChatGenerator([asks(delete)]), tools=[box.make("delete")], confirmation_strategies=strategies
        )
        with pytest.raises(HITLBreakpointException) as pause:
            agent.run([USER])
        grown = Agent(
            ScriptedChatGenerator([says("Deleted.")]),
            tools=[box.make("delete"), box.make("lookup")],
            confirmation_strategies=strategies,
        )

        result = grown.run([], snapshot=pause.value.snapshot, tool_execution_decisions=[approve(delete)])

        assert box.names() == ["delete"]
        assert result["last_message"].text == "Deleted."

    @staticmethod
    def _paused_before_tool_names(box: ToolBox, delete: ToolCall) -> Any:
        """A snapshot as the release before ``tool_names`` wrote it: the fingerprint, and no tool names."""
        agent = Agent(
            ScriptedChatGenerator([asks(delete)]),
            tools=[box.make("delete")],
            confirmation_strategies={"delete": BreakpointConfirmationStrategy()},
        )
        with pytest.raises(HITLBreakpointException) as pause:
            agent.run([USER])
        data = pause.value.snapshot.to_dict()
        del data["tool_names"]
        return type(pause.value.snapshot).from_dict(data)

    def test_a_run_paused_before_tool_names_were_recorded_survives_tools_added_since(self) -> None:
        box = ToolBox()
        delete = call("delete", "c1", target="old.log")
        snapshot = self._paused_before_tool_names(box, delete)
        assert snapshot.tool_names is None
        grown = Agent(
            ScriptedChatGenerator([says("Deleted.")]),
            tools=[box.make("lookup"), box.make("delete"), box.make("remember")],
            confirmation_strategies={"delete": BreakpointConfirmationStrategy()},
        )

        result = grown.run([], snapshot=snapshot, tool_execution_decisions=[approve(delete)])

        assert box.names() == ["delete"]
        assert result["last_message"].text == "Deleted."

    def test_a_run_paused_before_tool_names_were_recorded_is_refused_when_its_tool_changed(self) -> None:
        box = ToolBox()
        delete = call("delete", "c1", target="old.log")
        snapshot = self._paused_before_tool_names(box, delete)

        @tool
        def delete_changed(target: str, force: bool) -> str:
            """Delete, now with a required flag.

            :param target: What to delete.
            :param force: Whether to force it.
            """
            return "deleted"

        changed = Tool(
            name="delete", description="Delete.", parameters=delete_changed.parameters, function=delete_changed.function
        )
        grown = Agent(ScriptedChatGenerator([says("Deleted.")]), tools=[changed, box.make("lookup")])

        with pytest.raises(SnapshotError, match="different tool set"):
            grown.run([], snapshot=snapshot, tool_execution_decisions=[approve(delete)])
        assert box.names() == []


# --- 4. console modify -------------------------------------------------------------------------------


def scripted_input(monkeypatch: pytest.MonkeyPatch, answers: list[str]) -> list[str]:
    """Feed ``builtins.input`` as Haystack's tests do; returns the list of prompts shown."""
    prompts: list[str] = []

    def fake_input(prompt: str = "") -> str:
        prompts.append(prompt)
        return answers.pop(0)

    monkeypatch.setattr("builtins.input", fake_input)
    return prompts


class TestSimpleConsoleUI:
    @pytest.mark.parametrize("choice", ["m", "modify", "M", "MODIFY"])
    def test_process_choice_modify(self, monkeypatch: pytest.MonkeyPatch, choice: str) -> None:
        scripted_input(monkeypatch, [choice, "new_value"])

        result = SimpleConsoleUI().get_user_confirmation("test_tool", "A test tool.", {"y": "abc"})

        assert result.action == "modify"
        assert result.new_tool_params == {"y": "new_value"}

    def test_process_choice_modify_dict_param_invalid_json(self, monkeypatch: pytest.MonkeyPatch) -> None:
        scripted_input(monkeypatch, ["m", "invalid_json", '{"key": "value"}'])

        result = SimpleConsoleUI().get_user_confirmation("test_tool", "", {"param1": {"old_key": "old_value"}})

        assert result.action == "modify"
        assert result.new_tool_params == {"param1": {"key": "value"}}

    def test_process_choice_no_tool_params_modify(self, monkeypatch: pytest.MonkeyPatch) -> None:
        prompts = scripted_input(monkeypatch, ["m"])

        result = SimpleConsoleUI().get_user_confirmation("test_tool", "A test tool.", {})

        assert result == ConfirmationUIResult(action="modify", new_tool_params={}, feedback=None)
        assert len(prompts) == 1

    def test_enter_alone_still_never_confirms(self, monkeypatch: pytest.MonkeyPatch) -> None:
        prompts = scripted_input(monkeypatch, ["", "y"])

        result = SimpleConsoleUI().get_user_confirmation("test_tool", "A test tool.", {"x": 1})

        assert result.action == "confirm"
        assert len(prompts) == 2


class TestRichConsoleUI:
    def test_process_choice_modify_returns_after_the_edits(self) -> None:
        answers = ["m", "2"]
        ui = RichConsoleUI(console=Console(file=io.StringIO()), input_func=lambda prompt: answers.pop(0))

        result = ui.get_user_confirmation("test_tool", "A test tool.", {"x": 1})

        assert result == ConfirmationUIResult(action="modify", new_tool_params={"x": 2}, feedback=None)
        assert answers == []

    def test_process_choice_no_tool_params_modify(self) -> None:
        ui = RichConsoleUI(console=Console(file=io.StringIO()), input_func=lambda prompt: "m")

        result = ui.get_user_confirmation("test_tool", "A test tool.", {})

        assert result == ConfirmationUIResult(action="modify", new_tool_params={}, feedback=None)


# --- 5. max_agent_steps=0 ----------------------------------------------------------------------------


def test_max_agent_steps_zero_ends_the_run_at_once(caplog: pytest.LogCaptureFixture) -> None:
    generator = ScriptedChatGenerator([says("never sent")])
    agent = Agent(chat_generator=generator, max_agent_steps=0)

    with caplog.at_level(logging.WARNING, logger="bot.agent"):
        result = agent.run([USER])

    assert result["exit_reason"] == "max_agent_steps"
    assert result["messages"] == [USER]
    assert result["step_count"] == 0
    assert generator.calls == []
    assert "Agent reached maximum agent steps of 0, stopping." in caplog.text


# --- 6. empty input ----------------------------------------------------------------------------------


def test_run_with_no_messages_returns_no_messages_without_calling_the_model() -> None:
    generator = ScriptedChatGenerator([says("never sent")])

    result = Agent(chat_generator=generator).run([])

    assert result["messages"] == []
    assert result["last_message"] is None
    assert generator.calls == []


def test_only_a_system_prompt_warns_and_still_calls_the_model(caplog: pytest.LogCaptureFixture) -> None:
    generator = ScriptedChatGenerator([says("Hello.")])

    with caplog.at_level(logging.WARNING, logger="bot.agent"):
        result = Agent(chat_generator=generator, system_prompt="Be brief.").run([])

    assert "All messages provided to the Agent component are system messages" in caplog.text
    assert len(generator.calls) == 1
    assert result["last_message"].text == "Hello."


# --- 7. streaming callback kinds ---------------------------------------------------------------------


async def async_callback(chunk: StreamingChunk) -> None:
    """An async streaming callback (for run_async only)."""


def sync_callback(chunk: StreamingChunk) -> None:
    """A sync streaming callback (for run only)."""


def test_an_async_streaming_callback_is_refused_by_run() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator([says("hi")]))

    with pytest.raises(ValueError, match="cannot be a coroutine"):
        agent.run([USER], streaming_callback=async_callback)


async def test_a_sync_streaming_callback_is_refused_by_run_async() -> None:
    agent = Agent(chat_generator=ScriptedChatGenerator([says("hi")]))

    with pytest.raises(ValueError, match="must be async compatible"):
        await agent.run_async([USER], streaming_callback=sync_callback)


async def test_run_time_streaming_callbacks_of_the_right_kind_receive_the_reply() -> None:
    seen: list[str] = []

    async def collect(chunk: StreamingChunk) -> None:
        seen.append(chunk.content)

    await Agent(chat_generator=ScriptedChatGenerator([says("async hi")])).run_async([USER], streaming_callback=collect)
    Agent(chat_generator=ScriptedChatGenerator([says("sync hi")])).run(
        [USER], streaming_callback=lambda chunk: seen.append(chunk.content)
    )

    assert seen == ["async hi", "sync hi"]


# --- 8. serialization --------------------------------------------------------------------------------


class TestSerialization:
    def test_rich_console_ui_to_dict(self) -> None:
        data = RichConsoleUI().to_dict()

        assert data["type"] == "bot.hitl.ui.RichConsoleUI"
        assert data["init_parameters"]["console"] is None
        assert isinstance(RichConsoleUI.from_dict(data), RichConsoleUI)

    @pytest.mark.parametrize(
        ("data", "expected"),
        [
            ({"type": "haystack.human_in_the_loop.policies.AlwaysAskPolicy", "init_parameters": {}}, AlwaysAskPolicy),
            ({"type": "haystack.human_in_the_loop.policies.NeverAskPolicy", "init_parameters": {}}, NeverAskPolicy),
            ({"type": "haystack.human_in_the_loop.policies.AskOncePolicy", "init_parameters": {}}, AskOncePolicy),
            (
                {"type": "haystack.human_in_the_loop.user_interfaces.SimpleConsoleUI", "init_parameters": {}},
                SimpleConsoleUI,
            ),
            (
                {
                    "type": "haystack.human_in_the_loop.user_interfaces.RichConsoleUI",
                    "init_parameters": {"console": None},
                },
                RichConsoleUI,
            ),
        ],
    )
    def test_haystacks_dicts_load(self, data: dict[str, Any], expected: type) -> None:
        assert type(component_from_dict(data)) is expected
        assert type(expected.from_dict(data)) is expected

    def test_haystacks_blocking_strategy_dict_loads(self) -> None:
        data = {
            "type": "haystack.human_in_the_loop.strategies.BlockingConfirmationStrategy",
            "init_parameters": {
                "confirmation_policy": {
                    "type": "haystack.human_in_the_loop.policies.AskOncePolicy",
                    "init_parameters": {},
                },
                "confirmation_ui": {
                    "type": "haystack.human_in_the_loop.user_interfaces.SimpleConsoleUI",
                    "init_parameters": {},
                },
                "reject_template": "Tool '{tool_name}' was rejected.",
                "modify_template": "Tool '{tool_name}' got {final_tool_params}.",
                "user_feedback_template": "Feedback: {feedback}",
            },
        }

        strategy = BlockingConfirmationStrategy.from_dict(data)

        assert isinstance(strategy.confirmation_policy, AskOncePolicy)
        assert isinstance(strategy.confirmation_ui, SimpleConsoleUI)
        assert strategy.reject_template == "Tool '{tool_name}' was rejected."
        assert strategy.to_dict()["init_parameters"]["user_feedback_template"] == "Feedback: {feedback}"

    def test_haystacks_breakpoint_strategy_dict_without_a_policy_loads(self) -> None:
        data = {
            "type": "haystack_experimental.components.agents.human_in_the_loop."
            "strategies.BreakpointConfirmationStrategy",
            "init_parameters": {"snapshot_file_path": "snapshots"},
        }

        strategy = component_from_dict(data)

        assert isinstance(strategy, BreakpointConfirmationStrategy)
        assert strategy.snapshot_file_path == "snapshots"
        assert isinstance(strategy.confirmation_policy, AlwaysAskPolicy)

    def test_a_dict_of_another_class_is_still_refused(self) -> None:
        data = {"type": "haystack.human_in_the_loop.policies.NeverAskPolicy", "init_parameters": {}}

        with pytest.raises(ValueError, match="Cannot build"):
            AlwaysAskPolicy.from_dict(data)

    def test_haystacks_tool_execution_decision_dict_loads(self) -> None:
        data = {
            "tool_name": "weather_tool",
            "execute": True,
            "tool_call_id": "c1",
            "feedback": None,
            "final_tool_params": {"location": "Berlin"},
        }

        assert ToolExecutionDecision.from_dict(data).to_dict() == data


# --- 9. texts of errors and warnings -----------------------------------------------------------------


def test_exit_conditions_validation() -> None:
    generator = ScriptedChatGenerator([])

    with pytest.raises(ValueError, match="Invalid exit conditions provided:"):
        Agent(chat_generator=generator, tools=[weather_tool], exit_conditions=["invalid_tool"])

    assert Agent(chat_generator=generator, tools=[weather_tool]).exit_conditions == ["text"]
    agent = Agent(chat_generator=generator, tools=[weather_tool], exit_conditions=["text", "weather_tool"])
    assert agent.exit_conditions == ["text", "weather_tool"]


def test_no_tools_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="bot.agent"):
        Agent(chat_generator=ScriptedChatGenerator([]))

    assert "No tools provided to the Agent." in caplog.text


# --- 10. a text reply ends the run -------------------------------------------------------------------


def test_a_text_reply_ends_the_run_whatever_the_exit_conditions() -> None:
    generator = ScriptedChatGenerator([says("It is sunny."), says("never sent")])
    agent = Agent(chat_generator=generator, tools=[weather_tool], exit_conditions=["weather_tool"])

    result = agent.run([USER])

    assert result["exit_reason"] == "text"
    assert result["last_message"].text == "It is sunny."
    assert [m.role for m in result["messages"]] == [ChatRole.USER, ChatRole.ASSISTANT]
    assert generator.remaining == 1


# --- deliberate differences --------------------------------------------------------------------------


def test_a_tool_name_with_spaces_is_refused_when_built_naming_the_pattern() -> None:
    def lookup(city: str) -> str:
        """Look a city up."""
        return city

    with pytest.raises(ValueError, match=r"\^\[A-Za-z0-9_-\]\{1,64\}\$"):
        tool(lookup, name="weather lookup")
