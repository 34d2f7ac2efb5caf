"""Durations as people write them (``30m``, ``4h``, ``2d``, plain seconds): one parser and one format.

A leaf (imports nothing of ours): configuration, the admin commands, the ops CLI and the adapters all read or
show durations, and configuration must not import the engine to do it.
"""

from __future__ import annotations

import re

MAX_TTL_SECONDS = 90 * 86400
"""The longest an approval may wait (the ``ttl`` command and ``COUNTERSIGN_DEFAULT_TTL`` refuse more)."""

DURATION_SYNTAX = re.compile(r"^([+-]?\d+)\s*([smhd]?)$")
"""A duration as written: an optional sign, digits, and an optional unit (s, m, h, d)."""
_DURATION_DIGITS = 12  # far above the bound already; keeps a pasted wall of digits cheap to refuse
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


class DurationError(ValueError):
    """A duration that is not one, or is outside 1 second … 90 days; ``str()`` is one sentence."""


def duration_seconds(text: str, *, maximum: int = MAX_TTL_SECONDS, what: str = "A ttl") -> int:
    """``90s``, ``30m``, ``4h``, ``2d`` or plain seconds → seconds, more than zero and at most ``maximum`` (90 days).

    The one parser of durations: approval TTLs (the ``ttl`` command, ``COUNTERSIGN_DEFAULT_TTL``) and, with
    their own ``maximum`` and ``what``, retention periods.

    >>> duration_seconds("4h"), duration_seconds("90")
    (14400, 90)
    """
    shown = text.strip()[:40]
    match = DURATION_SYNTAX.match(text.strip().lower())
    if not match:
        raise DurationError(f"'{shown}' is not a duration; use e.g. 30m, 4h or 2d (a plain number is seconds)")
    sign, digits, unit = match.group(1)[:1], match.group(1).lstrip("+-"), match.group(2)
    if sign == "-" or not digits.strip("0"):
        raise DurationError(f"{what} must be longer than zero, not '{shown}'")
    if len(digits) > _DURATION_DIGITS or int(digits) * _UNIT_SECONDS[unit] > maximum:
        days = f" ({maximum // 86400} days)" if maximum % 86400 == 0 else ""
        raise DurationError(f"{what} can be at most {format_duration(maximum)}{days}, not '{shown}'")
    return int(digits) * _UNIT_SECONDS[unit]


def format_duration(seconds: int) -> str:
    """``86400`` → ``1d``; ``5400`` → ``90m``."""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
