"""Slack's documented limits on the surface, against the fake Web API over real HTTP: chat.startStream's
recipient in channels, markdown_text at most 12,000 characters, a status line kept alive past Slack's
2-minute clearing."""

from __future__ import annotations

import asyncio

import pytest

from adapters.slack.surface import MARKDOWN_TEXT_LIMIT, SlackSurface, StreamTooLong, web_client
from bot.engine.model import ThreadRef

THREAD = ThreadRef("slack", "T0TEAM", "C0OPS", "1710000000.000100")


async def test_in_a_channel_the_stream_names_its_recipient_user_and_team(slack):
    surface = SlackSurface(web_client("xoxb-test-token", slack.base_url))

    stream = await surface.start_stream(THREAD, "U0ALICE", "run-1")

    [started] = slack.calls_to("chat.startStream")
    assert started.args["recipient_user_id"] == "U0ALICE" and started.args["recipient_team_id"] == "T0TEAM"
    assert stream is not None and stream["mode"] == "stream"
    await surface.close()


async def test_markdown_text_never_exceeds_12000_characters_after_escaping(slack):
    surface = SlackSurface(web_client("xoxb-test-token", slack.base_url))
    stream = await surface.start_stream(THREAD, "U0ALICE", "run-1")
    assert stream is not None
    text = "a & b " * 1_500  # 9,000 characters, within the raw limit; escaped ("&amp;") 13,500

    await surface.append_stream(THREAD, stream, text[:3_000], 0)
    with pytest.raises(StreamTooLong):  # the engine then posts the answer whole, in messages that fit
        await surface.append_stream(THREAD, stream, text, 3_000)

    sent = [c.args["markdown_text"] for c in slack.calls_to("chat.appendStream")]
    assert sum(len(t) for t in sent) <= MARKDOWN_TEXT_LIMIT
    await surface.close()


async def test_a_status_is_sent_again_before_slack_clears_it_and_stops_when_cleared(slack):
    surface = SlackSurface(web_client("xoxb-test-token", slack.base_url), status_refresh_seconds=0.05)

    await surface.set_status(THREAD, "waiting for approval")
    waiting = await slack.wait_for(
        "assistant.threads.setStatus", count=3, where=lambda c: c.args["status"] == "is waiting for approval"
    )
    assert {c.args["thread_ts"] for c in waiting} == {THREAD.thread}

    await surface.set_status(THREAD, None)

    assert slack.calls_to("assistant.threads.setStatus")[-1].args["status"] == ""
    assert surface._status_refreshers == {}  # nothing left to send it again
    await surface.close()


async def test_app_home_changes_during_a_publish_share_the_next_publish_which_shows_them_all(slack):
    surface = SlackSurface(web_client("xoxb-test-token", slack.base_url))
    pending: list[str] = []
    built: list[list[str]] = []

    async def home(user: str, workspace: str) -> dict:
        built.append(list(pending))
        return {"type": "home", "blocks": [{"type": "section", "text": {"type": "mrkdwn", "text": ", ".join(pending)}}]}

    surface.home_builder = home
    gate = slack.hold("views.publish")
    pending.append("a-0")
    first = asyncio.create_task(surface.refresh_home("T0TEAM", ["U0BOB"]))
    await slack.wait_for("views.publish:held")
    later = []
    for i in range(1, 10):  # nine more approvals change while the first publish is on its way
        pending.append(f"a-{i}")
        later.append(asyncio.create_task(surface.refresh_home("T0TEAM", ["U0BOB"])))
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(first, *later)

    assert built == [["a-0"], [f"a-{i}" for i in range(10)]]
    published = slack.calls_to("views.publish")
    assert len(published) == 2 and published[-1].args["view"]["blocks"][0]["text"]["text"].endswith("a-9")
    await surface.close()
