"""Secrets are masked by value wherever an approval, a tool result or an answer is shown.

``bot.redaction.mask_text`` spots secrets in free text (``key=value``, bearer credentials, well-known
token formats); every surface (Slack, Teams, console) and the ``audit`` admin command go through it.
Storage and the tool keep the full value.
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest
from rich.console import Console

from adapters.console.surface import ConsoleSurface, approval_panel
from adapters.slack.blocks import approval_message, edit_modal, home_view
from adapters.slack.surface import SlackSurface, web_client
from adapters.teams.cards import approval_card, form_fields
from adapters.teams.text import markdown_message, plain_message
from bot.engine.model import REJECTED, AdminRequest, ApprovalView, ThreadRef
from bot.engine.presentation import display_arguments, outcome_sentence
from bot.redaction import MASK, mask_for_display, mask_text
from tests.fakes.engine_kit import ADMIN, CHANNEL, PLATFORM, REQUESTER, WORKSPACE, asks_for
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_stack import all_text
from tests.fakes.teams_stack import texts_of

OPENAI_KEY = "sk-proj-Q2x9LmT4vB7nR1cW8zK3pJ6hY0aE5sD"
SLACK_TOKEN = "xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOp"
GITHUB_TOKEN = "ghp_aB3dE6gH9jK2mN5pQ8sT1vW4yZ7bC0eF3hJ6"
GITHUB_PAT = "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCD"
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dBjftJeZ4CVPmB92K27uhbUJU1p1r_wW1gFWFOEjXk"
COMMAND = f"curl -H 'Authorization: Bearer {OPENAI_KEY}' https://api.example.com/v1/models"
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


# --- mask_text: what counts as a secret ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (f"export OPENAI_API_KEY={OPENAI_KEY}", OPENAI_KEY),
        ("api_key=s3cr3t-value&page=2", "s3cr3t-value"),
        ("password: hunter2", "hunter2"),
        ("db.password = 'correct horse battery'", "correct horse battery"),
        ('{"client_secret": "abc123def", "user": "bob"}', "abc123def"),
        ("token=abc", "abc"),
        ("SLACK_BOT_TOKEN: 'plain'", "plain"),
        ("Authorization: Bearer abc.def.ghi", "abc.def.ghi"),
        ("authorization=Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("send it with bearer 9f8e7d6c5b4a", "9f8e7d6c5b4a"),
        (f"the key is {OPENAI_KEY}.", OPENAI_KEY),
        ("old key sk-abcdefghijklmnopqrstuvwxyz012345", "sk-abcdefghijklmnopqrstuvwxyz012345"),
        (f"use {SLACK_TOKEN} for the bot", SLACK_TOKEN),
        ("app token xapp-1-A0123456789-1234567890-abcdef", "xapp-1-A0123456789-1234567890-abcdef"),
        (f"git clone https://{GITHUB_TOKEN}@github.com/o/r", GITHUB_TOKEN),
        (f"GH={GITHUB_PAT}", GITHUB_PAT),
        (f"aws id {AWS_KEY} in us-east-1", AWS_KEY),
        (f"cookie jwt {JWT}", JWT),
        ("postgres://app:pa55w0rd@db.internal:5432/prod", "pa55w0rd"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----", "MIIEowIBAAKCAQEA"),
    ],
)
def test_secret_values_in_text_are_masked_and_the_rest_stays(text, secret):
    masked = mask_text(text)

    assert secret not in masked
    assert MASK in masked


def test_keys_and_surrounding_words_stay_readable():
    assert mask_text("curl -H 'Authorization: Bearer abc.def.ghi' https://x.io?api_key=s3cr3t&page=2") == (
        f"curl -H 'Authorization: Bearer {MASK}' https://x.io?api_key={MASK}&page=2"
    )
    assert mask_text(f"set GITHUB_TOKEN={GITHUB_TOKEN} and retry") == f"set GITHUB_TOKEN={MASK} and retry"


@pytest.mark.parametrize(
    "text",
    [
        "Deleted old.log and 3 other files in /var/log/nginx/; 1,500 tokens used.",
        "The deploy of api v2.3.1 to prod finished at 14:05 UTC: 3/3 replicas healthy.",
        "Request 123e4567-e89b-12d3-a456-426614174000 failed; see commit 3f2a9c1d4e5b6a7c8d9e0f1a2b3c4d5e6f7a8b9c.",
        "Token: expired. Password: required. Secret: not shown. Auth: failed.",
        "max_tokens=1024 token_count=17 author: alice, authority=dns",
        "C:\\Users\\ana\\Documents\\report-2026.pdf and ~/src/countersign/bot/redaction.py",
        "The bearer of bad news; ask the task-manager about sk-learn or the risk-free rate.",
        "https://example.com/docs?page=2&sort=desc and mailto:ana@example.com",
        "password reset emails go out at 9; the api_key field is optional",
    ],
)
def test_ordinary_text_is_left_alone(text):
    assert mask_text(text) == text


@pytest.mark.parametrize("text", ["a." * 50_000, "token-" * 20_000, "x" * 100_000, "http://a:" * 10_000])
def test_long_hostile_text_is_scanned_in_linear_time(text):
    # A quadratic pattern would take minutes on these; the suite would notice.
    assert mask_text(text) == text


def test_a_huge_value_is_masked_where_it_is_shown_and_keeps_its_length_note():
    [shown] = display_arguments({"blob": "token=abc123 " + "x" * 5_000_000}, limit=100)

    assert shown.text.startswith(f"token={MASK} xxx") and "abc123" not in shown.text
    assert shown.truncated and shown.text.endswith("chars)")


def test_mask_for_display_masks_by_name_and_by_value_at_any_depth():
    value = {"password": "x", "steps": [{"run": f"export TOKEN={OPENAI_KEY}"}], "count": 3}

    assert mask_for_display(value) == {"password": MASK, "steps": [{"run": f"export TOKEN={MASK}"}], "count": 3}


# --- presentation: what every surface renders -------------------------------------------------------


def approval(**changes) -> ApprovalView:
    fields = dict(
        approval_id="0" * 31 + "1",
        run_id="run-1",
        thread=ThreadRef("slack", "T0TEAM", "C0OPS", "1710000000.000100"),
        tool_name="run_command",
        tool_description="Run a shell command.",
        arguments={"command": COMMAND, "env": {"vars": [f"AWS_ACCESS_KEY_ID={AWS_KEY}"]}},
        parameters_schema={
            "type": "object",
            "properties": {"command": {"type": "string"}, "env": {"type": "object"}},
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
    fields.update(changes)
    return ApprovalView(**fields)


def test_display_arguments_mask_secrets_inside_values():
    command, env = display_arguments(approval().arguments)

    assert command.text == f"curl -H 'Authorization: Bearer {MASK}' https://api.example.com/v1/models"
    assert AWS_KEY not in env.text and MASK in env.text


def test_feedback_and_edits_in_the_outcome_sentence_are_masked():
    rejected = approval(status=REJECTED, decided_by="U0BOB", decided_at=NOW, feedback=f"use {GITHUB_TOKEN} instead")
    edited = approval(
        status="modified", decided_by="U0BOB", decided_at=NOW, final_arguments={"command": f"deploy --token={JWT}"}
    )

    assert GITHUB_TOKEN not in outcome_sentence(rejected) and MASK in outcome_sentence(rejected)
    assert JWT not in outcome_sentence(edited) and "deploy --token=" + MASK in outcome_sentence(edited)


# --- Slack -----------------------------------------------------------------------------------------


def test_slack_approval_message_home_tab_and_edit_modal_mask_secret_values():
    view = approval()
    shown = json.dumps(approval_message([view]).blocks) + json.dumps(home_view([view], []))
    modal = json.dumps(edit_modal(view))

    assert OPENAI_KEY not in shown and AWS_KEY not in shown
    assert "Authorization: Bearer " + MASK in all_text(approval_message([view]).blocks)
    assert OPENAI_KEY not in modal and AWS_KEY not in modal, "an input is never pre-filled with a secret"
    assert view.arguments["command"] == COMMAND, "the approval keeps the full value"


async def test_slack_answers_and_notes_are_posted_with_secrets_masked():
    async with FakeSlackAPI() as slack:
        surface = SlackSurface(web_client("xoxb-test-token", slack.base_url))
        thread = ThreadRef("slack", "T0TEAM", "C0OPS", "1710000000.000100")

        await surface.post_reply(thread, f"Done. The new key is `{OPENAI_KEY}`; the old one was {SLACK_TOKEN}.")
        await surface.tell_user(thread, "U0ALICE", f"Your token ghp is {GITHUB_TOKEN}")

    posted = [call.args.get("text", "") for call in slack.calls_to("chat.postMessage")]
    noted = [call.args.get("text", "") for call in slack.calls_to("chat.postEphemeral")]
    assert posted and noted
    assert all(s not in text for s in (OPENAI_KEY, SLACK_TOKEN) for text in posted)
    assert MASK in posted[0] and "Done. The new key is" in posted[0]
    assert GITHUB_TOKEN not in noted[0] and MASK in noted[0]


# --- Teams -----------------------------------------------------------------------------------------


def test_teams_card_and_edit_form_mask_secret_values():
    view = approval(thread=ThreadRef("teams", "tenant", "19:c@thread.tacv2", "19:c@thread.tacv2;messageid=1"))
    card = approval_card([view])
    text = json.dumps(card)

    assert OPENAI_KEY not in text and AWS_KEY not in text
    assert any(f"Authorization: Bearer {MASK}" in t for t in texts_of(card))
    fields = {f.name: f for f in form_fields(view)}
    assert fields["command"].kind == "secret" and fields["command"].prefill == ""


def test_teams_answers_and_notes_mask_secret_values():
    answer = markdown_message(f"Here is **the key**: {OPENAI_KEY}")
    note = plain_message(f"password: hunter2 was refused ({AWS_KEY})")

    assert OPENAI_KEY not in answer and MASK in answer and "**the key**" in answer
    assert "hunter2" not in note and AWS_KEY not in note


# --- console ---------------------------------------------------------------------------------------


def screen() -> tuple[ConsoleSurface, io.StringIO]:
    buffer = io.StringIO()
    console = Console(file=buffer, width=200, color_system=None)
    return ConsoleSurface(console, thread=ThreadRef("console", "local", "console", "ops")), buffer


async def test_the_console_masks_secret_values_in_answers_notes_and_approval_panels():
    surface, buffer = screen()
    here = ThreadRef("console", "local", "console", "ops")

    await surface.post_reply(here, f"I read the file: DATABASE_PASSWORD=s3cr3t-Pa55 and {JWT}")
    await surface.tell_user(here, "ana", f"retry with {SLACK_TOKEN}")
    surface.console.print(approval_panel(approval(thread=here)))

    shown = buffer.getvalue()
    for secret in ("s3cr3t-Pa55", JWT, SLACK_TOKEN, OPENAI_KEY, AWS_KEY):
        assert secret not in shown
    assert "DATABASE_PASSWORD=" + MASK in shown and "Authorization: Bearer " + MASK in shown


# --- the audit admin command -----------------------------------------------------------------------


async def test_the_audit_command_masks_a_secret_someone_typed_into_a_command(harnesses):
    h = await harnesses.open()
    # A token pasted where a tool name belongs, by someone who may not change policies: refused, audited.
    await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, REQUESTER, f"policy set {GITHUB_TOKEN} always"))

    answer = await h.engine.admin(AdminRequest(PLATFORM, WORKSPACE, CHANNEL, ADMIN, "audit"))

    assert "policy change refused" in answer
    assert GITHUB_TOKEN not in answer and MASK in answer
    [entry] = await h.audit()
    assert entry.subject == GITHUB_TOKEN, "the audit log itself keeps what happened"


async def test_the_tool_still_gets_the_full_value(harnesses):
    h = await harnesses.open(replies=[asks_for("set_secret", name="ci", api_key="x", note=COMMAND)])
    [view] = await h.paused_approvals("store it")

    assert view.arguments["note"] == COMMAND
    stored = await h.engine.storage.approvals.get(view.approval_id)
    assert stored.arguments["note"] == COMMAND
    assert OPENAI_KEY not in json.dumps([a.text for a in display_arguments(view.arguments)])
