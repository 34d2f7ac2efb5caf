"""Event dedupe on PostgreSQL: :class:`PostgresEventDedupe` (``INSERT … ON CONFLICT DO NOTHING``)."""

from __future__ import annotations

from datetime import timedelta

from storage.postgres.database import PostgresDatabase, instant
from storage.protocols import Instant


class PostgresEventDedupe:
    """Keys of platform events already seen, with pruning of old keys."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def first_time(self, event_key: str, now: Instant = None) -> bool:
        """``True`` for the first caller with this key on any replica, ``False`` for every redelivery.

        >>> await storage.events.first_time("slack:Ev123")
        True
        >>> await storage.events.first_time("slack:Ev123")
        False
        """
        return (
            await self.db.execute(
                "INSERT INTO events (event_key, seen_at) VALUES (%s, %s) ON CONFLICT (event_key) DO NOTHING",
                [event_key, instant(now)],
            )
            == 1
        )

    async def prune(self, older_than_seconds: float, now: Instant = None) -> int:
        """Forget keys first seen more than ``older_than_seconds`` ago; returns how many.

        >>> await storage.events.prune(older_than_seconds=24 * 3600)
        0
        """
        cutoff = instant(now) - timedelta(seconds=older_than_seconds)
        return await self.db.execute("DELETE FROM events WHERE seen_at < %s", [cutoff])
