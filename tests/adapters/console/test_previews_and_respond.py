"""Previews and Respond in ``countersign chat`` (issue 30): the panel shows what the call would do, and ``r`` answers
in the tool's place."""

from __future__ import annotations

from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ToolCall
from bot.tools import Tool, tool
from tests.fakes.console_kit import ConsoleHarness


def deploy_tool(applied: list[str]) -> Tool:
    def plan(service: str) -> str:
        return f"3 pods of {service} will restart"

    @tool(preview=plan, respondable=True)
    def deploy(service: str, approved_preview: str) -> str:
        """Deploy a service.

        :param service: The service.
        """
        applied.append(approved_preview)
        return f"deployed {service}"

    return deploy


def model() -> ScriptedChatGenerator:
    return ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[ToolCall("deploy", {"service": "web"})]),
            ChatMessage.from_assistant("done"),
        ]
    )


def test_the_panel_shows_the_preview_and_approving_runs_with_it(harness: ConsoleHarness):
    applied: list[str] = []
    harness.tools.append(deploy_tool(applied))

    outcome = harness.chat(["deploy web", "y"], generator=model())

    shown = " ".join(outcome.output.split())
    assert "preview" in shown and "3 pods of web will restart" in shown
    assert outcome.prompts_starting("Run deploy? [y] approve · [n] reject · [m] modify · [r] respond")
    assert applied == ["3 pods of web will restart"]


def test_r_answers_in_the_tools_place(harness: ConsoleHarness):
    applied: list[str] = []
    harness.tools.append(deploy_tool(applied))
    generator = model()

    outcome = harness.chat(["deploy web", "r", "", "r", "I deployed it by hand"], generator=generator)

    assert applied == [], "the tool never ran"
    assert "No answer was given; choose again." in outcome.output
    assert outcome.prompts_starting("Your answer for the assistant")
    assert "Answered by" in " ".join(outcome.output.split())
    results = [m for m in generator.calls[-1]["messages"] if m.tool_call_result is not None]
    assert results[-1].tool_call_result.result.endswith("I deployed it by hand")


def test_r_is_not_offered_for_a_tool_that_is_not_respondable(harness: ConsoleHarness):
    generator = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": "old.log"})]),
            ChatMessage.from_assistant("kept"),
        ]
    )

    outcome = harness.chat(["delete old.log", "r", "n", ""], generator=generator)

    assert not outcome.prompts_starting("Your answer for the assistant")
    assert "[r] respond" not in outcome.output and not any("[r]" in p for p in outcome.keyboard.prompts)
    assert harness.executed["delete_file"] == 0


def test_a_policy_tightened_while_a_call_waits_voids_a_vote_then_deny_closes_it(tmp_path):
    """Issue 30 in ``countersign chat``: four-eyes turned on after the requester's vote says it no longer counts;
    ``deny`` then closes the call with a sentence, and the tool never runs."""
    harness = ConsoleHarness(tmp_path, admins=frozenset({"ana"}))
    generator = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": "old.log"})]),
            ChatMessage.from_assistant("kept"),
        ]
    )

    outcome = harness.chat(
        [
            "/approvers delete_file @ana @ben @cy",
            "/quorum delete_file 2",
            "delete old.log",
            "y",
            "/four-eyes delete_file on",
            "/policy set delete_file deny",
        ],
        generator=generator,
    )

    shown = " ".join(outcome.output.split())
    assert "Your approval was recorded (1/2)." in shown
    assert "delete_file waits under a stricter policy now" in shown
    assert "ana's approval no longer counts: four-eyes is on, and they asked for this call." in shown
    assert "An admin set delete_file to deny while this call waited, so it was closed without running." in shown
    assert "Pending: 1 pending approval(s) closed (denied)." in shown
    assert harness.executed["delete_file"] == 0
