"""Review after acting in Slack: the tool runs once, its result waits in a Block Kit message with
Approve / Edit result / Reject, and what the reviewer decides is what the model sees.

Real Bolt AsyncApp over HTTP, signed requests, the real Engine on SQLite, the fake Slack Web API and a fake
OpenAI endpoint (the fixtures of ``tests/adapters/slack/test_approvals.py``).
"""

# ruff: noqa: F811 - the fixtures of tests/adapters/slack/test_approvals.py are imported, and test arguments name them

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from bot.engine.model import AdminRequest
from tests.adapters.slack.test_admin import command as slack_command
from tests.adapters.slack.test_approvals import (  # noqa: F401 - fixtures
    ADMIN,
    ALICE,
    CHANNEL,
    Ops,
    ask,
    ops,
    plain,
    stack,
    start_stack,
)
from tests.fakes.clock import Clock
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI
from tests.fakes.slack_requests import form, text_input
from tests.fakes.slack_stack import SlackStack, all_text, button_values

SECRET = "sk-live-" + "z" * 32


async def review_of(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, answer: str = "ok"
) -> tuple[str, str, dict]:
    """Set delete_file to review, ask for it; the mention ts, the review id and the posted review message."""
    request = AdminRequest("slack", slack.team_id, CHANNEL, ADMIN, "policy set delete_file review")
    rule = await stack.engine.admin(request)
    assert "mode=review" in rule
    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    openai.enqueue_text(answer)
    mention_ts, message = await ask(stack, slack, "delete old.log")
    [review_id] = button_values(message.args["blocks"], "cs_approve")
    return mention_ts, review_id, {"ts": message.response["ts"], "blocks": message.args["blocks"]}


def tool_messages(openai: FakeOpenAIServer) -> list[str]:
    return [m["content"] for m in openai.requests[-1]["messages"] if m["role"] == "tool"]


async def test_the_tool_runs_at_once_and_approve_releases_its_result(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    mention_ts, review_id, message = await review_of(stack, slack, openai, "Done: old.log is gone.")

    assert ops.deleted == ["old.log"]
    assert len(openai.requests) == 1  # the model has not seen the result yet
    shown = all_text(message["blocks"])
    assert "Review the result of" in shown and "deleted old.log" in shown
    assert button_values(message["blocks"], "cs_edit") == [review_id]
    assert any(b.get("text", {}).get("text") == "Edit result" for b in _buttons(message["blocks"]))

    await stack.requests.click(
        "cs_approve", review_id, user=ALICE, channel=CHANNEL, message_ts=message["ts"], thread_ts=mention_ts
    )
    await stack.settle()

    assert tool_messages(openai) == ["deleted old.log"]
    assert f"Result approved by <@{ALICE}>" in all_text(slack.calls_to("chat.update")[-1].args["blocks"])
    assert slack.calls_to("chat.postMessage", plain)[-1].args["text"] == "Done: old.log is gone."
    assert ops.deleted == ["old.log"]


async def test_edit_result_opens_a_prefilled_modal_and_the_model_sees_the_edited_text(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    mention_ts, review_id, message = await review_of(stack, slack, openai, "Noted.")

    await stack.requests.click(
        "cs_edit", review_id, user=ALICE, channel=CHANNEL, message_ts=message["ts"], thread_ts=mention_ts
    )
    [opened] = await slack.wait_for("views.open")
    modal = opened.args["view"]
    [field] = [b for b in modal["blocks"] if b["type"] == "input"]
    assert field["block_id"] == "cs_result" and field["element"]["initial_value"] == "deleted old.log"

    reply = await stack.requests.submit(modal, form(cs_result=text_input("a log file was removed")), user=ALICE)
    assert reply.status == 200 and reply.text == ""
    await stack.settle()

    assert tool_messages(openai) == ["a log file was removed"]
    assert f"Result edited by <@{ALICE}>" in all_text(slack.calls_to("chat.update")[-1].args["blocks"])
    assert ops.deleted == ["old.log"]


async def test_reject_with_feedback_gives_the_model_the_feedback_instead(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    mention_ts, review_id, message = await review_of(stack, slack, openai, "Understood.")

    await stack.requests.click(
        "cs_reject", review_id, user=ALICE, channel=CHANNEL, message_ts=message["ts"], thread_ts=mention_ts
    )
    [opened] = await slack.wait_for("views.open")
    assert opened.args["view"]["title"]["text"] == "Reject result"
    await stack.requests.submit(
        opened.args["view"], form("feedback", cs_feedback=text_input("do not mention it")), user=ALICE
    )
    await stack.settle()

    [told] = tool_messages(openai)
    assert "rejected by a reviewer" in told and "do not mention it" in told and "deleted old.log" not in told
    assert "Result rejected by" in all_text(slack.calls_to("chat.update")[-1].args["blocks"])


async def test_an_expired_review_withholds_the_result(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops, clock: Clock
) -> None:
    mention_ts, review_id, message = await review_of(stack, slack, openai, "I could not confirm the result.")

    clock.now += timedelta(hours=2)
    assert await stack.engine.sweep_expired() == 1
    await stack.settle()

    assert tool_messages(openai) == ["result withheld: not reviewed in time"]
    update = slack.calls_to("chat.update")[-1]
    assert button_values(update.args["blocks"], "cs_approve") == []
    assert "withheld" in all_text(update.args["blocks"])
    assert ops.deleted == ["old.log"]


async def test_a_restart_between_the_tool_and_the_review_runs_nothing_twice(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops, clock: Clock
) -> None:
    first = await start_stack(tmp_path, slack, openai, ops, clock)
    mention_ts, review_id, message = await review_of(first, slack, openai, "Confirmed after the restart.")
    await first.stop()

    second = await start_stack(tmp_path, slack, openai, ops, clock)
    try:
        await second.requests.click(
            "cs_approve", review_id, user=ALICE, channel=CHANNEL, message_ts=message["ts"], thread_ts=mention_ts
        )
        await second.settle()
    finally:
        await second.stop()

    assert ops.deleted == ["old.log"]
    assert tool_messages(openai) == ["deleted old.log"]
    assert slack.calls_to("chat.postMessage", plain)[-1].args["text"] == "Confirmed after the restart."


async def test_a_secret_in_the_result_is_masked_in_slack_and_kept_whole_in_storage(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    ops.delete_file = lambda path: f"deleted {path}; api_key={SECRET}"  # type: ignore[method-assign]
    stack.engine.tools["delete_file"].function = ops.delete_file
    mention_ts, review_id, message = await review_of(stack, slack, openai)

    assert SECRET not in all_text(message["blocks"])
    assert (await stack.engine.get_approval(review_id)).result == f"deleted old.log; api_key={SECRET}"


def _buttons(blocks: list[dict]) -> list[dict]:
    return [e for b in blocks if b.get("type") == "actions" for e in b.get("elements", [])]


async def test_the_app_home_shows_a_review_with_its_masked_result_and_approving_there_releases_it(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    ran: list[str] = []
    stack.engine.tools["delete_file"].function = lambda path: ran.append(path) or f"deleted {path}; api_key={SECRET}"
    _, review_id, _ = await review_of(stack, slack, openai, "Done.")

    await stack.requests.event(stack.requests.home_opened(ADMIN))
    await stack.settle()
    home = slack.calls_to("views.publish")[-1].args
    shown = all_text(home["view"]["blocks"])
    assert home["user_id"] == ADMIN
    assert "Review the result of" in shown and "deleted old.log; api_key=" in shown and SECRET not in shown
    # Edit result, not Edit (the call ran), and no "Approve and always allow here" for a review, even for an admin
    assert [b["text"]["text"] for b in _buttons(home["view"]["blocks"])] == ["Approve", "Reject", "Edit result"]
    assert button_values(home["view"]["blocks"], "cs_edit") == [review_id]

    await stack.requests.home_click("cs_approve", review_id, user=ADMIN)
    await stack.settle()

    assert tool_messages(openai) == [f"deleted old.log; api_key={SECRET}"]  # the model sees the result as it is
    assert f"Result approved by <@{ADMIN}>" in all_text(slack.calls_to("chat.update")[-1].args["blocks"])
    assert button_values(slack.calls_to("views.publish")[-1].args["view"]["blocks"], "cs_approve") == []
    assert ran == ["old.log"]  # once


async def test_the_pending_listing_names_a_review_as_one(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer
) -> None:
    _, review_id, _ = await review_of(stack, slack, openai)

    listing = await slack_command(stack, slack, "pending", ADMIN)

    assert f"review of the result of delete_file asked by {ALICE}, expires " in listing
    assert f"(id {review_id[:8]})" in listing and "deleted old.log" not in listing  # the result is not listed
