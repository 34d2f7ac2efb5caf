"""The backend-neutral rules of approver groups: how a group's name and members are stored.

Both backends (:mod:`storage.sqlite.team`, :mod:`storage.postgres.team`) apply them, so they live in neither.
"""

from __future__ import annotations

from collections.abc import Sequence


def group_name(name: str) -> str:
    """The stored form of a group name: lower-case, without a leading ``@``.

    >>> group_name("@OnCall")
    'oncall'
    """
    cleaned = name.strip().lstrip("@").lower()
    if not cleaned:
        raise ValueError("a group needs a name")
    return cleaned


def _members(members: Sequence[str]) -> list[str]:
    if isinstance(members, str):
        raise ValueError("members must be a list of ids")
    return list(dict.fromkeys(m for m in members if m))
