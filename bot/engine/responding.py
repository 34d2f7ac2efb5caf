"""Respond in the engine (issue 30): a person answers in the tool's place, through the one decision path.

The check (:func:`checked_response`) refuses Respond on a tool that is not ``respondable``, on a result held for
review, and without text. The decision's own write records the call in the execution ledger as answered by a
person (:func:`add_ledger_entry`): begun and finished with the marked text, so nothing ever runs it (a recovery
finds the entry and reports the person's answer). The model gets the text marked as a human response
(:func:`bot.hitl.respond.human_response`, through :func:`bot.engine.decisions.decision_from_record`).
"""

from __future__ import annotations

from bot.canonical import args_digest
from bot.engine.decisions import ID_LESS_PREFIX
from bot.engine.errors import EngineError
from bot.engine.ledger import ledger_key
from bot.hitl.respond import RespondRefused, human_response, respond_decision
from bot.tools import Tool
from storage.batch import Batch, stores
from storage.protocols import ApprovalRecord

ANSWERED_BY_A_PERSON = "answered by a person"


class RespondNotAllowed(EngineError):
    """A Respond that may not be given here; nothing was decided."""


def checked_response(tool: Tool | None, record: ApprovalRecord, text: str | None) -> str:
    """The person's answer as stored (stripped), or :class:`RespondNotAllowed` saying why not."""
    if record.kind != "approval":
        raise RespondNotAllowed("A result under review cannot be answered in the tool's place; edit it instead.")
    if tool is None:
        raise RespondNotAllowed(f"The tool '{record.tool_name}' is no longer available.")
    try:
        respond_decision(tool, record.tool_call_id, text or "")
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
