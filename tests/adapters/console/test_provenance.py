"""Provenance in ``countersign chat``: a call whose argument came from an untrusted page asks, and says why."""

from __future__ import annotations

from bot.llm import ScriptedChatGenerator
from bot.messages import ChatMessage, ToolCall
from tests.fakes.console_kit import ConsoleHarness
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
