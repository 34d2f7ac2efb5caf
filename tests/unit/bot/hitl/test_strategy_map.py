"""Which confirmation strategy applies to which tool, and how the mapping is stored."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bot.hitl.blocking import BlockingConfirmationStrategy
from bot.hitl.dataclasses import ToolExecutionDecision
from bot.hitl.policies import AlwaysAskPolicy, AskOncePolicy, NeverAskPolicy
from bot.hitl.serialization import (
    class_path,
    component_from_dict,
    component_to_dict,
    default_from_dict,
    import_class,
)
from bot.hitl.strategy_map import (
    resolve_strategy,
    strategies_from_dict,
    strategies_to_dict,
    validate_strategy_keys,
)
from bot.hitl.ui import SimpleConsoleUI

TOOLS = ["delete_file", "read_file", "list_files", "restart_service"]


class NamedStrategy:
    """A strategy that lets everything run and remembers its name, so tests can tell strategies apart."""

    def __init__(self, name: str) -> None:
        self.name = name

    def run(self, *, tool_name: str, tool_params: dict, tool_call_id: str | None = None, **_: Any) -> Any:
        return ToolExecutionDecision(tool_name=tool_name, execute=True, tool_call_id=tool_call_id)

    async def run_async(self, **kwargs: Any) -> Any:
        return self.run(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {"type": class_path(type(self)), "init_parameters": {"name": self.name}}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NamedStrategy:
        return default_from_dict(cls, data)

    class Nested:
        """A class reachable only through another class."""

        @classmethod
        def from_dict(cls, data: dict[str, Any]) -> str:
            return f"nested:{data['init_parameters']['x']}"


class _Pairs:
    """A mapping-like object over (key, value) pairs: it can hold a list key, which a dict cannot."""

    def __init__(self, pairs: list[tuple[Any, Any]]) -> None:
        self._pairs = pairs

    def items(self) -> list[tuple[Any, Any]]:
        return self._pairs


EXACT, GROUP, ANY = NamedStrategy("exact"), NamedStrategy("group"), NamedStrategy("any")


# --- resolve_strategy ----------------------------------------------------------------------------


def test_an_exact_name_wins_over_a_tuple_and_the_wildcard() -> None:
    strategies = {"*": ANY, ("delete_file", "read_file"): GROUP, "delete_file": EXACT}

    assert resolve_strategy(strategies, "delete_file") is EXACT


def test_a_tuple_naming_the_tool_wins_over_the_wildcard() -> None:
    strategies = {"*": ANY, ("delete_file", "read_file"): GROUP, "delete_file": EXACT}

    assert resolve_strategy(strategies, "read_file") is GROUP


def test_the_wildcard_applies_to_tools_no_key_names() -> None:
    strategies = {"*": ANY, ("delete_file", "read_file"): GROUP}

    assert resolve_strategy(strategies, "restart_service") is ANY


@pytest.mark.parametrize("strategies", [None, {}, {"delete_file": EXACT}])
def test_no_strategy_applies_when_nothing_names_the_tool(strategies: dict | None) -> None:
    assert resolve_strategy(strategies, "read_file") is None


# --- validate_strategy_keys ----------------------------------------------------------------------


def test_a_mapping_of_known_tools_with_an_exact_key_overriding_a_tuple_is_valid() -> None:
    validate_strategy_keys({"delete_file": EXACT, ("delete_file", "read_file"): GROUP, "*": ANY}, TOOLS)


def test_a_key_naming_an_unknown_tool_is_refused_with_the_available_tools() -> None:
    with pytest.raises(ValueError, match=r"unknown tool 'drop_table'.*Available tools: delete_file, list_files"):
        validate_strategy_keys({"drop_table": EXACT}, TOOLS)


def test_a_tuple_naming_an_unknown_tool_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown tool 'drop_table'"):
        validate_strategy_keys({("read_file", "drop_table"): GROUP}, TOOLS)


def test_a_tool_named_by_two_tuples_is_refused() -> None:
    strategies = {("read_file", "list_files"): GROUP, ("delete_file", "read_file"): EXACT}

    with pytest.raises(ValueError, match="Tool 'read_file' is named by two confirmation strategy keys"):
        validate_strategy_keys(strategies, TOOLS)


@pytest.mark.parametrize(
    ("key", "message"),
    [(("read_file", "*"), "'\\*' must be a key of its own"), ((), "empty tuple")],
    ids=["wildcard-in-tuple", "empty-tuple"],
)
def test_malformed_tuple_keys_are_refused(key: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        validate_strategy_keys({key: GROUP}, TOOLS)


@pytest.mark.parametrize("key", [["read_file"], 42, ("read_file", 7)], ids=["list", "int", "tuple-with-int"])
def test_keys_that_are_not_names_or_tuples_of_names_are_a_type_error(key: Any) -> None:
    with pytest.raises(TypeError, match="must be a tool name or a tuple"):
        validate_strategy_keys(_Pairs([(key, GROUP)]), TOOLS)


def test_a_value_that_is_not_a_strategy_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="not a strategy"):
        validate_strategy_keys({"delete_file": AlwaysAskPolicy()}, TOOLS)


# --- serialisation -------------------------------------------------------------------------------


def blocking(policy: Any, template: str) -> BlockingConfirmationStrategy:
    return BlockingConfirmationStrategy(policy, SimpleConsoleUI(), reject_template=template)


def test_the_mapping_round_trips_through_json_keeping_tuple_keys() -> None:
    strategies = {
        "delete_file": blocking(AlwaysAskPolicy(), "no delete"),
        ("read_file", "list_files"): blocking(NeverAskPolicy(), "no read"),
        "*": blocking(AskOncePolicy(), "no other"),
    }

    data = json.loads(json.dumps(strategies_to_dict(strategies)))
    restored = strategies_from_dict(data)

    assert list(restored) == ["delete_file", ("read_file", "list_files"), "*"]
    assert isinstance(restored["delete_file"].confirmation_policy, AlwaysAskPolicy)
    assert isinstance(restored[("read_file", "list_files")].confirmation_policy, NeverAskPolicy)
    assert isinstance(restored["*"].confirmation_policy, AskOncePolicy)
    assert [s.reject_template for s in restored.values()] == ["no delete", "no read", "no other"]
    assert resolve_strategy(restored, "list_files") is restored[("read_file", "list_files")]


def test_the_stored_form_lists_keys_and_strategies() -> None:
    assert strategies_to_dict({("read_file", "list_files"): EXACT, "*": ANY}) == [
        {
            "key": ["read_file", "list_files"],
            "strategy": {
                "type": "tests.unit.bot.hitl.test_strategy_map.NamedStrategy",
                "init_parameters": {"name": "exact"},
            },
        },
        {
            "key": "*",
            "strategy": {
                "type": "tests.unit.bot.hitl.test_strategy_map.NamedStrategy",
                "init_parameters": {"name": "any"},
            },
        },
    ]


def test_any_class_with_to_dict_and_from_dict_round_trips() -> None:
    [(key, restored)] = strategies_from_dict(strategies_to_dict({"delete_file": EXACT})).items()

    assert key == "delete_file"
    assert isinstance(restored, NamedStrategy)
    assert restored.name == "exact"


def test_no_mapping_serialises_to_none_and_back() -> None:
    assert strategies_to_dict(None) is None
    assert strategies_from_dict(None) is None


def test_component_to_dict_uses_the_objects_real_class_path() -> None:
    class Renamed(NamedStrategy):
        def to_dict(self) -> dict[str, Any]:
            return {"type": "somewhere.else.Strategy", "init_parameters": {"name": self.name}}

    data = component_to_dict(Renamed("x"))

    assert data["type"].endswith("Renamed")
    assert data["init_parameters"] == {"name": "x"}


def test_component_to_dict_refuses_an_object_without_to_dict() -> None:
    with pytest.raises(TypeError, match="no to_dict"):
        component_to_dict(object())


def test_import_class_reaches_nested_classes() -> None:
    assert import_class("tests.unit.bot.hitl.test_strategy_map.NamedStrategy.Nested") is NamedStrategy.Nested
    assert (
        component_from_dict(
            {"type": "tests.unit.bot.hitl.test_strategy_map.NamedStrategy.Nested", "init_parameters": {"x": 1}}
        )
        == "nested:1"
    )


@pytest.mark.parametrize(
    ("data", "error"),
    [
        ({"init_parameters": {}}, ValueError),
        ({"type": "no_such_module_xyz.Strategy"}, ImportError),
        ({"type": "bot.hitl.policies.NoSuchPolicy"}, ImportError),
        ({"type": "bot.hitl.blocking.REJECTION_FEEDBACK_TEMPLATE"}, TypeError),
        ({"type": "builtins.object"}, TypeError),
    ],
    ids=["no-type", "no-module", "no-class", "not-a-class", "no-from-dict"],
)
def test_component_from_dict_refuses_what_it_cannot_build(data: dict, error: type[Exception]) -> None:
    with pytest.raises(error):
        component_from_dict(data)
