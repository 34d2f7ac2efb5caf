"""The self-approval default, made visible at start: without four-eyes, whoever asked may approve their own call.

Small teams need that default, so it stays; but an operator who configured admins probably expects someone
else to approve, so ``countersign serve`` says once at start when no tool has four-eyes anywhere.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

SELF_APPROVAL_WARNING = (
    "no tool has four-eyes: whoever asks for a call may approve it themselves (admins are configured; "
    "turn it on per tool with 'four-eyes <tool> on', 'policy list' shows where it holds)"
)


async def self_approval_warning(storage: AsyncStores, admins: Collection[str]) -> str | None:
    """:data:`SELF_APPROVAL_WARNING` when admins are configured and no stored rule turns four-eyes on."""
    if not admins:
        return None
    if any(rule.four_eyes for rule in await storage.policies.list_rules()):
        return None
    return SELF_APPROVAL_WARNING
