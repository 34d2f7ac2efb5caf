"""Test data for live answers: a tool that keeps running until the test lets it finish.

>>> job = BlockingBackup()
>>> ...  # the agent calls job.tool; the test awaits job.started, stops the run, then job.release.set()
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from bot.tools import Tool, tool


@dataclass
class BlockingBackup:
    """``backup(target)``, declared never to need approval, that waits for :attr:`release` before it returns."""

    started: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    finished: list[str] = field(default_factory=list)

    @property
    def tool(self) -> Tool:
        """The tool (a new Tool object bound to this job)."""
        job = self

        @tool(confirmation_default="never")
        async def backup(target: str) -> str:
            """Back up a database.

            :param target: The database.
            """
            job.started.set()
            await job.release.wait()
            job.finished.append(target)
            return f"backed up {target}"

        return backup
