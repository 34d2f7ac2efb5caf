"""Who may ask the bot: access rules per workspace or channel, and the direct-message switch.

Rules live in ``storage.access``, changed by admins (``access allow|revoke``, ``dm on|off``). A channel's
own rules apply there; a channel without rules follows its workspace's; a workspace without rules lets
everyone ask (today's behaviour). Admins may always ask. A refusal is private, polite and audited.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bot.engine.admin_syntax import EVERYONE
from bot.engine.model import UNREAD, Inbound
from bot.engine.roles import group_label
from storage.batch import Batch, stores
from storage.policy_rules import scope_channel, scope_workspace
from storage.protocols import AccessRule, Handle

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

REFUSED = "Sorry, you can't ask me to do things here: an admin has limited who may. Ask one of them for access."
DM_REFUSED = "Sorry, direct messages to me are turned off here. Mention me in a channel instead."


class AccessControl:
    """Answers whether a person may start something with the bot where they wrote.

    >>> await AccessControl(storage, roles).refusal(inbound)
    None
    """

    def __init__(self, storage: AsyncStores, roles: Any) -> None:
        self.storage = storage
        self.roles = roles

    def read(self, batch: Batch, inbound: Inbound) -> Handle[list[AccessRule]]:
        """Add the read of the access rules :meth:`refusal` goes by to ``batch``, to make together with others."""
        return batch.read(stores.access.rules, _scopes(inbound))

    async def refusal(self, inbound: Inbound, rules: Any = UNREAD) -> str | None:
        """``None`` when ``inbound``'s author may ask there, else the sentence that tells them why not.

        ``rules``: the result of :meth:`read`, if the caller made it (else they are read here).
        """
        if await self.roles.is_admin(inbound.user, inbound.platform):
            return None
        workspace = scope_workspace(inbound.platform, inbound.workspace)
        if inbound.is_direct and not await self.storage.access.direct_messages_allowed(workspace):
            return DM_REFUSED
        scopes = _scopes(inbound)
        if rules is UNREAD:
            rules = await self.storage.access.rules(scopes)  # every scope's rules in one read
        for scope in scopes:  # the most specific scope that has rules decides
            principals = [r.principal for r in rules if r.scope == scope]
            if principals:
                allowed = EVERYONE in principals or await self.roles.includes(
                    principals, inbound.user, inbound.platform
                )
                return None if allowed else REFUSED
        return None

    async def listing(self, platform: str, workspace: str) -> str:
        """``access list``: the rules of this workspace and its channels, in plain words."""
        scope = scope_workspace(platform, workspace)
        prefix = f"channel:{platform}:{workspace}:"
        rules = [r for r in await self.storage.access.rules() if r.scope == scope or r.scope.startswith(prefix)]
        dms = "allowed" if await self.storage.access.direct_messages_allowed(scope) else "turned off"
        if not rules:
            return (
                "Everyone may ask the bot, in every channel of this workspace (no access rules). "
                f"Direct messages: {dms}."
            )
        by_scope: dict[str, list[str]] = {}
        for rule in rules:
            by_scope.setdefault(rule.scope, []).append(group_label(rule.principal))
        lines = ["Who may ask (admins always may):"]
        for where, who in by_scope.items():
            place = "the whole workspace" if where == scope else "#" + where[len(prefix) :]
            lines.append(f"  {place}: {', '.join(who)}")
        if scope not in by_scope:
            lines.append("  elsewhere in the workspace: everyone")
        lines.append(f"Direct messages: {dms}.")
        return "\n".join(lines)


def _scopes(inbound: Inbound) -> list[str]:
    """The scopes whose access rules apply to ``inbound``, most specific first."""
    workspace = scope_workspace(inbound.platform, inbound.workspace)
    return (
        [workspace]
        if inbound.is_direct
        else [scope_channel(inbound.platform, inbound.workspace, inbound.channel), workspace]
    )
