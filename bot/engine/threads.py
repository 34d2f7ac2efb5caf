"""Small helpers every engine part shares: a run's thread, a thread's channel, a person's message, quiet calls."""

from __future__ import annotations

import logging
from collections.abc import Awaitable
from typing import Any, Protocol

from bot.engine.model import Inbound, ThreadRef
from bot.messages import ChatMessage

logger = logging.getLogger(__name__)


class InThread(Protocol):
    """Anything stored with its thread's four parts: a run, a storage address."""

    @property
    def platform(self) -> str: ...
    @property
    def workspace(self) -> str: ...
    @property
    def channel(self) -> str: ...
    @property
    def thread(self) -> str: ...


def thread_of_run(run: InThread) -> ThreadRef:
    """The thread a run (or anything stored with its thread's parts) works in."""
    return ThreadRef(run.platform, run.workspace, run.channel, run.thread)


def channel_of(thread: ThreadRef | InThread) -> dict[str, str]:
    """A thread's channel, as policies are looked up by (a confirmation context's first three keys)."""
    return {"platform": thread.platform, "workspace": thread.workspace, "channel": thread.channel}


def user_message(inbound: Inbound) -> ChatMessage:
    """The history message of a person's message."""
    return ChatMessage.from_user(inbound.text, meta={"user": inbound.user, "event_id": inbound.event_id})


async def quietly(awaitable: Awaitable[Any]) -> None:
    """Cosmetic output (working indicators, re-renders) must never break a decision that already landed."""
    try:
        await awaitable
    except Exception:
        logger.warning("surface call failed", exc_info=True)
