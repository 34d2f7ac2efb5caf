"""How values are encoded in columns: times as epoch seconds (REAL), structures as compact JSON.

Epoch seconds keep comparisons such as ``expires_at <= ?`` cheap and index-friendly; records expose
them as timezone-aware UTC datetimes.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from bot import jsonio
from storage.errors import CorruptRecord
from storage.protocols import Instant


def epoch(now: Instant = None) -> float:
    """Epoch seconds for ``now`` (an aware datetime, epoch seconds, or ``None`` for the current time).

    >>> epoch(datetime(1970, 1, 1, 0, 1, tzinfo=UTC))
    60.0
    """
    if now is None:
        return time.time()
    if isinstance(now, datetime):
        if now.tzinfo is None:
            # A naive time is ambiguous; guessing its zone would move expiries by hours.
            raise ValueError("times must be timezone-aware (e.g. datetime.now(UTC))")
        return now.timestamp()
    return float(now)


def to_datetime(value: float) -> datetime:
    """The aware UTC datetime of epoch seconds ``value``."""
    return datetime.fromtimestamp(value, tz=UTC)


def to_datetime_or_none(value: float | None) -> datetime | None:
    """Like :func:`to_datetime`, passing ``None`` through."""
    return None if value is None else to_datetime(value)


def dumps(value: Any) -> str:
    """Compact JSON, UTF-8 kept as is (orjson; see :mod:`bot.jsonio`)."""
    return jsonio.dumps(value)


def loads(text: str | None, *, kind: str, record_id: str) -> Any:
    """Parse stored JSON; a value that does not parse raises :class:`CorruptRecord` naming the record."""
    if text is None:
        return None
    try:
        return jsonio.loads(text)
    except (TypeError, ValueError) as exc:
        raise CorruptRecord(kind, record_id, f"invalid JSON ({exc})") from exc
