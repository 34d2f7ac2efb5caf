"""Async builders for the storage contract suite (the sync ones are in :mod:`tests.fakes.storage_data`)."""

from __future__ import annotations

from typing import Any

from storage import RunRecord
from tests.fakes.storage_data import NOW, THREAD


async def create_run(
    storage: Any,
    run_id: str = "run-1",
    *,
    thread: str = THREAD,
    status: str = "running",
    now: Any = NOW,
    requester: str = "U_ANA",
) -> RunRecord:
    """A run started by ``requester`` (U_ANA) in #C1 of workspace T1, on any backend."""
    return await storage.runs.create(
        run_id,
        chat_history_id=thread,
        platform="slack",
        workspace="T1",
        channel="C1",
        thread=thread.rsplit(":", 1)[-1],
        requester=requester,
        status=status,
        now=now,
    )
