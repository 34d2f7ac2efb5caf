"""What a run's ``memory_store_kwargs`` mean: which memories to search for, and the message that carries them.

The agent calls :func:`search_for_run` before its first model call and puts :func:`memory_message` right
after the system prompt. That message is a system message marked ``meta["memories"]`` (the memories shown): it
is part of the run's transcript (and of a snapshot, so a resumed run sees the same memories), but never of
the thread's stored history, so ``last_k`` never counts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.aio import call_store
from bot.canonical import canonical_json
from bot.messages import ChatMessage, ChatRole
from storage.memory_filters import validate_filter
from storage.memory_rows import check_top_k
from storage.protocols import Memory

MEMORY_HEADER = "Relevant memories:"
"""The first line of the memory message."""
MEMORY_META_KEY = "memories"
"""``message.meta[MEMORY_META_KEY]``: the memories a memory message carries (``Memory.to_dict()`` each)."""
RUN_KWARGS = frozenset({"user_id", "run_id", "agent_id", "search_criteria"})
CRITERIA = frozenset({"filters", "query", "top_k", "include_memory_metadata"})
DEFAULT_TOP_K = 5


def check_memory_kwargs(memory_store_kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """The kwargs as a dict; ``ValueError`` for unknown keys, a bad ``top_k`` or a malformed filter.

    >>> check_memory_kwargs({"user_id": "U1", "search_criteria": {"top_k": 3}})
    {'user_id': 'U1', 'search_criteria': {'top_k': 3}}
    """
    kwargs = dict(memory_store_kwargs or {})
    unknown = set(kwargs) - RUN_KWARGS
    if unknown:
        raise ValueError(f"memory_store_kwargs: unknown keys {sorted(unknown)} (use {sorted(RUN_KWARGS)})")
    criteria = kwargs.get("search_criteria") or {}
    if not isinstance(criteria, dict):
        raise ValueError("memory_store_kwargs['search_criteria'] must be a dict")
    unknown = set(criteria) - CRITERIA
    if unknown:
        raise ValueError(f"search_criteria: unknown keys {sorted(unknown)} (use {sorted(CRITERIA)})")
    check_top_k(criteria.get("top_k", DEFAULT_TOP_K))
    if criteria.get("filters") is not None:
        validate_filter(criteria["filters"])
    return kwargs


async def search_for_run(
    store: Any, messages: Sequence[ChatMessage], memory_store_kwargs: dict[str, Any] | None
) -> list[Memory]:
    """The memories a run should see: ``search_criteria["query"]``, else the run's last user message, searched
    in the run's scope (``user_id``, ``run_id``, ``agent_id``) with the criteria's filters and ``top_k``.

    >>> await search_for_run(store, [ChatMessage.from_user("which staging cluster?")], {"user_id": "U_ANA"})
    [Memory(id='9a1e…', text='our staging cluster is eu-2', …)]
    """
    kwargs = check_memory_kwargs(memory_store_kwargs)
    criteria = kwargs.get("search_criteria") or {}
    query = criteria.get("query")
    if query is None:
        query = next((m.text for m in reversed(messages) if m.role == ChatRole.USER and m.text), None)
    if not query:
        return []
    return await call_store(
        store.search_memories,
        query,
        filters=criteria.get("filters"),
        top_k=criteria.get("top_k", DEFAULT_TOP_K),
        user_id=kwargs.get("user_id"),
        run_id=kwargs.get("run_id"),
        agent_id=kwargs.get("agent_id"),
    )


def memory_message(memories: Sequence[Memory], *, include_metadata: bool = False) -> ChatMessage | None:
    """One system message listing ``memories`` (``None`` for none), beginning "Relevant memories:".

    With ``include_metadata``, each line also carries the memory's id, scope and metadata.

    >>> memory_message([Memory("m1", "our staging cluster is eu-2")]).text
    'Relevant memories:\\n- our staging cluster is eu-2'
    """
    if not memories:
        return None
    lines = [MEMORY_HEADER]
    for memory in memories:
        line = f"- {memory.text}"
        if include_metadata:
            scope = {
                k: v
                for k, v in (("user_id", memory.user_id), ("run_id", memory.run_id), ("agent_id", memory.agent_id))
                if v is not None
            }
            line += f" (metadata: {canonical_json({'id': memory.id, **scope, **memory.metadata})})"
        lines.append(line)
    message = ChatMessage.from_system("\n".join(lines))
    message.meta[MEMORY_META_KEY] = [memory.to_dict() for memory in memories]
    return message


async def with_memories(
    store: Any, messages: list[ChatMessage], memory_store_kwargs: dict[str, Any] | None
) -> list[ChatMessage]:
    """``messages`` (a new run's transcript) with the memory message inserted right after the system prompt.

    Unchanged without a store or when nothing matched.
    """
    if store is None:
        return messages
    memories = await search_for_run(store, messages, memory_store_kwargs)
    criteria = (memory_store_kwargs or {}).get("search_criteria") or {}
    message = memory_message(memories, include_metadata=bool(criteria.get("include_memory_metadata")))
    if message is None:
        return messages
    at = next((i + 1 for i, m in enumerate(messages) if m.role == ChatRole.SYSTEM), 0)
    return [*messages[:at], message, *messages[at:]]
