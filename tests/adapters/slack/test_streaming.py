"""Slack live answers end to end: signed events in, the real openai client streaming from the fake model,
and Slack's streaming methods (or the post-and-update fallback) recorded by the fake Web API."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.slack.mrkdwn import escape
from bot.llm import OpenAIChatGenerator
from bot.tools import Tool, tool
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.slack_api import FakeSlackAPI, SlackCall
from tests.fakes.slack_stack import SlackStack, all_text, button_values
from tests.fakes.streaming_kit import BlockingBackup

ALICE = "U0ALICE"
BOB = "U0BOB"
CHANNEL = "C0OPS"
INTERVAL = 0.05
ANSWER = "All 12 services are healthy: api, web, <workers> & the rest. Nothing to do today, " + " ".join(
    f"item{i}" for i in range(20)
)


@pytest.fixture
async def openai() -> AsyncIterator[FakeOpenAIServer]:
    async with FakeOpenAIServer() as server:
        server.piece_delay = 0.02  # the model writes for longer than one update interval
        yield server


async def start(tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer, tools: list[Tool] = ()) -> SlackStack:
    generator = OpenAIChatGenerator(api_key="test", api_base_url=openai.base_url, max_retries=0)
    return await SlackStack.start(
        db_path=tmp_path / "cs.db",
        slack=slack,
        generator=generator,
        tools=list(tools),
        stream_update_seconds=INTERVAL,
    )


async def mention(stack: SlackStack, slack: FakeSlackAPI, text: str, user: str = ALICE) -> str:
    ts = stack.requests.next_ts()
    reply = await stack.requests.event(stack.requests.mention(user, CHANNEL, f"<@{slack.bot_user_id}> {text}", ts=ts))
    assert reply.status == 200
    return ts


async def answer_one_mention(tmp_path: Path, slack: FakeSlackAPI, openai: FakeOpenAIServer) -> str:
    """Serve, mention the bot once, wait until it has answered, stop; the thread's ts."""
    stack = await start(tmp_path, slack, openai)
    try:
        thread = await mention(stack, slack, "how are the services?")
        await stack.settle()
    finally:
        await stack.stop()
    return thread


def updates_of(slack: FakeSlackAPI, ts: str) -> list[SlackCall]:
    return [c for c in slack.calls if c.method in ("chat.appendStream", "chat.stopStream") and c.args.get("ts") == ts]


async def test_an_answer_streams_into_one_message_whose_text_is_the_final_answer(tmp_path, slack, openai):
    openai.enqueue_text(ANSWER)
    thread = await answer_one_mention(tmp_path, slack, openai)

    [started] = slack.calls_to("chat.startStream")
    assert started.args["thread_ts"] == thread and started.args["recipient_user_id"] == ALICE
    stream = slack.streams[started.response["ts"]]
    assert stream["stopped"] and stream["text"] == escape(ANSWER)  # escaped: no <workers> link, no ping
    assert len(slack.calls_to("chat.appendStream")) >= 2
    assert slack.calls_to("chat.postMessage") == []  # never posted a second time
    [offer] = slack.calls_to("chat.postEphemeral")
    assert offer.args["user"] == ALICE and button_values(offer.args["blocks"], "cs_stop")


async def test_updates_of_a_streamed_message_respect_the_rate_cap(tmp_path, slack, openai):
    openai.enqueue_text(ANSWER)
    await answer_one_mention(tmp_path, slack, openai)

    [started] = slack.calls_to("chat.startStream")
    times = [c.at for c in updates_of(slack, started.response["ts"])]
    assert len(times) >= 3
    assert min(b - a for a, b in zip(times, times[1:], strict=False)) >= INTERVAL - 0.005


async def test_a_429_in_the_middle_of_a_stream_is_waited_out_and_the_answer_completes(tmp_path, slack, openai):
    openai.enqueue_text(ANSWER)
    slack.answer_status("chat.appendStream", 429, headers={"Retry-After": "1"})
    await answer_one_mention(tmp_path, slack, openai)

    [started] = slack.calls_to("chat.startStream")
    calls = updates_of(slack, started.response["ts"])
    limited = next(i for i, c in enumerate(calls) if c.response.get("status") == 429)
    assert calls[limited + 1].at - calls[limited].at >= 0.99  # Retry-After honoured
    stream = slack.streams[started.response["ts"]]
    assert stream["stopped"] and stream["text"] == escape(ANSWER)


async def test_without_streaming_one_message_is_posted_then_updated_and_ends_without_its_stop_button(
    tmp_path, slack, openai
):
    openai.enqueue_text(ANSWER)
    slack.failures["chat.startStream"] = "not_allowed_token_type"
    await answer_one_mention(tmp_path, slack, openai)

    [posted] = slack.calls_to("chat.postMessage")
    assert button_values(posted.args["blocks"], "cs_stop")
    updates = slack.calls_to("chat.update", lambda c: c.args["ts"] == posted.response["ts"])
    assert len(updates) >= 2
    assert all(button_values(u.args["blocks"], "cs_stop") for u in updates[:-1])
    final = updates[-1]
    assert final.args["text"] == escape(ANSWER) and not button_values(final.args["blocks"], "cs_stop")
    assert min(b.at - a.at for a, b in zip(updates, updates[1:], strict=False)) >= INTERVAL - 0.005


async def test_text_before_a_paused_call_stays_the_approval_follows_and_the_resume_streams_anew(
    tmp_path, slack, openai
):
    deleted: list[str] = []

    @tool
    def delete_file(path: str) -> str:
        """Delete a file.

        :param path: The file.
        """
        deleted.append(path)
        return f"deleted {path}"

    openai.enqueue_tool_calls([("delete_file", {"path": "old.log"})], text="Let me remove old.log for you now.")
    openai.enqueue_text("Done: old.log is gone and the disk has room again.")
    stack = await start(tmp_path, slack, openai, [delete_file])
    try:
        thread = await mention(stack, slack, "free some disk")
        await stack.settle()
        [approval] = slack.calls_to(
            "chat.postMessage", lambda c: bool(button_values(c.args.get("blocks") or [], "cs_approve"))
        )
        [first] = slack.calls_to("chat.startStream")
        stop_first = slack.calls_to("chat.stopStream")[0]
        assert slack.streams[first.response["ts"]] == {
            "text": "Let me remove old.log for you now.",
            "stopped": True,
            "channel": CHANNEL,
        }
        assert slack.calls.index(stop_first) < slack.calls.index(approval)

        [approval_id] = button_values(approval.args["blocks"], "cs_approve")
        await stack.requests.click(
            "cs_approve", approval_id, user=ALICE, channel=CHANNEL, message_ts=approval.response["ts"], thread_ts=thread
        )
        await stack.settle()
    finally:
        await stack.stop()

    assert deleted == ["old.log"]
    starts = slack.calls_to("chat.startStream")
    assert len(starts) == 2 and slack.calls.index(starts[1]) > slack.calls.index(approval)
    assert slack.streams[starts[1].response["ts"]]["text"] == "Done: old.log is gone and the disk has room again."
    # the approved call is shown by its approval message, not as a tool step
    assert not [c for c in slack.calls_to("chat.postMessage") if ":wrench:" in all_text(c.args.get("blocks") or [])]


async def test_the_stop_button_ends_the_run_after_the_running_tool(tmp_path, slack, openai):
    job = BlockingBackup()
    openai.enqueue_tool_calls([("backup", {"target": "orders"})], text="Backing up orders, then the rest of them.")
    openai.enqueue_text("never asked")
    stack = await start(tmp_path, slack, openai, [job.tool])
    try:
        thread = await mention(stack, slack, "back everything up")
        await asyncio.wait_for(job.started.wait(), 5)
        [offer] = await slack.wait_for("chat.postEphemeral")
        [run_id] = button_values(offer.args["blocks"], "cs_stop")

        await stack.requests.click(
            "cs_stop",
            run_id,
            user=BOB,
            channel=CHANNEL,
            message_ts=thread,
            thread_ts=thread,
            ephemeral=True,
            response_url=slack.response_url("bob"),
        )
        await slack.wait_for("response_url", where=lambda c: c.args["name"] == "bob")
        await stack.requests.click(
            "cs_stop",
            run_id,
            user=ALICE,
            channel=CHANNEL,
            message_ts=thread,
            thread_ts=thread,
            ephemeral=True,
            response_url=slack.response_url("alice"),
        )
        await slack.wait_for("response_url", where=lambda c: c.args["name"] == "alice")
        job.release.set()
        await stack.settle()
        run = await stack.engine.storage.runs.get(run_id)
    finally:
        await stack.stop()

    [refused] = slack.calls_to("response_url", lambda c: c.args["name"] == "bob")
    assert refused.args["text"] == "Only the person who asked, or an admin, can stop this."
    [stopping] = slack.calls_to("response_url", lambda c: c.args["name"] == "alice")
    assert stopping.args["text"] == "Stopping after the current step." and stopping.args["replace_original"]
    assert run.status == "stopped"
    assert len(openai.requests) == 1  # the model was not asked again
    step = slack.calls_to("chat.postMessage", lambda c: "backup" in all_text(c.args.get("blocks") or []))
    assert len(step) == 1  # the tool that ran is shown as one line
    assert slack.calls_to("chat.postMessage")[-1].args["text"] == "(Stopped.)"


async def test_a_stream_slack_stops_accepting_is_finished_with_the_whole_answer(tmp_path, slack, openai):
    openai.enqueue_text(ANSWER)
    slack.failures["chat.appendStream"] = "internal_error"
    await answer_one_mention(tmp_path, slack, openai)

    [started] = slack.calls_to("chat.startStream")
    assert len(slack.calls_to("chat.appendStream")) == 1  # never tried again once it failed
    [stopped] = slack.calls_to("chat.stopStream")
    assert stopped.args["markdown_text"] == escape(ANSWER)  # the whole answer, in one go
    assert slack.streams[started.response["ts"]] == {"text": escape(ANSWER), "stopped": True, "channel": CHANNEL}
