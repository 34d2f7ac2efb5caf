"""Confirmation policies: :class:`SQLitePolicyStore`, the resolver, tool groups and ask-once memory.

A rule is keyed by a scope (global, a workspace, a channel) and a tool key (a tool name, a group name
or ``"*"``). Each field is nullable; ``None`` means "inherit". :meth:`SQLitePolicyStore.resolve`
takes every field from the most specific rule that sets it: channel beats workspace beats global,
and within a scope a tool name beats a group beats ``"*"``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from storage.codec import epoch, loads, to_datetime
from storage.policy_rules import ANY_TOOL, PolicyViews, _check_fields, _check_scope, channel_scopes, effective_rule
from storage.protocols import RULE_FIELDS, ConditionalRule, EffectiveRule, Instant, PolicyRule, PolicyView
from storage.sqlite.connection import Connector

_COLUMNS = "scope, tool_key, mode, approvers_json, quorum, four_eyes, ttl_seconds, updated_by, updated_at"
_APPLIES = (
    "scope IN (?, ?, ?) AND (tool_key = ? OR tool_key = ? "
    "OR tool_key IN (SELECT group_name FROM tool_groups WHERE tool_name = ?))"
)
"""The rules that could apply to a tool in a channel's three scopes: its name, ``"*"``, and its groups."""


def _rule(row: Any) -> PolicyRule:
    approvers = loads(row[3], kind="policy rule", record_id=f"{row[0]}/{row[1]}")
    return PolicyRule(
        scope=row[0],
        tool_key=row[1],
        mode=row[2],
        approvers=None if approvers is None else tuple(approvers),
        quorum=row[4],
        four_eyes=None if row[5] is None else bool(row[5]),
        ttl_seconds=row[6],
        updated_by=row[7],
        updated_at=to_datetime(row[8]),
    )


@functools.lru_cache(maxsize=64)
def _views_sql(count: int) -> str:
    """The statement of :meth:`SQLitePolicyStore.views` for ``count`` tool names (made once per count).

    Three kinds of rows, padded to one shape: the plain rules that could apply to any of the tools, the tools'
    groups (which group rules apply to which tool), and the tools' conditional rules.
    """
    marks = ", ".join("?" for _ in range(count))
    return (
        f"SELECT 'rule', NULL, {_COLUMNS} FROM policy_rules WHERE scope IN (?, ?, ?) AND (tool_key = ? "
        f"OR tool_key IN ({marks}) OR tool_key IN (SELECT group_name FROM tool_groups WHERE tool_name IN ({marks}))) "
        "UNION ALL SELECT 'group', group_name, NULL, tool_name, NULL, NULL, NULL, NULL, NULL, NULL, NULL "
        f"FROM tool_groups WHERE tool_name IN ({marks}) UNION ALL "
        "SELECT 'condition', condition, scope, tool_name, mode, NULL, NULL, NULL, NULL, updated_by, updated_at "
        f"FROM conditional_rules WHERE scope IN (?, ?, ?) AND tool_name IN ({marks})"
    )


class SQLitePolicyStore:
    """Rules per scope and tool key, named tool groups, and confirmations remembered for ``once``."""

    def __init__(self, connector: Connector) -> None:
        self.connector = connector

    def define_group(self, name: str, tool_names: Sequence[str]) -> None:
        """Make ``name`` the group of exactly ``tool_names`` (an empty list deletes the group).

        >>> storage.policies.define_group("destructive", ["delete_file", "drop_table"])
        """
        if not name or name == ANY_TOOL:
            raise ValueError(f"not a group name: {name!r}")
        if isinstance(tool_names, str):
            raise ValueError("tool_names must be a list of tool names")
        with self.connector.writing() as db:
            db.execute("DELETE FROM tool_groups WHERE group_name = ?", [name])
            for tool_name in dict.fromkeys(tool_names):
                db.execute("INSERT INTO tool_groups (group_name, tool_name) VALUES (?, ?)", [name, tool_name])

    def groups(self) -> dict[str, list[str]]:
        """Every group and its tools, sorted.

        >>> storage.policies.groups()
        {'destructive': ['delete_file', 'drop_table']}
        """
        with self.connector.reading() as db:
            rows = db.execute("SELECT group_name, tool_name FROM tool_groups ORDER BY group_name, tool_name")
            result: dict[str, list[str]] = {}
            for group_name, tool_name in rows:
                result.setdefault(group_name, []).append(tool_name)
        return result

    def set_rule(self, scope: str, tool_key: str, *, updated_by: str, **fields: Any) -> PolicyRule:
        """Create or update a rule; only the given fields change (``None`` makes a field inherit again).

        >>> storage.policies.set_rule(scope_channel("slack", "T1", "C1"), "delete_file",
        ...     updated_by="U_ADMIN", mode="always", approvers=["U2", "U3"], quorum=2).quorum
        2
        """
        _check_scope(scope)
        if not tool_key:
            raise ValueError("tool_key must be a tool name, a group name or '*'")
        columns = _check_fields(fields)
        if not columns:
            raise ValueError(f"set at least one of {RULE_FIELDS}")
        names = [*columns, "updated_by", "updated_at"]
        values = [*columns.values(), updated_by, epoch(None)]
        with self.connector.writing() as db:
            db.execute(
                f"INSERT INTO policy_rules (scope, tool_key, {', '.join(names)}) "
                f"VALUES (?, ?, {', '.join('?' for _ in names)}) "
                f"ON CONFLICT (scope, tool_key) DO UPDATE SET "
                + ", ".join(f"{name} = excluded.{name}" for name in names),
                [scope, tool_key, *values],
            )
            return self._get(db, scope, tool_key)  # type: ignore[return-value]

    def get_rule(self, scope: str, tool_key: str) -> PolicyRule | None:
        """The rule stored for exactly this scope and tool key, or ``None``.

        >>> storage.policies.get_rule("global", "*") is None
        True
        """
        with self.connector.reading() as db:
            return self._get(db, scope, tool_key)

    @staticmethod
    def _get(db: Any, scope: str, tool_key: str) -> PolicyRule | None:
        row = db.execute(
            f"SELECT {_COLUMNS} FROM policy_rules WHERE scope = ? AND tool_key = ?", [scope, tool_key]
        ).fetchone()
        return None if row is None else _rule(row)

    def reset_rule(self, scope: str, tool_key: str) -> bool:
        """Delete the rule (everything inherits again); ``False`` if there was none.

        >>> storage.policies.reset_rule(scope_channel("slack", "T1", "C1"), "delete_file")
        True
        """
        with self.connector.writing() as db:
            return (
                db.execute("DELETE FROM policy_rules WHERE scope = ? AND tool_key = ?", [scope, tool_key]).rowcount == 1
            )

    def list_rules(self, scope: str | None = None) -> list[PolicyRule]:
        """Every rule (of one scope, if given), sorted by scope and tool key.

        >>> [(r.scope, r.tool_key) for r in storage.policies.list_rules()]
        [('global', '*')]
        """
        sql = f"SELECT {_COLUMNS} FROM policy_rules"
        params: list[Any] = []
        if scope is not None:
            sql += " WHERE scope = ?"
            params.append(scope)
        with self.connector.reading() as db:
            rows = db.execute(sql + " ORDER BY scope, tool_key", params).fetchall()
        return [_rule(row) for row in rows]

    def resolve(self, tool_name: str, *, platform: str, workspace: str, channel: str) -> EffectiveRule:
        """The effective rule for ``tool_name`` in a channel, field by field, with where each came from.

        One statement reads every rule that could apply: the three scopes, and the tool's name, its groups
        and ``"*"``.

        >>> rule = storage.policies.resolve("delete_file", platform="slack", workspace="T1", channel="C1")
        >>> rule.mode, rule.sources["mode"]
        ('always', ('channel:slack:T1:C1', 'delete_file'))
        """
        scopes = channel_scopes(platform, workspace, channel)
        with self.connector.reading() as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM policy_rules WHERE {_APPLIES}", [*scopes, tool_name, ANY_TOOL, tool_name]
            ).fetchall()
        return effective_rule(tool_name, scopes, [_rule(row) for row in rows])

    def view(self, tool_name: str, *, platform: str, workspace: str, channel: str) -> PolicyView:
        """:meth:`resolve` and the tool's conditional rules in the channel's three scopes, in one statement.

        >>> view = storage.policies.view("deploy", platform="slack", workspace="T1", channel="C1")
        >>> view.rule.mode, [c.condition for c in view.conditions]
        ('always', ['env=prod'])
        """
        scopes = channel_scopes(platform, workspace, channel)
        # The plain rules, then the conditional ones with the columns a plain rule lacks as NULL.
        with self.connector.reading() as db:
            rows = db.execute(
                f"SELECT NULL, {_COLUMNS} FROM policy_rules WHERE {_APPLIES} UNION ALL "
                "SELECT condition, scope, tool_name, mode, NULL, NULL, NULL, NULL, updated_by, updated_at "
                "FROM conditional_rules WHERE scope IN (?, ?, ?) AND tool_name = ?",
                [*scopes, tool_name, ANY_TOOL, tool_name, *scopes, tool_name],
            ).fetchall()
        rules = [_rule(row[1:]) for row in rows if row[0] is None]
        conditions = sorted(
            (ConditionalRule(r[1], r[2], r[0], r[3], r[8], to_datetime(r[9])) for r in rows if r[0] is not None),
            key=lambda c: (c.scope, c.condition),
        )
        return PolicyView(effective_rule(tool_name, scopes, rules), tuple(conditions))

    def views(self, tool_names: Sequence[str], *, platform: str, workspace: str, channel: str) -> PolicyViews:
        """:meth:`view` of each of ``tool_names`` in a channel, in one statement (resolved per tool when asked for).

        >>> views = storage.policies.views(["deploy", "delete_file"], platform="slack", workspace="T1", channel="C1")
        >>> views["deploy"].rule.mode, [c.condition for c in views["deploy"].conditions]
        ('always', ['env=prod'])
        """
        names = list(dict.fromkeys(tool_names))
        scopes = channel_scopes(platform, workspace, channel)
        if not names:
            return PolicyViews(names, scopes, (), (), ())
        with self.connector.reading() as db:
            rows = db.execute(
                _views_sql(len(names)), [*scopes, ANY_TOOL, *names, *names, *names, *scopes, *names]
            ).fetchall()
        return PolicyViews(
            names,
            scopes,
            [_rule(row[2:]) for row in rows if row[0] == "rule"],
            [(row[1], row[3]) for row in rows if row[0] == "group"],
            [ConditionalRule(r[2], r[3], r[1], r[4], r[9], to_datetime(r[10])) for r in rows if r[0] == "condition"],
        )

    def unchanged(self, tool_name: str, view: PolicyView, *, platform: str, workspace: str, channel: str) -> bool:
        """Whether :meth:`view` of the tool in the channel is still ``view``: a compare-and-set for a batch that stores
        what was decided with ``view`` (a pause), refused when an admin changed the policy since it was read.

        >>> storage.policies.unchanged("deploy", view, platform="slack", workspace="T1", channel="C1")
        True
        """
        return self.view(tool_name, platform=platform, workspace=workspace, channel=channel) == view

    def remember_confirmation(
        self, scope: str, tool_name: str, args_digest: str, confirmed_by: str, now: Instant = None
    ) -> None:
        """Remember that ``confirmed_by`` approved these exact arguments (policy mode ``once``).

        >>> storage.policies.remember_confirmation(scope_channel("slack", "T1", "C1"), "deploy", digest, "U2")
        """
        _check_scope(scope)
        with self.connector.writing() as db:
            db.execute(
                "INSERT INTO confirmations (scope, tool_name, args_digest, confirmed_by, confirmed_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (scope, tool_name, args_digest) DO UPDATE SET "
                "confirmed_by = excluded.confirmed_by, confirmed_at = excluded.confirmed_at",
                [scope, tool_name, args_digest, confirmed_by, epoch(now)],
            )

    def is_confirmed(self, scope: str, tool_name: str, args_digest: str) -> bool:
        """Whether these exact arguments were confirmed before in this scope.

        >>> storage.policies.is_confirmed(scope_channel("slack", "T1", "C1"), "deploy", digest)
        True
        """
        with self.connector.reading() as db:
            return (
                db.execute(
                    "SELECT 1 FROM confirmations WHERE scope = ? AND tool_name = ? AND args_digest = ?",
                    [scope, tool_name, args_digest],
                ).fetchone()
                is not None
            )

    def revoke_confirmations(self, scope: str, tool_name: str | None = None) -> int:
        """Forget remembered confirmations of the scope (of one tool, if given); returns how many.

        >>> storage.policies.revoke_confirmations(scope_channel("slack", "T1", "C1"), "deploy")
        1
        """
        sql = "DELETE FROM confirmations WHERE scope = ?"
        params = [scope]
        if tool_name is not None:
            sql += " AND tool_name = ?"
            params.append(tool_name)
        with self.connector.writing() as db:
            return db.execute(sql, params).rowcount
