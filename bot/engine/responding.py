"""Respond in the engine (issue 30): a person answers in the tool's place, through the one decision path.

The check (:func:`checked_response`) refuses Respond on a tool that is not ``respondable``, on a result held for
review, and without text. The decision's own write records the call in the execution ledger as answered by a
person (:func:`add_ledger_entry`): begun and finished with the marked text, so nothing ever runs it (a recovery
finds the entry and reports the person's answer). The model gets the text marked as a human response
(:func:`bot.hitl.respond.human_response`, through :func:`bot.engine.decisions.decision_from_record`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from bot.canonical import args_digest
from bot.engine.decisions import ID_LESS_PREFIX
from bot.engine.errors import EngineError
from bot.engine.ledger import ledger_key
from bot.engine.tool_switches import set_tool_switch
from bot.hitl.respond import RespondRefused, human_response, respond_decision
from bot.tools import Tool
from storage.batch import Batch, stores
from storage.protocols import ApprovalRecord

if TYPE_CHECKING:
    from bot.engine.admin_syntax import AdminCommand
    from bot.engine.model import AdminRequest
    from storage.async_protocols import AsyncStores

ANSWERED_BY_A_PERSON = "answered by a person"
RESPONDABLE = "respondable"
"""The tool setting (``storage.tool_settings``, per tool, every channel) an admin's ``respondable <tool> on`` sets."""
ON = "on"


class RespondNotAllowed(EngineError):
    """A Respond that may not be given here; nothing was decided."""


async def allowed_by_policy(storage: AsyncStores, tool_name: str) -> bool:
    """Whether an admin turned Respond on for ``tool_name`` (``respondable <tool> on``)."""
    return (await storage.tool_settings.values(RESPONDABLE)).get(tool_name) == ON


class RespondableSettings:
    """The tools an admin turned Respond on for, as cards show them (``ApprovalView.respondable``): read at most once
    per ``seconds``, so rendering costs no read of its own. Like the group cache, it serves rendering only: a Respond
    is checked afresh (:func:`allowed_by_policy`), and this process's own ``respondable`` command forgets it."""

    def __init__(self, storage: AsyncStores, clock: Callable[[], datetime], seconds: float = 60.0) -> None:
        self.storage = storage
        self.clock = clock
        self.seconds = seconds
        self._read: tuple[datetime, frozenset[str]] | None = None

    async def load(self) -> frozenset[str]:
        """Read the setting now (the engine does at start, so a conversation's first card reads nothing)."""
        values = await self.storage.tool_settings.values(RESPONDABLE)
        self._read = (self.clock(), frozenset(t for t, v in values.items() if v == ON))
        return self._read[1]

    async def allows(self, tool_name: str) -> bool:
        """Whether Respond is on for ``tool_name`` by an admin's setting, as last read."""
        read = self._read
        if read is None or (self.clock() - read[0]).total_seconds() >= self.seconds:
            return tool_name in await self.load()
        return tool_name in read[1]

    def forget(self) -> None:
        """Read the setting again at the next card (after a change made here)."""
        self._read = None


async def run_command(
    storage: AsyncStores,
    tools: Mapping[str, Tool],
    clock: Callable[[], datetime],
    command: AdminCommand,
    request: AdminRequest,
    shown: RespondableSettings | None = None,
) -> str:
    """``respondable <tool> on|off`` (admins only; audited): allow Respond on a tool, as ``@tool(respondable=True)``
    does (``shown``: the cards' copy of the setting, forgotten after the change)."""
    tool_name = command.tool_key or ""
    value = ON if command.value else None
    tool = await set_tool_switch(storage, tools, clock, request, tool_name, RESPONDABLE, value)
    if shown is not None:
        shown.forget()
    if value:
        return f"Approvers of {tool_name} may now answer in its place (Respond)."
    if tool.respondable:
        return f"The admin setting is off; {tool_name} itself still allows Respond (respondable=True)."
    return f"Approvers of {tool_name} may no longer answer in its place."


def checked_response(
    tool: Tool | None, record: ApprovalRecord, text: str | None, *, policy_allows: bool = False
) -> str:
    """The person's answer as stored (stripped), or :class:`RespondNotAllowed` saying why not (``policy_allows``: an
    admin turned Respond on for the tool)."""
    if record.kind != "approval":
        raise RespondNotAllowed("A result under review cannot be answered in the tool's place; edit it instead.")
    if tool is None:
        raise RespondNotAllowed(f"The tool '{record.tool_name}' is no longer available.")
    try:
        respond_decision(tool, record.tool_call_id, text or "", policy_allows=policy_allows)
    except RespondRefused as exc:
        raise RespondNotAllowed(f"{exc} Nothing was decided.") from None
    return (text or "").strip()


def ledger_call_key(record: ApprovalRecord) -> str:
    """The execution ledger's key part for the approval's call (the model's id, or message id and position)."""
    key = record.tool_call_id
    return key[len(ID_LESS_PREFIX) :] if key.startswith(ID_LESS_PREFIX) else key


def add_ledger_entry(batch: Batch, record: ApprovalRecord, text: str) -> None:
    """Record the call in the ledger, in the decision's write, as answered by a person with ``text``."""
    key = ledger_key(record.run_id, ledger_call_key(record))
    batch.write(
        stores.ledger.begin, key, args_digest(record.arguments), run_id=record.run_id, tool_name=record.tool_name
    )
    batch.write(stores.ledger.finish, key, True, human_response(text))
