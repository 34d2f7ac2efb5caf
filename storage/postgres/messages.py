"""Thread history on PostgreSQL: :class:`PostgresChatMessageStore`.

Each message is a compact JSON body (:mod:`storage.message_rows`; rows holding a whole ``to_dict()``, as
written before, read the same) with a per-thread sequence number; the primary key
``(chat_history_id, seq)`` makes the last k messages one short backward index scan. Writers to one
thread take a transaction-scoped advisory lock on it, so sequence numbers never collide across replicas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg

from bot.messages import ChatMessage, ChatRole
from storage.errors import FencedOut
from storage.message_rows import _check_k, message_body, message_from_row
from storage.postgres.database import PostgresDatabase, advisory_lock
from storage.postgres.runs import fence_holds
from storage.protocols import RunFence

_TOOL = ChatRole.TOOL.value
THREAD_LOCK = "countersign.messages"
"""With the thread's id, the key of the advisory lock that serialises writers to one thread."""

_NEWEST = "SELECT seq, role, message_id, data::text FROM messages WHERE chat_history_id = %s ORDER BY seq DESC LIMIT %s"
# The same window as the thread was when one message (by id) was its newest.
_NEWEST_UP_TO = (
    "SELECT seq, role, message_id, data::text FROM messages WHERE chat_history_id = %s AND seq <= "
    "(SELECT seq FROM messages WHERE chat_history_id = %s AND message_id = %s) ORDER BY seq DESC LIMIT %s"
)
# From the newest message before ``seq`` that is not a tool result (the assistant message that made the
# call) up to ``seq``: what a window starting on a tool result must reach back to include.
_REACH_BACK = (
    "SELECT seq, role, message_id, data::text FROM messages WHERE chat_history_id = %s AND seq < %s "
    "AND seq >= (SELECT seq FROM messages WHERE chat_history_id = %s AND seq < %s AND role <> %s "
    "ORDER BY seq DESC LIMIT 1) ORDER BY seq DESC"
)


class PostgresChatMessageStore:
    """Chat history per thread in PostgreSQL, with the semantics of :class:`storage.SQLiteChatMessageStore`.

    >>> store = PostgresChatMessageStore(db, last_k=10)
    >>> await store.write_messages("slack:T1:C1:1700000000.000100", [ChatMessage.from_user("hi")])
    1
    """

    def __init__(self, db: PostgresDatabase, last_k: int = 10, skip_system_messages: bool = True) -> None:
        self.db = db
        self.last_k = _check_k(last_k)
        self.skip_system_messages = skip_system_messages

    async def write_messages(
        self, chat_history_id: str, messages: Sequence[ChatMessage], fence: RunFence | None = None
    ) -> int:
        """Append ``messages`` to the thread and return how many were new (idempotent by message id).

        With a ``fence`` (a run owner writing its step), :class:`~storage.errors.FencedOut` and nothing
        written unless the fence holds in the same transaction.

        >>> await store.write_messages("t1", [question, answer])
        2
        >>> await store.write_messages("t1", [question, answer])
        0
        """
        rows = self._rows(messages)
        if not rows:
            return 0
        async with self.db.transaction() as conn:
            # The thread's lock (taken by the insert) is taken by the fence's own statement once the fence holds.
            if fence is not None and not await fence_holds(conn, fence, lock=(THREAD_LOCK, chat_history_id)):
                raise FencedOut(fence.run_id)
            return await self._insert(conn, chat_history_id, rows)

    async def _write_in(
        self, conn: psycopg.AsyncConnection[Any], chat_history_id: str, messages: Sequence[ChatMessage]
    ) -> int:
        """:meth:`write_messages` inside the caller's transaction on ``conn``; how many were new.

        Other stores call it to write history atomically with their own rows (the inbox's ``start_next``).
        """
        rows = self._rows(messages)
        return await self._insert(conn, chat_history_id, rows) if rows else 0

    def _rows(self, messages: Sequence[ChatMessage]) -> dict[str, tuple[str, str]]:
        """Message id → (role, JSON), system messages skipped if so configured; the first copy of an id wins."""
        rows: dict[str, tuple[str, str]] = {}
        for message in messages:
            if self.skip_system_messages and message.is_from(ChatRole.SYSTEM):
                continue
            # str(): an id that is not a string is stored as its text, as SQLite stores it.
            rows.setdefault(str(message.id), (message.role.value, message_body(message)))
        return rows

    @staticmethod
    async def _insert(
        conn: psycopg.AsyncConnection[Any], chat_history_id: str, rows: dict[str, tuple[str, str]]
    ) -> int:
        await advisory_lock(conn, THREAD_LOCK, chat_history_id)
        # One statement: the ids already stored are skipped, the new ones numbered on from the thread's last seq
        # (the thread's lock, held to commit, keeps that seq the last one), and how many were new comes back.
        cursor = await conn.execute(
            "WITH last AS (SELECT COALESCE(MAX(seq), 0) AS seq FROM messages WHERE chat_history_id = %s), "
            "fresh AS (SELECT message_id, role, data, row_number() OVER (ORDER BY ord) AS n "
            "FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS t(message_id, role, data, ord) "
            "WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.chat_history_id = %s AND m.message_id = t.message_id)) "
            "INSERT INTO messages (chat_history_id, seq, message_id, role, data, created_at) "
            "SELECT %s, last.seq + fresh.n, message_id, role, data::json, now() FROM fresh, last RETURNING 1",
            [
                chat_history_id,
                list(rows),
                [role for role, _ in rows.values()],
                [data for _, data in rows.values()],
                chat_history_id,
                chat_history_id,
            ],
        )
        return len(await cursor.fetchall())

    async def retrieve_messages(
        self, chat_history_id: str, last_k: int | None = None, *, up_to: str | None = None
    ) -> list[ChatMessage]:
        """The last ``last_k`` messages (default: the store's), oldest first; never starts on a tool result.

        A window that would start on a tool result reaches back to the assistant message that made the
        call; tool results with no call before them at all are left out. ``up_to`` (a message id) reads
        the thread as it was when that message was its newest (none at all if the thread has no such message).

        >>> [m.role for m in await store.retrieve_messages("t1", last_k=2)]
        [<ChatRole.ASSISTANT: 'assistant'>, <ChatRole.TOOL: 'tool'>]
        """
        k = self.last_k if last_k is None else _check_k(last_k)
        # Two short statements, as in SQLite: each plans in microseconds, and the second is rarely needed.
        async with self.db.connection() as conn:
            if up_to is None:
                cursor = await conn.execute(_NEWEST, [chat_history_id, k])
            else:
                cursor = await conn.execute(_NEWEST_UP_TO, [chat_history_id, chat_history_id, up_to, k])
            rows = await cursor.fetchall()  # newest first
            if rows and rows[-1][1] == _TOOL:
                oldest = rows[-1][0]
                cursor = await conn.execute(_REACH_BACK, [chat_history_id, oldest, chat_history_id, oldest, _TOOL])
                rows += await cursor.fetchall()
        # Results with no call before them at all (the window reached the thread's start): left out.
        while rows and rows[-1][1] == _TOOL:
            rows.pop()
        rows.reverse()
        return [message_from_row(chat_history_id, role, message_id, data) for _, role, message_id, data in rows]

    async def count_messages(self, chat_history_id: str) -> int:
        """How many messages the thread has stored.

        >>> await store.count_messages("t1")
        2
        """
        row = await self.db.fetchone("SELECT COUNT(*) FROM messages WHERE chat_history_id = %s", [chat_history_id])
        return int(row[0])

    async def delete_messages(self, chat_history_id: str) -> int:
        """Delete the thread's history and return how many messages were removed.

        >>> await store.delete_messages("t1")
        2
        """
        return await self.db.execute("DELETE FROM messages WHERE chat_history_id = %s", [chat_history_id])
