"""How the offline model calls any configured tool: ``call <tool> key=value …`` and a word match.

``call scale_service service=checkout replicas=3`` becomes one tool call whose values are typed by the
tool's JSON schema (``integer``, ``number``, ``boolean``; JSON for ``object`` and ``array``; anything
else stays a string). Quoting follows the shell (``note="two words"``).

Without ``call``, :func:`word_match` picks the tool whose name shares the most words with the message
("scale checkout to 3 replicas" → ``scale_service``) and fills its parameters from ``name=value``,
``name value`` or ``value name`` ("3 replicas"); a string parameter still unfilled takes the word after
the tool's word ("scale *checkout*"). It only calls when every required parameter is filled.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

from bot.messages import ToolCall
from bot.tools import Tool

CALL_SYNTAX = "`call <tool> key=value …`"
_CALL = re.compile(r"^\s*/?call\b\s*(?P<rest>.*)$", re.IGNORECASE | re.DOTALL)
_WORD = re.compile(r"[A-Za-z0-9_.\-/:]+")
_STOP = {"a", "an", "the", "to", "of", "for", "in", "on", "at", "with", "please", "me", "my", "and", "is", "it"}
_TRUE = {"true", "yes", "y", "on", "1"}
_FALSE = {"false", "no", "n", "off", "0"}


def _properties(tool: Tool) -> dict[str, dict[str, Any]]:
    props = tool.parameters.get("properties") or {}
    return {str(k): (v if isinstance(v, dict) else {}) for k, v in props.items()}


def _required(tool: Tool) -> list[str]:
    return [str(name) for name in tool.parameters.get("required") or []]


def _types(schema: dict[str, Any]) -> list[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return [kind]
    if isinstance(kind, list):
        return [str(k) for k in kind]
    options = schema.get("anyOf") or schema.get("oneOf") or []
    found: list[str] = []
    for option in options:
        if isinstance(option, dict):
            found += _types(option)
    return found


def typed_value(raw: str, schema: dict[str, Any]) -> Any:
    """``raw`` converted to the type ``schema`` names; ``ValueError`` when it does not fit."""
    kinds = [k for k in _types(schema) if k != "null"] or ["string"]
    if raw.lower() in {"null", "none"} and "null" in _types(schema):
        return None
    problems: list[str] = []
    for kind in kinds:
        try:
            return _as(kind, raw)
        except ValueError as error:
            problems.append(str(error))
    raise ValueError(problems[0])


def _as(kind: str, raw: str) -> Any:
    if kind == "integer":
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a whole number") from None
    if kind == "number":
        try:
            number = float(raw)
        except ValueError:
            raise ValueError(f"{raw!r} is not a number") from None
        return int(number) if number.is_integer() and "." not in raw else number
    if kind == "boolean":
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ValueError(f"{raw!r} is not true or false")
    if kind in {"object", "array"}:
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            raise ValueError(f"{raw!r} is not JSON (an {kind} is written as JSON)") from None
        if not isinstance(value, dict if kind == "object" else list):
            raise ValueError(f"{raw!r} is not a JSON {kind}")
        return value
    return raw


def explicit_call(text: str, tools: Sequence[Tool]) -> tuple[ToolCall | None, str] | None:
    """``None`` unless ``text`` starts with ``call``; else the call, or ``None`` and what is wrong."""
    match = _CALL.match(text)
    if match is None:
        return None
    try:
        words = shlex.split(match.group("rest"))
    except ValueError as error:
        return None, f"I could not read that call ({error})."
    if not words:
        return None, f"Say which tool to call: {CALL_SYNTAX}."
    name, pairs = words[0], words[1:]
    tool = next((t for t in tools if t.name == name), None)
    if tool is None:
        return None, f"{name} is not among the configured tools."
    properties = _properties(tool)
    arguments: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            return None, f"{pair!r} is not key=value; `{usage(tool)}`"
        if key not in properties:
            return None, f"{tool.name} has no parameter {key!r}; `{usage(tool)}`"
        try:
            arguments[key] = typed_value(raw, properties[key])
        except ValueError as error:
            return None, f"{key}: {error}; `{usage(tool)}`"
    missing = [name for name in _required(tool) if name not in arguments]
    if missing:
        return None, f"{tool.name} needs {', '.join(missing)}; `{usage(tool)}`"
    return ToolCall(tool_name=tool.name, arguments=arguments), ""


def usage(tool: Tool) -> str:
    """``call scale_service service=<string> replicas=<integer> [region=<string>]``."""
    required = set(_required(tool))
    parts = [f"call {tool.name}"]
    for key, schema in _properties(tool).items():
        kind = "|".join(k for k in _types(schema) if k != "null") or "value"
        parts.append(f"{key}=<{kind}>" if key in required else f"[{key}=<{kind}>]")
    return " ".join(parts)


def tools_listing(tools: Sequence[Tool]) -> str:
    """The reply when nothing matched: the configured tools and how to call them."""
    if not tools:
        return "I have no tools to call, so I can only answer with this message."
    lines = [f"I am the offline model: I call a tool when you write {CALL_SYNTAX}. The configured tools:"]
    lines += [f"- `{usage(t)}`" + (f" — {_first_line(t.description)}" if t.description else "") for t in tools]
    return "\n".join(lines)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _words(text: str) -> list[str]:
    return [w.strip(".,;:!?") for w in _WORD.findall(text) if w.strip(".,;:!?")]


def word_match(text: str, tools: Sequence[Tool]) -> ToolCall | None:
    """The best-effort call a message's words ask for, or ``None``."""
    words = _words(text)
    lowered = [w.lower() for w in words]
    best: tuple[int, Tool, int] | None = None
    for tool in tools:
        name_words = [w for w in tool.name.lower().replace("-", "_").split("_") if w]
        hits = [i for i, w in enumerate(lowered) if w in name_words or w == tool.name.lower()]
        if hits and (best is None or len(set(lowered[i] for i in hits)) > best[0]):
            best = (len({lowered[i] for i in hits}), tool, hits[0])
    if best is None:
        return None
    _, tool, anchor = best
    arguments = _fill(tool, words, lowered, anchor)
    if any(name not in arguments for name in _required(tool)):
        return None
    return ToolCall(tool_name=tool.name, arguments=arguments)


def _fill(tool: Tool, words: list[str], lowered: list[str], anchor: int) -> dict[str, Any]:
    properties = _properties(tool)
    name_words = set(tool.name.lower().replace("-", "_").split("_"))
    used = {i for i, w in enumerate(lowered) if w in name_words}
    arguments: dict[str, Any] = {}
    for key, schema in properties.items():
        for index in _candidates(key, words, lowered):
            if index in used:
                continue
            raw = words[index].split("=", 1)[1] if "=" in words[index] else words[index]
            try:
                arguments[key] = typed_value(raw, schema)
            except ValueError:
                continue
            used |= {index, *(i for i, w in enumerate(lowered) if w == key.lower())}
            break
    for key, schema in properties.items():  # a string still unfilled: the word after the tool's word
        if key in arguments or "string" not in (_types(schema) or ["string"]):
            continue
        for index in range(anchor + 1, len(words)):
            free = index not in used and lowered[index] not in _STOP and lowered[index] not in properties
            if free and ("enum" not in schema or words[index] in schema["enum"]):
                arguments[key] = words[index]
                used.add(index)
                break
    return {key: arguments[key] for key in properties if key in arguments}  # in the schema's order


def _candidates(key: str, words: list[str], lowered: list[str]) -> list[int]:
    """Where a value for ``key`` may be: ``key=value``, the word after ``key``, the word before it."""
    key = key.lower()
    found = [i for i, w in enumerate(lowered) if w.startswith(f"{key}=") and len(w) > len(key) + 1]
    for i, w in enumerate(lowered):
        if w in {key, key.rstrip("s"), f"{key}s"}:
            if i + 1 < len(words) and lowered[i + 1] not in _STOP:
                found.append(i + 1)
            if i > 0 and lowered[i - 1] not in _STOP:
                found.append(i - 1)
    return found
