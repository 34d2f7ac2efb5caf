"""Which confirmation strategy applies to which tool.

``confirmation_strategies`` maps a key to a strategy, where a key is a tool name, a tuple of tool
names, or ``"*"`` (every other tool). An exact name wins over a tuple naming the tool, which wins over
``"*"``::

    {"delete_file": strict, ("read_file", "list_files"): relaxed, "*": default}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from bot.hitl.blocking import ConfirmationStrategy
from bot.hitl.serialization import component_from_dict, component_to_dict

WILDCARD = "*"
"""The key whose strategy applies to every tool no other key names."""

StrategyKey = str | tuple[str, ...]
ConfirmationStrategies = Mapping[StrategyKey, ConfirmationStrategy]


def resolve_strategy(strategies: ConfirmationStrategies | None, tool_name: str) -> ConfirmationStrategy | None:
    """The strategy for ``tool_name``: exact name, else a tuple naming it, else ``"*"``, else ``None``.

    >>> resolve_strategy({("a", "b"): tuple_strategy, "*": default}, "b") is tuple_strategy
    True
    """
    if not strategies:
        return None
    exact = strategies.get(tool_name)
    if exact is not None:
        return exact
    for key, strategy in strategies.items():
        if isinstance(key, tuple) and tool_name in key:
            return strategy
    return strategies.get(WILDCARD)


def validate_strategy_keys(strategies: ConfirmationStrategies | None, tool_names: Iterable[str]) -> None:
    """Check the keys against the agent's tools.

    Raises ``ValueError`` for a key naming a tool that does not exist, ``"*"`` inside a tuple, an empty
    tuple, or a tool named by two tuple keys (which one would apply would be arbitrary). ``TypeError``
    for a key that is neither a string nor a tuple of strings, or a value without a ``run`` method.
    """
    known = set(tool_names)
    claimed_by: dict[str, tuple[str, ...]] = {}
    for key, strategy in (strategies or {}).items():
        # Only ``run`` is essential; serialisation and ``run_async`` are checked where they are used.
        if not callable(getattr(strategy, "run", None)):
            raise TypeError(f"The value for confirmation strategy key {key!r} is not a strategy: {strategy!r}")
        for name in _named_tools(key):
            if name not in known:
                available = ", ".join(sorted(known)) or "(none)"
                raise ValueError(
                    f"Confirmation strategy key {key!r} names unknown tool '{name}'. Available tools: {available}"
                )
            if isinstance(key, tuple):
                other = claimed_by.setdefault(name, key)
                if other != key:
                    raise ValueError(
                        f"Tool '{name}' is named by two confirmation strategy keys: {other!r} and {key!r}."
                    )


def _named_tools(key: object) -> tuple[str, ...]:
    """The tool names a key lists (none for ``"*"``); malformed keys raise."""
    if isinstance(key, str):
        return () if key == WILDCARD else (key,)
    if not isinstance(key, tuple) or not all(isinstance(n, str) for n in key):
        raise TypeError(f"A confirmation strategy key must be a tool name or a tuple of them, got {key!r}.")
    if not key:
        raise ValueError("A confirmation strategy key may not be an empty tuple.")
    if WILDCARD in key:
        raise ValueError(f"'*' must be a key of its own, not part of {key!r}.")
    return key


def strategies_to_dict(strategies: ConfirmationStrategies | None) -> list[dict[str, Any]] | None:
    """Serialise as a list of ``{"key": name | [names], "strategy": {...}}``: JSON has no tuple keys."""
    if strategies is None:
        return None
    return [
        {"key": list(key) if isinstance(key, tuple) else key, "strategy": component_to_dict(strategy)}
        for key, strategy in strategies.items()
    ]


def strategies_from_dict(data: list[dict[str, Any]] | None) -> dict[StrategyKey, ConfirmationStrategy] | None:
    """Inverse of :func:`strategies_to_dict`: lists become tuple keys again."""
    if data is None:
        return None
    result: dict[StrategyKey, ConfirmationStrategy] = {}
    for entry in data:
        key = entry["key"]
        result[tuple(key) if isinstance(key, list) else key] = component_from_dict(entry["strategy"])
    return result
