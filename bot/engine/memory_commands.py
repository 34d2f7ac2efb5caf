"""The ``memory`` commands: people list, forget and clear their own memories; admins manage channels'.

Every change (and every refused one) is audited. Answers are plain text; memory texts were masked when
they were stored and are shortened here.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.engine.admin_syntax import AdminCommand
from bot.engine.errors import CommandError
from bot.engine.memory import channel_filter, person_key, workspace_shared_filter
from bot.engine.model import AdminRequest
from bot.engine.roles import Roles
from bot.redaction import mask_text

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

LISTED = 50
"""At most this many memories per section of ``memory list``."""
SHOWN_CHARS = 200


class MemoryCommands:
    """Runs ``memory list``, ``memory forget`` and ``memory clear`` for one request.

    >>> await MemoryCommands(storage, roles, clock).run(AdminCommand("memory clear", value="me"), request)
    'Forgot 3 of your memories.'
    """

    def __init__(self, storage: AsyncStores, roles: Roles, clock: Callable[[], datetime]) -> None:
        self.storage = storage
        self.roles = roles
        self.clock = clock

    async def run(self, command: AdminCommand, request: AdminRequest) -> str:
        """Answer one memory command (``CommandError`` for one the actor may not run)."""
        person = person_key(request.platform, request.workspace, request.actor)
        if command.name == "memory list":
            return await self._list(request, person, command.channel)
        if command.name == "memory forget":
            return await self._forget(request, person, str(command.value))
        if command.channel is None:
            removed = await self.storage.memories.delete_memories(user_id=person)
            await self._audit(request, "memory clear", person, {"removed": removed})
            return f"Forgot {removed} of your memories." if removed else "You have no memories to forget."
        await self._admin_only(request, "memory clear", command.channel)
        removed = await self.storage.memories.delete_memories(
            filters=channel_filter(request.platform, request.workspace, command.channel)
        )
        await self._audit(request, "memory clear", f"#{command.channel}", {"removed": removed})
        return f"Forgot {removed} memories of #{command.channel}."

    async def _list(self, request: AdminRequest, person: str, channel: str | None) -> str:
        sections = []
        if channel is None and not request.private:
            # Everyone in a Teams channel sees the answer; a person's memories are theirs alone.
            sections.append("Your memories: listed only in a direct message with me.")
        elif channel is None:
            mine = await self.storage.memories.search_memories("", user_id=person, top_k=LISTED)
            sections.append(_section("Your memories", mine, await self.storage.memories.count_memories(user_id=person)))
        shown_channel = channel or request.channel
        shared_filter = channel_filter(request.platform, request.workspace, shown_channel)
        shared = await self.storage.memories.search_memories("", filters=shared_filter, top_k=LISTED)
        total = await self.storage.memories.count_memories(filters=shared_filter)
        sections.append(_section(f"Shared in #{shown_channel}", shared, total))
        return "\n".join(sections)

    async def _forget(self, request: AdminRequest, person: str, memory_id: str) -> str:
        if await self.storage.memories.delete_memories([memory_id], user_id=person):
            await self._audit(request, "memory forget", memory_id, {"scope": "person"})
            return f"Forgotten: {memory_id}."
        if not await self.roles.is_admin(request.actor, request.platform):
            return f"No memory {memory_id} of yours. A channel's shared memories are forgotten by admins."
        shared = workspace_shared_filter(request.platform, request.workspace)
        if await self.storage.memories.delete_memories([memory_id], filters=shared):
            await self._audit(request, "memory forget", memory_id, {"scope": "channel"})
            return f"Forgotten: {memory_id}."
        return f"No memory {memory_id} here."

    async def _admin_only(self, request: AdminRequest, action: str, channel: str) -> None:
        if not await self.roles.is_admin(request.actor, request.platform):
            await self._audit(request, "memory change refused", f"#{channel}", {"command": action})
            raise CommandError(f"Only admins manage #{channel}'s shared memories.")

    async def _audit(self, request: AdminRequest, action: str, subject: str, details: dict[str, Any]) -> None:
        await self.storage.audit.append(
            request.actor, action, subject, {**details, "platform": request.platform}, now=self.clock()
        )


def _section(title: str, memories: list[Any], total: int) -> str:
    if not memories:
        return f"{title}: none."
    lines = [f"{title}:"]
    for memory in memories:
        text = memory.text if len(memory.text) <= SHOWN_CHARS else memory.text[: SHOWN_CHARS - 1] + "…"
        lines.append(f"  {memory.id}  {mask_text(text)}")
    if total > len(memories):
        lines.append(f"  … and {total - len(memories)} more")
    return "\n".join(lines)
