"""Where approvals were shown, on PostgreSQL: :class:`PostgresApprovalPlaces`."""

from __future__ import annotations

from collections.abc import Sequence

from storage.postgres.database import PostgresDatabase, instant
from storage.protocols import Instant


class PostgresApprovalPlaces:
    """Approval id → the place keys it was shown in, with the semantics of :class:`storage.SQLiteApprovalPlaces`."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def record(self, approval_ids: Sequence[str], place: str, now: Instant = None) -> None:
        """Note that every approval of ``approval_ids`` is shown in ``place`` (recording twice changes nothing).

        >>> await storage.places.record(["a1", "a2"], "slack:C1")
        """
        if isinstance(approval_ids, str):
            raise ValueError("approval_ids must be a list of approval ids")
        if not place:
            raise ValueError("place must be a place key, e.g. 'slack:C1'")
        ids = list(dict.fromkeys(approval_ids))
        if not ids:
            return
        await self.db.execute(
            "INSERT INTO approval_places (approval_id, place, shown_at) "
            "SELECT approval_id, %s, %s FROM unnest(%s::text[]) AS t(approval_id) "
            "ON CONFLICT (approval_id, place) DO NOTHING",
            [place, instant(now), ids],
        )

    async def shown_in(self, approval_id: str, place: str) -> bool:
        """Whether ``approval_id`` was shown in ``place``.

        >>> await storage.places.shown_in("a1", "slack:C1"), await storage.places.shown_in("a1", "slack:C2")
        (True, False)
        """
        row = await self.db.fetchone(
            "SELECT 1 FROM approval_places WHERE approval_id = %s AND place = %s", [approval_id, place]
        )
        return row is not None
