"""Slack rendering: escaping, mrkdwn, message splitting, Block Kit approvals, modals and the Home tab.

Every payload is checked with ``slack_sdk``'s model classes and Slack's limits.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from slack_sdk.errors import SlackObjectFormationError

from adapters.slack.blocks import (
    approval_message,
    blocks_size,
    edit_modal,
    edit_values,
    feedback_value,
    field_errors,
    home_view,
    notice_modal,
    reject_modal,
)
from adapters.slack.mrkdwn import escape, escape_truncated, markdown_to_mrkdwn, mention, split_message
from bot.engine.model import ApprovalView, ThreadRef
from tests.fakes.slack_stack import (
    all_text,
    assert_valid_message_blocks,
    assert_valid_view,
    button_values,
    buttons,
)

HOSTILE = "<!channel> <!here> <@U123> <http://evil|click> & <#C1>"
NOW = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def approval(number: int = 1, **changes: Any) -> ApprovalView:
    """A realistic pending approval of ``deploy``."""
    view = ApprovalView(
        approval_id=f"{number:032x}",
        run_id="run-1",
        thread=ThreadRef("slack", "T0TEAM", "C0OPS", "1710000000.000100"),
        tool_name="deploy",
        tool_description="Deploy a service to an environment.",
        arguments={"service": "api", "replicas": 3, "env": "prod"},
        parameters_schema={
            "type": "object",
            "properties": {
                "service": {"type": "string", "description": "Service name."},
                "replicas": {"type": "integer", "minimum": 1},
                "ratio": {"type": "number"},
                "env": {"type": "string", "enum": ["staging", "prod"]},
                "dry_run": {"type": "boolean"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "api_token": {"type": "string"},
            },
            "required": ["service"],
        },
        requester="U0ALICE",
        policy_mode="always",
        approvers=(),
        quorum=1,
        four_eyes=False,
        votes=(),
        created_at=NOW,
        expires_at=NOW + timedelta(hours=4),
    )
    return replace(view, **changes)


def inputs(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {b["block_id"]: b for b in view["blocks"] if b["type"] == "input"}


# ---------------------------------------------------------------------- escaping and mrkdwn


def test_escaping_renders_pings_mentions_and_links_inert() -> None:
    escaped = escape(HOSTILE)
    assert "<" not in escaped and ">" not in escaped
    assert escaped == "&lt;!channel&gt; &lt;!here&gt; &lt;@U123&gt; &lt;http://evil|click&gt; &amp; &lt;#C1&gt;"


def test_escaping_with_truncation_never_cuts_an_entity_in_half() -> None:
    for limit in range(2, 30):
        cut = escape_truncated("<<<<<<<<<<&&&&&&&&", limit)
        assert len(cut) <= limit
        body = cut.removesuffix("…")
        assert body.replace("&lt;", "").replace("&amp;", "") == ""


def test_only_well_formed_user_ids_become_mentions() -> None:
    assert mention("U0ALICE") == "<@U0ALICE>"
    assert mention("W0GRID") == "<@W0GRID>"
    assert mention("<!channel>") == "&lt;!channel&gt;"
    assert mention("U0ALICE> <!here") == "U0ALICE&gt; &lt;!here"
    assert mention(None) == "someone"


def test_markdown_becomes_mrkdwn_and_links_show_where_they_point() -> None:
    text = "# Plan\n**Bold** and *italic* and ~~gone~~\n- one\n* two\n[click here](http://evil.example)\n> quoted"
    assert markdown_to_mrkdwn(text) == (
        "*Plan*\n*Bold* and _italic_ and ~gone~\n• one\n• two\nclick here (http://evil.example)\n>quoted"
    )


def test_code_is_kept_literal_but_still_escaped() -> None:
    text = "run `rm **x** <!here>`\n```\n**not bold** <!channel>\n```"
    assert markdown_to_mrkdwn(text) == "run `rm **x** &lt;!here&gt;`\n```\n**not bold** &lt;!channel&gt;\n```"


def test_model_text_cannot_ping_or_forge_a_link() -> None:
    rendered = markdown_to_mrkdwn(HOSTILE + " [safe](http://evil) <https://x.io|bank>")
    assert "<" not in rendered and ">" not in rendered


def test_long_text_is_split_at_paragraphs_within_the_limit() -> None:
    paragraphs = [f"para {i} " + "lorem ipsum &amp; " * 30 for i in range(20)]
    text = "\n\n".join(paragraphs)
    chunks = split_message(text, limit=1_000)
    assert all(len(c) <= 1_000 for c in chunks)
    assert "\n\n".join(chunks) == text


def test_splitting_never_breaks_an_entity_and_reopens_code_fences() -> None:
    text = "```\n" + "&lt;" * 900 + "\n```"
    chunks = split_message(text, limit=1_000)
    assert len(chunks) >= 4 and all(len(c) <= 1_000 for c in chunks)
    for chunk in chunks:
        assert chunk.startswith("```") and chunk.endswith("```")
        assert chunk.strip("`\n").replace("&lt;", "") == ""


def test_a_word_longer_than_the_limit_is_cut_hard() -> None:
    chunks = split_message("x" * 2_500, limit=1_000)
    assert "".join(chunks) == "x" * 2_500 and all(len(c) <= 1_000 for c in chunks)


# ---------------------------------------------------------------------- the approval message


def test_one_pending_call_shows_tool_arguments_requester_policy_expiry_and_three_buttons() -> None:
    message = approval_message([approval()])

    assert_valid_message_blocks(message.blocks)
    shown = all_text(message.blocks)
    for expected in (
        "deploy",
        "Deploy a service",
        "api",
        "replicas",
        "prod",
        "<@U0ALICE>",
        "`always`",
        "2026-03-02 13:00",
    ):
        assert expected in shown
    aid = approval().approval_id
    assert [b["action_id"] for b in _buttons(message.blocks)] == ["cs_approve", "cs_reject", "cs_edit"]
    assert {b["value"] for b in _buttons(message.blocks)} == {aid}
    assert button_values(message.blocks, "cs_approve_all") == []
    assert "deploy" in message.text


def test_several_calls_get_approve_all_and_unique_block_ids() -> None:
    calls = [approval(i) for i in range(1, 4)]
    message = approval_message(calls)

    assert_valid_message_blocks(message.blocks)
    assert button_values(message.blocks, "cs_approve") == [c.approval_id for c in calls]
    assert button_values(message.blocks, "cs_approve_all") == [calls[0].approval_id]
    block_ids = [b["block_id"] for b in message.blocks if "block_id" in b]
    assert len(block_ids) == len(set(block_ids))


def test_secrets_are_masked_and_untrusted_text_escaped() -> None:
    hostile = approval(
        tool_description=HOSTILE,
        arguments={"service": HOSTILE, "api_token": "sk-live-123", "nested": {"password": "hunter2"}},
    )
    message = approval_message([hostile])

    assert_valid_message_blocks(message.blocks)
    text = json.dumps(message.blocks)
    assert "sk-live-123" not in text and "hunter2" not in text
    assert "<!channel>" not in text and "<@U123>" not in text and "<http://evil" not in text


def test_a_ten_kilobyte_argument_is_truncated_and_says_so() -> None:
    message = approval_message([approval(arguments={"service": "y" * 10_240})])

    assert_valid_message_blocks(message.blocks)
    shown = all_text(message.blocks)
    assert "y" * 10_240 not in shown and "chars)" in shown


def test_many_large_calls_stay_within_the_size_budget_with_every_call_shown() -> None:
    calls = [approval(i, arguments={"service": "z" * 10_240, "env": "<&>" * 2_000}) for i in range(1, 11)]
    message = approval_message(calls)

    assert_valid_message_blocks(message.blocks)
    assert blocks_size(message.blocks) <= 12_000
    assert button_values(message.blocks, "cs_approve") == [c.approval_id for c in calls]


def test_too_many_calls_for_fifty_blocks_collapse_and_withhold_approve_all() -> None:
    calls = [approval(i) for i in range(1, 61)]
    message = approval_message(calls)

    assert_valid_message_blocks(message.blocks)
    assert len(message.blocks) <= 50
    shown = button_values(message.blocks, "cs_approve")
    assert 10 <= len(shown) < 60
    assert f"and {60 - len(shown)} more calls" in all_text(message.blocks)
    assert button_values(message.blocks, "cs_approve_all") == []  # nobody approves what they cannot see


def test_a_dozen_calls_are_all_shown_with_approve_all() -> None:
    calls = [approval(i) for i in range(1, 13)]
    message = approval_message(calls)

    assert_valid_message_blocks(message.blocks)
    assert button_values(message.blocks, "cs_approve") == [c.approval_id for c in calls]
    assert button_values(message.blocks, "cs_approve_all") == [calls[0].approval_id]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"status": "approved", "decided_by": "U0BOB"}, "Approved by <@U0BOB> at 2026-03-02 10:00 UTC."),
        (
            {"status": "rejected", "decided_by": "U0BOB", "feedback": "no <!here>"},
            "Rejected by <@U0BOB> at 2026-03-02 10:00 UTC. Feedback: no &lt;!here&gt;",
        ),
        (
            {"status": "modified", "decided_by": "U0BOB", "final_arguments": {"service": "api", "replicas": 5}},
            "Edited and approved by <@U0BOB> at 2026-03-02 10:00 UTC: replicas=5.",
        ),
        ({"status": "expired"}, "Expired without a decision at 2026-03-02 10:00 UTC"),
        ({"status": "superseded"}, "Superseded by a newer message"),
        ({"status": "cancelled"}, "Cancelled; the call was not run."),
        ({"status": "approved", "decided_by": "<!channel>"}, "Approved by &lt;!channel&gt;"),
    ],
)
def test_decided_calls_lose_their_buttons_and_show_their_outcome(changes: dict[str, Any], expected: str) -> None:
    decided = approval(decided_at=NOW + timedelta(hours=1), **changes)
    message = approval_message([decided, approval(2)])

    assert_valid_message_blocks(message.blocks)
    assert expected in all_text(message.blocks)
    assert button_values(message.blocks, "cs_approve") == [approval(2).approval_id]
    assert button_values(message.blocks, "cs_approve_all") == []  # one waiting call left


def test_quorum_progress_is_shown_while_waiting() -> None:
    message = approval_message([approval(quorum=2, votes=("U0BOB",), four_eyes=True)])
    shown = all_text(message.blocks)
    assert "2 approvals needed" in shown and "four-eyes" in shown and "(1/2 approvals)" in shown


# ---------------------------------------------------------------------- modals


def test_the_edit_modal_has_one_typed_prefilled_input_per_parameter() -> None:
    call = approval(
        arguments={
            "service": "api",
            "replicas": 3,
            "ratio": 0.5,
            "env": "prod",
            "dry_run": False,
            "tags": ["a", "b"],
            "api_token": "sk-live-123",
        }
    )
    view = edit_modal(call)

    assert_valid_view(view)
    assert view["private_metadata"] == call.approval_id and view["callback_id"] == "cs_edit_modal"
    fields = inputs(view)
    assert list(fields) == list(call.parameters_schema["properties"])
    assert all(f["optional"] for f in fields.values())
    assert fields["service"]["element"] == {
        **fields["service"]["element"],
        "type": "plain_text_input",
        "initial_value": "api",
    }
    assert fields["replicas"]["element"]["type"] == "number_input"
    assert fields["replicas"]["element"]["is_decimal_allowed"] is False
    assert fields["replicas"]["element"]["initial_value"] == "3" and fields["replicas"]["element"]["min_value"] == "1"
    assert fields["ratio"]["element"]["is_decimal_allowed"] is True
    assert fields["env"]["element"]["type"] == "static_select"
    assert fields["env"]["element"]["initial_option"]["text"]["text"] == "prod"
    assert fields["dry_run"]["element"]["type"] == "static_select"
    assert fields["dry_run"]["element"]["initial_option"]["value"] == "false"
    assert fields["tags"]["element"]["multiline"] is True
    assert json.loads(fields["tags"]["element"]["initial_value"]) == ["a", "b"]
    assert fields["note"]["element"]["type"] == "plain_text_input"
    assert "initial_value" not in fields["api_token"]["element"]  # a secret is never shown
    assert "sk-live-123" not in json.dumps(view)


def test_a_value_too_long_for_a_text_input_is_not_prefilled_and_kept_when_left_empty() -> None:
    view = edit_modal(approval(arguments={"service": "q" * 10_240}))

    assert_valid_view(view)
    service = inputs(view)["service"]
    assert "initial_value" not in service["element"]
    assert "too long" in service["hint"]["text"]


def test_submitted_edit_values_come_back_raw_and_empty_fields_are_left_out() -> None:
    view = edit_modal(approval())
    env_options = inputs(view)["env"]["element"]["options"]
    state = {
        "service": {"value": {"type": "plain_text_input", "value": "web"}},
        "replicas": {"value": {"type": "number_input", "value": "7"}},
        "env": {"value": {"type": "static_select", "selected_option": env_options[0]}},
        "dry_run": {"value": {"type": "static_select", "selected_option": {"value": "true"}}},
        "tags": {"value": {"type": "plain_text_input", "value": None}},
        "note": {"value": {"type": "plain_text_input", "value": ""}},
    }
    assert edit_values(state) == {"service": "web", "replicas": "7", "env": "staging", "dry_run": True}


def test_engine_field_errors_land_on_their_inputs() -> None:
    view = edit_modal(approval())
    errors = field_errors({"replicas": "must be a whole number", "_": "cannot be edited"}, view)
    assert errors == {"replicas": "must be a whole number", "service": "_: cannot be edited"}


def test_the_reject_modal_carries_the_approval_id_and_optional_feedback() -> None:
    call = approval(arguments={"service": HOSTILE})
    view = reject_modal(call)

    assert_valid_view(view)
    assert view["private_metadata"] == call.approval_id and view["callback_id"] == "cs_reject_modal"
    assert inputs(view)["cs_feedback"]["optional"] is True
    assert "<!channel>" not in json.dumps(view)
    typed = {"cs_feedback": {"feedback": {"type": "plain_text_input", "value": "  use staging  "}}}
    assert feedback_value(typed) == "use staging"
    assert feedback_value({"cs_feedback": {"feedback": {"type": "plain_text_input", "value": None}}}) is None
    assert feedback_value({}) is None


def test_the_notice_modal_escapes_its_text() -> None:
    view = notice_modal("This approval was already approved by <!channel>.")
    assert_valid_view(view)
    assert "&lt;!channel&gt;" in all_text(view["blocks"])


# ---------------------------------------------------------------------- App Home


def test_the_home_view_fits_a_hundred_blocks_with_many_approvals_and_policies() -> None:
    pending = [approval(i) for i in range(1, 80)]
    policies = [
        {
            "scope": f"channel:slack:T0TEAM:C{i}",
            "tool": "deploy",
            "mode": "always",
            "approvers": ["U0BOB"],
            "quorum": 2,
            "four_eyes": True,
            "ttl_seconds": 7200,
        }
        for i in range(200)
    ]
    view = home_view(pending, policies, notice=HOSTILE)

    assert_valid_view(view)
    assert len(view["blocks"]) <= 100
    shown = all_text(view["blocks"])
    assert "more." in shown and "2h" in shown and "&lt;!channel&gt;" in shown


def _buttons(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for b in blocks if b["type"] == "actions" for e in b["elements"]]


def test_the_payload_validator_itself_rejects_what_slack_would() -> None:
    section = {"type": "section", "text": {"type": "mrkdwn", "text": "ok"}}
    assert_valid_message_blocks([section])
    too_long = {"type": "section", "text": {"type": "mrkdwn", "text": "x" * 3_001}}
    button = {"type": "button", "text": {"type": "plain_text", "text": "Go"}, "action_id": "a", "value": "v" * 2_001}
    for bad in ([too_long], [section] * 51, [{"type": "actions", "elements": [button]}]):
        with pytest.raises((AssertionError, SlackObjectFormationError)):
            assert_valid_message_blocks(bad)


def test_approvers_show_people_as_mentions_and_groups_by_name_without_pinging_them() -> None:
    message = approval_message([approval(approvers=("group:oncall", "usergroup:S0SRE|@sre", "U0BEN"))])
    shown = all_text(message.blocks)
    assert "approvers @oncall, @sre, <@U0BEN>" in shown
    assert "subteam" not in json.dumps(message.blocks)


def test_approve_asks_for_confirmation_only_for_a_destructive_tool() -> None:
    plain_message = approval_message([approval()])
    destructive = approval_message([approval(destructive=True)])

    def approve_button(message) -> dict[str, Any]:
        [button] = [b for b in buttons(message.blocks) if b["action_id"] == "cs_approve"]
        return button

    assert "confirm" not in approve_button(plain_message)
    confirm = approve_button(destructive)["confirm"]
    assert confirm["title"]["text"] == "Run this call?" and confirm["confirm"]["text"] == "Approve"
    assert "cannot be undone" in confirm["text"]["text"]
    assert_valid_message_blocks(destructive.blocks)


def test_approve_and_always_allow_appears_only_in_a_view_offered_to_an_admin() -> None:
    def actions(view: ApprovalView) -> list[str]:
        return [b["action_id"] for b in buttons(approval_message([view]).blocks)]

    assert "cs_approve_always" not in actions(approval())
    offered = approval_message([approval(offer_always_allow=True)])
    [always] = [b for b in buttons(offered.blocks) if b["action_id"] == "cs_approve_always"]
    assert always["text"]["text"] == "Approve and always allow here" and "confirm" in always
    assert_valid_message_blocks(offered.blocks)
