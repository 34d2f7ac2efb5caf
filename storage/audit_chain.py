"""The audit log's hash chain, shared by both backends: how an entry's hash is made, and how a chain is checked.

Each entry stores ``prev_hash`` (the hash of the entry before it) and ``hash``, the SHA-256 of its own
fields and ``prev_hash``. Editing an entry breaks its hash; deleting one breaks the next entry's
``prev_hash`` (and leaves a gap in the ids); deleting the newest entries leaves the chain's head
(``audit_head``, written with every append) pointing past the last entry. Pruning old entries records
an anchor (the last pruned entry's id and hash), so the chain stays verifiable from the first entry that
remains.

The payload is each field as ``<length>:<text>;`` (lengths in characters), in the order ``prev_hash,
id, at, actor, action, subject, details``; PostgreSQL's ``audit_entry_hash`` SQL function builds the
same bytes. ``at`` is the backend's canonical text of the time (SQLite: ``repr`` of the epoch float;
PostgreSQL: ``YYYY-MM-DDTHH:MM:SS.ffffff`` in UTC).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

GENESIS = ""
"""The ``prev_hash`` of the first entry ever written (before any pruning)."""


def entry_hash(
    prev_hash: str, entry_id: int, at_text: str, actor: str, action: str, subject: str, details_text: str
) -> str:
    """The hex SHA-256 of one entry.

    >>> len(entry_hash("", 1, "1700000000.0", "U1", "approved", "a-1", "{}"))
    64
    """
    fields = (prev_hash, str(entry_id), at_text, actor, action, subject, details_text)
    payload = "".join(f"{len(value)}:{value};" for value in fields)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class ChainRow:
    """One stored entry as the chain sees it (texts exactly as stored)."""

    entry_id: int
    at_text: str
    actor: str
    action: str
    subject: str
    details_text: str
    prev_hash: str | None
    hash: str | None


@dataclass(frozen=True)
class AuditVerification:
    """The result of checking the chain: ``ok`` when ``problems`` is empty."""

    checked: int
    first_id: int | None
    last_id: int | None
    pruned_through: int | None
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        """Whether the chain is intact."""
        return not self.problems


def verify_chain(
    rows: Iterable[ChainRow], *, anchor: tuple[int, str] | None, head: tuple[int, str] | None, limit: int = 20
) -> AuditVerification:
    """Walk ``rows`` (ascending ids) from ``anchor`` (the last pruned entry, if any) and compare with ``head``.

    At most ``limit`` problems are listed (one tampering usually shows up once or twice).
    """
    problems: list[str] = []
    expected_prev = anchor[1] if anchor else GENESIS
    previous_id = anchor[0] if anchor else 0
    first_id = last_id = None
    last_hash = expected_prev
    checked = 0
    for row in rows:
        checked += 1
        first_id = row.entry_id if first_id is None else first_id
        if row.entry_id != previous_id + 1:
            problems.append(f"entries {previous_id + 1}..{row.entry_id - 1} are missing (deleted)")
        if row.prev_hash != expected_prev:
            problems.append(f"entry {row.entry_id}: does not follow the entry before it (one was deleted or edited)")
        recomputed = entry_hash(
            row.prev_hash or "", row.entry_id, row.at_text, row.actor, row.action, row.subject, row.details_text
        )
        if row.hash != recomputed:
            problems.append(f"entry {row.entry_id}: its content does not match its hash (edited)")
        expected_prev = row.hash or ""
        previous_id = row.entry_id
        last_id, last_hash = row.entry_id, row.hash or ""
        if len(problems) >= limit:
            break
    if head is not None and len(problems) < limit and (head[0], head[1]) != (previous_id, last_hash):
        if head[0] > previous_id:
            problems.append(f"the newest entries after {previous_id} are missing (the chain's head is {head[0]})")
        else:
            problems.append("the chain's head does not match the last entry")
    return AuditVerification(checked, first_id, last_id, anchor[0] if anchor else None, tuple(problems[:limit]))
