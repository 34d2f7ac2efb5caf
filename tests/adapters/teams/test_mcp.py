"""MCP tools end to end in Teams: the real @modelcontextprotocol/server-filesystem (npm, from the lockfile in
tests/npm/mcp) behind the real Agents SDK app and the fake Bot Connector, with the real file system checked
after each click (issue 25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.teams.cards import feedback_input_id
from bot.mcp import parse_mcp_config
from tests.fakes.engine_kit import asks_for, echoes_results
from tests.fakes.npm_packages import installed_bin
from tests.fakes.teams_stack import ANA, TeamsStack, approval_ids, texts_of

NPM_FOLDER = Path(__file__).resolve().parents[2] / "npm" / "mcp"


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    folder = (tmp_path / "files").resolve()
    folder.mkdir()
    (folder / "notes.txt").write_text("hello from disk")
    return folder


@pytest.fixture
async def open_stack(tmp_path, fakes, sandbox):
    filesystem = installed_bin(NPM_FOLDER) / "mcp-server-filesystem"
    servers = tuple(parse_mcp_config({"mcpServers": {"fs": {"command": str(filesystem), "args": [str(sandbox)]}}}, {}))
    opened: list[TeamsStack] = []

    async def make(**kwargs) -> TeamsStack:
        stack = await TeamsStack.open(tmp_path, *fakes, mcp_servers=servers, **kwargs)
        opened.append(stack)
        return stack

    yield make
    for stack in opened:
        await stack.aclose()


async def test_a_read_only_mcp_tool_runs_without_a_card(open_stack, sandbox: Path):
    stack = await open_stack(replies=[asks_for("fs__read_text_file", path=str(sandbox / "notes.txt")), echoes_results])
    await stack.say("read notes.txt")

    assert all(approval_ids(card) == [] for r in stack.connector.posted() for card in r.cards)
    assert stack.connector.texts()[-1] == "results: hello from disk"


async def test_a_write_pauses_and_approve_writes_the_file_once(open_stack, sandbox: Path):
    target = sandbox / "approved.txt"
    stack = await open_stack(replies=[asks_for("fs__write_file", path=str(target), content="approved"), echoes_results])
    await stack.say("write approved.txt")
    [approval_id] = approval_ids(await stack.view_as(ANA))
    assert not target.exists()

    status, body = await stack.click("approve", ANA, approval_id)

    assert status == 200 and any("Approved by" in t for t in texts_of(body["value"]))
    assert target.read_text() == "approved"
    assert stack.connector.texts()[-1].startswith("results: Successfully wrote to")


async def test_reject_writes_nothing(open_stack, sandbox: Path):
    target = sandbox / "never.txt"
    stack = await open_stack(replies=[asks_for("fs__write_file", path=str(target), content="x"), echoes_results])
    await stack.say("write never.txt")
    [approval_id] = approval_ids(await stack.view_as(ANA))

    status, _ = await stack.click("reject", ANA, approval_id, typed={feedback_input_id(approval_id): "not now"})

    assert status == 200
    assert not target.exists()
    assert "not now" in stack.connector.texts()[-1]
