"""Confirmation policies on PostgreSQL: :class:`PostgresPolicyStore`, the resolver, tool groups, ask-once memory.

The same model as :mod:`storage.sqlite.policies`: a rule is keyed by a scope and a tool key, each field is
nullable (``None`` inherits), and :meth:`PostgresPolicyStore.resolve` takes every field from the most
specific rule that sets it: channel beats workspace beats global; a tool name beats a group beats ``"*"``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from storage.policy_rules import ANY_TOOL, PolicyViews, _check_fields, _check_scope, channel_scopes, effective_rule
from storage.postgres.database import PostgresDatabase, instant, utc
from storage.protocols import RULE_FIELDS, ConditionalRule, EffectiveRule, Instant, PolicyRule, PolicyView

_COLUMNS = "scope, tool_key, mode, approvers, quorum, four_eyes, ttl_seconds, updated_by, updated_at"
_APPLIES = (
    "scope = ANY(%s) AND (tool_key = %s OR tool_key = %s "
    "OR tool_key IN (SELECT group_name FROM tool_groups WHERE tool_name = %s))"
)
"""The rules that could apply to a tool in a channel's scopes: its name, ``"*"``, and its groups."""
_VIEWS = (
    f"SELECT 'rule'::text, NULL::text, {_COLUMNS} FROM policy_rules WHERE scope = ANY(%s) AND (tool_key = %s "
    "OR tool_key = ANY(%s) OR tool_key IN (SELECT group_name FROM tool_groups WHERE tool_name = ANY(%s))) "
    "UNION ALL SELECT 'group', group_name, NULL, tool_name, NULL, NULL, NULL, NULL, NULL, NULL, NULL "
    "FROM tool_groups WHERE tool_name = ANY(%s) UNION ALL "
    "SELECT 'condition', condition, scope, tool_name, mode, NULL, NULL, NULL, NULL, updated_by, updated_at "
    "FROM conditional_rules WHERE scope = ANY(%s) AND tool_name = ANY(%s)"
)
"""As on SQLite (:func:`storage.sqlite.policies._views_sql`): the plain rules that could apply to any of the tools, the
tools' groups, and their conditional rules, padded to one shape."""
GROUP_LOCK = "countersign.tool_groups"
"""With the group's name, the key of the advisory lock that serialises redefinitions of one group."""


def _rule(row: Any) -> PolicyRule:
    return PolicyRule(
        scope=row[0],
        tool_key=row[1],
        mode=row[2],
        approvers=None if row[3] is None else tuple(row[3]),
        quorum=row[4],
        four_eyes=row[5],
        ttl_seconds=row[6],
        updated_by=row[7],
        updated_at=utc(row[8]),
    )


def _columns(fields: dict[str, Any]) -> dict[str, Any]:
    """The shared validation of :func:`storage.policy_rules._check_fields`, as PostgreSQL column values."""
    columns: dict[str, Any] = {}
    for name, value in _check_fields(fields).items():
        if name == "approvers_json":
            columns["approvers"] = None if value is None else Jsonb(list(fields["approvers"]))
        elif name == "four_eyes":
            columns["four_eyes"] = None if value is None else bool(value)
        else:
            columns[name] = value
    return columns


class PostgresPolicyStore:
    """Rules per scope and tool key, named tool groups, and confirmations remembered for ``once``."""

    def __init__(self, db: PostgresDatabase) -> None:
        self.db = db

    async def define_group(self, name: str, tool_names: Sequence[str]) -> None:
        """Make ``name`` the group of exactly ``tool_names`` (an empty list deletes the group).

        >>> await storage.policies.define_group("destructive", ["delete_file", "drop_table"])
        """
        if not name or name == ANY_TOOL:
            raise ValueError(f"not a group name: {name!r}")
        if isinstance(tool_names, str):
            raise ValueError("tool_names must be a list of tool names")
        async with self.db.transaction() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", [GROUP_LOCK, name])
            await conn.execute("DELETE FROM tool_groups WHERE group_name = %s", [name])
            await conn.execute(
                "INSERT INTO tool_groups (group_name, tool_name) SELECT %s, unnest(%s::text[])",
                [name, list(dict.fromkeys(tool_names))],
            )

    async def groups(self) -> dict[str, list[str]]:
        """Every group and its tools, sorted.

        >>> await storage.policies.groups()
        {'destructive': ['delete_file', 'drop_table']}
        """
        rows = await self.db.fetchall(
            'SELECT group_name, tool_name FROM tool_groups ORDER BY group_name COLLATE "C", tool_name COLLATE "C"'
        )
        result: dict[str, list[str]] = {}
        for group_name, tool_name in rows:
            result.setdefault(group_name, []).append(tool_name)
        return result

    async def set_rule(self, scope: str, tool_key: str, *, updated_by: str, **fields: Any) -> PolicyRule:
        """Create or update a rule; only the given fields change (``None`` makes a field inherit again).

        >>> (await storage.policies.set_rule(scope_channel("slack", "T1", "C1"), "delete_file",
        ...     updated_by="U_ADMIN", mode="always", approvers=["U2", "U3"], quorum=2)).quorum
        2
        """
        _check_scope(scope)
        if not tool_key:
            raise ValueError("tool_key must be a tool name, a group name or '*'")
        columns = _columns(fields)
        if not columns:
            raise ValueError(f"set at least one of {RULE_FIELDS}")
        names = [*columns, "updated_by"]
        row = await self.db.fetchone(
            f"INSERT INTO policy_rules (scope, tool_key, {', '.join(names)}, updated_at) "
            f"VALUES (%s, %s, {', '.join('%s' for _ in names)}, now()) "
            "ON CONFLICT (scope, tool_key) DO UPDATE SET "
            + ", ".join(f"{name} = excluded.{name}" for name in [*names, "updated_at"])
            + f" RETURNING {_COLUMNS}",
            [scope, tool_key, *columns.values(), updated_by],
        )
        return _rule(row)

    async def get_rule(self, scope: str, tool_key: str) -> PolicyRule | None:
        """The rule stored for exactly this scope and tool key, or ``None``.

        >>> await storage.policies.get_rule("global", "*") is None
        True
        """
        row = await self.db.fetchone(
            f"SELECT {_COLUMNS} FROM policy_rules WHERE scope = %s AND tool_key = %s", [scope, tool_key]
        )
        return None if row is None else _rule(row)

    async def reset_rule(self, scope: str, tool_key: str) -> bool:
        """Delete the rule (everything inherits again); ``False`` if there was none.

        >>> await storage.policies.reset_rule(scope_channel("slack", "T1", "C1"), "delete_file")
        True
        """
        return (
            await self.db.execute("DELETE FROM policy_rules WHERE scope = %s AND tool_key = %s", [scope, tool_key]) == 1
        )

    async def list_rules(self, scope: str | None = None) -> list[PolicyRule]:
        """Every rule (of one scope, if given), sorted by scope and tool key.

        >>> [(r.scope, r.tool_key) for r in await storage.policies.list_rules()]
        [('global', '*')]
        """
        sql = f"SELECT {_COLUMNS} FROM policy_rules"
        params: list[Any] = []
        if scope is not None:
            sql += " WHERE scope = %s"
            params.append(scope)
        # Byte order, as SQLite sorts, whatever the database's collation.
        rows = await self.db.fetchall(sql + ' ORDER BY scope COLLATE "C", tool_key COLLATE "C"', params)
        return [_rule(row) for row in rows]

    async def resolve(self, tool_name: str, *, platform: str, workspace: str, channel: str) -> EffectiveRule:
        """The effective rule for ``tool_name`` in a channel, field by field, with where each came from.

        One query reads every rule that could apply: the three scopes, and the tool's name, its groups
        and ``"*"``.

        >>> rule = await storage.policies.resolve("delete_file", platform="slack", workspace="T1", channel="C1")
        >>> rule.mode, rule.sources["mode"]
        ('always', ('channel:slack:T1:C1', 'delete_file'))
        """
        scopes = channel_scopes(platform, workspace, channel)
        rows = await self.db.fetchall(
            f"SELECT {_COLUMNS} FROM policy_rules WHERE {_APPLIES}", [scopes, tool_name, ANY_TOOL, tool_name]
        )
        return effective_rule(tool_name, scopes, [_rule(row) for row in rows])

    async def view(self, tool_name: str, *, platform: str, workspace: str, channel: str) -> PolicyView:
        """:meth:`resolve` and the tool's conditional rules in the channel's three scopes, in one query.

        >>> view = await storage.policies.view("deploy", platform="slack", workspace="T1", channel="C1")
        >>> view.rule.mode, [c.condition for c in view.conditions]
        ('always', ['env=prod'])
        """
        scopes = channel_scopes(platform, workspace, channel)
        # One statement: the plain rules, then the conditional ones with the columns a plain rule lacks as NULL.
        rows = await self.db.fetchall(
            f"SELECT NULL::text, {_COLUMNS} FROM policy_rules WHERE {_APPLIES} UNION ALL "
            "SELECT condition, scope, tool_name, mode, NULL, NULL, NULL, NULL, updated_by, updated_at "
            "FROM conditional_rules WHERE scope = ANY(%s) AND tool_name = %s",
            [scopes, tool_name, ANY_TOOL, tool_name, scopes, tool_name],
        )
        rules = [_rule(row[1:]) for row in rows if row[0] is None]
        conditions = sorted(
            (ConditionalRule(r[1], r[2], r[0], r[3], r[8], utc(r[9])) for r in rows if r[0] is not None),
            key=lambda c: (c.scope, c.condition),
        )
        return PolicyView(effective_rule(tool_name, scopes, rules), tuple(conditions))

    async def views(self, tool_names: Sequence[str], *, platform: str, workspace: str, channel: str) -> PolicyViews:
        """:meth:`view` of each of ``tool_names`` in a channel, in one query (resolved per tool when asked for).

        >>> views = await storage.policies.views(["deploy", "delete_file"], platform="slack", workspace="T1",
        ...                                      channel="C1")
        >>> views["deploy"].rule.mode, [c.condition for c in views["deploy"].conditions]
        ('always', ['env=prod'])
        """
        names = list(dict.fromkeys(tool_names))
        scopes = channel_scopes(platform, workspace, channel)
        if not names:
            return PolicyViews(names, scopes, (), (), ())
        rows = await self.db.fetchall(_VIEWS, [scopes, ANY_TOOL, names, names, names, scopes, names])
        return PolicyViews(
            names,
            scopes,
            [_rule(row[2:]) for row in rows if row[0] == "rule"],
            [(row[1], row[3]) for row in rows if row[0] == "group"],
            [ConditionalRule(r[2], r[3], r[1], r[4], r[9], utc(r[10])) for r in rows if r[0] == "condition"],
        )

    async def unchanged(self, tool_name: str, view: PolicyView, *, platform: str, workspace: str, channel: str) -> bool:
        """Whether :meth:`view` of the tool in the channel is still ``view``: a compare-and-set for a batch that stores
        what was decided with ``view`` (a pause), refused when an admin changed the policy since it was read.

        >>> await storage.policies.unchanged("deploy", view, platform="slack", workspace="T1", channel="C1")
        True
        """
        return await self.view(tool_name, platform=platform, workspace=workspace, channel=channel) == view

    async def remember_confirmation(
        self, scope: str, tool_name: str, args_digest: str, confirmed_by: str, now: Instant = None
    ) -> None:
        """Remember that ``confirmed_by`` approved these exact arguments (policy mode ``once``).

        >>> await storage.policies.remember_confirmation(scope_channel("slack", "T1", "C1"), "deploy", digest, "U2")
        """
        _check_scope(scope)
        await self.db.execute(
            "INSERT INTO confirmations (scope, tool_name, args_digest, confirmed_by, confirmed_at) "
            "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (scope, tool_name, args_digest) DO UPDATE SET "
            "confirmed_by = excluded.confirmed_by, confirmed_at = excluded.confirmed_at",
            [scope, tool_name, args_digest, confirmed_by, instant(now)],
        )

    async def is_confirmed(self, scope: str, tool_name: str, args_digest: str) -> bool:
        """Whether these exact arguments were confirmed before in this scope.

        >>> await storage.policies.is_confirmed(scope_channel("slack", "T1", "C1"), "deploy", digest)
        True
        """
        row = await self.db.fetchone(
            "SELECT 1 FROM confirmations WHERE scope = %s AND tool_name = %s AND args_digest = %s",
            [scope, tool_name, args_digest],
        )
        return row is not None

    async def revoke_confirmations(self, scope: str, tool_name: str | None = None) -> int:
        """Forget remembered confirmations of the scope (of one tool, if given); returns how many.

        >>> await storage.policies.revoke_confirmations(scope_channel("slack", "T1", "C1"), "deploy")
        1
        """
        sql = "DELETE FROM confirmations WHERE scope = %s"
        params = [scope]
        if tool_name is not None:
            sql += " AND tool_name = %s"
            params.append(tool_name)
        return await self.db.execute(sql, params)
