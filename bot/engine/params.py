"""Edited parameters: coerced from form values by the tool's schema, merged, validated."""

from __future__ import annotations

import json
from typing import Any

from bot.engine.errors import InvalidEdit
from bot.redaction import scrub
from bot.tools import InvalidToolArguments, Tool


def coerce_value(schema: dict[str, Any], raw: Any) -> Any:
    """Turn a form value (often a string) into the type ``schema`` asks for; ``ValueError`` if it can't."""
    if not isinstance(raw, str):
        return raw
    kind = schema.get("type")
    if kind is None and "anyOf" in schema:
        kinds = [s.get("type") for s in schema["anyOf"] if s.get("type") != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
        if raw.strip() == "" and any(s.get("type") == "null" for s in schema["anyOf"]):
            return None
    text = raw.strip()
    if kind == "integer":
        try:
            return int(text)
        except ValueError:
            raise ValueError("must be a whole number") from None
    if kind == "number":
        try:
            number = float(text)
        except ValueError:
            raise ValueError("must be a number") from None
        return int(number) if number.is_integer() and "." not in text else number
    if kind == "boolean":
        lowered = text.lower()
        if lowered in ("true", "yes", "on", "1"):
            return True
        if lowered in ("false", "no", "off", "0"):
            return False
        raise ValueError("must be true or false")
    if kind in ("array", "object"):
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"must be JSON ({'a list' if kind == 'array' else 'an object'})") from None
    return raw


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
