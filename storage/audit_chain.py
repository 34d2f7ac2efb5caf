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

Without a key the chain only shows *careless* tampering: whoever can write the database can recompute
every hash. With the audit key (``COUNTERSIGN_AUDIT_KEY`` or ``COUNTERSIGN_AUDIT_KEY_FILE``, never stored
in the database) every entry, every pruning anchor and the head carry an HMAC-SHA256 signature
(:func:`sign`) in ``audit_signature``: an edited, inserted, deleted or re-hashed entry, a forged anchor
and a cut-off tail are then detected, because nobody without the key can sign them. See docs/audit.md.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
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


def sign(key: bytes, kind: str, entry_id: int, digest: str) -> str:
    """The hex HMAC-SHA256 with ``key`` of one signed thing: ``kind`` is ``entry``, ``anchor`` or ``head``.

    >>> len(sign(b"k", "entry", 1, "ab"))
    64
    """
    return hmac.new(key, f"{kind}:{entry_id}:{digest}".encode(), hashlib.sha256).hexdigest()


def _signed(key: bytes, kind: str, entry_id: int, digest: str, signature: str | None) -> bool:
    return signature is not None and hmac.compare_digest(signature, sign(key, kind, entry_id, digest))


@dataclass(frozen=True)
class AuditHead:
    """The chain's newest entry: what ``audit checkpoint`` prints and ``audit verify --against`` checks.

    Its text form is ``ID:HASH`` or, with the key, ``ID:HASH:SIGNATURE`` (the entry's signature).
    """

    entry_id: int
    hash: str
    signature: str | None = None

    def text(self) -> str:
        """``ID:HASH[:SIGNATURE]``."""
        return ":".join([str(self.entry_id), self.hash, *([self.signature] if self.signature else [])])

    @classmethod
    def parse(cls, text: str) -> AuditHead:
        """Read :meth:`text`'s form back; raises ``ValueError`` when it is not one.

        >>> AuditHead.parse("3:ab").entry_id
        3
        """
        parts = text.strip().split(":")
        if len(parts) not in (2, 3) or not parts[0].isdigit() or not parts[1]:
            raise ValueError(f"not a checkpoint (ID:HASH[:SIGNATURE]): {text!r}")
        return cls(int(parts[0]), parts[1], parts[2] if len(parts) == 3 and parts[2] else None)


@dataclass(frozen=True)
class Anchor:
    """One pruning anchor as stored: the last pruned entry's id and hash, and its signature (if any)."""

    pruned_through: int
    hash: str
    signature: str | None = None


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
    signature: str | None = None


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


def check_anchors(anchors: Sequence[Anchor], *, key: bytes | None, prunes_allowed: bool) -> list[str]:
    """What is wrong with the pruning anchors: any while pruning is off, and (with the key) any unsigned one.

    Only countersign's own prune writes anchors, and only when audit retention is on; an anchor is what lets
    the oldest entries go, so one written by hand (``INSERT INTO audit_anchor …``) would hide deletions.
    """
    problems: list[str] = []
    for anchor in anchors:
        if not prunes_allowed:
            problems.append(
                f"a pruning anchor at entry {anchor.pruned_through} exists, but audit retention is off "
                "(COUNTERSIGN_AUDIT_RETENTION_DAYS): entries up to it may have been deleted"
            )
        elif key is not None and not _signed(key, "anchor", anchor.pruned_through, anchor.hash, anchor.signature):
            problems.append(f"the pruning anchor at entry {anchor.pruned_through} is not signed with the audit key")
    return problems


def verify_chain(
    rows: Iterable[ChainRow],
    *,
    anchor: tuple[int, str] | None,
    head: tuple[int, str] | None,
    limit: int = 20,
    key: bytes | None = None,
    head_signature: str | None = None,
    against: AuditHead | None = None,
    problems: Sequence[str] = (),
) -> AuditVerification:
    """Walk ``rows`` (ascending ids) from ``anchor`` (the last pruned entry, if any) and compare with ``head``.

    With ``key`` every entry and the head must carry their signatures. With ``against`` (a checkpoint taken
    earlier), its entry must still be there with the same hash: everything before it is then unchanged.
    ``problems`` found beforehand (the anchors') come first. At most ``limit`` problems are listed.
    """
    found: list[str] = list(problems)
    expected_prev = anchor[1] if anchor else GENESIS
    previous_id = anchor[0] if anchor else 0
    first_id = last_id = None
    last_hash = expected_prev
    checked = 0
    unsigned: list[int] = []
    against_seen = False
    for row in rows:
        checked += 1
        first_id = row.entry_id if first_id is None else first_id
        found.extend(_row_problems(row, previous_id, expected_prev))
        if key is not None and not _signed(key, "entry", row.entry_id, row.hash or "", row.signature):
            unsigned.append(row.entry_id)
        if against is not None and row.entry_id == against.entry_id:
            against_seen = True
            if row.hash != against.hash:
                found.append(f"entry {against.entry_id} differs from the checkpoint (the log was rewritten)")
        expected_prev = row.hash or ""
        previous_id = row.entry_id
        last_id, last_hash = row.entry_id, row.hash or ""
        if len(found) >= limit:
            break
    if unsigned:
        found.append(
            f"{len(unsigned)} entries are not signed with the audit key (first: {unsigned[0]}): "
            "written without the key, or forged"
        )
    if against is not None and not against_seen and (missing := _missing_checkpoint(against, anchor, previous_id)):
        found.append(missing)
    if head is not None and len(found) < limit and (head[0], head[1]) != (previous_id, last_hash):
        if head[0] > previous_id:
            found.append(f"the newest entries after {previous_id} are missing (the chain's head is {head[0]})")
        else:
            found.append("the chain's head does not match the last entry")
    elif (
        key is not None
        and head is not None
        and head[0] > 0
        and not _signed(key, "head", head[0], head[1], head_signature)
    ):
        found.append(
            f"the chain's head (entry {head[0]}) is not signed with the audit key (the newest entries were cut off?)"
        )
    return AuditVerification(checked, first_id, last_id, anchor[0] if anchor else None, tuple(found[:limit]))


def _row_problems(row: ChainRow, previous_id: int, expected_prev: str) -> list[str]:
    problems: list[str] = []
    if row.entry_id != previous_id + 1:
        problems.append(f"entries {previous_id + 1}..{row.entry_id - 1} are missing (deleted)")
    if row.prev_hash != expected_prev:
        problems.append(f"entry {row.entry_id}: does not follow the entry before it (one was deleted or edited)")
    recomputed = entry_hash(
        row.prev_hash or "", row.entry_id, row.at_text, row.actor, row.action, row.subject, row.details_text
    )
    if row.hash != recomputed:
        problems.append(f"entry {row.entry_id}: its content does not match its hash (edited)")
    return problems


def _missing_checkpoint(against: AuditHead, anchor: tuple[int, str] | None, last_id: int) -> str:
    if anchor is not None and against.entry_id <= anchor[0]:
        # Pruned since (by retention): only the anchor's own entry can still be compared.
        if against.entry_id == anchor[0] and against.hash != anchor[1]:
            return f"the pruning anchor at entry {anchor[0]} differs from the checkpoint (the log was rewritten)"
        return ""
    if against.entry_id > last_id:
        return (
            f"the checkpoint's entry {against.entry_id} is newer than the last entry {last_id} (entries were cut off)"
        )
    return f"the checkpoint's entry {against.entry_id} is missing (deleted)"
