"""The exceptions raised by ``storage``: one type per thing a caller may want to handle."""

from __future__ import annotations


class StorageError(Exception):
    """Base class of every storage error (also wraps unexpected SQLite errors)."""


class DatabaseUnreachable(StorageError):
    """The database server did not answer (refused, or not within the connect timeout)."""


class NotFound(StorageError):
    """The run, approval or ledger entry asked for does not exist.

    >>> raise NotFound("run 'r1' not found")
    Traceback (most recent call last):
    storage.errors.NotFound: run 'r1' not found
    """


class CorruptRecord(StorageError):
    """A stored value (e.g. a snapshot's JSON) cannot be decoded; names the record it belongs to.

    ``kind`` is "run", "approval", "message", ... and ``record_id`` its id, so that one bad row
    fails one request with a clear message instead of crashing the service.
    """

    def __init__(self, kind: str, record_id: str, detail: str) -> None:
        super().__init__(f"{kind} {record_id!r} has a corrupt record: {detail}")
        self.kind = kind
        self.record_id = record_id
        self.detail = detail


class UnknownSchemaVersion(StorageError):
    """The database was written by a newer countersign (its schema version is above ours)."""

    def __init__(self, found: int, known: int) -> None:
        super().__init__(
            f"the database has schema version {found} but this countersign knows only up to {known}; "
            "upgrade countersign to open it"
        )
        self.found = found
        self.known = known


class AlreadyExists(StorageError):
    """A record with this id exists already (e.g. a run created twice)."""


class ActiveRunExists(AlreadyExists):
    """The thread already has an active (running, paused or resuming) run; a second one is refused."""

    def __init__(self, chat_history_id: str) -> None:
        super().__init__(f"thread {chat_history_id!r} already has an active run")
        self.chat_history_id = chat_history_id


class FencedOut(StorageError):
    """A run owner's write was refused: the run was taken over (its fence no longer holds); nothing was written."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id!r} is no longer owned by this process; the write was dropped")
        self.run_id = run_id
