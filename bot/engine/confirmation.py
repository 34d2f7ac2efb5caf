"""The engine's confirmation strategy: per-channel policies from storage decide whether to pause."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from bot.aio import run_sync
from bot.canonical import args_digest
from bot.durations import MAX_TTL_SECONDS
from bot.engine.conditions import TAINT_FIELD, TAINTED, parse_condition
from bot.engine.errors import CommandError
from bot.engine.provenance import RunProvenance, run_provenance
from bot.hitl.breakpoint import HITLBreakpointException
from bot.hitl.dataclasses import ToolExecutionDecision
from bot.tools import Tool
from storage.policy_rules import channel_scopes, scope_channel
from storage.protocols import ConditionalRule, PolicyView

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

ALWAYS, NEVER, ONCE, DENY = "always", "never", "once", "deny"
REVIEW, ALWAYS_REVIEW = "review", "always+review"
"""``review``: the call runs at once and its result waits for a person; ``always+review``: asked before and after."""
MODES = (ALWAYS, NEVER, ONCE, DENY, REVIEW, ALWAYS_REVIEW)
REVIEW_MODES = (REVIEW, ALWAYS_REVIEW)
ASKING_MODES = (ALWAYS, ALWAYS_REVIEW)
"""The modes that always ask a human before the call (``once`` may not: it reads the ask-once memory)."""
GLOBAL_DEFAULT_MODE = ALWAYS
BLOCKED_FEEDBACK = "Tool execution for '{tool_name}' was blocked by policy."


@dataclass(frozen=True)
class EffectivePolicy:
    """The rule that applies to one tool call, with every default filled in."""

    mode: str
    approvers: tuple[str, ...]
    quorum: int
    four_eyes: bool
    ttl_seconds: int


POLICIES_READ = "countersign.policies_read"
"""The key, in a run's confirmation context, of its :class:`PoliciesRead`."""


class PoliciesRead:
    """The policy each call of the current step was decided with, for the pause that ends the same step.

    The confirmation strategy (before a call) and the review hook (after it) note the policy they read; the
    engine's pause then stores each pending call's approval (approvers, quorum, TTL) from that same read
    instead of reading storage again a few milliseconds later. An entry is taken once, only for the same call
    with the same arguments, and the pause drops the rest: no policy outlives the step it was read in, and the
    next decision (the next call, a resumed step's review) reads storage afresh.

    ``ahead``: the policy views of the agent's tools in the run's channel, read with the write that started the run
    (:meth:`Engine.reads_ahead`), or ``None``. They serve only to *ask*: a call whose policy, computed from its view
    read ahead, asks a human pauses without a read of its own, and its entry keeps that view (:meth:`take_checked`),
    which the pause's own transaction compares with what is stored now (``policies.unchanged``): a policy changed
    since the run started refuses the pause, and the engine decides the step again on fresh reads. Every other
    outcome (a call that runs without a human, or is denied) is decided on a fresh read. The views are used by the
    run's first invocation only (from its start until it first pauses or ends; :meth:`drop_ahead` forgets them at
    a refused pause): the check at the pause makes any age safe, and a short life keeps refusals rare.
    """

    def __init__(self, ahead: Mapping[str, PolicyView] | None = None) -> None:
        self._read: dict[tuple[str, str | None], tuple[dict[str, Any], EffectivePolicy, PolicyView | None]] = {}
        self._ahead = ahead

    def ahead_view(self, tool_name: str) -> PolicyView | None:
        """The tool's policy view read ahead at the run's start, if any (``None``: read storage)."""
        ahead = self._ahead
        if ahead is None:
            return None
        try:
            return ahead[tool_name]
        except KeyError:
            return None

    def drop_ahead(self) -> None:
        """Forget the views read ahead: every later check reads storage afresh."""
        self._ahead = None

    def note(
        self,
        tool_name: str,
        tool_call_id: str | None,
        arguments: Mapping[str, Any],
        policy: EffectivePolicy,
        ahead: PolicyView | None = None,
    ) -> None:
        """Remember the policy a call was just decided with (a later read of the same call replaces it); ``ahead``:
        the view read ahead that it was computed from, for the pause to check (``None``: read just now)."""
        self._read[(tool_name, tool_call_id)] = (dict(arguments), policy, ahead)

    def take(self, tool_name: str, tool_call_id: str | None, arguments: Mapping[str, Any]) -> EffectivePolicy | None:
        """The policy noted for this call with exactly these arguments, once; ``None`` when there is none."""
        entry = self.take_checked(tool_name, tool_call_id, arguments)
        return entry[0] if entry is not None else None

    def take_checked(
        self, tool_name: str, tool_call_id: str | None, arguments: Mapping[str, Any]
    ) -> tuple[EffectivePolicy, PolicyView | None] | None:
        """:meth:`take`, with the view read ahead that the policy came from (which the pause must check), if any."""
        entry = self._read.pop((tool_name, tool_call_id), None)
        return (entry[1], entry[2]) if entry is not None and entry[0] == arguments else None

    def clear(self) -> None:
        """Forget everything noted (the step ended)."""
        self._read.clear()


def note_policy(
    context: Mapping[str, Any] | None,
    tool_name: str,
    tool_call_id: str | None,
    arguments: Mapping[str, Any],
    policy: EffectivePolicy,
) -> None:
    """Note ``policy`` in the run's :class:`PoliciesRead`, when its context carries one (the engine's runs do)."""
    read = context.get(POLICIES_READ) if context else None
    if isinstance(read, PoliciesRead):
        read.note(tool_name, tool_call_id, arguments, policy)


def channel_scope(context: Mapping[str, Any]) -> str:
    """The ask-once memory scope of a run's channel."""
    return scope_channel(context["platform"], context["workspace"], context["channel"])


async def effective_policy(
    storage: AsyncStores,
    tool: Tool | None,
    context: Mapping[str, Any],
    default_ttl: int,
    arguments: Mapping[str, Any] | None = None,
) -> EffectivePolicy:
    """Stored rule (channel > workspace > global; name > group > ``*``), then the tool's default, then ``always``.

    With ``arguments`` (a call being decided), the mode may come from a rule with a condition on them
    (:func:`conditional_mode`), and a tool's ``needs_approval`` is consulted when no admin rule sets the mode.
    One storage read: the plain rule and the conditional rules together (``policies.view``), read afresh at
    every decision, so a policy an admin tightened applies to the next call it decides. (The confirmation strategy
    may instead ask from a view read at the run's start, which the pause then checks: :class:`PoliciesRead`.)
    """
    where = {"platform": context["platform"], "workspace": context["workspace"], "channel": context["channel"]}
    if arguments is not None and tool is not None:
        view = await storage.policies.view(tool.name, **where)
    else:  # a listing: no call, so no condition can match
        view = PolicyView(await storage.policies.resolve(tool.name if tool else "*", **where))
    return await policy_of(view, tool, context, default_ttl, arguments)


async def policy_of(
    view: PolicyView,
    tool: Tool | None,
    context: Mapping[str, Any],
    default_ttl: int,
    arguments: Mapping[str, Any] | None = None,
) -> EffectivePolicy:
    """:func:`effective_policy` of what storage holds for the tool in the channel (``view``), read by the caller."""
    rule = view.rule
    mode = rule.mode
    if arguments is not None and tool is not None:
        mode_scope = rule.sources["mode"][0] if "mode" in rule.sources else None
        mode = conditional_mode(view.conditions, context, arguments, mode, mode_scope)
        if mode is None and tool.needs_approval is not None:
            mode = await _tool_decides(tool, arguments)
    mode = mode or (tool.confirmation_default if tool else None) or GLOBAL_DEFAULT_MODE
    if mode not in MODES:  # fail closed on anything unexpected
        mode = ALWAYS
    ttl = rule.ttl_seconds if rule.ttl_seconds and rule.ttl_seconds > 0 else default_ttl
    return EffectivePolicy(
        mode=mode,
        approvers=tuple(rule.approvers or ()),
        quorum=max(1, rule.quorum or 1),
        four_eyes=bool(rule.four_eyes),
        # A value stored before the bound existed (or written around the admin command) must not make
        # every call of the tool fail on an impossible expiry time: it waits the longest allowed instead.
        ttl_seconds=max(1, min(ttl, MAX_TTL_SECONDS)),
    )


def conditional_mode(
    conditions: Sequence[ConditionalRule],
    context: Mapping[str, Any],
    arguments: Mapping[str, Any],
    mode: str | None,
    mode_scope: str | None,
) -> str | None:
    """The mode of the most specific rule that matches: a narrower scope wins, then more clauses, and a matching
    conditional rule beats the plain rule of its own or a wider scope. ``mode``/``mode_scope``: the plain rule's;
    ``conditions``: the tool's conditional rules in the channel's scopes."""
    matched = best_condition(conditions, context, arguments)
    if matched is None:
        return mode
    (scope_rank, _clauses), best_mode, _text = matched
    plain_rank = len(SCOPE_ORDER) - SCOPE_ORDER.index(_kind(mode_scope)) if mode_scope else 0
    return best_mode if mode is None or scope_rank >= plain_rank else mode


SCOPE_ORDER = ("channel", "workspace", "global")


def _kind(scope: str) -> str:
    return scope.split(":", 1)[0]


def _scopes(context: Mapping[str, Any]) -> list[str]:
    return channel_scopes(context["platform"], context["workspace"], context["channel"])


async def matching_condition(
    storage: AsyncStores, tool_name: str, context: Mapping[str, Any], arguments: Mapping[str, Any]
) -> tuple[tuple[int, int], str, str] | None:
    """The most specific conditional rule matching ``arguments`` here: ``((scope rank, clauses), mode,
    condition text)``, or ``None`` (read from storage; see :func:`best_condition`)."""
    return best_condition(await storage.conditions.rules(_scopes(context), tool_name), context, arguments)


def best_condition(
    conditions: Sequence[ConditionalRule], context: Mapping[str, Any], arguments: Mapping[str, Any]
) -> tuple[tuple[int, int], str, str] | None:
    """Of one tool's conditional rules in the channel's scopes, the most specific matching ``arguments``:
    ``((scope rank, clauses), mode, condition text)``, or ``None``."""
    scopes = _scopes(context)
    best: tuple[tuple[int, int], str, str] | None = None
    for rule in conditions:
        if rule.scope not in scopes:
            continue
        try:
            condition = parse_condition(rule.condition)
        except CommandError:  # damaged outside countersign: it cannot match, the plain rule applies
            logger.warning("unreadable condition ignored", extra={"tool": rule.tool_name, "scope": rule.scope})
            continue
        if condition.matches(arguments):
            rank = (len(scopes) - scopes.index(rule.scope), len(condition.clauses))
            if best is None or rank > best[0]:
                best = (rank, rule.mode, rule.condition)
    return best


async def _tool_decides(tool: Tool, arguments: Mapping[str, Any]) -> str:
    """``always`` or ``never`` from the tool's ``needs_approval``; any error (or a non-bool answer) asks."""
    try:
        answer = tool.needs_approval({k: v for k, v in arguments.items() if k != TAINT_FIELD})  # type: ignore[misc]
        if inspect.isawaitable(answer):
            answer = await answer
    except Exception:  # a user's callable must never let a call through by failing
        logger.warning("needs_approval failed; asking", extra={"tool": tool.name}, exc_info=True)
        return ALWAYS
    return NEVER if answer is False else ALWAYS


class PolicyConfirmationStrategy:
    """``never`` and ``review`` run (a review follows), ``deny`` rejects, ``once`` asks unless the channel confirmed
    the same call, ``always`` and ``always+review`` ask.

    Pausing is a breakpoint: the engine stores the snapshot and renders the approvals.
    """

    def __init__(self, storage: AsyncStores, tools: Mapping[str, Tool], default_ttl: int) -> None:
        self.storage = storage
        self.tools = tools
        self.default_ttl = default_ttl

    async def run_async(
        self,
        *,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
        confirmation_strategy_context: dict[str, Any] | None = None,
    ) -> ToolExecutionDecision:
        """Decide from the stored policy, or raise :class:`HITLBreakpointException` to ask a human.

        With a view of the tool read ahead at the run's start (:class:`PoliciesRead`), a policy that asks
        (``always``, ``always+review``) pauses at once, and the pause checks that view in its transaction. Any other
        outcome is decided on a fresh read: what runs without a human, or is denied, is never decided on a view
        read before the model answered.
        """
        context = confirmation_strategy_context or {}
        tool = self.tools.get(tool_name)
        provenance = run_provenance(context)  # issue 31: a tainted call is matched with its taint mark
        tainted = provenance is not None and bool(provenance.of_call(tool_name, tool_call_id))
        original_params, tool_params = tool_params, ({**tool_params, TAINT_FIELD: True} if tainted else tool_params)
        read = context.get(POLICIES_READ)
        ahead = read.ahead_view(tool_name) if isinstance(read, PoliciesRead) and tool is not None else None
        if ahead is not None:
            policy = await policy_of(ahead, tool, context, self.default_ttl, arguments=tool_params)
            if policy.mode in ASKING_MODES:
                read.note(tool_name, tool_call_id, original_params, policy, ahead=ahead)  # type: ignore[union-attr]
                raise _ask(tool_name, tool_call_id, policy)
            fresh = await self.storage.policies.view(
                tool_name, platform=context["platform"], workspace=context["workspace"], channel=context["channel"]
            )
            if fresh != ahead:  # changed since the run started (unchanged: the policy computed above stands)
                policy = await policy_of(fresh, tool, context, self.default_ttl, arguments=tool_params)
        else:
            policy = await effective_policy(self.storage, tool, context, self.default_ttl, arguments=tool_params)
        if tainted and provenance is not None:  # --- issue 31: a tainted call that would run asks instead
            policy = await self._tainted(policy, provenance, tool_name, tool_call_id, context, tool_params)
        tool_params = original_params
        note_policy(context, tool_name, tool_call_id, tool_params, policy)  # a pause in this step stores it
        if policy.mode in (NEVER, REVIEW):  # a review holds the result after the call, at after_tool
            return ToolExecutionDecision(tool_name, True, tool_call_id, final_tool_params=dict(tool_params))
        if policy.mode == DENY:
            return ToolExecutionDecision(
                tool_name, False, tool_call_id, feedback=BLOCKED_FEEDBACK.format(tool_name=tool_name)
            )
        if policy.mode == ONCE and await self.storage.policies.is_confirmed(
            channel_scope(context), tool_name, args_digest(tool_params)
        ):
            return ToolExecutionDecision(tool_name, True, tool_call_id, final_tool_params=dict(tool_params))
        raise _ask(tool_name, tool_call_id, policy)

    async def _tainted(
        self,
        policy: EffectivePolicy,
        provenance: RunProvenance,
        tool_name: str,
        tool_call_id: str | None,
        context: Mapping[str, Any],
        marked: Mapping[str, Any],
    ) -> EffectivePolicy:
        """A tainted call's policy: a mode that runs without asking asks, unless a ``when tainted`` rule chose it."""
        if policy.mode not in (NEVER, REVIEW, ONCE):
            return policy
        matched = await matching_condition(self.storage, tool_name, context, marked)
        if matched is not None and matched[1] == policy.mode and TAINTED in matched[2].split(" and "):
            return policy  # an admin's rule says what tainted calls of this tool do
        provenance.escalated.add((tool_name, tool_call_id))
        return replace(policy, mode=ALWAYS_REVIEW if policy.mode == REVIEW else ALWAYS)

    def run(self, **kwargs: Any) -> ToolExecutionDecision:
        """Sync twin of :meth:`run_async`."""
        return run_sync(self.run_async(**kwargs))

    def to_dict(self) -> dict[str, Any]:
        """Not serialisable: it is bound to a live storage."""
        raise TypeError("PolicyConfirmationStrategy is bound to live storage and is not serialisable")


def _ask(tool_name: str, tool_call_id: str | None, policy: EffectivePolicy) -> HITLBreakpointException:
    return HITLBreakpointException(
        f"Tool '{tool_name}' needs approval ({policy.mode}).", tool_name=tool_name, tool_call_id=tool_call_id
    )
