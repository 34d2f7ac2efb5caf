"""Edited parameters: coerced from form values by the tool's schema, merged, validated."""

from __future__ import annotations

from typing import Any

from bot.engine.errors import InvalidEdit
from bot.redaction import scrub
from bot.tools import InvalidToolArguments, Tool, coerce_value

__all__ = ["CLEARED", "coerce_value", "field_error", "merge_edit"]

CLEARED = None
"""The edited value of a field the person emptied. Card renderers leave an emptied input out of a click's
data, so an adapter that offered a prefilled input and got nothing back passes this (``None``)."""
CLEARED_REQUIRED = "is required: give it a value (it was cleared)"


def field_error(tool: Tool, name: str, raw: Any) -> str | None:
    """What is wrong with ``raw`` typed for parameter ``name`` of ``tool``, checked alone (``None``: it fits).

    The check an edit form can make as each value is typed; :func:`merge_edit` checks the whole edit again.
    """
    try:
        tool.coerce_field(name, raw)
    except InvalidToolArguments as exc:
        return scrub(exc.errors.get(name, str(exc)), [{name: raw}])
    return None


def merge_edit(tool: Tool, original: dict[str, Any], edited: dict[str, Any]) -> dict[str, Any]:
    """Coerce ``edited`` by the tool's schema, merge it over ``original``, validate the result.

    A value of :data:`CLEARED` means the person emptied the field: a required one is refused, an optional
    one takes its schema ``default`` or is removed. Raises :class:`InvalidEdit` with a message per field;
    unknown fields are refused too.
    """
    properties = tool.parameters.get("properties", {})
    errors: dict[str, str] = {}
    merged = dict(original)
    required = set(tool.parameters.get("required", []) or [])
    for name, raw in (edited or {}).items():
        if name not in properties:
            errors[name] = "is not a parameter of this tool"
            continue
        if raw is CLEARED:  # emptied: a required field is refused; an optional one takes its default or goes
            if name in required:
                errors[name] = CLEARED_REQUIRED
            elif "default" in properties[name]:
                merged[name] = properties[name]["default"]
            else:
                merged.pop(name, None)
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
