"""Module-level hooks (importable by path, so agents using them survive ``to_dict``/``from_dict``)."""

from __future__ import annotations

from bot.hooks import HookEvent

SEEN: list[tuple[str, str]] = []
"""``(point, run_id)`` of every call of :func:`record_point`; tests clear it."""


def record_point(event: HookEvent) -> None:
    """Note that a point was reached."""
    SEEN.append((event.point, event.run_id))


async def shout_result(event: HookEvent) -> None:
    """Upper-case a tool result before the model sees it."""
    event.result = (event.result or "").upper()


def stop_on_budget(event: HookEvent) -> None:
    """End the run through the state key, as Haystack's ``stop_run`` does."""
    event.state["stop_run"] = "budget"


def review_everything(event: HookEvent) -> None:
    """Hold every result for a person's review."""
    event.request_review("every result is reviewed")
