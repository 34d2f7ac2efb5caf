"""Platform conversation references by key: :class:`SQLiteConversationStore`.

Teams needs the conversation reference of a chat to post into it later (proactive messages).
"""

from __future__ import annotations

from typing import Any

from storage.codec import dumps, epoch, loads
from storage.sqlite.connection import Connector


class SQLiteConversationStore:
    """A tiny key → JSON object store."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def save(self, key: str, data: dict[str, Any]) -> None:
        """Store ``data`` under ``key``, replacing what was there.

        >>> storage.conversations.save("teams:19:abc@thread.tacv2", {"serviceUrl": "https://..."})
        """
        with self.connector.writing() as db:
            db.execute(
                "INSERT INTO conversations (key, data_json, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (key) DO UPDATE SET data_json = excluded.data_json, updated_at = excluded.updated_at",
                [key, dumps(data), epoch(None)],
            )

    def load(self, key: str) -> dict[str, Any] | None:
        """The object stored under ``key``, or ``None``.

        >>> storage.conversations.load("teams:19:abc@thread.tacv2")["serviceUrl"]
        'https://...'
        """
        with self.connector.reading() as db:
            row = db.execute("SELECT data_json FROM conversations WHERE key = ?", [key]).fetchone()
        return None if row is None else loads(row[0], kind="conversation", record_id=key)
