"""How groups are written in approver and admin lists: ``group:<name>`` and ``usergroup:<id>[|@handle]``.

A leaf (imports nothing of ours): configuration reads ``COUNTERSIGN_ADMINS`` into these entries, and the
engine's roles expand them, so configuration need not import the engine.
"""

from __future__ import annotations

GROUP_PREFIX = "group:"
USERGROUP_PREFIX = "usergroup:"


def named_group(name: str) -> str:
    """The entry of a named approver group.

    >>> named_group("@OnCall")
    'group:oncall'
    """
    return GROUP_PREFIX + name.strip().lstrip("@").lower()


def platform_group(group_id: str, handle: str | None = None) -> str:
    """The entry of a platform user group, with its handle for display when known.

    >>> platform_group("S0ONCALL", "oncall")
    'usergroup:S0ONCALL|@oncall'
    """
    return USERGROUP_PREFIX + group_id + (f"|@{handle.lstrip('@')}" if handle else "")


def is_group(entry: str) -> bool:
    """Whether ``entry`` names a group rather than a person."""
    return entry.startswith((GROUP_PREFIX, USERGROUP_PREFIX))


def group_label(entry: str) -> str:
    """How a group entry reads to people: ``@oncall`` (a person's id is returned as it is).

    >>> group_label("group:oncall"), group_label("usergroup:S0ONCALL|@sre"), group_label("usergroup:S0X")
    ('@oncall', '@sre', 'user group S0X')
    """
    if entry.startswith(GROUP_PREFIX):
        return "@" + entry[len(GROUP_PREFIX) :]
    if entry.startswith(USERGROUP_PREFIX):
        group_id, _, handle = entry[len(USERGROUP_PREFIX) :].partition("|")
        return handle or f"user group {group_id}"
    return entry
