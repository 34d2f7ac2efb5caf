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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from bot.engine.model import UNREAD
from bot.messages import ChatMessage
from storage.batch import Batch, stores
from storage.protocols import Handle, RunFence

if TYPE_CHECKING:
    from storage.async_protocols import AsyncStores

P = ParamSpec("P")
T = TypeVar("T")


@dataclass(frozen=True)
class PendingHistory:
    """Messages of a run's thread the agent wrote and storage has not yet: one ``write_messages``, made with the
    run's next batch (:meth:`add_to`)."""

    chat_history_id: str
    messages: tuple[ChatMessage, ...]
    fence: RunFence | None = None

    def add_to(self, batch: Batch) -> Handle[int]:
        """Add the write of these messages to ``batch``."""
        return batch.write(stores.messages.write_messages, self.chat_history_id, list(self.messages), self.fence)


def add_history(batch: Batch, pending: Sequence[PendingHistory]) -> None:
    """Add every write of ``pending`` to ``batch``, in order (their results are not read: rows written)."""
    for write in pending:
        write.add_to(batch)


@dataclass(frozen=True)
class AheadCall(Generic[T]):
    """A store read, named by its method (``stores.<store>.<method>``) and its arguments: what a run will ask for,
    read ahead in a batch (:meth:`read_in`), its result answering exactly that call (:meth:`StepHistory.prefetched`).
    """

    method: Callable[..., T]
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def read_in(self, batch: Batch) -> Handle[T]:
        """Add this read to ``batch``."""
        return batch.read(self.method, *self.args, **self.kwargs)

    def answers(self, method: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> bool:
        """Whether this is the very read ``method(*args, **kwargs)``."""
        return self.method == method and self.args == args and dict(self.kwargs) == dict(kwargs)


def ahead_call(method: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> AheadCall[T]:
    """The read ``method(*args, **kwargs)`` to read ahead, its arguments checked against ``method``'s."""
    return AheadCall(method, args, kwargs)


@dataclass(frozen=True)
class ReadAhead(Generic[T]):
    """A read ahead added to a batch: the call it answers and the handle its result is read by."""

    call: AheadCall[T]
    handle: Handle[T]


class StepHistory:
    """A chat-message store (``retrieve_messages`` / ``write_messages``) over ``storage.messages`` whose writes for
    an open run wait for that run's next batch (:meth:`take`).

    >>> history.open("run-1", "slack:T1:C1:170.1")
    >>> await history.write_messages("slack:T1:C1:170.1", [reply])  # waits
    >>> [len(w.messages) for w in history.take("run-1")]
    [1]
    """

    def __init__(self, storage: AsyncStores) -> None:
        self.storage = storage
        self._threads: dict[str, str] = {}  # run id -> its thread's chat_history_id, while the engine works on it
        self._runs: dict[str, str] = {}  # the reverse
        self._pending: dict[str, list[PendingHistory]] = {}  # run id -> its history writes not yet made
        self._reads: dict[str, list[tuple[AheadCall[Any], Any]]] = {}  # run id -> read ahead, with its result
        self.memories = StepMemories(storage, self)
        """The agent's memory store: a search the run's start read ahead is answered from it."""

    def open(self, run_id: str, chat_history_id: str) -> None:
        """The engine works on ``run_id`` in its thread: its history writes wait for its batches from now on."""
        self._threads[run_id] = chat_history_id
        self._runs[chat_history_id] = run_id
        self._pending.pop(run_id, None)

    def close(self, run_id: str) -> list[PendingHistory]:
        """The engine is done with ``run_id``: writes go through at once again; what still waited (dropped)."""
        thread = self._threads.pop(run_id, None)
        if thread is not None and self._runs.get(thread) == run_id:
            del self._runs[thread]
        self._reads.pop(run_id, None)
        return self._pending.pop(run_id, [])

    def prefetched(self, run_id: str, reads: Sequence[tuple[AheadCall[Any], Any]]) -> None:
        """What ``run_id`` will read first, read already (``(call, result)`` pairs): each answers one equal call."""
        self._reads[run_id] = list(reads)

    def _ahead(
        self, run_id: str | None, method: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]
    ) -> Any:
        """The result read ahead for this very call of ``run_id`` (forgotten once used), or :data:`UNREAD`."""
        reads = self._reads.get(run_id, []) if run_id is not None else []
        for index, (read, result) in enumerate(reads):
            if read.answers(method, args, kwargs):
                del reads[index]
                return result
        return UNREAD

    def take_read(self, run_id: str, read: AheadCall[T]) -> T | Any:
        """The result read ahead for ``run_id`` by exactly ``read`` (once), or :data:`UNREAD` (e.g. the run's policy
        views, which the engine hands to its confirmation checks)."""
        return self._ahead(run_id, read.method, read.args, read.kwargs)

    def run_of(self, chat_history_id: str) -> str | None:
        """The run the engine works on in that thread, if any."""
        return self._runs.get(chat_history_id)

    def take(self, run_id: str) -> list[PendingHistory]:
        """The run's waiting history writes, in order, for the batch about to be applied (forgets them)."""
        return self._pending.pop(run_id, [])

    def give_back(self, run_id: str, writes: list[PendingHistory]) -> None:
        """Writes :meth:`take` gave out whose batch raised: they wait again (before any newer ones), for the run's
        failure to write them; or whose pause was refused because a policy changed (the run is still ours: they go
        with its next batch). A batch refused by the run's own compare-and-set is not given back: not our run now."""
        if writes and run_id in self._threads:
            self._pending[run_id] = [*writes, *self._pending.get(run_id, [])]

    async def retrieve_messages(self, chat_history_id: str, last_k: int | None = None, **kwargs: Any) -> list[Any]:
        """The thread's stored history (as ``storage.messages`` reads it; read ahead at the run's start)."""
        ahead = self._ahead(
            self._runs.get(chat_history_id),
            stores.messages.retrieve_messages,
            (chat_history_id,),
            {"last_k": last_k, **kwargs},
        )
        if ahead is not UNREAD:
            return list(ahead)
        return await self.storage.messages.retrieve_messages(chat_history_id, last_k, **kwargs)

    async def write_messages(
        self, chat_history_id: str, messages: Sequence[ChatMessage], fence: RunFence | None = None
    ) -> int | None:
        """Append ``messages``: for an open run, with its next batch (``None``); else at once (rows written)."""
        run_id = self._runs.get(chat_history_id)
        if run_id is None:
            return await self.storage.messages.write_messages(chat_history_id, list(messages), fence)
        pending = self._pending.setdefault(run_id, [])
        if pending and pending[-1].chat_history_id == chat_history_id and pending[-1].fence == fence:
            # One write for the step's messages in order (e.g. its results and the answer): the same rows.
            pending[-1] = PendingHistory(chat_history_id, (*pending[-1].messages, *messages), fence)
        else:
            pending.append(PendingHistory(chat_history_id, tuple(messages), fence))
        return None


class StepMemories:
    """The agent's memory store in the engine: ``search_memories`` answered from what a run's start read ahead
    (:meth:`StepHistory.prefetched`) when the search is the very one read; anything else is ``storage.memories``."""

    def __init__(self, storage: AsyncStores, history: StepHistory) -> None:
        self.storage = storage
        self.history = history

    async def search_memories(self, query: str, **kwargs: Any) -> Any:
        """As ``storage.memories.search_memories``; the run is the one working on ``kwargs``' thread, if any."""
        for run_id in list(self.history._reads):
            ahead = self.history._ahead(run_id, stores.memories.search_memories, (query,), kwargs)
            if ahead is not UNREAD:
                return ahead
        return await self.storage.memories.search_memories(query, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage.memories, name)
