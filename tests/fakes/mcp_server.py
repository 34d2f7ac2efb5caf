"""A small MCP server (the SDK's ``MCPServer``) for exact control in the MCP tests.

``python -m tests.fakes.mcp_server LOG [stdio|http PORT]``: every execution of ``record`` appends
one JSON line to LOG, so a test counts what really ran. Tools: ``record`` (annotated as not
destructive), ``peek`` (read-only), ``bare`` (no annotations at all), ``broken`` (an ``isError``
result), ``slow`` (sleeps, for timeouts and cancellation; a cancelled one logs ``{"tool": "slow", "event":
"cancelled"}``), ``crash`` (the process exits), ``deploy`` (asks for a form: elicitation) and ``login`` (asks the
person to open a link: URL-mode elicitation). ``slow`` and ``deploy`` log ``started`` first, so a test knows the
call reached the server.
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


class DeployForm(BaseModel):
    """What ``deploy`` asks for (strings, numbers, booleans and an enum)."""

    environment: Literal["staging", "production"] = Field(description="Where to deploy")
    replicas: int = Field(description="How many replicas", ge=1, le=10)
    canary: bool = Field(default=False, description="Start with a canary")
    reason: str = Field(description="Why")
    api_token: str = Field(default="", description="A token (audited masked)")


def build(log_path: Path) -> MCPServer:
    server = MCPServer("countersign-test")

    @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False))
    def record(note: str) -> str:
        """Record a note (each execution appends one line to the log)."""
        with log_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"tool": "record", "note": note}) + "\n")
        return f"recorded {note}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False))
    def peek() -> str:
        """How many notes were recorded."""
        lines = log_path.read_text(encoding="utf-8").splitlines() if log_path.exists() else []
        return f"{len(lines)} notes"

    @server.tool()
    def bare(value: int) -> str:
        """A tool without annotations."""
        return f"bare {value}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def broken() -> str:
        """Always fails."""
        raise RuntimeError("the disk is on fire")

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

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def crash() -> str:
        """The server process dies (for restart tests)."""
        os._exit(3)

    return server


def main(argv: list[str]) -> None:
    server = build(Path(argv[0]))
    if len(argv) > 1 and argv[1] == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(argv[2]))
    else:
        server.run("stdio")


if __name__ == "__main__":
    main(sys.argv[1:])
