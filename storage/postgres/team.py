"""Team settings on PostgreSQL: :class:`PostgresApproverGroups` and :class:`PostgresAccessStore`, with the
semantics of :mod:`storage.sqlite.team`; and :class:`PostgresConditionalRules`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Json

from storage.codec import loads
from storage.postgres.database import PostgresDatabase, instant, utc
from storage.protocols import AccessRule, ApproverGroup, ConditionalRule, Instant
from storage.team_rules import _members, group_name


class PostgresApproverGroups:
    """Named approver groups, e.g. ``oncall`` → ``["U1", "U2"]``."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def set_group(
        self, name: str, members: Sequence[str], *, updated_by: str, now: Instant = None
    ) -> ApproverGroup:
        """Create or replace a group.

        >>> (await storage.approver_groups.set_group("oncall", ["U1"], updated_by="U_ADMIN")).members
        ('U1',)
        """
        key, people, at = group_name(name), _members(members), instant(now)
        await self.db.execute(
            "INSERT INTO approver_groups (name, members_json, updated_by, updated_at) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (name) DO UPDATE SET members_json = excluded.members_json, "
            "updated_by = excluded.updated_by, updated_at = excluded.updated_at",
            [key, Json(people), updated_by, at],
        )
        return ApproverGroup(key, tuple(people), updated_by, utc(at))

    async def get(self, name: str) -> ApproverGroup | None:
        """The group, or ``None``."""
        row = await self.db.fetchone(
            "SELECT name, members_json::text, updated_by, updated_at FROM approver_groups WHERE name = %s",
            [group_name(name)],
        )
        return None if row is None else _group(row)

    async def list_groups(self) -> list[ApproverGroup]:
        """Every group, by name."""
        rows = await self.db.fetchall(
            "SELECT name, members_json::text, updated_by, updated_at FROM approver_groups ORDER BY name"
        )
        return [_group(row) for row in rows]

    async def delete_group(self, name: str) -> bool:
        """Remove a group; whether it existed."""
        return await self.db.execute("DELETE FROM approver_groups WHERE name = %s", [group_name(name)]) > 0


def _group(row: Sequence[Any]) -> ApproverGroup:
    members = loads(row[1], kind="approver group", record_id=row[0])
    return ApproverGroup(row[0], tuple(members or ()), row[2], utc(row[3]))


class PostgresAccessStore:
    """Access rules (scope → principals allowed to ask) and the direct-message switch per workspace."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def allow(self, scope: str, principal: str, *, updated_by: str, now: Instant = None) -> AccessRule:
        """Let ``principal`` ask in ``scope``."""
        at = instant(now)
        await self.db.execute(
            "INSERT INTO access_rules (scope, principal, updated_by, updated_at) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (scope, principal) DO UPDATE SET updated_by = excluded.updated_by, "
            "updated_at = excluded.updated_at",
            [scope, principal, updated_by, at],
        )
        return AccessRule(scope, principal, updated_by, utc(at))

    async def revoke(self, scope: str, principal: str) -> bool:
        """Remove one rule; whether it existed."""
        return (
            await self.db.execute("DELETE FROM access_rules WHERE scope = %s AND principal = %s", [scope, principal])
            > 0
        )

    async def rules(self, scopes: Sequence[str] | None = None) -> list[AccessRule]:
        """The rules of ``scopes`` (all when ``None``), by scope then principal."""
        if scopes is None:
            rows = await self.db.fetchall(
                "SELECT scope, principal, updated_by, updated_at FROM access_rules ORDER BY scope, principal"
            )
        else:
            rows = await self.db.fetchall(
                "SELECT scope, principal, updated_by, updated_at FROM access_rules WHERE scope = ANY(%s) "
                "ORDER BY scope, principal",
                [list(scopes)],
            )
        return [AccessRule(r[0], r[1], r[2], utc(r[3])) for r in rows]

    async def set_direct_messages(self, scope: str, allowed: bool, *, updated_by: str, now: Instant = None) -> None:
        """Allow or refuse direct messages to the bot in the workspace ``scope``."""
        await self.db.execute(
            "INSERT INTO direct_message_settings (scope, allowed, updated_by, updated_at) VALUES (%s, %s, %s, %s) "
            "ON CONFLICT (scope) DO UPDATE SET allowed = excluded.allowed, updated_by = excluded.updated_by, "
            "updated_at = excluded.updated_at",
            [scope, allowed, updated_by, instant(now)],
        )

    async def direct_messages_allowed(self, scope: str) -> bool:
        """Whether direct messages are allowed in ``scope`` (yes unless turned off)."""
        row = await self.db.fetchone("SELECT allowed FROM direct_message_settings WHERE scope = %s", [scope])
        return row is None or bool(row[0])


_CONDITIONAL_COLUMNS = "scope, tool_name, condition, mode, updated_by, updated_at"


class PostgresConditionalRules:
    """Policy modes for calls whose arguments match a condition.

    As :class:`storage.sqlite.team.SQLiteConditionalRules`.
    """

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def set_rule(
        self, scope: str, tool_name: str, condition: str, mode: str, *, updated_by: str, now: Instant = None
    ) -> ConditionalRule:
        """Create or replace the mode of one scope, tool and condition."""
        if not condition:
            raise ValueError("a conditional rule needs a condition")
        at = instant(now)
        await self.db.execute(
            f"INSERT INTO conditional_rules ({_CONDITIONAL_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
            "ON CONFLICT (scope, tool_name, condition) DO UPDATE SET mode = excluded.mode, "
            "updated_by = excluded.updated_by, updated_at = excluded.updated_at",
            [scope, tool_name, condition, mode, updated_by, at],
        )
        return ConditionalRule(scope, tool_name, condition, mode, updated_by, utc(at))

    async def reset_rule(self, scope: str, tool_name: str, condition: str) -> bool:
        """Remove one rule; whether it existed."""
        return (
            await self.db.execute(
                "DELETE FROM conditional_rules WHERE scope = %s AND tool_name = %s AND condition = %s",
                [scope, tool_name, condition],
            )
            > 0
        )

    async def rules(self, scopes: Sequence[str] | None = None, tool_name: str | None = None) -> list[ConditionalRule]:
        """The rules of ``scopes`` (all when ``None``), of ``tool_name`` when given."""
        rows = await self.db.fetchall(
            f"SELECT {_CONDITIONAL_COLUMNS} FROM conditional_rules "
            "WHERE (%s::text[] IS NULL OR scope = ANY(%s::text[])) AND (%s::text IS NULL OR tool_name = %s) "
            "ORDER BY scope, tool_name, condition",
            [None if scopes is None else list(scopes), None if scopes is None else list(scopes), tool_name, tool_name],
        )
        return [ConditionalRule(r[0], r[1], r[2], r[3], r[4], utc(r[5])) for r in rows]
