"""Block Kit for a running tool's question (MCP elicitation): the message in the thread, the modal, its values.

The message says who asks and why, with **Answer** (opens a modal built from the question's fields) and
**Decline**; a link (URL mode) is shown as a link with **Done** and **Decline**, never as a form field. Once
answered, declined or expired, the message shows the outcome without buttons. The modal has one input per
field: text, number, a Yes/No select for a boolean, a select for an enum and a multi-select for a list of
choices; the engine checks the submitted values (:func:`question_values` only reads them).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ContextBlock,
    InputBlock,
    MarkdownTextObject,
    NumberInputElement,
    Option,
    PlainTextInputElement,
    SectionBlock,
    StaticMultiSelectElement,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from adapters.slack.mrkdwn import escape, escape_truncated, mention
from bot.engine.model import PENDING, QuestionField, QuestionView
from bot.redaction import is_secret_key, mask_text

ACTION_ANSWER = "cs_question_answer"
ACTION_DECLINE = "cs_question_decline"
ACTION_DONE = "cs_question_done"
QUESTION_CALLBACK = "cs_question_modal"
VALUE_ACTION = "value"
MESSAGE_LIMIT = 2_800
URL_LIMIT = 2_000
_BOOLEAN = [Option(text="Yes", value="true"), Option(text="No", value="false")]


def question_message(view: QuestionView) -> tuple[list[dict[str, Any]], str]:
    """The question's blocks and fallback text (the server's text is escaped and masked)."""
    head = f"*{escape_truncated(view.source, 100)}* asks {mention(view.requester)} (during `{escape(view.tool_name)}`):"
    text = f"{head}\n{escape_truncated(mask_text(view.message), MESSAGE_LIMIT)}"
    blocks: list[Any] = [SectionBlock(text=MarkdownTextObject(text=text))]
    if view.url is not None:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"Open: {link(view.url)}")))
    if view.status == PENDING:
        first = (
            ButtonElement(text="Done", action_id=ACTION_DONE, value=view.question_id, style="primary")
            if view.url is not None
            else ButtonElement(text="Answer", action_id=ACTION_ANSWER, value=view.question_id, style="primary")
        )
        decline = ButtonElement(text="Decline", action_id=ACTION_DECLINE, value=view.question_id)
        blocks.append(ActionsBlock(block_id=f"q:{view.question_id}", elements=[first, decline]))
    else:
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=outcome(view))]))
    return [b.to_dict() for b in blocks], f"{view.source} asks: {mask_text(view.message)[:200]}"


def link(url: str) -> str:
    """``<url|url>`` for an http(s) address that cannot break out of the link; else the escaped text."""
    if url.startswith(("https://", "http://")) and not any(c in url for c in "<>| \n") and len(url) <= URL_LIMIT:
        return f"<{url}|{escape(url)}>"
    return escape(url[:URL_LIMIT])


def outcome(view: QuestionView) -> str:
    """The line that replaces the buttons once the question is closed."""
    if view.status == "accepted":
        return f"Answered by {mention(view.answered_by)}."
    if view.status == "declined":
        return f"Declined by {mention(view.answered_by)}." if view.answered_by != "countersign" else "Declined."
    if view.status == "withdrawn":
        return "Withdrawn: the call that asked has ended."
    return "Nobody answered in time: declined."


def question_modal(view: QuestionView) -> dict[str, Any]:
    """The form: one input per field (``block_id`` = the field's name)."""
    intro = f"*{escape_truncated(view.source, 100)}* asks: {escape_truncated(mask_text(view.message), MESSAGE_LIMIT)}"
    inputs = [_input(item) for item in view.fields][:99]
    return View(
        type="modal",
        callback_id=QUESTION_CALLBACK,
        private_metadata=view.question_id,
        title="Answer",
        submit="Send",
        close="Cancel",
        blocks=[SectionBlock(text=MarkdownTextObject(text=intro)), *inputs],
    ).to_dict()


def _input(item: QuestionField) -> InputBlock:
    element: Any
    options = [Option(text=label[:75] or " ", value=value[:150]) for value, label in item.choices[:100]]
    if item.kind == "boolean":
        initial = next((o for o in _BOOLEAN if item.default is not None and o.value == json.dumps(item.default)), None)
        element = StaticSelectElement(action_id=VALUE_ACTION, options=_BOOLEAN, initial_option=initial)
    elif item.kind == "array" and options:
        chosen = [o for o in options if isinstance(item.default, list) and o.value in item.default]
        element = StaticMultiSelectElement(action_id=VALUE_ACTION, options=options, initial_options=chosen or None)
    elif options:
        initial = next((o for o in options if o.value == item.default), None)
        element = StaticSelectElement(action_id=VALUE_ACTION, options=options, initial_option=initial)
    elif item.kind in ("integer", "number"):
        element = NumberInputElement(
            action_id=VALUE_ACTION,
            is_decimal_allowed=item.kind == "number",
            initial_value=item.default if isinstance(item.default, int | float) else None,
        )
    else:
        prefill = (
            item.default if isinstance(item.default, str) and item.default and not is_secret_key(item.name) else None
        )
        element = PlainTextInputElement(action_id=VALUE_ACTION, initial_value=prefill, max_length=3_000)
    hint = mask_text(item.description)[:2_000] if item.description else None
    return InputBlock(
        block_id=item.name, label=item.title[:2_000], element=element, hint=hint, optional=not item.required
    )


def question_values(state_values: Any) -> dict[str, Any] | None:
    """The submitted values by field (strings, lists of strings; an empty field is left out), or ``None`` if
    the form cannot be read."""
    if not isinstance(state_values, Mapping):
        return None
    values: dict[str, Any] = {}
    for block_id, actions in state_values.items():
        state = actions.get(VALUE_ACTION) if isinstance(actions, Mapping) else None
        if not isinstance(state, Mapping):
            continue
        selected, chosen, typed = state.get("selected_option"), state.get("selected_options"), state.get("value")
        if isinstance(selected, Mapping) and isinstance(selected.get("value"), str):
            values[block_id] = selected["value"]
        elif isinstance(chosen, list):
            picked = [o.get("value") for o in chosen if isinstance(o, Mapping) and isinstance(o.get("value"), str)]
            if picked:
                values[block_id] = picked
        elif isinstance(typed, str) and typed != "":
            values[block_id] = typed
    return values
