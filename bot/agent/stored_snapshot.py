"""A paused run's snapshot as the engine stores it: the thread's history by reference, the step inline.

``AgentSnapshot.to_dict()`` is self-contained: it copies every message of the run, so a snapshot grows
with the thread. A run that writes its history to a chat-message store (the engine's runs) has almost
all of those messages in the store already. :func:`stored_snapshot_data` keeps them by reference: the
id of the newest, how many they are and a digest of their ids. Inline stay only what the store does not
hold: the leading system messages (the system prompt and the memories, never stored) and the last
message (the step: its reply with the calls awaiting decisions, which is not stored yet, or at the
review stage the message whose results are held). The stored form's size grows with the step, not with
the thread.

:func:`load_snapshot` joins them again with one ``last_k`` read up to that id (messages written to the
thread after the pause are never read) and checks that it gives exactly the messages the run paused
with. When it cannot (retention or a deletion removed some of them), it raises
:class:`HistoryUnavailable`: the run fails closed, it never resumes with another history.

The referenced form has its own schema version, so a countersign that predates it refuses it instead
of resuming without the history; self-contained snapshots (``to_dict()``, breakpoint files, and those
stored by earlier versions) load as they always did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.agent.snapshot import (
    REFERENCED_SCHEMA_VERSION,
    SNAPSHOT_SCHEMA_VERSION,
    AgentSnapshot,
    SnapshotError,
    snapshot_from_data,
)
from bot.aio import call_store
from bot.messages import ChatMessage, ChatRole, message_data

HISTORY_REF_KEY = "history_ref"


class HistoryUnavailable(SnapshotError):
    """The history a stored snapshot refers to can no longer be read exactly as the run paused with it."""


@dataclass(frozen=True)
class HistoryRef:
    """Which stored messages of the thread (``AgentSnapshot.history_id``) a snapshot's run had.

    ``count`` messages, the newest of them ``up_to`` (a message id), whose ids in order hash to
    ``digest``; they go at position ``at`` among the snapshot's inline messages.
    """

    up_to: str
    count: int
    digest: str
    at: int

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible data."""
        return {"up_to": self.up_to, "count": self.count, "digest": self.digest, "at": self.at}

    @classmethod
    def from_dict(cls, data: Any) -> HistoryRef:
        """Inverse of :meth:`to_dict`; ``ValueError`` for malformed data."""
        if not isinstance(data, dict):
            raise ValueError(f"{HISTORY_REF_KEY} must be an object")
        ref = cls(up_to=str(data["up_to"]), count=int(data["count"]), digest=str(data["digest"]), at=int(data["at"]))
        if ref.count < 1 or ref.at < 0:
            raise ValueError(f"{HISTORY_REF_KEY} out of range: {data!r}")
        return ref


def ids_digest(messages: Sequence[ChatMessage]) -> str:
    """A digest of the messages' ids in order: equal digests, the same stored messages (they never change)."""
    return hashlib.sha256("\x1f".join(m.id for m in messages).encode()).hexdigest()[:32]


def stored_snapshot_data(snapshot: AgentSnapshot) -> dict[str, Any]:
    """The data to store for ``snapshot``, whose run wrote its history to a message store as the agent does.

    That is, every message after the leading system messages, except the last one, is stored in
    ``snapshot.history_id``'s thread, in order, and nothing else was written there in between (a run
    is its thread's only writer while it is active). Those become a :class:`HistoryRef`. A snapshot
    without such messages is stored self-contained (``snapshot_data``), as it is small anyway.
    """
    messages = snapshot.messages
    at = 0
    while at < len(messages) and messages[at].role == ChatRole.SYSTEM:
        at += 1
    stored = messages[at:-1]
    held = [message_data(m) for m in snapshot.held_results]
    if not snapshot.history_id or not stored or any(m.role == ChatRole.SYSTEM for m in stored):
        # Nothing to refer to (or a system message mid-run, which the store would not have kept).
        return snapshot._data([message_data(m) for m in messages], held)
    ref = HistoryRef(up_to=stored[-1].id, count=len(stored), digest=ids_digest(stored), at=at)
    data = snapshot._data([message_data(m) for m in (*messages[:at], messages[-1])], held)
    data["schema_version"] = REFERENCED_SCHEMA_VERSION
    data[HISTORY_REF_KEY] = ref.to_dict()
    return data


def stored_step(data: Any) -> AgentSnapshot:
    """A stored snapshot without reading the history it refers to: for what the paused step itself holds.

    Its ``step_message``, ``stage``, ``decisions``, ``pending_tool_calls``, ``held_results`` and ``state``
    are complete; its ``messages`` lack the referenced history, so never resume from it (use
    :func:`load_snapshot`). Takes freshly parsed data over, as ``snapshot_from_data`` does.
    """
    return _parse(data)[0]


async def load_snapshot(data: Any, store: Any) -> AgentSnapshot:
    """The snapshot ``data`` stands for, its referenced history read from ``store`` (one ``last_k`` read).

    Self-contained data (any snapshot from ``to_dict()`` or an earlier version) is read without the store.
    :class:`HistoryUnavailable` when the store no longer has exactly the messages the run paused with;
    :class:`SnapshotError` for malformed data.
    """
    snapshot, ref = parse_stored(data)
    if ref is None:
        return snapshot
    history = await call_store(store.retrieve_messages, snapshot.history_id, last_k=ref.count, up_to=ref.up_to)
    return with_history(snapshot, ref, history)


def parse_stored(data: Any) -> tuple[AgentSnapshot, HistoryRef | None]:
    """:func:`load_snapshot` in two halves, for a caller that reads the history itself (e.g. together with other
    storage work): the snapshot without its referenced history, and the reference (``None``: self-contained).

    Read ``retrieve_messages(snapshot.history_id, last_k=ref.count, up_to=ref.up_to)``, then call
    :func:`with_history`. :class:`SnapshotError` for malformed data.
    """
    return _parse(data)


def history_to_read(data: Any) -> tuple[str, HistoryRef] | None:
    """The thread id and :class:`HistoryRef` of the history stored snapshot ``data`` refers to, without parsing the
    rest of it (cheap enough to run inside a write transaction); ``None`` for a self-contained snapshot.

    A hint for reading the history early, together with other storage work: :func:`parse_stored` stays the judge
    of the whole snapshot, and :func:`with_history` of the history read. ``ValueError`` (or ``KeyError``,
    ``TypeError``) for malformed data.

    >>> history_to_read(stored_snapshot_data(snapshot))
    ('slack:T1:C1:170.1', HistoryRef(up_to='m7', count=6, digest='…', at=1))
    """
    if not isinstance(data, dict) or data.get("schema_version") != REFERENCED_SCHEMA_VERSION:
        return None
    history_id = data["history_id"]
    if not isinstance(history_id, str) or not history_id:
        raise ValueError("a snapshot referring to its history names no history")
    return history_id, HistoryRef.from_dict(data.get(HISTORY_REF_KEY))


def with_history(snapshot: AgentSnapshot, ref: HistoryRef, history: list[ChatMessage]) -> AgentSnapshot:
    """``snapshot`` (from :func:`parse_stored`) with the history read for ``ref``, checked as :func:`load_snapshot`
    checks it (:class:`HistoryUnavailable` unless it is exactly the messages the run paused with)."""
    if len(history) != ref.count or ids_digest(history) != ref.digest:
        raise HistoryUnavailable(
            f"The history run {snapshot.run_id} paused with is no longer stored as it was "
            f"({len(history)} of its {ref.count} messages read back, or other ones); it cannot be resumed."
        )
    inline = snapshot.messages
    snapshot.messages = [*inline[: ref.at], *history, *inline[ref.at :]]
    return snapshot


def _parse(data: Any) -> tuple[AgentSnapshot, HistoryRef | None]:
    if not isinstance(data, dict) or data.get("schema_version") != REFERENCED_SCHEMA_VERSION:
        return snapshot_from_data(data), None
    try:
        ref = HistoryRef.from_dict(data.get(HISTORY_REF_KEY))
    except (KeyError, TypeError, ValueError) as exc:
        run = data.get("run_id")
        raise SnapshotError(f"Malformed history reference in the snapshot of run {run!r}: {exc!r}") from exc
    # The rest is the self-contained shape, with only the inline messages.
    rest = {k: v for k, v in data.items() if k != HISTORY_REF_KEY}
    snapshot = snapshot_from_data({**rest, "schema_version": SNAPSHOT_SCHEMA_VERSION})
    if not snapshot.history_id or ref.at >= len(snapshot.messages):
        raise SnapshotError(f"Malformed history reference in the snapshot of run {snapshot.run_id!r}")
    return snapshot, ref
