"""Count the commands a process sends to PostgreSQL, by hooking psycopg's three ways of sending one.

``pg_stat_statements`` is not loaded on every server (nor on CI's); psycopg sends every statement through
``_execute_send`` (a cursor's query), ``_send_query_prepared`` (a prepared one), or ``_exec_command`` (the
connection's own: ``BEGIN``, ``COMMIT``, ``SET``…). A pipeline's ``Sync`` is a round trip, not a command,
and is counted apart. Bench code only: the hook wraps private methods of the installed psycopg.
"""

from __future__ import annotations

import collections
import functools
from typing import Any


class CommandCounter:
    """Counts commands by kind once :meth:`install` has wrapped psycopg's senders (idempotent)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.installed = False

    @property
    def total(self) -> int:
        return sum(n for kind, n in self.counts.items() if kind not in NOT_COMMANDS)

    def install(self) -> CommandCounter:
        if self.installed:
            return self
        from psycopg import _connection_base, _cursor_base, _pipeline_base

        self._wrap(_cursor_base.BaseCursor, "_execute_send", lambda a, k: "query")
        self._wrap(_cursor_base.BaseCursor, "_send_query_prepared", lambda a, k: "prepared")
        self._wrap(_cursor_base.BaseCursor, "_send_prepare", lambda a, k: "prepare")
        self._wrap(_connection_base.BaseConnection, "_exec_command", _command_kind)
        self._wrap(_pipeline_base.BasePipeline, "_enqueue_sync", lambda a, k: "sync")
        self.installed = True
        return self

    def _wrap(self, owner: type, name: str, kind: Any) -> None:
        original = getattr(owner, name)
        counts = self.counts

        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[kind(args, kwargs)] += 1
            return original(*args, **kwargs)

        setattr(owner, name, counted)


def _command_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    command = args[1] if len(args) > 1 else kwargs.get("command")
    text = command if isinstance(command, bytes | str) else getattr(command, "_obj", b"")
    head = (text.decode() if isinstance(text, bytes) else str(text)).split(" ", 1)[0].upper()
    return head or "command"


NOT_COMMANDS = frozenset({"prepare", "sync"})
"""Counted kinds that are no command of their own: a statement's preparation (part of its first run), a pipeline's
``Sync`` (what ends a batch's implicit transaction)."""

COUNTER = CommandCounter()
