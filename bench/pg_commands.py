"""Count the commands a process sends to PostgreSQL, by hooking psycopg's three ways of sending one.

``pg_stat_statements`` is not loaded on every server (nor on CI's); psycopg sends every statement through
``_execute_send`` (a cursor's query), ``_send_query_prepared`` (a prepared one), or ``_exec_command`` (the
connection's own: ``BEGIN``, ``COMMIT``, ``SET``…). A pipeline's ``Sync`` is a round trip, not a command,
and is counted apart. Bench code only: the hook wraps private methods of the installed psycopg.
"""

from __future__ import annotations

import collections
import contextvars
import functools
from typing import Any


class CommandCounter:
    """Counts commands by kind once :meth:`install` has wrapped psycopg's senders (idempotent)."""

    def __init__(self) -> None:
        self.counts: collections.Counter[str] = collections.Counter()
        self.installed = False
        self.log: list[tuple[str, str, str]] | None = None
        """When a list: every command's label, kind and SQL text is appended to it (``bench/engine.py --trace``)."""
        self.label: contextvars.ContextVar[str] = contextvars.ContextVar("bench_command_label", default="")
        """What the log names a command by: the top-level storage call under way (set by the bench's profile)."""

    @property
    def total(self) -> int:
        return sum(n for kind, n in self.counts.items() if kind not in NOT_COMMANDS)

    def install(self) -> CommandCounter:
        if self.installed:
            return self
        from psycopg import _connection_base, _cursor_base, _pipeline_base

        self._wrap(_cursor_base.BaseCursor, "_execute_send", lambda a, k: "query", _query_text(1))
        self._wrap(_cursor_base.BaseCursor, "_send_query_prepared", lambda a, k: "prepared", _query_text(2))
        self._wrap(_cursor_base.BaseCursor, "_send_prepare", lambda a, k: "prepare")
        self._wrap(_connection_base.BaseConnection, "_exec_command", _command_kind, _command_text)
        self._wrap(_pipeline_base.BasePipeline, "_enqueue_sync", lambda a, k: "sync")
        self.installed = True
        return self

    def _wrap(self, owner: type, name: str, kind: Any, text: Any = None) -> None:
        original = getattr(owner, name)
        counts = self.counts

        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            counted_kind = kind(args, kwargs)
            counts[counted_kind] += 1
            if self.log is not None and text is not None:
                self.log.append((self.label.get(), counted_kind, text(args, kwargs)))
            return original(*args, **kwargs)

        setattr(owner, name, counted)


def _command_kind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    head = _command_text(args, kwargs).split(" ", 1)[0].upper()
    return head or "command"


def _command_text(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    command = args[1] if len(args) > 1 else kwargs.get("command")
    text = command if isinstance(command, bytes | str) else getattr(command, "_obj", b"")
    return text.decode() if isinstance(text, bytes) else str(text)


def _query_text(position: int) -> Any:
    """How to read the SQL text of a ``PostgresQuery`` passed at ``position`` (``self`` is 0)."""

    def text(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
        query = args[position] if len(args) > position else kwargs.get("pgq", kwargs.get("query"))
        sql = getattr(query, "query", b"")
        return " ".join((sql.decode() if isinstance(sql, bytes) else str(sql)).split())

    return text


NOT_COMMANDS = frozenset({"prepare", "sync"})
"""Counted kinds that are no command of their own: a statement's preparation (part of its first run), a pipeline's
``Sync`` (what ends a batch's implicit transaction)."""

COUNTER = CommandCounter()
