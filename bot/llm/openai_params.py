"""Generation kwargs as the ``openai`` client takes them: its own keywords, and ``extra_body`` for the rest.

``chat.completions.create`` refuses a keyword it does not know (``top_k``), so the parameters that
servers such as vLLM or llama.cpp add travel in ``extra_body``, which the client merges into the
request body. Which keywords the client knows, and their types, are read from the installed client's
own signature, so a newer client's new parameters need no change here.

>>> create_arguments({"temperature": 0.2, "top_k": 20}, {"extra_body": {"min_p": 0.05}})
{'temperature': 0.2, 'extra_body': {'top_k': 20, 'min_p': 0.05}}
"""

from __future__ import annotations

import collections.abc
import functools
import inspect
import json
import types
import typing
from collections.abc import Mapping
from typing import Any

import openai
import typing_extensions

REQUEST_OPTIONS = ("extra_body", "extra_query", "extra_headers")
"""The client's per-request options that are objects: each layer's entries are merged, never replaced."""

JSON_KIND_NAMES: dict[type, str] = {
    float: "a number",
    int: "a whole number",
    bool: "true or false",
    str: "a string",
    dict: "an object",
    list: "a list",
    type(None): "null",
}


@functools.cache
def create_keywords() -> frozenset[str]:
    """Every keyword the installed client's ``chat.completions.create`` takes (the async and sync ones agree).

    Read on first use: the client loads its chat-completions code lazily (see
    :meth:`~bot.llm.OpenAIChatGenerator.warm_up`), and importing this module must not load it.
    """
    from openai.resources.chat import AsyncCompletions

    parameters = inspect.signature(AsyncCompletions.create).parameters
    return frozenset(name for name, p in parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY)


def create_arguments(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """The keywords for ``chat.completions.create`` from generation kwargs, later layers winning.

    A key the client takes goes as a keyword; any other key goes into ``extra_body``. Explicit
    ``extra_body``, ``extra_query`` and ``extra_headers`` objects are merged key by key, with each other
    layer's and with the keys moved into ``extra_body``, in the order written.
    """
    arguments: dict[str, Any] = {}
    options: dict[str, dict[str, Any]] = {name: {} for name in REQUEST_OPTIONS}
    for layer in layers:
        for key, value in (layer or {}).items():
            if key in options:
                if not isinstance(value, Mapping):
                    raise TypeError(f"generation_kwargs[{key!r}] must be a dict, got {type(value).__name__}")
                options[key].update(value)
            elif key in create_keywords():
                arguments[key] = value
            else:
                options["extra_body"][key] = value
    arguments.update({name: entries for name, entries in options.items() if entries})
    return arguments


def generation_kwargs_problem(kwargs: Mapping[str, Any]) -> str | None:
    """What is wrong with JSON generation kwargs, in a few words naming the key, or ``None``.

    Checked: a keyword of the client given a JSON value of the wrong type (``temperature`` a string,
    ``max_tokens`` a fraction), and the request options that must be objects. Server-specific keys are
    the server's to judge.

    >>> generation_kwargs_problem({"temperature": "hot"})
    'temperature must be a number, got a string'
    """
    for key, value in kwargs.items():
        if key in REQUEST_OPTIONS:
            problem = _request_option_problem(key, value)
        else:
            kinds = keyword_kinds().get(key)
            problem = None if kinds is None or _fits(value, kinds) else _wrong_kind(key, kinds, value)
        if problem:
            return problem
    return None


def _request_option_problem(key: str, value: Any) -> str | None:
    if not isinstance(value, dict):
        return _wrong_kind(key, frozenset({dict}), value)
    if key == "extra_headers":
        for name, item in value.items():
            if not isinstance(item, str):
                return f"extra_headers: the value of {name} must be a string, got {_kind_name(item)}"
    return None


def _fits(value: Any, kinds: frozenset[type]) -> bool:
    if isinstance(value, bool):  # a bool is an int to Python, never a number to the API
        return bool in kinds
    if isinstance(value, int) and float in kinds:
        return True
    return type(value) in kinds


def _wrong_kind(key: str, kinds: frozenset[type], value: Any) -> str:
    expected = " or ".join(
        JSON_KIND_NAMES[kind] for kind in JSON_KIND_NAMES if kind in kinds and kind is not type(None)
    )
    return f"{key} must be {expected}, got {_kind_name(value)}"


def _kind_name(value: Any) -> str:
    if isinstance(value, int | float):  # never a secret, and "got 1.5" says more than "got a number"
        return json.dumps(value)
    for kind, name in JSON_KIND_NAMES.items():
        if type(value) is kind:
            return name
    return type(value).__name__


def _json_kinds(annotation: Any) -> frozenset[type] | None:
    """The JSON types an annotation of the client admits, or ``None`` when that cannot be told from it."""
    is_union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    arms = typing.get_args(annotation) if is_union else (annotation,)
    kinds: set[type] = set()
    for arm in arms:
        origin = typing.get_origin(arm)
        if arm in (openai.Omit, openai.NotGiven):
            continue  # the client's "not given" markers, never a JSON value
        if arm in (float, int, bool, str, type(None)):
            kinds.add(arm)
        elif origin is typing.Literal:
            kinds.update(type(choice) for choice in typing.get_args(arm))
        elif typing_extensions.is_typeddict(arm) or origin in (dict, collections.abc.Mapping):
            kinds.add(dict)  # typing_extensions' check: typing.is_typeddict misses the client's TypedDicts
        elif origin in (list, collections.abc.Sequence, collections.abc.Iterable):
            kinds.add(list)
        else:  # a type a JSON value cannot be (openai.Timeout) or one not known here: leave it unchecked
            return None
    return frozenset(kinds)


@functools.cache
def keyword_kinds() -> dict[str, frozenset[type]]:
    """The JSON types of the client's keywords whose annotation tells them (``temperature``: a number or null)."""
    from openai.resources.chat import AsyncCompletions

    try:
        hints = typing.get_type_hints(AsyncCompletions.create)
    except (NameError, TypeError):  # a client whose annotations do not resolve: no type checks, still a call
        return {}
    kinds = {name: _json_kinds(hints[name]) for name in create_keywords() if name in hints}
    return {name: kind for name, kind in kinds.items() if kind}
