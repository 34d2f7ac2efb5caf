"""Team settings on SQLite: named approver groups (:class:`SQLiteApproverGroups`), who may ask
(:class:`SQLiteAccessStore`) and policy modes with conditions (:class:`SQLiteConditionalRules`)."""

from __future__ import annotations

from collections.abc import Sequence

from storage.codec import dumps, epoch, loads, to_datetime
from storage.protocols import AccessRule, ApproverGroup, ConditionalRule, Instant
from storage.sqlite.connection import Connector
from storage.team_rules import _members, group_name


class SQLiteApproverGroups:
    """Named approver groups, e.g. ``oncall`` → ``["U1", "U2"]``."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def set_group(self, name: str, members: Sequence[str], *, updated_by: str, now: Instant = None) -> ApproverGroup:
        """Create or replace a group.

        >>> storage.approver_groups.set_group("oncall", ["U1", "U2"], updated_by="U_ADMIN").members
        ('U1', 'U2')
        """
        key, people, at = group_name(name), _members(members), epoch(now)
        with self.connector.writing() as db:
            db.execute(
                "INSERT INTO approver_groups (name, members_json, updated_by, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET members_json = excluded.members_json, "
                "updated_by = excluded.updated_by, updated_at = excluded.updated_at",
                [key, dumps(people), updated_by, at],
            )
        return ApproverGroup(key, tuple(people), updated_by, to_datetime(at))

    def get(self, name: str) -> ApproverGroup | None:
        """The group, or ``None``.

        >>> storage.approver_groups.get("@OnCall").name
        'oncall'
        """
        with self.connector.reading() as db:
            row = db.execute(
                "SELECT name, members_json, updated_by, updated_at FROM approver_groups WHERE name = ?",
                [group_name(name)],
            ).fetchone()
        return None if row is None else _group(row)

    def list_groups(self) -> list[ApproverGroup]:
        """Every group, by name.

        >>> [g.name for g in storage.approver_groups.list_groups()]
        ['oncall']
        """
        with self.connector.reading() as db:
            rows = db.execute(
                "SELECT name, members_json, updated_by, updated_at FROM approver_groups ORDER BY name"
            ).fetchall()
        return [_group(row) for row in rows]

    def delete_group(self, name: str) -> bool:
        """Remove a group; whether it existed.

        >>> storage.approver_groups.delete_group("oncall")
        True
        """
        with self.connector.writing() as db:
            return db.execute("DELETE FROM approver_groups WHERE name = ?", [group_name(name)]).rowcount > 0


def _group(row: Sequence) -> ApproverGroup:
    members = loads(row[1], kind="approver group", record_id=row[0])
    return ApproverGroup(row[0], tuple(members or ()), row[2], to_datetime(row[3]))


class SQLiteAccessStore:
    """Access rules (scope → principals allowed to ask) and the direct-message switch per workspace."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def allow(self, scope: str, principal: str, *, updated_by: str, now: Instant = None) -> AccessRule:
        """Let ``principal`` ask in ``scope`` (allowing twice changes nothing but the time).

        >>> storage.access.allow("channel:slack:T1:C1", "U1", updated_by="U_ADMIN").principal
        'U1'
        """
        at = epoch(now)
        with self.connector.writing() as db:
            db.execute(
                "INSERT INTO access_rules (scope, principal, updated_by, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (scope, principal) DO UPDATE SET updated_by = excluded.updated_by, "
                "updated_at = excluded.updated_at",
                [scope, principal, updated_by, at],
            )
        return AccessRule(scope, principal, updated_by, to_datetime(at))

    def revoke(self, scope: str, principal: str) -> bool:
        """Remove one rule; whether it existed.

        >>> storage.access.revoke("channel:slack:T1:C1", "U1")
        True
        """
        with self.connector.writing() as db:
            return (
                db.execute("DELETE FROM access_rules WHERE scope = ? AND principal = ?", [scope, principal]).rowcount
                > 0
            )

    def rules(self, scopes: Sequence[str] | None = None) -> list[AccessRule]:
        """The rules of ``scopes`` (all when ``None``), by scope then principal.

        >>> [r.principal for r in storage.access.rules(["channel:slack:T1:C1"])]
        ['U1']
        """
        sql = "SELECT scope, principal, updated_by, updated_at FROM access_rules"
        params: list[str] = []
        if scopes is not None:
            if not scopes:
                return []
            sql += f" WHERE scope IN ({', '.join('?' for _ in scopes)})"
            params = list(scopes)
        with self.connector.reading() as db:
            rows = db.execute(sql + " ORDER BY scope, principal", params).fetchall()
        return [AccessRule(r[0], r[1], r[2], to_datetime(r[3])) for r in rows]

    def set_direct_messages(self, scope: str, allowed: bool, *, updated_by: str, now: Instant = None) -> None:
        """Allow or refuse direct messages to the bot in the workspace ``scope``.

        >>> storage.access.set_direct_messages("workspace:slack:T1", False, updated_by="U_ADMIN")
        """
        with self.connector.writing() as db:
            db.execute(
                "INSERT INTO direct_message_settings (scope, allowed, updated_by, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (scope) DO UPDATE SET allowed = excluded.allowed, updated_by = excluded.updated_by, "
                "updated_at = excluded.updated_at",
                [scope, 1 if allowed else 0, updated_by, epoch(now)],
            )

    def direct_messages_allowed(self, scope: str) -> bool:
        """Whether direct messages are allowed in ``scope`` (yes unless turned off).

        >>> storage.access.direct_messages_allowed("workspace:slack:T1")
        False
        """
        with self.connector.reading() as db:
            row = db.execute("SELECT allowed FROM direct_message_settings WHERE scope = ?", [scope]).fetchone()
        return row is None or bool(row[0])


_CONDITIONAL_COLUMNS = "scope, tool_name, condition, mode, updated_by, updated_at"


class SQLiteConditionalRules:
    """Policy modes for calls whose arguments match a condition (``policy set deploy always when env=prod``)."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def set_rule(
        self, scope: str, tool_name: str, condition: str, mode: str, *, updated_by: str, now: Instant = None
    ) -> ConditionalRule:
        """Create or replace the mode of one scope, tool and condition.

        >>> storage.conditions.set_rule("global", "deploy", "env=prod", "always", updated_by="U1").mode
        'always'
        """
        if not condition:
            raise ValueError("a conditional rule needs a condition")
        at = epoch(now)
        with self.connector.writing() as db:
            db.execute(
                f"INSERT INTO conditional_rules ({_CONDITIONAL_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (scope, tool_name, condition) DO UPDATE SET mode = excluded.mode, "
                "updated_by = excluded.updated_by, updated_at = excluded.updated_at",
                [scope, tool_name, condition, mode, updated_by, at],
            )
        return ConditionalRule(scope, tool_name, condition, mode, updated_by, to_datetime(at))

    def reset_rule(self, scope: str, tool_name: str, condition: str) -> bool:
        """Remove one rule; whether it existed.

        >>> storage.conditions.reset_rule("global", "deploy", "env=prod")
        True
        """
        with self.connector.writing() as db:
            return (
                db.execute(
                    "DELETE FROM conditional_rules WHERE scope = ? AND tool_name = ? AND condition = ?",
                    [scope, tool_name, condition],
                ).rowcount
                > 0
            )

    def rules(self, scopes: Sequence[str] | None = None, tool_name: str | None = None) -> list[ConditionalRule]:
        """The rules of ``scopes`` (all when ``None``), of ``tool_name`` when given.

        >>> [r.condition for r in storage.conditions.rules(["global"], "deploy")]
        ['env=prod']
        """
        where, params = [], []
        if scopes is not None:
            if not scopes:
                return []
            where.append(f"scope IN ({', '.join('?' for _ in scopes)})")
            params.extend(scopes)
        if tool_name is not None:
            where.append("tool_name = ?")
            params.append(tool_name)
        sql = f"SELECT {_CONDITIONAL_COLUMNS} FROM conditional_rules"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self.connector.reading() as db:
            rows = db.execute(sql + " ORDER BY scope, tool_name, condition", params).fetchall()
        return [ConditionalRule(r[0], r[1], r[2], r[3], r[4], to_datetime(r[5])) for r in rows]
