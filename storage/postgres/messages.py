"""Thread history on PostgreSQL: :class:`PostgresChatMessageStore`.

Each message is its ``ChatMessage.to_dict()`` JSON with a per-thread sequence number; the primary key
``(chat_history_id, seq)`` makes the last k messages one short backward index scan. Writers to one
thread take a transaction-scoped advisory lock on it, so sequence numbers never collide across replicas.
"""

from __future__ import annotations

from collections.abc import Sequence

from bot.messages import ChatMessage, ChatRole
from storage.codec import dumps, loads
from storage.errors import CorruptRecord
from storage.messages import _check_k
from storage.postgres.database import PostgresDatabase

_TOOL = ChatRole.TOOL.value
THREAD_LOCK = "countersign.messages"
"""With the thread's id, the key of the advisory lock that serialises writers to one thread."""

# The newest k rows, and — when the oldest of them is a tool result — every row back to (and including)
# the message before it that is not a tool result: the assistant message that made the call.
_WINDOW = """
WITH newest AS (
    SELECT seq, role, message_id, data::text AS data FROM messages
    WHERE chat_history_id = %(thread)s ORDER BY seq DESC LIMIT %(k)s
), oldest AS (
    SELECT seq, role FROM newest ORDER BY seq LIMIT 1
), start AS (
    SELECT (SELECT m.seq FROM messages m WHERE m.chat_history_id = %(thread)s AND m.seq < oldest.seq
            AND m.role <> %(tool)s ORDER BY m.seq DESC LIMIT 1) AS seq
    FROM oldest WHERE oldest.role = %(tool)s
)
SELECT seq, role, message_id, data FROM newest
UNION ALL
SELECT m.seq, m.role, m.message_id, m.data::text FROM messages m, start, oldest
WHERE m.chat_history_id = %(thread)s AND m.seq >= start.seq AND m.seq < oldest.seq
ORDER BY seq
"""


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

    async def write_messages(self, chat_history_id: str, messages: Sequence[ChatMessage]) -> int:
        """Append ``messages`` to the thread and return how many were new (idempotent by message id).

        >>> await store.write_messages("t1", [question, answer])
        2
        >>> await store.write_messages("t1", [question, answer])
        0
        """
        rows: dict[str, tuple[str, str]] = {}
        for message in messages:
            if self.skip_system_messages and message.is_from(ChatRole.SYSTEM):
                continue
            rows.setdefault(message.id, (message.role.value, dumps(message.to_dict())))  # the first copy wins
        if not rows:
            return 0
        async with self.db.transaction() as conn:
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s), hashtext(%s))", [THREAD_LOCK, chat_history_id]
            )
            cursor = await conn.execute(
                "SELECT COALESCE((SELECT MAX(seq) FROM messages WHERE chat_history_id = %s), 0), "
                "ARRAY(SELECT message_id FROM messages WHERE chat_history_id = %s AND message_id = ANY(%s))",
                [chat_history_id, chat_history_id, list(rows)],
            )
            last_seq, existing = await cursor.fetchone()  # type: ignore[misc]
            known = set(existing)
            fresh = [(message_id, role, data) for message_id, (role, data) in rows.items() if message_id not in known]
            if not fresh:
                return 0
            await conn.execute(
                "INSERT INTO messages (chat_history_id, seq, message_id, role, data, created_at) "
                "SELECT %s, %s + ord, message_id, role, data::json, now() "
                "FROM unnest(%s::text[], %s::text[], %s::text[]) WITH ORDINALITY AS t(message_id, role, data, ord)",
                [
                    chat_history_id,
                    last_seq,
                    [row[0] for row in fresh],
                    [row[1] for row in fresh],
                    [row[2] for row in fresh],
                ],
            )
        return len(fresh)

    async def retrieve_messages(self, chat_history_id: str, last_k: int | None = None) -> list[ChatMessage]:
        """The last ``last_k`` messages (default: the store's), oldest first; never starts on a tool result.

        A window that would start on a tool result reaches back to the assistant message that made the
        call; tool results with no call before them at all are left out.

        >>> [m.role for m in await store.retrieve_messages("t1", last_k=2)]
        [<ChatRole.ASSISTANT: 'assistant'>, <ChatRole.TOOL: 'tool'>]
        """
        k = self.last_k if last_k is None else _check_k(last_k)
        rows = await self.db.fetchall(_WINDOW, {"thread": chat_history_id, "k": k, "tool": _TOOL})
        # Results with no call before them (the window reached the thread's start): orphans, left out.
        start = 0
        while start < len(rows) and rows[start][1] == _TOOL:
            start += 1
        return [self._decode(chat_history_id, message_id, data) for _, _, message_id, data in rows[start:]]

    @staticmethod
    def _decode(chat_history_id: str, message_id: str, data: str) -> ChatMessage:
        record_id = f"{chat_history_id}/{message_id}"
        try:
            return ChatMessage.from_dict(loads(data, kind="message", record_id=record_id))
        except CorruptRecord:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptRecord("message", record_id, f"not a chat message ({exc!r})") from exc

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

