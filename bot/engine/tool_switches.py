"""Per-tool switches admins set for every channel (``justification <tool> required|off``, ``respondable <tool>
on|off``): stored in ``storage.tool_settings``, audited under the setting's name."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from bot.engine.errors import CommandError

if TYPE_CHECKING:
    from bot.engine.model import AdminRequest
    from bot.tools import Tool
    from storage.async_protocols import AsyncStores

OFF = "off"


async def set_tool_switch(
    storage: AsyncStores,
    tools: Mapping[str, Tool],
    clock: Callable[[], datetime],
    request: AdminRequest,
    tool_name: str,
    setting: str,
    value: str | None,
) -> Tool:
    """Set ``setting`` of ``tool_name`` to ``value`` (``None``: off) and audit it; the tool, or :class:`CommandError`
    naming the known tools for an unknown one."""
    tool = tools.get(tool_name)
    if tool is None:
        raise CommandError(f"Unknown tool '{tool_name[:64]}'. Known tools: {', '.join(sorted(tools))}.")
    await storage.tool_settings.set_value(tool_name, setting, value, updated_by=request.actor, now=clock())
    await storage.audit.append(
        request.actor,
        setting,
        f"global/{tool_name}",
        {"fields": {setting: value or OFF}, "platform": request.platform},
        now=clock(),
    )
    return tool
