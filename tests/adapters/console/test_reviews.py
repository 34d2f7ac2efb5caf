"""Review after acting in ``countersign chat``: the tool runs once, the person at the terminal releases,
edits or rejects its result, and that is what the model sees.

Scripted keyboard, rich into a StringIO, the real Engine on a SQLite file and the demo tools.
"""

from __future__ import annotations

import pytest

from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ChatRole, ToolCall
from tests.fakes.console_kit import USER, ConsoleHarness


@pytest.fixture
def harness(tmp_path) -> ConsoleHarness:
    harness = ConsoleHarness(tmp_path, admins=frozenset({USER}))
    harness.chat(["/policy set delete_file review"], thread="setup")
    return harness


def echo(messages: list[ChatMessage]) -> ChatMessage:
    """Says what the last tool result it was given reads."""
    result = [m.tool_call_result for m in messages if m.role is ChatRole.TOOL][-1]
    return ChatMessage.from_assistant(f"I was told: {result.result}")


def echoing_model() -> ScriptedChatGenerator:
    """Asks to delete old.log, then says what the tool result it was given reads."""
    return ScriptedChatGenerator(
        [ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": "old.log"})]), echo]
    )


def test_the_tool_runs_at_once_and_y_releases_its_result(harness):
    outcome = harness.chat(["delete old.log", "y"], generator=echoing_model())

    assert harness.executed["delete_file"] == 1
    assert not (harness.sandbox / "old.log").exists()
    assert "Review needed · delete_file" in outcome.output
    assert outcome.prompts_starting("Release the result of delete_file")
    assert f"Result approved by {USER}" in outcome.output
    assert "I was told: Deleted old.log." in outcome.output


def test_e_gives_the_model_the_typed_result(harness):
    outcome = harness.chat(["delete old.log", "e", "a file went away"], generator=echoing_model())

    assert "I was told: a file went away" in outcome.output
    assert f"Result edited by {USER}" in outcome.output
    assert harness.executed["delete_file"] == 1


def test_n_with_feedback_withholds_the_result(harness):
    model = echoing_model()
    outcome = harness.chat(["delete old.log", "n", "keep it vague"], generator=model)

    assert f"Result rejected by {USER}" in outcome.output
    told = [m for m in model.calls[1]["messages"] if m.role is ChatRole.TOOL][-1].tool_call_result
    assert told.error and "rejected by a reviewer" in told.result and "keep it vague" in told.result
    assert "Deleted old.log." not in told.result
    assert harness.executed["delete_file"] == 1


def test_enter_alone_or_an_empty_edit_never_releases_the_result(harness):
    outcome = harness.chat(["delete old.log", "", "e", "", "n", ""], generator=echoing_model())

    assert "Enter alone does not approve" in outcome.output
    assert "Nothing was changed; choose again." in outcome.output
    assert len(outcome.prompts_starting("Release the result of delete_file")) == 3
    assert "I was told: Deleted old.log." not in outcome.output


def test_a_review_left_open_survives_a_restart_and_the_tool_never_runs_twice(harness):
    first = harness.chat(["delete old.log"], thread="ops", generator=echoing_model())
    assert "still wait for your decision" in first.output
    assert harness.executed["delete_file"] == 1

    second = harness.chat(["y"], thread="ops", generator=ScriptedChatGenerator([echo]))

    assert "Review needed · delete_file" in second.output
    assert "I was told: Deleted old.log." in second.output
    assert harness.executed["delete_file"] == 1
