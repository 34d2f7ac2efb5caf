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
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from bot.mcp.config import MCPServerConfig
from bot.mcp.elicitation import Elicitation
from bot.mcp.inflight import CallCancelled, CallsInFlight
from bot.mcp.naming import mcp_tool_name
from bot.mcp.tools import MCPTool, MCPToolInfo, mcp_tool, spec_fingerprint
from bot.tools import ToolInvocationError

if TYPE_CHECKING:
    from mcp.client.session import MessageHandlerFnT

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


@dataclass(frozen=True)
class MCPReload:
    """What ``mcp reload`` did, by server name."""

    started: list[str]
    restarted: list[str]
    stopped: list[str]
    unchanged: list[str]


@dataclass
class _Server:
    config: MCPServerConfig
    status: MCPServerStatus
    session: Any = None
    specs: list[Any] = field(default_factory=list)
    """The server's tools as it lists them now (re-listed on ``notifications/tools/list_changed``)."""
    offered: list[Any] | None = None
    """The tools offered to the model: the first listing in this process (or since ``mcp reload``). A call of one
    whose schema or annotations differ in :attr:`specs` is refused (:meth:`MCPManager.refusal`)."""
    listed: dict[str, str] = field(default_factory=dict)
    """:attr:`specs` as ``{tool: fingerprint}``."""
    offered_fingerprints: dict[str, str] = field(default_factory=dict)
    """:attr:`offered` as ``{tool: fingerprint}``."""

    def list_now(self, specs: list[Any]) -> None:
        """The server lists ``specs`` now (``[]``: it is down)."""
        self.specs = specs
        self.listed = {spec.name: spec_fingerprint(spec) for spec in specs}
        self.status.tool_count = len(specs)

    def offer(self, specs: list[Any]) -> None:
        """Offer ``specs`` to the model (the first listing, or at ``mcp reload``)."""
        self.offered = specs
        self.offered_fingerprints = {spec.name: spec_fingerprint(spec) for spec in specs}

    relist: asyncio.Task[None] | None = None
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
        self.on_tools_changed: Callable[[], Awaitable[None]] | None = None
        """Awaited when :meth:`tools` changes after :meth:`start` (a server first connected late, ``mcp reload``)."""
        self._started = False
        self._reloading = asyncio.Lock()
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
        self._started = True

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
            for spec in server.offered or ():
                tool_name = mcp_tool_name(name, spec.name, taken)
                taken.add(tool_name)
                preview = server.config.previews.get(spec.name)
                out.append(mcp_tool(name, tool_name, spec, self.call, preview, check=self.refusal))
        return out

    def server_of(self, tool_name: str) -> str | None:
        """The configured server whose tools are named ``<server>__…`` like ``tool_name``, else ``None``."""
        return next((name for name in self._servers if tool_name.startswith(f"{name}__")), None)

    def connected(self, server_name: str) -> bool:
        """Whether ``server_name`` is configured and connected now."""
        server = self._servers.get(server_name)
        return server is not None and server.session is not None

    def refusal(self, info: MCPToolInfo) -> str | None:
        """Why a call of the tool ``info`` describes (as it was offered and shown) may not run now, else ``None``.

        The server is down, or its tool list changed since (``notifications/tools/list_changed``, a restart of
        the server) so that the tool is gone or its input schema or annotations differ.
        """
        return self._refusal(info.server, info.tool, info.fingerprint)

    def _refusal(self, server_name: str, tool: str, fingerprint: str) -> str | None:
        server = self._servers.get(server_name)
        if server is None or server.session is None:
            return not_connected(server_name)
        now = server.listed.get(tool)
        if now is None:
            return (
                f"the MCP server {server_name} no longer offers the tool {tool} (its tool list changed "
                "since this call was made), so it was not run"
            )
        if now != fingerprint:
            return (
                f"the tool {tool} changed on the MCP server {server_name} since this call was made (its input "
                "schema or annotations differ), so it was not run; ask again to use the tool as it is now"
            )
        return None

    async def settled(self, server_name: str) -> None:
        """Wait for a re-listing of ``server_name``'s tools in progress, if any (tests bound it with a timeout)."""
        task = self._servers[server_name].relist
        if task is not None:
            await asyncio.shield(task)

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
        offered = server.offered_fingerprints.get(tool)
        if offered is not None and server.listed.get(tool) != offered:  # never run against a changed tool
            problem = self._refusal(server_name, tool, offered)
            raise MCPCallError(f"error from {server_name}: {problem}", tool)
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

    async def reload(self, servers: Sequence[MCPServerConfig]) -> MCPReload:
        """Make the running servers those of ``servers`` (``mcp reload``): restart the changed ones, start the new
        ones, stop the removed ones; return once each started one has been tried.

        Every server's tools are offered as listed now (a tool list that changed since is picked up here), and
        :attr:`on_tools_changed` is awaited once.
        """
        async with self._reloading:  # one reload at a time: each diffs against what the last one left
            return await self._reload(servers)

    async def _reload(self, servers: Sequence[MCPServerConfig]) -> MCPReload:
        wanted = {s.name: s for s in servers}
        old = self._servers
        outcome = MCPReload(
            started=[n for n in wanted if n not in old],
            restarted=[n for n in wanted if n in old and old[n].config != wanted[n]],
            stopped=[n for n in old if n not in wanted],
            unchanged=[n for n in wanted if n in old and old[n].config == wanted[n]],
        )
        for name in (*outcome.stopped, *outcome.restarted):
            await _stop(old[name])
        fresh = {*outcome.started, *outcome.restarted}
        self._servers = {
            name: old[name]
            if name not in fresh
            else _Server(config=cfg, status=MCPServerStatus(name=name, transport=cfg.transport))
            for name, cfg in wanted.items()
        }
        for name in outcome.unchanged:
            server = self._servers[name]
            if server.session is not None:
                server.offer(server.specs)
        for name in fresh:
            server = self._servers[name]
            server.task = asyncio.create_task(self._run(server), name=f"mcp-{name}")
        await asyncio.gather(*(self._servers[n].tried.wait() for n in fresh))
        await self._tools_changed()
        return outcome

    async def _tools_changed(self) -> None:
        if self.on_tools_changed is None:
            return
        try:
            await self.on_tools_changed()
        except Exception as exc:  # noqa: BLE001 - the servers keep running; the next change offers the tools again
            log.warning("offering the MCP servers' tools failed: %s", _one_line(exc))

    def cancel_run(self, run_id: str, actor: str) -> list[str]:
        """Cancel ``run_id``'s calls in flight (``notifications/cancelled``); the names of the tools cancelled."""
        return self.calls.cancel_run(run_id, actor)

    async def aclose(self) -> None:
        """Stop every server (stdio processes end with their sessions)."""
        self._closing = True
        servers = list(self._servers.values())
        for server in servers:
            if server.task is not None:
                server.task.cancel()
        for server in servers:
            await _stop(server)

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
                server.list_now([])
                if server.relist is not None:
                    server.relist.cancel()
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
                ClientSession(
                    read,
                    write,
                    message_handler=self._handler(server),
                    elicitation_callback=self.elicitation.callback(cfg.name),
                )
            )
            # A server's first answer may take longer than its calls' ``timeout`` (npm, Python start-up).
            start_timeout = max(cfg.timeout, START_TIMEOUT)
            await asyncio.wait_for(session.initialize(), start_timeout)
            specs = await asyncio.wait_for(_list_all_tools(session), start_timeout)
            server.list_now(specs)
            first = server.offered is None
            if first:
                server.offer(specs)
            server.session = session
            server.status.status = "ready"
            server.status.last_error = None
            server.tried.set()
            server.ready.set()
            if first and self._started:  # connected after start-up: its tools are offered from now on
                await self._tools_changed()
            await server.broken.wait()
            raise ConnectionError("the connection was lost")

    def _handler(self, server: _Server) -> MessageHandlerFnT:
        """The session's ``message_handler``: ``notifications/tools/list_changed`` re-lists the server's tools.

        The SDK awaits the handler inline while it reads the server's messages, so the listing (a request whose
        answer that same reader delivers) runs as a task of its own.
        """
        import mcp.types as types

        async def handle(message: Any) -> None:
            if isinstance(message, types.ToolListChangedNotification) and server.session is not None:
                if server.relist is not None:
                    server.relist.cancel()
                server.relist = asyncio.create_task(self._relist(server), name=f"mcp-relist-{server.config.name}")

        return handle

    async def _relist(self, server: _Server) -> None:
        session = server.session
        if session is None:
            return
        try:
            specs = await asyncio.wait_for(_list_all_tools(session), max(server.config.timeout, START_TIMEOUT))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed listing keeps the last one; the next call finds a dead link
            log.warning("MCP server %s: re-listing its tools failed: %s", server.config.name, _one_line(exc))
            return
        if server.session is session:
            server.list_now(specs)
            log.info("MCP server %s changed its tool list (%d tools)", server.config.name, len(specs))


async def _stop(server: _Server) -> None:
    """End a server's task (a stdio server's process ends with its session)."""
    if server.task is None:
        return
    server.task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await server.task


def not_connected(server: str) -> str:
    """What a call (or an approval of one) of a tool of ``server`` is told while the server is down."""
    return f"the MCP server {server} is not connected; try again when it is"


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
