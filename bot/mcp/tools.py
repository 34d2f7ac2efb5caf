"""One MCP tool as an ordinary :class:`bot.tools.Tool`, its default policy taken from its annotations."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bot.canonical import canonical_json
from bot.tools import Tool

CallFn = Callable[[str, str, dict[str, Any]], Awaitable[str]]
"""``(server, tool, arguments) -> result text``; raises for an error result."""


@dataclass(frozen=True)
class MCPToolInfo:
    """What the server said about a tool, kept on :attr:`MCPTool.mcp` (annotations are only hints)."""

    server: str
    tool: str
    """The tool's name on its server (the agent sees :attr:`Tool.name`, ``<server>__<tool>``)."""
    read_only: bool
    destructive: bool
    idempotent: bool
    open_world: bool
    fingerprint: str
    """A hash of the input schema and annotations: an approval binds to it when the call pauses."""


@dataclass
class MCPTool(Tool):
    """A :class:`Tool` whose function calls an MCP server. ``mcp`` holds its server-side facts."""

    mcp: MCPToolInfo | None = None
    check: Callable[[MCPToolInfo], str | None] | None = field(default=None, repr=False, compare=False)
    """Why a call may not run now (its server is down, the tool changed on it), else ``None``: the manager's."""

    @property
    def open_world(self) -> bool:
        """MCP's ``openWorldHint`` (the card shows it; its results come from outside)."""
        return self.mcp is not None and self.mcp.open_world

    @property
    def binding(self) -> str | None:
        """The fingerprint of the tool's input schema and annotations as offered: a paused call binds to it."""
        return self.mcp.fingerprint if self.mcp is not None else None

    def refusal(self) -> str | None:
        """Why a call of this tool, as it was offered, may not run now (a sentence), else ``None``."""
        return None if self.mcp is None or self.check is None else self.check(self.mcp)


def mcp_tool(
    server: str,
    name: str,
    spec: Any,
    call: CallFn,
    preview: str | None = None,
    *,
    check: Callable[[MCPToolInfo], str | None] | None = None,
) -> MCPTool:
    """Build the tool for ``spec`` (an ``mcp.types.Tool``) offered as ``name``.

    ``preview``: the name on the same server of the tool that previews this one (the configuration's
    ``previews``): its answer to the call's arguments is the call's preview (``bot.hitl.previews``); an error
    from it is shown as a failed preview.

    Defaults from annotations (MCP's own defaults when absent): ``readOnlyHint`` true runs without
    asking (``confirmation_default="never"``); anything else asks (``"always"``), and a tool that is
    not read-only is destructive unless it says ``destructiveHint: false``.
    """
    info = tool_info(server, spec)
    schema = _schema(spec)
    read_only, destructive, open_world = info.read_only, info.destructive, info.open_world
    remote = spec.name

    async def invoke(**arguments: Any) -> str:
        return await call(server, remote, arguments)

    async def previewed(**arguments: Any) -> str:
        assert preview is not None
        return await call(server, preview, arguments)

    description = (spec.description or spec.title or remote).strip()
    if open_world:
        description = f"{description} (open world: reaches outside systems)"
    return MCPTool(
        name=name,
        description=f"[{server}] {description}",
        parameters=schema,
        function=invoke,
        confirmation_default="never" if read_only else "always",
        destructive=destructive,
        preview=previewed if preview is not None else None,
        mcp=info,
        check=check,
    )


def tool_info(server: str, spec: Any) -> MCPToolInfo:
    """What ``spec`` (an ``mcp.types.Tool`` of ``server``) says: its hints and its fingerprint."""
    ann = spec.annotations
    read_only = bool(ann is not None and ann.read_only_hint)
    return MCPToolInfo(
        server=server,
        tool=spec.name,
        read_only=read_only,
        destructive=not read_only and (ann is None or ann.destructive_hint is None or bool(ann.destructive_hint)),
        idempotent=bool(ann is not None and ann.idempotent_hint),
        open_world=ann is None or ann.open_world_hint is None or bool(ann.open_world_hint),
        fingerprint=spec_fingerprint(spec),
    )


def spec_fingerprint(spec: Any) -> str:
    """The fingerprint of ``spec``'s input schema and annotations (what an approval binds to)."""
    annotations = spec.annotations.model_dump(by_alias=True, exclude_none=True) if spec.annotations is not None else {}
    return tool_fingerprint(_schema(spec), annotations)


def _schema(spec: Any) -> dict[str, Any]:
    schema = dict(spec.input_schema or {"type": "object", "properties": {}})
    schema.setdefault("type", "object")
    return schema


def tool_fingerprint(schema: dict[str, Any], annotations: dict[str, Any]) -> str:
    """A stable hash of what an approval binds to."""
    import hashlib

    return hashlib.sha256(canonical_json({"schema": schema, "annotations": annotations}).encode()).hexdigest()[:16]
