"""Long-term memory in chat: whose memories a run sees, the built-in ``remember`` tool, and the "from memory" note.

Scopes, as keys in the memory store:

- a person's memories have ``user_id = "<platform>:<workspace>:<user>"``;
- a channel's shared memories have no ``user_id`` and ``metadata = {"channel": "<platform>:<workspace>:<channel>",
  "workspace": "<platform>:<workspace>"}``.

Every run searches the requester's memories and its channel's shared ones (one search, one filter), so one
person's memories never reach another person's run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from bot.aio import run_sync
from bot.hitl.breakpoint import HITLBreakpointException
from bot.hitl.dataclasses import ToolExecutionDecision
from bot.memory.context import MEMORY_META_KEY
from bot.messages import ChatRole
from bot.tools import Tool, tool
from storage.memory_rows import query_terms
from storage.protocols import Memory

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

logger = logging.getLogger(__name__)

MEMORY_SCOPE = "memory_scope"
"""The run's state key holding where the ``remember`` tool saves (platform, workspace, channel, requester)."""
REMEMBER = "remember"
TOP_K = 5
NOTE_CHARS = 120
"""A memory quoted in the "from memory" note is cut to this many characters."""


def person_key(platform: str, workspace: str, user: str) -> str:
    """The ``user_id`` of a person's memories.

    >>> person_key("slack", "T1", "U_ANA")
    'slack:T1:U_ANA'
    """
    return f"{platform}:{workspace}:{user}"


def channel_key(platform: str, workspace: str, channel: str) -> str:
    """The ``meta.channel`` of a channel's shared memories."""
    return f"{platform}:{workspace}:{channel}"


def channel_filter(platform: str, workspace: str, channel: str) -> dict[str, Any]:
    """The filter of one channel's shared memories (not anybody's own)."""
    return {
        "operator": "AND",
        "conditions": [
            {"field": "user_id", "operator": "==", "value": None},
            {"field": "meta.channel", "operator": "==", "value": channel_key(platform, workspace, channel)},
        ],
    }


def workspace_shared_filter(platform: str, workspace: str) -> dict[str, Any]:
    """The filter of every channel's shared memories in one workspace."""
    return {
        "operator": "AND",
        "conditions": [
            {"field": "user_id", "operator": "==", "value": None},
            {"field": "meta.workspace", "operator": "==", "value": f"{platform}:{workspace}"},
        ],
    }


def run_memory_kwargs(context: Mapping[str, Any]) -> dict[str, Any]:
    """The agent's ``memory_store_kwargs`` for a run: the requester's memories and the channel's shared ones."""
    platform, workspace = context["platform"], context["workspace"]
    person = {"field": "user_id", "operator": "==", "value": person_key(platform, workspace, context["requester"])}
    shared = channel_filter(platform, workspace, context["channel"])
    return {"search_criteria": {"filters": {"operator": "OR", "conditions": [person, shared]}, "top_k": TOP_K}}


def run_memory_scope(context: Mapping[str, Any]) -> dict[str, str]:
    """The run's :data:`MEMORY_SCOPE` state: where ``remember`` saves, and who asked."""
    return {k: str(context[k]) for k in ("platform", "workspace", "channel", "requester")}


def remember_tool(storage: AsyncStores, clock: Callable[[], datetime]) -> Tool:
    """The built-in ``remember`` tool: saves a fact to the requester's memory, or to the channel's (asked first).

    Its default policy is ``never`` (admins change it like any other tool's); a save to the channel's shared
    memory is asked about whatever the policy (see :class:`RememberConfirmation`). Every save is audited.
    """

    @tool(name=REMEMBER, inputs_from_state={MEMORY_SCOPE: "scope"}, confirmation_default="never")
    async def remember(fact: str, for_channel: bool = False, scope: dict[str, str] | None = None) -> str:
        """Save a fact to long-term memory, to recall it in later conversations.

        :param fact: The fact, as one short self-contained sentence, e.g. "checkout deploys need two approvers".
        :param for_channel: True to share it with everyone in this channel (a person is asked first);
            false keeps it in the requester's own memory.
        """
        if not scope:
            raise ValueError("remember works only in a conversation with the bot")
        platform, workspace, channel = scope["platform"], scope["workspace"], scope["channel"]
        if for_channel:
            kwargs: dict[str, Any] = {
                "metadata": {
                    "channel": channel_key(platform, workspace, channel),
                    "workspace": f"{platform}:{workspace}",
                }
            }
        else:
            kwargs = {"user_id": person_key(platform, workspace, scope["requester"])}
        ids = await storage.memories.add_memories([fact], **kwargs)
        if not ids:
            raise ValueError("there is nothing to remember in an empty fact")
        where = f"channel:{channel_key(platform, workspace, channel)}" if for_channel else "person"
        await storage.audit.append(
            scope["requester"], "memory add", ids[0], {"scope": where, "platform": platform}, now=clock()
        )
        return f"Remembered ({'this channel' if for_channel else 'your memory'}, id {ids[0]})."

    return remember


class RememberConfirmation:
    """The ``remember`` tool's strategy: the stored policy decides, but a save to a channel always asks first.

    A ``deny`` policy still blocks every save.
    """

    def __init__(self, policy_strategy: Any) -> None:
        self.policy_strategy = policy_strategy

    async def run_async(
        self,
        *,
        tool_name: str,
        tool_description: str,
        tool_params: dict[str, Any],
        tool_call_id: str | None = None,
        confirmation_strategy_context: dict[str, Any] | None = None,
    ) -> ToolExecutionDecision:
        """Ask for a channel save (unless denied); otherwise decide as the policy strategy does."""
        decision = await _decide(
            self.policy_strategy, tool_name, tool_description, tool_params, tool_call_id, confirmation_strategy_context
        )
        if decision is not None and decision.execute and tool_params.get("for_channel") is True:
            raise HITLBreakpointException(
                "Saving to the channel's shared memory needs approval.", tool_name=tool_name, tool_call_id=tool_call_id
            )
        if decision is None:
            raise HITLBreakpointException(
                f"Tool '{tool_name}' needs approval.", tool_name=tool_name, tool_call_id=tool_call_id
            )
        return decision

    def run(self, **kwargs: Any) -> ToolExecutionDecision:
        """Sync twin of :meth:`run_async`."""
        return run_sync(self.run_async(**kwargs))

    def to_dict(self) -> dict[str, Any]:
        """Not serialisable: bound to live storage through its policy strategy."""
        raise TypeError("RememberConfirmation is bound to live storage and is not serialisable")


async def _decide(
    strategy: Any,
    tool_name: str,
    description: str,
    params: dict[str, Any],
    call_id: str | None,
    context: dict[str, Any] | None,
) -> ToolExecutionDecision | None:
    """The policy strategy's decision, or ``None`` when it would ask."""
    try:
        return await strategy.run_async(
            tool_name=tool_name,
            tool_description=description,
            tool_params=params,
            tool_call_id=call_id,
            confirmation_strategy_context=context,
        )
    except HITLBreakpointException:
        return None


def memory_note(result: Mapping[str, Any], answer: str) -> str:
    """One short line per memory the answer drew on ("from channel memory: …"), or ``""``.

    A memory counts as used when the answer shares a word with it (beyond stop words): the model was shown
    more memories than it may use, and a note on every one would be noise.
    """
    shown = [
        m
        for message in result.get("messages") or ()
        if message.role == ChatRole.SYSTEM
        for m in message.meta.get(MEMORY_META_KEY) or ()
    ]
    answer_words = set(query_terms(answer))
    lines = []
    for data in shown:
        memory = Memory.from_dict(data) if isinstance(data, dict) else None
        if memory is None or not answer_words & set(query_terms(memory.text)):
            continue
        text = memory.text if len(memory.text) <= NOTE_CHARS else memory.text[: NOTE_CHARS - 1] + "…"
        lines.append(f"(from {'your' if memory.user_id else 'channel'} memory: {text})")
    return "\n".join(lines)
