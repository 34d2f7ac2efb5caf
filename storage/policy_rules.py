"""The backend-neutral rules of confirmation policies: scopes, the resolver, and field validation.

Both backends (:mod:`storage.sqlite.policies`, :mod:`storage.postgres.policies`) store rules the same way,
and the engine builds scopes with these functions, so none of it may live in a backend.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from storage.codec import dumps
from storage.protocols import POLICY_MODES, RULE_FIELDS, ConditionalRule, EffectiveRule, PolicyRule, PolicyView

ANY_TOOL = "*"


_SCOPE_PREFIXES = ("workspace:", "channel:")


def scope_global() -> str:
    """The scope of rules that apply everywhere.

    >>> scope_global()
    'global'
    """
    return "global"


def scope_workspace(platform: str, workspace: str) -> str:
    """The scope of one Slack workspace or Teams tenant.

    >>> scope_workspace("slack", "T1")
    'workspace:slack:T1'
    """
    return f"workspace:{platform}:{workspace}"


def scope_channel(platform: str, workspace: str, channel: str) -> str:
    """The scope of one channel (or Teams conversation).

    >>> scope_channel("slack", "T1", "C1")
    'channel:slack:T1:C1'
    """
    return f"channel:{platform}:{workspace}:{channel}"


def channel_scopes(platform: str, workspace: str, channel: str) -> list[str]:
    """The scopes whose rules apply in a channel, most specific first: the channel, its workspace, global.

    >>> channel_scopes("slack", "T1", "C1")
    ['channel:slack:T1:C1', 'workspace:slack:T1', 'global']
    """
    return [scope_channel(platform, workspace, channel), scope_workspace(platform, workspace), scope_global()]


def effective_rule(tool_name: str, scopes: Sequence[str], rules: Sequence[PolicyRule]) -> EffectiveRule:
    """Field by field, the value of the most specific rule that sets it (both backends resolve with this).

    Scope first (``scopes`` lists them most specific first), then the tool key: the tool's own name, then
    its groups by name, then ``"*"``.
    """

    def specificity(rule: PolicyRule) -> tuple[int, int, str]:
        key_rank = 0 if rule.tool_key == tool_name else 2 if rule.tool_key == ANY_TOOL else 1
        return scopes.index(rule.scope), key_rank, rule.tool_key

    values: dict[str, Any] = {}
    sources: dict[str, tuple[str, str]] = {}
    for rule in sorted(rules, key=specificity):  # most specific first: the first rule that sets a field wins it
        for name in RULE_FIELDS:
            value = getattr(rule, name)
            if name not in values and value is not None:
                values[name] = value
                sources[name] = (rule.scope, rule.tool_key)
    return EffectiveRule(tool_name=tool_name, sources=sources, **values)


class PolicyViews(Mapping[str, PolicyView]):
    """Several tools' :class:`PolicyView` in one channel, read together (:meth:`SQLitePolicyStore.views`).

    The statement read every rule that could apply to any of the tools, their groups and their conditional
    rules; each tool's view is resolved from those only when asked for (most runs ask for one tool, if any),
    and equals what :meth:`SQLitePolicyStore.view` reads for it. Both backends build it.

    >>> views = storage.policies.views(["deploy", "delete_file"], platform="slack", workspace="T1", channel="C1")
    >>> views["deploy"] == storage.policies.view("deploy", platform="slack", workspace="T1", channel="C1")
    True
    """

    def __init__(
        self,
        tool_names: Sequence[str],
        scopes: Sequence[str],
        rules: Sequence[PolicyRule],
        groups: Sequence[tuple[str, str]],
        conditions: Sequence[ConditionalRule],
    ) -> None:
        self._names = tuple(dict.fromkeys(tool_names))
        self._scopes = list(scopes)
        self._rules = rules
        self._groups = groups  # (group name, tool name)
        self._conditions = conditions
        self._resolved: dict[str, PolicyView] = {}

    def __getitem__(self, tool_name: str) -> PolicyView:
        view = self._resolved.get(tool_name)
        if view is None:
            if tool_name not in self._names:
                raise KeyError(tool_name)
            keys = {tool_name, ANY_TOOL, *(group for group, member in self._groups if member == tool_name)}
            rules = [rule for rule in self._rules if rule.tool_key in keys]
            conditions = sorted(
                (c for c in self._conditions if c.tool_name == tool_name), key=lambda c: (c.scope, c.condition)
            )
            view = self._resolved[tool_name] = PolicyView(
                effective_rule(tool_name, self._scopes, rules), tuple(conditions)
            )
        return view

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _check_scope(scope: str) -> str:
    if scope != "global" and not (scope.startswith(_SCOPE_PREFIXES) and scope.count(":") >= 2):
        raise ValueError(f"not a scope: {scope!r} (use scope_global/scope_workspace/scope_channel)")
    return scope


def _check_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """Validate rule fields and return their column values."""
    unknown = set(fields) - set(RULE_FIELDS)
    if unknown:
        raise ValueError(f"unknown rule fields {sorted(unknown)}; a rule has {RULE_FIELDS}")
    columns: dict[str, Any] = {}
    for name, value in fields.items():
        if value is None:
            columns["approvers_json" if name == "approvers" else name] = None
        elif name == "mode":
            if value not in POLICY_MODES:
                raise ValueError(f"mode must be one of {POLICY_MODES}, not {value!r}")
            columns["mode"] = value
        elif name == "approvers":
            if isinstance(value, str) or not all(isinstance(user, str) for user in value):
                raise ValueError("approvers must be a list of user ids")
            columns["approvers_json"] = dumps(list(value))
        elif name == "four_eyes":
            if not isinstance(value, bool):
                raise ValueError("four_eyes must be True or False")
            columns["four_eyes"] = int(value)
        else:  # quorum, ttl_seconds
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, not {value!r}")
            columns[name] = value
    return columns
