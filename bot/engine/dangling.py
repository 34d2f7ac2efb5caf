"""Closing dangling calls: a tool call left without a result in a thread's history gets one, so the model
never sees a call it could take as still running (and never runs it again)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from bot.hitl.apply import closing_results
from bot.messages import ChatMessage
from storage.protocols import RunFence

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

Settle = Callable[[ChatMessage], Awaitable[ChatMessage]]
"""Turns the default closing result of one call into what is known of it (e.g. the ledger's outcome)."""


async def close_dangling(
    storage: AsyncStores,
    thread_key: str,
    reason: str,
    *,
    lookback: int,
    fence: RunFence | None = None,
    settle: Settle | None = None,
) -> None:
    """Give every call of the thread's recent history (``lookback`` messages) that has no result one.

    The result says ``reason``, unless ``settle`` knows better; written under ``fence`` when given.
    """
    history = await storage.messages.retrieve_messages(thread_key, last_k=lookback)
    closing = closing_results(history, reason)
    if settle is not None:
        closing = [await settle(message) for message in closing]
    if closing:
        await storage.messages.write_messages(thread_key, closing, fence=fence)
