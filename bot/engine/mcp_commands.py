"""``mcp list`` (anyone) and ``mcp reload`` (admins, audited): the MCP servers of this process (issue 25)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from bot.engine.admin_syntax import AdminCommand
from bot.engine.errors import CommandError
from bot.engine.model import AdminRequest
from bot.mcp.config import MCPConfigError, load_mcp_config
from bot.redaction import mask_text

if TYPE_CHECKING:
    from bot.mcp import MCPManager
    from storage.async_protocols import AsyncStores

MAX_ERROR_CHARS = 200
NONE_CONFIGURED = "No MCP servers are configured (COUNTERSIGN_MCP_CONFIG names none)."


class MCPCommands:
    """Runs ``mcp list`` and ``mcp reload`` against the process's :class:`~bot.mcp.MCPManager`."""

    def __init__(self, storage: AsyncStores, clock: Callable[[], datetime]) -> None:
        self.storage = storage
        self.clock = clock
        self.manager: MCPManager | None = None
        """The process's MCP servers (set by ``Engine.create``; ``None``: an engine built without it)."""

    async def run(self, command: AdminCommand, request: AdminRequest) -> str:
        """Answer one ``mcp …`` command (the caller checked that a reload comes from an admin)."""
        if self.manager is None:
            raise CommandError("MCP servers are not available in this process.")
        if command.name == "mcp list":
            return self.listing()
        return await self.reload(request)

    def listing(self) -> str:
        """Each server with its transport, status, tool count and last error (masked, cut)."""
        assert self.manager is not None
        statuses = self.manager.statuses()
        if not statuses:
            return NONE_CONFIGURED
        lines = ["MCP servers:"]
        for s in statuses:
            tools = "1 tool" if s.tool_count == 1 else f"{s.tool_count} tools"
            line = f"  {s.name} ({s.transport}): {s.status}, {tools}"
            if s.last_error:
                error = mask_text(s.last_error)
                cut = error if len(error) <= MAX_ERROR_CHARS else error[: MAX_ERROR_CHARS - 1] + "…"
                line += f"; last error: {cut}"
            lines.append(line)
        return "\n".join(lines)

    async def reload(self, request: AdminRequest) -> str:
        """Re-read ``COUNTERSIGN_MCP_CONFIG`` and apply it; a broken file changes nothing (one line says why)."""
        assert self.manager is not None
        workspace = f"{request.platform}:{request.workspace}"
        try:
            servers = load_mcp_config()
        except MCPConfigError as exc:
            details = {"error": str(exc), "workspace": workspace}
            await self.storage.audit.append(request.actor, "mcp reload refused", "mcp", details, now=self.clock())
            return f"Not reloaded: {exc}. The running MCP servers are unchanged."
        outcome = await self.manager.reload(servers)
        details = {
            "started": outcome.started,
            "restarted": outcome.restarted,
            "stopped": outcome.stopped,
            "unchanged": outcome.unchanged,
            "workspace": workspace,
        }
        await self.storage.audit.append(request.actor, "mcp reload", "mcp", details, now=self.clock())
        said = [
            f"{verb} {', '.join(names)}"
            for verb, names in (
                ("started", outcome.started),
                ("restarted", outcome.restarted),
                ("stopped", outcome.stopped),
                ("unchanged", outcome.unchanged),
            )
            if names
        ]
        summary = "; ".join(said) if said else "no servers configured"
        return f"MCP configuration reloaded: {summary}.\n{self.listing()}"
