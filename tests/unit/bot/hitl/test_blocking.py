"""BlockingConfirmationStrategy and ToolExecutionDecision: from a human's answer to what happens to a call."""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import pytest

from bot.hitl.blocking import (
    MODIFICATION_FEEDBACK_TEMPLATE,
    REJECTION_FEEDBACK_TEMPLATE,
    USER_FEEDBACK_TEMPLATE,
    BlockingConfirmationStrategy,
    ConfirmationStrategy,
)
from bot.hitl.dataclasses import ConfirmationUIResult, ToolExecutionDecision
from bot.hitl.policies import AlwaysAskPolicy, AskOncePolicy, ConfirmationPolicy, NeverAskPolicy
from bot.hitl.serialization import component_from_dict, component_to_dict
from bot.hitl.ui import ConfirmationUI, SimpleConsoleUI

TOOL = "delete_file"
DESCRIPTION = "Delete a file in the sandbox"
PARAMS = {"path": "reports/q3.csv", "force": False}


@dataclass
class ScriptedUI(ConfirmationUI):
    """A confirmation UI whose human gives the scripted answers, in order."""

    answers: list[Any]
    asked: list[tuple[str, dict]] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)

    def get_user_confirmation(self, tool_name: str, tool_description: str, tool_params: dict) -> Any:
        self.asked.append((tool_name, dict(tool_params)))
        self.threads.append(threading.get_ident())
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


class BrokenPolicy(ConfirmationPolicy):
    """A policy that fails at the named step."""

    def __init__(self, fails_in: str) -> None:
        self.fails_in = fails_in

    def should_ask(self, tool_name: str, tool_description: str, tool_params: dict) -> bool:
        if self.fails_in == "should_ask":
            raise RuntimeError("policy store unavailable")
        return True

    def update_after_confirmation(self, *args: Any) -> None:
        if self.fails_in == "update":
            raise RuntimeError("policy store unavailable")


def strategy(*answers: Any, policy: ConfirmationPolicy | None = None, **templates: str) -> BlockingConfirmationStrategy:
    return BlockingConfirmationStrategy(policy or AlwaysAskPolicy(), ScriptedUI(list(answers)), **templates)


def decide(strat: BlockingConfirmationStrategy, params: dict | None = None, **kwargs: Any) -> ToolExecutionDecision:
    return strat.run(tool_name=TOOL, tool_description=DESCRIPTION, tool_params=dict(params or PARAMS), **kwargs)


def test_default_templates_are_haystacks_verbatim() -> None:
    assert REJECTION_FEEDBACK_TEMPLATE == "Tool execution for '{tool_name}' was rejected by the user."
    assert MODIFICATION_FEEDBACK_TEMPLATE == (
        "The parameters for tool '{tool_name}' were updated by the user to:\n{final_tool_params}"
    )
    assert USER_FEEDBACK_TEMPLATE == "With user feedback: {feedback}"


# --- asking or not -------------------------------------------------------------------------------


def test_a_call_the_policy_does_not_ask_about_runs_with_its_params_and_the_ui_stays_silent() -> None:
    strat = strategy(policy=NeverAskPolicy())

    decision = decide(strat, tool_call_id="call_1")

    assert decision == ToolExecutionDecision(
        tool_name=TOOL, execute=True, tool_call_id="call_1", feedback=None, final_tool_params=PARAMS
    )
    assert strat.confirmation_ui.asked == []


def test_the_ui_is_shown_the_call_it_decides() -> None:
    strat = strategy(ConfirmationUIResult(action="confirm"))

    decide(strat)

    assert strat.confirmation_ui.asked == [(TOOL, PARAMS)]


# --- confirm -------------------------------------------------------------------------------------


def test_confirm_runs_the_call_with_its_original_params() -> None:
    decision = decide(strategy(ConfirmationUIResult(action="confirm")), tool_call_id="call_1")

    assert decision == ToolExecutionDecision(
        tool_name=TOOL, execute=True, tool_call_id="call_1", feedback=None, final_tool_params=PARAMS
    )


def test_confirm_with_feedback_passes_the_feedback_on() -> None:
    decision = decide(strategy(ConfirmationUIResult(action="confirm", feedback="go ahead, it is a copy")))

    assert decision.execute is True
    assert decision.feedback == "With user feedback: go ahead, it is a copy"


# --- reject --------------------------------------------------------------------------------------


def test_reject_does_not_run_the_call_and_says_so() -> None:
    decision = decide(strategy(ConfirmationUIResult(action="reject")), tool_call_id="call_1")

    assert decision == ToolExecutionDecision(
        tool_name=TOOL,
        execute=False,
        tool_call_id="call_1",
        feedback="Tool execution for 'delete_file' was rejected by the user.",
        final_tool_params=None,
    )


def test_reject_appends_the_users_feedback_after_a_space() -> None:
    decision = decide(strategy(ConfirmationUIResult(action="reject", feedback="we still need it")))

    assert decision.feedback == (
        "Tool execution for 'delete_file' was rejected by the user. With user feedback: we still need it"
    )


# --- modify --------------------------------------------------------------------------------------


def test_modify_merges_the_edited_params_over_the_original_ones() -> None:
    # Haystack would run the tool with {"force": True} alone, dropping "path".
    answer = ConfirmationUIResult(action="modify", new_tool_params={"force": True})

    decision = decide(strategy(answer), tool_call_id="call_1")

    assert decision.execute is True
    assert decision.tool_call_id == "call_1"
    assert decision.final_tool_params == {"path": "reports/q3.csv", "force": True}


def test_modify_explains_the_new_params_with_haystacks_template() -> None:
    answer = ConfirmationUIResult(action="modify", new_tool_params={"path": "old/q3.csv"}, feedback="wrong folder")

    decision = decide(strategy(answer))

    assert decision.feedback == (
        "The parameters for tool 'delete_file' were updated by the user to:\n"
        "{'path': 'old/q3.csv', 'force': False} With user feedback: wrong folder"
    )


def test_modify_masks_secret_values_in_its_explanation_but_runs_with_them() -> None:
    answer = ConfirmationUIResult(action="modify", new_tool_params={"api_token": "new-s3cret-value"})

    decision = decide(strategy(answer), params={"repo": "acme/api", "api_token": "old-s3cret-value"})

    assert decision.final_tool_params == {"repo": "acme/api", "api_token": "new-s3cret-value"}
    assert "s3cret" not in decision.feedback
    assert decision.feedback.endswith("{'repo': 'acme/api', 'api_token': '••••••'}")


def test_modify_may_add_a_param_the_llm_left_out() -> None:
    answer = ConfirmationUIResult(action="modify", new_tool_params={"dry_run": True})

    assert decide(strategy(answer)).final_tool_params == {**PARAMS, "dry_run": True}


@pytest.mark.parametrize(
    "edits",
    [{}, None, {"force": False}, {"path": "reports/q3.csv", "force": False}],
    ids=["empty", "none", "same-value", "all-same"],
)
def test_modify_that_changes_nothing_is_a_confirm(edits: dict | None) -> None:
    answer = ConfirmationUIResult(action="modify", new_tool_params=edits)

    decision = decide(strategy(answer), tool_call_id="call_1")

    assert decision == ToolExecutionDecision(
        tool_name=TOOL, execute=True, tool_call_id="call_1", feedback=None, final_tool_params=PARAMS
    )


def test_modify_that_changes_nothing_keeps_the_users_feedback() -> None:
    answer = ConfirmationUIResult(action="modify", new_tool_params={}, feedback="fine as it is")

    assert decide(strategy(answer)).feedback == "With user feedback: fine as it is"


def test_modify_changing_a_value_to_an_equal_one_of_another_type_is_a_change() -> None:
    answer = ConfirmationUIResult(action="modify", new_tool_params={"force": 0})

    assert decide(strategy(answer)).final_tool_params == {"path": "reports/q3.csv", "force": 0}


# --- fail closed ---------------------------------------------------------------------------------


@pytest.mark.parametrize("action", ["approve", "", "CONFIRM", "yes"])
def test_an_unknown_action_rejects_the_call(action: str) -> None:
    decision = decide(strategy(ConfirmationUIResult(action=action)), tool_call_id="call_1")

    assert decision.execute is False
    assert decision.final_tool_params is None
    assert decision.feedback == (
        f"Tool execution for 'delete_file' was rejected: the confirmation answer {action!r} was not understood."
    )


@pytest.mark.parametrize(
    "answer",
    [None, {"action": "confirm"}, ConfirmationUIResult(action="modify", new_tool_params=["force"])],
    ids=["none", "plain-dict", "modify-with-a-list"],
)
def test_an_answer_that_is_not_a_confirmation_result_rejects_the_call(answer: Any) -> None:
    decision = decide(strategy(answer))

    assert decision.execute is False
    assert "was not understood" in decision.feedback


def test_a_ui_that_raises_rejects_the_call_and_logs_why(caplog: pytest.LogCaptureFixture) -> None:
    strat = strategy(ConnectionError("terminal gone"))

    with caplog.at_level(logging.ERROR, logger="bot.hitl.blocking"):
        decision = decide(strat, tool_call_id="call_1")

    assert decision == ToolExecutionDecision(
        tool_name=TOOL,
        execute=False,
        tool_call_id="call_1",
        feedback="Tool execution for 'delete_file' was rejected: the confirmation failed (ConnectionError).",
    )
    [record] = caplog.records
    assert record.tool_name == TOOL
    assert record.error_type == "ConnectionError"


def test_the_failure_log_does_not_echo_secret_params(caplog: pytest.LogCaptureFixture) -> None:
    secret = "s3cr3t-token-value"
    strat = strategy(ValueError(f"cannot display token {secret}"))

    with caplog.at_level(logging.ERROR, logger="bot.hitl.blocking"):
        strat.run(tool_name="deploy", tool_description="Deploy", tool_params={"api_token": secret})

    assert caplog.records
    assert all(secret not in r.getMessage() and secret not in str(r.__dict__) for r in caplog.records)


@pytest.mark.parametrize("fails_in", ["should_ask", "update"])
def test_a_policy_that_raises_rejects_the_call(fails_in: str) -> None:
    strat = strategy(ConfirmationUIResult(action="confirm"), policy=BrokenPolicy(fails_in))

    decision = decide(strat)

    assert decision.execute is False
    assert decision.feedback == "Tool execution for 'delete_file' was rejected: the confirmation failed (RuntimeError)."


# --- the policy learns from the answer -----------------------------------------------------------


def test_a_confirmed_call_is_not_asked_about_again_under_ask_once() -> None:
    strat = strategy(ConfirmationUIResult(action="confirm"), policy=AskOncePolicy())

    first, second = decide(strat), decide(strat)

    assert first.execute is second.execute is True
    assert len(strat.confirmation_ui.asked) == 1


def test_an_unchanged_modify_counts_as_a_confirm_for_ask_once() -> None:
    strat = strategy(ConfirmationUIResult(action="modify", new_tool_params={}), policy=AskOncePolicy())

    decide(strat)

    assert strat.confirmation_policy.should_ask(TOOL, DESCRIPTION, PARAMS) is False


def test_a_changed_modify_and_an_unknown_action_are_not_remembered_by_ask_once() -> None:
    answers = [ConfirmationUIResult(action="modify", new_tool_params={"force": True}), ConfirmationUIResult("ok")]
    strat = strategy(*answers, policy=AskOncePolicy())

    decide(strat)
    decide(strat)

    assert strat.confirmation_policy.should_ask(TOOL, DESCRIPTION, PARAMS) is True
    assert strat.confirmation_policy.should_ask(TOOL, DESCRIPTION, {**PARAMS, "force": True}) is True


# --- templates, async, serialisation -------------------------------------------------------------


def test_custom_templates_replace_the_defaults() -> None:
    strat = strategy(
        ConfirmationUIResult(action="reject", feedback="no"),
        ConfirmationUIResult(action="modify", new_tool_params={"force": True}),
        reject_template="{tool_name}: refused.",
        modify_template="{tool_name} now runs with {final_tool_params}.",
        user_feedback_template="({feedback})",
    )

    assert decide(strat).feedback == "delete_file: refused. (no)"
    assert decide(strat).feedback == "delete_file now runs with {'path': 'reports/q3.csv', 'force': True}."


async def test_run_async_decides_like_run_and_keeps_the_blocking_ui_off_the_event_loop() -> None:
    strat = strategy(ConfirmationUIResult(action="modify", new_tool_params={"force": True}))

    decision = await strat.run_async(
        tool_name=TOOL, tool_description=DESCRIPTION, tool_params=dict(PARAMS), tool_call_id="call_9"
    )

    assert decision.final_tool_params == {"path": "reports/q3.csv", "force": True}
    assert decision.tool_call_id == "call_9"
    assert strat.confirmation_ui.threads != [threading.get_ident()]


async def test_run_async_fails_closed_too() -> None:
    strat = strategy(OSError("stdin closed"))

    decision = await strat.run_async(tool_name=TOOL, tool_description=DESCRIPTION, tool_params=dict(PARAMS))

    assert decision.execute is False


def test_the_strategy_satisfies_the_confirmation_strategy_protocol() -> None:
    assert isinstance(strategy(), ConfirmationStrategy)


def test_the_strategy_round_trips_through_json_with_its_policy_ui_and_templates() -> None:
    original = BlockingConfirmationStrategy(AskOncePolicy(), SimpleConsoleUI(), reject_template="No {tool_name}.")

    data = json.loads(json.dumps(component_to_dict(original)))
    restored = component_from_dict(data)

    assert data["type"] == "bot.hitl.blocking.BlockingConfirmationStrategy"
    assert data["init_parameters"]["confirmation_policy"]["type"] == "bot.hitl.policies.AskOncePolicy"
    assert data["init_parameters"]["confirmation_ui"]["type"] == "bot.hitl.ui.SimpleConsoleUI"
    assert isinstance(restored, BlockingConfirmationStrategy)
    assert isinstance(restored.confirmation_policy, AskOncePolicy)
    assert isinstance(restored.confirmation_ui, SimpleConsoleUI)
    assert restored.reject_template == "No {tool_name}."
    assert restored.to_dict() == original.to_dict()


# --- ToolExecutionDecision -----------------------------------------------------------------------


def test_a_decision_serialises_to_exactly_its_five_fields_and_back() -> None:
    decision = ToolExecutionDecision(
        tool_name=TOOL, execute=True, tool_call_id="call_1", feedback="ok", final_tool_params={"path": "a"}
    )

    data = decision.to_dict()

    assert data == {
        "tool_name": TOOL,
        "execute": True,
        "tool_call_id": "call_1",
        "feedback": "ok",
        "final_tool_params": {"path": "a"},
    }
    assert ToolExecutionDecision.from_dict(json.loads(json.dumps(data))) == decision


def test_a_decision_from_dict_needs_only_the_name_and_execute() -> None:
    decision = ToolExecutionDecision.from_dict({"tool_name": TOOL, "execute": False})

    assert decision.to_dict() == {
        "tool_name": TOOL,
        "execute": False,
        "tool_call_id": None,
        "feedback": None,
        "final_tool_params": None,
    }


def test_a_decision_from_dict_refuses_unknown_fields() -> None:
    with pytest.raises(ValueError, match="approved_by"):
        ToolExecutionDecision.from_dict({"tool_name": TOOL, "execute": True, "approved_by": "ana"})


@pytest.mark.parametrize("execute", ["false", 0, None])
def test_a_decision_refuses_an_execute_flag_that_is_not_a_bool(execute: Any) -> None:
    with pytest.raises(TypeError, match="execute must be a bool"):
        ToolExecutionDecision(tool_name=TOOL, execute=execute)


def test_a_decisions_dict_is_a_copy_that_cannot_change_the_decision() -> None:
    decision = ToolExecutionDecision(tool_name=TOOL, execute=True, final_tool_params={"tags": ["a"]})

    decision.to_dict()["final_tool_params"]["tags"].append("b")

    assert decision.final_tool_params == {"tags": ["a"]}


def test_a_confirmation_result_round_trips_through_a_dict() -> None:
    result = ConfirmationUIResult(action="modify", feedback="smaller", new_tool_params={"replicas": 2})

    assert result.to_dict() == {"action": "modify", "feedback": "smaller", "new_tool_params": {"replicas": 2}}
    assert ConfirmationUIResult.from_dict(result.to_dict()) == result
