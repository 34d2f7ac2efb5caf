"""Thread history: :class:`SQLiteChatMessageStore`.

Each thread gets a small integer id on its first write (the ``threads`` table maps the text key to it);
``(thread_id, seq)`` is the key of a ``WITHOUT ROWID`` table, so a thread's messages sit together and the
last k messages are one short descending range scan of adjacent rows. A row holds the message as a
compact JSON body (:mod:`storage.message_rows`).
"""

from __future__ import annotations

import pathlib
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from sqlite_utils import Database

from bot.messages import ChatMessage, ChatRole
from storage.errors import FencedOut, StorageError
from storage.message_rows import _check_k, id_key, message_body, message_from_row
from storage.protocols import RunFence
from storage.sqlite.connection import connector_for
from storage.sqlite.runs import fence_holds

_TOOL = ChatRole.TOOL.value
_SYSTEM = ChatRole.SYSTEM

THREAD_IDS_CACHED = 100_000
"""Thread ids a store remembers before it starts over (a few MB at most)."""

# One statement allocates the sequence number and inserts: the number is the thread's newest plus one,
# read in the same write transaction, so writers in other processes (serialised by SQLite's write lock)
# can never take the same one. The thread id is checked against the key in the same statement: a cached
# id whose thread was deleted meanwhile (its number perhaps given to another thread) makes it NULL, and
# the insert fails (NOT NULL) instead of writing into the wrong thread. (A single-row VALUES: an INSERT
# ... SELECT reading its own table goes through a temporary table, which costs twice as much.)
_APPEND = (
    "INSERT INTO messages (thread_id, seq, message_id, role, data, created_at) VALUES ("
    "(SELECT id FROM threads WHERE id = ?5 AND key = ?6), "
    "COALESCE((SELECT seq FROM messages WHERE thread_id = ?5 ORDER BY seq DESC LIMIT 1), 0) + 1, ?1, ?2, ?3, ?4) "
    "ON CONFLICT (thread_id, message_id) DO NOTHING"
)
_STALE_THREAD = "messages.thread_id"
"""What SQLite's NOT NULL error names when a cached thread id no longer belongs to its key."""
_THREAD = "(SELECT id FROM threads WHERE key = ?)"
_NEWEST = f"SELECT seq, role, message_id, data FROM messages WHERE thread_id = {_THREAD} ORDER BY seq DESC LIMIT ?"
# The same window as the thread was when one message (by id) was its newest.
_NEWEST_UP_TO = (
    "SELECT seq, role, message_id, data FROM messages WHERE thread_id = (SELECT id FROM threads WHERE key = ?1) "
    "AND seq <= (SELECT seq FROM messages WHERE thread_id = (SELECT id FROM threads WHERE key = ?1) "
    "AND message_id = ?2) ORDER BY seq DESC LIMIT ?3"
)


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
        # Thread key -> id, as last seen. Only a hint: every append checks it (see _APPEND).
        self._thread_ids: dict[str, int] = {}

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
        skip = self.skip_system_messages
        rows = [
            [id_key(message.id), message.role.value, message_body(message)]
            for message in messages
            if not (skip and message.role == _SYSTEM)
        ]
        if not rows:
            return 0
        now = time.time()
        with self.connector.writing() as db:
            if fence is not None and not fence_holds(db, fence):
                raise FencedOut(fence.run_id)
            thread = self._thread_ids.get(chat_history_id)
            if thread is None:
                thread = self._thread_id(db, chat_history_id)
            for row in rows:
                row += (now, thread, chat_history_id)
            try:
                return db.conn.executemany(_APPEND, rows).rowcount
            except sqlite3.IntegrityError as exc:
                if _STALE_THREAD not in str(exc):
                    raise
            # The thread was deleted since its id was cached (all rows name it: the first one failed, none
            # was written). Its current id, a new one if need be:
            thread = self._thread_id(db, chat_history_id)
            for row in rows:
                row[-2] = thread
            return db.conn.executemany(_APPEND, rows).rowcount

    def _thread_id(self, db: Database, chat_history_id: str) -> int:
        """The thread's id, given to it now if it has none (inside the caller's write transaction)."""
        row = db.execute("SELECT id FROM threads WHERE key = ?", [chat_history_id]).fetchone()
        thread: int | None = (
            row[0] if row else db.execute("INSERT INTO threads (key) VALUES (?)", [chat_history_id]).lastrowid
        )
        if thread is None:  # sqlite3 gives every successful INSERT a rowid; None would mean no row was written
            raise StorageError(f"thread {chat_history_id!r} was given no id")
        if len(self._thread_ids) >= THREAD_IDS_CACHED:
            self._thread_ids.clear()
        self._thread_ids[chat_history_id] = thread
        return thread

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
                rows = db.execute(_NEWEST, [chat_history_id, k]).fetchall()
            else:
                rows = db.execute(_NEWEST_UP_TO, [chat_history_id, id_key(up_to), k]).fetchall()
            if rows and rows[-1][1] == _TOOL:
                rows = self._reach_back(db, chat_history_id, rows)
        rows.reverse()
        return [message_from_row(chat_history_id, role, key, data) for _, role, key, data in rows]

    def _reach_back(self, db: Database, chat_history_id: str, rows: list[Any]) -> list[Any]:
        """Extend a newest-first window that ends on a tool result back to the call's message."""
        oldest = rows[-1][0]
        start = db.execute(
            f"SELECT seq FROM messages WHERE thread_id = {_THREAD} AND seq < ? AND role != ? ORDER BY seq DESC LIMIT 1",
            [chat_history_id, oldest, _TOOL],
        ).fetchone()
        if start is None:
            # Nothing before these results: they are orphans, drop them from the window.
            while rows and rows[-1][1] == _TOOL:
                rows.pop()
            return rows
        earlier = db.execute(
            f"SELECT seq, role, message_id, data FROM messages WHERE thread_id = {_THREAD} "
            "AND seq >= ? AND seq < ? ORDER BY seq DESC",
            [chat_history_id, start[0], oldest],
        ).fetchall()
        return rows + earlier

    def count_messages(self, chat_history_id: str) -> int:
        """How many messages the thread has stored.

        >>> store.count_messages("t1")
        2
        """
        with self.connector.reading() as db:
            return db.execute(
                f"SELECT COUNT(*) FROM messages WHERE thread_id = {_THREAD}", [chat_history_id]
            ).fetchone()[0]

    def delete_messages(self, chat_history_id: str) -> int:
        """Delete the thread's history (and its id) and return how many messages were removed.

        >>> store.delete_messages("t1")
        2
        """
        with self.connector.writing() as db:
            deleted = db.execute(f"DELETE FROM messages WHERE thread_id = {_THREAD}", [chat_history_id]).rowcount
            db.execute("DELETE FROM threads WHERE key = ?", [chat_history_id])
        self._thread_ids.pop(chat_history_id, None)
        return deleted

    def close(self) -> None:
        """Close the connections if this store opened the file itself.

        >>> SQLiteChatMessageStore("countersign.db").close()
        """
        if self._owned:
            self.connector.close()
