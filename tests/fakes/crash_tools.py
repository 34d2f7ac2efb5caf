"""Tools for crash tests: every execution is reported to the test process before it acts.

``countersign serve`` loads them with ``COUNTERSIGN_TOOLS=tests.fakes.crash_tools:tools``. Each
execution is first POSTed to the test's :class:`~tests.fakes.serve_processes.ToolControl` (its URL in
``CRASH_TOOLS_URL``) and only then "happens", so a process killed at any later point has already left
a record in the test process, which no crash can take back. The slow tools then wait on a gate the
test holds over HTTP (``GET /gate/<name>`` answers when the test releases that name): "slow" is a
condition the test ends, never a sleep.

- ``delete_file(path)``: sensitive (asks for approval), returns at once.
- ``slow_job(name)``: not sensitive (runs without approval), waits for gate ``name``.
- ``slow_deploy(name)``: sensitive, waits for gate ``name``.
- ``apply_plan(name, approved_preview)``: sensitive, previewed (issue 30) by what the test's world says of
  ``name`` (``GET /world/<name>``); reports the approved preview it was given.

The URL comes from the environment because a tool in a child process has no other way to learn it;
this module is test code, outside ``bot.config``'s rule.
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp

from bot.tools import Tool, tool

CONTROL_URL_VARIABLE = "CRASH_TOOLS_URL"


async def _report(tool_name: str, arguments: dict[str, Any]) -> None:
    """Record this execution in the test process; fails the tool if the record cannot be made."""
    body = {"tool": tool_name, "arguments": arguments, "pid": os.getpid()}
    async with aiohttp.ClientSession() as session, session.post(f"{_control_url()}/executed", json=body) as reply:
        reply.raise_for_status()


async def _wait_for_gate(name: str) -> None:
    """Block until the test releases gate ``name`` (no client timeout: the test decides)."""
    timeout = aiohttp.ClientTimeout(total=None)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"{_control_url()}/gate/{name}") as reply,
    ):
        reply.raise_for_status()


def _control_url() -> str:
    url = os.environ.get(CONTROL_URL_VARIABLE)
    if not url:
        raise RuntimeError(f"{CONTROL_URL_VARIABLE} is not set: these tools only run under the crash-test harness")
    return url.rstrip("/")


@tool(confirmation_default="always")
async def delete_file(path: str) -> str:
    """Delete a file from the server.

    :param path: Path of the file.
    """
    await _report("delete_file", {"path": path})
    return f"deleted {path}"


@tool(confirmation_default="never")
async def slow_job(name: str) -> str:
    """Run a long maintenance job.

    :param name: Name of the job.
    """
    await _report("slow_job", {"name": name})
    await _wait_for_gate(name)
    return f"job {name} finished"


@tool(confirmation_default="always")
async def slow_deploy(name: str) -> str:
    """Deploy a release; takes a while.

    :param name: Name of the release.
    """
    await _report("slow_deploy", {"name": name})
    await _wait_for_gate(name)
    return f"deployed {name}"


async def _plan(name: str) -> str:
    """The preview of ``apply_plan``: what the test's world says applying ``name`` would do (side-effect free)."""
    async with aiohttp.ClientSession() as session, session.get(f"{_control_url()}/world/{name}") as reply:
        reply.raise_for_status()
        return await reply.text()


@tool(confirmation_default="always", preview=_plan)
async def apply_plan(name: str, approved_preview: str) -> str:
    """Apply a release's plan.

    :param name: Name of the release.
    """
    await _report("apply_plan", {"name": name, "approved_preview": approved_preview})
    return f"applied {name}"


tools: list[Tool] = [delete_file, slow_job, slow_deploy, apply_plan]
"""What ``COUNTERSIGN_TOOLS=tests.fakes.crash_tools:tools`` loads."""
