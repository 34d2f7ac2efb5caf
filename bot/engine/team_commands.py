"""Admin commands about people: named approver groups (``group …``) and who may ask (``access …``, ``dm``).

Changes are for admins only (checked by :class:`~bot.engine.admin_commands.AdminCommands` before they get
here) and every change is audited; listings are open to everyone, like ``policy list``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.engine.access import AccessControl
from bot.engine.admin_syntax import EVERYONE, AdminCommand
from bot.engine.errors import CommandError
from bot.engine.model import AdminRequest
from bot.engine.roles import group_label, is_group, named_group
from bot.engine.sentences import place_name
from bot.tools import Tool
from storage.policy_rules import scope_channel, scope_workspace

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

RESERVED_GROUP_NAMES = frozenset({"everyone", "none", "all", "here", "channel"})


class TeamCommands:
    """``group set|list|delete``, ``access allow|revoke|list``, ``dm on|off``, and how words such as
    ``@oncall`` or ``@ana`` become entries.

    >>> await TeamCommands(storage, tools, clock).run(AdminCommand("group list"), request)
    'No approver groups yet. Create one with: group set oncall @ana @ben'
    """

    def __init__(
        self, storage: AsyncStores, tools: Mapping[str, Tool], clock: Callable[[], datetime], access: AccessControl
    ) -> None:
        self.storage = storage
        self.tools = tools
        self.clock = clock
        self.access = access

    async def run(self, command: AdminCommand, request: AdminRequest) -> str:
        """Run one ``group …`` command."""
        if command.name == "group list":
            return await self._listing()
        if command.name == "group set":
            name, members = command.value
            return await self._set(request, name, members)
        if command.name == "group delete":
            return await self._delete(request, command.value)
        if command.name == "access list":
            return await self.access.listing(request.platform, request.workspace)
        if command.name in ("access allow", "access revoke"):
            return await self._access(command, request)
        if command.name == "dm":
            scope = scope_workspace(request.platform, request.workspace)
            await self.storage.access.set_direct_messages(
                scope, command.value, updated_by=request.actor, now=self.clock()
            )
            await self._audit(request, "dm", scope, {"allowed": command.value}, subject=scope)
            return "Direct messages to the bot are " + ("allowed." if command.value else "turned off.")
        raise CommandError(f"unknown command {command.name}")

    async def approver_entries(self, words: Sequence[str]) -> tuple[str, ...]:
        """Parsed approver words as stored entries: ``@name`` is the named group if one exists, else a person."""
        entries = []
        for word in words:
            if word.startswith("@"):
                group = await self.storage.approver_groups.get(word[1:])
                entries.append(named_group(group.name) if group is not None else word[1:])
            else:
                entries.append(word)
        return tuple(dict.fromkeys(entries))

    async def _listing(self) -> str:
        groups = await self.storage.approver_groups.list_groups()
        if not groups:
            return "No approver groups yet. Create one with: group set oncall @ana @ben"
        return "Approver groups:\n" + "\n".join(f"  @{g.name}: {', '.join(g.members)}" for g in groups)

    async def _set(self, request: AdminRequest, name: str, words: Sequence[str]) -> str:
        await self._check_name(name)
        members = []
        for word in words:
            if is_group(word) or (word.startswith("@") and await self.storage.approver_groups.get(word[1:])):
                raise CommandError(f"A group's members are people; '{group_label(word)[:64]}' is a group.")
            members.append(word.removeprefix("@"))
        group = await self.storage.approver_groups.set_group(name, members, updated_by=request.actor, now=self.clock())
        await self._audit(request, "group set", name, {"members": list(group.members)})
        return f"Approver group @{group.name}: {', '.join(group.members)}"

    async def _delete(self, request: AdminRequest, name: str) -> str:
        if not await self.storage.approver_groups.delete_group(name):
            return f"There is no approver group @{name}."
        await self._audit(request, "group delete", name, {})
        users = sorted(
            {r.tool_key for r in await self.storage.policies.list_rules() if named_group(name) in (r.approvers or ())}
        )
        warning = f" Rules that name it ({', '.join(users)}) now have no members from it." if users else ""
        return f"Approver group @{name} deleted.{warning}"

    async def _access(self, command: AdminCommand, request: AdminRequest) -> str:
        scope = (
            scope_channel(request.platform, request.workspace, command.channel)
            if command.channel
            else scope_workspace(request.platform, request.workspace)
        )
        where = (
            place_name(request, command.channel) if command.channel else request.workspace_name or "the whole workspace"
        )
        [principal] = [EVERYONE] if command.value == EVERYONE else await self.approver_entries([command.value])
        if command.name == "access allow":
            await self.storage.access.allow(scope, principal, updated_by=request.actor, now=self.clock())
            answer = f"{group_label(principal)} may ask the bot in {where}."
        elif await self.storage.access.revoke(scope, principal):
            left = await self.storage.access.rules([scope])
            answer = f"Access rule removed: {group_label(principal)} in {where}." + (
                "" if left else f" {where[0].upper() + where[1:]} has no rules left: everyone may ask there again."
            )
        else:
            return f"There was no access rule for {group_label(principal)} in {where}."
        await self._audit(request, command.name, principal, {"scope": scope}, subject=f"{scope}/{principal}")
        return answer

    async def _check_name(self, name: str) -> None:
        """One name may not be both an approver group and a tool or tool group (``policy set <name>``)."""
        if name in RESERVED_GROUP_NAMES:
            raise CommandError(f"'{name}' is reserved; choose another group name.")
        if name in self.tools or name in await self.storage.policies.groups():
            raise CommandError(f"'{name}' already names a tool or a tool group; choose another group name.")

    async def _audit(
        self, request: AdminRequest, action: str, name: str, details: dict[str, Any], subject: str | None = None
    ) -> None:
        await self.storage.audit.append(
            request.actor,
            action,
            subject or f"group:{name}",
            {**details, "platform": request.platform},
            now=self.clock(),
        )


def approver_count(entries: Sequence[str], groups: Mapping[str, Sequence[str]]) -> int:
    """How many distinct people ``entries`` can name at most (a named group counts its members; a platform
    group, unknown here, counts as many as any quorum needs)."""
    people: set[str] = set()
    for entry in entries:
        if entry.startswith("group:"):
            people.update(groups.get(entry[len("group:") :], ()))
        elif is_group(entry):
            return 10**6
        else:
            people.add(entry)
    return len(people)
