"""Per-tool switches admins set on PostgreSQL, as :class:`storage.sqlite.tool_settings.SQLiteToolSettings`."""

from __future__ import annotations

from storage.postgres.database import PostgresDatabase, instant
from storage.protocols import Instant


class PostgresToolSettings:
    """One value per tool and setting; a removed setting has no row."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def set_value(
        self, tool_name: str, setting: str, value: str | None, *, updated_by: str, now: Instant = None
    ) -> None:
        """Set one tool's ``setting`` (``None`` removes it)."""
        if value is None:
            await self.db.execute(
                "DELETE FROM tool_settings WHERE tool_name = %s AND setting = %s", [tool_name, setting]
            )
            return
        await self.db.execute(
            "INSERT INTO tool_settings (tool_name, setting, value, updated_by, updated_at) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (tool_name, setting) DO UPDATE SET value = excluded.value, "
            "updated_by = excluded.updated_by, updated_at = excluded.updated_at",
            [tool_name, setting, value, updated_by, instant(now)],
        )

    async def values(self, setting: str) -> dict[str, str]:
        """Every tool's value of ``setting``, by tool name."""
        rows = await self.db.fetchall(
            "SELECT tool_name, value FROM tool_settings WHERE setting = %s ORDER BY tool_name", [setting]
        )
        return {row[0]: row[1] for row in rows}

    async def is_not(self, tool_name: str, setting: str, value: str) -> bool:
        """Whether the tool's ``setting`` is anything but ``value``."""
        row = await self.db.fetchone(
            "SELECT value FROM tool_settings WHERE tool_name = %s AND setting = %s", [tool_name, setting]
        )
        return row is None or row[0] != value
