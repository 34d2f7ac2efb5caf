"""``COUNTERSIGN_MCP_CONFIG``: the JSON file MCP clients share (``{"mcpServers": {NAME: {...}}}``).

``command`` means a stdio server, ``url`` a Streamable HTTP one. ``previews`` maps a tool of the server to
another of its tools that previews it (issue 30): ``"previews": {"apply": "plan"}`` makes ``deploy__apply``'s
approval show what ``plan`` answers to the same arguments (``docs/previews.md``). ``${VAR}`` in ``env`` and ``headers``
values expands from the environment; the expanded values are never logged (``repr`` hides them).
Every problem is one :class:`MCPConfigError` line naming the server and the key or variable.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_STDIO_KEYS = frozenset({"command", "args", "env", "cwd", "timeout", "previews"})
_HTTP_KEYS = frozenset({"url", "headers", "timeout", "previews"})
_TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,40}")
DEFAULT_TIMEOUT_SECONDS = 60.0


class MCPConfigError(ValueError):
    """A bad ``COUNTERSIGN_MCP_CONFIG``: one line, naming the server and what is wrong."""


@dataclass(frozen=True)
class MCPServerConfig:
    """One configured server. ``env`` / ``headers`` hold expanded secrets and are left out of ``repr``."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    previews: Mapping[str, str] = field(default_factory=dict)
    """A tool's name on this server → the name of the server's tool that previews it (same arguments)."""

    @property
    def transport(self) -> str:
        """``stdio`` or ``http``."""
        return "stdio" if self.command is not None else "http"


def load_mcp_config(environ: Mapping[str, str] | None = None) -> list[MCPServerConfig]:
    """The servers ``COUNTERSIGN_MCP_CONFIG`` names (none when it is unset or empty)."""
    env = os.environ if environ is None else environ
    raw_path = (env.get("COUNTERSIGN_MCP_CONFIG") or "").strip()
    if not raw_path:
        return []
    path = Path(raw_path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MCPConfigError(f"COUNTERSIGN_MCP_CONFIG: the file {path} does not exist") from None
    except IsADirectoryError:
        raise MCPConfigError(f"COUNTERSIGN_MCP_CONFIG: {path} is a folder, not a file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MCPConfigError(f"COUNTERSIGN_MCP_CONFIG: cannot read {path} ({exc})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MCPConfigError(
            f"COUNTERSIGN_MCP_CONFIG: {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from None
    return parse_mcp_config(data, env)


def parse_mcp_config(data: Any, environ: Mapping[str, str]) -> list[MCPServerConfig]:
    """Check ``data`` (the parsed file) and expand its ``${VAR}``\\ s from ``environ``."""
    if not isinstance(data, dict):
        raise MCPConfigError('COUNTERSIGN_MCP_CONFIG: the file must hold a JSON object {"mcpServers": {...}}')
    unknown_top = sorted(set(data) - {"mcpServers"})
    if unknown_top:
        raise MCPConfigError(f"COUNTERSIGN_MCP_CONFIG: unknown key {unknown_top[0]!r} (only 'mcpServers' is allowed)")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise MCPConfigError("COUNTERSIGN_MCP_CONFIG: 'mcpServers' must be an object of server name to settings")
    return [_server(str(name), spec, environ) for name, spec in servers.items()]


def _server(name: str, spec: Any, environ: Mapping[str, str]) -> MCPServerConfig:
    where = f"COUNTERSIGN_MCP_CONFIG: server {name!r}"
    if not _SERVER_NAME.fullmatch(name) or "__" in name:
        raise MCPConfigError(f"{where}: a name is 1-40 letters, digits, '_' or '-', without '__'")
    if not isinstance(spec, dict):
        raise MCPConfigError(f"{where}: its settings must be a JSON object")
    if "command" in spec and "url" in spec:
        raise MCPConfigError(f"{where}: give either 'command' (stdio) or 'url' (Streamable HTTP), not both")
    if "command" not in spec and "url" not in spec:
        raise MCPConfigError(f"{where}: has neither 'command' (stdio) nor 'url' (Streamable HTTP)")
    allowed = _STDIO_KEYS if "command" in spec else _HTTP_KEYS
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise MCPConfigError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
    timeout = spec.get("timeout", DEFAULT_TIMEOUT_SECONDS)
    previews = _previews(where, spec.get("previews", {}))
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
        raise MCPConfigError(f"{where}: 'timeout' must be a positive number of seconds, got {timeout!r}")
    if "command" in spec:
        command = spec["command"]
        if not isinstance(command, str) or not command.strip():
            raise MCPConfigError(f"{where}: 'command' must be a non-empty string")
        args = spec.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise MCPConfigError(f"{where}: 'args' must be a list of strings")
        cwd = spec.get("cwd")
        if cwd is not None and not isinstance(cwd, str):
            raise MCPConfigError(f"{where}: 'cwd' must be a string")
        return MCPServerConfig(
            name=name,
            command=command,
            args=tuple(args),
            env=_expanded(where, "env", spec.get("env", {}), environ),
            cwd=cwd,
            timeout=float(timeout),
            previews=previews,
        )
    url = spec["url"]
    if not isinstance(url, str) or not re.match(r"https?://", url):
        raise MCPConfigError(f"{where}: 'url' must be an http:// or https:// address")
    return MCPServerConfig(
        name=name,
        url=url,
        headers=_expanded(where, "headers", spec.get("headers", {}), environ),
        timeout=float(timeout),
        previews=previews,
    )


def _previews(where: str, value: Any) -> dict[str, str]:
    """``previews``: an object of the server's tool names to the names of the tools previewing them."""
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise MCPConfigError(f"{where}: 'previews' must be an object of tool name to preview tool name")
    for tool, preview in value.items():
        if not _TOOL_NAME.fullmatch(tool) or not _TOOL_NAME.fullmatch(preview):
            raise MCPConfigError(
                f"{where}: previews.{str(tool)[:64]}: tool names are 1-128 letters, digits, '_', '.' or '-'"
            )
        if tool == preview:
            raise MCPConfigError(f"{where}: previews.{tool}: a tool cannot preview itself")
    return {str(k): v for k, v in value.items()}


def _expanded(where: str, key: str, values: Any, environ: Mapping[str, str]) -> dict[str, str]:
    if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
        raise MCPConfigError(f"{where}: {key!r} must be an object of string values")
    out: dict[str, str] = {}
    for k, v in values.items():

        def sub(match: re.Match[str], entry: str = str(k)) -> str:
            var = match.group(1)
            if var not in environ:
                raise MCPConfigError(f"{where}: {key}.{entry} uses ${{{var}}}, but {var} is not set")
            return environ[var]

        out[str(k)] = _VAR.sub(sub, v)
    return out
