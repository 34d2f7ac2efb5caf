"""Platform conversation references by key on PostgreSQL: :class:`PostgresConversationStore`."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Json

from storage.codec import loads
from storage.postgres.database import PostgresDatabase


class PostgresConversationStore:
    """A tiny key → JSON object store (Teams conversation references for proactive messages)."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def save(self, key: str, data: dict[str, Any]) -> None:
        """Store ``data`` under ``key``, replacing what was there.

        >>> await storage.conversations.save("teams:19:abc@thread.tacv2", {"serviceUrl": "https://..."})
        """
        await self.db.execute(
            "INSERT INTO conversations (key, data_json, updated_at) VALUES (%s, %s, now()) "
            "ON CONFLICT (key) DO UPDATE SET data_json = excluded.data_json, updated_at = excluded.updated_at",
            [key, Json(data)],
        )

    async def load(self, key: str) -> dict[str, Any] | None:
        """The object stored under ``key``, or ``None``.

        >>> (await storage.conversations.load("teams:19:abc@thread.tacv2"))["serviceUrl"]
        'https://...'
        """
        row = await self.db.fetchone("SELECT data_json::text FROM conversations WHERE key = %s", [key])
        return None if row is None else loads(row[0], kind="conversation", record_id=key)
