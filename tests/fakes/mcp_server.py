"""A small MCP server (the SDK's ``MCPServer``) for exact control in the MCP tests.

``python -m tests.fakes.mcp_server LOG [stdio|http PORT|after FLAG|changed WHAT]``: every execution of ``record``
appends one JSON line to LOG, so a test counts what really ran. Tools: ``record`` (annotated as not
destructive), ``peek`` (read-only), ``bare`` (no annotations at all), ``broken`` (an ``isError``
result), ``slow`` (sleeps, for timeouts and cancellation; a cancelled one logs ``{"tool": "slow", "event":
"cancelled"}``), ``crash`` (the process exits), ``plan`` (read-only: what ``record`` would do, a preview tool for
issue 30), ``change`` (changes ``record`` and sends ``notifications/tools/list_changed``), ``deploy`` (asks for a
form: elicitation) and ``login`` (asks the person to open a link: URL-mode elicitation). ``slow`` and ``deploy``
log ``started`` first, so a test knows the call reached the server.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from bot.mcp import MCPServerConfig, parse_mcp_config

ROOT = Path(__file__).resolve().parents[2]


def configured(log_path: Path, name: str = "t") -> tuple[MCPServerConfig, ...]:
    """This server over stdio as the one configured MCP server ``name``, recording into ``log_path``."""
    spec = {"command": sys.executable, "args": ["-m", "tests.fakes.mcp_server", str(log_path)], "cwd": str(ROOT)}
    return tuple(parse_mcp_config({"mcpServers": {name: spec}}, {}))


class DeployForm(BaseModel):
    """What ``deploy`` asks for (strings, numbers, booleans and an enum)."""

    environment: Literal["staging", "production"] = Field(description="Where to deploy")
    replicas: int = Field(description="How many replicas", ge=1, le=10)
    canary: bool = Field(default=False, description="Start with a canary")
    reason: str = Field(description="Why")
    api_token: str = Field(default="", description="A token (audited masked)")


def build(log_path: Path) -> MCPServer:
    server = MCPServer("countersign-test")
    record_annotations = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)

    @server.tool(annotations=record_annotations)
    async def record(note: str, wait: float = 0) -> str:
        """Record a note (each execution appends one line to the log), then wait ``wait`` seconds to answer."""
        with log_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"tool": "record", "note": note, "pid": os.getppid()}) + "\n")
        await asyncio.sleep(wait)
        return f"recorded {note}"

    async def record_loudly(note: str, loud: bool = False) -> str:
        """Record a note, perhaps loudly (the changed ``record``)."""
        return await record(note.upper() if loud else note)

    def changed(what: str) -> None:
        """Change ``record``: ``schema`` (it takes ``loud`` too), ``annotations`` (it becomes destructive) or
        ``remove`` (it is gone)."""
        server.remove_tool("record")
        if what == "schema":
            server.add_tool(record_loudly, name="record", annotations=record_annotations)
        elif what == "annotations":
            server.add_tool(record, annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    async def change(what: str, ctx: Context) -> str:
        """Change ``record`` (``schema``, ``annotations`` or ``remove``), then tell the client its tool list changed."""
        changed(what)
        await ctx.session.send_tool_list_changed()
        return f"changed: {what}"

    server.changed = changed  # type: ignore[attr-defined]  # for main's ``changed WHAT``

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    def peek() -> str:
        """How many notes were recorded."""
        lines = log_path.read_text(encoding="utf-8").splitlines() if log_path.exists() else []
        return f"{len(lines)} notes"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    def plan(note: str) -> str:
        """What ``record`` would do with this note (its preview): the note's number and text."""
        lines = log_path.read_text(encoding="utf-8").splitlines() if log_path.exists() else []
        return f"note {len(lines) + 1} would be {note!r}"

    @server.tool()
    def bare(value: int) -> str:
        """A tool without annotations."""
        return f"bare {value}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def broken() -> str:
        """Always fails."""
        raise RuntimeError("the disk is on fire")

    _add_waiting_tools(server, log_path)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def crash() -> str:
        """The server process dies (for restart tests)."""
        os._exit(3)

    return server


def _add_waiting_tools(server: MCPServer, log_path: Path) -> None:
    """The tools that wait on something (time, a person), logging their events to ``log_path``."""

    def log(entry: dict) -> None:
        with log_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(entry) + "\n")

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        if seconds > 0:
            log({"tool": "slow", "event": "started"})
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:  # notifications/cancelled from the client
            log({"tool": "slow", "event": "cancelled"})
            raise
        return "woke up"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    async def deploy(service: str, ctx: Context) -> str:
        """Deploy a service, asking the person how."""
        log({"tool": "deploy", "event": "started"})
        answer = await ctx.elicit(f"How should {service} be deployed?", DeployForm)
        log(
            {
                "tool": "deploy",
                "event": answer.action,
                **(answer.data.model_dump() if answer.action == "accept" else {}),
            }
        )
        if answer.action != "accept":
            return f"not deployed ({answer.action})"
        form = answer.data
        return f"deployed {service} to {form.environment} x{form.replicas} canary={form.canary}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    async def login(ctx: Context) -> str:
        """Ask the person to sign in on a web page."""
        answer = await ctx.elicit_url("Sign in to continue", "https://auth.example.com/device?code=ABC", "login-1")
        return f"login {answer.action}"


def main(argv: list[str]) -> None:
    if len(argv) > 2 and argv[1] == "after":  # LOG after FLAG: a server that cannot start until FLAG exists
        if not Path(argv[2]).exists():
            sys.exit(f"not yet: {argv[2]} does not exist")
        argv = argv[:1]
    server = build(Path(argv[0]))
    if len(argv) > 2 and argv[1] == "changed":  # LOG changed WHAT: started with ``record`` already changed
        server.changed(argv[2])  # type: ignore[attr-defined]
        argv = argv[:1]
    if len(argv) > 1 and argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(argv[2]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
