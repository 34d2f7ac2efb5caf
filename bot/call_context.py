"""Which tool call the current task is running: a run's id and the call's ledger key, for tools that need them.

The tool runner sets it around each call (:func:`calling`); a tool source that talks to something slow (an MCP
server) reads it (:func:`current_call`) to tie what happens during the call to its run: a question the server
asks, a stop from chat that cancels the call. Context variables are copied into tasks, so it follows the call.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass(frozen=True)
class CallContext:
    """One tool call being run: its run, its ledger key and the tool's name."""

    run_id: str
    call_key: str
    tool_name: str


_CURRENT: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar("countersign_tool_call", default=None)


def current_call() -> CallContext | None:
    """The call this task runs now, or ``None`` (outside a run: a bench, a direct call)."""
    return _CURRENT.get()


@contextmanager
def calling(call: CallContext) -> Iterator[None]:
    """Mark ``call`` as the one this task runs, inside the block.

    >>> with calling(CallContext("run-1", "call_1", "t__slow")):
    ...     current_call().run_id
    'run-1'
    """
    token = _CURRENT.set(call)
    try:
        yield
    finally:
        _CURRENT.reset(token)
