"""Event dedupe: :class:`SQLiteEventDedupe`. Platforms redeliver events; each is handled once."""

from __future__ import annotations

from storage.codec import epoch
from storage.protocols import Instant
from storage.sqlite.connection import Connector


class SQLiteEventDedupe:
    """Keys of platform events already seen, with pruning of old keys."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def first_time(self, event_key: str, now: Instant = None) -> bool:
        """``True`` for the first caller with this key, ``False`` for every redelivery (atomic).

        >>> storage.events.first_time("slack:Ev123")
        True
        >>> storage.events.first_time("slack:Ev123")
        False
        """
        with self.connector.writing() as db:
            return (
                db.execute(
                    "INSERT INTO events (event_key, seen_at) VALUES (?, ?) ON CONFLICT (event_key) DO NOTHING",
                    [event_key, epoch(now)],
                ).rowcount
                == 1
            )

    def prune(self, older_than_seconds: float, now: Instant = None) -> int:
        """Forget keys first seen more than ``older_than_seconds`` ago; returns how many.

        >>> storage.events.prune(older_than_seconds=24 * 3600)
        0
        """
        with self.connector.writing() as db:
            return db.execute("DELETE FROM events WHERE seen_at < ?", [epoch(now) - older_than_seconds]).rowcount
