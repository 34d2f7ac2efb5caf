"""Haystack filters over memories, checked once and compiled to parameterized SQL for either backend.

A filter is a comparison ``{"field": "meta.channel", "operator": "==", "value": "C1"}`` or a logical
node ``{"operator": "AND" | "OR" | "NOT", "conditions": [...]}`` (``NOT`` negates the AND of its
conditions, as in Haystack). Fields are the scope columns ``user_id``, ``run_id``, ``agent_id`` and
``meta.<key>`` for a metadata key. Anything else is refused with :class:`FilterError` before any SQL is
built; values only ever travel as parameters, and field names are checked against a fixed pattern.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SCOPE_FIELDS = ("user_id", "run_id", "agent_id")
COMPARISONS = ("==", "!=", ">", ">=", "<", "<=", "in", "not in")
LOGICAL = ("AND", "OR", "NOT")
_META_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_ORDERED = (">", ">=", "<", "<=")


class FilterError(ValueError):
    """A memory filter that is not well-formed Haystack syntax (names what is wrong).

    >>> compile_filter({"field": "meta.channel", "operator": "~", "value": "C1"}, SQLITE_DIALECT)
    Traceback (most recent call last):
    storage.memory_filters.FilterError: unknown operator '~' (use one of ==, !=, >, >=, <, <=, in, not in)
    """


@dataclass(frozen=True)
class Dialect:
    """How one backend writes a field and a parameter; the filter's shape is the same everywhere.

    ``meta(key)`` returns the SQL of a metadata value and its parameters; ``value(v)`` the parameter a
    compared value binds as (PostgreSQL compares ``jsonb``, SQLite plain values); ``null_safe_ne`` is
    the operator of a "differs, NULL included" comparison.
    """

    placeholder: str
    meta: Callable[[str], tuple[str, list[Any]]]
    value: Callable[[Any], Any]
    value_sql: str
    null_safe_ne: str


def _sqlite_meta(key: str) -> tuple[str, list[Any]]:
    # The path is written out (the key is checked against _META_KEY): an index on the expression (the channel's)
    # then serves the comparison, which a bound path would hide from the planner.
    return f"json_extract(metadata, '$.\"{key}\"')", []


SQLITE_DIALECT = Dialect(placeholder="?", meta=_sqlite_meta, value=lambda v: v, value_sql="?", null_safe_ne="IS NOT")
"""SQLite: metadata is JSON text read with ``json_extract``; values bind as they are."""


def _check_value(operator: str, value: Any, field: str) -> None:
    if operator in ("in", "not in"):
        if not isinstance(value, list) or not value:
            raise FilterError(f"operator {operator!r} on {field!r} needs a non-empty list of values")
        for item in value:
            _check_scalar(item, field, allow_none=False)
        return
    _check_scalar(value, field, allow_none=operator in ("==", "!="))
    if operator in _ORDERED and isinstance(value, bool):
        raise FilterError(f"operator {operator!r} on {field!r} cannot compare a boolean")


def _check_scalar(value: Any, field: str, *, allow_none: bool) -> None:
    if value is None and allow_none:
        return
    if not isinstance(value, (str, int, float, bool)):
        raise FilterError(f"the value for {field!r} must be a string, number or boolean, not {type(value).__name__}")


def validate_filter(node: Any) -> None:
    """Raise :class:`FilterError` unless ``node`` is a well-formed filter.

    >>> validate_filter({"operator": "AND", "conditions": [{"field": "user_id", "operator": "==", "value": "U1"}]})
    """
    compile_filter(node, SQLITE_DIALECT)


def compile_filter(node: Any, dialect: Dialect) -> tuple[str, list[Any]]:
    """The SQL condition of a filter and its parameters, for ``dialect``.

    >>> compile_filter({"field": "meta.channel", "operator": "==", "value": "C1"}, SQLITE_DIALECT)
    ('json_extract(metadata, \'$."channel"\') = ?', ['C1'])
    """
    if not isinstance(node, dict):
        raise FilterError(f"a filter must be a dict, not {type(node).__name__}")
    operator = node.get("operator")
    if "conditions" in node or operator in LOGICAL:
        return _compile_logical(node, dialect)
    return _compile_comparison(node, dialect)


def _compile_logical(node: dict[str, Any], dialect: Dialect) -> tuple[str, list[Any]]:
    operator = node.get("operator")
    if operator not in LOGICAL:
        raise FilterError(f"unknown logical operator {operator!r} (use AND, OR or NOT)")
    extra = set(node) - {"operator", "conditions"}
    if extra:
        raise FilterError(f"a logical filter takes only 'operator' and 'conditions', not {sorted(extra)}")
    conditions = node.get("conditions")
    if not isinstance(conditions, list) or not conditions:
        raise FilterError(f"{operator} needs a non-empty list of 'conditions'")
    parts: list[str] = []
    params: list[Any] = []
    for condition in conditions:
        sql, more = compile_filter(condition, dialect)
        parts.append(f"({sql})")
        params.extend(more)
    joined = (" OR " if operator == "OR" else " AND ").join(parts)
    return (f"NOT ({joined})" if operator == "NOT" else joined), params


def _compile_comparison(node: dict[str, Any], dialect: Dialect) -> tuple[str, list[Any]]:
    missing = {"field", "operator", "value"} - set(node)
    if missing:
        raise FilterError(f"a comparison needs 'field', 'operator' and 'value' (missing {sorted(missing)})")
    extra = set(node) - {"field", "operator", "value"}
    if extra:
        raise FilterError(f"a comparison takes only 'field', 'operator' and 'value', not {sorted(extra)}")
    field, operator, value = node["field"], node["operator"], node["value"]
    if operator not in COMPARISONS:
        raise FilterError(f"unknown operator {operator!r} (use one of {', '.join(COMPARISONS)})")
    if not isinstance(field, str):
        raise FilterError(f"a field must be a string, not {type(field).__name__}")
    if field in SCOPE_FIELDS:
        column, params = field, []
        items = value if operator in ("in", "not in") and isinstance(value, list) else [value]
        if any(item is not None and not isinstance(item, str) for item in items):
            raise FilterError(f"{field!r} holds text: compare it with strings")
        bind = dialect.placeholder
        to_param: Callable[[Any], Any] = lambda v: v  # noqa: E731 - scope columns are plain text everywhere
    elif field.startswith("meta.") and _META_KEY.match(field[5:]):
        column, params = dialect.meta(field[5:])
        bind = dialect.value_sql
        to_param = dialect.value
    else:
        raise FilterError(
            f"unknown field {field!r} (use user_id, run_id, agent_id or meta.<key> with letters, digits, _ or -)"
        )
    _check_value(operator, value, field)
    if operator in ("in", "not in"):
        marks = ", ".join([bind] * len(value))
        values = [to_param(item) for item in value]
        if operator == "in":
            return f"{column} IN ({marks})", [*params, *values]
        return f"({column} IS NULL OR {column} NOT IN ({marks}))", [*params, *params, *values]
    if value is None:
        return f"{column} {'IS NULL' if operator == '==' else 'IS NOT NULL'}", params
    if operator == "!=":
        # Haystack: a memory without the field differs from any value.
        return f"{column} {dialect.null_safe_ne} {bind}", [*params, to_param(value)]
    sql_operator = "=" if operator == "==" else operator
    return f"{column} {sql_operator} {bind}", [*params, to_param(value)]


# Every search hashes the requester's and the channel's tokens again: the same few values, over and over.
@functools.lru_cache(maxsize=4096)
def scope_token(field: str, value: str) -> str:
    """The full-text token standing for "``field`` is ``value``" (a scope field, or ``meta.<key>`` with a string).

    >>> scope_token("user_id", "slack:T1:U_ANA")[:1]
    's'
    """
    digest = hashlib.sha256(json.dumps([field, value], ensure_ascii=False).encode("utf-8")).hexdigest()
    return "s" + digest[:20]


def token_prefilter(node: Any) -> str | None:
    """An FTS expression of scope tokens that every memory matching the (valid) filter has, or ``None``.

    Only string equality (``==``, ``in``) on scope fields and metadata becomes tokens; an AND keeps the
    conditions that do, an OR needs all of them. The SQL condition is still applied: the tokens only let the
    text search skip memories that cannot match.

    >>> token_prefilter({"field": "meta.channel", "operator": "==", "value": "C1"})[1:2]
    's'
    """
    operator = node.get("operator")
    if "conditions" in node:
        parts = [token_prefilter(condition) for condition in node["conditions"]]
        if operator == "AND":
            kept = [p for p in parts if p is not None]
            return " AND ".join(f"({p})" for p in kept) if kept else None
        if operator == "OR" and all(p is not None for p in parts):
            return " OR ".join(f"({p})" for p in parts)
        return None
    values = node["value"] if operator == "in" else [node["value"]] if operator == "==" else None
    if not values or not all(isinstance(v, str) for v in values):
        return None
    return " OR ".join(f'"{scope_token(node["field"], v)}"' for v in values)
