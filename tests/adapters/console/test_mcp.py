"""MCP servers in ``countersign chat``: their tools in the banner, and ``/mcp list`` / ``/mcp reload``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bot.mcp import parse_mcp_config
from tests.fakes.console_kit import USER, ConsoleHarness

ROOT = Path(__file__).resolve().parents[3]


def servers(tmp_path: Path) -> tuple:
    test_server = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(tmp_path / "log")]}
    spec = {"t": {**test_server, "cwd": str(ROOT)}, "down": {"command": str(tmp_path / "no-such-server")}}
    return tuple(parse_mcp_config({"mcpServers": spec}, {}))


def test_the_banner_lists_each_mcp_servers_tools_beside_the_native_ones(tmp_path: Path):
    harness = ConsoleHarness(tmp_path, mcp_servers=servers(tmp_path))
    outcome = harness.chat([])

    [tools_line] = [line for line in outcome.output.splitlines() if "tools     " in line]
    assert "list_files" in tools_line
    [t_line] = [line for line in outcome.output.splitlines() if "mcp       t (stdio): " in line]
    assert "t__record" in t_line and "t__peek" in t_line
    [down_line] = [line for line in outcome.output.splitlines() if "mcp       down (stdio): " in line]
    assert "failed: FileNotFoundError" in down_line  # the line wraps before the path


def test_mcp_list_and_reload_from_the_console(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    harness = ConsoleHarness(tmp_path, mcp_servers=servers(tmp_path))
    outcome = harness.chat(["/mcp list", "/mcp reload"])

    assert "t (stdio): ready, 10 tools" in outcome.output
    assert "Only countersign admins can reload the MCP servers." in outcome.output
    admin = ConsoleHarness(tmp_path, admins=frozenset({USER}), mcp_servers=servers(tmp_path))
    config = tmp_path / "broken.json"
    config.write_text("{")
    monkeypatch.setenv("COUNTERSIGN_MCP_CONFIG", str(config))
    assert "Not reloaded: COUNTERSIGN_MCP_CONFIG:" in admin.chat(["/mcp reload"]).output
