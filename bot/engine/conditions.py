"""Conditions on a call's arguments: ``policy set restart_service always when env=prod``.

A condition is one or more clauses joined by ``and``: ``field=value``, ``field!=value``,
``field in a,b,c``, and ``field>n``, ``>=``, ``<``, ``<=`` for numbers, and ``tainted`` (an argument was
copied from untrusted text: ``policy set restart_service always when tainted``). It matches a call when every
clause holds for the call's arguments; a field the call does not carry never matches. The canonical
text (:attr:`Condition.text`) is what storage keeps and what listings show.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.engine.errors import CommandError
from bot.tools import Tool

_CLAUSE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]{0,63})\s*(!=|>=|<=|=|>|<|\s+in\s+)\s*(.+?)\s*$", re.IGNORECASE)
_NUMERIC_OPS = (">", ">=", "<", "<=")
MAX_CLAUSES = 8
TAINTED = "tainted"
"""The clause ``when tainted``: the call has an argument copied from untrusted text (``bot.engine.provenance``)."""
TAINT_FIELD = "\x00tainted"
"""The key, in the arguments a condition is matched against, that is ``True`` for a tainted call (no argument
of a tool can have this name)."""


@dataclass(frozen=True)
class Clause:
    """One test on one argument."""

    field: str
    op: str
    values: tuple[str, ...]

    @property
    def text(self) -> str:
        """The canonical text, e.g. ``env in prod,staging``."""
        if self.op == TAINTED:
            return TAINTED
        if self.op == "in":
            return f"{self.field} in {','.join(self.values)}"
        return f"{self.field}{self.op}{self.values[0]}"

    def holds(self, arguments: Mapping[str, Any]) -> bool:
        """Whether the clause holds for ``arguments`` (never for a missing field)."""
        if self.op == TAINTED:
            return arguments.get(TAINT_FIELD) is True
        if self.field not in arguments:
            return False
        value = arguments[self.field]
        if self.op in _NUMERIC_OPS:
            number, bound = _number(value), _number(self.values[0])
            if number is None or bound is None:
                return False
            return {">": number > bound, ">=": number >= bound, "<": number < bound, "<=": number <= bound}[self.op]
        shown = _text(value)
        if self.op == "!=":
            return shown != self.values[0]
        return shown in self.values  # "=" and "in"


@dataclass(frozen=True)
class Condition:
    """Clauses joined by ``and``; more clauses make a more specific rule."""

    clauses: tuple[Clause, ...]

    @property
    def text(self) -> str:
        """The canonical text, e.g. ``env=prod and replicas>10``."""
        return " and ".join(c.text for c in self.clauses)

    def matches(self, arguments: Mapping[str, Any]) -> bool:
        """Whether every clause holds for ``arguments``."""
        return all(c.holds(arguments) for c in self.clauses)

    def check_fields(self, tool: Tool) -> None:
        """:class:`CommandError` when a clause names a field ``tool`` does not have."""
        fields = (tool.parameters or {}).get("properties") or {}
        for clause in self.clauses:
            if clause.op != TAINTED and clause.field not in fields:
                known = ", ".join(sorted(fields)) or "none"
                raise CommandError(
                    f"{tool.name} has no argument '{clause.field}', so the condition could never match. "
                    f"Its arguments: {known}."
                )


def parse_condition(text: str) -> Condition:
    """Parse ``env=prod``, ``env in prod,staging``, ``replicas>10``, joined by ``and``.

    >>> parse_condition("ENV = prod and replicas > 10").text
    'ENV=prod and replicas>10'
    """
    parts = [p for p in re.split(r"\s+and\s+", text.strip(), flags=re.IGNORECASE) if p.strip()]
    if not parts or len(parts) > MAX_CLAUSES:
        raise CommandError(f"A condition has 1 to {MAX_CLAUSES} clauses, e.g. when env=prod or when replicas>10.")
    clauses = []
    for part in parts:
        if part.strip().lower() == TAINTED:
            clauses.append(Clause(TAINT_FIELD, TAINTED, ()))
            continue
        match = _CLAUSE.match(part)
        if not match:
            raise CommandError(
                f"'{part[:60]}' is not a condition; write field=value, field!=value, field in a,b or field>n."
            )
        field, op, raw = match.group(1), match.group(2).strip().lower(), match.group(3).strip().strip("'\"")
        values = tuple(v.strip() for v in raw.split(",") if v.strip()) if op == "in" else (raw,)
        if not values or any(len(v) > 200 for v in values):
            raise CommandError(f"'{part[:60]}' needs a value (at most 200 characters).")
        if op in _NUMERIC_OPS and _number(values[0]) is None:
            raise CommandError(f"'{part[:60]}' compares with '{values[0][:40]}', which is not a number.")
        clauses.append(Clause(field, op, tuple(sorted(set(values))) if op == "in" else values))
    return Condition(tuple(sorted(clauses, key=lambda c: c.text)))


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    try:
        number = float(str(value))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _text(value: Any) -> str:
    """How an argument compares with text in a condition (``true``/``false`` for booleans, ``5`` for 5.0)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
