"""Where approvals were shown: :class:`SQLiteApprovalPlaces`.

An approval is decided only from a place it was shown in (its thread, an App Home list, a direct
message, an admin listing). Each rendering records its place here first; a click is checked against it.
"""

from __future__ import annotations

from collections.abc import Sequence

from storage.codec import epoch
from storage.protocols import Instant
from storage.sqlite.connection import Connector


class SQLiteApprovalPlaces:
    """Approval id → the place keys it was shown in (recording twice changes nothing)."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def record(self, approval_ids: Sequence[str], place: str, now: Instant = None) -> None:
        """Note that every approval of ``approval_ids`` is shown in ``place``.

        >>> storage.places.record(["a1", "a2"], "slack:C1")
        """
        if isinstance(approval_ids, str):
            raise ValueError("approval_ids must be a list of approval ids")
        if not place:
            raise ValueError("place must be a place key, e.g. 'slack:C1'")
        at = epoch(now)
        with self.connector.writing() as db:
            db.conn.executemany(
                "INSERT INTO approval_places (approval_id, place, shown_at) VALUES (?, ?, ?) "
                "ON CONFLICT (approval_id, place) DO NOTHING",
                [(approval_id, place, at) for approval_id in dict.fromkeys(approval_ids)],
            )

    def shown_in(self, approval_id: str, place: str) -> bool:
        """Whether ``approval_id`` was shown in ``place``.

        >>> storage.places.shown_in("a1", "slack:C1"), storage.places.shown_in("a1", "slack:C2")
        (True, False)
        """
        with self.connector.reading() as db:
            row = db.execute(
                "SELECT 1 FROM approval_places WHERE approval_id = ? AND place = ?", [approval_id, place]
            ).fetchone()
        return row is not None
