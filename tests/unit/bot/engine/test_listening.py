"""Who the bot listens to in a busy thread while an approval waits (Slack end to end, and the engine).

Chatter between people changes nothing; the requester's (or an admin's) new message supersedes the
approval; anyone else gets one private note saying an approval waits and who can decide it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest

from bot.engine.model import DecisionRequest
from bot.llm import OpenAIChatGenerator
from tests.adapters.slack.test_approvals import ADMIN, ALICE, CHANNEL, Clock, Ops, ask, start_stack
from tests.fakes.engine_kit import ADMIN as ENGINE_ADMIN
from tests.fakes.engine_kit import OTHER, REQUESTER, Harness, asks_for, says
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI, SlackCall
from tests.fakes.slack_stack import SlackStack, button_values
from tests.fakes.teams_stack import ANA, BEN, TeamsStack, approval_ids, running_teams

BOB = "U0BOB"


@pytest.fixture
async def stack(tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer) -> AsyncIterator[SlackStack]:
    running = await start_stack(tmp_path, slack, openai, Ops(), Clock())
    yield running
    await running.stop()


def notes_to(slack: FakeSlackAPI, user: str) -> list[SlackCall]:
    return slack.calls_to("chat.postEphemeral", lambda c: c.args.get("user") == user)


async def paused_on_delete(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer, answer: str
) -> tuple[str, SlackCall, str]:
    """Alice asks to delete old.log; the thread ts, the approval message and its approval id (then ``answer``)."""
    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})])
    openai.enqueue_text(answer)
    thread_ts, approval = await ask(stack, slack, "delete old.log")
    [approval_id] = button_values(approval.args["blocks"], "cs_approve")
    return thread_ts, approval, approval_id


async def write(stack: SlackStack, user: str, text: str, thread_ts: str, *, mention: bool = False) -> None:
    if mention:
        event = stack.requests.mention(user, CHANNEL, f"<@U0BOT> {text}", thread_ts=thread_ts)
    else:
        event = stack.requests.message(user, CHANNEL, text, thread_ts=thread_ts)
    assert (await stack.requests.event(event)).status == 200
    await stack.settle()


async def test_chatter_from_another_person_changes_nothing_and_they_are_told_once_who_decides(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer
) -> None:
    thread_ts, approval, approval_id = await paused_on_delete(stack, slack, openai, "Deleted.")
    model_calls = len(openai.requests)

    await write(stack, BOB, "looks fine to me, go ahead", thread_ts)
    await write(stack, BOB, "seriously, go ahead", thread_ts, mention=True)

    assert slack.calls_to("chat.update") == []  # the buttons stay
    assert len(openai.requests) == model_calls  # no model call for Bob
    assert (await stack.engine.get_approval(approval_id)).is_pending
    [note] = notes_to(slack, BOB)  # once per person per approval
    assert note.args["thread_ts"] == thread_ts
    assert "approval is pending" in note.args["text"]
    assert f"decided by <@{ALICE}> (who asked) or an admin" in note.args["text"]  # a real mention, not a raw id

    await stack.requests.click(
        "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=thread_ts
    )
    await stack.settle()
    assert (await stack.engine.get_approval(approval_id)).status == "approved"


async def test_the_requesters_new_message_supersedes_the_approval(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer
) -> None:
    thread_ts, approval, approval_id = await paused_on_delete(stack, slack, openai, "Fine, I won't.")

    await write(stack, ALICE, "actually, don't", thread_ts)

    assert (await stack.engine.get_approval(approval_id)).status == "superseded"
    [update] = slack.calls_to("chat.update")
    assert button_values(update.args["blocks"], "cs_approve") == []
    assert "Fine, I won't." in [c.args.get("text") for c in slack.calls_to("chat.postMessage")]
    assert notes_to(slack, ALICE) == []


async def test_an_admin_supersedes_only_by_addressing_the_bot(
    stack: SlackStack, slack: FakeSlackAPI, openai: FakeOpenAIServer
) -> None:
    thread_ts, approval, approval_id = await paused_on_delete(stack, slack, openai, "Stopped.")

    await write(stack, ADMIN, "hmm, who asked for this?", thread_ts)
    assert (await stack.engine.get_approval(approval_id)).is_pending

    await write(stack, ADMIN, "stop this", thread_ts, mention=True)
    assert (await stack.engine.get_approval(approval_id)).status == "superseded"


async def test_in_mention_mode_the_requesters_reply_without_a_mention_changes_nothing(
    tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer
) -> None:
    stack = await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0),
        tools=Ops().tools(),
        reply_mode="mention",
    )
    try:
        thread_ts, approval, approval_id = await paused_on_delete(stack, slack, openai, "Cancelled.")

        await write(stack, ALICE, "let me think", thread_ts)
        assert (await stack.engine.get_approval(approval_id)).is_pending
        assert notes_to(slack, ALICE) == []

        await write(stack, ALICE, "cancel that", thread_ts, mention=True)
        assert (await stack.engine.get_approval(approval_id)).status == "superseded"
        assert "Cancelled." in [c.args.get("text") for c in slack.calls_to("chat.postMessage")]
    finally:
        await stack.stop()


# ---------------------------------------------------------------------- the engine's rule, on any surface


async def test_a_message_queued_by_someone_else_while_the_run_ran_does_not_supersede_it(tmp_path: Path) -> None:
    harness = await Harness.open(
        tmp_path, replies=[asks_for("delete_file", path="a.txt"), says("Done."), says("Answer to the other.")]
    )
    try:
        [approval] = await harness.paused_approvals("delete a.txt")
        thread = harness.thread()
        # Stored while the run was running (another person mentioned the bot then): it waits behind the pause.
        queued = await harness.engine.lifecycle.receive(harness.inbound("me too", user=OTHER))
        assert queued is not None
        await harness.engine.lifecycle.drain(thread)
        assert (await harness.engine.get_approval(approval.approval_id)).is_pending

        await harness.engine.decide(
            DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place)
        )
        await harness.engine.wait_idle()
        assert harness.tools.runs_of("delete_file") == [{"path": "a.txt"}]
        assert harness.surface.replies_in(thread) == ["Done.", "Answer to the other."]  # then it ran
    finally:
        await harness.close()


async def test_direct_and_console_messages_are_always_addressed(tmp_path: Path) -> None:
    harness = await Harness.open(tmp_path, replies=[says("hi"), says("hi again")], reply_mode="mention")
    try:
        inbound = replace(harness.inbound("hello", thread="dm"), mentioned=False, is_direct=True)
        await harness.engine.handle_message(inbound)
        await harness.engine.handle_message(replace(inbound, event_id="Ev-2", text="again"))
        assert harness.surface.replies_in(harness.thread("dm")) == ["hi", "hi again"]
    finally:
        await harness.close()


async def test_an_admin_elsewhere_may_supersede_but_a_colleague_may_not(tmp_path: Path) -> None:
    harness = await Harness.open(tmp_path, replies=[asks_for("delete_file", path="a.txt"), says("Stopped.")])
    try:
        [approval] = await harness.paused_approvals("delete a.txt")
        await harness.say("I'd say no", user=OTHER)
        await harness.engine.wait_idle()  # the note is sent in the background
        assert (await harness.engine.get_approval(approval.approval_id)).is_pending
        [tell] = harness.surface.tells
        assert tell.user == OTHER and "U_REQ (who asked) or an admin" in tell.text
        await harness.say("stop", user=ENGINE_ADMIN)
        assert (await harness.engine.get_approval(approval.approval_id)).status == "superseded"
    finally:
        await harness.close()


# ---------------------------------------------------------------------- Teams


@pytest.fixture
async def teams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[TeamsStack]:
    replies = [asks_for("delete_file", path="old.log"), says("Okay, I won't.")]
    async with running_teams(tmp_path, monkeypatch, replies=replies) as stack:
        yield stack


async def test_teams_a_bystanders_mention_leaves_the_card_and_the_requesters_message_supersedes(
    teams: TeamsStack,
) -> None:
    await teams.say("delete old.log")
    [approval_id] = approval_ids(await teams.view_as(ANA))

    await teams.say("go ahead!", BEN)
    await teams.say("go ahead!!", BEN)
    assert (await teams.engine.get_approval(approval_id)).is_pending
    assert teams.connector.updates() == []
    [note] = [t for t in teams.connector.texts() if "approval is pending" in t]
    assert "decided by Ana Lopez" in note and ANA.id not in note  # her display name, not her 29: id

    await teams.say("never mind", ANA)
    assert (await teams.engine.get_approval(approval_id)).status == "superseded"
    assert "Okay, I won't." in teams.connector.texts()


async def test_teams_channel_replies_without_a_mention_reach_the_bot_and_only_the_requesters_act(
    teams: TeamsStack,
) -> None:
    # With the manifest's ChannelMessage.Read.Group consent, Teams delivers replies that do not @mention the bot.
    await teams.say("delete old.log")
    [approval_id] = approval_ids(await teams.view_as(ANA))

    await teams.say("looks fine to me", BEN, mention_bot=False)
    assert (await teams.engine.get_approval(approval_id)).is_pending
    assert teams.connector.updates() == []

    await teams.say("actually, leave it", ANA, mention_bot=False)
    assert (await teams.engine.get_approval(approval_id)).status == "superseded"
    assert "Okay, I won't." in teams.connector.texts()
