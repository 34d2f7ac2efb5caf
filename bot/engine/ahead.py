"""What a run reads first, read ahead in the write that starts it: its history, its tools' policies, memories.

Read in the same round trip as the write that stores the person's message and starts its run, exactly as
the agent will ask for them, and handed to the run (:meth:`bot.engine.history.StepHistory.prefetched`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.engine.history import AheadCall, ReadAhead, ahead_call
from bot.engine.memory import run_memory_kwargs
from bot.engine.model import Inbound, ThreadRef
from bot.engine.threads import channel_of, user_message
from bot.memory.context import DEFAULT_TOP_K
from bot.messages import ChatMessage
from bot.tools import Tool
from storage.batch import Batch, stores
from storage.protocols import PolicyView


class ReadsAhead:
    """The reads a run started for a message makes first (see the module docstring)."""

    def __init__(self, tools: Mapping[str, Tool], *, history_last_k: int) -> None:
        self.tools = tools
        self.history_last_k = history_last_k

    def for_message(self, batch: Batch, inbound: Inbound, message: ChatMessage | None = None) -> list[ReadAhead[Any]]:
        """Add to ``batch`` what a run started for ``inbound`` (``message``: as stored) reads first (its history,
        then its memories), exactly as the agent will ask."""
        thread = inbound.thread_ref
        calls: list[AheadCall[Any]] = [
            ahead_call(stores.messages.retrieve_messages, thread.key, last_k=self.history_last_k),
            self.policies(thread),
        ]
        query = (message or user_message(inbound)).text
        if query:
            criteria = run_memory_kwargs({**channel_of(thread), "requester": inbound.user})["search_criteria"]
            calls.append(
                ahead_call(
                    stores.memories.search_memories,
                    query,
                    filters=criteria.get("filters"),
                    top_k=criteria.get("top_k", DEFAULT_TOP_K),
                    user_id=None,
                    run_id=None,
                    agent_id=None,
                )
            )
        return [ReadAhead(call, call.read_in(batch)) for call in calls]

    def policies(self, thread: ThreadRef) -> AheadCall[Mapping[str, PolicyView]]:
        """The policy views of the agent's tools in the thread's channel, read ahead with the write that starts a
        run: a call they say to ask about pauses without a read of its own, checked by its pause (PoliciesRead)."""
        channel = channel_of(thread)
        return ahead_call(
            stores.policies.views,
            tuple(self.tools),
            platform=channel["platform"],
            workspace=channel["workspace"],
            channel=channel["channel"],
        )
