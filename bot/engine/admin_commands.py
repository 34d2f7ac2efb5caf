"""Running admin commands: policy changes (admins only, audited) and listings (anyone)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot.engine import justification, responding, tainted_rules
from bot.engine.access import AccessControl
from bot.engine.admin_syntax import USAGE, AdminCommand, format_duration, format_rule, parse_command
from bot.engine.breakglass import SETTING as BREAKGLASS_SETTING
from bot.engine.breakglass import BreakGlass
from bot.engine.confirmation import EffectivePolicy, effective_policy
from bot.engine.decisions import authorize_now
from bot.engine.errors import CommandError, EngineError, NotAnAdmin
from bot.engine.mcp_commands import MCPCommands
from bot.engine.memory_commands import MemoryCommands
from bot.engine.model import AdminRequest, conversation_place
from bot.engine.review import REVIEW
from bot.engine.roles import Roles, group_label
from bot.engine.sentences import place_name
from bot.engine.team_commands import TeamCommands, approver_count
from bot.redaction import mask_text
from bot.tools import Tool
from storage.policy_rules import scope_channel, scope_global, scope_workspace
from storage.protocols import ApprovalRecord

if TYPE_CHECKING:
    from bot.engine.rejudging import Rejudging
    from storage.async_protocols import AsyncStores

REJUDGING_COMMANDS = ("policy set", "policy reset", "approvers", "quorum", "four-eyes")
"""Issue 30: the changes after which the pending approvals of the tools they name are judged again."""
GROUP_COMMANDS = ("group set", "group delete")
"""Changes of who is in an approver group: every pending approval in the workspace is judged again (its votes by
people no longer allowed to decide stop counting)."""


class AdminCommands:
    """Executes parsed admin commands against storage; every answer is plain text.

    >>> await AdminCommands(storage, tools, roles, clock, default_ttl=86400).run(request)
    'Rule updated: delete_file @ workspace:slack:T1: mode=always'
    """

    def __init__(
        self,
        storage: AsyncStores,
        tools: Mapping[str, Tool],
        roles: Roles,
        clock: Callable[[], datetime],
        *,
        default_ttl: int,
    ) -> None:
        self.storage = storage
        self.tools = tools
        self.roles = roles
        self.clock = clock
        self.default_ttl = default_ttl
        self.memory = MemoryCommands(storage, roles, clock)
        self.team = TeamCommands(storage, tools, clock, AccessControl(storage, roles))
        self.breakglass: BreakGlass | None = None
        """Issue 31: ``breakglass list|review`` (set by the engine's parts once it is built)."""
        self.mcp = MCPCommands(storage, clock)
        """Issue 25: ``mcp list|reload`` (its manager is set by ``Engine.create``)."""
        self.rejudging: Rejudging | None = None
        """Issue 30: judges pending approvals again after a policy change (set by the engine's parts)."""

    async def run(self, request: AdminRequest) -> str:
        """Run one admin command; always answers with plain text (errors and usage included)."""
        try:
            command = parse_command(request.text)
            if command.name.startswith("memory "):
                return await self.memory.run(command, request)
            if command.is_change and not await self.roles.is_admin(request.actor, request.platform):
                await self.storage.audit.append(
                    request.actor,
                    "policy change refused",
                    command.tool_key or command.name,
                    {"command": request.text[:200], "workspace": f"{request.platform}:{request.workspace}"},
                    now=self.clock(),
                )
                raise NotAnAdmin("reload the MCP servers") if command.name == "mcp reload" else NotAnAdmin()
            if command.name.startswith("breakglass ") or command.breakglass is not None:
                answer = await self._breakglass(command, request)
            elif command.name.startswith("mcp "):
                return await self.mcp.run(command, request)
            else:
                answer = await self._run_admin(command, request)
            if command.name in REJUDGING_COMMANDS and self.rejudging is not None and command.tool_key:
                said = (await self.rejudging.after_change(request, command.tool_key)).sentence()
                answer = f"{answer}\n{said}" if said else answer
            elif command.name in GROUP_COMMANDS and self.rejudging is not None:
                said = (await self.rejudging.after_change(request, "*")).sentence()
                answer = f"{answer}\n{said}" if said else answer
            return answer
        except EngineError as exc:
            return str(exc)

    async def _run_admin(self, command: AdminCommand, request: AdminRequest) -> str:
        if command.name == "help":
            return USAGE
        if command.name.startswith(("group ", "access ")) or command.name == "dm":
            return await self.team.run(command, request)
        if command.name == "pending":
            return await self._pending(request)
        if command.name == "audit":
            return await self._audit(command, request)
        if command.name == "usage":
            return await self._usage(request, command.channel, command.value)
        if command.name.startswith("justification"):  # issue 31
            return await justification.run_command(self.storage, self.tools, self.clock, command, request)
        if command.name == "respondable":  # issue 30
            shown = self.rejudging.views.respondable if self.rejudging is not None else None
            return await responding.run_command(self.storage, self.tools, self.clock, command, request, shown)
        channel = command.channel
        scope = (
            scope_channel(request.platform, request.workspace, channel)
            if channel
            else scope_workspace(request.platform, request.workspace)
        )
        if command.name == "policy list":
            return await self._policy_listing(request, channel or request.channel, scope if channel else None)
        tool_key = command.tool_key or ""
        if command.name in ("four-eyes", "approvers") and command.condition is not None:  # issue 31: when tainted
            return await tainted_rules.run_command(
                self.storage, self.tools, self.team.approver_entries, self.clock, command, request
            )
        await self._check_tool_key(tool_key)
        if command.condition is not None:
            return await self._conditional(command, request, scope)
        if command.name == "policy reset":
            removed = await self.storage.policies.reset_rule(scope, tool_key)
            await self._audit_change(request, "policy reset", tool_key, scope, {})
            where = f"{tool_key} in {place_name(request, channel)}"
            return f"Rule for {where} removed." if removed else f"There was no rule for {where}."
        if command.name == "approvers":
            command = replace(command, value=await self.team.approver_entries(command.value))
        if command.name in ("quorum", "approvers"):
            await self._check_quorum(scope, tool_key, command)
        field_of = {
            "policy set": "mode",
            "approvers": "approvers",
            "quorum": "quorum",
            "four-eyes": "four_eyes",
            "ttl": "ttl_seconds",
        }
        fields = {field_of[command.name]: list(command.value) if command.name == "approvers" else command.value}
        rule = await self.storage.policies.set_rule(scope, tool_key, updated_by=request.actor, **fields)
        await self._audit_change(request, command.name, tool_key, scope, fields)
        return "Rule updated: " + format_rule(
            tool_key,
            scope,
            where=place_name(request, channel),
            fields={
                "mode": rule.mode,
                "approvers": rule.approvers,
                "quorum": rule.quorum,
                "four_eyes": rule.four_eyes,
                "ttl_seconds": rule.ttl_seconds,
            },
        )

    async def _pending(self, request: AdminRequest) -> str:
        """The approvals waiting in the asker's workspace (recorded as shown here, for those they may decide)."""
        # One install may serve several workspaces: never list another workspace's approvals.
        prefix = f"{request.platform}:{request.workspace}:"
        pending = [
            r
            for r in await self.storage.approvals.pending(platform=request.platform)
            if r.chat_history_id.startswith(prefix)
        ]
        if not pending:
            return "No approvals are waiting."
        # The listing shows them in this conversation: a click from here may decide those this person may
        # decide. Listing must not turn a channel into a place for approvals nobody there may decide.
        here = conversation_place(request.platform, request.channel)
        decidable = [r.approval_id for r in pending if await _may_decide(self.roles, r, request.actor)]
        if decidable:
            await self.storage.places.record(decidable, here, now=self.clock())
        return "\n".join(
            f"{'review of the result of ' if r.kind == REVIEW else ''}{r.tool_name} asked by {r.requester}, "
            f"expires {r.expires_at:%Y-%m-%d %H:%M} UTC (id {r.approval_id[:8]})"
            for r in pending
        )

    async def _audit(self, command: AdminCommand, request: AdminRequest) -> str:
        """The last audit entries of the asker's workspace, secrets masked."""
        # Like pending: one install may serve several workspaces; never show another workspace's entries.
        entries = await self.storage.audit.recent(command.value, workspace=f"{request.platform}:{request.workspace}")
        # Subjects can echo what someone typed (a refused command's tool name): mask secrets in them.
        return (
            "\n".join(mask_text(f"{e.at:%Y-%m-%d %H:%M:%S} {e.actor} {e.action} {e.subject}") for e in entries)
            or "The audit log is empty."
        )

    async def _usage(self, request: AdminRequest, channel: str | None, days: int) -> str:
        """The tokens the model used for this workspace's (or one channel's) runs over the last ``days``."""
        totals = await self.storage.runs.usage(
            platform=request.platform,
            workspace=request.workspace,
            channel=channel,
            since=self.clock() - timedelta(days=days),
        )
        where = place_name(request, channel)
        period = "the last day" if days == 1 else f"the last {days} days"
        return (
            f"Token usage in {where} over {period}: {totals.total_tokens:,} tokens "
            f"({totals.prompt_tokens:,} prompt, {totals.completion_tokens:,} completion) in {totals.runs:,} run(s)."
        )

    async def _conditional(self, command: AdminCommand, request: AdminRequest, scope: str) -> str:
        """``policy set|reset <tool> … when …``: a mode for the calls whose arguments match."""
        tool, condition = self.tools.get(command.tool_key or ""), command.condition
        assert condition is not None
        if tool is None:
            raise CommandError("A condition looks at one tool's arguments: name a tool, not a group or '*'.")
        condition.check_fields(tool)
        where = f"{tool.name} when {condition.text} in {place_name(request, command.channel)}"
        if command.name == "policy reset":
            removed = await self.storage.conditions.reset_rule(scope, tool.name, condition.text)
            await self._audit_change(request, "policy reset", tool.name, scope, {"condition": condition.text})
            return f"Rule for {where} removed." if removed else f"There was no rule for {where}."
        await self.storage.conditions.set_rule(
            scope, tool.name, condition.text, command.value, updated_by=request.actor, now=self.clock()
        )
        await self._audit_change(
            request, "policy set", tool.name, scope, {"mode": command.value, "condition": condition.text}
        )
        return f"Rule updated: {where}: mode={command.value}"

    async def _breakglass(self, command: AdminCommand, request: AdminRequest) -> str:
        """Issue 31: ``breakglass list|review …``, and ``policy set … breakglass after <d>|off``."""
        if command.name.startswith("breakglass "):
            if self.breakglass is None:
                raise CommandError("Break-glass is not available here.")
            return await self.breakglass.run_command(command, request)
        await self._set_breakglass(command, request)
        answer = await self._run_admin(replace(command, breakglass=None), request)
        if command.breakglass:
            return f"{answer}\nBreak-glass: the requester may break glass after {format_duration(command.breakglass)}."
        return f"{answer}\nBreak-glass is off for {command.tool_key}."

    async def _set_breakglass(self, command: AdminCommand, request: AdminRequest) -> None:
        """Store a tool's break-glass delay (``storage.tool_settings``; per tool, every channel), audited."""
        tool_name = command.tool_key or ""
        if tool_name not in self.tools:
            raise CommandError("Break-glass is set per tool: name a tool, not a group or '*'.")
        seconds = command.breakglass or None
        await self.storage.tool_settings.set_value(
            tool_name, BREAKGLASS_SETTING, str(seconds) if seconds else None, updated_by=request.actor, now=self.clock()
        )
        await self.storage.audit.append(
            request.actor,
            "breakglass",
            f"global/{tool_name}",
            {"fields": {"breakglass_seconds": seconds}, "platform": request.platform},
            now=self.clock(),
        )

    async def _check_quorum(self, scope: str, tool_key: str, command: AdminCommand) -> None:
        """Refuse a quorum that the rule's own approvers could never reach (the approval would only expire)."""
        rule = await self.storage.policies.get_rule(scope, tool_key)
        approvers = command.value if command.name == "approvers" else (rule.approvers if rule else None)
        quorum = command.value if command.name == "quorum" else (rule.quorum if rule else None)
        groups = {g.name: g.members for g in await self.storage.approver_groups.list_groups()}
        possible = approver_count(approvers or (), groups)
        if not possible or not quorum or quorum <= possible:
            return  # no approvers named (requester and admins decide), or enough of them
        if command.name == "quorum":
            raise CommandError(
                f"A quorum of {quorum} can't be reached: {tool_key} has {possible} approver(s) here. "
                "Name more approvers first, or choose a smaller quorum."
            )
        raise CommandError(
            f"{tool_key} needs a quorum of {quorum} here, so name at least {quorum} approvers "
            "(or lower the quorum first)."
        )

    async def _check_tool_key(self, tool_key: str) -> None:
        groups = await self.storage.policies.groups()
        if tool_key == "*" or tool_key in self.tools or tool_key in groups:
            return
        known = ", ".join(sorted(self.tools)) + (f"; groups: {', '.join(sorted(groups))}" if groups else "")
        raise CommandError(f"Unknown tool '{tool_key[:64]}'. Known tools: {known}.")

    async def _audit_change(self, request: AdminRequest, action: str, tool_key: str, scope: str, fields: dict) -> None:
        await self.storage.audit.append(
            request.actor,
            action,
            f"{scope}/{tool_key}",
            {"fields": fields, "platform": request.platform},
            now=self.clock(),
        )

    async def _policy_listing(self, request: AdminRequest, channel: str, scope: str | None) -> str:
        context = {"platform": request.platform, "workspace": request.workspace, "channel": channel}
        lines = [f"Effective policies in #{channel}:"]
        for name, tool in sorted(self.tools.items()):
            policy = await effective_policy(self.storage, tool, context, self.default_ttl)
            approvers = ", ".join(map(group_label, policy.approvers)) if policy.approvers else "requester and admins"
            lines.append(
                f"  {name}: {policy.mode}; approvers: {approvers}; quorum {policy.quorum}; "
                f"four-eyes {'on' if policy.four_eyes else 'off'}; "
                f"ttl {format_duration(policy.ttl_seconds)}{_self_approval_note(policy)}"
            )
        rows = await self.policy_table(request.platform, request.workspace)
        conditional = await self._conditional_rules(request.platform, request.workspace)
        tainted = tainted_rules.listing(await tainted_rules.rules(self.storage))
        if rows or conditional or tainted:
            lines.append("Rules:")
            lines.extend(f"  {format_rule(r['tool'], r['scope'], r)}" for r in rows)
            lines.extend(f"  {r.tool_name} when {r.condition} @ {r.scope}: mode={r.mode}" for r in conditional)
            lines.extend(tainted)
        return "\n".join(lines)

    async def _conditional_rules(self, platform: str, workspace: str) -> list[Any]:
        prefix = f"channel:{platform}:{workspace}:"
        here = (scope_global(), scope_workspace(platform, workspace))
        return [r for r in await self.storage.conditions.rules() if r.scope in here or r.scope.startswith(prefix)]

    async def policy_table(self, platform: str, workspace: str) -> list[dict[str, Any]]:
        """Stored rules that apply in this workspace: global, workspace and its channels."""
        prefix = f"channel:{platform}:{workspace}:"
        rows = []
        for rule in await self.storage.policies.list_rules():
            if rule.scope in (scope_global(), scope_workspace(platform, workspace)) or rule.scope.startswith(prefix):
                rows.append(
                    {
                        "scope": rule.scope,
                        "tool": rule.tool_key,
                        "mode": rule.mode,
                        "approvers": rule.approvers,
                        "quorum": rule.quorum,
                        "four_eyes": rule.four_eyes,
                        "ttl_seconds": rule.ttl_seconds,
                    }
                )
        return rows


async def _may_decide(roles: Roles, record: ApprovalRecord, actor: str) -> bool:
    """Whether ``actor`` may decide ``record`` now (the engine's own rule, without raising)."""
    try:
        await authorize_now(roles, record, actor)
    except EngineError:
        return False
    return True


def _self_approval_note(policy: EffectivePolicy) -> str:
    """Say where the person who asked may approve their own call (four-eyes off, and the tool asks at all)."""
    if policy.four_eyes or policy.mode == "never":
        return ""
    return "; requester may approve their own call" + (" if an approver" if policy.approvers else "")
