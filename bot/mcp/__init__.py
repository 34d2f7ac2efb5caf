"""Tools from MCP servers (``COUNTERSIGN_MCP_CONFIG``), offered to the agent as ordinary :class:`bot.tools.Tool`\\ s.

Each MCP tool becomes ``<server>__<tool>``; its annotations give its default policy (``readOnlyHint``
runs without asking, anything else asks, ``destructiveHint`` puts the confirm dialog on Approve), and an
admin's ``policy set`` rule always wins, because the engine's policies are consulted first. See docs/mcp.md.
"""

from bot.mcp.config import MCPConfigError, MCPServerConfig, load_mcp_config, parse_mcp_config
from bot.mcp.manager import MCPManager, MCPServerStatus
from bot.mcp.naming import mcp_tool_name
from bot.mcp.tools import MCPToolInfo, mcp_tool

__all__ = [
    "MCPConfigError",
    "MCPManager",
    "MCPServerConfig",
    "MCPServerStatus",
    "MCPToolInfo",
    "load_mcp_config",
    "mcp_tool",
    "mcp_tool_name",
    "parse_mcp_config",
]
