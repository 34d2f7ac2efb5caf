"""Applying decisions to a step's transcript, binding them to calls, and closing dangling calls."""

from __future__ import annotations

import json

import pytest

from bot.hitl import (
    MODIFICATION_FEEDBACK_TEMPLATE,
    REJECTION_FEEDBACK_TEMPLATE,
    ToolExecutionDecision,
    apply_decisions,
    close_dangling_tool_calls,
    closing_results,
    dangling_tool_calls,
)
from bot.hitl.apply import bind_decisions
from bot.messages import ChatMessage, ChatRole, ToolCall
from bot.redaction import MASK
from bot.tools import tool
from tests.fakes.agent_kit import ToolBox, approve, call, reject

BOX = ToolBox()
TOOLS = {name: BOX.make(name) for name in ("delete", "restart", "lookup")}


def step(*calls: ToolCall, text: str | None = None) -> ChatMessage:
    return ChatMessage.from_assistant(text=text, tool_calls=list(calls), meta={"usage": {"total_tokens": 9}})


def decide(name: str, execute: bool = True, **kwargs: object) -> ToolExecutionDecision:
    return ToolExecutionDecision(tool_name=name, execute=execute, **kwargs)


# --- binding -----------------------------------------------------------------------------------------


def test_decisions_bind_to_calls_by_tool_call_id_whatever_their_order() -> None:
    calls = [call("delete", "a", target="1"), call("delete", "b", target="2")]
    second, first = approve(calls[1]), reject(calls[0])

    assert bind_decisions(calls, [second, first]) == {0: first, 1: second}


def test_a_call_without_a_decision_is_a_value_error_naming_it() -> None:
    calls = [call("delete", "a", target="1"), call("restart", "b", target="2")]

    with pytest.raises(ValueError, match=r"No decision for tool call\(s\): b"):
        bind_decisions(calls, [approve(calls[0])])


def test_a_decision_for_an_unknown_call_id_is_a_value_error() -> None:
    calls = [call("delete", "a", target="1")]

    with pytest.raises(ValueError, match="'zzz'"):
        bind_decisions(calls, [approve(calls[0]), decide("delete", tool_call_id="zzz")])


def test_two_decisions_for_one_call_are_a_value_error() -> None:
    calls = [call("delete", "a", target="1")]

    with pytest.raises(ValueError, match="More than one decision for tool call a"):
        bind_decisions(calls, [approve(calls[0]), reject(calls[0])])


def test_a_decision_naming_another_tool_than_its_call_is_a_value_error() -> None:
    calls = [call("delete", "a", target="1")]

    with pytest.raises(ValueError, match="restart"):
        bind_decisions(calls, [decide("restart", tool_call_id="a")])


def test_an_id_less_decision_matches_only_an_id_less_call_of_that_name() -> None:
    calls = [call("delete", "a", target="1"), call("delete", None, target="2"), call("restart", None, target="3")]
    id_less_delete = decide("delete")

    bound = bind_decisions(calls, [approve(calls[0]), id_less_delete, decide("restart", execute=False)])

    assert bound[1] is id_less_delete


def test_an_id_less_decision_never_takes_a_call_that_has_an_id() -> None:
    calls = [call("delete", "a", target="1")]

    with pytest.raises(ValueError, match="matches no undecided tool call"):
        bind_decisions(calls, [decide("delete")])


def test_id_less_decisions_take_id_less_calls_of_their_tool_one_each_in_order() -> None:
    calls = [call("delete", None, target="1"), call("delete", None, target="2")]
    first, second = decide("delete", feedback="one"), decide("delete", execute=False, feedback="two")

    assert bind_decisions(calls, [first, second]) == {0: first, 1: second}
    with pytest.raises(ValueError, match="matches no undecided tool call"):
        bind_decisions(calls, [first, second, decide("delete")])


# --- applying ----------------------------------------------------------------------------------------


def test_approving_every_call_unchanged_keeps_the_assistant_message_as_it_is() -> None:
    message = step(call("delete", "a", target="1"), call("lookup", "b", target="2"))

    applied = apply_decisions(message, [approve(c) for c in message.tool_calls], TOOLS)

    assert applied.messages == [message]
    assert applied.to_execute == message.tool_calls
    assert applied.rejected == []


def test_a_rejected_call_is_split_into_its_own_assistant_message_and_an_error_result() -> None:
    delete, lookup = call("delete", "a", target="1"), call("lookup", "b", target="2")
    message = step(delete, lookup, text="Working on it.")

    applied = apply_decisions(message, [reject(delete, "not that one"), approve(lookup)], TOOLS)

    split, result, survivors = applied.messages
    assert (split.role, split.tool_calls, split.text) == (ChatRole.ASSISTANT, [delete], None)
    assert split.meta["split_from"] == message.id and "usage" not in split.meta
    assert result.tool_call_result.origin == delete
    assert (result.tool_call_result.result, result.tool_call_result.error) == ("not that one", True)
    assert (survivors.tool_calls, survivors.text) == ([lookup], "Working on it.")
    assert survivors.id != message.id
    assert applied.to_execute == [lookup]
    assert applied.rejected == [delete]


def test_a_rejection_without_feedback_gets_the_default_text() -> None:
    delete = call("delete", "a", target="1")

    applied = apply_decisions(step(delete), [reject(delete)], TOOLS)

    assert applied.messages[1].tool_call_result.result == REJECTION_FEEDBACK_TEMPLATE.format(tool_name="delete")
    assert applied.to_execute == []
    assert len(applied.messages) == 2  # no empty assistant message when nothing survives


def test_a_modified_call_gets_a_user_note_and_survives_with_exactly_the_final_params() -> None:
    delete = call("delete", "a", target="1", count=1)

    applied = apply_decisions(step(delete), [approve(delete, target="2")], TOOLS)

    note, survivors = applied.messages
    assert note.role == ChatRole.USER
    assert note.text == MODIFICATION_FEEDBACK_TEMPLATE.format(
        tool_name="delete", final_tool_params=json.dumps({"target": "2"})
    )
    assert applied.to_execute == [ToolCall("delete", {"target": "2"}, id="a")]
    assert survivors.tool_calls == applied.to_execute


def test_a_modification_with_feedback_uses_the_feedback_as_the_note() -> None:
    delete = call("delete", "a", target="1")
    decision = ToolExecutionDecision(
        "delete", True, tool_call_id="a", feedback="Use 2.", final_tool_params={"target": "2"}
    )

    applied = apply_decisions(step(delete), [decision], TOOLS)

    assert applied.messages[0].text == "Use 2."


def test_a_modification_that_changes_nothing_is_a_confirmation() -> None:
    message = step(call("delete", "a", target="1", count=1))

    applied = apply_decisions(message, [approve(message.tool_calls[0], count=1, target="1")], TOOLS)

    assert applied.messages == [message]
    assert applied.messages[0].id == message.id


def test_an_edit_that_only_changes_a_value_s_type_is_a_modification_not_a_confirmation() -> None:
    # 1 == True in Python; a human fixing the model's 1 into true must still be heard.
    @tool
    def set_maintenance(enabled: bool) -> str:
        """Switch maintenance mode.

        :param enabled: On or off.
        """
        return "ok"

    original = call("set_maintenance", "a", enabled=1)

    applied = apply_decisions(step(original), [approve(original, enabled=True)], {"set_maintenance": set_maintenance})

    assert applied.to_execute == [ToolCall("set_maintenance", {"enabled": True}, id="a")]
    assert applied.to_execute[0].arguments["enabled"] is True
    note, survivors = applied.messages
    assert note.role == ChatRole.USER
    assert survivors.tool_calls[0].arguments["enabled"] is True  # the transcript shows what runs


def test_an_edit_that_breaks_the_schema_is_refused_and_never_executed() -> None:
    delete = call("delete", "a", target="1")

    applied = apply_decisions(step(delete), [approve(delete, target="1", count="lots")], TOOLS)

    assert applied.to_execute == []
    assert applied.rejected == [delete]
    split, result = applied.messages
    assert split.tool_calls == [delete]
    assert result.tool_call_result.error is True
    assert result.tool_call_result.result.startswith("The edited parameters were refused")
    assert "count" in result.tool_call_result.result


def test_a_refused_edit_never_echoes_a_secret_value() -> None:
    @tool
    def rotate(service: str, api_key: int) -> str:
        """Rotate a key.

        :param service: Which service.
        :param api_key: The new numeric key.
        """
        return "rotated"

    original = call("rotate", "a", service="db", api_key=1234)

    applied = apply_decisions(
        step(original), [approve(original, service="db", api_key="sk-live-abcdef")], {"rotate": rotate}
    )

    text = applied.messages[1].tool_call_result.result
    assert "sk-live-abcdef" not in text
    assert MASK in text


def test_all_surviving_calls_sit_in_one_assistant_message_last_in_call_order() -> None:
    calls = [call("delete", f"c{i}", target=str(i)) for i in range(5)]
    decisions = [
        approve(calls[0]),
        reject(calls[1]),
        approve(calls[2], target="x"),
        reject(calls[3]),
        approve(calls[4]),
    ]

    applied = apply_decisions(step(*calls), decisions, TOOLS)

    roles = [m.role for m in applied.messages]
    assert roles == [
        ChatRole.ASSISTANT, ChatRole.TOOL,  # c1 rejected
        ChatRole.USER,                      # c2 modified
        ChatRole.ASSISTANT, ChatRole.TOOL,  # c3 rejected
        ChatRole.ASSISTANT,                 # survivors
    ]  # fmt: skip
    assert [c.id for c in applied.messages[-1].tool_calls] == ["c0", "c2", "c4"]
    assert [c.id for c in applied.to_execute] == ["c0", "c2", "c4"]
    assert [c.id for c in applied.rejected] == ["c1", "c3"]


# --- dangling tool calls -----------------------------------------------------------------------------


def test_dangling_tool_calls_lists_every_unanswered_call_of_parallel_calls() -> None:
    a, b, c = call("delete", "a", target="1"), call("lookup", "b", target="2"), call("restart", "c", target="3")
    messages = [
        ChatMessage.from_user("do it"),
        step(a, b, c),
        ChatMessage.from_tool("ok", origin=b),
    ]

    assert dangling_tool_calls(messages) == [a, c]


def test_a_fully_answered_history_has_no_dangling_calls_and_is_returned_unchanged() -> None:
    a = call("delete", "a", target="1")
    messages = [
        ChatMessage.from_user("x"),
        step(a),
        ChatMessage.from_tool("ok", origin=a),
        ChatMessage.from_assistant("done"),
    ]

    assert dangling_tool_calls(messages) == []
    assert close_dangling_tool_calls(messages, "expired") == messages


def test_close_dangling_tool_calls_puts_each_closing_result_right_after_its_calls_results() -> None:
    a, b, c = call("delete", "a", target="1"), call("lookup", "b", target="2"), call("restart", "c", target="3")
    d = call("lookup", "d", target="4")
    messages = [
        ChatMessage.from_user("do it"),
        step(a, b, c),
        ChatMessage.from_tool("found", origin=b),
        ChatMessage.from_user("and also"),
        step(d),
    ]

    closed = close_dangling_tool_calls(messages, "superseded by a newer request")

    shape = [(m.role, m.tool_call_result and m.tool_call_result.origin.id) for m in closed]
    assert shape == [
        (ChatRole.USER, None),
        (ChatRole.ASSISTANT, None),
        (ChatRole.TOOL, "b"),
        (ChatRole.TOOL, "a"),
        (ChatRole.TOOL, "c"),
        (ChatRole.USER, None),
        (ChatRole.ASSISTANT, None),
        (ChatRole.TOOL, "d"),
    ]
    added = [m for m in closed if m not in messages]
    assert all(m.tool_call_result.error and m.tool_call_result.result == "superseded by a newer request" for m in added)
    assert dangling_tool_calls(closed) == []
    assert len(messages) == 5  # the input is not modified


def test_closing_results_are_only_the_missing_results_in_call_order() -> None:
    a, b, c = call("delete", "a", target="1"), call("lookup", "b", target="2"), call("restart", "c", target="3")
    messages = [step(a, b, c), ChatMessage.from_tool("ok", origin=a)]

    results = closing_results(messages, "expired")

    assert [(m.tool_call_result.origin.id, m.tool_call_result.result, m.tool_call_result.error) for m in results] == [
        ("b", "expired", True),
        ("c", "expired", True),
    ]
    assert dangling_tool_calls(messages + results) == []


def test_id_less_calls_are_answered_by_id_less_results_of_the_same_tool_one_each() -> None:
    first, second = call("lookup", None, target="1"), call("lookup", None, target="2")
    other = call("delete", None, target="3")
    messages = [step(first, second, other), ChatMessage.from_tool("ok", origin=call("lookup", None, target="1"))]

    assert dangling_tool_calls(messages) == [second, other]
    closed = close_dangling_tool_calls(messages, "bot restarted")
    assert dangling_tool_calls(closed) == []
    assert len(closed) == 4


def test_a_result_with_an_id_does_not_answer_an_id_less_call() -> None:
    id_less = call("lookup", None, target="1")
    messages = [step(id_less), ChatMessage.from_tool("ok", origin=call("lookup", "x", target="1"))]

    assert dangling_tool_calls(messages) == [id_less]


def test_a_result_for_a_call_of_an_earlier_message_is_not_credited_twice() -> None:
    # The same id twice (some servers reuse ids per turn): each result answers one call, latest first.
    first = call("lookup", "call_0", target="1")
    again = call("lookup", "call_0", target="2")
    messages = [step(first), ChatMessage.from_tool("ok", origin=first), step(again)]

    assert dangling_tool_calls(messages) == [again]
