"""Tools the agent may call: :class:`Tool`, the :func:`tool` decorator and :class:`Toolset`.

A tool is a name, a description, a JSON schema of its parameters and a function (sync or async).
``inputs_from_state`` / ``outputs_to_state`` let tools read and write the run's shared state, as in
Haystack's Agent.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import hashlib
import inspect
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin

import jsonschema

from bot.canonical import canonical_json


class ToolInvocationError(Exception):
    """A tool raised, or its arguments did not fit its schema."""

    def __init__(self, message: str, tool_name: str) -> None:
        super().__init__(message)
        self.tool_name = tool_name


class InvalidToolArguments(ValueError):
    """Arguments that do not satisfy a tool's JSON schema; ``errors`` maps field name to message."""

    def __init__(self, tool_name: str, errors: dict[str, str]) -> None:
        detail = "; ".join(f"{k}: {v}" for k, v in errors.items())
        super().__init__(f"Invalid parameters for tool '{tool_name}': {detail}")
        self.tool_name = tool_name
        self.errors = errors


@dataclass
class Tool:
    """A callable the LLM may request.

    >>> Tool(name="echo", description="Echo text", function=lambda text: text,
    ...      parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    inputs_from_state: dict[str, str] | None = None
    outputs_to_state: dict[str, dict[str, Any]] | None = None
    confirmation_default: str | None = None
    """The tool's own default policy mode (``always``, ``never``, ``once``, ``deny``), used when no stored
    policy names it. ``None`` defers to the global default."""
    _validator: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", self.name):
            raise ValueError(f"Tool name {self.name!r} must be 1-64 letters, digits, '_' or '-'.")
        jsonschema.Draft202012Validator.check_schema(self.parameters)
        self._validator = jsonschema.Draft202012Validator(self.parameters)

    @property
    def is_async(self) -> bool:
        """Whether :attr:`function` is a coroutine function."""
        return inspect.iscoroutinefunction(self.function)

    @property
    def tool_spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate(self, arguments: dict[str, Any]) -> None:
        """Raise :class:`InvalidToolArguments` unless ``arguments`` fit :attr:`parameters`."""
        errors: dict[str, str] = {}
        for err in self._validator.iter_errors(arguments):
            key = str(err.path[0]) if err.path else _missing_property(err) or "_"
            errors.setdefault(key, err.message)
        if errors:
            raise InvalidToolArguments(self.name, errors)

    def invoke(self, **kwargs: Any) -> Any:
        """Call the tool synchronously (an async function is run to completion)."""
        if self.is_async:
            from bot.aio import run_sync

            return run_sync(self.function(**kwargs))
        return self.function(**kwargs)

    async def invoke_async(self, **kwargs: Any) -> Any:
        """Call the tool from async code; a sync function runs in a worker thread."""
        if self.is_async:
            return await self.function(**kwargs)
        return await asyncio.to_thread(functools.partial(self.function, **kwargs))

    def to_dict(self) -> dict[str, Any]:
        """Serialise; the function is stored by import path."""
        return {
            "type": "bot.tools.Tool",
            "init_parameters": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
                "function": f"{self.function.__module__}:{self.function.__qualname__}",
                "inputs_from_state": self.inputs_from_state,
                "outputs_to_state": self.outputs_to_state,
                "confirmation_default": self.confirmation_default,
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tool:
        """Inverse of :meth:`to_dict`; imports the function."""
        params = dict(data["init_parameters"])
        params["function"] = import_attribute(params["function"])
        if isinstance(params["function"], Tool):  # decorated with @tool: the module attribute is the Tool
            params["function"] = params["function"].function
        return cls(**params)


def _missing_property(err: jsonschema.ValidationError) -> str | None:
    if err.validator == "required":
        match = re.match(r"'([^']+)' is a required property", err.message)
        return match.group(1) if match else None
    if err.validator == "additionalProperties":
        match = re.search(r"'([^']+)' was unexpected", err.message)
        return match.group(1) if match else None
    return None


class Toolset:
    """An iterable group of tools, e.g. all tools of one system.

    >>> Toolset([restart_service, read_logs])
    """

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self.tools: list[Tool] = list(tools)

    def __iter__(self) -> Iterator[Tool]:
        return iter(self.tools)

    def __len__(self) -> int:
        return len(self.tools)

    def __contains__(self, item: object) -> bool:
        return item in self.tools or any(t.name == item for t in self.tools)

    def add(self, tool: Tool) -> None:
        """Append ``tool``."""
        self.tools.append(tool)

    def to_dict(self) -> dict[str, Any]:
        """Serialise every tool."""
        return {"type": "bot.tools.Toolset", "init_parameters": {"tools": [t.to_dict() for t in self.tools]}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Toolset:
        """Inverse of :meth:`to_dict`."""
        return cls(Tool.from_dict(t) for t in data["init_parameters"]["tools"])


ToolsType = list[Tool] | Toolset | list[Tool | Toolset]


def flatten_tools(tools: Iterable[Tool | Toolset] | None) -> list[Tool]:
    """Expand toolsets into one list of tools; duplicate names raise ``ValueError``."""
    flat: list[Tool] = []
    for item in tools or []:
        flat.extend(item if isinstance(item, Toolset) else [item])
    names = [t.name for t in flat]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"Duplicate tool names: {', '.join(dupes)}")
    return flat


def tools_fingerprint(tools: Iterable[Tool]) -> str:
    """A digest of the tools' names and parameter schemas; a snapshot refuses to resume on a change.

    Descriptions are left out: rewording a docstring must not strand every paused run.
    """
    spec = sorted(([t.name, _without_descriptions(t.parameters)] for t in tools), key=lambda pair: pair[0])
    return hashlib.sha256(canonical_json(spec).encode()).hexdigest()[:16]


def _without_descriptions(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _without_descriptions(v) for k, v in schema.items() if k != "description"}
    if isinstance(schema, list):
        return [_without_descriptions(v) for v in schema]
    return schema


def import_attribute(spec: str) -> Any:
    """Import ``module:attribute`` (attribute may be dotted)."""
    import importlib

    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ValueError(f"Expected 'module:attribute', got {spec!r}")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


# --- @tool: JSON schema from type hints and docstrings -------------------------------------------


def tool(
    function: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    inputs_from_state: dict[str, str] | None = None,
    outputs_to_state: dict[str, dict[str, Any]] | None = None,
    confirmation_default: str | None = None,
) -> Any:
    """Build a :class:`Tool` from a function's type hints and docstring.

    >>> @tool
    ... def restart_service(service: str, force: bool = False) -> str:
    ...     '''Restart a systemd service.
    ...
    ...     :param service: Unit name, e.g. nginx.
    ...     :param force: Kill the process if it does not stop.
    ...     '''
    """

    def build(fn: Callable[..., Any]) -> Tool:
        summary, param_docs = parse_docstring(inspect.getdoc(fn) or "")
        hidden = set((inputs_from_state or {}).values())
        return Tool(
            name=name or fn.__name__,
            description=description or summary or fn.__name__,
            parameters=schema_from_signature(fn, param_docs, exclude=hidden),
            function=fn,
            inputs_from_state=inputs_from_state,
            outputs_to_state=outputs_to_state,
            confirmation_default=confirmation_default,
        )

    return build(function) if function is not None else build


# reST ``:param x:`` or ``:param list[str] x:`` (typed), or Google ``x:`` / ``x (int):`` inside ``Args:``.
_PARAM_LINE = re.compile(r"^\s*(?::param\s+(?:[^:]+?\s+)?(\w+)\s*:|(\w+)\s*(?:\([^)]*\))?\s*:)\s*(.*)$")


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a docstring into its summary and per-parameter descriptions.

    Understands reST (``:param x: ...``) and Google style (``Args:`` then ``x: ...``).
    """
    lines = doc.splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    in_args = False
    current: str | None = None
    for line in lines:
        stripped = line.strip()
        if stripped.lower() in ("args:", "arguments:", "parameters:"):
            in_args, current = True, None
            continue
        if stripped.lower() in ("returns:", "raises:", "yields:", "examples:") or stripped.startswith(
            (":return", ":raises", ":rtype", ":type")
        ):
            in_args, current = False, None
            continue
        match = _PARAM_LINE.match(line)
        if match and (match.group(1) or in_args):
            current = match.group(1) or match.group(2)
            params[current] = match.group(3).strip()
            continue
        if current and stripped and (in_args or line.startswith((" ", "\t"))):
            params[current] = f"{params[current]} {stripped}".strip()
            continue
        current = None
        if not in_args and not params:
            summary.append(stripped)
    text = " ".join(s for s in summary if s).strip()
    return text, params


def schema_from_signature(
    fn: Callable[..., Any], param_docs: dict[str, str] | None = None, exclude: set[str] | None = None
) -> dict[str, Any]:
    """The JSON schema (an object) of ``fn``'s parameters."""
    # include_extras keeps Annotated[..., "description"]; without it the descriptions are stripped.
    hints = typing.get_type_hints(fn, include_extras=True)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or pname in (exclude or set()):
            continue
        schema = type_to_schema(hints.get(pname, Any))
        if param_docs and pname in param_docs:
            schema["description"] = param_docs[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        else:
            default = param.default.value if isinstance(param.default, enum.Enum) else param.default
            if default is None or isinstance(default, str | int | float | bool | list | dict):
                schema["default"] = default
        properties[pname] = schema
    result: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        result["required"] = required
    return result


def type_to_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of one Python type hint."""
    origin = get_origin(hint)
    args = get_args(hint)
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if origin is typing.Annotated:
        schema = type_to_schema(args[0])
        extra = [a for a in args[1:] if isinstance(a, str)]
        if extra:
            schema["description"] = extra[0]
        return schema
    if origin in (Union, types.UnionType):
        non_none = [a for a in args if a is not type(None)]
        if len(non_none) == 1:
            inner = type_to_schema(non_none[0])
            return {"anyOf": [inner, {"type": "null"}]} if len(args) > 1 else inner
        return {"anyOf": [type_to_schema(a) for a in args]}
    if origin is Literal:
        values = list(args)
        return {"enum": values, **_scalar_type(values)}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [m.value for m in hint]
        return {"enum": values, **_scalar_type(values)}
    if hint is str:
        return {"type": "string"}
    if hint is bool:
        return {"type": "boolean"}
    if hint is int:
        return {"type": "integer"}
    if hint is float:
        return {"type": "number"}
    if hint in (list, tuple, set) or origin in (list, tuple, set, Iterable, typing.Sequence):
        item = type_to_schema(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if hint is dict or origin is dict:
        if len(args) == 2:
            return {"type": "object", "additionalProperties": type_to_schema(args[1]) or True}
        return {"type": "object"}
    if hint is type(None):
        return {"type": "null"}
    raise TypeError(f"Unsupported parameter type for a tool: {hint!r}")


def _scalar_type(values: list[Any]) -> dict[str, Any]:
    kinds = {type(v) for v in values}
    mapping = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return {"type": mapping[kinds.pop()]} if len(kinds) == 1 and next(iter(kinds)) in mapping else {}
