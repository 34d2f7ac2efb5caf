"""Justification: ``justification <tool> required|off`` makes approving a call of the tool need a short reason.

The setting is stored per tool (``storage.tool_settings``, setting ``justification``; for every channel). The
reason is the decision's ``feedback``: stored with the decision (``approvals.decide``), written in its audit entry
(``details["feedback"]``) and shown on the decided card ("Approved by … Reason: …"). The check costs no read of
its own: an approval without a reason asks the decision's own write to require that the tool needs none
(``tool_settings.is_not``), and a refused write raises :class:`JustificationRequired`, on which an adapter asks
for the reason (a Slack modal, a Teams input, a console prompt) and decides again with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.engine.errors import EngineError
from bot.engine.tool_switches import set_tool_switch
from storage.batch import Batch, stores

if TYPE_CHECKING:
    from bot.engine.admin_syntax import AdminCommand
    from bot.engine.model import AdminRequest
    from bot.tools import Tool
    from storage.async_protocols import AsyncStores
    from storage.protocols import ApprovalRecord

JUSTIFICATION = "justification"
REQUIRED, OFF = "required", "off"
MAX_REASON_CHARS = 500


class JustificationRequired(EngineError):
    """Approving this call needs a reason; nothing was decided."""

    def __init__(self, tool_name: str) -> None:
        super().__init__(
            f"Approving {tool_name} needs a short reason: nothing was decided. Approve again with a reason."
        )
        self.tool_name = tool_name


def needs_check(record: ApprovalRecord, action: str, feedback: str | None) -> bool:
    """Whether a decision must check that the tool requires no reason: an approval of a call, without one."""
    return record.kind == "approval" and action in ("confirm", "modify") and not (feedback or "").strip()


def add_check(batch: Batch, record: ApprovalRecord) -> Any:
    """Require, in the decision's write, that the tool needs no reason (the handle, to tell the refusal apart)."""
    return batch.require(stores.tool_settings.is_not, record.tool_name, JUSTIFICATION, REQUIRED)


def reason_of(feedback: str | None) -> str | None:
    """A reason as stored: stripped, at most :data:`MAX_REASON_CHARS` (``None`` when empty)."""
    text = (feedback or "").strip()
    return text[:MAX_REASON_CHARS] or None


async def run_command(
    storage: AsyncStores,
    tools: Mapping[str, Tool],
    clock: Callable[[], datetime],
    command: AdminCommand,
    request: AdminRequest,
) -> str:
    """``justification <tool> required|off`` (admins only; audited) and ``justification list``."""
    if command.name == "justification list":
        required = sorted(t for t, v in (await storage.tool_settings.values(JUSTIFICATION)).items() if v == REQUIRED)
        return "Approving needs a reason for: " + ", ".join(required) if required else "No tool needs a reason."
    value = REQUIRED if command.value else None
    tool_name = command.tool_key or ""
    await set_tool_switch(storage, tools, clock, request, tool_name, JUSTIFICATION, value)
    if value:
        return f"Approving {tool_name} now needs a short reason."
    return f"Approving {tool_name} no longer needs a reason."
