"""The agent's execution ledger over storage: every call is recorded ``executing`` before it runs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bot import failpoints
from bot.agent.tool_runner import OUTCOME_UNKNOWN, LedgerClaim
from bot.canonical import args_digest
from bot.engine.history import StepHistory, add_history
from bot.messages import ToolCall
from bot.metrics import NullObserver, Observer
from storage.batch import Batch, stores
from storage.errors import FencedOut
from storage.protocols import RunFence

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

LATE_RESULT_LIMIT = 4000
"""How much of a result that came too late for the ledger the audit log keeps (tool output can be long)."""


def ledger_key(run_id: str, call_key: str) -> str:
    """Tool-call ids from a model are only unique within a run, so the ledger keys on both."""
    return f"{run_id}:{call_key}"


def _no_fence(_run_id: str) -> RunFence | None:
    return None


class StorageExecutionLedger:
    """Implements :class:`bot.agent.tool_runner.ExecutionLedger` with ``storage.ledger``.

    ``fences`` gives the fence this process holds on a run (``None`` if it holds none): the outcome is
    recorded only while it holds, and a call begins only while it holds: an owner whose run was taken over
    starts no call of it and never overwrites the "outcome unknown" its recoverer wrote. Such a late result is
    kept in the audit log instead (``late_result``).
    """

    def __init__(
        self,
        storage: AsyncStores,
        fences: Callable[[str], RunFence | None] = _no_fence,
        observer: Observer | None = None,
        history: StepHistory | None = None,
    ) -> None:
        self.storage = storage
        self.history = history
        """The engine's chat store: a run's history still to write goes with the call's ``begin`` (or ``finish``)."""
        self.fences = fences
        self.observer: Observer = observer or NullObserver()
        # When each granted call began (begin and finish bracket the tool's execution): its duration.
        self._started: dict[str, tuple[str, float]] = {}
        self.channels: dict[str, dict[str, str]] = {}
        """Per run the engine works on, its channel (platform, workspace, channel): a call's outcome is recorded with
        a read of the tool's policy there, for the review check after it (:meth:`policy_seen`)."""
        self._policies_seen: dict[tuple[str, str, str], Any] = {}
        self._beginning: dict[str, asyncio.Lock] = {}  # per run: its calls' begins, one at a time
        self.approved_previews: dict[str, str] = {}
        """Per ledger key, the approved preview's text of a call whose re-check matched (issue 30): handed to the
        tool as ``approved_preview`` with its claim (once)."""
        self.stops_seen: dict[str, str | None] = {}
        """Per run, who had asked it to stop (``None``: nobody) as read with its last tool outcome, in the same
        transaction: the step's stop check takes it (:meth:`stop_seen`) instead of reading the run again."""

    async def begin(self, run_id: str, call_key: str, call: ToolCall) -> LedgerClaim:
        """Claim the call once, ever; a refused claim reports the earlier outcome."""
        key = ledger_key(run_id, call_key)
        failpoints.failpoint("before_ledger")
        # Fenced: an owner whose run was taken over (it stalled past its lease) starts no call of it, not even one
        # the ledger has never seen (the new owner may be running the run's next step, with other call ids).
        digest, fence = args_digest(call.arguments), self.fences(run_id)
        # The model's reply whose calls run now (and anything else of the run not yet written) is stored with the
        # entry: both durable, in one transaction, before the tool runs. The step's calls begin one after another,
        # so none of them runs before the batch carrying the reply has committed.
        async with self._beginning.setdefault(run_id, asyncio.Lock()):
            waiting = self.history.take(run_id) if self.history is not None else []
            batch = Batch()
            add_history(batch, waiting)
            begun = batch.write(stores.ledger.begin, key, digest, run_id=run_id, tool_name=call.tool_name, fence=fence)
            try:
                granted = (await self.storage.batches.apply(batch))[begun]
            except Exception:
                if self.history is not None:
                    self.history.give_back(run_id, waiting)
                raise
        if granted:
            failpoints.failpoint("after_ledger")
            self._started[key] = (call.tool_name, time.perf_counter())
            return LedgerClaim(granted=True, approved_preview=self.approved_previews.pop(key, None))
        entry = await self.storage.ledger.get(key)
        if entry is None or entry.status == "executing":
            return LedgerClaim(granted=False, prior_result=OUTCOME_UNKNOWN, prior_error=True)
        return LedgerClaim(granted=False, prior_result=entry.result, prior_error=entry.status != "done")

    def stop_seen(self, run_id: str) -> tuple[bool, str | None]:
        """Whether a tool outcome of ``run_id`` was recorded since the last call, and who had then asked the
        run to stop (``None``: nobody); forgets it, so every stop check after a step sees a fresh value.

        >>> ledger.stop_seen("run-1")
        (True, None)
        """
        if run_id not in self.stops_seen:
            return False, None
        return True, self.stops_seen.pop(run_id)

    def policy_seen(self, run_id: str, tool_name: str, call_key: str | None) -> Any:
        """The policy view of ``tool_name`` read with this call's outcome (forgotten once taken), or ``None``.

        >>> ledger.policy_seen("run-1", "delete_file", "call_1").rule.mode
        'always'
        """
        if call_key is None:
            return None
        return self._policies_seen.pop((run_id, tool_name, call_key), None)

    def forget(self, run_id: str) -> None:
        """The engine is done with ``run_id``: drop what was read for its checks and not used."""
        self.channels.pop(run_id, None)
        self.stops_seen.pop(run_id, None)
        self._beginning.pop(run_id, None)
        for key in [k for k in self.approved_previews if k.startswith(f"{run_id}:")]:
            del self.approved_previews[key]
        for key in [k for k in self._policies_seen if k[0] == run_id]:
            del self._policies_seen[key]

    async def finish(self, run_id: str, call_key: str, ok: bool, result: str) -> None:
        """Record the outcome; one that comes after a takeover goes to the audit log, not the ledger."""
        failpoints.failpoint("after_tool")
        key = ledger_key(run_id, call_key)
        started = self._started.pop(key, None)
        if started is not None:
            self.observer.tool_executed(started[0], time.perf_counter() - started[1], ok=ok)
        tool_name: str | None = started[0] if started is not None else None
        fence = self.fences(run_id)
        # The outcome and the run (for the step's stop check) in one round trip: the run is read after the
        # outcome is recorded, so a stop asked before then is seen.
        batch = Batch()
        finishing = batch.write(stores.ledger.finish, key, ok, result, fence=fence)
        reading_run = batch.read(stores.runs.get, run_id)
        channel = self.channels.get(run_id)
        viewing = None
        if channel is not None and tool_name is not None:  # the tool's policy, read after it ran (time of use)
            viewing = batch.read(
                stores.policies.view,
                tool_name,
                platform=channel["platform"],
                workspace=channel["workspace"],
                channel=channel["channel"],
            )
        outcome = await self.storage.batches.apply(batch)
        finished, run = outcome[finishing], outcome[reading_run]
        if viewing is not None and tool_name is not None:
            self._policies_seen[(run_id, tool_name, call_key)] = outcome[viewing]
        self.stops_seen[run_id] = run.stop_requested_by
        if finished:
            return
        # The run was taken over (or the call closed) meanwhile: the ledger keeps what the thread was told.
        logger.warning(
            "a tool result came after the run was taken over; kept in the audit log only",
            extra={"run_id": run_id, "call_key": call_key},
        )
        await self.storage.audit.append(
            fence.owner if fence is not None else "countersign",
            "late_result",
            key,
            {"run_id": run_id, "ok": ok, "result": result[:LATE_RESULT_LIMIT]},
        )
        if fence is not None and not fence.holds_for(run):
            # Taken over: this process's run ends here (its history writes wait for a batch, so nothing else would
            # stop it before it asked the model about a result the new owner already settled).
            raise FencedOut(run_id)
