"""Thread history: :class:`SQLiteChatMessageStore`.

Each message is stored as its ``ChatMessage.to_dict()`` JSON with a per-thread sequence number;
``(chat_history_id, seq)`` is the key of a ``WITHOUT ROWID`` table (schema 11), so a thread's messages sit
together and the last k messages are one short descending range scan of adjacent rows.
"""

from __future__ import annotations

import pathlib
import time
from collections.abc import Sequence
from typing import Any

from sqlite_utils import Database

from bot.messages import ChatMessage, ChatRole, message_data, message_from_data
from storage.codec import dumps, loads
from storage.connection import connector_for
from storage.errors import CorruptRecord, FencedOut
from storage.protocols import RunFence
from storage.runs import fence_holds

_TOOL = ChatRole.TOOL.value


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"last_k must be a positive integer, not {k!r}")
    return k


class SQLiteChatMessageStore:
    """Chat history per thread in SQLite.

    >>> store = SQLiteChatMessageStore("countersign.db", last_k=10)
    >>> store.write_messages("slack:T1:C1:1700000000.000100", [ChatMessage.from_user("hi")])
    1
    >>> [m.text for m in store.retrieve_messages("slack:T1:C1:1700000000.000100")]
    ['hi']

    ``path_or_db`` is a file path, a :class:`storage.Storage` (shares its connections) or a
    sqlite-utils ``Database``. System messages are not stored when ``skip_system_messages``: the
    system prompt belongs to the agent, not to the thread.
    """

    def __init__(
        self,
        path_or_db: str | pathlib.Path | Database | Any,
        last_k: int = 10,
        skip_system_messages: bool = True,
    ) -> None:
        self.last_k = _check_k(last_k)
        self.skip_system_messages = skip_system_messages
        self.connector, self._owned = connector_for(path_or_db)

    def write_messages(
        self, chat_history_id: str, messages: Sequence[ChatMessage], fence: RunFence | None = None
    ) -> int:
        """Append ``messages`` to the thread and return how many were new.

        Idempotent by ``message.meta["id"]``: writing the same messages again adds nothing. With a
        ``fence`` (a run owner writing its step), :class:`~storage.errors.FencedOut` and nothing written
        unless the fence holds in the same transaction.

        >>> store.write_messages("t1", [question, answer])
        2
        >>> store.write_messages("t1", [question, answer])
        0
        """
        rows = [
            (message.id, message.role.value, dumps(message_data(message)))
            for message in messages
            if not (self.skip_system_messages and message.is_from(ChatRole.SYSTEM))
        ]
        if not rows:
            return 0
        now = time.time()
        written = 0
        with self.connector.writing() as db:
            if fence is not None and not fence_holds(db, fence):
                raise FencedOut(fence.run_id)
            seq = db.execute(
                "SELECT COALESCE(MAX(seq), 0) FROM messages WHERE chat_history_id = ?", [chat_history_id]
            ).fetchone()[0]
            for message_id, role, data in rows:
                cursor = db.execute(
                    "INSERT INTO messages (chat_history_id, seq, message_id, role, data, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (chat_history_id, message_id) DO NOTHING",
                    [chat_history_id, seq + 1, message_id, role, data, now],
                )
                if cursor.rowcount == 1:
                    seq += 1
                    written += 1
        return written

    def retrieve_messages(
        self, chat_history_id: str, last_k: int | None = None, *, up_to: str | None = None
    ) -> list[ChatMessage]:
        """The last ``last_k`` messages of the thread (default: the store's ``last_k``), oldest first.

        The window never starts on a tool result: it reaches back to the assistant message that made
        the call, so every call in it has its results. Tool results with no call before them at all
        are left out (an LLM would refuse them).

        ``up_to`` (a message id) reads the thread as it was when that message was its newest: messages
        written after it are not read, and none at all if the thread has no such message. A paused run
        reads the history it paused with this way.

        >>> [m.role for m in store.retrieve_messages("t1", last_k=2)]
        [<ChatRole.ASSISTANT: 'assistant'>, <ChatRole.TOOL: 'tool'>]
        >>> [m.text for m in store.retrieve_messages("t1", up_to=question.id)]  # the answer came later
        ['hi']
        """
        k = self.last_k if last_k is None else _check_k(last_k)
        with self.connector.reading() as db:
            if up_to is None:
                rows = db.execute(
                    "SELECT seq, role, message_id, data FROM messages WHERE chat_history_id = ? "
                    "ORDER BY seq DESC LIMIT ?",
                    [chat_history_id, k],
                ).fetchall()
            else:
                rows = db.execute(
                    "SELECT seq, role, message_id, data FROM messages WHERE chat_history_id = ? AND seq <= "
                    "(SELECT seq FROM messages WHERE chat_history_id = ? AND message_id = ?) "
                    "ORDER BY seq DESC LIMIT ?",
                    [chat_history_id, chat_history_id, up_to, k],
                ).fetchall()
            if rows and rows[-1][1] == _TOOL:
                rows = self._reach_back(db, chat_history_id, rows)
        rows.reverse()
        return [self._decode(chat_history_id, message_id, data) for _, _, message_id, data in rows]

    def _reach_back(self, db: Database, chat_history_id: str, rows: list[Any]) -> list[Any]:
        """Extend a newest-first window that ends on a tool result back to the call's message."""
        oldest = rows[-1][0]
        start = db.execute(
            "SELECT seq FROM messages WHERE chat_history_id = ? AND seq < ? AND role != ? "
            "ORDER BY seq DESC LIMIT 1",
            [chat_history_id, oldest, _TOOL],
        ).fetchone()
        if start is None:
            # Nothing before these results: they are orphans, drop them from the window.
            while rows and rows[-1][1] == _TOOL:
                rows.pop()
            return rows
        earlier = db.execute(
            "SELECT seq, role, message_id, data FROM messages WHERE chat_history_id = ? "
            "AND seq >= ? AND seq < ? ORDER BY seq DESC",
            [chat_history_id, start[0], oldest],
        ).fetchall()
        return rows + earlier

    @staticmethod
    def _decode(chat_history_id: str, message_id: str, data: str) -> ChatMessage:
        record_id = f"{chat_history_id}/{message_id}"
        try:
            return message_from_data(loads(data, kind="message", record_id=record_id))
        except CorruptRecord:
            raise
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptRecord("message", record_id, f"not a chat message ({exc!r})") from exc

    def count_messages(self, chat_history_id: str) -> int:
        """How many messages the thread has stored.

        >>> store.count_messages("t1")
        2
        """
        with self.connector.reading() as db:
            return db.execute(
                "SELECT COUNT(*) FROM messages WHERE chat_history_id = ?", [chat_history_id]
            ).fetchone()[0]

    def delete_messages(self, chat_history_id: str) -> int:
        """Delete the thread's history and return how many messages were removed.

        >>> store.delete_messages("t1")
        2
        """
        with self.connector.writing() as db:
            return db.execute("DELETE FROM messages WHERE chat_history_id = ?", [chat_history_id]).rowcount

    def close(self) -> None:
        """Close the connections if this store opened the file itself.

        >>> SQLiteChatMessageStore("countersign.db").close()
        """
        if self._owned:
            self.connector.close()
