"""Adaptive Cards (schema 1.5) for approvals: one card per paused step, rebuilt from ``ApprovalView``s.

Every pending call shows its tool, description, arguments (secrets masked, long values truncated by
:func:`bot.engine.presentation.display_arguments`), who asked, the policy and the expiry, with
``Action.Execute`` buttons **Approve**, **Reject** (optional feedback) and **Edit** (one input per
parameter, typed by the parameter's JSON schema), plus **Approve all** when several calls wait.
Decided calls keep their details and lose their buttons: the tool, the arguments it runs with (for an
edit the edited values, each change marked with what it was), who asked, who decided and the outcome.

Untrusted text (arguments, feedback, names, ids, the engine's sentences) only goes into ``TextRun``
inlines of ``RichTextBlock``s and into input values: Adaptive Cards never read Markdown there, and the
card carries no mention entities, so such text can neither mention anyone nor forge a link.

An action's ``data`` carries only the approval id and the verb; Teams merges the inputs into it.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from bot.engine.model import APPROVED, CANCELLED, EXPIRED, MODIFIED, REJECTED, SUPERSEDED, ApprovalView
from bot.engine.params import CLEARED
from bot.engine.presentation import (
    DisplayArgument,
    breakglass_reason,
    breakglass_review_due,
    breakglass_review_sentence,
    display_arguments,
    display_result,
    format_time,
    is_breakglass_view,
    outcome_sentence,
    truncate,
)
from bot.engine.previewing import SHOW_MORE_LIMIT, is_cut, preview_sections
from bot.engine.provenance import provenance_lines
from bot.engine.roles import group_label
from bot.hitl.respond import MAX_RESPONSE_CHARS
from bot.hitl.respond import RESPOND as RESPOND_LABEL
from bot.redaction import MASK, is_secret_key, mask_for_display, mask_text

CARD_VERSION = "1.5"
CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
CARD_CONTENT_TYPE = "application/vnd.microsoft.card.adaptive"
SHOW_MORE_LABEL = "Show the whole preview"
"""Issue 30: the ``Action.ShowCard`` of a preview the card cut."""
MAX_CARD_BYTES = 27_000
"""Teams refuses cards above about 28 KB; stay under it with some room for the activity envelope."""

VERB_APPROVE = "approve"
VERB_REJECT = "reject"
VERB_EDIT = "edit"
VERB_APPROVE_ALL = "approve_all"
VERB_APPROVE_ALWAYS = "approve_always"
VERB_REFRESH = "refresh"
VERB_RESPOND = "respond"
"""Issue 30: "Respond": the card input's text is the model's answer instead of running the tool."""
"""Teams asks for one person's view of a card (``refresh.userIds``): deciders get buttons, others the status."""
VERB_BREAKGLASS = "breakglass"
"""Issue 31: "Break glass" (the requester, after the delay): the card input's text is the required reason."""
VERB_REVIEW_OK = "breakglass_ok"
VERB_REVIEW_NOT_OK = "breakglass_not_ok"
"""Issue 31: the review of a break-glass from its card; Not OK sends the required note typed into the card."""
REVIEW_VERBS = (VERB_REVIEW_OK, VERB_REVIEW_NOT_OK)
VERBS = (
    VERB_APPROVE,
    VERB_REJECT,
    VERB_EDIT,
    VERB_APPROVE_ALL,
    VERB_APPROVE_ALWAYS,
    VERB_REFRESH,
    VERB_RESPOND,
    VERB_BREAKGLASS,
    *REVIEW_VERBS,
)
MAX_REFRESH_USERS = 60
"""Teams refreshes a card automatically for at most this many listed users."""
VERB_STOP = "stop"
"""The Stop button of a streaming answer's card; its data carries the run id instead of an approval id."""

EDIT_VALUE_LIMIT = 1_000
"""Longer values are not offered for editing on the card (a truncated value must never be sent back)."""

_VALUE_LIMITS = (500, 200, 80, 30)
_STATUS_COLORS = {APPROVED: "good", MODIFIED: "good", REJECTED: "attention", EXPIRED: "warning"}
_RAN = (APPROVED, MODIFIED)
_STATUS_WORDS = {
    APPROVED: "approved",
    MODIFIED: "edited and approved",
    REJECTED: "rejected",
    EXPIRED: "expired",
    SUPERSEDED: "superseded",
    CANCELLED: "cancelled",
}
FEEDBACK_LIMIT = 1_000
"""The longest Reject feedback the card's input accepts (its ``maxLength``)."""
RESULT_INPUT_LIMIT = 2_000
"""The longest result a review card shows and its Edit result input accepts."""


@dataclass(frozen=True)
class EditForm:
    """An edit that came back invalid: shown open on the card, with the submitted values and the errors."""

    approval_id: str
    values: Mapping[str, str] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FormField:
    """One editable parameter: its input kind and the text the form starts with."""

    name: str
    kind: str
    prefill: str
    required: bool
    choices: tuple[str, ...] = ()
    note: str | None = None


def respond_input_id(approval_id: str) -> str:
    """The id of the Respond input of one approval (issue 30)."""
    return f"{approval_id}.respond"


def feedback_input_id(approval_id: str) -> str:
    """The id of the Reject feedback input of one approval."""
    return f"{approval_id}.feedback"


def reason_input_id(approval_id: str) -> str:
    """Issue 31: the id of the reason input asked for when approving a call whose tool needs one."""
    return f"{approval_id}.reason"


def breakglass_input_id(approval_id: str) -> str:
    """Issue 31: the id of the Break glass reason input of one approval."""
    return f"{approval_id}.breakglass"


def review_note_input_id(approval_id: str) -> str:
    """Issue 31: the id of the Review: Not OK note input of one break-glass decision."""
    return f"{approval_id}.review_note"


def reason_card(view: ApprovalView, notice: str) -> dict[str, Any]:
    """Issue 31: the clicker's card asking the reason for approving ``view`` (``justification <tool> required``);
    its Approve sends the reason with the same ``approve`` verb."""
    body: list[dict[str, Any]] = [
        _runs(_run(notice, weight="bolder", color="attention")),
        _runs(_run(view.tool_name, weight="bolder", fontType="monospace")),
        {
            "type": "Input.Text",
            "id": reason_input_id(view.approval_id),
            "label": "Why approve it? (required)",
            "isRequired": True,
            "errorMessage": "A reason is required.",
            "isMultiline": True,
            "maxLength": FEEDBACK_LIMIT,
        },
    ]
    return {
        "type": "AdaptiveCard",
        "$schema": CARD_SCHEMA,
        "version": CARD_VERSION,
        "body": body,
        "actions": [_execute("Approve", view.approval_id, VERB_APPROVE, style="positive")],
    }


def result_input_id(approval_id: str) -> str:
    """The id of the Edit result input of one review."""
    return f"{approval_id}.result"


def shown_result(view: ApprovalView) -> str:
    """A review's result as the card shows it and pre-fills Edit result (masked, cut to fit an input)."""
    return display_result(view, limit=RESULT_INPUT_LIMIT)[0]


def edited_result(view: ApprovalView, data: Mapping[str, Any]) -> str | None:
    """The text typed into Edit result, or ``None`` when it is what the card showed (a plain approval)."""
    raw = data.get(result_input_id(view.approval_id))
    return None if raw is None or raw == shown_result(view) else str(raw)


def param_input_id(approval_id: str, name: str) -> str:
    """The id of the Edit input of one parameter of one approval."""
    return f"{approval_id}.param.{name}"


def action_data(approval_id: str, verb: str) -> dict[str, str]:
    """What an ``Action.Execute`` carries: the approval id and the verb, nothing else."""
    return {"approval_id": approval_id, "verb": verb}


# --- parameters and the edit form --------------------------------------------------------------


def schema_kind(schema: Mapping[str, Any]) -> str:
    """``string``, ``integer``, ``number``, ``boolean``, ``array``, ``object`` or ``enum`` for one parameter."""
    if "enum" in schema:
        return "enum"
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is None and "anyOf" in schema:
        options = [s for s in schema["anyOf"] if s.get("type") != "null"]
        if len(options) == 1:
            return schema_kind(options[0])
    return kind if kind in ("string", "integer", "number", "boolean", "array", "object") else "string"


def _enum_values(schema: Mapping[str, Any]) -> list[Any]:
    if "enum" in schema:
        return list(schema["enum"])
    for option in schema.get("anyOf", []):
        if "enum" in option:
            return list(option["enum"])
    return []


def _prefill_text(kind: str, value: Any) -> str:
    if value is None:
        return "false" if kind == "boolean" else ""
    if kind in ("array", "object"):
        return json.dumps(value, ensure_ascii=False)
    return _scalar_text(value)


def _scalar_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def form_fields(view: ApprovalView) -> list[FormField]:
    """The editable parameters of ``view`` in schema order, each with the text its input starts with.

    Secret parameters start empty (an empty secret means "unchanged"); values too long for the card,
    or objects holding secrets, are listed with a note and no input.
    """
    properties: Mapping[str, Any] = view.parameters_schema.get("properties", {}) or {}
    required = set(view.parameters_schema.get("required", []) or [])
    names = list(properties) + [n for n in view.arguments if n not in properties]
    fields = []
    for name in names:
        schema = properties.get(name, {})
        kind = schema_kind(schema)
        value = view.arguments.get(name)
        choices = tuple(_scalar_text(v) for v in _enum_values(schema))
        # A secret by name, or a text holding one ("curl -H 'Authorization: Bearer …'"), is never pre-filled.
        if is_secret_key(name) or (isinstance(value, str) and mask_text(value) != value):
            fields.append(FormField(name, "secret", "", name in required))
            continue
        if kind in ("array", "object") and mask_for_display(value) != value:
            fields.append(FormField(name, kind, "", name in required, note="holds secrets; not editable here"))
            continue
        prefill = _prefill_text(kind, value)
        if len(prefill) > EDIT_VALUE_LIMIT:
            fields.append(FormField(name, kind, "", name in required, note="too long to edit here"))
            continue
        fields.append(FormField(name, kind, prefill, name in required, choices))
    return fields


def _same_number(submitted: str, prefill: str) -> bool:
    try:
        return float(submitted) == float(prefill)
    except ValueError:
        return False


def _same_json(submitted: str, prefill: str) -> bool:
    try:
        return json.loads(submitted) == json.loads(prefill)
    except json.JSONDecodeError:
        return False


def edited_params(view: ApprovalView, data: Mapping[str, Any]) -> dict[str, str | None]:
    """The raw values of the inputs the person changed (only those: untouched fields keep their value).

    Teams sends every input as a string; the engine coerces them by the tool's schema. A prefilled input
    missing from ``data`` was emptied (renderers leave such inputs out): it is :data:`CLEARED`, and the
    engine refuses it if required, or uses the default or drops it. A toggle always sends its value.
    """
    changed: dict[str, str | None] = {}
    for f in form_fields(view):
        if f.note is not None:
            continue
        raw = data.get(param_input_id(view.approval_id, f.name))
        if raw is None:
            if f.prefill != "" and f.kind not in ("secret", "boolean"):
                changed[f.name] = CLEARED  # renderers leave an emptied input out: it was cleared, not kept
            continue
        submitted = raw if isinstance(raw, str) else _scalar_text(raw)
        if f.kind == "secret":
            if submitted != "":
                changed[f.name] = submitted
            continue
        if submitted == f.prefill:
            continue
        if f.kind in ("integer", "number") and _same_number(submitted, f.prefill):
            continue
        if f.kind in ("array", "object") and _same_json(submitted, f.prefill):
            continue
        changed[f.name] = submitted
    return changed


def unoffered_inputs(view: ApprovalView, verb: str, data: Mapping[str, Any]) -> dict[str, str]:
    """What a click on ``view``'s card carried that the card never offered, by field (empty if nothing).

    Teams sends the card's own inputs, each as text. A value for a parameter the form has no input
    for, a value that is not text, a choice the list never had or an over-long feedback was forged:
    the click must decide nothing, rather than have the value dropped or stored. ``"_"`` keys a
    problem that belongs to no parameter.
    """
    if verb == VERB_REJECT:
        return _unoffered_feedback(view, data)
    if verb == VERB_RESPOND:  # issue 30: only the card's one text input, within the limit
        answer = data.get(respond_input_id(view.approval_id))
        if answer is not None and (not isinstance(answer, str) or len(answer) > MAX_RESPONSE_CHARS):
            return {"_": "the answer was not sent as text within the limit"}
        return {}
    if verb == VERB_APPROVE:  # issue 31: only the reason of reason_card, as text within the limit
        reason = data.get(reason_input_id(view.approval_id))
        if reason is not None and (not isinstance(reason, str) or len(reason) > FEEDBACK_LIMIT):
            return {"_": "the reason was not sent as text within the limit"}
        return {}
    if verb in (VERB_BREAKGLASS, VERB_REVIEW_NOT_OK):  # issue 31: one text input each, within the limit
        typed = data.get(
            breakglass_input_id(view.approval_id) if verb == VERB_BREAKGLASS else review_note_input_id(view.approval_id)
        )
        if typed is not None and (not isinstance(typed, str) or len(typed) > FEEDBACK_LIMIT):
            return {"_": "the text was not sent as text within the limit"}
        return {}
    if verb != VERB_EDIT:
        return {}
    if view.is_review:  # the only input of Edit result is the result's text
        return _unoffered_result_inputs(view, data)
    return _unoffered_param_inputs(view, data)


def _unoffered_feedback(view: ApprovalView, data: Mapping[str, Any]) -> dict[str, str]:
    """The problem of a Reject click's feedback: not text, or over-long."""
    feedback = data.get(feedback_input_id(view.approval_id))
    if feedback is not None and not isinstance(feedback, str):
        return {"_": "the feedback was not sent as text"}
    if feedback is not None and len(feedback) > FEEDBACK_LIMIT:
        return {"_": f"the feedback is longer than {FEEDBACK_LIMIT} characters"}
    return {}


def _unoffered_result_inputs(view: ApprovalView, data: Mapping[str, Any]) -> dict[str, str]:
    """The problems of an Edit result click: a result that is not text or too long, any parameter input."""
    problems: dict[str, str] = {}
    for key, raw in data.items():
        if key == result_input_id(view.approval_id):
            if not isinstance(raw, str):
                problems["result"] = "was not sent as text"
            elif len(raw) > RESULT_INPUT_LIMIT:
                problems["result"] = f"is longer than {RESULT_INPUT_LIMIT} characters"
        elif isinstance(key, str) and key.startswith(param_input_id(view.approval_id, "")):
            problems[key.rsplit(".", 1)[-1]] = "cannot be edited on this card"
    return problems


def _unoffered_param_inputs(view: ApprovalView, data: Mapping[str, Any]) -> dict[str, str]:
    """The problems of an Edit click's parameter inputs, by parameter name."""
    fields = {f.name: f for f in form_fields(view)}
    prefix = param_input_id(view.approval_id, "")
    problems: dict[str, str] = {}
    for key, raw in data.items():
        if not isinstance(key, str) or not key.startswith(prefix):
            continue  # the approval id, the verb, and inputs of other approvals on the same card
        name = key[len(prefix) :]
        problem = _param_input_problem(fields.get(name), raw)
        if problem is not None:
            problems[name] = problem
    return problems


def _param_input_problem(f: FormField | None, raw: Any) -> str | None:
    """Why one parameter input could not have come from the card's form, or ``None`` if it could."""
    if f is None or f.note is not None:
        return "cannot be edited on this card"
    if not isinstance(raw, str):
        return "was not sent as text"
    if raw == f.prefill:
        return None
    if f.kind == "enum" and f.choices and raw not in f.choices:
        return "must be one of: " + ", ".join(f.choices)
    if f.kind == "boolean" and raw not in ("true", "false"):
        return "must be true or false"
    if f.kind in ("integer", "number") and not _finite_or_not_a_number(raw):
        return "must be a finite number"  # a number input never sends nan or inf
    return None


def _finite_or_not_a_number(text: str) -> bool:
    """False only for text that parses as an infinite or NaN float (the engine explains other text)."""
    try:
        return math.isfinite(float(text))
    except ValueError:
        return True


def _input(view: ApprovalView, f: FormField, value: str | None) -> dict[str, Any]:
    text = f.prefill if value is None else value
    label = f"{f.name}{'' if f.required else ' (optional)'}"
    base: dict[str, Any] = {"id": param_input_id(view.approval_id, f.name), "label": label}
    if f.required and f.kind not in ("boolean", "secret"):  # a secret left empty means "unchanged"
        base.update(isRequired=True, errorMessage=f"{f.name} is required")
    if f.kind == "boolean":
        return {"type": "Input.Toggle", **base, "title": f.name, "value": "true" if text == "true" else "false"}
    if f.kind in ("integer", "number"):
        element: dict[str, Any] = {"type": "Input.Number", **base}
        for candidate in (text, f.prefill):  # an invalid submission cannot sit in a number input
            try:
                number = float(candidate)
            except ValueError:
                continue
            element["value"] = int(number) if number.is_integer() else number
            break
        return element
    if f.kind == "enum" and f.choices:
        choices = [{"title": c, "value": c} for c in f.choices]
        return {"type": "Input.ChoiceSet", **base, "choices": choices, "value": text, "style": "compact"}
    if f.kind == "secret":
        return {"type": "Input.Text", **base, "value": text, "placeholder": f"{MASK} (unchanged unless you type)"}
    multiline = f.kind in ("array", "object") or "\n" in text or len(text) > 80
    placeholder = "JSON" if f.kind in ("array", "object") else ""
    element = {"type": "Input.Text", **base, "value": text, "isMultiline": multiline}
    if placeholder:
        element["placeholder"] = placeholder
    return element


def edit_form_items(view: ApprovalView, edit: EditForm | None = None) -> list[dict[str, Any]]:
    """The inputs of the Edit form, pre-filled; with ``edit``, the submitted values and errors by the fields."""
    items: list[dict[str, Any]] = []
    for f in form_fields(view):
        if f.note is not None:
            items.append(_runs(_run(f"{f.name}: ", weight="bolder"), _run(f.note, isSubtle=True)))
            continue
        value = edit.values.get(f.name) if edit else None
        items.append(_input(view, f, value))
        error = edit.errors.get(f.name) if edit else None
        if error:
            items.append(_runs(_run(f"{f.name} {error}", color="attention")))
    if edit:
        for name, error in edit.errors.items():
            if name not in {f.name for f in form_fields(view)}:
                items.append(_runs(_run(f"{name} {error}", color="attention")))
    if not items:
        items.append(_runs(_run("This tool has no parameters to edit.", isSubtle=True)))
    return items


# --- elements ----------------------------------------------------------------------------------


def _run(text: str, **style: Any) -> dict[str, Any]:
    return {"type": "TextRun", "text": text, **style}


def _runs(*inlines: dict[str, Any], **props: Any) -> dict[str, Any]:
    return {"type": "RichTextBlock", "inlines": list(inlines), **props}


def _fact(label: str, value: str, monospace: bool = False) -> dict[str, Any]:
    style = {"fontType": "monospace"} if monospace else {}
    return _runs(_run(f"{label}: ", weight="bolder"), _run(value, **style), spacing="small")


def _execute(title: str, approval_id: str, verb: str, style: str | None = None, inputs: bool = True) -> dict:
    action: dict[str, Any] = {
        "type": "Action.Execute",
        "title": title,
        "verb": verb,
        "data": action_data(approval_id, verb),
    }
    if style:
        action["style"] = style
    if not inputs:
        action["associatedInputs"] = "None"
    return action


def policy_text(view: ApprovalView) -> str:
    """The policy that asked, in one line: mode, approvers, quorum, four-eyes."""
    parts = [view.policy_mode]
    who = ", ".join(map(group_label, view.approvers)) if view.approvers else "requester or admins"
    parts.append("approvers: " + who)
    if view.quorum > 1:
        parts.append(f"{view.quorum} approvals needed")
    if view.four_eyes:
        parts.append("four-eyes: the requester may not approve")
    return " · ".join(parts)


def _respond_card(view: ApprovalView) -> dict[str, Any]:
    return {
        "type": "AdaptiveCard",
        "body": [
            {
                "type": "Input.Text",
                "id": respond_input_id(view.approval_id),
                "label": "Your answer for the agent (the tool will not run)",
                "isMultiline": True,
                "isRequired": True,
                "errorMessage": "Type the answer the agent should get.",
                "maxLength": MAX_RESPONSE_CHARS,
            }
        ],
        "actions": [_execute(RESPOND_LABEL, view.approval_id, VERB_RESPOND)],
    }


def _text_form(input_id: str, label: str, error: str, action: dict[str, Any], note: str | None = None) -> dict:
    """An ``Action.ShowCard`` form: one required text input and the action that sends it."""
    body: list[dict[str, Any]] = [_runs(_run(note, color="attention", weight="bolder"))] if note else []
    body.append(
        {
            "type": "Input.Text",
            "id": input_id,
            "label": label,
            "isRequired": True,
            "errorMessage": error,
            "isMultiline": True,
            "maxLength": FEEDBACK_LIMIT,
        }
    )
    return {"type": "AdaptiveCard", "body": body, "actions": [action]}


def breakglass_action(view: ApprovalView) -> dict[str, Any]:
    """Issue 31: "Break glass": a form asking the required reason, then runs the call once (the engine checks)."""
    glass = _execute("Break glass", view.approval_id, VERB_BREAKGLASS, style="destructive")
    form = _text_form(
        breakglass_input_id(view.approval_id),
        "Why can it not wait? (required; announced and reviewed)",
        "A reason is required.",
        glass,
        note="Runs the call once without an approval. It is announced and reviewed afterwards.",
    )
    return {"type": "Action.ShowCard", "title": "Break glass", "card": form}


def review_actions(approval_id: str) -> list[dict[str, Any]]:
    """Issue 31: "Review: OK" and "Review: Not OK" (a form asking the required note) for a break-glass decision."""
    ok = _execute("Review: OK", approval_id, VERB_REVIEW_OK, style="positive", inputs=False)
    not_ok = _execute("Review: Not OK", approval_id, VERB_REVIEW_NOT_OK, style="destructive")
    form = _text_form(
        review_note_input_id(approval_id), "What was wrong with it? (required)", "A note is required.", not_ok
    )
    return [ok, {"type": "Action.ShowCard", "title": "Review: Not OK", "card": form}]


def _actions(view: ApprovalView, edit: EditForm | None, with_forms: bool) -> list[dict[str, Any]]:
    approve = _execute("Approve", view.approval_id, VERB_APPROVE, style="positive", inputs=False)
    reject_card = {
        "type": "AdaptiveCard",
        "body": [
            {
                "type": "Input.Text",
                "id": feedback_input_id(view.approval_id),
                "label": "Feedback for the agent (optional)",
                "isMultiline": True,
                "maxLength": 1000,
            }
        ],
        "actions": [_execute("Reject", view.approval_id, VERB_REJECT, style="destructive")],
    }
    actions = [approve, {"type": "Action.ShowCard", "title": "Reject", "card": reject_card}]
    if view.respondable and not view.is_review:  # issue 30: answer in the tool's place
        actions.append({"type": "Action.ShowCard", "title": RESPOND_LABEL, "card": _respond_card(view)})
    if view.breakglass_open and not view.is_review:  # issue 31: after the delay, for the requester
        actions.append(breakglass_action(view))
    if view.offer_always_allow:  # only in the view of one admin (Teams asked for their own card)
        actions.append(_execute("Approve and always allow here", view.approval_id, VERB_APPROVE_ALWAYS, inputs=False))
    if view.is_review:
        result_card = {
            "type": "AdaptiveCard",
            "body": [
                {
                    "type": "Input.Text",
                    "id": result_input_id(view.approval_id),
                    "label": "Result for the model",
                    "isMultiline": True,
                    "maxLength": RESULT_INPUT_LIMIT,
                    "value": shown_result(view),
                }
            ],
            "actions": [_execute("Release edited", view.approval_id, VERB_EDIT, style="positive")],
        }
        actions.append({"type": "Action.ShowCard", "title": "Edit result", "card": result_card})
    elif with_forms and not (edit and edit.approval_id == view.approval_id):
        edit_card = {
            "type": "AdaptiveCard",
            "body": edit_form_items(view),
            "actions": [_execute("Save and approve", view.approval_id, VERB_EDIT, style="positive")],
        }
        actions.append({"type": "Action.ShowCard", "title": "Edit", "card": edit_card})
    return actions


@dataclass(frozen=True)
class _Layout:
    """How much detail fits: full sections with edit forms, or compact ones; maybe not every section."""

    value_limit: int
    forms: bool = True
    compact: bool = False
    max_sections: int | None = None
    buttons: bool = True
    breakglass: bool = False
    """Show Break glass where it is open even without the decision buttons (the requester's own view)."""


@dataclass(frozen=True)
class ShownArgument:
    """One argument as a card shows it; ``change`` says what an edit changed (``None``: untouched)."""

    argument: DisplayArgument
    change: str | None = None


def shown_arguments(view: ApprovalView, limit: int) -> list[ShownArgument]:
    """The arguments of ``view`` as they run: for an edited call the edited values, each change marked.

    Secrets stay masked (a changed secret says only "edited"); values are truncated to ``limit``.
    """
    if view.status != MODIFIED or view.final_arguments is None:
        return [ShownArgument(arg) for arg in display_arguments(view.arguments, limit=limit)]
    before = {arg.name: arg for arg in display_arguments(view.arguments, limit=limit)}
    shown = []
    for arg in display_arguments(view.final_arguments, limit=limit):
        if arg.name not in view.arguments:
            change: str | None = "edited; was not set"
        elif view.final_arguments[arg.name] == view.arguments[arg.name]:
            change = None
        elif arg.secret or before[arg.name].secret:
            change = "edited"
        else:
            change = f"edited; was {before[arg.name].text}"
        shown.append(ShownArgument(arg, change))
    for name, arg in before.items():  # a cleared optional field without a default no longer runs
        if name not in view.final_arguments:
            was = "edited" if arg.secret else f"edited; was {arg.text}"
            shown.append(ShownArgument(replace(arg, text="(removed)", truncated=False), was))
    return shown


def outcome_text(view: ApprovalView, limit: int) -> str:
    """The outcome sentence of ``view``, with edited values and feedback truncated to fit the card."""
    if view.status == MODIFIED and not view.is_review:
        who, when = view.decided_by or "someone", format_time(view.decided_at)
        changes = [s for s in shown_arguments(view, limit) if s.change]
        listed = ", ".join(f"{s.argument.name}={s.argument.text}" for s in changes)
        return f"Edited and approved by {who} at {when}: {listed}." if listed else f"Approved by {who} at {when}."
    if view.status == REJECTED and view.feedback:
        return outcome_sentence(replace(view, feedback=truncate(view.feedback, limit)[0]))
    return outcome_sentence(view)


def short_outcome(view: ApprovalView) -> str:
    """``approved by Ana Lopez``, ``rejected by Ben Okafor; not run``, ``expired; not run`` (the subtitle)."""
    text = _STATUS_WORDS.get(view.status, "decided")
    if view.is_review:
        text = "result " + ("edited" if view.status == MODIFIED else text)
    if view.status in (APPROVED, MODIFIED, REJECTED):
        text += f" by {view.decided_by or 'someone'}"
    if view.is_review:
        return text if view.status in _RAN else text + "; withheld from the model"
    return text if view.status in _RAN else text + "; not run"


def _argument_runs(shown: ShownArgument) -> list[dict[str, Any]]:
    runs = [_run(f"{shown.argument.name}: ", weight="bolder"), _run(shown.argument.text, fontType="monospace")]
    if shown.change:
        runs.append(_run(f"  ({shown.change})", color="accent", weight="bolder", italic=True))
    return runs


def _preview_items(view: ApprovalView, layout: _Layout) -> list[dict[str, Any]]:
    """The call's preview (or, re-asked, the approved one beside the new one), masked and cut; when it is cut and the
    card has room, "Show the whole preview" (``Action.ShowCard``) shows it cut at :data:`SHOW_MORE_LIMIT` instead."""
    limit = max(layout.value_limit, 80) * 2
    items = [
        _runs(_run(f"{section.label.capitalize()}: ", weight="bolder"), _run(section.text, fontType="monospace"))
        for section in preview_sections(view.preview, limit)
    ]
    if layout.compact or not is_cut(view.preview, limit):
        return items
    whole = [
        _runs(_run(f"{section.label.capitalize()}: ", weight="bolder"), _run(section.text, fontType="monospace"))
        for section in preview_sections(view.preview, SHOW_MORE_LIMIT)
    ]
    show = {"type": "Action.ShowCard", "title": SHOW_MORE_LABEL, "card": {"type": "AdaptiveCard", "body": whole}}
    return [*items, {"type": "ActionSet", "actions": [show]}]


def _outcome_color(view: ApprovalView) -> str:
    if is_breakglass_view(view):
        return "attention"
    return _STATUS_COLORS.get(view.status, "default" if view.is_pending else "warning")


def _breakglass_items(view: ApprovalView, layout: _Layout) -> list[dict[str, Any]]:
    """Issue 31: Break glass once it is open; for a break-glass decision, who broke glass and why, then its review
    (Review: OK / Review: Not OK while due)."""
    items: list[dict[str, Any]] = []
    if view.is_pending and view.breakglass_open:
        waited = f"Nobody decided in time: {view.requester} may break glass."
        items.append(_runs(_run(waited, color="attention", weight="bolder")))
        if not layout.buttons and layout.breakglass:
            items.append({"type": "ActionSet", "actions": [breakglass_action(view)]})
    if not is_breakglass_view(view):
        return items
    reason, _ = truncate(breakglass_reason(view), max(layout.value_limit, 200))
    by = f"break-glass by {view.decided_by or 'someone'}: {reason}"
    items.append(_runs(_run(by, color="attention", weight="bolder")))
    reviewed = breakglass_review_sentence(view)
    if reviewed:
        items.append(_runs(_run(truncate(reviewed, 1_200)[0], weight="bolder")))
    elif breakglass_review_due(view) and layout.buttons:
        items.append(_runs(_run(f"A review by someone other than {view.requester} is due.", isSubtle=True)))
        items.append({"type": "ActionSet", "actions": review_actions(view.approval_id)})
    return items


def _section(view: ApprovalView, index: int, total: int, layout: _Layout, edit: EditForm | None) -> dict[str, Any]:
    heading = [_run(f"{index}/{total} ", weight="bolder")] if total > 1 else []
    if view.is_review:
        heading.append(_run("Review the result of ", weight="bolder"))
    items: list[dict[str, Any]] = [
        _runs(*heading, _run(view.tool_name, weight="bolder", fontType="monospace", size="medium")),
    ]
    if view.tool_description and not layout.compact:
        description, _ = truncate(view.tool_description, 300)
        items.append(_runs(_run(description, isSubtle=True), spacing="none"))
    shown = shown_arguments(view, layout.value_limit)
    if not view.is_pending:
        if view.status == MODIFIED:
            label = "Approved with these arguments (edits marked):"
        elif view.status == APPROVED:
            label = "Approved with these arguments:"
        else:
            label = "Arguments (the call was not run):"
        items.append(_runs(_run(label, isSubtle=True)))
    if not shown:
        items.append(_runs(_run("No arguments.", isSubtle=True)))
    elif layout.compact:
        runs = []
        for arg in shown:
            runs += _argument_runs(arg) + [_run("  ")]
        items.append(_runs(*runs))
    else:
        items.extend(_runs(*_argument_runs(arg), spacing="small") for arg in shown)
    for line in provenance_lines(view.provenance):  # issue 31: arguments copied from untrusted text
        items.append(_runs(_run(line, color="attention", weight="bolder"), spacing="small"))
    items.extend(_preview_items(view, layout))  # issue 30: what the call would do
    if view.is_review:  # the tool ran: what the model would see, masked and cut (all of it is stored)
        result, _ = display_result(view, limit=max(layout.value_limit, 80) * 2)
        items.append(_runs(_run("Result: ", weight="bolder"), _run(result, fontType="monospace")))
    expires = f" · expires {format_time(view.expires_at)}" if view.is_pending else ""
    if layout.compact:
        items.append(_runs(_run(f"Requested by {view.requester} · {policy_text(view)}{expires}", isSubtle=True)))
    else:
        items.append(_fact("Requested by", view.requester))
        items.append(_fact("Policy", policy_text(view)))
        if view.is_pending:
            items.append(_fact("Expires", format_time(view.expires_at)))
    color = _outcome_color(view)
    items.append(_runs(_run(outcome_text(view, layout.value_limit), weight="bolder", color=color)))
    items.extend(_breakglass_items(view, layout))  # issue 31
    if view.is_pending and layout.buttons:
        if edit and edit.approval_id == view.approval_id:
            items.append(_runs(_run("Edit the parameters, then save:", weight="bolder")))
            items.extend(edit_form_items(view, edit))
            save = _execute("Save and approve", view.approval_id, VERB_EDIT, style="positive")
            items.append({"type": "ActionSet", "actions": [save]})
        items.append({"type": "ActionSet", "actions": _actions(view, edit, layout.forms)})
    section = {"type": "Container", "separator": index > 1, "spacing": "large", "items": items}
    return section | ({"style": "attention"} if is_breakglass_view(view) else {})  # issue 31: a red card


def _build(
    approvals: Sequence[ApprovalView],
    notice: str | None,
    edit: EditForm | None,
    layout: _Layout,
    refresh: dict[str, Any] | None = None,
) -> dict[str, Any]:
    pending = [v for v in approvals if v.is_pending]
    title = "Approval needed" if pending else "Approval decided"
    count = len(approvals)
    if pending:
        subtitle = f"{len(pending)} of {count} tool calls wait for a decision."
    elif count == 1:
        subtitle = f"{approvals[0].tool_name}: {short_outcome(approvals[0])}."
    else:
        tally: dict[str, int] = {}
        for v in approvals:
            word = _STATUS_WORDS.get(v.status, "decided")
            tally[word] = tally.get(word, 0) + 1
        subtitle = f"All {count} tool calls are decided: " + ", ".join(f"{n} {w}" for w, n in tally.items()) + "."
    body: list[dict[str, Any]] = []
    if notice:
        body.append({"type": "Container", "style": "warning", "items": [_runs(_run(notice, weight="bolder"))]})
    body.append({"type": "TextBlock", "text": title, "style": "heading", "size": "large", "wrap": True})
    # A RichTextBlock: the subtitle may name the decider, and TextBlocks would read that as Markdown.
    body.append(_runs(_run(subtitle, isSubtle=True), spacing="none"))
    shown = approvals if layout.max_sections is None else approvals[: layout.max_sections]
    for index, view in enumerate(shown, start=1):
        body.append(_section(view, index, count, layout, edit))
    if len(shown) < count:
        hidden = count - len(shown)
        note = f"{hidden} more call(s) do not fit on this card: use Approve all, or send 'pending' to list them."
        body.append({"type": "TextBlock", "text": note, "wrap": True, "weight": "bolder"})
    card: dict[str, Any] = {
        "type": "AdaptiveCard",
        "$schema": CARD_SCHEMA,
        "version": CARD_VERSION,
        "fallbackText": "countersign: a tool call needs approval. Open this message in Teams to decide.",
        "body": body,
    }
    if len(pending) > 1 and layout.buttons:
        card["actions"] = [_execute("Approve all", pending[0].approval_id, VERB_APPROVE_ALL, "positive", False)]
    if refresh is not None:
        card["refresh"] = refresh
    return card


def card_size(card: Mapping[str, Any]) -> int:
    """The card's size in bytes as Teams counts it (UTF-8 JSON)."""
    return len(json.dumps(card, ensure_ascii=False).encode("utf-8"))


def approval_card(
    approvals: Sequence[ApprovalView],
    *,
    notice: str | None = None,
    edit: EditForm | None = None,
    buttons: bool = True,
    refresh_for: Sequence[str] = (),
    breakglass: bool = False,
) -> dict[str, Any]:
    """The card for the approvals of one paused step, under :data:`MAX_CARD_BYTES`.

    ``notice`` (e.g. why a click changed nothing) is shown on top; ``edit`` opens an invalid edit with
    its errors by the fields. Values are truncated harder until the card fits; then the sections get
    compact (no Edit forms, no descriptions); as a last resort the last sections are left out, with a
    note saying how many. ``buttons=False`` shows the status only; ``refresh_for`` lists the people Teams
    asks the bot for their own view of the card (``refresh.userIds``).
    """
    refresh = _refresh(approvals, refresh_for)
    base = _Layout(_VALUE_LIMITS[0], buttons=buttons, breakglass=breakglass)
    for limit in _VALUE_LIMITS:
        card = _build(approvals, notice, edit, replace(base, value_limit=limit), refresh)
        if card_size(card) <= MAX_CARD_BYTES:
            return card
    compact = replace(base, value_limit=_VALUE_LIMITS[-1], forms=False, compact=True)
    card = _build(approvals, notice, None, compact, refresh)
    if card_size(card) <= MAX_CARD_BYTES:
        return card
    fits, too_many = 1, len(approvals)  # binary search for the most sections that fit
    while too_many - fits > 1:
        middle = (fits + too_many) // 2
        if card_size(_build(approvals, notice, None, replace(compact, max_sections=middle), refresh)) <= MAX_CARD_BYTES:
            fits = middle
        else:
            too_many = middle
    return _build(approvals, notice, None, replace(compact, max_sections=fits), refresh)


def shared_card(
    approvals: Sequence[ApprovalView], user_views: bool = True, refresh_for: Sequence[str] | None = None
) -> dict[str, Any]:
    """The card everyone sees. Where the host has user-specific views (``user_views``, see
    :mod:`adapters.teams.hosts`), while calls wait and the people who may decide them (the engine's
    ``ApprovalView.deciders``: the requester and admins, or the named approvers, groups expanded) fit
    Teams' list: the status only, with a refresh for them (each then gets their own card, with the
    buttons). Otherwise (no user views, nobody known, or too many people) the buttons for all; clicks are
    checked either way. ``refresh_for``: :func:`refresh_users` of the views before people were named (it
    needs the requester's id), when ``approvals`` show names."""
    pending = [v for v in approvals if v.is_pending]
    deciders = list(refresh_for) if refresh_for is not None else refresh_users(approvals)
    if user_views and pending and 0 < len(deciders) <= MAX_REFRESH_USERS:
        return approval_card(approvals, buttons=False, refresh_for=deciders)
    return approval_card(approvals)


def refresh_users(approvals: Sequence[ApprovalView]) -> list[str]:
    """Who gets their own view of a step's card: the people who may decide its pending calls, and the requester
    of each call that offers Break glass (issue 31)."""
    pending = [v for v in approvals if v.is_pending]
    return sorted({p for v in pending for p in v.deciders} | {v.requester for v in pending if v.breakglass_open})


def card_summary(approvals: Sequence[ApprovalView]) -> str:
    """The message summary (notifications, the activity feed): follows the step's state."""
    pending = [v for v in approvals if v.is_pending]
    if pending:
        return "Approval needed" if len(pending) == 1 else f"{len(pending)} approvals needed"
    if len(approvals) == 1:
        outcome = short_outcome(approvals[0])
        return f"{approvals[0].tool_name}: {outcome}"[:200]
    return f"{len(approvals)} calls decided"


def _refresh(approvals: Sequence[ApprovalView], users: Sequence[str]) -> dict[str, Any] | None:
    pending = [v for v in approvals if v.is_pending]
    if not users or not pending:
        return None
    return {
        "action": {
            "type": "Action.Execute",
            "verb": VERB_REFRESH,
            "data": action_data(pending[0].approval_id, VERB_REFRESH),
        },
        "userIds": list(users)[:MAX_REFRESH_USERS],
    }


def card_attachment(card: Mapping[str, Any]) -> dict[str, Any]:
    """The card as an activity attachment."""
    return {"contentType": CARD_CONTENT_TYPE, "content": dict(card)}


def invoke_card_response(card: Mapping[str, Any]) -> dict[str, Any]:
    """The body of an ``adaptiveCard/action`` invoke response that replaces the card for the clicker."""
    return {"statusCode": 200, "type": CARD_CONTENT_TYPE, "value": dict(card)}


def invoke_message_response(text: str) -> dict[str, Any]:
    """The body of an invoke response that shows a short message instead of a card."""
    return {"statusCode": 200, "type": "application/vnd.microsoft.activity.message", "value": text}


TEXT_CARD_LIMIT = 20_000


def stop_card(run_id: str | None) -> dict[str, Any]:
    """The card beside a streaming answer: a Stop button while ``run_id`` works, then a plain "Done"."""
    card: dict[str, Any] = {
        "type": "AdaptiveCard",
        "$schema": CARD_SCHEMA,
        "version": CARD_VERSION,
        "fallbackText": "countersign is working on your request.",
        "body": [
            {
                "type": "TextBlock",
                "text": "Working on your request." if run_id else "Done.",
                "wrap": True,
                "isSubtle": run_id is None,
            }
        ],
    }
    if run_id:
        card["actions"] = [
            {
                "type": "Action.Execute",
                "title": "Stop",
                "verb": VERB_STOP,
                "style": "destructive",
                "data": {"run_id": run_id, "verb": VERB_STOP},
            }
        ]
    return card


def review_request_card(text: str, approval_id: str) -> dict[str, Any]:
    """Issue 31: the break-glass channel's post or an approver's DM: ``text`` (plain, never Markdown) in a red
    container, with Review: OK / Review: Not OK."""
    shown, _ = truncate(text, TEXT_CARD_LIMIT)
    return {
        "type": "AdaptiveCard",
        "$schema": CARD_SCHEMA,
        "version": CARD_VERSION,
        "fallbackText": "countersign: a break-glass needs a review. Open this message in Teams to review it.",
        "body": [{"type": "Container", "style": "attention", "items": [_runs(_run(shown, weight="bolder"))]}],
        "actions": review_actions(approval_id),
    }


def text_card(text: str) -> dict[str, Any]:
    """A card that shows ``text`` literally in a monospace font (admin answers: aligned, never Markdown)."""
    shown, _ = truncate(text, TEXT_CARD_LIMIT)
    return {
        "type": "AdaptiveCard",
        "$schema": CARD_SCHEMA,
        "version": CARD_VERSION,
        "fallbackText": "countersign: open this message in Teams to read the answer.",
        "body": [_runs(_run(shown, fontType="monospace"))],
    }


HELP_HEADING = "countersign admin commands:"
_HELP_LINE = re.compile(r"^  (\S.*?)\s{2,}(\S.*)$")
_HELP_CONTINUED = re.compile(r"^\s{10,}(\S.*)$")


def help_card(text: str) -> dict[str, Any]:
    """The ``help`` answer stacked for narrow screens: each command on its own line, its meaning below.

    The engine aligns commands and meanings in two columns, which wrap into each other at a card's width
    (a phone is about 320 px). Lines that are not a command (the closing notes) are shown as they are.
    """
    body: list[dict[str, Any]] = [{"type": "TextBlock", "text": HELP_HEADING, "weight": "bolder", "wrap": True}]
    for line in text.splitlines()[1:]:
        command, continued = _HELP_LINE.match(line), _HELP_CONTINUED.match(line)
        if command:
            body.append(_runs(_run(command.group(1), fontType="monospace", weight="bolder"), spacing="small"))
            body.append(_runs(_run(command.group(2), isSubtle=True), spacing="none"))
        elif continued and len(body) > 1:
            body.append(_runs(_run(continued.group(1), isSubtle=True), spacing="none"))
        elif line.strip():
            body.append(_runs(_run(line.strip()), spacing="medium"))
    return {
        "type": "AdaptiveCard",
        "$schema": CARD_SCHEMA,
        "version": CARD_VERSION,
        "fallbackText": "countersign: open this message in Teams to read the answer.",
        "body": body,
    }


def answer_card(text: str) -> dict[str, Any]:
    """An admin answer's card: :func:`help_card` for the help text, else :func:`text_card`."""
    return help_card(text) if text.startswith(HELP_HEADING) else text_card(text)
