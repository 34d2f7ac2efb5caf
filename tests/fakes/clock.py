"""The clock the Slack suites and scenarios move by hand (``tests/fakes/engine_kit.py`` has the engine kit's own)."""

from __future__ import annotations

from datetime import UTC, datetime


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now
