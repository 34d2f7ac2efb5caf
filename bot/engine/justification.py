"""Justification: ``justification <tool> required|off`` makes approving a call of the tool need a short reason.

The reason may come with the request instead: a requester who writes "restart payments-api because the disk is
full" gives "the disk is full" as the reason of every call of the run that message started (the words after the
first "because", :func:`request_reason`). The pause stores it with each approval (``ApprovalRecord.request_reason``)
and in its audit entry (``details["request_reasons"]``); the card shows it (:func:`request_reason_lines`), and an
approval of such a call needs no reason of its own (the decision's audit entry carries both).

The setting is stored per tool (``storage.tool_settings``, setting ``justification``; for every channel). The
reason is the decision's ``feedback``: stored with the decision (``approvals.decide``), written in its audit entry
(``details["feedback"]``) and shown on the decided card ("Approved by … Reason: …"). The check costs no read of
its own: an approval without a reason asks the decision's own write to require that the tool needs none
(``tool_settings.is_not``), and a refused write raises :class:`JustificationRequired`, on which an adapter asks
for the reason (a Slack modal, a Teams input, a console prompt) and decides again with it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.engine.errors import EngineError
from bot.engine.tool_switches import set_tool_switch
from bot.messages import ChatMessage, ChatRole
from bot.redaction import mask_text
from storage.batch import Batch, stores

if TYPE_CHECKING:
    from bot.engine.admin_syntax import AdminCommand
    from bot.engine.model import AdminRequest, ApprovalView
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
    """Whether a decision must check that the tool requires no reason: an approval of a call, without one (neither
    from the approver nor in the request)."""
    return (
        record.kind == "approval"
        and action in ("confirm", "modify")
        and not (feedback or "").strip()
        and not record.request_reason
    )


_BECAUSE = re.compile(r"\bbecause\b[\s,:]*(.*)", re.IGNORECASE | re.DOTALL)


def request_reason(text: str | None) -> str | None:
    """The reason a request gives: the words after its first "because", stripped, at most
    :data:`MAX_REASON_CHARS` (``None``: no reason given).

    >>> request_reason("<@B1> restart payments-api because the disk is full (OPS-17)")
    'the disk is full (OPS-17)'
    """
    match = _BECAUSE.search(text or "")
    return reason_of(" ".join(match.group(1).split())) if match else None


def reason_of_request(messages: Sequence[ChatMessage], requester: str) -> str | None:
    """The reason given by the requester's latest message in ``messages`` (the one that started the run)."""
    for message in reversed(messages):
        if message.role == ChatRole.USER and message.meta.get("user") == requester:
            return request_reason(message.text)
    return None


def request_reason_lines(view: ApprovalView) -> list[str]:
    """Plain lines for a card (the adapter escapes them): the requester's reason, masked."""
    if not view.request_reason:
        return []
    return [f"Reason given by the requester: {mask_text(view.request_reason)}"]


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
