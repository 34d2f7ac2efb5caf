"""The tool execution ledger on PostgreSQL: :class:`PostgresToolLedger`, for at-most-once execution.

``begin`` is ``INSERT … ON CONFLICT DO NOTHING``: the primary key on the tool-call id lets one caller,
on any replica, ever record ``executing``.
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Json

from storage.errors import FencedOut, NotFound
from storage.postgres.database import POSTGRES_TIMES, PostgresDatabase, rows_changed, vouched
from storage.postgres.runs import FENCE_CONDITION, fence_holds
from storage.protocols import LedgerEntry, RunFence
from storage.records import ledger_entry

_COLUMNS = "tool_call_id, run_id, tool_name, args_digest, status, result, started_at, finished_at"


def _entry(row: Any) -> LedgerEntry:
    return ledger_entry(row, POSTGRES_TIMES)


class PostgresToolLedger:
    """Per tool call: ``executing → done | failed``, with the semantics of :class:`storage.SQLiteToolLedger`."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def begin(
        self,
        tool_call_id: str,
        args_digest: str,
        run_id: str | None = None,
        tool_name: str | None = None,
        fence: RunFence | None = None,
    ) -> bool:
        """Claim the right to execute the call; ``True`` once per ``tool_call_id``, ever.

        With a ``fence``, :class:`FencedOut` (nothing written) unless the fence holds in the same transaction
        (see :meth:`storage.SQLiteToolLedger.begin`).

        >>> await storage.ledger.begin("call_1", digest, run_id="run-1", tool_name="delete_file")
        True
        >>> await storage.ledger.begin("call_1", digest)  # a retry, a replica, a double click
        False
        """
        insert = (
            "INSERT INTO ledger (tool_call_id, run_id, tool_name, args_digest, status, started_at) "
            "VALUES (%s, %s, %s, %s, 'executing', now()) ON CONFLICT (tool_call_id) DO NOTHING"
        )
        if fence is None:
            return await self.db.execute(insert, [tool_call_id, run_id, tool_name, args_digest]) == 1
        async with self.db.transaction() as conn:
            if not await fence_holds(conn, fence):
                raise FencedOut(fence.run_id)
            return await rows_changed(await conn.execute(insert, [tool_call_id, run_id, tool_name, args_digest])) == 1

    async def finish(self, tool_call_id: str, ok: bool, result: str, fence: RunFence | None = None) -> bool:
        """Record the outcome (``done`` if ``ok`` else ``failed``); ``False`` if it was already finished.

        With a ``fence``, also ``False`` (nothing written) unless the fence holds in the same transaction:
        an owner whose run was taken over never overwrites the recoverer's "outcome unknown".

        >>> await storage.ledger.finish("call_1", ok=True, result="deleted a.txt")
        True
        """
        return await self._close(tool_call_id, "done" if ok else "failed", result, fence)

    async def mark_unknown(self, tool_call_id: str, result: str) -> bool:
        """Crash recovery: an entry still ``executing`` becomes ``failed`` with ``result``.

        >>> await storage.ledger.mark_unknown("call_1", "outcome unknown: the bot stopped while this tool was running")
        True
        """
        return await self._close(tool_call_id, "failed", result)

    async def _close(self, tool_call_id: str, status: str, result: str, fence: RunFence | None = None) -> bool:
        # The result is stored as a JSON string: tool output may hold characters (NUL) that text refuses.
        update = (
            "UPDATE ledger SET status = %s, result = %s, finished_at = now() "
            "WHERE tool_call_id = %s AND status = 'executing'"
        )
        params: list[Any] = [status, Json(result), tool_call_id]
        if fence is not None:
            # The fence in the same statement (its row locked FOR SHARE to commit, as fence_holds locks it): one
            # statement, not a check and then the update.
            update += f" AND EXISTS (SELECT 1 FROM runs WHERE run_id = %s AND {FENCE_CONDITION} FOR SHARE)"
            params += [fence.run_id, fence.owner, fence.generation]
        async with self.db.transaction() as conn:
            row = await (await conn.execute(vouched(update + " RETURNING true"), params)).fetchone()
            if row is not None:
                return True
            if fence is not None and not await fence_holds(conn, fence):
                return False
        if await self.db.fetchone("SELECT 1 FROM ledger WHERE tool_call_id = %s", [tool_call_id]) is None:
            raise NotFound(f"no ledger entry for tool call {tool_call_id!r}")
        return False

    async def get(self, tool_call_id: str) -> LedgerEntry | None:
        """The entry for the call, or ``None`` if it never began.

        >>> (await storage.ledger.get("call_1")).status
        'done'
        """
        row = await self.db.fetchone(f"SELECT {_COLUMNS} FROM ledger WHERE tool_call_id = %s", [tool_call_id])
        return None if row is None else _entry(row)

    async def executing(self, run_id: str | None = None) -> list[LedgerEntry]:
        """Entries still ``executing`` (of one run, if given), oldest first: after a crash, the unknowns.

        >>> [e.tool_call_id for e in await storage.ledger.executing()]
        []
        """
        sql = f"SELECT {_COLUMNS} FROM ledger WHERE status = 'executing'"
        params: list[Any] = []
        if run_id is not None:
            sql += " AND run_id = %s"
            params.append(run_id)
        rows = await self.db.fetchall(sql + " ORDER BY started_at, seq", params)
        return [_entry(row) for row in rows]
