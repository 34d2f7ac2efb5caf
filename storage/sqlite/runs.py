"""Agent runs: :class:`SQLiteRunStore`. Status changes are compare-and-set."""

from __future__ import annotations

from typing import Any

from storage.codec import epoch, loads
from storage.errors import ActiveRunExists, AlreadyExists, CorruptRecord, NotFound
from storage.protocols import (
    ACTIVE_RUN_STATUSES,
    TERMINAL_RUN_STATUSES,
    Instant,
    RunFence,
    RunRecord,
    TokenUsage,
)
from storage.records import SQLITE_TIMES, run_record
from storage.run_rules import _SETTABLE, _UNOWNED_STATUSES, _check_status, _snapshot_text, usage_columns
from storage.sqlite.connection import Connector

_COLUMNS = (
    "run_id, chat_history_id, platform, workspace, channel, thread, requester, status, step, error, "
    "snapshot_json IS NOT NULL, created_at, updated_at, owner, lease_expires_at, recoveries, stop_requested_by"
)


def _record(row: Any) -> RunRecord:
    return run_record(row, SQLITE_TIMES)


RUN_COLUMNS = _COLUMNS
"""The columns :func:`run_from_row` reads, in order (for other stores that return runs)."""


def run_from_row(row: Any) -> RunRecord:
    """The :class:`RunRecord` of a row selected with :data:`RUN_COLUMNS`."""
    return _record(row)


FENCE_CONDITION = "owner = ? AND recoveries = ? AND status IN ('running', 'resuming')"
"""The ``runs`` condition under which a fence holds (parameters: :func:`fence_params`)."""


def fence_params(fence: RunFence) -> list[Any]:
    """The parameters of :data:`FENCE_CONDITION`."""
    return [fence.owner, fence.generation]


def fence_holds(db: Any, fence: RunFence) -> bool:
    """Whether the fence holds, read inside the caller's write transaction (SQLite writes are serialised)."""
    return (
        db.execute(
            f"SELECT 1 FROM runs WHERE run_id = ? AND {FENCE_CONDITION}", [fence.run_id, *fence_params(fence)]
        ).fetchone()
        is not None
    )


class SQLiteRunStore:
    """One row per agent invocation: thread, requester, status, step, latest snapshot, timestamps.

    Statuses: running, paused, resuming, finished, failed, expired, stopped (the last four are terminal).
    """

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def create(
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
        """Record a new run and return it; :class:`ActiveRunExists` if the thread has an active run.

        The database refuses a second active run per thread (a unique partial index), so two processes
        or a retry can never both open one.

        >>> storage.runs.create("run-1", chat_history_id="slack:T1:C1:170.1", platform="slack",
        ...     workspace="T1", channel="C1", thread="170.1", requester="U1").status
        'running'
        """
        at = epoch(now)
        with self.connector.writing() as db:
            if db.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
                raise AlreadyExists(f"run {run_id!r} exists already")
            if status in ACTIVE_RUN_STATUSES and self._active_run_id(db, chat_history_id) is not None:
                raise ActiveRunExists(chat_history_id)
            db.execute(
                "INSERT INTO runs (run_id, chat_history_id, platform, workspace, channel, thread, requester, "
                "status, step, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
                [
                    run_id,
                    chat_history_id,
                    platform,
                    workspace,
                    channel,
                    thread,
                    requester,
                    _check_status(status),
                    at,
                    at,
                ],
            )
            return self._get(db, run_id)

    def get(self, run_id: str) -> RunRecord:
        """The run, or :class:`NotFound`.

        >>> storage.runs.get("run-1").requester
        'U1'
        """
        with self.connector.reading() as db:
            return self._get(db, run_id)

    @staticmethod
    def _active_run_id(db: Any, chat_history_id: str) -> str | None:
        row = db.execute(
            "SELECT run_id FROM runs WHERE chat_history_id = ? AND status IN ('running', 'paused', 'resuming')",
            [chat_history_id],
        ).fetchone()
        return None if row is None else row[0]

    @staticmethod
    def _get(db: Any, run_id: str) -> RunRecord:
        row = db.execute(f"SELECT {_COLUMNS} FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None:
            raise NotFound(f"run {run_id!r} not found")
        return _record(row)

    def transition(
        self,
        run_id: str,
        from_status: str | tuple[str, ...],
        to_status: str,
        *,
        fence: RunFence | None = None,
        usage: TokenUsage | None = None,
        **fields: Any,
    ) -> bool:
        """Move the run to ``to_status`` if it is in ``from_status``; return whether this caller won.

        ``fields`` may also set ``snapshot_json``, ``error`` and ``step`` in the same statement, and ``usage`` the
        run's token usage so far (as :meth:`record_usage`).
        Terminal runs never move again. Moving to ``paused`` or a terminal status clears the owner and
        the lease (nobody works on such a run). With a ``fence``, the run moves only while the fence holds
        (same statement): an owner whose run was taken over gets ``False``.

        >>> storage.runs.transition("run-1", "paused", "resuming")
        True
        >>> storage.runs.transition("run-1", "paused", "resuming")  # a second click
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
        if fields.get("snapshot_json") is not None:
            fields["snapshot_json"] = _snapshot_text(run_id, fields["snapshot_json"])
        fields.update(usage_columns(usage))
        assignments = "".join(f", {name} = ?" for name in fields)
        if to_status in _UNOWNED_STATUSES:
            assignments += ", owner = NULL, lease_expires_at = NULL"
        placeholders = ", ".join("?" for _ in sources)
        fenced, fenced_params = "", []
        if fence is not None:
            if fence.run_id != run_id:
                raise ValueError(f"the fence of run {fence.run_id!r} cannot guard run {run_id!r}")
            fenced, fenced_params = f" AND {FENCE_CONDITION}", fence_params(fence)
        with self.connector.writing() as db:
            changed = db.execute(
                f"UPDATE runs SET status = ?, updated_at = ?{assignments} "
                f"WHERE run_id = ? AND status IN ({placeholders}){fenced}",
                [to_status, epoch(None), *fields.values(), run_id, *sources, *fenced_params],
            ).rowcount
            if not changed:
                self._get(db, run_id)  # NotFound for an unknown run, rather than a silent False
            return changed == 1

    def save_snapshot(self, run_id: str, snapshot_json: str | dict[str, Any]) -> None:
        """Store the run's latest snapshot (a JSON object, as text or as a dict).

        >>> storage.runs.save_snapshot("run-1", snapshot.to_json())
        """
        text = _snapshot_text(run_id, snapshot_json)
        with self.connector.writing() as db:
            changed = db.execute(
                "UPDATE runs SET snapshot_json = ?, updated_at = ? WHERE run_id = ?", [text, epoch(None), run_id]
            ).rowcount
        if not changed:
            raise NotFound(f"run {run_id!r} not found")

    def snapshot(self, run_id: str) -> dict[str, Any]:
        """The run's latest snapshot, parsed; :class:`CorruptRecord` naming the run if it does not parse.

        >>> AgentSnapshot.from_dict(storage.runs.snapshot("run-1"))
        """
        with self.connector.reading() as db:
            row = db.execute("SELECT snapshot_json FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if row is None:
            raise NotFound(f"run {run_id!r} not found")
        if row[0] is None:
            raise NotFound(f"run {run_id!r} has no snapshot")
        value = loads(row[0], kind="run", record_id=run_id)
        if not isinstance(value, dict):
            raise CorruptRecord("run", run_id, "the snapshot is not a JSON object")
        return value

    def active_for_thread(self, chat_history_id: str) -> RunRecord | None:
        """The thread's newest running, paused or resuming run, if any.

        >>> storage.runs.active_for_thread("slack:T1:C1:170.1").run_id
        'run-1'
        """
        placeholders = ", ".join("?" for _ in ACTIVE_RUN_STATUSES)
        with self.connector.reading() as db:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM runs WHERE chat_history_id = ? AND status IN ({placeholders}) "
                "ORDER BY created_at DESC, rowid DESC LIMIT 1",
                [chat_history_id, *ACTIVE_RUN_STATUSES],
            ).fetchone()
        return None if row is None else _record(row)

    def latest_for_thread(self, chat_history_id: str) -> RunRecord | None:
        """The thread's newest run, whatever its status, if any.

        >>> storage.runs.latest_for_thread("slack:T1:C1:170.1").requester
        'U1'
        """
        with self.connector.reading() as db:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM runs WHERE chat_history_id = ? ORDER BY created_at DESC, rowid DESC LIMIT 1",
                [chat_history_id],
            ).fetchone()
        return None if row is None else _record(row)

    def list_by_status(self, *statuses: str) -> list[RunRecord]:
        """Every run in one of ``statuses``, oldest first (e.g. runs left ``resuming`` by a crash).

        >>> [r.run_id for r in storage.runs.list_by_status("paused", "resuming")]
        ['run-1']
        """
        if not statuses:
            raise ValueError("name at least one status")
        for status in statuses:
            _check_status(status)
        placeholders = ", ".join("?" for _ in statuses)
        with self.connector.reading() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM runs WHERE status IN ({placeholders}) ORDER BY created_at, rowid",
                list(statuses),
            ).fetchall()
        return [_record(row) for row in rows]

    def record_usage(self, run_id: str, usage: TokenUsage) -> None:
        """Set the run's token usage: the agent's total so far, which carries over a pause.

        >>> storage.runs.record_usage("run-1", TokenUsage(21, 7, 28))
        """
        with self.connector.writing() as db:
            changed = db.execute(
                "UPDATE runs SET prompt_tokens = ?, completion_tokens = ?, total_tokens = ? WHERE run_id = ?",
                [usage.prompt_tokens, usage.completion_tokens, usage.total_tokens, run_id],
            ).rowcount
        if not changed:
            raise NotFound(f"run {run_id!r} not found")

    def request_stop(self, run_id: str, actor: str) -> bool:
        """Ask a working (running or resuming) run to stop after its current step; whether it is working.

        Any process may ask; the one that owns the run reads it at its next step boundary.

        >>> storage.runs.request_stop("run-1", "U1")
        True
        """
        with self.connector.writing() as db:
            changed = db.execute(
                "UPDATE runs SET stop_requested_by = COALESCE(stop_requested_by, ?) "
                "WHERE run_id = ? AND status IN ('running', 'resuming')",
                [actor, run_id],
            ).rowcount
            if not changed:
                self._get(db, run_id)  # NotFound for an unknown run
            return changed == 1

    def usage(self, *, platform: str, workspace: str, since: Instant, channel: str | None = None) -> TokenUsage:
        """The summed token usage of the runs created since ``since`` in a workspace (or one channel of it).

        >>> storage.runs.usage(platform="slack", workspace="T1", since=time.time() - 7 * 86400).total_tokens
        28
        """
        where, params = "platform = ? AND workspace = ? AND created_at >= ?", [platform, workspace, epoch(since)]
        if channel is not None:
            where, params = where + " AND channel = ?", [*params, channel]
        with self.connector.reading() as db:
            row = db.execute(
                "SELECT COALESCE(SUM(prompt_tokens), 0), COALESCE(SUM(completion_tokens), 0), "
                f"COALESCE(SUM(total_tokens), 0), COUNT(*) FROM runs WHERE {where}",
                params,
            ).fetchone()
        return TokenUsage(int(row[0]), int(row[1]), int(row[2]), runs=int(row[3]))
