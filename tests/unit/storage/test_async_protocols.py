"""The async twins of the store protocols (:mod:`storage.async_protocols`) match their sync protocols exactly.

The twins are generated (``python -m storage.async_twins``); a protocol changed without regenerating them fails
here: a method added, removed or renamed, or a parameter, default, annotation or result type that differs.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any

import pytest

import storage.async_protocols
import storage.protocols
from storage.async_twins import TWINNED, source, twin_name


def _normalised(annotation: Any) -> Any:
    """An annotation as text the same way on both sides (the twins' text went through ``ast.unparse``)."""
    return ast.unparse(ast.parse(annotation)) if isinstance(annotation, str) else annotation


def _methods(protocol: type) -> dict[str, Any]:
    return {
        name: value for name, value in vars(protocol).items() if not name.startswith("_") and inspect.isfunction(value)
    }


def _signature(function: Any) -> tuple[list[tuple[str, Any, Any, Any]], Any]:
    signature = inspect.signature(function)
    parameters = [(p.name, p.kind, p.default, _normalised(p.annotation)) for p in signature.parameters.values()]
    return parameters, _normalised(signature.return_annotation)


@pytest.mark.parametrize("store", sorted(TWINNED))
def test_each_twin_has_its_protocol_s_methods_as_coroutines_with_the_same_signatures(store):
    protocol = vars(storage.protocols)[TWINNED[store]]
    twin = vars(storage.async_protocols)[twin_name(TWINNED[store])]

    assert sorted(_methods(twin)) == sorted(_methods(protocol))
    for name, method in _methods(protocol).items():
        assert inspect.iscoroutinefunction(_methods(twin)[name]), f"{store}.{name} is not async in the twin"
        assert _signature(_methods(twin)[name]) == _signature(method), f"{store}.{name} drifted from its protocol"


def test_the_async_surface_has_every_store_of_the_protocols():
    surface = vars(storage.async_protocols)["AsyncStores"]
    stores = {name for name, value in vars(surface).items() if isinstance(value, property)}
    assert stores == {*TWINNED, "wakeups"}
    assert set(TWINNED) == set(storage.protocols.STORE_NAMES)


def test_the_generator_makes_every_twin_that_is_checked_in():
    generated = {node.name for node in ast.parse(source()).body if isinstance(node, ast.ClassDef)}
    checked_in = {name for name, value in vars(storage.async_protocols).items() if inspect.isclass(value)}
    assert generated <= checked_in
    assert generated == {*(twin_name(protocol) for protocol in TWINNED.values()), "AsyncStores"}
