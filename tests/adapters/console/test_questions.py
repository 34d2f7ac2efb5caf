"""A running MCP tool's question in ``countersign chat``: a panel, one prompt per field, checked by the engine;
``n`` declines; a link is shown as a link (tests/fakes/mcp_server.py over stdio)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from bot.llm import ScriptedChatGenerator
from bot.mcp import parse_mcp_config
from tests.fakes.console_kit import ConsoleHarness
from tests.fakes.engine_kit import asks_for, echoes_results

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def mcp_harness(tmp_path: Path) -> ConsoleHarness:
    harness = ConsoleHarness(tmp_path)
    spec = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(tmp_path / "log.jsonl")]}
    spec["cwd"] = str(ROOT)
    servers = tuple(parse_mcp_config({"mcpServers": {"t": spec}}, {}))
    harness.config = dataclasses.replace(harness.config, mcp_servers=servers)
    return harness


def model(tool: str, **arguments: object) -> ScriptedChatGenerator:
    return ScriptedChatGenerator([asks_for(tool, **arguments), echoes_results])


def server_events(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "log.jsonl").read_text().splitlines()]


def test_the_person_fills_the_form_and_a_bad_value_is_asked_again(mcp_harness: ConsoleHarness, tmp_path: Path):
    answers = ["y", "production", "eleven", "", "release", "", "4"]  # replicas wrong first; canary/token: Enter
    generator = model("t__deploy", service="api")

    outcome = mcp_harness.chat(["deploy api", *answers], generator=generator)

    shown = " ".join(outcome.output.split())
    assert "t asks (during t__deploy)" in shown and "How should api be deployed?" in shown
    assert outcome.prompts_starting("Answer? [y] fill it in · [n] decline")
    assert outcome.prompts_starting("Environment (staging | production): ")
    assert outcome.prompts_starting("Canary [y/n] [False]: ")
    assert len(outcome.prompts_starting("Replicas: ")) == 2  # asked again, alone
    assert "Some answers are not valid: replicas: must be a whole number" in shown
    assert "Thanks: your answer was passed on." in shown
    [accepted] = [e for e in server_events(tmp_path) if e.get("event") == "accept"]
    assert (accepted["environment"], accepted["replicas"], accepted["canary"]) == ("production", 4, False)
    results = [m for m in generator.calls[-1]["messages"] if m.tool_call_result is not None]
    assert results[-1].tool_call_result.result == "deployed api to production x4 canary=False"
    assert outcome.keyboard.unread == 0


def test_n_declines(mcp_harness: ConsoleHarness, tmp_path: Path):
    generator = model("t__deploy", service="api")

    outcome = mcp_harness.chat(["deploy api", "n"], generator=generator)

    assert "Declined" in outcome.output
    assert [e["event"] for e in server_events(tmp_path)] == ["started", "decline"]


def test_a_link_is_shown_as_a_link_and_never_asked_as_a_field(mcp_harness: ConsoleHarness):
    generator = model("t__login")

    outcome = mcp_harness.chat(["log in", "y"], generator=generator)

    assert "https://auth.example.com/device?code=ABC" in outcome.output
    assert outcome.prompts_starting("Done? [y] accept · [n] decline")
    assert len([p for p in outcome.keyboard.prompts if "url" in p.lower()]) == 0
    results = [m for m in generator.calls[-1]["messages"] if m.tool_call_result is not None]
    assert results[-1].tool_call_result.result == "login accept"
