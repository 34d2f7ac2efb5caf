"""End to end in Slack: a mention pauses on a sensitive tool, people click, the run resumes once.

Real Bolt AsyncApp served over HTTP on 127.0.0.1, requests signed like Slack's, the real Engine on a
SQLite file, a fake Slack Web API recording what the bot sent, and a fake OpenAI endpoint.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.llm import OpenAIChatGenerator
from bot.tools import Tool
from tests.fakes.clock import Clock
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI, SlackCall
from tests.fakes.slack_requests import form, number_input, select, text_input
from tests.fakes.slack_stack import SlackStack, all_text, button_values

ALICE = "U0ALICE"  # asks the bot; may decide her own calls
ADMIN = "U0ADMIN"  # a countersign admin
MALLORY = "U0MALLORY"  # neither
CHANNEL = "C0OPS"


class Ops:
    """The tools of these tests; each records the arguments it ran with."""

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.scaled: list[dict[str, Any]] = []

    def tools(self) -> list[Tool]:
        return [
            Tool(
                name="delete_file",
                description="Delete a file from the server.",
                parameters={
                    "type": "object",
                    "properties": {"path": {"type": "string", "description": "Path of the file."}},
                    "required": ["path"],
                },
                function=self.delete_file,
            ),
            Tool(
                name="scale_service",
                description="Change how many replicas of a service run.",
                parameters={
                    "type": "object",
                    "properties": {
                        "service": {"type": "string"},
                        "replicas": {"type": "integer"},
                        "region": {"type": "string", "enum": ["eu", "us"]},
                    },
                    "required": ["service", "replicas"],
                },
                function=self.scale_service,
            ),
        ]

    def delete_file(self, path: str) -> str:
        self.deleted.append(path)
        return f"deleted {path}"

    def scale_service(self, service: str, replicas: int, region: str = "eu") -> str:
        self.scaled.append({"service": service, "replicas": replicas, "region": region})
        return f"{service} now has {replicas} replicas in {region}"


@pytest.fixture
def ops() -> Ops:
    return Ops()


@pytest.fixture
async def stack(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops, clock: Clock
) -> AsyncIterator[SlackStack]:
    running = await start_stack(tmp_path, slack, openai, ops, clock)
    yield running
    await running.stop()


async def start_stack(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops, clock: Clock, **config: Any
) -> SlackStack:
    generator = OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0)
    return await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=generator,
        tools=ops.tools(),
        admins={ADMIN},
        clock=clock,
        default_ttl_seconds=3600,
        **config,
    )


def has_blocks(call: SlackCall) -> bool:
    return bool(call.args.get("blocks"))


def plain(call: SlackCall) -> bool:
    return not call.args.get("blocks")


async def ask(stack: SlackStack, slack: FakeSlackAPI, text: str, user: str = ALICE) -> tuple[str, SlackCall]:
    """Mention the bot in the channel; return the mention's ts and the approval message it posted."""
    before = len(slack.calls_to("chat.postMessage", has_blocks))
    ts = stack.requests.next_ts()
    reply = await stack.requests.event(stack.requests.mention(user, CHANNEL, f"<@{slack.bot_user_id}> {text}", ts=ts))
    assert reply.status == 200
    posted = await slack.wait_for("chat.postMessage", count=before + 1, where=has_blocks)
    await stack.settle()  # the run has paused and the engine stored the message reference
    return ts, posted[-1]


async def test_mention_approve_runs_the_tool_once_and_answers_in_the_thread(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    openai.enqueue_text("Deleted **old.log**.")

    mention_ts, approval = await ask(stack, slack, "delete old.log")

    assert approval.args["channel"] == CHANNEL
    assert approval.args["thread_ts"] == mention_ts
    shown = all_text(approval.args["blocks"])
    assert "delete_file" in shown and "old.log" in shown and f"<@{ALICE}>" in shown
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")
    assert button_values(approval.args["blocks"], "cs_reject") == [approval_id]
    assert button_values(approval.args["blocks"], "cs_edit") == [approval_id]
    assert ops.deleted == []

    reply = await stack.requests.click(
        "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    assert reply.status == 200
    await stack.settle()

    assert ops.deleted == ["old.log"]
    [update] = slack.calls_to("chat.update")
    assert update.args["ts"] == approval.response["ts"] and update.args["channel"] == CHANNEL
    assert button_values(update.args["blocks"], "cs_approve") == []
    assert f"Approved by <@{ALICE}>" in all_text(update.args["blocks"])
    [answer] = slack.calls_to("chat.postMessage", plain)
    assert answer.args["thread_ts"] == mention_ts
    assert answer.args["text"] == "Deleted *old.log*."
    statuses = [(c.args["thread_ts"], c.args["status"]) for c in slack.calls_to("assistant.threads.setStatus")]
    assert statuses[:2] == [(mention_ts, "is thinking…"), (mention_ts, "is waiting for approval")]
    assert statuses[-1] == (mention_ts, "")  # cleared once the answer is in
    assert slack.calls_to("reactions.add") == []


async def test_reject_opens_a_modal_and_its_feedback_reaches_the_model(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    openai.enqueue_tool_calls([("delete_file", {"path": "prod.db"})])
    openai.enqueue_text("Understood, I left prod.db alone.")
    mention_ts, approval = await ask(stack, slack, "delete prod.db")
    [approval_id] = button_values(approval.args["blocks"], "cs_reject")

    await stack.requests.click(
        "cs_reject", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    [opened] = await slack.wait_for("views.open")
    modal = opened.args["view"]
    assert json.loads(modal["private_metadata"]) == {"approval_id": approval_id, "place": f"slack:{CHANNEL}"}
    assert opened.args["trigger_id"]

    reply = await stack.requests.submit(modal, form("feedback", cs_feedback=text_input("never touch prod")), user=ALICE)
    assert reply.status == 200 and reply.text == ""
    await stack.settle()

    assert ops.deleted == []
    told = [m for m in openai.requests[-1]["messages"] if m["role"] == "tool"]
    assert "rejected" in told[-1]["content"] and "never touch prod" in told[-1]["content"]
    update = slack.calls_to("chat.update")[-1]
    assert button_values(update.args["blocks"], "cs_approve") == []
    assert "Feedback: never touch prod" in all_text(update.args["blocks"])
    assert slack.calls_to("chat.postMessage", plain)[-1].args["text"] == "Understood, I left prod.db alone."


async def test_a_modal_that_does_not_say_where_it_was_opened_decides_nothing(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    openai.enqueue_tool_calls([("delete_file", {"path": "prod.db"})])
    mention_ts, approval = await ask(stack, slack, "delete prod.db")
    [approval_id] = button_values(approval.args["blocks"], "cs_reject")
    await stack.requests.click(
        "cs_reject", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    [opened] = await slack.wait_for("views.open")
    # As a modal opened before clicks carried their place: only the approval id.
    legacy = {**opened.args["view"], "private_metadata": approval_id}

    reply = await stack.requests.submit(legacy, form("feedback", cs_feedback=text_input("no")), user=ALICE)
    await stack.settle()

    assert reply.status == 200 and "can't be decided from here" in reply.text
    assert (await stack.engine.get_approval(approval_id)).is_pending
    assert slack.calls_to("chat.update") == []


async def test_edit_modal_is_typed_prefilled_and_the_tool_runs_with_the_edited_values(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    openai.enqueue_tool_calls([("scale_service", {"service": "api", "replicas": 3, "region": "eu"})])
    openai.enqueue_text("Scaled.")
    mention_ts, approval = await ask(stack, slack, "scale api to 3")
    [approval_id] = button_values(approval.args["blocks"], "cs_edit")

    await stack.requests.click(
        "cs_edit", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    [opened] = await slack.wait_for("views.open")
    modal = opened.args["view"]
    inputs = {b["block_id"]: b["element"] for b in modal["blocks"] if b["type"] == "input"}
    assert inputs["service"]["type"] == "plain_text_input" and inputs["service"]["initial_value"] == "api"
    assert inputs["replicas"]["type"] == "number_input" and inputs["replicas"]["initial_value"] == "3"
    assert inputs["replicas"]["is_decimal_allowed"] is False
    assert inputs["region"]["type"] == "static_select"
    assert inputs["region"]["initial_option"]["text"]["text"] == "eu"
    us = next(o for o in inputs["region"]["options"] if o["text"]["text"] == "us")

    values = form(service=text_input("api"), replicas=number_input("5"), region=select(us))
    reply = await stack.requests.submit(modal, values, user=ALICE)
    assert reply.status == 200 and reply.text == ""
    await stack.settle()

    assert ops.scaled == [{"service": "api", "replicas": 5, "region": "us"}]
    shown = all_text(slack.calls_to("chat.update")[-1].args["blocks"])
    assert f"Edited and approved by <@{ALICE}>" in shown and "replicas=5" in shown


async def test_an_invalid_edit_shows_field_errors_in_the_modal_and_decides_nothing(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    openai.enqueue_tool_calls([("scale_service", {"service": "api", "replicas": 3})])
    openai.enqueue_text("Scaled.")
    mention_ts, approval = await ask(stack, slack, "scale api")
    [approval_id] = button_values(approval.args["blocks"], "cs_edit")
    await stack.requests.click(
        "cs_edit", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    [opened] = await slack.wait_for("views.open")

    reply = await stack.requests.submit(opened.args["view"], form(replicas=number_input("2.5")), user=ALICE)

    assert reply.status == 200
    assert reply.json() == {"response_action": "errors", "errors": {"replicas": "must be a whole number"}}
    await stack.settle()
    assert ops.scaled == []
    assert (await stack.engine.get_approval(approval_id)).is_pending
    assert slack.calls_to("chat.update") == []

    reply = await stack.requests.submit(opened.args["view"], form(replicas=number_input("4")), user=ALICE)
    assert reply.text == ""
    await stack.settle()
    assert ops.scaled == [{"service": "api", "replicas": 4, "region": "eu"}]


async def test_a_cleared_prefilled_field_is_refused_by_the_field_not_approved_with_its_old_value(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    openai.enqueue_tool_calls([("scale_service", {"service": "api", "replicas": 3})])
    mention_ts, approval = await ask(stack, slack, "scale api")
    [approval_id] = button_values(approval.args["blocks"], "cs_edit")
    await stack.requests.click(
        "cs_edit", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    [opened] = await slack.wait_for("views.open")

    # Slack sends an emptied input as null: service was prefilled "api" and the person cleared it
    values = form(service=text_input(None), replicas=number_input("3"))
    reply = await stack.requests.submit(opened.args["view"], values, user=ALICE)

    assert reply.status == 200
    assert reply.json()["response_action"] == "errors"
    assert reply.json()["errors"]["service"].startswith("is required")
    await stack.settle()
    assert ops.scaled == []
    assert (await stack.engine.get_approval(approval_id)).is_pending


async def test_approve_all_runs_every_call_of_the_step(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    openai.enqueue_tool_calls([("delete_file", {"path": "a.log"}), ("delete_file", {"path": "b.log"})])
    openai.enqueue_text("Both gone.")
    mention_ts, approval = await ask(stack, slack, "delete a.log and b.log")
    blocks = approval.args["blocks"]
    assert len(button_values(blocks, "cs_approve")) == 2
    [first] = button_values(blocks, "cs_approve_all")

    await stack.requests.click(
        "cs_approve_all", first, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    await stack.settle()

    assert sorted(ops.deleted) == ["a.log", "b.log"]
    final = slack.calls_to("chat.update")[-1].args["blocks"]
    assert button_values(final, "cs_approve") == [] and button_values(final, "cs_approve_all") == []
    assert all_text(final).count(f"Approved by <@{ALICE}>") == 2
    assert slack.calls_to("chat.postMessage", plain)[-1].args["text"] == "Both gone."


async def test_approve_all_partly_refused_approves_what_it_may_and_tells_the_clicker_the_rest(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    from bot.engine.model import AdminRequest

    answer = await stack.engine.admin(
        AdminRequest("slack", slack.team_id, CHANNEL, ADMIN, "approvers scale_service @U0BOB")
    )
    assert "Rule updated" in answer
    openai.enqueue_tool_calls(
        [("delete_file", {"path": "a.log"}), ("scale_service", {"service": "web", "replicas": 3})]
    )
    mention_ts, approval = await ask(stack, slack, "clean up and scale web")
    [first] = button_values(approval.args["blocks"], "cs_approve_all")

    await stack.requests.click(
        "cs_approve_all", first, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    await stack.settle()

    [told] = slack.calls_to("chat.postEphemeral")
    assert told.args["user"] == ALICE and "Not approved" in told.args["text"] and "scale_service" in told.args["text"]
    assert ops.deleted == [] and ops.scaled == []  # the step waits for its last decision
    final = slack.calls_to("chat.update")[-1].args["blocks"]
    assert len(button_values(final, "cs_approve")) == 1  # scale_service still has its buttons


async def test_a_double_click_runs_the_tool_once_and_tells_the_second_clicker(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    openai.enqueue_text("Deleted.")
    mention_ts, approval = await ask(stack, slack, "delete old.log")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")

    clicks = [
        stack.requests.click(
            "cs_approve",
            approval_id,
            user=user,
            channel=CHANNEL,
            message_ts=approval.response["ts"],
            thread_ts=mention_ts,
        )
        for user in (ALICE, ADMIN)
    ]
    replies = await asyncio.gather(*clicks)
    await stack.settle()

    assert [r.status for r in replies] == [200, 200]
    assert ops.deleted == ["old.log"]
    [told] = slack.calls_to("chat.postEphemeral")
    assert told.args["user"] in (ALICE, ADMIN) and told.args["channel"] == CHANNEL
    assert "already approved" in told.args["text"] or "already decided" in told.args["text"]
    assert len(slack.calls_to("chat.postMessage", plain)) == 1


async def test_an_unauthorized_clicker_is_told_privately_and_nothing_changes(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    mention_ts, approval = await ask(stack, slack, "delete old.log")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")
    where = {"channel": CHANNEL, "message_ts": approval.response["ts"], "thread_ts": mention_ts}

    for action in ("cs_approve", "cs_reject", "cs_edit", "cs_approve_all"):
        reply = await stack.requests.click(action, approval_id, user=MALLORY, **where)
        assert reply.status == 200
    await stack.settle()

    told = slack.calls_to("chat.postEphemeral")
    assert len(told) == 4 and {c.args["user"] for c in told} == {MALLORY}
    assert all(c.args["thread_ts"] == mention_ts for c in told)
    assert "Only the person who asked and countersign admins" in told[0].args["text"]
    assert slack.calls_to("views.open") == [] and slack.calls_to("chat.update") == []
    assert ops.deleted == []
    assert (await stack.engine.get_approval(approval_id)).is_pending


async def test_an_approval_id_clicked_in_another_channel_is_refused_there_and_nothing_runs(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    mention_ts, approval = await ask(stack, slack, "delete old.log")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")
    # The requester herself, but on a button carrying the id in a conversation it was never shown in.
    elsewhere = {"channel": "C0RANDOM", "message_ts": "1700000999.000100", "thread_ts": "1700000999.000100"}

    for action in ("cs_approve", "cs_reject", "cs_edit", "cs_approve_all"):
        reply = await stack.requests.click(action, approval_id, user=ALICE, **elsewhere)
        assert reply.status == 200
    await stack.settle()

    told = slack.calls_to("chat.postEphemeral")
    assert len(told) == 4 and {(c.args["user"], c.args["channel"]) for c in told} == {(ALICE, "C0RANDOM")}
    assert all("can't be decided from here" in c.args["text"] for c in told)
    assert all("old.log" not in c.args["text"] for c in told)
    assert slack.calls_to("views.open") == [] and slack.calls_to("chat.update") == []
    assert ops.deleted == []
    assert (await stack.engine.get_approval(approval_id)).is_pending


async def test_an_expired_approval_is_shown_expired_and_a_late_click_changes_nothing(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops, clock: Clock
) -> None:
    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    openai.enqueue_text("The approval expired, so I did nothing.")
    mention_ts, approval = await ask(stack, slack, "delete old.log")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")

    clock.now += timedelta(hours=2)
    assert await stack.engine.sweep_expired() == 1
    await stack.settle()

    update = slack.calls_to("chat.update")[-1]
    assert button_values(update.args["blocks"], "cs_approve") == []
    assert "Expired without a decision" in all_text(update.args["blocks"])
    assert slack.calls_to("chat.postMessage", plain)[-1].args["text"] == "The approval expired, so I did nothing."

    await stack.requests.click(
        "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    await stack.settle()
    [told] = slack.calls_to("chat.postEphemeral")
    assert "expired" in told.args["text"]
    assert ops.deleted == []


async def test_a_restart_between_the_approval_message_and_the_click_loses_nothing(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops, clock: Clock
) -> None:
    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    openai.enqueue_text("Deleted after the restart.")
    first = await start_stack(tmp_path, slack, openai, ops, clock)
    mention_ts, approval = await ask(first, slack, "delete old.log")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")
    await first.stop()

    second = await start_stack(tmp_path, slack, openai, ops, clock)
    try:
        reply = await second.requests.click(
            "cs_approve",
            approval_id,
            user=ALICE,
            channel=CHANNEL,
            message_ts=approval.response["ts"],
            thread_ts=mention_ts,
        )
        assert reply.status == 200
        await second.settle()
    finally:
        await second.stop()

    assert ops.deleted == ["old.log"]
    assert slack.calls_to("chat.update")[-1].args["ts"] == approval.response["ts"]
    answer = slack.calls_to("chat.postMessage", plain)[-1]
    assert answer.args["text"] == "Deleted after the restart." and answer.args["thread_ts"] == mention_ts


async def test_a_ten_kilobyte_argument_is_truncated_in_slack_and_runs_in_full(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    huge = "x" * 10_240
    openai.enqueue_tool_calls([("delete_file", {"path": huge})])
    openai.enqueue_text("Done.")
    mention_ts, approval = await ask(stack, slack, "delete the long one")

    shown = all_text(approval.args["blocks"])
    assert huge not in shown and "chars)" in shown  # truncated, and it says so
    assert len(json.dumps(approval.args["blocks"])) < 13_000
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")
    await stack.requests.click(
        "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    await stack.settle()
    assert ops.deleted == [huge]


async def test_model_text_and_tool_arguments_cannot_ping_mention_or_forge_links(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    hostile = "<!channel> hi <@U123> see <http://evil|click> & <!here>"
    openai.enqueue_tool_calls([("delete_file", {"path": hostile})])
    openai.enqueue_text(hostile + " [docs](http://evil.example)")
    mention_ts, approval = await ask(stack, slack, "do it")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")
    await stack.requests.click(
        "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    await stack.settle()

    sent = [
        all_text(c.args.get("blocks", [])) + c.args.get("text", "") for c in slack.calls if c.method.startswith("chat.")
    ]
    for text in sent:
        for token in ("<!channel>", "<!here>", "<@U123>", "<http://evil|click>", "<http"):
            assert token not in text
    answer = slack.calls_to("chat.postMessage", plain)[-1].args["text"]
    assert answer.startswith("&lt;!channel&gt; hi &lt;@U123&gt; see &lt;http://evil|click&gt; &amp; &lt;!here&gt;")
    assert answer.endswith("docs (http://evil.example)")
    assert ops.deleted == [hostile]


async def test_a_new_message_in_the_thread_supersedes_the_approval_and_a_late_click_is_refused(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, ops: Ops
) -> None:
    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    openai.enqueue_text("Never mind then.")
    mention_ts, approval = await ask(stack, slack, "delete old.log")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")

    follow_up = stack.requests.message(ALICE, CHANNEL, "actually, keep it", thread_ts=mention_ts)
    await stack.requests.event(follow_up)
    await stack.settle()
    update = slack.calls_to("chat.update")[-1]
    assert button_values(update.args["blocks"], "cs_approve") == []
    assert "Superseded by a newer message" in all_text(update.args["blocks"])

    await stack.requests.click(
        "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=mention_ts
    )
    await stack.settle()
    [told] = slack.calls_to("chat.postEphemeral")
    assert "superseded" in told.args["text"]
    assert ops.deleted == []
