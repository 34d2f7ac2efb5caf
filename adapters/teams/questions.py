"""Adaptive Cards for a running tool's question (MCP elicitation): inputs built from its schema, Send / Decline.

Each field is an input (``Input.Text``, ``Input.Number``, ``Input.Toggle`` for a boolean, ``Input.ChoiceSet`` for
an enum, a multi-select ``Input.ChoiceSet`` for a list of choices) whose id is :func:`answer_input_id`. A link
(URL mode) is an ``Action.OpenUrl`` with Done / Decline, never an input. The engine checks the values; a
refusal comes back as the card again with the message. Once closed, the card shows its outcome only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from adapters.teams.cards import CARD_SCHEMA, CARD_VERSION
from bot.engine.model import PENDING, QuestionField, QuestionView
from bot.redaction import mask_text

VERB_ANSWER = "question_answer"
VERB_DECLINE = "question_decline"
QUESTION_VERBS = (VERB_ANSWER, VERB_DECLINE)
TEXT_LIMIT = 2_000
INPUT_PREFIX = "answer."


def answer_input_id(name: str) -> str:
    """The id of the card input for field ``name`` (the click's data carries its value under it)."""
    return f"{INPUT_PREFIX}{name}"


def question_card(view: QuestionView, notice: str | None = None, names: Mapping[str, str] | None = None) -> dict:
    """The question's card; ``notice`` (a refusal) is shown above the inputs."""
    who = (names or {}).get(view.requester, "the requester")
    body: list[dict[str, Any]] = [
        _text(f"{view.source} asks {who} (during {view.tool_name}):", weight="bolder"),
        _text(mask_text(view.message)[:TEXT_LIMIT]),
    ]
    actions: list[dict[str, Any]] = []
    if view.url is not None:
        body.append(_text(f"Open: {view.url}"[:TEXT_LIMIT]))
        if view.url.startswith(("https://", "http://")):
            actions.append({"type": "Action.OpenUrl", "title": "Open the page", "url": view.url})
    if view.status != PENDING:
        body.append(_text(outcome(view, names), isSubtle=True))
        return _card(body, [])
    if notice:
        body.append(_text(notice[:TEXT_LIMIT], color="attention"))
    body.extend(_input(item) for item in view.fields)
    actions.append(_execute("Done" if view.url is not None else "Send", view.question_id, VERB_ANSWER, "positive"))
    decline = _execute("Decline", view.question_id, VERB_DECLINE)
    decline["associatedInputs"] = "None"
    actions.append(decline)
    return _card(body, actions)


def outcome(view: QuestionView, names: Mapping[str, str] | None = None) -> str:
    """The line that replaces the inputs once the question is closed."""
    who = (names or {}).get(view.answered_by or "", "someone")
    if view.status == "accepted":
        return f"Answered by {who}."
    if view.status == "declined":
        return "Declined." if view.answered_by == "countersign" else f"Declined by {who}."
    if view.status == "withdrawn":
        return "Withdrawn: the call that asked has ended."
    return "Nobody answered in time: declined."


def answer_values(view: QuestionView, data: Mapping[str, Any]) -> dict[str, Any]:
    """The click's values by field (strings; a multi-select's comma-separated choices as a list)."""
    values: dict[str, Any] = {}
    for item in view.fields:
        raw = data.get(answer_input_id(item.name))
        if not isinstance(raw, str) or raw == "":
            continue  # renderers leave an emptied input out
        values[item.name] = [part for part in raw.split(",") if part] if item.kind == "array" else raw
    return values


def _input(item: QuestionField) -> dict[str, Any]:
    base: dict[str, Any] = {"id": answer_input_id(item.name), "label": item.title[:200], "isRequired": item.required}
    if item.required:
        base["errorMessage"] = f"{item.title[:200]} is required"
    choices = [{"title": label[:200], "value": value} for value, label in item.choices]
    element: dict[str, Any]
    if item.kind == "boolean":
        element = {"type": "Input.Toggle", "title": item.title[:200], "valueOn": "true", "valueOff": "false"}
        if isinstance(item.default, bool):
            element["value"] = "true" if item.default else "false"
    elif choices:
        element = {"type": "Input.ChoiceSet", "choices": choices, "style": "compact"}
        if item.kind == "array":
            element["isMultiSelect"] = True
            if isinstance(item.default, list):
                element["value"] = ",".join(str(v) for v in item.default)
        elif isinstance(item.default, str):
            element["value"] = item.default
    elif item.kind in ("integer", "number"):
        element = {"type": "Input.Number"}
        if isinstance(item.default, int | float) and not isinstance(item.default, bool):
            element["value"] = item.default
    else:
        element = {"type": "Input.Text", "maxLength": 3_000}
        if isinstance(item.default, str) and item.default:
            element["value"] = item.default
    if item.description and item.kind != "boolean":  # a toggle has no placeholder: its title says it
        element["placeholder"] = mask_text(item.description)[:200]
    return {**base, **element}


def _text(text: str, **props: Any) -> dict[str, Any]:
    return {"type": "TextBlock", "text": text, "wrap": True, **props}


def _execute(title: str, question_id: str, verb: str, style: str | None = None) -> dict[str, Any]:
    action: dict[str, Any] = {
        "type": "Action.Execute",
        "title": title,
        "verb": verb,
        "data": {"verb": verb, "question_id": question_id},
    }
    if style:
        action["style"] = style
    return action


def _card(body: list[dict[str, Any]], actions: list[dict[str, Any]]) -> dict[str, Any]:
    card: dict[str, Any] = {
        "$schema": CARD_SCHEMA,
        "type": "AdaptiveCard",
        "version": CARD_VERSION,
        "fallbackText": "countersign: a tool asks a question. Open this message in Teams to answer.",
        "body": body,
    }
    if actions:
        card["actions"] = actions
    return card
