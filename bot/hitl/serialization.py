"""The ``{"type": "module.Class", "init_parameters": {...}}`` shape every HITL component serialises to.

Policies, UIs and strategies are stored inside agent configurations and snapshots; a component is
rebuilt by importing its class from ``type`` and calling that class's ``from_dict``. Haystack's dicts
load too: a ``type`` in Haystack's human-in-the-loop package names the ``bot.hitl`` class of that name.
"""

from __future__ import annotations

import importlib
from typing import Any, TypeVar

T = TypeVar("T")

HAYSTACK_HITL_PACKAGES = ("haystack.human_in_the_loop.", "haystack_experimental.components.agents.human_in_the_loop.")
"""Where Haystack (and haystack-experimental) keep the classes ``bot.hitl`` mirrors."""

HITL_CLASS_MODULES = {
    "AlwaysAskPolicy": "bot.hitl.policies",
    "AskOncePolicy": "bot.hitl.policies",
    "NeverAskPolicy": "bot.hitl.policies",
    "ConfirmationPolicy": "bot.hitl.policies",
    "BlockingConfirmationStrategy": "bot.hitl.blocking",
    "ConfirmationStrategy": "bot.hitl.blocking",
    "BreakpointConfirmationStrategy": "bot.hitl.breakpoint",
    "HITLBreakpointException": "bot.hitl.breakpoint",
    "ConfirmationUI": "bot.hitl.ui",
    "RichConsoleUI": "bot.hitl.ui",
    "SimpleConsoleUI": "bot.hitl.ui",
    "ConfirmationUIResult": "bot.hitl.dataclasses",
    "ToolExecutionDecision": "bot.hitl.dataclasses",
}
"""The module of each class ``bot.hitl`` exports, by name: how a Haystack class path finds ours.

Written out, not read from the ``bot.hitl`` package, because the package imports this module: looking it up
there made all of ``bot.hitl`` one import cycle. A test holds the table to the package's exports.
"""


def class_path(cls: type) -> str:
    """The dotted import path of ``cls``.

    >>> class_path(dict)
    'builtins.dict'
    """
    return f"{cls.__module__}.{cls.__qualname__}"


def default_to_dict(obj: Any, **init_parameters: Any) -> dict[str, Any]:
    """Serialise ``obj`` as its class path plus the given constructor arguments.

    >>> default_to_dict(AlwaysAskPolicy())
    {'type': 'bot.hitl.policies.AlwaysAskPolicy', 'init_parameters': {}}
    """
    return {"type": class_path(type(obj)), "init_parameters": init_parameters}


def haystack_alias(path: str) -> str:
    """The ``bot.hitl`` class path for a Haystack human-in-the-loop class path; other paths unchanged.

    >>> haystack_alias("haystack.human_in_the_loop.policies.AlwaysAskPolicy")
    'bot.hitl.policies.AlwaysAskPolicy'
    """
    if not path.startswith(HAYSTACK_HITL_PACKAGES):
        return path
    name = path.rsplit(".", 1)[-1]
    module = HITL_CLASS_MODULES.get(name)
    return path if module is None else f"{module}.{name}"


def check_type(cls: type, data: dict[str, Any]) -> None:
    """Refuse ``data`` whose ``type`` names another class than ``cls`` (Haystack's name for it is accepted)."""
    declared = data.get("type")
    if declared is not None and haystack_alias(declared) != class_path(cls):
        raise ValueError(f"Cannot build {class_path(cls)} from data of type {declared!r}.")


def default_from_dict(cls: type[T], data: dict[str, Any]) -> T:
    """Build ``cls`` from the ``init_parameters`` of ``data``; a ``type`` naming another class is refused."""
    check_type(cls, data)
    return cls(**(data.get("init_parameters") or {}))


def import_class(path: str) -> type:
    """Import the class named by a dotted ``module.Class`` path (the class may be nested)."""
    obj = import_path(path)
    if not isinstance(obj, type):
        raise TypeError(f"{path!r} is not a class.")
    return obj


def import_path(path: str) -> Any:
    """Import the object named by a dotted path, e.g. ``package.module.Class.method`` (Haystack's callable form)."""
    parts = path.split(".")
    # The module part is the longest importable prefix; what follows are attributes.
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name is not None and not module_name.startswith(exc.name):
                raise  # the module exists but one of its own imports is missing
            continue
        for attr in parts[cut:]:
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                raise ImportError(f"Cannot import {path!r}: no attribute {attr!r} in {module_name!r}.") from None
        return obj
    raise ImportError(f"Cannot import {path!r}: expected a dotted 'module.name' path.")


def callable_path(fn: Any) -> str:
    """The dotted import path of a module-level function or class method, as Haystack's ``serialize_callable``.

    Lambdas, closures and bound methods of instances cannot be imported back: ``ValueError``.

    >>> callable_path(importlib.import_module)
    'importlib.import_module'
    """
    qualname = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if not qualname or not module or "<" in qualname:
        raise ValueError(f"{fn!r} cannot be serialised: only importable functions can (no lambda or closure).")
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, type):
        raise ValueError(f"{fn!r} is a bound method of an instance and cannot be serialised.")
    path = f"{module}.{qualname}"
    imported = import_path(path)
    # A classmethod is a fresh bound method on every access: compare the functions behind them.
    if getattr(imported, "__func__", imported) is not getattr(fn, "__func__", fn):
        raise ValueError(f"{fn!r} cannot be serialised: {path!r} names another object.")
    return path


def component_to_dict(obj: Any) -> dict[str, Any]:
    """Serialise a policy, UI or strategy through its own ``to_dict``, in the common shape."""
    to_dict = getattr(obj, "to_dict", None)
    if not callable(to_dict):
        raise TypeError(f"{type(obj).__name__} cannot be serialised: it has no to_dict().")
    data = to_dict()
    if not isinstance(data, dict):
        raise TypeError(f"{type(obj).__name__}.to_dict() returned {type(data).__name__}, not a dict.")
    return {"type": class_path(type(obj)), "init_parameters": data.get("init_parameters", {})}


def component_from_dict(data: dict[str, Any]) -> Any:
    """Inverse of :func:`component_to_dict`: import the class named by ``type`` and call its ``from_dict``."""
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise ValueError("A serialised component needs a 'type' naming its class.")
    cls = import_class(haystack_alias(data["type"]))
    from_dict = getattr(cls, "from_dict", None)
    if not callable(from_dict):
        raise TypeError(f"{data['type']} cannot be deserialised: it has no from_dict().")
    return from_dict(data)
