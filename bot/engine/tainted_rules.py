"""Stricter approval for tainted calls only: ``four-eyes <tool> on|off when tainted`` and
``approvers <tool> <@user|@group ...|none> when tainted`` (issue 31).

The rule is stored per tool, for every channel, in ``storage.tool_settings`` (settings ``tainted_four_eyes``:
``on``; ``tainted_approvers``: the approver entries as JSON). When a call with an argument copied from untrusted
text (``bot.engine.provenance``) pauses, its approval is stored with the rule applied: four-eyes on, and those
approvers instead of the tool's own. Every decision is checked against the stored approval (``authorize_now``, at
each click and each quorum vote), so the rule is enforced by the engine when the decision is counted, on every
surface; a call without a tainted argument keeps the tool's ordinary rule. A rule set after a call paused does not
change that call (as for every other approval rule).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.engine.errors import CommandError
from bot.engine.roles import group_label

if TYPE_CHECKING:
    from bot.engine.admin_syntax import AdminCommand
    from bot.engine.confirmation import EffectivePolicy
    from bot.engine.model import AdminRequest
    from bot.tools import Tool
    from storage.async_protocols import AsyncStores

FOUR_EYES = "tainted_four_eyes"
APPROVERS = "tainted_approvers"
ON = "on"


@dataclass(frozen=True)
class TaintedRule:
    """What a tool's tainted calls need besides its ordinary rule."""

    four_eyes: bool = False
    approvers: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.four_eyes or bool(self.approvers)

    def apply(self, policy: EffectivePolicy) -> EffectivePolicy:
        """``policy`` with the rule applied: four-eyes on if the rule says so, its approvers if it names any."""
        return replace(
            policy,
            four_eyes=policy.four_eyes or self.four_eyes,
            approvers=self.approvers or policy.approvers,
        )

    def stored(self) -> dict[str, Any]:
        """As kept with the approval's provenance (``ApprovalRecord.provenance["rule"]``), for its card."""
        return {"four_eyes": self.four_eyes, "approvers": list(self.approvers)}


async def rules(storage: AsyncStores) -> dict[str, TaintedRule]:
    """Every tool's rule for its tainted calls, by tool name (tools without one are absent)."""
    four_eyes = await storage.tool_settings.values(FOUR_EYES)
    approvers = await storage.tool_settings.values(APPROVERS)
    found: dict[str, TaintedRule] = {}
    for tool_name in {*four_eyes, *approvers}:
        rule = TaintedRule(four_eyes.get(tool_name) == ON, _entries(approvers.get(tool_name)))
        if rule:
            found[tool_name] = rule
    return found


def _entries(stored: str | None) -> tuple[str, ...]:
    if not stored:
        return ()
    try:
        value = json.loads(stored)
    except ValueError:
        return ()
    return tuple(str(v) for v in value) if isinstance(value, list) else ()


async def run_command(
    storage: AsyncStores,
    tools: Mapping[str, Tool],
    approver_entries: Callable[[Sequence[str]], Any],
    clock: Callable[[], datetime],
    command: AdminCommand,
    request: AdminRequest,
) -> str:
    """``four-eyes <tool> on|off when tainted`` and ``approvers <tool> … when tainted`` (admins only; audited)."""
    tool_name = command.tool_key or ""
    if tool_name not in tools:
        raise CommandError("A rule for tainted calls is set per tool: name a tool, not a group or '*'.")
    if command.name == "four-eyes":
        setting, value = FOUR_EYES, ON if command.value else None
        fields: dict[str, Any] = {"tainted_four_eyes": bool(command.value)}
        answer = (
            f"Tainted calls of {tool_name} now need someone other than the person who asked."
            if command.value
            else f"Tainted calls of {tool_name} no longer need four-eyes (the tool's own rule applies)."
        )
    else:
        entries: tuple[str, ...] = tuple(await approver_entries(command.value))
        setting, value = APPROVERS, json.dumps(list(entries)) if entries else None
        fields = {"tainted_approvers": list(entries)}
        answer = (
            f"Tainted calls of {tool_name} are now approved by {', '.join(group_label(e) for e in entries)}."
            if entries
            else f"Tainted calls of {tool_name} are approved by the tool's own approvers again."
        )
    await storage.tool_settings.set_value(tool_name, setting, value, updated_by=request.actor, now=clock())
    await storage.audit.append(
        request.actor,
        command.name,
        f"global/{tool_name}",
        {"fields": fields, "condition": "tainted", "platform": request.platform},
        now=clock(),
    )
    return answer


def listing(found: Mapping[str, TaintedRule]) -> list[str]:
    """``policy list``'s lines for the tools' tainted-call rules."""
    lines = []
    for tool_name, rule in sorted(found.items()):
        parts = (["four-eyes"] if rule.four_eyes else []) + (
            ["approvers " + ", ".join(group_label(a) for a in rule.approvers)] if rule.approvers else []
        )
        lines.append(f"  {tool_name} when tainted (every channel): {'; '.join(parts)}")
    return lines
