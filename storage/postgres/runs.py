"""Agent runs on PostgreSQL: :class:`PostgresRunStore`. Status changes are conditional ``UPDATE``s."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Json

from storage.codec import loads
from storage.errors import ActiveRunExists, AlreadyExists, CorruptRecord, NotFound
from storage.postgres.database import POSTGRES_TIMES, PostgresDatabase, held_locks, instant
from storage.protocols import ACTIVE_RUN_STATUSES, TERMINAL_RUN_STATUSES, Instant, RunFence, RunRecord, TokenUsage
from storage.records import run_record
from storage.run_rules import _SETTABLE, _UNOWNED_STATUSES, _check_status, _snapshot_text, usage_columns

_COLUMNS = (
    "run_id, chat_history_id, platform, workspace, channel, thread, requester, status, step, error, "
    "snapshot_json IS NOT NULL, created_at, updated_at, owner, lease_expires_at, recoveries, stop_requested_by"
)
RUN_COLUMNS = _COLUMNS
"""The columns :func:`run_from_row` reads, in order (for other stores that return runs)."""
FENCE_CONDITION = "owner = %s AND recoveries = %s AND status IN ('running', 'resuming')"
"""The ``runs`` condition under which a fence holds (parameters: owner, generation)."""


async def fence_holds(conn: Any, fence: RunFence, lock: tuple[str, str] | None = None) -> bool:
    """Whether the fence holds, inside the caller's transaction on ``conn``.

    ``FOR SHARE`` locks the run's row until the transaction ends: a takeover (an ``UPDATE`` of the row)
    waits for the fenced write to commit, and a check that meets a takeover in flight waits for it and
    re-reads the row, so the fenced write and the takeover never interleave.

    ``lock``: the advisory lock (namespace, key) the fenced write takes next (:func:`advisory_lock`). It is taken
    by the fence's own statement, after the run's row is locked and only if the fence holds: the order of a
    check and then the lock, in one command.
    """
    held = held_locks(conn)
    key = ("fence", fence.run_id, fence.owner, fence.generation)
    if held is not None and key in held:  # checked and row-locked earlier in this batch, and not changed since
        return True
    params = [fence.run_id, fence.owner, fence.generation]
    if lock is None or (held is not None and lock in held):
        cursor = await conn.execute(f"SELECT 1 FROM runs WHERE run_id = %s AND {FENCE_CONDITION} FOR SHARE", params)
    else:
        # The CTE hands on the row once it is locked (and re-checked, after a concurrent update): the advisory
        # lock is taken after the row lock, as a separate statement would take it.
        cursor = await conn.execute(
            f"WITH fence AS MATERIALIZED (SELECT 1 FROM runs WHERE run_id = %s AND {FENCE_CONDITION} FOR SHARE) "
            "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s)) FROM fence",
            [*params, *lock],
        )
    holds = await cursor.fetchone() is not None
    if holds and held is not None:
        held.add(key)
        if lock is not None:
            held.add(lock)
    return holds


def fences_changed(db: PostgresDatabase, run_id: str | None = None) -> None:
    """A write may have changed the owner or status of ``run_id`` (of any run if ``None``): a later fence of the
    current batch on it is checked again rather than taken from :func:`fence_holds`'s note."""
    held = db.bound_locks()
    if held is not None:
        held.difference_update(
            {key for key in held if len(key) == 4 and key[0] == "fence" and run_id in (None, key[1])}
        )


def _record(row: Any) -> RunRecord:
    return run_record(row, POSTGRES_TIMES)


def run_from_row(row: Any) -> RunRecord:
    """The :class:`RunRecord` of a row selected with :data:`RUN_COLUMNS`."""
    return _record(row)


class PostgresRunStore:
    """One row per agent invocation, with the semantics of :class:`storage.sqlite.runs.SQLiteRunStore`."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def create(
        self,
        run_id: str,
        *,
        chat_history_id: str,
        platform: str,
        workspace: str,
        channel: str,
        thread: str,
        requester: str,
        status: str = "running",
        now: Instant = None,
    ) -> RunRecord:
        """Record a new run and return it; :class:`AlreadyExists` if the id is taken.

        :class:`ActiveRunExists` if the thread has an active run already: the unique partial index
        ``runs_one_active_per_thread`` refuses a second one, whichever replica asks.

        >>> (await storage.runs.create("run-1", chat_history_id="slack:T1:C1:170.1", platform="slack",
        ...     workspace="T1", channel="C1", thread="170.1", requester="U1")).status
        'running'
        """
        at = instant(now)
        row = await self.db.fetchone(
            "INSERT INTO runs (run_id, chat_history_id, platform, workspace, channel, thread, requester, "
            "status, step, created_at, updated_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, 0, %s, %s) "
            # No conflict target: both the run id and the one-active-run index are caught.
            f"ON CONFLICT DO NOTHING RETURNING {_COLUMNS}",
            [run_id, chat_history_id, platform, workspace, channel, thread, requester, _check_status(status), at, at],
        )
        if row is None:
            if await self.db.fetchone("SELECT 1 FROM runs WHERE run_id = %s", [run_id]) is not None:
                raise AlreadyExists(f"run {run_id!r} exists already")
            raise ActiveRunExists(chat_history_id)
        return _record(row)

    async def get(self, run_id: str) -> RunRecord:
        """The run, or :class:`NotFound`.

        >>> (await storage.runs.get("run-1")).requester
        'U1'
        """
        row = await self.db.fetchone(f"SELECT {_COLUMNS} FROM runs WHERE run_id = %s", [run_id])
        if row is None:
            raise NotFound(f"run {run_id!r} not found")
        return _record(row)

    async def transition(
        self,
        run_id: str,
        from_status: str | tuple[str, ...],
        to_status: str,
        *,
        fence: RunFence | None = None,
        usage: TokenUsage | None = None,
        **fields: Any,
    ) -> bool:
        """Move the run to ``to_status`` if it is in ``from_status``; ``True`` for exactly one caller.

        ``fields`` may also set ``snapshot_json``, ``error`` and ``step`` in the same statement, and ``usage`` the
        run's token usage so far (as :meth:`record_usage`).
        Terminal runs never move again. Moving to ``paused`` or a terminal status clears the owner and
        the lease (nobody works on such a run). With a ``fence``, the run moves only while the fence holds
        (same statement): an owner whose run was taken over gets ``False``.

        >>> await storage.runs.transition("run-1", "paused", "resuming")
        True
        >>> await storage.runs.transition("run-1", "paused", "resuming")  # a second click
        False
        """
        sources = (from_status,) if isinstance(from_status, str) else tuple(from_status)
        if not sources:
            raise ValueError("from_status must name at least one status")
        for status in (*sources, to_status):
            _check_status(status)
        if any(status in TERMINAL_RUN_STATUSES for status in sources):
            raise ValueError(f"a run in a terminal status ({', '.join(TERMINAL_RUN_STATUSES)}) never moves")
        unknown = set(fields) - set(_SETTABLE)
        if unknown:
            raise ValueError(f"transition() can only also set {_SETTABLE}, not {sorted(unknown)}")
        values = dict(fields)
        if values.get("snapshot_json") is not None:
            values["snapshot_json"] = _snapshot_text(run_id, values["snapshot_json"])
        if "error" in values:
            values["error"] = None if values["error"] is None else Json(values["error"])
        values.update(usage_columns(usage))
        assignments = "".join(f", {name} = %s" for name in values)
        if to_status in _UNOWNED_STATUSES:
            assignments += ", owner = NULL, lease_expires_at = NULL"
        fenced, fenced_params = "", []
        if fence is not None:
            if fence.run_id != run_id:
                raise ValueError(f"the fence of run {fence.run_id!r} cannot guard run {run_id!r}")
            fenced, fenced_params = f" AND {FENCE_CONDITION}", [fence.owner, fence.generation]
        fences_changed(self.db, run_id)
        row = await self.db.fetchone(
            f"UPDATE runs SET status = %s, updated_at = now(){assignments} "
            f"WHERE run_id = %s AND status = ANY(%s){fenced} RETURNING true",
            [to_status, *values.values(), run_id, list(sources), *fenced_params],
        )
        if row is None:
            await self.get(run_id)  # NotFound for an unknown run, rather than a silent False
            return False
        return True

    async def save_snapshot(self, run_id: str, snapshot_json: str | dict[str, Any]) -> None:
        """Store the run's latest snapshot (a JSON object, as text or as a dict).

        >>> await storage.runs.save_snapshot("run-1", snapshot.to_json())
        """
        text = _snapshot_text(run_id, snapshot_json)
        changed = await self.db.execute(
            "UPDATE runs SET snapshot_json = %s, updated_at = now() WHERE run_id = %s", [text, run_id]
        )
        if not changed:
            raise NotFound(f"run {run_id!r} not found")

    async def snapshot(self, run_id: str) -> dict[str, Any]:
        """The run's latest snapshot, parsed; :class:`CorruptRecord` naming the run if it is not an object.

        >>> AgentSnapshot.from_dict(await storage.runs.snapshot("run-1"))
        """
        row = await self.db.fetchone("SELECT snapshot_json::text FROM runs WHERE run_id = %s", [run_id])
        if row is None:
            raise NotFound(f"run {run_id!r} not found")
        if row[0] is None:
            raise NotFound(f"run {run_id!r} has no snapshot")
        value = loads(row[0], kind="run", record_id=run_id)
        if not isinstance(value, dict):
            raise CorruptRecord("run", run_id, "the snapshot is not a JSON object")
        return value

    async def active_for_thread(self, chat_history_id: str) -> RunRecord | None:
        """The thread's newest running, paused or resuming run, if any.

        >>> (await storage.runs.active_for_thread("slack:T1:C1:170.1")).run_id
        'run-1'
        """
        row = await self.db.fetchone(
            f"SELECT {_COLUMNS} FROM runs WHERE chat_history_id = %s AND status = ANY(%s) "
            "ORDER BY created_at DESC, seq DESC LIMIT 1",
            [chat_history_id, list(ACTIVE_RUN_STATUSES)],
        )
        return None if row is None else _record(row)

    async def latest_for_thread(self, chat_history_id: str) -> RunRecord | None:
        """The thread's newest run, whatever its status, if any.

        >>> (await storage.runs.latest_for_thread("slack:T1:C1:170.1")).requester
        'U1'
        """
        row = await self.db.fetchone(
            f"SELECT {_COLUMNS} FROM runs WHERE chat_history_id = %s ORDER BY created_at DESC, seq DESC LIMIT 1",
            [chat_history_id],
        )
        return None if row is None else _record(row)

    async def list_by_status(self, *statuses: str) -> list[RunRecord]:
        """Every run in one of ``statuses``, oldest first.

        >>> [r.run_id for r in await storage.runs.list_by_status("paused", "resuming")]
        ['run-1']
        """
        if not statuses:
            raise ValueError("name at least one status")
        for status in statuses:
            _check_status(status)
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM runs WHERE status = ANY(%s) ORDER BY created_at, seq", [list(statuses)]
        )
        return [_record(row) for row in rows]

    async def record_usage(self, run_id: str, usage: TokenUsage) -> None:
        """Set the run's token usage: the agent's total so far, which carries over a pause.

        >>> await storage.runs.record_usage("run-1", TokenUsage(21, 7, 28))
        """
        changed = await self.db.execute(
            "UPDATE runs SET prompt_tokens = %s, completion_tokens = %s, total_tokens = %s WHERE run_id = %s",
            [usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, run_id],
        )
        if not changed:
            raise NotFound(f"run {run_id!r} not found")

    async def request_stop(self, run_id: str, actor: str) -> bool:
        """Ask a working (running or resuming) run to stop after its current step; whether it is working.

        >>> await storage.runs.request_stop("run-1", "U1")
        True
        """
        changed = await self.db.execute(
            "UPDATE runs SET stop_requested_by = COALESCE(stop_requested_by, %s) "
            "WHERE run_id = %s AND status IN ('running', 'resuming')",
            [actor, run_id],
        )
        if not changed:
            await self.get(run_id)  # NotFound for an unknown run
        return changed == 1

    async def usage(self, *, platform: str, workspace: str, since: Instant, channel: str | None = None) -> TokenUsage:
        """The summed token usage of the runs created since ``since`` in a workspace (or one channel of it).

        >>> (await storage.runs.usage(platform="slack", workspace="T1", since=time.time() - 86400)).total_tokens
        28
        """
        where, params = "platform = %s AND workspace = %s AND created_at >= %s", [platform, workspace, instant(since)]
        if channel is not None:
            where, params = where + " AND channel = %s", [*params, channel]
        row = await self.db.fetchone(
            "SELECT COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0), "
            f"COALESCE(SUM(total_tokens), 0), COUNT(*) FROM runs WHERE {where}",
            params,
        )
        return TokenUsage(int(row[0]), int(row[1]), int(row[2]), runs=int(row[3]))
