"""The MCP servers of one process: started once, restarted (stdio) or reconnected (HTTP) with back-off.

Each server lives in its own asyncio task that holds the ``mcp`` SDK's transport and
:class:`mcp.ClientSession` open (the SDK's task groups must be entered and left by one task). A
server that cannot start is reported (one log line, :meth:`MCPManager.degraded`) and its tools are
absent; the others keep working. Calls from the agent go through :meth:`MCPManager.call`: a server
that is down, a call past the server's ``timeout`` and an ``isError`` result all raise
:class:`MCPCallError`, whose text begins "error from <server>:".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bot.mcp.config import MCPServerConfig
from bot.mcp.elicitation import Elicitation
from bot.mcp.inflight import CallCancelled, CallsInFlight
from bot.mcp.naming import mcp_tool_name
from bot.mcp.tools import MCPTool, mcp_tool
from bot.tools import ToolInvocationError

log = logging.getLogger("countersign.mcp")
BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
START_TIMEOUT = 30.0


class MCPCallError(ToolInvocationError):
    """A failed MCP call; its message names the server and begins with "error from"."""


@dataclass
class MCPServerStatus:
    """What ``mcp list`` shows for one server."""

    name: str
    transport: str
    status: str = "starting"
    """``starting``, ``ready`` or ``failed``."""
    tool_count: int = 0
    last_error: str | None = None


@dataclass
class _Server:
    config: MCPServerConfig
    status: MCPServerStatus
    session: Any = None
    specs: list[Any] = field(default_factory=list)
    tried: asyncio.Event = field(default_factory=asyncio.Event)
    broken: asyncio.Event = field(default_factory=asyncio.Event)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class MCPManager:
    """Connects to every configured server and exposes their tools as ``<server>__<tool>``."""

    def __init__(self, servers: Sequence[MCPServerConfig]) -> None:
        self._servers = {
            s.name: _Server(config=s, status=MCPServerStatus(name=s.name, transport=s.transport)) for s in servers
        }
        self._closing = False
        self.calls = CallsInFlight()
        """The calls sent and not answered: :meth:`cancel_run` cancels a stopped run's."""
        self.elicitation = Elicitation(self.calls)
        """Servers' questions during a call (``elicitation/create``); the engine sets its ``asker``."""

    async def start(self, wait_seconds: float | None = None) -> None:
        """Start every server; return once each has been tried (its tools listed, or it failed)."""
        for server in self._servers.values():
            if server.task is None:
                server.task = asyncio.create_task(self._run(server), name=f"mcp-{server.config.name}")
        waits = [s.tried.wait() for s in self._servers.values()]
        if waits:
            await asyncio.wait_for(asyncio.gather(*waits), wait_seconds)

    @property
    def all_tried(self) -> bool:
        """Whether every server has been tried (``/readyz`` waits for this)."""
        return all(s.tried.is_set() for s in self._servers.values())

    def degraded(self) -> list[str]:
        """The names of the servers that are not ready now."""
        return [name for name, s in self._servers.items() if s.status.status != "ready"]

    def statuses(self) -> list[MCPServerStatus]:
        """One status per configured server, in configuration order."""
        return [s.status for s in self._servers.values()]

    def tools(self) -> list[MCPTool]:
        """The tools of the servers that are ready, as ordinary tools."""
        taken: set[str] = set()
        out: list[MCPTool] = []
        for name, server in self._servers.items():
            for spec in server.specs:
                tool_name = mcp_tool_name(name, spec.name, taken)
                taken.add(tool_name)
                out.append(mcp_tool(name, tool_name, spec, self.call))
        return out

    async def wait_ready(self, server_name: str) -> None:
        """Wait until ``server_name`` is connected (after a restart, say); bound it with ``asyncio.timeout``."""
        await self._servers[server_name].ready.wait()

    def server_groups(self) -> dict[str, list[str]]:
        """``<server>__*`` to the names of that server's tools: the tool groups ``policy set deploy__* …`` uses."""
        groups: dict[str, list[str]] = {f"{name}__*": [] for name in self._servers}
        for tool in self.tools():
            if tool.mcp is not None:
                groups[f"{tool.mcp.server}__*"].append(tool.name)
        return groups

    async def call(self, server_name: str, tool: str, arguments: dict[str, Any]) -> str:
        """Call ``tool`` on ``server_name``; the text (and structured content) of its result."""
        server = self._servers.get(server_name)
        if server is None or server.session is None:
            raise MCPCallError(f"error from {server_name}: the server is not connected", tool)
        try:
            result = await self.calls.run(
                server_name, tool, server.config.timeout, lambda: server.session.call_tool(tool, arguments)
            )
        except CallCancelled as stopped:  # the server may have acted: nobody knows, so nobody may assume
            raise MCPCallError(f"error from {server_name}: outcome unknown: the call was {stopped}", tool) from None
        except TimeoutError:
            raise MCPCallError(
                f"error from {server_name}: no answer within {server.config.timeout:g} s", tool
            ) from None
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a dead transport, a JSON-RPC error, ...
            if _connection_lost(exc):  # restart (stdio) or reconnect (HTTP) now, with back-off
                server.status.status = "failed"
                server.session = None
                server.ready.clear()
                server.broken.set()
            raise MCPCallError(f"error from {server_name}: {_one_line(exc)}", tool) from None
        text = summarise_result(result)
        if result.is_error:
            raise MCPCallError(f"error from {server_name}: {text or 'the tool reported an error'}", tool)
        return text

    def cancel_run(self, run_id: str, actor: str) -> list[str]:
        """Cancel ``run_id``'s calls in flight (``notifications/cancelled``); the names of the tools cancelled."""
        return self.calls.cancel_run(run_id, actor)

    async def aclose(self) -> None:
        """Stop every server (stdio processes end with their sessions)."""
        self._closing = True
        tasks = [s.task for s in self._servers.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _run(self, server: _Server) -> None:
        backoff = BACKOFF_START
        while not self._closing:
            server.broken.clear()
            try:
                await self._session(server)
                backoff = BACKOFF_START
            except asyncio.CancelledError:
                raise
            except BaseException as exc:  # noqa: BLE001 - the SDK raises ExceptionGroups; any failure means retry
                error = _one_line(exc)
                if error != server.status.last_error:  # one line per new failure, not one per retry
                    log.warning("MCP server %s failed: %s", server.config.name, error)
                server.status.status = "failed"
                server.status.last_error = error
            finally:
                server.ready.clear()
                server.session = None
                server.specs = []
                server.status.tool_count = 0
                if server.status.status == "ready":
                    server.status.status = "failed"
                server.tried.set()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)

    async def _session(self, server: _Server) -> None:
        from mcp import ClientSession

        cfg = server.config
        async with contextlib.AsyncExitStack() as stack:
            if cfg.command is not None:
                from mcp.client.stdio import StdioServerParameters, stdio_client

                params = StdioServerParameters(command=cfg.command, args=list(cfg.args), env=dict(cfg.env), cwd=cfg.cwd)
                errlog = stack.enter_context(open(os.devnull, "w"))  # noqa: SIM115, ASYNC230 - /dev/null, closed by the stack
                read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
            else:
                from mcp.client.streamable_http import streamable_http_client
                from mcp.shared._httpx_utils import create_mcp_http_client

                assert cfg.url is not None
                client = await stack.enter_async_context(create_mcp_http_client(headers=dict(cfg.headers)))
                read, write = await stack.enter_async_context(streamable_http_client(cfg.url, http_client=client))
            session = await stack.enter_async_context(
                ClientSession(read, write, elicitation_callback=self.elicitation.callback(cfg.name))
            )
            # A server's first answer may take longer than its calls' ``timeout`` (npm, Python start-up).
            start_timeout = max(cfg.timeout, START_TIMEOUT)
            await asyncio.wait_for(session.initialize(), start_timeout)
            specs = await asyncio.wait_for(_list_all_tools(session), start_timeout)
            server.specs = specs
            server.session = session
            server.status.status = "ready"
            server.status.tool_count = len(specs)
            server.status.last_error = None
            server.tried.set()
            server.ready.set()
            await server.broken.wait()
            raise ConnectionError("the connection was lost")


async def _list_all_tools(session: Any) -> list[Any]:
    import mcp.types as types

    specs: list[Any] = []
    cursor: str | None = None
    while True:
        page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        specs.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return specs


def summarise_result(result: Any) -> str:
    """Text and structured content as they are; images, audio and resources summarised; links as links."""
    import json

    import mcp.types as types

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, types.TextContent):
            parts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            kind = "image" if isinstance(block, types.ImageContent) else "audio"
            parts.append(f"[{kind} {block.mime_type}, {len(block.data) * 3 // 4} bytes]")
        elif isinstance(block, types.ResourceLink):
            parts.append(f"[resource link: {block.name} <{block.uri}>]")
        elif isinstance(block, types.EmbeddedResource):
            res = block.resource
            if isinstance(res, types.TextResourceContents):
                parts.append(f"[resource {res.uri}]\n{res.text}")
            else:
                parts.append(f"[resource {res.uri}, {res.mime_type or 'binary'}]")
        else:
            parts.append(f"[{getattr(block, 'type', 'content')}]")
    if result.structured_content is not None and not parts:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts)


def _connection_lost(exc: BaseException) -> bool:
    import anyio
    from mcp.shared.exceptions import MCPError
    from mcp.types import CONNECTION_CLOSED

    if isinstance(exc, MCPError):
        return exc.code == CONNECTION_CLOSED
    return isinstance(exc, anyio.ClosedResourceError | anyio.BrokenResourceError | ConnectionError | EOFError)


def _one_line(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        return _one_line(exc.exceptions[0])
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
