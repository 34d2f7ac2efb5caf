"""Per-tool switches admins set on SQLite (``storage.tool_settings``), e.g. ``justification`` = ``required``."""

from __future__ import annotations

from storage.codec import epoch
from storage.protocols import Instant
from storage.sqlite.connection import Connector


class SQLiteToolSettings:
    """One value per tool and setting; a removed setting has no row."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def set_value(
        self, tool_name: str, setting: str, value: str | None, *, updated_by: str, now: Instant = None
    ) -> None:
        """Set one tool's ``setting`` (``None`` removes it).

        >>> storage.tool_settings.set_value("deploy", "justification", "required", updated_by="U1")
        """
        with self.connector.writing() as db:
            if value is None:
                db.execute("DELETE FROM tool_settings WHERE tool_name = ? AND setting = ?", [tool_name, setting])
                return
            db.execute(
                "INSERT INTO tool_settings (tool_name, setting, value, updated_by, updated_at) VALUES (?, ?, ?, ?, ?) "
                "ON CONFLICT (tool_name, setting) DO UPDATE SET value = excluded.value, "
                "updated_by = excluded.updated_by, updated_at = excluded.updated_at",
                [tool_name, setting, value, updated_by, epoch(now)],
            )

    def values(self, setting: str) -> dict[str, str]:
        """Every tool's value of ``setting``, by tool name."""
        with self.connector.reading() as db:
            rows = db.execute(
                "SELECT tool_name, value FROM tool_settings WHERE setting = ? ORDER BY tool_name", [setting]
            ).fetchall()
        return {row[0]: row[1] for row in rows}

    def is_not(self, tool_name: str, setting: str, value: str) -> bool:
        """Whether the tool's ``setting`` is anything but ``value``."""
        with self.connector.reading() as db:
            row = db.execute(
                "SELECT value FROM tool_settings WHERE tool_name = ? AND setting = ?", [tool_name, setting]
            ).fetchone()
        return row is None or row[0] != value
