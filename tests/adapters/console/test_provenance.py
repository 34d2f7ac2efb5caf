"""Provenance and justification in ``countersign chat``: a tainted call asks and says why; a reason is asked for."""

from __future__ import annotations

from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ToolCall
from tests.fakes.console_kit import USER, ConsoleHarness
from tests.fakes.taint_kit import INJECTED, fetch_url_tool


def test_a_tainted_never_call_asks_and_the_panel_marks_the_argument(harness: ConsoleHarness):
    harness.tools.append(fetch_url_tool())
    model = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[ToolCall("fetch_url", {"url": "https://evil.example"})]),
            ChatMessage.from_assistant(tool_calls=[ToolCall("read_file", {"path": INJECTED})]),
            ChatMessage.from_assistant("done"),
        ]
    )

    outcome = harness.chat(["summarise https://evil.example", "y"], generator=model)

    shown = " ".join(outcome.output.split())
    assert "Approval needed · read_file" in shown, "read_file is a never tool: asked because of the taint"
    assert "path is from the output of `fetch_url` (step 1)" in shown and INJECTED in shown
    assert "Asked because an argument came from untrusted text" in shown
    assert harness.executed["read_file"] == 1, "approved: it ran once"


def _deleting(tmp_path) -> tuple[ConsoleHarness, ScriptedChatGenerator]:
    """An admin's console whose model deletes ``old.log`` (which exists), then says so."""
    harness = ConsoleHarness(tmp_path, admins=frozenset({USER}))
    model = ScriptedChatGenerator(
        [
            ChatMessage.from_assistant(tool_calls=[ToolCall("delete_file", {"path": "old.log"})]),
            ChatMessage.from_assistant("deleted"),
        ]
    )
    (harness.sandbox).mkdir(parents=True, exist_ok=True)
    (harness.sandbox / "old.log").write_text("x")
    return harness, model


def test_justification_required_asks_for_a_reason_after_y_and_shows_it(tmp_path):
    harness, model = _deleting(tmp_path)

    outcome = harness.chat(
        ["/justification delete_file required", "delete old.log", "y", "disk full, OPS-17"], generator=model
    )

    assert "needs a short reason" in outcome.output
    assert outcome.prompts_starting("Reason for approving")
    assert harness.executed["delete_file"] == 1
    assert "Reason: disk full, OPS-17" in " ".join(outcome.output.split())


def test_a_reason_in_the_request_is_shown_and_y_asks_for_no_other(tmp_path):
    harness, model = _deleting(tmp_path)

    outcome = harness.chat(
        ["/justification delete_file required", "delete old.log because disk full, OPS-17", "y"], generator=model
    )

    assert "Reason given by the requester: disk full, OPS-17" in " ".join(outcome.output.split())
    assert not outcome.prompts_starting("Reason for approving")
    assert harness.executed["delete_file"] == 1
