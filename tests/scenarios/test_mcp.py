"""MCP tools end to end through the engine: the real @modelcontextprotocol/server-filesystem (npm, from the
lockfile in tests/npm/mcp) checking the real file system, and tests/fakes/mcp_server.py over stdio and HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bot.engine.model import AdminRequest, DecisionRequest
from bot.mcp import MCPServerConfig, parse_mcp_config
from tests.fakes.engine_kit import (
    ADMIN,
    CHANNEL,
    PLATFORM,
    REQUESTER,
    WORKSPACE,
    Harness,
    asks_for,
    bounded,
    echoes_results,
    says,
    tool_results,
)
from tests.fakes.npm_packages import installed_bin

ROOT = Path(__file__).resolve().parents[2]
NPM_FOLDER = ROOT / "tests" / "npm" / "mcp"


def servers(folder: Path, log: Path, **extra: dict) -> tuple[MCPServerConfig, ...]:
    filesystem = installed_bin(NPM_FOLDER) / "mcp-server-filesystem"
    assert filesystem.exists(), "tests/npm/mcp/package.json lists @modelcontextprotocol/server-filesystem"
    spec = {
        "fs": {"command": str(filesystem), "args": [str(folder)], "timeout": 20},
        "t": {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(log)], "cwd": str(ROOT)},
        **extra,
    }
    return tuple(parse_mcp_config({"mcpServers": spec}, {}))


@pytest.fixture
def sandbox(tmp_path: Path) -> Path:
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello from disk")
    return folder.resolve()


@pytest.fixture
async def h(tmp_path: Path, sandbox: Path) -> AsyncIterator[Harness]:
    harness = await Harness.open(
        tmp_path,
        generator=None,
        replies=[],
        mcp_servers=servers(sandbox, tmp_path / "log.jsonl", down={"command": str(tmp_path / "no-such-server")}),
    )
    try:
        yield harness
    finally:
        await harness.close()


def script(h: Harness, *replies) -> None:
    h.generator.replies.extend(replies)  # type: ignore[attr-defined]


async def decide(h: Harness, action: str, **kwargs) -> None:
    approval = h.surface.renders[-1].approvals[0]
    await h.engine.decide(
        DecisionRequest(approval.approval_id, REQUESTER, action, place=approval.thread.place, **kwargs)
    )
    await h.engine.wait_idle()


async def test_tools_are_named_server__tool_and_a_failing_server_only_loses_its_own(h: Harness):
    assert h.engine.mcp is not None
    statuses = {s.name: s for s in h.engine.mcp.statuses()}
    assert statuses["fs"].status == "ready" and statuses["fs"].tool_count > 5
    assert statuses["t"].status == "ready" and statuses["t"].tool_count == 10
    assert statuses["down"].status == "failed" and "no-such-server" in (statuses["down"].last_error or "")
    assert h.engine.mcp.degraded() == ["down"]
    tools = {t.name for t in h.engine.mcp.tools()}
    assert {"fs__read_text_file", "fs__write_file", "t__record", "t__bare"} <= tools
    assert not any(n.startswith("down__") for n in tools)


async def test_a_read_only_tool_runs_without_a_card(h: Harness, sandbox: Path):
    script(h, asks_for("fs__read_text_file", path=str(sandbox / "notes.txt")), echoes_results)
    await h.say("read notes")
    assert h.surface.renders == [] or all(not r.approvals for r in h.surface.renders)
    assert ("fs__read_text_file", "hello from disk", False) in tool_results(await h.history())


async def test_a_write_pauses_and_approve_writes_once(h: Harness, sandbox: Path):
    target = sandbox / "new.txt"
    script(h, asks_for("fs__write_file", path=str(target), content="approved"), echoes_results)
    approvals = await h.paused_approvals("write it")
    assert approvals[0].tool_name == "fs__write_file" and approvals[0].destructive  # confirm dialog on Approve
    assert not target.exists()
    await decide(h, "confirm")
    assert target.read_text() == "approved"


async def test_reject_writes_nothing(h: Harness, sandbox: Path, tmp_path: Path):
    target = sandbox / "never.txt"
    script(h, asks_for("fs__write_file", path=str(target), content="x"), echoes_results)
    await h.paused_approvals("write it")
    await decide(h, "reject", feedback="no")
    assert not target.exists()
    script(h, asks_for("t__record", note="a"), echoes_results)
    await h.paused_approvals("record")
    await decide(h, "reject")
    assert not (tmp_path / "log.jsonl").exists()  # the rejected call never reached the server


async def test_edit_changes_the_path_on_disk(h: Harness, sandbox: Path):
    script(h, asks_for("fs__write_file", path=str(sandbox / "a.txt"), content="edited"), echoes_results)
    await h.paused_approvals("write it")
    await decide(h, "modify", edited_params={"path": str(sandbox / "b.txt"), "content": "edited"})
    assert not (sandbox / "a.txt").exists() and (sandbox / "b.txt").read_text() == "edited"


async def test_an_approved_call_reaches_the_server_exactly_once(h: Harness, tmp_path: Path):
    script(h, asks_for("t__record", note="once"), echoes_results)
    approvals = await h.paused_approvals("record")
    assert not approvals[0].destructive  # destructiveHint: false
    await decide(h, "confirm")
    lines = (tmp_path / "log.jsonl").read_text().splitlines()
    assert [json.loads(line)["note"] for line in lines] == ["once"]


async def test_an_unannotated_tool_asks_with_the_confirm_dialog(h: Harness):
    script(h, asks_for("t__bare", value=3), echoes_results)
    approvals = await h.paused_approvals("bare")
    assert approvals[0].destructive


async def test_an_admin_rule_beats_the_annotation(h: Harness, sandbox: Path):
    reply = await h.engine.admin(
        AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, "policy set fs__read_text_file always")
    )
    assert "always" in reply
    script(h, asks_for("fs__read_text_file", path=str(sandbox / "notes.txt")), echoes_results)
    approvals = await h.paused_approvals("read")
    assert approvals[0].tool_name == "fs__read_text_file"


async def test_a_rule_for_a_whole_server_applies_to_each_of_its_tools(h: Harness, tmp_path: Path):
    reply = await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, "policy set t__* never"))
    assert "never" in reply
    script(h, asks_for("t__record", note="no card"), echoes_results)
    await h.say("record")
    assert all(not r.approvals for r in h.surface.renders)
    assert (tmp_path / "log.jsonl").read_text().count("no card") == 1


async def test_an_error_result_is_marked_error_and_names_the_server(h: Harness):
    script(h, asks_for("t__broken"), echoes_results)
    await h.say("break")
    [(name, result, error)] = [r for r in tool_results(await h.history()) if r[0] == "t__broken"]
    assert error and "error from t" in result


async def test_a_stdio_server_that_dies_is_restarted_and_works_again(h: Harness):
    assert h.engine.mcp is not None
    script(h, asks_for("t__crash"), echoes_results)
    await h.say("crash it")
    [(_, result, error)] = [r for r in tool_results(await h.history()) if r[0] == "t__crash"]
    assert error and "error from t: MCPError: Connection closed" in result
    assert "t" in h.engine.mcp.degraded()
    await bounded(h.engine.mcp.wait_ready("t"), 20)
    script(h, asks_for("t__peek"), echoes_results)
    await h.say("peek")
    assert ("t__peek", "0 notes", False) in tool_results(await h.history())
    assert h.engine.mcp.degraded() == ["down"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def http_server(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.mcp_server", str(tmp_path / "http-log.jsonl"), "http", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)  # polling a port that opens, not a sleep standing in for synchronisation
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_streamable_http_write_pauses_and_approve_runs_once(tmp_path: Path, http_server: str):
    cfg = tuple(parse_mcp_config({"mcpServers": {"web": {"url": http_server, "timeout": 20}}}, {}))
    harness = await Harness.open(tmp_path, replies=[], mcp_servers=cfg)
    try:
        assert harness.engine.mcp is not None and harness.engine.mcp.degraded() == []
        script(harness, asks_for("web__peek"), echoes_results)
        await harness.say("peek")
        assert ("web__peek", "0 notes", False) in tool_results(await harness.history())
        script(harness, asks_for("web__record", note="http"), echoes_results)
        await harness.paused_approvals("record")
        await decide(harness, "confirm")
        assert len((tmp_path / "http-log.jsonl").read_text().splitlines()) == 1
    finally:
        await harness.close()


async def test_readyz_lists_a_failed_server_under_degraded_and_stays_ready(h: Harness):
    from aiohttp.test_utils import TestClient, TestServer

    from bot.server import build_web_app

    app = await build_web_app(h.engine, h.engine.config, plugins=[])
    async with TestClient(TestServer(app)) as client:
        response = await client.get("/readyz")
        assert (response.status, await response.json()) == (200, {"status": "ready", "degraded": ["down"]})


async def test_a_call_past_the_servers_timeout_is_an_error_naming_the_server(tmp_path: Path):
    from bot.mcp import MCPManager
    from bot.mcp.manager import MCPCallError

    cfg = parse_mcp_config(
        {
            "mcpServers": {
                "t": {
                    "command": sys.executable,
                    "args": ["-m", "tests.fakes.mcp_server", str(tmp_path / "log")],
                    "cwd": str(ROOT),
                    "timeout": 1,
                }
            }
        },
        {},
    )
    manager = MCPManager(cfg)
    try:
        await bounded(manager.start(), 20)
        with pytest.raises(MCPCallError, match=r"^error from t: no answer within 1 s$"):
            await manager.call("t", "slow", {"seconds": 30})
        assert await manager.call("t", "slow", {"seconds": 0}) == "woke up"  # the server still answers
    finally:
        await manager.aclose()


async def test_a_configured_preview_tool_previews_the_call_and_a_changed_plan_is_asked_again(tmp_path: Path):
    """Issue 30: ``"previews": {"record": "plan"}`` makes ``t__record``'s approval show ``t__plan``'s answer to the
    same arguments, bound to the approval: when the plan changes before the run, nothing runs and it is asked again."""
    log = tmp_path / "log.jsonl"
    spec = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(log)], "cwd": str(ROOT)}
    cfg = tuple(parse_mcp_config({"mcpServers": {"t": {**spec, "previews": {"record": "plan"}}}}, {}))
    harness = await Harness.open(tmp_path, replies=[], mcp_servers=cfg)
    try:
        assert harness.engine.mcp is not None
        tools = {t.name: t for t in harness.engine.mcp.tools()}
        assert tools["t__record"].preview is not None and tools["t__bare"].preview is None
        script(harness, asks_for("t__record", note="a"), echoes_results)
        [view] = await harness.paused_approvals("record a")
        assert view.preview is not None and view.preview["text"] == "note 1 would be 'a'"
        log.write_text('{"tool": "record", "note": "by hand"}\n')  # the world changes after the pause

        await decide(harness, "confirm")

        assert len(log.read_text().splitlines()) == 1, "a changed plan never runs"
        [again] = harness.surface.renders[-1].approvals
        assert again.is_pending and again.preview["text"] == "note 2 would be 'a'"
        assert again.preview["approved"]["text"] == "note 1 would be 'a'"
        await decide(harness, "confirm")
        assert [json.loads(line)["note"] for line in log.read_text().splitlines()] == ["by hand", "a"]
    finally:
        await harness.close()


# --- a tool list that changes (notifications/tools/list_changed) ------------------------------------------


@pytest.mark.parametrize("what", ["schema", "annotations", "remove"])
async def test_an_approval_is_refused_when_the_tool_changed_on_the_server(h: Harness, tmp_path: Path, what: str):
    assert h.engine.mcp is not None
    script(h, asks_for("t__record", note="bound"), echoes_results)
    [approval] = await h.paused_approvals("record")
    assert await h.engine.mcp.call("t", "change", {"what": what}) == f"changed: {what}"
    await bounded(h.engine.mcp.settled("t"), 20)  # the notification re-listed the server's tools

    await decide(h, "confirm")

    record = await h.engine.get_approval(approval.approval_id)
    assert record.status == "rejected"
    sentence = record.feedback or ""
    assert "MCP server t" in sentence and ("changed" in sentence or "no longer offers" in sentence), sentence
    assert not (tmp_path / "log.jsonl").exists()  # never run against the changed tool
    [(_, result, _)] = [r for r in tool_results(await h.history()) if r[0] == "t__record"]
    assert "MCP server t" in result


async def test_a_call_of_a_tool_that_changed_since_it_was_offered_never_reaches_the_server(h: Harness, tmp_path: Path):
    from bot.mcp.manager import MCPCallError

    assert h.engine.mcp is not None
    await h.engine.mcp.call("t", "change", {"what": "annotations"})
    await bounded(h.engine.mcp.settled("t"), 20)
    with pytest.raises(MCPCallError, match=r"^error from t: the tool record changed on the MCP server t"):
        await h.engine.mcp.call("t", "record", {"note": "x"})
    assert not (tmp_path / "log.jsonl").exists()
    [tool] = [t for t in h.engine.mcp.tools() if t.name == "t__record"]
    assert tool.refusal() is not None and "changed on the MCP server t" in (tool.refusal() or "")


async def test_a_pending_approval_waits_while_its_server_is_down_after_a_restart(tmp_path: Path, sandbox: Path):
    from bot.engine.errors import MCPServerNotConnected

    log, flag = tmp_path / "log.jsonl", tmp_path / "server-may-start"
    flag.touch()
    late = {"t": {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(log), "after", str(flag)]}}
    cfg = tuple(parse_mcp_config({"mcpServers": {name: {**s, "cwd": str(ROOT)} for name, s in late.items()}}, {}))
    before = await Harness.open(tmp_path, replies=[asks_for("t__record", note="later")], mcp_servers=cfg)
    after = None
    try:
        [approval] = await before.paused_approvals("record")
        await before.close()
        flag.unlink()  # the server cannot start in the new process

        after = await before.reopen(generator=before.generator, mcp_servers=cfg)
        script(after, echoes_results)
        assert after.engine.mcp is not None and after.engine.mcp.degraded() == ["t"]
        place = approval.thread.place
        for action in ("confirm", "reject"):
            with pytest.raises(MCPServerNotConnected, match=r"^The MCP server t is not connected; try again when"):
                await after.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, action, place=place))
        assert (await after.engine.get_approval(approval.approval_id)).status == "pending"

        flag.touch()  # the server comes back: its tools are offered, the approval can be decided
        await bounded(after.engine.mcp.wait_ready("t"), 30)
        await after.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=place))
        await after.engine.wait_idle()
        assert [json.loads(line)["note"] for line in log.read_text().splitlines()] == ["later"]
    finally:
        await before.close()
        if after is not None:
            await after.close()


# --- mcp list, mcp reload ---------------------------------------------------------------------------------


async def admin(h: Harness, text: str, actor: str = ADMIN) -> str:
    return await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, actor, text))


def server_spec(log: Path, *extra: str) -> dict:
    return {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(log), *extra], "cwd": str(ROOT)}


async def test_mcp_list_shows_each_server_with_transport_status_tools_and_last_error(h: Harness):
    lines = (await admin(h, "mcp list", actor=REQUESTER)).splitlines()  # anyone may list
    assert lines[0] == "MCP servers:"
    fs, t, down = lines[1:]
    assert fs.startswith("  fs (stdio): ready, ") and fs.endswith(" tools")
    assert t == "  t (stdio): ready, 10 tools"
    assert down.startswith("  down (stdio): failed, 0 tools; last error: ") and "no-such-server" in down


async def test_mcp_reload_starts_new_restarts_changed_stops_removed_servers_and_offers_their_tools(
    h: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    assert h.engine.mcp is not None
    await h.engine.mcp.call("t", "change", {"what": "schema"})  # picked up by the reload: t's tools as listed now
    await bounded(h.engine.mcp.settled("t"), 20)
    config = tmp_path / "mcp.json"
    spec = {"t": server_spec(tmp_path / "log.jsonl"), "down": server_spec(tmp_path / "down.jsonl")}
    config.write_text(json.dumps({"mcpServers": {**spec, "new": server_spec(tmp_path / "new.jsonl")}}))
    monkeypatch.setenv("COUNTERSIGN_MCP_CONFIG", str(config))

    reply = await admin(h, "mcp reload")

    assert reply.splitlines()[0] == "MCP configuration reloaded: started new; restarted down; stopped fs; unchanged t."
    assert "  new (stdio): ready, 10 tools" in reply and "  down (stdio): ready, 10 tools" in reply
    names = set(h.engine.tools)
    assert {"new__record", "down__record", "t__record"} <= names and not any(n.startswith("fs__") for n in names)
    assert "loud" in h.engine.tools["t__record"].parameters["properties"]
    [entry] = await h.audit("mcp reload")
    assert entry.actor == ADMIN and entry.details["started"] == ["new"] and entry.details["stopped"] == ["fs"]
    assert "never" in await admin(h, "policy set new__* never")  # the new server's tool group
    script(h, asks_for("new__record", note="fresh"), echoes_results)
    await h.say("record on the new server")
    assert (tmp_path / "new.jsonl").read_text().count("fresh") == 1
    assert ("new__record", "recorded fresh", False) in tool_results(await h.history())


async def test_mcp_reload_refuses_a_broken_file_and_the_servers_keep_running(
    h: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    config = tmp_path / "mcp.json"
    config.write_text('{"mcpServers": {"t": ')
    monkeypatch.setenv("COUNTERSIGN_MCP_CONFIG", str(config))
    reply = await admin(h, "mcp reload")
    assert reply.startswith(f"Not reloaded: COUNTERSIGN_MCP_CONFIG: {config} is not valid JSON (line 1")
    assert reply.endswith("The running MCP servers are unchanged.") and "\n" not in reply
    assert [e.details["error"] for e in await h.audit("mcp reload refused")] == [reply[len("Not reloaded: ") : -40]]
    assert h.engine.mcp is not None and h.engine.mcp.degraded() == ["down"]
    assert await h.engine.mcp.call("t", "peek", {}) == "0 notes"


async def test_mcp_reload_is_for_admins_only_and_the_refusal_is_audited(h: Harness, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("COUNTERSIGN_MCP_CONFIG", raising=False)  # would stop every server, were it run
    assert await admin(h, "mcp reload", actor=REQUESTER) == "Only countersign admins can reload the MCP servers."
    [refused] = await h.audit("policy change refused")
    assert refused.actor == REQUESTER and refused.subject == "mcp reload"
    assert h.engine.mcp is not None and h.engine.mcp.degraded() == ["down"]


async def test_mcp_commands_have_usage_help(h: Harness):
    assert "mcp reload" in await admin(h, "help")
    assert (await admin(h, "mcp restart")).endswith("usage: mcp list | mcp reload (help lists every command)")


@pytest.mark.parametrize("what", ["schema", "annotations"])
async def test_a_paused_call_whose_tool_changed_across_a_restart_is_never_run(tmp_path: Path, what: str):
    log = tmp_path / "log.jsonl"

    def config(*extra: str) -> tuple[MCPServerConfig, ...]:
        return tuple(parse_mcp_config({"mcpServers": {"t": server_spec(log, *extra)}}, {}))

    before = await Harness.open(tmp_path, replies=[asks_for("t__record", note="bound")], mcp_servers=config())
    after = None
    try:
        [approval] = await before.paused_approvals("record")
        await before.close()
        after = await before.reopen(generator=before.generator, mcp_servers=config("changed", what))
        script(after, says("unused"))

        await after.engine.decide(
            DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place)
        )
        await after.engine.wait_idle()

        assert not log.exists()  # never run against the changed tool
        assert (await after.run_of(approval.run_id)).status == "failed"
        last = after.surface.replies_in(after.thread())[-1]
        assert last.startswith("Sorry, this request cannot continue: t__record changed on its MCP server"), last
    finally:
        await before.close()
        if after is not None:
            await after.close()
