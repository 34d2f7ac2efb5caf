"""Block Kit rendering: the approval message, the Reject and Edit modals, and the App Home tab.

Everything is built with ``slack_sdk.models`` classes, whose ``to_dict()`` checks Slack's per-field
limits; the block count and the total size (Slack's undocumented ``msg_blocks_too_long``) are kept
here. Untrusted text (tool arguments, descriptions, feedback) is escaped through :mod:`.mrkdwn`, and
secrets are masked by :func:`bot.engine.presentation.display_arguments`; full values stay in storage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    InputBlock,
    MarkdownTextObject,
    NumberInputElement,
    Option,
    PlainTextInputElement,
    SectionBlock,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from adapters.slack.mrkdwn import approver_markup, escape, escape_truncated, mention, split_message
from bot.durations import format_duration
from bot.engine.model import (
    APPROVED,
    CANCELLED,
    EXPIRED,
    MODIFIED,
    PENDING,
    REJECTED,
    SUPERSEDED,
    ApprovalView,
)
from bot.engine.params import CLEARED
from bot.engine.presentation import (
    breakglass_reason,
    breakglass_review_due,
    breakglass_review_sentence,
    display_arguments,
    display_result,
    is_breakglass_view,
    outcome_sentence,
    value_text,
)
from bot.engine.previewing import SHOW_MORE_LIMIT, is_cut, preview_sections
from bot.engine.provenance import provenance_lines
from bot.engine.roles import group_label
from bot.hitl.respond import MAX_RESPONSE_CHARS
from bot.hitl.respond import RESPOND as RESPOND_LABEL
from bot.redaction import is_secret_key, mask_for_display

ACTION_APPROVE = "cs_approve"
ACTION_REJECT = "cs_reject"
ACTION_EDIT = "cs_edit"
ACTION_APPROVE_ALL = "cs_approve_all"
ACTION_STOP = "cs_stop"
ACTION_APPROVE_ALWAYS = "cs_approve_always"
ACTION_RESPOND = "cs_respond"
"""Issue 30: "Respond" opens a modal with one text input: the answer the model gets instead of running the tool."""
ACTION_BREAKGLASS = "cs_breakglass"
"""Issue 31: "Break glass" (offered to the requester after the delay) opens a modal asking the required reason."""
ACTION_REVIEW_OK = "cs_breakglass_ok"
ACTION_REVIEW_NOT_OK = "cs_breakglass_not_ok"
"""Issue 31: "Review: OK" records the review at once; "Review: Not OK" opens a modal asking the required note."""
BREAKGLASS_CALLBACK = "cs_breakglass_modal"
REVIEW_CALLBACK = "cs_breakglass_review_modal"
BREAKGLASS_COLOR = "#d40e0d"
"""The colour bar of a break-glass card's attachment (Block Kit has no red block; attachments have a colour)."""
DECISION_ACTIONS = (
    ACTION_APPROVE,
    ACTION_REJECT,
    ACTION_EDIT,
    ACTION_APPROVE_ALL,
    ACTION_APPROVE_ALWAYS,
    ACTION_RESPOND,
)
RESPOND_CALLBACK = "cs_respond_modal"
ACTION_SHOW_PREVIEW = "cs_preview"
"""Issue 30: "Show more" under a preview the message cut opens a modal with the whole preview (masked, cut at
:data:`bot.engine.previewing.SHOW_MORE_LIMIT`), for the people who may decide."""
PREVIEW_CALLBACK = "cs_preview_modal"
_MODAL_SECTION_TEXT = 2_900

REJECT_CALLBACK = "cs_reject_modal"
REASON_CALLBACK = "cs_reason_modal"
"""Issue 31: the modal asking the reason for approving a call whose tool needs one."""
EDIT_CALLBACK = "cs_edit_modal"
FEEDBACK_BLOCK = "cs_feedback"
FEEDBACK_ACTION = "feedback"
EDIT_INPUT_ACTION = "value"
RESULT_BLOCK = "cs_result"
"""The block of the Edit result modal's one input (a review's edited result)."""

MAX_MESSAGE_BLOCKS = 50
MAX_VIEW_BLOCKS = 100
SECTION_TEXT_LIMIT = 3_000
BUTTON_VALUE_LIMIT = 2_000
MESSAGE_SIZE_BUDGET = 12_000
"""Characters of compactly serialised blocks per message (see :func:`blocks_size`): Slack answers
``msg_blocks_too_long`` near 13 k."""
PLAIN_INPUT_LIMIT = 3_000
FEEDBACK_LIMIT = 2_000
_FULL_CALL_BLOCKS = 4  # section, context, actions, divider
_COMPACT_CALL_BLOCKS = 2  # section (context folded in), actions
_MIN_VALUE_BUDGET = 60

_STATUS_ICON = {
    PENDING: ":hourglass_flowing_sand:",
    APPROVED: ":white_check_mark:",
    MODIFIED: ":pencil2:",
    REJECTED: ":x:",
    EXPIRED: ":alarm_clock:",
    SUPERSEDED: ":fast_forward:",
    CANCELLED: ":no_entry_sign:",
}
_WHO = "\x00who\x00"


@dataclass(frozen=True)
class RenderedMessage:
    """A message ready for ``chat.postMessage`` / ``chat.update``: notification text plus blocks (and, for a
    break-glass, a red attachment)."""

    text: str
    blocks: list[dict[str, Any]]
    attachments: list[dict[str, Any]] | None = None


# ---------------------------------------------------------------- live answers


STREAM_SECTIONS = 3
"""A message being updated in place holds at most this many sections of text (then it is posted whole)."""


class TooLongToUpdate(ValueError):
    """The answer outgrew a message that is updated in place: it is posted whole instead."""


def streaming_blocks(mrkdwn: str, run_id: str | None) -> list[dict[str, Any]]:
    """An answer being written (escaped mrkdwn) in sections, with a Stop button while ``run_id`` works.

    :class:`TooLongToUpdate` past :data:`STREAM_SECTIONS` sections.
    """
    chunks = [c for c in split_message(mrkdwn, SECTION_TEXT_LIMIT) if c.strip()] or ["…"]
    if len(chunks) > STREAM_SECTIONS:
        raise TooLongToUpdate(f"{len(mrkdwn)} characters")
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=chunk)) for chunk in chunks]
    if run_id is not None:
        blocks.append(ActionsBlock(elements=[_stop_button(run_id)]))
    return [b.to_dict() for b in blocks]


def stop_offer_blocks(run_id: str) -> list[dict[str, Any]]:
    """The private note with a Stop button for the person whose answer streams (Slack's own stream has none)."""
    note = SectionBlock(text=MarkdownTextObject(text="I'm working on your request."), accessory=_stop_button(run_id))
    return [note.to_dict()]


def _stop_button(run_id: str) -> ButtonElement:
    return ButtonElement(text="Stop", action_id=ACTION_STOP, value=run_id[:BUTTON_VALUE_LIMIT], style="danger")


def tool_step_blocks(line: str) -> list[dict[str, Any]]:
    """A call that ran without approval, as one context line (``line`` is masked and short already)."""
    return [ContextBlock(elements=[MarkdownTextObject(text=f":wrench: {escape_truncated(line, 2_900)}")]).to_dict()]


# ---------------------------------------------------------------- the approval message


def approval_message(approvals: Sequence[ApprovalView]) -> RenderedMessage:
    """One message for every call of a paused step; pending calls get Approve / Reject / Edit.

    Argument values shrink until the serialised blocks fit :data:`MESSAGE_SIZE_BUDGET`. With too many
    calls for 50 blocks (or the size budget), calls are shown compactly and, past that, the rest is
    summarised and Approve all is withheld, so nobody approves a call they could not see.
    """
    calls = sorted(approvals, key=lambda c: not c.is_pending)  # waiting calls first, if any must hide
    blocks: list[dict[str, Any]] = []
    for compact, shown in _layouts(len(calls)):
        value_budget = min(2_400, MESSAGE_SIZE_BUDGET // max(1, shown) // 2)
        while value_budget >= _MIN_VALUE_BUDGET:
            blocks = _approval_blocks(list(approvals) if not compact else calls, value_budget, compact, shown)
            if blocks_size(blocks) <= MESSAGE_SIZE_BUDGET:
                return RenderedMessage(_fallback_text(calls), blocks, breakglass_attachments(approvals))
            value_budget //= 2
    return RenderedMessage(_fallback_text(calls), blocks, breakglass_attachments(approvals))


def breakglass_attachments(approvals: Sequence[ApprovalView]) -> list[dict[str, Any]] | None:
    """Issue 31: a red attachment per break-glass decision: "break-glass by @x: <reason>", then Review: OK /
    Review: Not OK while its review is due, or the review's outcome (``None`` when nothing broke glass)."""
    attachments = [_breakglass_attachment(c) for c in approvals if is_breakglass_view(c)][:10]
    return attachments or None


def _breakglass_attachment(call: ApprovalView) -> dict[str, Any]:
    reason = escape_truncated(breakglass_reason(call), 600)
    who = mention(call.decided_by)
    tool = escape_truncated(call.tool_name, 150)
    blocks: list[Block] = [
        SectionBlock(text=MarkdownTextObject(text=f":rotating_light: *{tool}* — *break-glass by {who}:* {reason}"))
    ]
    review = call.breakglass_review
    if breakglass_review_due(call):
        blocks.append(_review_buttons(call.approval_id))
        due = f"A review by someone other than {mention(call.requester)} is due."
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=due)]))
    elif review is not None:
        sentence = escape_truncated(breakglass_review_sentence(call, reviewer=_WHO) or "", 2_500)
        blocks.append(
            ContextBlock(elements=[MarkdownTextObject(text=sentence.replace(_WHO, mention(review.reviewer)))])
        )
    fallback = escape_truncated(f"break-glass by {call.decided_by}: {breakglass_reason(call)}", 300)
    return {"color": BREAKGLASS_COLOR, "fallback": fallback, "blocks": [b.to_dict() for b in blocks]}


def review_request(markup: str, approval_id: str) -> list[dict[str, Any]]:
    """Issue 31: the break-glass channel's post or an approver's DM (a note's ``markup``, escaped already) as a red
    attachment with Review: OK / Review: Not OK."""
    text = markup if len(markup) <= SECTION_TEXT_LIMIT else markup[: SECTION_TEXT_LIMIT - 1] + "…"
    blocks = [SectionBlock(text=MarkdownTextObject(text=text)), _review_buttons(approval_id)]
    fallback = text[:300]
    return [{"color": BREAKGLASS_COLOR, "fallback": fallback, "blocks": [b.to_dict() for b in blocks]}]


def _review_buttons(approval_id: str) -> ActionsBlock:
    aid = approval_id[:BUTTON_VALUE_LIMIT]
    ok = ButtonElement(text="Review: OK", action_id=ACTION_REVIEW_OK, value=aid, style="primary")
    not_ok = ButtonElement(text="Review: Not OK", action_id=ACTION_REVIEW_NOT_OK, value=aid, style="danger")
    return ActionsBlock(block_id=f"cs_bg_review:{aid[:200]}", elements=[ok, not_ok])


def blocks_size(blocks: Sequence[Mapping[str, Any]]) -> int:
    """The size Slack sees: the blocks as compact JSON."""
    return len(json.dumps(list(blocks), separators=(",", ":"), ensure_ascii=False))


def _layouts(count: int) -> list[tuple[bool, int]]:
    """(compact?, calls shown) from the most to the least detailed layout that fits 50 blocks."""
    layouts = []
    if 1 + count * _FULL_CALL_BLOCKS + 1 <= MAX_MESSAGE_BLOCKS:
        layouts.append((False, count))
    shown = min(count, (MAX_MESSAGE_BLOCKS - 3) // _COMPACT_CALL_BLOCKS)
    while shown >= 1:
        layouts.append((True, shown))
        shown = shown * 2 // 3 if shown > 1 else 0
    return layouts


def _approval_blocks(calls: list[ApprovalView], value_budget: int, compact: bool, shown: int) -> list[dict[str, Any]]:
    pending = [c for c in calls if c.is_pending]
    head: list[Block] = [HeaderBlock(text="Approval needed" if pending else "Approval decided")]
    body: list[Block] = []
    for i, call in enumerate(calls[:shown]):
        if compact:
            body.extend(_compact_call(call, i + 1, value_budget))
        else:
            body.extend(_full_call(call, i + 1, len(calls), value_budget))
    hidden = calls[shown:]
    if hidden:
        waiting = sum(1 for c in hidden if c.is_pending)
        note = f"…and {len(hidden)} more calls ({waiting} waiting). Decide them from the countersign *Home* tab."
        body.append(SectionBlock(text=MarkdownTextObject(text=note)))
    elif len(pending) > 1:
        body.append(_approve_all(pending))
    return [block.to_dict() for block in head + body]


def _full_call(call: ApprovalView, number: int, total: int, value_budget: int) -> list[Block]:
    blocks: list[Block] = [
        SectionBlock(block_id=f"cs_call:{call.approval_id}", text=_call_text(call, number, total, value_budget)),
        ContextBlock(elements=[MarkdownTextObject(text=_status_line(call))]),
    ]
    if call.is_pending:
        blocks.append(_decision_buttons(call, is_cut(call.preview, max(_MIN_VALUE_BUDGET, value_budget))))
    blocks.append(DividerBlock())
    return blocks


def _compact_call(call: ApprovalView, number: int, value_budget: int) -> list[Block]:
    text = _call_text(call, number, 0, value_budget, describe=False).text or ""
    status = _status_line(call)
    if len(text) + len(status) < SECTION_TEXT_LIMIT:
        text += "\n" + status
    blocks: list[Block] = [SectionBlock(block_id=f"cs_call:{call.approval_id}", text=MarkdownTextObject(text=text))]
    if call.is_pending:
        blocks.append(_decision_buttons(call, is_cut(call.preview, max(_MIN_VALUE_BUDGET, value_budget))))
    return blocks


def _call_text(
    call: ApprovalView, number: int, total: int, value_budget: int, describe: bool = True
) -> MarkdownTextObject:
    counter = f"{number}/{total} " if total > 1 else ""
    review = "Review the result of " if call.is_review else ""
    lines = [f"{counter}{review}*{escape_truncated(call.tool_name, 150)}*"]
    if describe and call.tool_description:
        lines[0] += " — " + escape_truncated(call.tool_description, 300)
    shown_args = display_arguments(call.arguments, limit=max(20, value_budget // max(1, len(call.arguments))))
    for arg in shown_args:
        lines.append(f"• *{escape_truncated(arg.name, 100)}*: {_value_markup(arg.text, value_budget)}")
    if not shown_args:
        lines.append("_no arguments_")
    lines.extend(escape_truncated(line, 400) for line in provenance_lines(call.provenance))  # issue 31
    budget = max(_MIN_VALUE_BUDGET, value_budget)
    for section in preview_sections(call.preview, budget):  # issue 30: what the call would do
        lines.append(f"*{escape_truncated(section.label.capitalize(), 60)}:* {_value_markup(section.text, budget)}")
    if call.is_review:  # the tool ran; this is what the model would see (masked and cut; all of it is stored)
        shown, _ = display_result(call, limit=max(_MIN_VALUE_BUDGET, value_budget))
        lines.append(f"*Result:* {_value_markup(shown, max(_MIN_VALUE_BUDGET, value_budget))}")
    text = "\n".join(lines)
    if len(text) > SECTION_TEXT_LIMIT:
        text = _cut_markup(text, SECTION_TEXT_LIMIT)
    return MarkdownTextObject(text=text)


def _value_markup(value: str, limit: int) -> str:
    escaped = escape_truncated(value, limit)
    if "`" in value:
        return escaped  # a backtick would end the code span early; plain (escaped) text is still inert
    if "\n" in value or len(value) > 60:
        return f"```{escaped}```"
    return f"`{escaped}`"


def _cut_markup(text: str, limit: int) -> str:
    # Only reached with very many arguments; never split an entity, and close an open code fence.
    body = text[: limit - 8]
    amp = body.rfind("&")
    if amp != -1 and ";" not in body[amp:]:
        body = body[:amp]
    if body.count("```") % 2:
        body += "```"
    return body + "…"


def _status_line(call: ApprovalView) -> str:
    icon = _STATUS_ICON.get(call.status, "")
    if call.is_pending:
        policy = f"policy `{escape(call.policy_mode)}`"
        if call.approvers:
            policy += ", approvers " + ", ".join(approver_markup(a) for a in call.approvers)
        if call.quorum > 1:
            policy += f", {call.quorum} approvals needed"
        if call.four_eyes:
            policy += ", four-eyes"
        glass = ""
        if call.breakglass_open:  # issue 31: the Break glass button is for the requester only (the engine checks)
            glass = f" · :rotating_light: nobody decided in time: {mention(call.requester)} may break glass"
        sentence = escape(outcome_sentence(call))
        for voter in call.void_votes:  # issue 30: "<@U…>'s approval no longer counts: …"
            sentence = sentence.replace(escape(f"{voter}'s approval"), f"{mention(voter)}'s approval")
        return f"{icon} Requested by {mention(call.requester)} · {policy} · {sentence}{glass}"
    return f"{icon} {outcome_markup(call)}"


def outcome_markup(call: ApprovalView) -> str:
    """The outcome sentence, escaped, with the decider shown as a mention when it is a Slack user id."""
    sentence = escape_truncated(outcome_sentence(replace(call, decided_by=_WHO)), 2_500)
    return sentence.replace(_WHO, mention(call.decided_by))


def _decision_buttons(call: ApprovalView, preview_cut: bool = False) -> ActionsBlock:
    aid = call.approval_id
    confirm = None
    if call.destructive and not call.is_review:  # Block Kit's own confirmation dialog, before the click reaches us
        confirm = ConfirmObject(
            title="Run this call?",
            text=f"{call.tool_name[:64]} cannot be undone. Approve it as shown?",
            confirm="Approve",
            deny="Cancel",
            style="danger",
        )
    buttons = [
        ButtonElement(text="Approve", action_id=ACTION_APPROVE, value=aid, style="primary", confirm=confirm),
        ButtonElement(text="Reject", action_id=ACTION_REJECT, value=aid, style="danger"),
    ]
    if call.is_review:
        buttons.append(ButtonElement(text="Edit result", action_id=ACTION_EDIT, value=aid))
    elif _editable_parameters(call):
        buttons.append(ButtonElement(text="Edit", action_id=ACTION_EDIT, value=aid))
    if call.respondable and not call.is_review:  # issue 30: answer in the tool's place
        buttons.append(ButtonElement(text=RESPOND_LABEL, action_id=ACTION_RESPOND, value=aid))
    if call.breakglass_open and not call.is_review:  # issue 31: after the delay, for the requester
        buttons.append(ButtonElement(text="Break glass", action_id=ACTION_BREAKGLASS, value=aid, style="danger"))
    if preview_cut:  # issue 30: the whole preview in a modal
        buttons.append(ButtonElement(text="Show more", action_id=ACTION_SHOW_PREVIEW, value=aid))
    if call.offer_always_allow:  # only in views shown to one admin (their DM, their App Home)
        always = ConfirmObject(
            title="Stop asking here?",
            text=f"Approve this call, and run {call.tool_name[:64]} without asking in this channel from now on "
            "(for calls like this one). The rule change is audited.",
            confirm="Approve and allow",
            deny="Cancel",
        )
        buttons.append(
            ButtonElement(
                text="Approve and always allow here", action_id=ACTION_APPROVE_ALWAYS, value=aid, confirm=always
            )
        )
    return ActionsBlock(block_id=f"cs_actions:{aid}", elements=buttons)


def _approve_all(pending: list[ApprovalView]) -> ActionsBlock:
    first = pending[0].approval_id
    confirm = ConfirmObject(
        title="Approve all?",
        text=f"Run all {len(pending)} waiting calls as shown?",
        confirm="Approve all",
        deny="Cancel",
    )
    button = ButtonElement(
        text=f"Approve all ({len(pending)})",
        action_id=ACTION_APPROVE_ALL,
        value=first,
        style="primary",
        confirm=confirm,
    )
    return ActionsBlock(block_id=f"cs_all:{first}", elements=[button])


def _fallback_text(calls: list[ApprovalView]) -> str:
    pending = [c for c in calls if c.is_pending]
    if not pending:
        return "Approval decided."
    names = ", ".join(sorted({c.tool_name for c in pending}))
    return escape_truncated(f"Approval needed: {names} ({len(pending)} waiting)", 1_000)


# ---------------------------------------------------------------- modals


def reject_modal(call: ApprovalView) -> dict[str, Any]:
    """The Reject modal: the call shown read-only, and optional feedback for the agent."""
    blocks: list[Block] = [
        SectionBlock(text=_call_text(call, 1, 1, 1_500)),
        InputBlock(
            block_id=FEEDBACK_BLOCK,
            label="Feedback for the agent (optional)",
            optional=True,
            element=PlainTextInputElement(
                action_id=FEEDBACK_ACTION, multiline=True, max_length=FEEDBACK_LIMIT, placeholder="Why not?"
            ),
        ),
    ]
    return View(
        type="modal",
        callback_id=REJECT_CALLBACK,
        private_metadata=call.approval_id,
        title="Reject result" if call.is_review else "Reject tool call",
        submit="Reject",
        close="Cancel",
        blocks=blocks,
    ).to_dict()


def respond_modal(call: ApprovalView) -> dict[str, Any]:
    """Issue 30: Respond: the call shown read-only, and the answer the model gets instead of running the tool."""
    return _required_text_modal(
        call,
        callback_id=RESPOND_CALLBACK,
        title="Respond",
        submit="Respond",
        label="Your answer for the agent (the tool will not run)",
        placeholder="e.g. I restarted it by hand",
        max_length=min(FEEDBACK_LIMIT, MAX_RESPONSE_CHARS),
    )


def preview_modal(call: ApprovalView) -> dict[str, Any]:
    """Issue 30: the whole preview of a call (or, re-asked, the approved one and the new one), masked, cut at
    :data:`SHOW_MORE_LIMIT`; read-only."""
    blocks: list[Block] = [SectionBlock(text=MarkdownTextObject(text=f"*{escape_truncated(call.tool_name, 150)}*"))]
    for section in preview_sections(call.preview, SHOW_MORE_LIMIT):
        label = escape_truncated(section.label.capitalize(), 60)
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*{label}*")))
        for chunk in _escaped_chunks(section.text, _MODAL_SECTION_TEXT - 8):
            blocks.append(SectionBlock(text=MarkdownTextObject(text=f"```{chunk}```")))
    return View(
        type="modal",
        callback_id=PREVIEW_CALLBACK,
        private_metadata=call.approval_id,
        title="Preview",
        close="Close",
        blocks=blocks,
    ).to_dict()


def _escaped_chunks(text: str, limit: int) -> list[str]:
    """``text`` escaped for mrkdwn, in pieces of at most ``limit`` characters that never split an entity."""
    chunks, current = [], ""
    for character in text:
        piece = escape(character).replace("`", "'")  # a backtick would close the code block early
        if len(current) + len(piece) > limit:
            chunks.append(current)
            current = ""
        current += piece
    return [*chunks, current] if current or not chunks else chunks


def reason_modal(call: ApprovalView) -> dict[str, Any]:
    """Issue 31: the reason for approving a call whose tool needs one (``justification <tool> required``)."""
    return _required_text_modal(
        call,
        callback_id=REASON_CALLBACK,
        title="Approve with a reason",
        submit="Approve",
        label="Why approve it? (required)",
        placeholder="e.g. ticket OPS-17",
        max_length=FEEDBACK_LIMIT,
    )


def breakglass_modal(call: ApprovalView) -> dict[str, Any]:
    """Issue 31: Break glass: the call shown read-only, and the required reason (it runs once, announced, reviewed)."""
    return _required_text_modal(
        call,
        callback_id=BREAKGLASS_CALLBACK,
        title="Break glass",
        submit="Break glass",
        label="Why can it not wait? (required; announced and reviewed)",
        placeholder="e.g. prod is down, nobody answers",
        max_length=FEEDBACK_LIMIT,
    )


def review_modal(call: ApprovalView) -> dict[str, Any]:
    """Issue 31: Review: Not OK: the call shown read-only, and the required note saying why."""
    return _required_text_modal(
        call,
        callback_id=REVIEW_CALLBACK,
        title="Review: Not OK",
        submit="Not OK",
        label="What was wrong with it? (required)",
        placeholder="e.g. too broad a change; next time call the on-call lead",
        max_length=FEEDBACK_LIMIT,
    )


def _required_text_modal(
    call: ApprovalView, *, callback_id: str, title: str, submit: str, label: str, placeholder: str, max_length: int
) -> dict[str, Any]:
    """A modal showing the call read-only above one required text input (its value arrives as feedback)."""
    blocks: list[Block] = [
        SectionBlock(text=_call_text(call, 1, 1, 1_500)),
        InputBlock(
            block_id=FEEDBACK_BLOCK,
            label=label,
            element=PlainTextInputElement(
                action_id=FEEDBACK_ACTION, multiline=True, max_length=max_length, placeholder=placeholder
            ),
        ),
    ]
    return View(
        type="modal",
        callback_id=callback_id,
        private_metadata=call.approval_id,
        title=title,
        submit=submit,
        close="Cancel",
        blocks=blocks,
    ).to_dict()


def edit_modal(call: ApprovalView) -> dict[str, Any]:
    """The Edit modal: one input per parameter (``block_id`` = parameter name), pre-filled.

    An empty field keeps the current value; that is how secrets (never pre-filled) and values too
    long for a text input stay unchanged. A review gets the Edit result modal instead.
    """
    if call.is_review:
        return result_modal(call)
    intro = (
        f"*{escape_truncated(call.tool_name, 150)}* — {escape_truncated(call.tool_description, 1_000)}\n"
        "Change what should differ; an empty field keeps the current value. "
        "Submitting approves the call with exactly these values."
    )
    inputs = [_edit_input(name, schema, call.arguments) for name, schema in _editable_parameters(call).items()]
    return View(
        type="modal",
        callback_id=EDIT_CALLBACK,
        private_metadata=call.approval_id,
        title="Edit tool call",
        submit="Approve edited",
        close="Cancel",
        blocks=[SectionBlock(text=MarkdownTextObject(text=intro)), *inputs[: MAX_VIEW_BLOCKS - 1]],
    ).to_dict()


def result_modal(call: ApprovalView) -> dict[str, Any]:
    """The Edit result modal: the text the model will see instead of the result, pre-filled as shown."""
    shown, _ = display_result(call, limit=PLAIN_INPUT_LIMIT)
    intro = (
        f"*{escape_truncated(call.tool_name, 150)}* ran. Write what the model should see as its result; "
        "submitting releases exactly this text."
    )
    field = InputBlock(
        block_id=RESULT_BLOCK,
        label="Result for the model",
        element=PlainTextInputElement(
            action_id=EDIT_INPUT_ACTION, multiline=True, max_length=PLAIN_INPUT_LIMIT, initial_value=shown
        ),
    )
    return View(
        type="modal",
        callback_id=EDIT_CALLBACK,
        private_metadata=call.approval_id,
        title="Edit result",
        submit="Release edited",
        close="Cancel",
        blocks=[SectionBlock(text=MarkdownTextObject(text=intro)), field],
    ).to_dict()


def notice_modal(text: str) -> dict[str, Any]:
    """A modal that only says something (replaces a form whose decision was refused)."""
    return View(
        type="modal",
        title="countersign",
        close="Close",
        blocks=[SectionBlock(text=MarkdownTextObject(text=escape_truncated(text, SECTION_TEXT_LIMIT)))],
    ).to_dict()


def _editable_parameters(call: ApprovalView) -> dict[str, dict[str, Any]]:
    properties = call.parameters_schema.get("properties") or {}
    return {name: schema if isinstance(schema, dict) else {} for name, schema in properties.items()}


def _edit_input(name: str, schema: dict[str, Any], arguments: Mapping[str, Any]) -> InputBlock:
    present = name in arguments
    current = arguments.get(name)
    kind = _schema_kind(schema)
    hints = [schema.get("description") or ""]
    # A secret by name, or a value holding one ("curl -H 'Authorization: Bearer …'"), is never pre-filled.
    secret = is_secret_key(name) or (present and mask_for_display(current) != current)
    if secret and present:
        hints.append("Secret: not shown. Leave empty to keep the current value.")
        present = False
    element: Any
    options = _enum_options(schema, kind)
    if options is not None:
        initial = next((o for o in options if present and o.value == json.dumps(current)), None)
        element = StaticSelectElement(action_id=EDIT_INPUT_ACTION, options=options, initial_option=initial)
    elif kind in ("integer", "number"):
        element = NumberInputElement(
            action_id=EDIT_INPUT_ACTION,
            is_decimal_allowed=kind == "number",
            initial_value=current if present and isinstance(current, int | float) else None,
            min_value=schema.get("minimum"),
            max_value=schema.get("maximum"),
        )
    else:
        text = value_text(current) if present else None
        if kind in ("array", "object") and present:
            text = json.dumps(current, indent=2, ensure_ascii=False)
            hints.append("JSON.")
        if text is not None and len(text) > PLAIN_INPUT_LIMIT:
            hints.append(f"The current value ({len(text)} characters) is too long to edit here; empty keeps it.")
            text = None
        element = PlainTextInputElement(
            action_id=EDIT_INPUT_ACTION,
            initial_value=text,
            multiline=kind in ("array", "object") or (text is not None and (len(text) > 80 or "\n" in text)),
            max_length=PLAIN_INPUT_LIMIT,
        )
    hint = " ".join(h for h in hints if h)[:2_000] or None
    return InputBlock(block_id=name, label=name[:2_000], element=element, hint=hint, optional=True)


def _schema_kind(schema: dict[str, Any]) -> str | None:
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    if kind is None and "anyOf" in schema:
        kinds = [s.get("type") for s in schema["anyOf"] if isinstance(s, dict) and s.get("type") != "null"]
        kind = kinds[0] if len(kinds) == 1 else None
    return kind


def _enum_options(schema: dict[str, Any], kind: str | None) -> list[Option] | None:
    values = schema.get("enum")
    if values is None and kind == "boolean":
        values = [True, False]
    if not isinstance(values, list) or not values or len(values) > 100:
        return None
    options = []
    for value in values:
        encoded = json.dumps(value, ensure_ascii=False)
        if len(encoded) > 150:
            return None  # Slack caps option values; fall back to a text input
        label = value_text(value)
        options.append(Option(text=label[:75] or " ", value=encoded))
    return options


class FormError(ValueError):
    """A submitted modal whose values cannot be read; ``errors`` maps input block ids to a message."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = dict(errors)


NOT_OFFERED = "choose one of the offered options"
UNREADABLE_FIELD = "this value could not be read; enter it again"


def edit_values(state_values: Any, view: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The raw values of a submitted Edit modal, by parameter; empty fields are left out, except a field
    the modal showed prefilled (with ``view``), which the person cleared: it is ``CLEARED``.

    Select values come back as the JSON they were encoded with; everything else as the typed string,
    which the engine coerces by the tool's schema. With the submitted ``view``, a selected option the
    modal never offered is refused. Raises :class:`FormError` for values that cannot be read.
    """
    if not isinstance(state_values, Mapping):
        raise FormError({"_": "the form's values could not be read"})
    edited: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for block_id, actions in state_values.items():
        state = actions.get(EDIT_INPUT_ACTION) if isinstance(actions, Mapping) else None
        if not isinstance(state, Mapping):
            continue
        selected = state.get("selected_option")
        value = state.get("value")
        if selected is not None:
            option = selected.get("value") if isinstance(selected, Mapping) else None
            offered = _offered_values(view, block_id)
            if not isinstance(option, str) or (offered is not None and option not in offered):
                errors[block_id] = NOT_OFFERED
                continue
            try:
                edited[block_id] = json.loads(option)
            except ValueError:
                errors[block_id] = NOT_OFFERED
        elif isinstance(value, str) and value != "":
            edited[block_id] = value
        elif value is not None and not isinstance(value, str):
            errors[block_id] = UNREADABLE_FIELD
        elif _was_prefilled(view, block_id):
            edited[block_id] = CLEARED  # emptied: the engine refuses it if required, else defaults or drops it
    if errors:
        raise FormError(errors)
    return edited


def _was_prefilled(view: Mapping[str, Any] | None, block_id: str) -> bool:
    """Whether the modal showed ``block_id``'s input with a value in it (``False`` without a view)."""
    for block in _blocks_of(view or {}):
        element = block.get("element")
        if block.get("block_id") == block_id and isinstance(element, Mapping):
            return element.get("initial_value") not in (None, "") or element.get("initial_option") is not None
    return False


def _offered_values(view: Mapping[str, Any] | None, block_id: str) -> set[str] | None:
    """The option values the modal showed for ``block_id`` (empty if none); ``None`` without a view."""
    if view is None:
        return None
    for block in _blocks_of(view):
        element = block.get("element")
        if block.get("block_id") == block_id and isinstance(element, Mapping):
            options = element.get("options")
            if isinstance(options, list):
                return {o["value"] for o in options if isinstance(o, Mapping) and isinstance(o.get("value"), str)}
    return set()


def _blocks_of(view: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    blocks = view.get("blocks")
    return [b for b in blocks if isinstance(b, Mapping)] if isinstance(blocks, list) else []


def feedback_value(state_values: Any) -> str | None:
    """The feedback typed into the Reject modal, or ``None``."""
    block = state_values.get(FEEDBACK_BLOCK) if isinstance(state_values, Mapping) else None
    field = block.get(FEEDBACK_ACTION) if isinstance(block, Mapping) else None
    value = field.get("value") if isinstance(field, Mapping) else None
    return value.strip() or None if isinstance(value, str) else None


def input_block_ids(view: Mapping[str, Any]) -> list[str]:
    """The block ids of the modal's input blocks (where field errors can be shown)."""
    return [b["block_id"] for b in _blocks_of(view) if b.get("type") == "input" and isinstance(b.get("block_id"), str)]


def field_errors(errors: Mapping[str, str], view: Mapping[str, Any]) -> dict[str, str]:
    """Map engine field errors onto the modal's input block ids (unknown fields go to the first input)."""
    input_ids = input_block_ids(view)
    mapped: dict[str, str] = {}
    for name, message in errors.items():
        target = name if name in input_ids else (input_ids[0] if input_ids else name)
        prefix = "" if target == name else f"{name}: "
        mapped[target] = (mapped.get(target, "") + " " + prefix + message).strip()[:2_000]
    return mapped


# ---------------------------------------------------------------- App Home


def home_view(
    pending: Sequence[ApprovalView], policies: Sequence[Mapping[str, Any]], notice: str | None = None
) -> dict[str, Any]:
    """The App Home tab: approvals this person may decide (with buttons), then the policy table."""
    blocks: list[Block] = []
    if notice:
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f":warning: {escape_truncated(notice, 2_900)}")))
    blocks.append(HeaderBlock(text="Approvals waiting for you"))
    policy_blocks = _policy_blocks(policies)
    room = MAX_VIEW_BLOCKS - len(blocks) - len(policy_blocks) - 2
    calls = list(pending)
    fits = min(len(calls), room // _COMPACT_CALL_BLOCKS)
    for i, call in enumerate(calls[:fits]):
        blocks.extend(_compact_call(call, i + 1, 600))
    if not calls:
        blocks.append(SectionBlock(text=MarkdownTextObject(text="_Nothing is waiting for you._")))
    elif fits < len(calls):
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"…and {len(calls) - fits} more.")))
    blocks.append(DividerBlock())
    blocks.extend(policy_blocks)
    return View(type="home", blocks=blocks).to_dict()


def _policy_blocks(policies: Sequence[Mapping[str, Any]]) -> list[Block]:
    blocks: list[Block] = [HeaderBlock(text="Policies")]
    if not policies:
        blocks.append(SectionBlock(text=MarkdownTextObject(text="_No policies set: every tool asks._")))
        return blocks
    columns = ("scope", "tool", "mode", "approvers", "quorum", "four_eyes", "ttl")
    rows = [[_cell(row.get(c)) for c in columns[:-1]] + [_ttl(row.get("ttl_seconds"))] for row in policies]
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    chunk: list[str] = []
    for line in [escape(line) for line in lines]:
        if sum(len(x) + 1 for x in chunk) + len(line) > SECTION_TEXT_LIMIT - 10:
            blocks.append(SectionBlock(text=MarkdownTextObject(text="```" + "\n".join(chunk) + "```")))
            chunk = []
        chunk.append(line[: SECTION_TEXT_LIMIT - 10])
        if len(blocks) >= 20:
            break
    if chunk:
        blocks.append(SectionBlock(text=MarkdownTextObject(text="```" + "\n".join(chunk) + "```")))
    return blocks


def _ttl(seconds: Any) -> str:
    return format_duration(seconds) if isinstance(seconds, int) and seconds > 0 else "-"


def _cell(value: Any) -> str:
    if value is None:
        return "-"  # not set by this rule: inherited
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(group_label(str(v)) for v in value) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)[:80]
