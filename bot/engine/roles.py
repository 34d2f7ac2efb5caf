"""Who belongs to which role: admins and approvers, as people, named groups and platform user groups.

An approver list or ``COUNTERSIGN_ADMINS`` holds *entries*:

- a person's platform id (``U0ALICE``, ``29:1a2b…``, an OS user name on the console);
- ``group:<name>``: a named approver group, managed with ``group set|delete`` (stored in
  ``storage.approver_groups``), usable on every platform;
- ``usergroup:<id>[|<handle>]``: a user group of the platform the approval is on (Slack user groups,
  ``S…``), whose members the surface reads (:meth:`GroupSurface.group_members`).

Membership is read fresh for every decision and admin check. A short cache serves rendering only
(who to tell, who can decide), so a rotation change reaches decisions at once. A group the platform
cannot read has no members (fail closed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from bot.group_entries import GROUP_PREFIX, USERGROUP_PREFIX, is_group
from bot.group_entries import group_label as group_label  # re-exported: roles is where the engine and adapters look
from bot.group_entries import named_group as named_group
from bot.group_entries import platform_group as platform_group

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

CACHE_SECONDS = 60.0
"""How long a platform group's members may be reused for rendering (never for a decision)."""


class GroupSurface(Protocol):
    """The optional surface method that reads a platform user group (Slack: ``usergroups.users.list``)."""

    async def group_members(self, group_id: str) -> Sequence[str]:
        """The ids of the group's members; raises if the platform cannot tell."""
        ...


def _platform_group_id(entry: str) -> str:
    return entry[len(USERGROUP_PREFIX) :].partition("|")[0]


class Roles:
    """Resolves entries to people (see the module docstring).

    >>> roles = Roles(storage, frozenset({"U_ADMIN", "group:sre"}), surfaces)
    >>> await roles.is_admin("U_ANA", "slack")
    False
    """

    def __init__(
        self,
        storage: AsyncStores,
        admins: Collection[str],
        surfaces: Mapping[str, GroupSurface],
        *,
        cache_seconds: float = CACHE_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.storage = storage
        self.admins = frozenset(admins)
        self.surfaces = surfaces
        self.cache_seconds = cache_seconds
        self.monotonic = monotonic
        self._cache: dict[tuple[str, str], tuple[float, frozenset[str]]] = {}

    async def members(self, entry: str, platform: str, *, fresh: bool = True) -> frozenset[str]:
        """The people ``entry`` stands for: itself for a person, a group's members, nobody if unknown."""
        if entry.startswith(GROUP_PREFIX):
            group = await self.storage.approver_groups.get(entry[len(GROUP_PREFIX) :])
            return frozenset(group.members) if group is not None else frozenset()
        if entry.startswith(USERGROUP_PREFIX):
            return await self._platform_members(_platform_group_id(entry), platform, fresh=fresh)
        return frozenset({entry})

    async def includes(self, entries: Iterable[str], actor: str, platform: str, *, fresh: bool = True) -> bool:
        """Whether ``actor`` is one of ``entries`` or a member of one of their groups."""
        entries = list(entries)
        if actor in entries:
            return True
        for entry in entries:
            if is_group(entry) and actor in await self.members(entry, platform, fresh=fresh):
                return True
        return False

    async def people(self, entries: Iterable[str], platform: str, *, fresh: bool = False) -> list[str]:
        """Every person ``entries`` stand for, once each, in order (for telling them; cached groups allowed)."""
        found: dict[str, None] = {}
        for entry in entries:
            for person in sorted(await self.members(entry, platform, fresh=fresh)):
                found.setdefault(person, None)
        return list(found)

    async def is_admin(self, actor: str, platform: str, *, fresh: bool = True) -> bool:
        """Whether ``actor`` is listed in ``COUNTERSIGN_ADMINS`` or belongs to a group listed there."""
        return await self.includes(self.admins, actor, platform, fresh=fresh)

    async def _platform_members(self, group_id: str, platform: str, *, fresh: bool) -> frozenset[str]:
        key = (platform, group_id)
        cached = self._cache.get(key)
        if not fresh and cached is not None and cached[0] > self.monotonic():
            return cached[1]
        surface = self.surfaces.get(platform)
        if surface is None:
            return frozenset()
        try:
            members = frozenset(await surface.group_members(group_id))
        except Exception as exc:  # the platform cannot tell now: nobody is a member (fail closed)
            logger.warning("could not read a user group", extra={"group": group_id, "error": type(exc).__name__})
            return frozenset()
        self._cache[key] = (self.monotonic() + self.cache_seconds, members)
        return members
