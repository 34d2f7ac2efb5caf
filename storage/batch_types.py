"""The types of a batch, apart from the store protocols whose methods it names: :class:`Batch`, its steps, its
handles and its :class:`BatchOutcome`.

:mod:`storage.protocols` needs these for :class:`~storage.protocols.WriteBatches`, and :mod:`storage.batch` names
the store methods a batch calls by those protocols (``stores``): so these import neither, and neither module
imports the other through them. Use them through :mod:`storage.batch` (or :mod:`storage`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, ParamSpec, Protocol, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class HandleSource(Protocol):
    """What handles point into: a batch, whose ``handles`` are in the order of its writes and reads."""

    @property
    def handles(self) -> Sequence[Handle[Any]]: ...


class Handle(Generic[T]):
    """Names one write or read of a :class:`~storage.batch.Batch`; its result is ``outcome[handle]``, a ``T``.

    Made only by the batch (``batch.write(...)`` and the like); ``index`` is its place in the batch, for the
    backends, never for callers. Handles compare by identity. A plain slotted class rather than a frozen
    dataclass: every write and read of every step makes one, and the frozen ``__init__`` costs twice as much.
    """

    __slots__ = ("batch", "index")

    def __init__(self, batch: HandleSource, index: int) -> None:
        self.batch = batch
        self.index = index

    def __repr__(self) -> str:
        return f"Handle(index={self.index})"


class BatchOutcome:
    """What :meth:`WriteBatches.apply` did: every write (``applied``), or none (``refused_by``: the required write
    that said no).

    Each result is read through the handle its write or read returned (``outcome[handle]``), never by position:
    another write added to the batch shifts no handle's result. Made only by the backends.

    >>> outcome[moved], outcome.refused_by is moved
    """

    __slots__ = ("_batch", "_results", "applied", "refused_by")

    def __init__(
        self, batch: HandleSource, results: Sequence[Any] = (), *, refused_by: Handle[Any] | None = None
    ) -> None:
        if refused_by is None and len(results) != len(batch.handles):
            raise ValueError(f"a batch of {len(batch.handles)} writes and reads has {len(results)} results")
        self._batch = batch
        self._results = tuple(results) if refused_by is None else ()
        self.applied = refused_by is None
        """Whether every write of the batch was written (else none was)."""
        self.refused_by = refused_by
        """The handle of the required write that answered no (``None``: the batch applied)."""

    def __getitem__(self, handle: Handle[T]) -> T:
        """The result of ``handle``'s write or read; :class:`LookupError` if the batch was refused."""
        if handle.batch is not self._batch:
            raise ValueError("this handle belongs to another batch than the one this is the outcome of")
        if not self.applied:
            raise LookupError("the batch was refused: nothing of it was written, it has no results")
        return self._results[handle.index]

    def get(self, handle: Handle[T]) -> T | None:
        """The result of ``handle``'s write or read, or ``None`` if the batch was refused."""
        return self[handle] if self.applied else None

    def __repr__(self) -> str:
        if self.applied:
            return f"BatchOutcome(applied=True, results={self._results!r})"
        return f"BatchOutcome(applied=False, refused_by={self.refused_by!r})"


@dataclass(frozen=True)
class StoreMethod:
    """The runtime value of ``stores.<store>.<method>``: which store method a batch's write or read calls."""

    store: str
    method: str

    def __str__(self) -> str:
        return f"{self.store}.{self.method}"


@dataclass(frozen=True)
class WriteStep:
    """One write of a :class:`Batch` as a backend runs it: ``<store>.<method>(*args, **kwargs)``, as the engine
    would call it alone. Made only by the batch (``batch.write``/``require``/``write_from``); callers hold handles.

    ``required``: the write is a compare-and-set; a falsy result (``False``, ``None``, ``0``) rolls the
    whole batch back, so nothing of it is written.

    ``args_from``: a write whose arguments depend on what the batch did before it (``write_from``). Called in the
    transaction, right before the write, with the results so far (in order), it returns ``(args, kwargs)`` to
    write with, or ``None`` to skip the write (its result is then ``None``, which refuses the batch if it is
    ``required``). It runs on the backend's writer, so it must be cheap and do no I/O. Unlike a read's, an
    exception from it fails the batch: a write's arguments are never guessed.
    """

    store: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    required: bool = False
    args_from: Callable[[tuple[Any, ...]], tuple[tuple[Any, ...], dict[str, Any]] | None] | None = field(
        default=None, compare=False
    )

    def arguments(self, done: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The ``(args, kwargs)`` to write with after the batch's results ``done``; ``None``: skip the write."""
        if self.args_from is None:
            return self.args, self.kwargs
        return self.args_from(tuple(done))


@dataclass(frozen=True)
class ReadStep:
    """One read of a :class:`Batch` as a backend runs it: ``<store>.<method>(*args, **kwargs)``, as the engine
    would call it alone. Made only by the batch (``batch.read``/``read_from``).

    In :meth:`WriteBatches.apply <storage.protocols.WriteBatches.apply>` it runs in the batch's transaction, in
    its place among the writes, so it sees the writes before it and nothing another transaction commits later.
    A read never refuses a batch.

    ``args_from`` (``read_from``, in ``apply`` only): a read whose arguments depend on what the batch did before
    it. Called in the transaction, right before the read, with the results so far (in order), it returns
    ``(args, kwargs)`` to read with, or ``None`` to skip the read (its result is then ``None``). It runs on the
    backend's writer (SQLite: the writer thread, inside its group commit), so it must be cheap and do no I/O. An
    exception from it skips the read too: what it derives arguments from (e.g. a stored snapshot) is data, and
    bad data never fails the writes around it. For the same reason, such a read that finds a corrupt record
    (:class:`~storage.errors.CorruptRecord`, e.g. a stored message that no longer decodes) is skipped as well:
    its caller reads again itself and fails only what needs that data. Any other error of the read fails the
    batch, as any read's (the database failing).
    """

    store: str
    method: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    required: bool = field(default=False, init=False)
    args_from: Callable[[tuple[Any, ...]], tuple[tuple[Any, ...], dict[str, Any]] | None] | None = field(
        default=None, compare=False
    )

    @property
    def dependent(self) -> bool:
        """Whether its arguments come from the batch's earlier results (``args_from``)."""
        return self.args_from is not None

    def arguments(self, done: Sequence[Any]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
        """The ``(args, kwargs)`` to read with after the batch's results ``done``; ``None``: skip the read."""
        if self.args_from is None:
            return self.args, self.kwargs
        try:
            return self.args_from(tuple(done))
        except Exception:  # see the class: bad data a read's arguments come from skips the read, never the batch
            return None


Step = WriteStep | ReadStep
"""One write or read of a batch, as a backend runs it."""


class Call(Generic[P]):
    """The arguments a derived write or read (``write_from``/``read_from``) is made with, checked against its method.

    >>> call(stores.audit.append_many, [("countersign", "expired", "a-1", {})], now=now)
    """

    def __init__(self, method: StoreMethod, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.method = method
        self.args = args
        self.kwargs = kwargs


def call(method: Callable[P, Any], /, *args: P.args, **kwargs: P.kwargs) -> Call[P]:
    """The arguments ``args``/``kwargs`` for ``method``, as a derived write or read returns them."""
    return Call(_named(method), args, kwargs)


class Results:
    """What a derived write or read sees of its batch: the results of the handles before it (``done[handle]``)."""

    def __init__(self, batch: Batch, done: tuple[Any, ...]) -> None:
        self._batch = batch
        self._done = done

    def __getitem__(self, handle: Handle[T]) -> T:
        if handle.batch is not self._batch:
            raise ValueError("this handle belongs to another batch")
        if handle.index >= len(self._done):
            raise LookupError(f"handle {handle.index} of the batch comes after the write or read asking for it")
        return self._done[handle.index]


class Batch:
    """A step's writes and reads, in order, each named by the handle adding it returned.

    Hand it to ``storage.batches.apply`` (writes and reads, one transaction) or, with reads only, to
    ``storage.batches.read`` (one read transaction); both answer a :class:`~storage.protocols.BatchOutcome`.
    """

    def __init__(self) -> None:
        self._steps: list[Step] = []
        self._handles: list[Handle[Any]] = []

    @property
    def handles(self) -> Sequence[Handle[Any]]:
        """Every handle of the batch, in the order of its writes and reads."""
        return tuple(self._handles)

    @property
    def steps(self) -> Sequence[Step]:
        """Its writes and reads, in order, as the backends run them (``steps[handle.index]`` is the handle's)."""
        return tuple(self._steps)

    def write(self, method: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Handle[T]:
        """Add the write ``method(*args, **kwargs)``."""
        named = _named(method)
        return self._add(WriteStep(named.store, named.method, args, kwargs))

    def require(self, method: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Handle[T]:
        """Add a compare-and-set write: if it answers no (a falsy result), nothing of the batch is written."""
        named = _named(method)
        return self._add(WriteStep(named.store, named.method, args, kwargs, required=True))

    def read(self, method: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Handle[T]:
        """Add the read ``method(*args, **kwargs)``: in its place, it sees the batch's writes before it."""
        named = _named(method)
        return self._add(ReadStep(named.store, named.method, args, kwargs))

    def write_from(
        self, method: Callable[P, T], derive: Callable[[Results], Call[P] | None], *, required: bool = False
    ) -> Handle[T | None]:
        """Add a write whose arguments ``derive`` works out, in the transaction, from earlier handles' results.

        ``derive`` returning ``None`` skips the write (its result is ``None``; a ``required`` one then refuses the
        batch); an exception from it fails the batch: a write's arguments are never guessed. It runs on the
        backend's writer, so it must be cheap and do no I/O.

        >>> expired = batch.write(stores.approvals.expire_due, now=now)
        >>> batch.write_from(stores.audit.append_many,
        ...     lambda done: call(stores.audit.append_many, entries_of(done[expired])) if done[expired] else None)
        """
        named = _named(method)
        return self._add(
            WriteStep(named.store, named.method, required=required, args_from=self._deriving(named, derive))
        )

    def read_from(self, method: Callable[P, T], derive: Callable[[Results], Call[P] | None]) -> Handle[T | None]:
        """Add a read whose arguments ``derive`` works out from earlier handles' results, as :meth:`write_from`.

        Unlike a write's, a read that cannot work out its arguments (``derive`` returns ``None`` or raises), or that
        finds a corrupt record, is skipped (its result is ``None``), never failing the batch: see
        :class:`ReadStep`.
        """
        named = _named(method)
        return self._add(ReadStep(named.store, named.method, args_from=self._deriving(named, derive)))

    def _deriving(
        self, named: StoreMethod, derive: Callable[[Results], Call[...] | None]
    ) -> Callable[[tuple[Any, ...]], tuple[tuple[Any, ...], dict[str, Any]] | None]:
        def arguments(done: tuple[Any, ...]) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
            derived = derive(Results(self, done))
            if derived is None:
                return None
            if derived.method != named:
                raise ValueError(f"a call of {derived.method} cannot make the arguments of {named}")
            return derived.args, derived.kwargs

        return arguments

    def _add(self, step: Step) -> Handle[Any]:
        if self._steps and self._steps[-1].store == "audit" and step.store != "audit":
            raise ValueError("audit appends come last in a batch (see WriteBatches)")
        handle: Handle[Any] = Handle(self, len(self._steps))
        self._steps.append(step)
        self._handles.append(handle)
        return handle


def _named(method: Callable[..., Any]) -> StoreMethod:
    """The store method ``stores.<store>.<method>`` names (a live store's method is refused: it would run now)."""
    if not isinstance(method, StoreMethod):
        raise TypeError(
            f"name a batch's call through storage.batch.stores (e.g. stores.runs.transition), not {method!r}"
        )
    return method
