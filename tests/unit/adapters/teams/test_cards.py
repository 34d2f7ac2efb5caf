"""Approval cards: what each pending call shows, typed edit inputs, outcomes, limits, and the schema.

Every card built here is validated against the official Adaptive Card 1.5 JSON schema.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from adapters.teams.cards import (
    MAX_CARD_BYTES,
    MAX_REFRESH_USERS,
    EditForm,
    approval_card,
    card_size,
    edited_params,
    feedback_input_id,
    form_fields,
    param_input_id,
    shared_card,
    text_card,
)
from adapters.teams.names import remember_name, with_names
from bot.engine.model import APPROVED, MODIFIED, REJECTED, ApprovalView, BreakGlassReview, ThreadRef
from bot.engine.presentation import outcome_sentence
from bot.redaction import MASK
from tests.fakes.teams_stack import (
    action_value,
    approval_ids,
    assert_valid_card,
    card_validator,
    execute_actions,
    texts_of,
)

CREATED = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
DEPLOY_SCHEMA = {
    "type": "object",
    "properties": {
        "service": {"type": "string", "description": "The service."},
        "replicas": {"type": "integer"},
        "ratio": {"type": "number"},
        "dry_run": {"type": "boolean", "default": False},
        "region": {"enum": ["eu-west-1", "us-east-1"], "type": "string"},
        "zones": {"anyOf": [{"type": "array", "items": {"type": "string"}}, {"type": "null"}]},
        "labels": {"type": "object"},
        "api_token": {"type": "string"},
    },
    "required": ["service", "replicas"],
}
DEPLOY_ARGS = {
    "service": "web",
    "replicas": 3,
    "ratio": 0.5,
    "dry_run": True,
    "region": "eu-west-1",
    "zones": ["a", "b"],
    "labels": {"team": "ops"},
    "api_token": "sk-live-123",
}


def view(approval_id: str = "ap-1", tool: str = "deploy", arguments=None, schema=None, **changes) -> ApprovalView:
    base = ApprovalView(
        approval_id=approval_id,
        run_id="run-1",
        thread=ThreadRef("teams", "tenant", "19:c@thread.tacv2", "19:c@thread.tacv2;messageid=1"),
        tool_name=tool,
        tool_description="Deploy a service.",
        arguments=dict(DEPLOY_ARGS if arguments is None else arguments),
        parameters_schema=DEPLOY_SCHEMA if schema is None else schema,
        requester="Ana Lopez",
        policy_mode="always",
        approvers=(),
        quorum=1,
        four_eyes=False,
        votes=(),
        created_at=CREATED,
        expires_at=CREATED + timedelta(hours=4),
    )
    return replace(base, **changes)


def all_elements(node) -> list[dict]:
    found = []
    if isinstance(node, list):
        for item in node:
            found += all_elements(item)
    elif isinstance(node, dict):
        found.append(node)
        for value in node.values():
            found += all_elements(value)
    return found


def inputs_by_id(card) -> dict[str, dict]:
    return {i["id"]: i for _, ins in execute_actions(card) for i in ins}


def test_a_pending_call_shows_tool_description_arguments_requester_policy_and_expiry():
    card = approval_card([view(approvers=("29:1ben",), quorum=2, four_eyes=True)])
    assert_valid_card(card)
    shown = texts_of(card)
    assert "deploy" in shown and "Deploy a service." in shown
    assert "service: " in shown and "web" in shown and "zones: " in shown and '["a", "b"]' in shown
    assert "Ana Lopez" in shown
    assert "always · approvers: 29:1ben · 2 approvals needed · four-eyes: the requester may not approve" in shown
    assert "2026-11-30 13:00 UTC" in shown


def test_secrets_are_masked_on_the_card_and_never_prefilled():
    card = approval_card([view()])
    assert "sk-live-123" not in json.dumps(card)
    assert MASK in texts_of(card)
    assert inputs_by_id(card)[param_input_id("ap-1", "api_token")]["value"] == ""


def test_edit_inputs_are_typed_by_the_schema_and_prefilled_with_the_current_values():
    inputs = inputs_by_id(approval_card([view()]))
    field = {name: inputs[param_input_id("ap-1", name)] for name in DEPLOY_SCHEMA["properties"]}
    assert field["service"] | {} == field["service"] and field["service"]["type"] == "Input.Text"
    assert (field["replicas"]["type"], field["replicas"]["value"]) == ("Input.Number", 3)
    assert (field["ratio"]["type"], field["ratio"]["value"]) == ("Input.Number", 0.5)
    assert (field["dry_run"]["type"], field["dry_run"]["value"]) == ("Input.Toggle", "true")
    assert field["region"]["type"] == "Input.ChoiceSet" and field["region"]["value"] == "eu-west-1"
    assert [c["value"] for c in field["region"]["choices"]] == ["eu-west-1", "us-east-1"]
    assert field["zones"]["isMultiline"] and json.loads(field["zones"]["value"]) == ["a", "b"]
    assert json.loads(field["labels"]["value"]) == {"team": "ops"}
    assert field["service"]["label"] == "service" and field["ratio"]["label"] == "ratio (optional)"


def test_actions_carry_only_the_approval_id_and_the_verb():
    card = approval_card([view()])
    verbs = []
    for action, _ in execute_actions(card):
        assert action["data"] == {"approval_id": "ap-1", "verb": action["verb"]}
        verbs.append(action["verb"])
    assert verbs == ["approve", "reject", "edit"]


def test_approve_all_appears_only_when_several_calls_wait():
    one = approval_card([view()])
    two = approval_card([view("ap-1"), view("ap-2", status=APPROVED, decided_by="Ben"), view("ap-3")])
    assert "actions" not in one
    assert_valid_card(two)
    assert [a["title"] for a in two["actions"]] == ["Approve all"]
    assert two["actions"][0]["data"] == {"approval_id": "ap-1", "verb": "approve_all"}
    assert approval_ids(two) == ["ap-1", "ap-3"]


@pytest.mark.parametrize(
    ("status", "feedback", "final", "sentence"),
    [
        (APPROVED, None, None, "Approved by Ben Okafor at 2026-11-30 10:00 UTC."),
        (REJECTED, "not today", None, "Rejected by Ben Okafor at 2026-11-30 10:00 UTC. Feedback: not today"),
        (
            MODIFIED,
            None,
            {**DEPLOY_ARGS, "replicas": 5},
            "Edited and approved by Ben Okafor at 2026-11-30 10:00 UTC: replicas=5.",
        ),
    ],
)
def test_a_decided_call_shows_its_outcome_and_has_no_buttons(status, feedback, final, sentence):
    decided = view(
        status=status,
        decided_by="Ben Okafor",
        decided_at=CREATED + timedelta(hours=1),
        feedback=feedback,
        final_arguments=final,
    )
    card = approval_card([decided])
    assert_valid_card(card)
    assert sentence in texts_of(card)
    assert execute_actions(card) == [] and "Approval decided" in texts_of(card)


def test_an_invalid_edit_opens_the_form_with_the_submitted_values_and_the_error_under_the_field():
    edit = EditForm("ap-1", {"replicas": "many", "service": "api"}, {"replicas": "must be a whole number"})
    notice = "The edited parameters are invalid: replicas: must be a whole number"
    card = approval_card([view()], notice=notice, edit=edit)
    assert_valid_card(card)
    section = next(b for b in card["body"] if b["type"] == "Container" and b.get("style") != "warning")
    ids = [item.get("id") for item in section["items"]]
    replicas = ids.index(param_input_id("ap-1", "replicas"))
    assert texts_of(section["items"][replicas + 1]) == ["replicas must be a whole number"]
    assert section["items"][replicas]["value"] == 3, "a number input cannot hold 'many': it keeps the old value"
    assert section["items"][ids.index(param_input_id("ap-1", "service"))]["value"] == "api"
    assert texts_of(card)[0].startswith("The edited parameters are invalid")
    every_input = [i["id"] for i in all_elements(card) if i.get("type", "").startswith("Input.")]
    assert len(every_input) == len(set(every_input)), "the open form replaces the Edit show-card: ids stay unique"


def test_long_values_are_truncated_and_the_card_stays_under_the_teams_limit():
    long = approval_card([view(arguments={**DEPLOY_ARGS, "service": "x" * 60_000})])
    assert any(t.startswith("xxx") and t.endswith("(+59500 chars)") for t in texts_of(long))
    huge = {name: "x" * 60_000 for name in ("service", "zones", "labels", "note", "extra")}
    for calls in (3, 12, 60):
        card = approval_card([view(f"ap-{n}", arguments=huge) for n in range(calls)])
        assert_valid_card(card)
        assert card_size(card) <= MAX_CARD_BYTES, calls
        assert approval_ids(card), "the first calls stay decidable"
        assert card["actions"][0]["verb"] == "approve_all"
    assert any("more call(s) do not fit on this card" in t for t in texts_of(card))


def test_values_too_long_to_edit_are_not_offered_in_the_form():
    fields = {f.name: f for f in form_fields(view(arguments={**DEPLOY_ARGS, "service": "s" * 5_000}))}
    assert fields["service"].note == "too long to edit here"
    card = approval_card([view(arguments={"service": "s" * 5_000})])
    assert param_input_id("ap-1", "service") not in inputs_by_id(card)


def test_only_changed_fields_are_sent_as_edits_as_teams_sends_every_input():
    card = approval_card([view()])
    untouched = action_value(card, "edit")["action"]["data"]
    assert edited_params(view(), untouched) == {}
    typed = {
        param_input_id("ap-1", "replicas"): "3.0",  # the same number
        param_input_id("ap-1", "zones"): '[ "a",  "b" ]',  # the same JSON
        param_input_id("ap-1", "ratio"): "0.75",
        param_input_id("ap-1", "api_token"): "sk-new",
        param_input_id("ap-1", "dry_run"): "false",
    }
    changed = action_value(card, "edit", typed=typed)["action"]["data"]
    assert edited_params(view(), changed) == {"ratio": "0.75", "api_token": "sk-new", "dry_run": "false"}


def test_the_reject_feedback_input_belongs_to_its_approval():
    card = approval_card([view("ap-1"), view("ap-2")])
    data = action_value(card, "reject", "ap-2", typed={feedback_input_id("ap-2"): "no"})["action"]["data"]
    assert data[feedback_input_id("ap-2")] == "no" and feedback_input_id("ap-1") not in data


def test_the_text_card_shows_admin_answers_literally():
    card = text_card("policy set <tool> [#channel]\n  **not bold**")
    assert_valid_card(card)
    [block] = card["body"]
    assert block["type"] == "RichTextBlock"
    assert block["inlines"][0]["text"] == "policy set <tool> [#channel]\n  **not bold**"


def test_the_schema_check_catches_a_broken_card():
    broken = approval_card([view()])
    broken["body"][0]["colour"] = "red"
    assert list(card_validator().iter_errors(broken))


def argument_lines(card) -> dict[str, list[str]]:
    """Each argument line of a card: its name → the texts of its inlines after the name."""
    lines = {}
    for block in all_elements(card):
        inlines = block.get("inlines") if block.get("type") == "RichTextBlock" else None
        if inlines and inlines[0]["text"].endswith(": ") and inlines[0].get("weight") == "bolder":
            lines[inlines[0]["text"][:-2]] = [i["text"] for i in inlines[1:]]
    return lines


def decided(status: str, **changes) -> ApprovalView:
    return view(status=status, decided_by="Ben Okafor", decided_at=CREATED + timedelta(hours=1), **changes)


def test_an_edited_call_keeps_the_arguments_it_runs_with_and_marks_each_change():
    final = {**DEPLOY_ARGS, "replicas": 5, "region": "us-east-1", "api_token": "sk-new-999", "note": "late"}
    card = approval_card([decided(MODIFIED, final_arguments=final)])

    assert_valid_card(card)
    lines = argument_lines(card)
    assert lines["replicas"] == ["5", "  (edited; was 3)"]
    assert lines["region"] == ["us-east-1", "  (edited; was eu-west-1)"]
    assert lines["api_token"] == [MASK, "  (edited)"], "a changed secret is marked, never shown"
    assert lines["note"] == ["late", "  (edited; was not set)"]
    assert lines["service"] == ["web"] and lines["zones"] == ['["a", "b"]'], "untouched values carry no mark"
    assert "sk-new-999" not in json.dumps(card) and "sk-live-123" not in json.dumps(card)
    shown = texts_of(card)
    assert shown[:2] == ["Approval decided", "deploy: edited and approved by Ben Okafor."]
    assert "Approved with these arguments (edits marked):" in shown
    assert "Requested by: " in shown and "Ana Lopez" in shown
    assert execute_actions(card) == []


def test_a_rejected_call_keeps_its_arguments_and_says_it_was_not_run():
    card = approval_card([decided(REJECTED, feedback="not on a Friday")])

    assert_valid_card(card)
    shown = texts_of(card)
    assert shown[1] == "deploy: rejected by Ben Okafor; not run."
    assert "Arguments (the call was not run):" in shown
    assert argument_lines(card)["replicas"] == ["3"]
    assert "Rejected by Ben Okafor at 2026-11-30 10:00 UTC. Feedback: not on a Friday" in shown


def test_a_decided_step_of_several_calls_sums_up_the_outcomes():
    card = approval_card(
        [decided(APPROVED), view("ap-2", status=REJECTED, decided_by="Ben"), view("ap-3", status=APPROVED)]
    )
    assert texts_of(card)[1] == "All 3 tool calls are decided: 2 approved, 1 rejected."


def test_a_huge_edited_value_is_truncated_on_the_decided_card_and_it_stays_under_the_limit():
    final = {**DEPLOY_ARGS, "service": "y" * 60_000}
    card = approval_card([decided(MODIFIED, final_arguments=final)])

    assert_valid_card(card)
    assert card_size(card) <= MAX_CARD_BYTES
    [value, mark] = argument_lines(card)["service"]
    assert value.startswith("yyy") and value.endswith("(+59500 chars)") and mark == "  (edited; was web)"
    outcome = next(t for t in texts_of(card) if t.startswith("Edited and approved"))
    assert len(outcome) < 1_000


# --- the shared card and user-specific views ------------------------------------------------------


def test_the_shared_card_shows_the_status_and_lists_the_deciders_for_their_own_view():
    waiting = [view("ap-1", deciders=("29:ana", "29:ada")), view("ap-2", deciders=("29:ana", "29:ben"))]

    card = shared_card(waiting)

    assert_valid_card(card)
    assert execute_actions(card) == []  # no button at all: the refresh is not one people see
    assert card["refresh"]["userIds"] == ["29:ada", "29:ana", "29:ben"]
    assert card["refresh"]["action"]["data"] == {"approval_id": "ap-1", "verb": "refresh"}
    assert "Approval needed" in texts_of(card)


def test_too_many_deciders_or_none_known_keep_the_buttons_on_the_shared_card():
    crowd = tuple(f"29:person-{n}" for n in range(MAX_REFRESH_USERS + 1))

    for deciders in (crowd, ()):
        card = shared_card([view("ap-1", deciders=deciders)])

        assert_valid_card(card)
        assert approval_ids(card) == ["ap-1"] and "refresh" not in card


def test_once_decided_the_shared_card_is_the_status_for_everyone_without_a_refresh():
    card = shared_card([decided(APPROVED, deciders=("29:ana",))])

    assert_valid_card(card)
    assert execute_actions(card) == [] and "refresh" not in card


def test_the_summary_follows_the_state():
    from adapters.teams.cards import card_summary

    assert card_summary([view()]) == "Approval needed"
    assert card_summary([view("ap-1"), view("ap-2")]) == "2 approvals needed"
    decided = replace(view(), status=APPROVED, decided_by="Ana Lopez")
    assert card_summary([decided]) == "deploy: approved by Ana Lopez"


def test_without_user_views_the_shared_card_carries_the_buttons_for_all():
    waiting = [replace(view(), deciders=("29:ana",))]
    assert "refresh" in shared_card(waiting) and approval_ids(shared_card(waiting)) == []
    no_views = shared_card(waiting, user_views=False)
    assert "refresh" not in no_views and approval_ids(no_views) == ["ap-1"]


def test_required_inputs_are_marked_required_with_an_error_message_and_a_cleared_one_is_cleared():
    card = approval_card([view()])
    inputs = {e["id"]: e for a, ins in execute_actions(card) for e in ins}
    service, ratio = inputs[param_input_id("ap-1", "service")], inputs[param_input_id("ap-1", "ratio")]
    assert service["isRequired"] is True and "service" in service["errorMessage"]
    assert "isRequired" not in ratio
    sent = action_value(card, "edit", "ap-1", typed={param_input_id("ap-1", "service"): ""})["action"]["data"]
    assert param_input_id("ap-1", "service") not in sent  # the renderer leaves it out
    assert edited_params(view(), sent) == {"service": None}  # CLEARED: the engine decides what that means
    assert_valid_card(card)


def test_break_glass_is_on_the_shared_card_of_a_host_without_user_views_and_in_the_requesters_own_view():
    waiting = [replace(view(), deciders=("29:ben",), breakglass_open=True)]
    verbs = {a["verb"] for a, _ in execute_actions(shared_card(waiting, user_views=False))}
    assert "breakglass" in verbs, "no user views: every button on the shared card (the engine checks the click)"
    own = approval_card(waiting, buttons=False, breakglass=True)
    assert_valid_card(own)
    assert [a["verb"] for a, _ in execute_actions(own)] == ["breakglass"]
    assert "Nobody decided in time: Ana Lopez may break glass." in texts_of(own)
    assert shared_card(waiting, refresh_for=["29:ana", "29:ben"])["refresh"]["userIds"] == ["29:ana", "29:ben"]


def test_a_break_glass_decision_is_a_red_section_with_its_review_buttons_then_its_outcome():
    broken = replace(view(), status=APPROVED, decided_by="Ana Lopez", feedback="[break-glass] prod is down")
    card = approval_card([broken])
    assert_valid_card(card)
    section = next(item for item in card["body"] if item["type"] == "Container")
    assert section["style"] == "attention"
    assert "break-glass by Ana Lopez: prod is down" in texts_of(card)
    assert {a["verb"] for a, _ in execute_actions(card)} == {"breakglass_ok", "breakglass_not_ok"}
    review = BreakGlassReview("Ben Okafor", "ok", None, CREATED)
    reviewed = approval_card([replace(broken, breakglass_review=review)])
    assert execute_actions(reviewed) == []
    assert "Review: OK by Ben Okafor at 2026-11-30 09:00 UTC." in texts_of(reviewed)


async def test_a_void_vote_names_the_person_not_their_teams_id():
    """Issue 30 on Teams: "Ben Ode's approval no longer counts", never the raw id (``adapters/teams/names.py``)."""

    class Names:
        def __init__(self) -> None:
            self.kept: dict[str, dict] = {}

        async def save_conversation(self, key: str, reference: dict) -> None:
            self.kept[key] = reference

        async def load_conversation(self, key: str) -> dict | None:
            return self.kept.get(key)

    store = Names()
    await remember_name(store, "29:ben", "Ben Ode")
    await remember_name(store, "29:ana", "Ana Lopez")
    waiting = view(requester="29:ana", approvers=("group:sre",), void_votes=("29:ben", "29:ana"), four_eyes=True)

    [shown] = await with_names(store, [waiting])

    sentence = outcome_sentence(shown)
    assert "Ben Ode's approval no longer counts: approvers are now @sre." in sentence
    assert "Ana Lopez's approval no longer counts: four-eyes is on, and they asked for this call." in sentence
    assert "29:" not in sentence
