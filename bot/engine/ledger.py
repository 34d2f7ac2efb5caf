"""The agent's execution ledger over storage: every call is recorded ``executing`` before it runs."""

from __future__ import annotations

from typing import Any

from bot import failpoints
from bot.agent.tool_runner import OUTCOME_UNKNOWN, LedgerClaim
from bot.canonical import args_digest
from bot.messages import ToolCall


def ledger_key(run_id: str, call_key: str) -> str:
    """Tool-call ids from a model are only unique within a run, so the ledger keys on both."""
    return f"{run_id}:{call_key}"


class StorageExecutionLedger:
    """Implements :class:`bot.agent.tool_runner.ExecutionLedger` with ``storage.ledger``."""

    def __init__(self, storage: Any) -> None:
        self.storage = storage

    async def begin(self, run_id: str, call_key: str, call: ToolCall) -> LedgerClaim:
        """Claim the call once, ever; a refused claim reports the earlier outcome."""
        key = ledger_key(run_id, call_key)
        failpoints.failpoint("before_ledger")
        if await self.storage.ledger.begin(key, args_digest(call.arguments), run_id=run_id, tool_name=call.tool_name):
            failpoints.failpoint("after_ledger")
            return LedgerClaim(granted=True)
        entry = await self.storage.ledger.get(key)
        if entry is None or entry.status == "executing":
            return LedgerClaim(granted=False, prior_result=OUTCOME_UNKNOWN, prior_error=True)
        return LedgerClaim(granted=False, prior_result=entry.result, prior_error=entry.status != "done")

    async def finish(self, run_id: str, call_key: str, ok: bool, result: str) -> None:
        """Record the outcome."""
        failpoints.failpoint("after_tool")
        await self.storage.ledger.finish(ledger_key(run_id, call_key), ok, result)
