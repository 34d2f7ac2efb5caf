"""A real ``countersign serve`` with an MCP server dies between the click and the answer: the call is never sent
again (issue 25).

The victim process is approved an MCP call of the test server's ``record`` (tests/fakes/mcp_server.py, over
stdio: each process runs its own copy, all appending to one log), and dies after the server answered but
before the answer was recorded: at the failpoint ``after_tool``, or by ``kill -9`` while the server still
holds the request. The survivor, configured with the same server, recovers the run: its ledger entry says
the call was sent, so it is never sent again (the log holds one line) and the thread is told its outcome is
unknown.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.fakes.serve_processes import REPO_ROOT, STEADY, ServeCluster, tool_results


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[ServeCluster]:
    async with ServeCluster.open(tmp_path) as running:
        yield running


def mcp_env(tmp_path: Path) -> dict[str, str]:
    config = tmp_path / "mcp.json"
    server = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(tmp_path / "mcp-log.jsonl")]}
    config.write_text(json.dumps({"mcpServers": {"t": {**server, "cwd": str(REPO_ROOT)}}}))
    return {"COUNTERSIGN_MCP_CONFIG": str(config)}


def recorded(tmp_path: Path) -> list[dict]:
    log = tmp_path / "mcp-log.jsonl"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.parametrize("crash", ["after_tool", "kill -9"])
async def test_an_mcp_call_whose_process_dies_before_its_answer_is_recorded_is_never_sent_again(
    cluster: ServeCluster, tmp_path: Path, crash: str
) -> None:
    env = mcp_env(tmp_path)
    survivor = await cluster.start("survivor", env={**STEADY, **env})
    victim = await cluster.start("victim", failpoint=None if crash == "kill -9" else crash, env=env)
    note = crash.replace(" ", "")
    wait = 60 if crash == "kill -9" else 0  # the server holds the request until the victim is dead
    cluster.model.plan(f"record {note}", [("t__record", {"note": note, "wait": wait})])
    thread = await cluster.mention(survivor, f"record {note}")
    card = await cluster.approval_card(thread)

    async with cluster.frozen(survivor):
        await cluster.click(victim, card)
        if crash == "kill -9":
            await cluster.wait_until(lambda: recorded(tmp_path), "the MCP server received the call")
            victim.kill()
            assert await victim.wait_exit() == -9
        else:
            await victim.wait_failpoint(passed=lambda: cluster.replies_in(thread))

    await cluster.wait_for_reply(thread, "unknown")
    assert [(r["note"], r["pid"]) for r in recorded(tmp_path)] == [(note, victim.pid)]  # sent once, by the victim
    await cluster.assert_settled(thread)
    [result] = tool_results(cluster.history(thread))
    assert "unknown" in result.lower()
    assert [r["note"] for r in recorded(tmp_path)] == [note]  # still once, after the thread settled
