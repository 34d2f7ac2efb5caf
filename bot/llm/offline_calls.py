"""How the offline model calls any configured tool: ``call <tool> key=value …`` and a best-effort word match.

The demo rules in :mod:`bot.llm.offline_demo` know only the demo tools; this module reads a tool's own
schema, so a team's tool can be tried in ``countersign chat`` without a model server.

>>> call_from_text("call scale_service service=checkout replicas=3", [scale])
ToolCall(tool_name='scale_service', arguments={'service': 'checkout', 'replicas': 3}, ...)
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.messages import ToolCall
from bot.tools import InvalidToolArguments, Tool

_CALL = re.compile(r"^\s*/?call\s+(?P<rest>.*)$", re.IGNORECASE | re.DOTALL)
_WORD = re.compile(r"[A-Za-z0-9_.\-/:]+")


class CallSyntaxError(ValueError):
    """A ``call`` line that names no configured tool or whose values do not fit the tool's schema."""


@dataclass(frozen=True, slots=True)
class ParsedCall:
    """What a message asks of the offline model: a call, or a sentence saying why none was made."""

    call: ToolCall | None
    problem: str | None = None


def call_from_text(text: str, tools: Sequence[Tool]) -> ParsedCall | None:
    """The call a ``call <tool> key=value …`` line asks for; ``None`` when the text is no such line."""
    match = _CALL.match(text)
    if match is None:
        return None
    try:
        words = shlex.split(match.group("rest"))
    except ValueError as exc:
        reason = str(exc).rstrip(".").lower()
        return ParsedCall(
            None, f"I could not read that call: {reason}. Write `call TOOL key=VALUE`, quoting values with spaces."
        )
    if not words:
        return ParsedCall(
            None,
            "Name a tool after call, for example: `"
            + (usage_lines(tools, limit=1) or ["call TOOL key=VALUE"])[0]
            + "`",
        )
    by_name = {tool.name: tool for tool in tools}
    tool = by_name.get(words[0])
    if tool is None:
        return ParsedCall(None, f"{words[0]} is not among the tools I was given.")
    try:
        arguments = _typed_pairs(tool, words[1:])
        tool.validate(arguments)
    except CallSyntaxError as exc:
        return ParsedCall(None, f"{exc} Usage: `{usage(tool)}`")
    except InvalidToolArguments as exc:
        return ParsedCall(None, f"{_field_errors(exc)}. Usage: `{usage(tool)}`")
    return ParsedCall(ToolCall(tool_name=tool.name, arguments=arguments))


def call_from_words(text: str, tools: Sequence[Tool]) -> ToolCall | None:
    """A best-effort call from plain words: a tool whose name's words all appear, with its required values.

    "scale checkout to 3 replicas" calls ``scale_service(service="checkout", replicas=3)``: the verb and
    noun of the name are found, a number next to a parameter's name fills it, and the first free word
    after the verb fills the first required text parameter. ``None`` unless every required value is found.
    """
    words = _WORD.findall(text)
    lowered = [w.lower().rstrip(".") for w in words]
    for tool in sorted(tools, key=lambda t: -len(t.name)):
        parts = [p for p in tool.name.lower().split("_") if p]
        if not parts or parts[0] not in lowered:
            continue
        arguments = _guess_arguments(tool, words, lowered, lowered.index(parts[0]))
        if arguments is not None:
            return ToolCall(tool_name=tool.name, arguments=arguments)
    return None


def usage(tool: Tool) -> str:
    """``call <tool> name=TYPE …`` for ``tool``, optional parameters in brackets (no ``<>``: chat renders Markdown)."""
    properties: dict[str, Any] = tool.parameters.get("properties") or {}
    required = set(tool.parameters.get("required") or [])
    pieces = [f"call {tool.name}"]
    for name, schema in properties.items():
        piece = f"{name}={str(schema.get('type', 'value')).upper()}"
        pieces.append(piece if name in required else f"[{piece}]")
    return " ".join(pieces)


def usage_lines(tools: Sequence[Tool], limit: int = 8) -> list[str]:
    """One :func:`usage` line per tool, at most ``limit`` of them."""
    return [usage(tool) for tool in list(tools)[:limit]]


def _typed_pairs(tool: Tool, pairs: list[str]) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    for pair in pairs:
        name, sep, raw = pair.partition("=")
        if not sep or not name:
            raise CallSyntaxError(f"{pair!r} is not key=value.")
        try:
            arguments[name] = tool.coerce_field(name, raw)
        except InvalidToolArguments as exc:
            raise CallSyntaxError(_field_errors(exc) + ".") from None
    return arguments


def _field_errors(exc: InvalidToolArguments) -> str:
    return "; ".join(f"{name} {message}" for name, message in exc.errors.items())


def _guess_arguments(tool: Tool, words: list[str], lowered: list[str], verb_at: int) -> dict[str, Any] | None:
    properties: dict[str, Any] = tool.parameters.get("properties") or {}
    required: list[str] = list(tool.parameters.get("required") or [])
    name_words = set(tool.name.lower().split("_"))
    used = {verb_at}
    arguments: dict[str, Any] = {}
    for name, schema in properties.items():
        if schema.get("type") in ("integer", "number"):
            value = _number_beside(name, lowered, used)
            if value is not None:
                arguments[name] = value
    free = [
        i
        for i in range(verb_at + 1, len(words))
        if i not in used
        and lowered[i] not in name_words
        and lowered[i] not in _FILLERS
        and lowered[i] not in properties
    ]
    for name in required:
        if name in arguments or properties.get(name, {}).get("type", "string") != "string" or not free:
            continue
        arguments[name] = words[free.pop(0)].rstrip(".")
    if any(name not in arguments for name in required):
        return None
    try:
        tool.validate(arguments)
    except InvalidToolArguments:
        return None
    return arguments


def _number_beside(name: str, lowered: list[str], used: set[int]) -> int | float | None:
    """A number written just before or after a word that starts like ``name`` ("3 replicas", "replicas 3")."""
    stem = name.lower().rstrip("s")
    for i, word in enumerate(lowered):
        if not word.startswith(stem):
            continue
        for j in (i - 1, i + 1):
            if 0 <= j < len(lowered) and j not in used and re.fullmatch(r"-?\d+(\.\d+)?", lowered[j]):
                used.update((i, j))
                return float(lowered[j]) if "." in lowered[j] else int(lowered[j])
    return None


_FILLERS = frozenset({"the", "a", "an", "to", "of", "for", "please", "on", "in", "at", "with", "and"})
