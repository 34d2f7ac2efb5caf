"""Confirmation policies: whether a human is asked about a tool call."""

from __future__ import annotations

import pytest

from bot.hitl.dataclasses import ConfirmationUIResult
from bot.hitl.policies import AlwaysAskPolicy, AskOncePolicy, ConfirmationPolicy, NeverAskPolicy
from bot.hitl.serialization import component_from_dict, component_to_dict

CONFIRM = ConfirmationUIResult(action="confirm")
DESCRIPTION = "Delete a file in the sandbox"


def confirm(policy: ConfirmationPolicy, tool_name: str, params: dict) -> None:
    policy.update_after_confirmation(tool_name, DESCRIPTION, params, CONFIRM)


def test_always_ask_asks_about_every_call_even_after_a_confirmation() -> None:
    policy = AlwaysAskPolicy()
    confirm(policy, "delete_file", {"path": "a.txt"})

    assert policy.should_ask("delete_file", DESCRIPTION, {"path": "a.txt"}) is True


def test_never_ask_lets_every_call_through() -> None:
    assert NeverAskPolicy().should_ask("delete_file", DESCRIPTION, {"path": "a.txt"}) is False


def test_ask_once_asks_about_a_call_it_has_not_seen_confirmed() -> None:
    assert AskOncePolicy().should_ask("delete_file", DESCRIPTION, {"path": "a.txt"}) is True


def test_ask_once_does_not_ask_again_about_a_confirmed_call() -> None:
    policy = AskOncePolicy()
    confirm(policy, "delete_file", {"path": "a.txt"})

    assert policy.should_ask("delete_file", DESCRIPTION, {"path": "a.txt"}) is False


def test_ask_once_remembers_every_confirmed_pair_not_only_the_last_per_tool() -> None:
    # Haystack keeps one entry per tool, so confirming b.txt would make it ask about a.txt again.
    policy = AskOncePolicy()
    confirm(policy, "delete_file", {"path": "a.txt"})
    confirm(policy, "delete_file", {"path": "b.txt"})
    confirm(policy, "restart_service", {"service": "nginx"})

    assert policy.should_ask("delete_file", DESCRIPTION, {"path": "a.txt"}) is False
    assert policy.should_ask("delete_file", DESCRIPTION, {"path": "b.txt"}) is False
    assert policy.should_ask("restart_service", DESCRIPTION, {"service": "nginx"}) is False


def test_ask_once_compares_params_canonically_so_key_order_does_not_matter() -> None:
    policy = AskOncePolicy()
    confirm(policy, "copy_file", {"src": "a.txt", "dst": "b.txt", "opts": {"x": 1, "y": 2}})

    reordered = {"opts": {"y": 2, "x": 1}, "dst": "b.txt", "src": "a.txt"}
    assert policy.should_ask("copy_file", DESCRIPTION, reordered) is False


def test_ask_once_asks_again_when_any_param_differs() -> None:
    policy = AskOncePolicy()
    confirm(policy, "copy_file", {"src": "a.txt", "dst": "b.txt"})

    assert policy.should_ask("copy_file", DESCRIPTION, {"src": "a.txt", "dst": "c.txt"}) is True
    assert policy.should_ask("copy_file", DESCRIPTION, {"src": "a.txt"}) is True


def test_ask_once_keys_its_memory_by_tool_name_too() -> None:
    policy = AskOncePolicy()
    confirm(policy, "read_file", {"path": "a.txt"})

    assert policy.should_ask("delete_file", DESCRIPTION, {"path": "a.txt"}) is True


@pytest.mark.parametrize(
    "answer",
    [
        ConfirmationUIResult(action="reject", feedback="no"),
        ConfirmationUIResult(action="modify", new_tool_params={"path": "b.txt"}),
        ConfirmationUIResult(action="approve"),
    ],
    ids=["reject", "modify", "unknown-action"],
)
def test_ask_once_remembers_nothing_after_an_answer_that_is_not_a_confirm(answer: ConfirmationUIResult) -> None:
    policy = AskOncePolicy()
    policy.update_after_confirmation("delete_file", DESCRIPTION, {"path": "a.txt"}, answer)

    assert policy.should_ask("delete_file", DESCRIPTION, {"path": "a.txt"}) is True
    assert policy.should_ask("delete_file", DESCRIPTION, {"path": "b.txt"}) is True


@pytest.mark.parametrize("policy_class", [AlwaysAskPolicy, NeverAskPolicy, AskOncePolicy])
def test_policies_serialise_to_type_and_init_parameters_and_back(policy_class: type) -> None:
    data = component_to_dict(policy_class())

    assert data == {"type": f"bot.hitl.policies.{policy_class.__name__}", "init_parameters": {}}
    assert policy_class().to_dict() == data
    assert type(component_from_dict(data)) is policy_class


def test_a_restored_ask_once_policy_starts_with_an_empty_memory_so_it_asks_again() -> None:
    policy = AskOncePolicy()
    confirm(policy, "delete_file", {"path": "a.txt"})

    restored = AskOncePolicy.from_dict(policy.to_dict())

    assert restored.should_ask("delete_file", DESCRIPTION, {"path": "a.txt"}) is True


def test_a_policy_refuses_data_serialised_from_another_class() -> None:
    with pytest.raises(ValueError, match="NeverAskPolicy"):
        AlwaysAskPolicy.from_dict(NeverAskPolicy().to_dict())
