"""Edited parameters: coerced from form values by the tool's schema, merged, validated."""

from __future__ import annotations

from typing import Any

from bot.engine.errors import InvalidEdit
from bot.redaction import scrub
from bot.tools import InvalidToolArguments, Tool, coerce_value

__all__ = ["coerce_value", "merge_edit"]


def merge_edit(tool: Tool, original: dict[str, Any], edited: dict[str, Any]) -> dict[str, Any]:
    """Coerce ``edited`` by the tool's schema, merge it over ``original``, validate the result.

    Raises :class:`InvalidEdit` with a message per field; unknown fields are refused too.
    """
    properties = tool.parameters.get("properties", {})
    errors: dict[str, str] = {}
    merged = dict(original)
    for name, raw in (edited or {}).items():
        if name not in properties:
            errors[name] = "is not a parameter of this tool"
            continue
        try:
            merged[name] = coerce_value(properties[name], raw)
        except ValueError as exc:
            errors[name] = str(exc)
    if not errors:
        try:
            tool.validate(merged)
        except InvalidToolArguments as exc:
            errors.update(exc.errors)
    if errors:
        # jsonschema quotes offending values; a secret typed into a form must not come back in an error
        raise InvalidEdit({name: scrub(message, [merged, edited]) for name, message in errors.items()})
    return merged
