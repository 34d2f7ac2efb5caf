"""Tools the agent may call: :class:`Tool`, the :func:`tool` decorator and :class:`Toolset`.

A tool is a name, a description, a JSON schema of its parameters and a function (sync or async).
``inputs_from_state`` / ``outputs_to_state`` let tools read and write the run's shared state, as in
Haystack's Agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import hashlib
import inspect
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, Union, get_args, get_origin, is_typeddict

import jsonschema
import pydantic
import pydantic_core
import typing_extensions
from pydantic import TypeAdapter

from bot.aio import is_coroutine_function
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
    needs_approval: Callable[[dict[str, Any]], Any] | None = None
    """Decides from a call's arguments whether it needs approval (``True``: ask; ``False``: run), as the
    Agents SDK's ``needs_approval``. Consulted after the admins' rules, before ``confirmation_default``;
    any error in it means "ask". It may be async."""
    destructive: bool = False
    """Marks a tool whose calls cannot be undone: Approve asks for confirmation where the surface can."""
    untrusted_output: bool = False
    """Its results are untrusted text (a web page, a ticket, an MCP server's ``openWorldHint`` tool): arguments
    copied from them later are marked tainted (``bot.engine.provenance``). Tool sources may set it."""
    # --- previews (issue 30; bot.hitl.previews computes them) ---
    preview: Callable[..., Any] | None = None
    """A side-effect-free function with the tool's parameters returning what the call would do (a diff, a
    plan, "3 pods will restart"). It may be async; a sync one runs in a worker thread with a time limit."""
    preview_required: bool = False
    """Refuse approval while the preview failed, timed out or is missing."""
    respondable: bool = False
    """Allow the fourth decision, Respond: a person types the result instead of the tool running."""
    # --- end previews ---
    _validator: Any = field(default=None, init=False, repr=False, compare=False)
    _adapters: dict[str, TypeAdapter[Any]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_\-]{1,64}", self.name):
            raise ValueError(
                f"Tool name {self.name!r} must be 1-64 letters, digits, '_' or '-' (^[A-Za-z0-9_-]{{1,64}}$)."
            )
        jsonschema.Draft202012Validator.check_schema(self.parameters)
        self._validator = jsonschema.Draft202012Validator(self.parameters)
        self._adapters = typed_parameter_adapters(self.function, set(self.parameters.get("properties") or {}))

    @property
    def binding(self) -> str | None:
        """What a paused call of this tool binds to beyond its parameters (an MCP tool: its schema and annotations as
        the server listed them); a run whose paused call's tool has another binding now does not resume.
        ``None``: nothing more than the parameters, which the snapshot's fingerprint covers."""
        return None

    @property
    def is_async(self) -> bool:
        """Whether :attr:`function` is a coroutine function."""
        return is_coroutine_function(self.function)

    @property
    def tool_spec(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def validate(self, arguments: dict[str, Any]) -> None:
        """Raise :class:`InvalidToolArguments` unless ``arguments`` fit :attr:`parameters`.

        Parameters typed ``datetime``, ``date``, a dataclass, a Pydantic model, … are also checked by
        Pydantic, so a string that is no date is refused here, not when the tool runs.
        """
        errors: dict[str, str] = {}
        for err in self._validator.iter_errors(arguments):
            key = str(err.path[0]) if err.path else _missing_property(err) or "_"
            errors.setdefault(key, err.message)
        for name, adapter in self._adapters.items():
            if name in arguments and name not in errors:
                try:
                    adapter.validate_python(arguments[name])
                except pydantic.ValidationError as exc:
                    errors[name] = _pydantic_message(exc)
        if errors:
            raise InvalidToolArguments(self.name, errors)

    def coerce_field(self, name: str, raw: Any) -> Any:
        """Read a value typed into a form for parameter ``name`` and check it alone.

        Returns the JSON value to store (``"2026-12-01"`` for a date, a dict for a dataclass). Raises
        :class:`InvalidToolArguments` with the one field's message when it does not fit.

        >>> scale.coerce_field("replicas", "3")
        3
        """
        properties = self.parameters.get("properties") or {}
        if name not in properties:
            raise InvalidToolArguments(self.name, {name: "is not a parameter of this tool"})
        try:
            value = coerce_value(properties[name], raw)
        except ValueError as exc:
            raise InvalidToolArguments(self.name, {name: str(exc)}) from None
        schema = {**properties[name], "$defs": self.parameters.get("$defs", {})}
        error = next(iter(jsonschema.Draft202012Validator(schema).iter_errors(value)), None)
        if error is not None:
            raise InvalidToolArguments(self.name, {name: error.message})
        adapter = self._adapters.get(name)
        if adapter is not None:
            try:
                adapter.validate_python(value)
            except pydantic.ValidationError as exc:
                raise InvalidToolArguments(self.name, {name: _pydantic_message(exc)}) from None
        return value

    def typed_arguments(self, arguments: dict[str, Any]) -> dict[str, Any]:
        """``arguments`` with the values of typed parameters converted (ISO text → ``datetime``, dict →
        dataclass, value → Enum member); raises :class:`InvalidToolArguments` when one does not convert."""
        if not self._adapters:
            return dict(arguments)
        converted = dict(arguments)
        errors: dict[str, str] = {}
        for name, adapter in self._adapters.items():
            if name in converted:
                try:
                    converted[name] = adapter.validate_python(converted[name])
                except pydantic.ValidationError as exc:
                    errors[name] = _pydantic_message(exc)
        if errors:
            raise InvalidToolArguments(self.name, errors)
        return converted

    def invoke(self, **kwargs: Any) -> Any:
        """Call the tool synchronously (an async function is run to completion)."""
        kwargs = self.typed_arguments(kwargs)
        if self.is_async:
            from bot.aio import run_sync

            return run_sync(self.function(**kwargs))
        return self.function(**kwargs)

    async def invoke_async(self, **kwargs: Any) -> Any:
        """Call the tool from async code; a sync function runs in a worker thread."""
        kwargs = self.typed_arguments(kwargs)
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
                "destructive": self.destructive,
                "untrusted_output": self.untrusted_output,
                "needs_approval": (
                    f"{self.needs_approval.__module__}:{self.needs_approval.__qualname__}"
                    if self.needs_approval is not None
                    else None
                ),
            },
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Tool:
        """Inverse of :meth:`to_dict`; imports the function."""
        params = dict(data["init_parameters"])
        params["function"] = import_attribute(params["function"])
        if params.get("needs_approval"):
            params["needs_approval"] = import_attribute(params["needs_approval"])
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
    needs_approval: Callable[[dict[str, Any]], Any] | None = None,
    destructive: bool = False,
    untrusted_output: bool = False,
    preview: Callable[..., Any] | None = None,
    preview_required: bool = False,
    respondable: bool = False,
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
        if "approved_preview" in inspect.signature(fn).parameters:
            hidden.add("approved_preview")  # given by the engine from the approval, never by the model
        return Tool(
            name=name or fn.__name__,
            description=description or summary or fn.__name__,
            parameters=schema_from_signature(fn, param_docs, exclude=hidden),
            function=fn,
            inputs_from_state=inputs_from_state,
            outputs_to_state=outputs_to_state,
            confirmation_default=confirmation_default,
            needs_approval=needs_approval,
            destructive=destructive,
            untrusted_output=untrusted_output,
            preview=preview,
            preview_required=preview_required,
            respondable=respondable,
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
            name: str = match.group(1) or match.group(2)  # one of the two alternatives matched
            params[name] = match.group(3).strip()
            current = name
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
    defs: dict[str, Any] = {}
    for pname, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD) or pname in (exclude or set()):
            continue
        hint = hints.get(pname, Any)
        schema = type_to_schema(hint)
        _hoist_defs(schema, defs)
        if param_docs and pname in param_docs:
            schema["description"] = param_docs[pname]
        if param.default is inspect.Parameter.empty:
            required.append(pname)
        else:
            default = param.default.value if isinstance(param.default, enum.Enum) else param.default
            if default is None or isinstance(default, str | int | float | bool | list | dict):
                schema["default"] = default
            elif _needs_conversion(hint):  # a datetime, a dataclass, ...: its JSON form
                # A default with no JSON form is left out of the schema: the function still applies it.
                no_json_form = (pydantic.PydanticSchemaGenerationError, pydantic_core.PydanticSerializationError)
                with contextlib.suppress(*no_json_form):
                    schema["default"] = _adapter(hint).dump_python(default, mode="json")
        properties[pname] = schema
    result: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        result["required"] = required
    if defs:
        result["$defs"] = defs
    return result


_SCALAR_SCHEMA_TYPES: dict[type, str] = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


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
        return _union_schema(args)
    if origin is Literal:
        values = list(args)
        return {"enum": values, **_scalar_type(values)}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        values = [m.value for m in hint]
        return {"enum": values, **_scalar_type(values)}
    if isinstance(hint, type) and hint in _SCALAR_SCHEMA_TYPES:
        return {"type": _SCALAR_SCHEMA_TYPES[hint]}
    if hint in (list, tuple, set) or origin in (list, tuple, set, Iterable, typing.Sequence):
        item = type_to_schema(args[0]) if args else {}
        return {"type": "array", "items": item} if item else {"type": "array"}
    if hint is dict or origin is dict:
        if len(args) == 2:
            return {"type": "object", "additionalProperties": type_to_schema(args[1]) or True}
        return {"type": "object"}
    return _pydantic_schema(hint)


def _union_schema(args: tuple[Any, ...]) -> dict[str, Any]:
    """``X | None`` as X or null; any other union as any of its members."""
    non_none = [a for a in args if a is not type(None)]
    if len(non_none) == 1:
        inner = type_to_schema(non_none[0])
        return {"anyOf": [inner, {"type": "null"}]} if len(args) > 1 else inner
    return {"anyOf": [type_to_schema(a) for a in args]}


def _scalar_type(values: list[Any]) -> dict[str, Any]:
    kinds = {type(v) for v in values}
    mapping = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return {"type": mapping[kinds.pop()]} if len(kinds) == 1 and next(iter(kinds)) in mapping else {}


# --- types Pydantic knows: datetime, date, dataclasses, TypedDicts, models, ... ------------------------

_JSON_NATIVE = (str, int, float, bool, list, tuple, set, dict, type(None))
_SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_SCHEMA_VALUES = ("default", "enum", "const", "examples")


def _adapter(hint: Any) -> TypeAdapter[Any]:
    """Pydantic's adapter for ``hint``; a ``typing.TypedDict`` (which Pydantic refuses before Python
    3.12) is first rebuilt as the same ``typing_extensions.TypedDict``."""
    if is_typeddict(hint) and type(hint).__module__ == "typing" and sys.version_info < (3, 12):
        fields = typing.get_type_hints(hint, include_extras=True)
        required = getattr(hint, "__required_keys__", frozenset(fields))
        rebuilt = {k: (t if k in required else typing_extensions.NotRequired[t]) for k, t in fields.items()}
        # Type checkers accept the functional form only with a literal name and field dict; these are read at run time.
        hint = typing_extensions.TypedDict(hint.__name__, rebuilt)  # pyright: ignore[reportArgumentType, reportGeneralTypeIssues]
    return TypeAdapter(hint)


def _pydantic_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema Pydantic gives ``hint``: titles dropped, ``$ref`` s inlined unless recursive."""
    try:
        schema = _adapter(hint).json_schema()
    except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticInvalidForJsonSchema) as exc:
        raise TypeError(f"Unsupported parameter type for a tool: {hint!r}") from exc
    except pydantic.PydanticUserError as exc:
        raise TypeError(f"Unsupported parameter type for a tool: {hint!r} ({exc})") from exc
    defs = schema.pop("$defs", {})
    kept: dict[str, Any] = {}
    inlined = _inline(_without_titles(schema), _without_titles(defs), kept, ())
    if kept:
        # A recursive type cannot be inlined; its definitions go to the root of the tool's schema.
        inlined["$defs"] = {
            name: _inline(_without_titles(defs[name]), _without_titles(defs), kept, (name,)) for name in list(kept)
        }
    return inlined


def _inline(schema: Any, defs: dict[str, Any], kept: dict[str, Any], stack: tuple[str, ...]) -> Any:
    if isinstance(schema, list):
        return [_inline(item, defs, kept, stack) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        name = ref.removeprefix("#/$defs/")
        if name in stack:
            kept[name] = True
            return schema
        siblings = {k: v for k, v in schema.items() if k != "$ref"}
        return {**_inline(defs[name], defs, kept, (*stack, name)), **_inline(siblings, defs, kept, stack)}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_VALUES:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _inline(sub, defs, kept, stack) for name, sub in value.items()}
        else:
            out[key] = _inline(value, defs, kept, stack)
    return out


def _without_titles(schema: Any) -> Any:
    """Drop Pydantic's generated ``title`` keywords (never a property that happens to be named title)."""
    if isinstance(schema, list):
        return [_without_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_VALUES:
            out[key] = value
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _without_titles(sub) for name, sub in value.items()}
        else:
            out[key] = _without_titles(value)
    return out


def _hoist_defs(schema: dict[str, Any], defs: dict[str, Any]) -> None:
    """Move the ``$defs`` a parameter's schema brought along to the tool schema's root, where its
    ``#/$defs/...`` references point."""
    found: list[dict[str, Any]] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$defs"), dict):
                found.append(node.pop("$defs"))
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    collect(schema)
    for group in found:
        for name, definition in group.items():
            if name in defs and defs[name] != definition:
                raise TypeError(f"Two different parameter types are both named {name!r}; rename one.")
            defs[name] = definition


def _needs_conversion(hint: Any) -> bool:
    """Whether a value of ``hint`` arrives from JSON in another form than the function expects."""
    origin = get_origin(hint)
    if hint is Any or hint is inspect.Parameter.empty or hint in _JSON_NATIVE:
        return False
    if origin is typing.Annotated:
        return _needs_conversion(get_args(hint)[0])
    if origin is Literal:
        return False
    if origin is not None:
        return any(_needs_conversion(arg) for arg in get_args(hint) if arg is not Ellipsis)
    return isinstance(hint, type) or is_typeddict(hint)


def typed_parameter_adapters(fn: Callable[..., Any], names: set[str]) -> dict[str, TypeAdapter[Any]]:
    """A Pydantic adapter for each parameter of ``fn`` (among ``names``) whose type needs converting
    from JSON (datetime, date, Enum, dataclass, TypedDict, Pydantic model, ...)."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except (NameError, TypeError):  # a hand-built Tool's function may have unresolvable hints: no conversion
        return {}
    adapters: dict[str, TypeAdapter[Any]] = {}
    for name in names:
        hint = hints.get(name)
        if hint is None or not _needs_conversion(hint):
            continue
        try:
            adapters[name] = _adapter(hint)
        except (pydantic.PydanticSchemaGenerationError, pydantic.PydanticUserError):
            continue
    return adapters


def _pydantic_message(exc: pydantic.ValidationError) -> str:
    """Pydantic's first error in one line, with where in the value it is, and never the value itself."""
    first = exc.errors(include_input=False, include_url=False, include_context=False)[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


# --- form values ---------------------------------------------------------------------------------------


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
    if kind is None and ("properties" in schema or "$ref" in schema):
        kind = "object"
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
    if kind == "string" and schema.get("format") in ("date", "date-time", "time"):
        return text  # a date typed with stray spaces is still that date
    return raw
