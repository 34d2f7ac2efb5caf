"""The tool execution ledger: :class:`SQLiteToolLedger`, for at-most-once execution.

``begin`` records ``executing`` *before* the side effect and succeeds once per tool call; an entry a
crash leaves ``executing`` is never re-run: recovery marks it failed with an "outcome unknown" result.
"""

from __future__ import annotations

from typing import Any

from storage.codec import epoch
from storage.errors import FencedOut, NotFound
from storage.protocols import LedgerEntry, RunFence
from storage.records import SQLITE_TIMES, ledger_entry
from storage.sqlite.connection import Connector
from storage.sqlite.runs import fence_holds

_COLUMNS = "tool_call_id, run_id, tool_name, args_digest, status, result, started_at, finished_at"


def _entry(row: Any) -> LedgerEntry:
    return ledger_entry(row, SQLITE_TIMES)


class SQLiteToolLedger:
    """Per tool call: ``executing → done | failed``. Tool-call ids are unique across all runs."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def begin(
        self,
        tool_call_id: str,
        args_digest: str,
        run_id: str | None = None,
        tool_name: str | None = None,
        fence: RunFence | None = None,
    ) -> bool:
        """Claim the right to execute the call; ``True`` once per ``tool_call_id``, ever.

        With a ``fence``, :class:`FencedOut` (nothing written) unless the fence holds in the same transaction:
        an owner whose run was taken over never starts another call of it (the new owner may be running the
        run's next step, whose calls have other ids).

        >>> storage.ledger.begin("call_1", digest, run_id="run-1", tool_name="delete_file")
        True
        >>> storage.ledger.begin("call_1", digest)  # a retry, a replica, a double click
        False
        """
        with self.connector.writing() as db:
            if fence is not None and not fence_holds(db, fence):
                raise FencedOut(fence.run_id)
            return (
                db.execute(
                    "INSERT INTO ledger (tool_call_id, run_id, tool_name, args_digest, status, started_at) "
                    "VALUES (?, ?, ?, ?, 'executing', ?) ON CONFLICT (tool_call_id) DO NOTHING",
                    [tool_call_id, run_id, tool_name, args_digest, epoch(None)],
                ).rowcount
                == 1
            )

    def finish(self, tool_call_id: str, ok: bool, result: str, fence: RunFence | None = None) -> bool:
        """Record the outcome (``done`` if ``ok`` else ``failed``); ``False`` if it was already finished.

        With a ``fence``, also ``False`` (nothing written) unless the fence holds in the same transaction:
        an owner whose run was taken over never overwrites the recoverer's "outcome unknown".

        >>> storage.ledger.finish("call_1", ok=True, result="deleted a.txt")
        True
        """
        return self._close(tool_call_id, "done" if ok else "failed", result, fence)

    def mark_unknown(self, tool_call_id: str, result: str) -> bool:
        """Crash recovery: an entry still ``executing`` becomes ``failed`` with ``result``.

        >>> storage.ledger.mark_unknown("call_1", "outcome unknown: the bot stopped while this tool was running")
        True
        """
        return self._close(tool_call_id, "failed", result)

    def _close(self, tool_call_id: str, status: str, result: str, fence: RunFence | None = None) -> bool:
        with self.connector.writing() as db:
            if fence is not None and not fence_holds(db, fence):
                return False
            changed = db.execute(
                "UPDATE ledger SET status = ?, result = ?, finished_at = ? "
                "WHERE tool_call_id = ? AND status = 'executing'",
                [status, result, epoch(None), tool_call_id],
            ).rowcount
            if (
                not changed
                and db.execute("SELECT 1 FROM ledger WHERE tool_call_id = ?", [tool_call_id]).fetchone() is None
            ):
                raise NotFound(f"no ledger entry for tool call {tool_call_id!r}")
        return changed == 1

    def get(self, tool_call_id: str) -> LedgerEntry | None:
        """The entry for the call, or ``None`` if it never began.

        >>> storage.ledger.get("call_1").status
        'done'
        """
        with self.connector.reading() as db:
            row = db.execute(f"SELECT {_COLUMNS} FROM ledger WHERE tool_call_id = ?", [tool_call_id]).fetchone()
        return None if row is None else _entry(row)

    def executing(self, run_id: str | None = None) -> list[LedgerEntry]:
        """Entries still ``executing`` (of one run, if given), oldest first: after a crash, the unknowns.

        >>> [e.tool_call_id for e in storage.ledger.executing()]
        []
        """
        sql = f"SELECT {_COLUMNS} FROM ledger WHERE status = 'executing'"
        params: list[Any] = []
        if run_id is not None:
            sql += " AND run_id = ?"
            params.append(run_id)
        with self.connector.reading() as db:
            rows = db.execute(sql + " ORDER BY started_at, rowid", params).fetchall()
        return [_entry(row) for row in rows]
