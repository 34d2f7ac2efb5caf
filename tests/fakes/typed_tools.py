"""Module-level tools with rich parameter types (importable by path, for round trips and the engine)."""

from __future__ import annotations

import dataclasses
import enum
from datetime import date, datetime
from typing import TypedDict as PlainTypedDict

from pydantic import BaseModel, Field
from typing_extensions import TypedDict

from bot.tools import tool

RECEIVED: list[dict] = []
"""What the last calls of the tools below received, with the Python types they got."""


class Severity(enum.Enum):
    LOW = "low"
    HIGH = "high"


@dataclasses.dataclass
class Window:
    start: datetime
    minutes: int = 30


class Owner(TypedDict):
    name: str
    email: str


class Label(PlainTypedDict, total=False):
    """A ``typing.TypedDict``, which Pydantic refuses before Python 3.12 unless rebuilt."""

    key: str
    value: str


class Change(BaseModel):
    title: str = Field(description="Short summary")
    severity: Severity = Severity.LOW
    window: Window


class Node(BaseModel):
    name: str
    children: list[Node] = []


@tool
def schedule_change(change: Change, owner: Owner, on: date, severity: Severity = Severity.LOW) -> str:
    """Schedule a change.

    :param change: What changes, and when.
    :param owner: Who answers for it.
    :param on: The day of the change.
    :param severity: How risky it is.
    """
    RECEIVED.append({"change": change, "owner": owner, "on": on, "severity": severity})
    return f"{change.title} on {on.isoformat()}"


@tool
def book_window(window: Window, at: datetime | None = None, day: date = date(2026, 12, 1)) -> str:
    """Book a maintenance window.

    :param window: The window.
    :param at: When to announce it.
    :param day: The day.
    """
    RECEIVED.append({"window": window, "at": at, "day": day})
    return f"booked {window.minutes} min on {day.isoformat()}"


@tool
def plant_tree(root: Node) -> str:
    """Plant a tree of nodes.

    :param root: The root node.
    """
    RECEIVED.append({"root": root})
    return root.name
