"""The agent's chat store in the engine: a run's history writes join the step's next storage write.

The agent writes a step's messages as it goes (the model's reply before its calls run, their results after,
the final answer). Written alone, each is one storage round trip. In the engine, a run's writes instead wait
here and go with the next write the step makes anyway, in its batch (:mod:`storage.batches`), so in the same
transaction:

- the reply whose calls are about to run: with the ledger's ``begin`` of the first call (the reply and its
  ``executing`` entry are durable together, before the tool runs);
- the results and the final answer: with the run's end (the answer owed, the run finished), or with the next
  step's ``begin`` or pause. A pause's snapshot refers to its history (:mod:`bot.agent.stored_snapshot`):
  the history is then written in the pause's own transaction, before the snapshot that refers to it.

Between those writes the run's newest messages are in memory only, as the model's reply always was while
the model answered. A crash there loses nothing durable: the ledger knows what ran, and recovery gives
every call the ledger's result before the run continues (:meth:`RunLifecycle._close_dangling`). A run that
fails writes what waits first; one taken over writes nothing (its writes are fenced anyway).

Only runs the engine works on defer (:meth:`open` … :meth:`close`); any other write goes through at once.

Reads go the other way: what a run reads first (its history, its memories) is read in the write that starts
the run, when it starts on a message's arrival (:meth:`RunLifecycle.receive`), and handed to the run here
(:meth:`prefetched`). It is read in that transaction, after the run and its message were stored, so it is
what the run would read itself (the run is its thread's only writer from then on). A read the run makes
with other arguments goes to storage as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.engine.model import UNREAD
from bot.messages import ChatMessage
from storage.protocols import Read, Write


class StepHistory:
    """A chat-message store (``retrieve_messages`` / ``write_messages``) over ``storage.messages`` whose writes for
    an open run wait for that run's next batch (:meth:`take`).

    >>> history.open("run-1", "slack:T1:C1:170.1")
    >>> await history.write_messages("slack:T1:C1:170.1", [reply])  # waits
    >>> [w.method for w in history.take("run-1")]
    ['write_messages']
    """

    def __init__(self, storage: Any) -> None:
        self.storage = storage
        self._threads: dict[str, str] = {}  # run id -> its thread's chat_history_id, while the engine works on it
        self._runs: dict[str, str] = {}  # the reverse
        self._pending: dict[str, list[Write]] = {}  # run id -> its history writes not yet made
        self._reads: dict[str, list[tuple[str, tuple[Any, ...], dict[str, Any], Any]]] = {}  # run id -> read ahead
        self.memories = StepMemories(storage, self)
        """The agent's memory store: a search the run's start read ahead is answered from it."""

    def open(self, run_id: str, chat_history_id: str) -> None:
        """The engine works on ``run_id`` in its thread: its history writes wait for its batches from now on."""
        self._threads[run_id] = chat_history_id
        self._runs[chat_history_id] = run_id
        self._pending.pop(run_id, None)

    def close(self, run_id: str) -> list[Write]:
        """The engine is done with ``run_id``: writes go through at once again; what still waited (dropped)."""
        thread = self._threads.pop(run_id, None)
        if thread is not None and self._runs.get(thread) == run_id:
            del self._runs[thread]
        self._reads.pop(run_id, None)
        return self._pending.pop(run_id, [])

    def prefetched(self, run_id: str, reads: Sequence[tuple[Any, Any]]) -> None:
        """What ``run_id`` will read first, read already (``(Read, result)`` pairs): each answers one equal call."""
        self._reads[run_id] = [(read.method, read.args, read.kwargs, result) for read, result in reads]

    def _ahead(self, run_id: str | None, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The result read ahead for this very call of ``run_id`` (forgotten once used), or :data:`UNREAD`."""
        reads = self._reads.get(run_id, []) if run_id is not None else []
        for index, (name, read_args, read_kwargs, result) in enumerate(reads):
            if name == method and read_args == args and read_kwargs == kwargs:
                del reads[index]
                return result
        return UNREAD

    def take_read(self, run_id: str, read: Read) -> Any:
        """The result read ahead for ``run_id`` by exactly ``read`` (once), or :data:`UNREAD` (e.g. the run's policy
        views, which the engine hands to its confirmation checks)."""
        return self._ahead(run_id, read.method, read.args, read.kwargs)

    def run_of(self, chat_history_id: str) -> str | None:
        """The run the engine works on in that thread, if any."""
        return self._runs.get(chat_history_id)

    def take(self, run_id: str) -> list[Write]:
        """The run's waiting history writes, in order, for the batch about to be applied (forgets them)."""
        return self._pending.pop(run_id, [])

    def give_back(self, run_id: str, writes: list[Write]) -> None:
        """Writes :meth:`take` gave out whose batch raised: they wait again (before any newer ones), for the run's
        failure to write them; or whose pause was refused because a policy changed (the run is still ours: they go
        with its next batch). A batch refused by the run's own compare-and-set is not given back: not our run now."""
        if writes and run_id in self._threads:
            self._pending[run_id] = [*writes, *self._pending.get(run_id, [])]

    async def retrieve_messages(self, chat_history_id: str, last_k: int | None = None, **kwargs: Any) -> list[Any]:
        """The thread's stored history (as ``storage.messages`` reads it; read ahead at the run's start)."""
        ahead = self._ahead(
            self._runs.get(chat_history_id), "retrieve_messages", (chat_history_id,), {"last_k": last_k, **kwargs}
        )
        if ahead is not UNREAD:
            return list(ahead)
        return await self.storage.messages.retrieve_messages(chat_history_id, last_k, **kwargs)

    async def write_messages(
        self, chat_history_id: str, messages: Sequence[ChatMessage], fence: Any = None
    ) -> int | None:
        """Append ``messages``: for an open run, with its next batch (``None``); else at once (rows written)."""
        kwargs = {} if fence is None else {"fence": fence}
        run_id = self._runs.get(chat_history_id)
        if run_id is None:
            return await self.storage.messages.write_messages(chat_history_id, list(messages), **kwargs)
        pending = self._pending.setdefault(run_id, [])
        if pending and pending[-1].args[0] == chat_history_id and pending[-1].kwargs == kwargs:
            # One write for the step's messages in order (e.g. its results and the answer): the same rows.
            last = pending[-1]
            pending[-1] = Write("messages", "write_messages", (chat_history_id, [*last.args[1], *messages]), kwargs)
        else:
            pending.append(Write("messages", "write_messages", (chat_history_id, list(messages)), kwargs))
        return None


class StepMemories:
    """The agent's memory store in the engine: ``search_memories`` answered from what a run's start read ahead
    (:meth:`StepHistory.prefetched`) when the search is the very one read; anything else is ``storage.memories``."""

    def __init__(self, storage: Any, history: StepHistory) -> None:
        self.storage = storage
        self.history = history

    async def search_memories(self, query: str, **kwargs: Any) -> Any:
        """As ``storage.memories.search_memories``; the run is the one working on ``kwargs``' thread, if any."""
        for run_id in list(self.history._reads):
            ahead = self.history._ahead(run_id, "search_memories", (query,), kwargs)
            if ahead is not UNREAD:
                return ahead
        return await self.storage.memories.search_memories(query, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage.memories, name)
