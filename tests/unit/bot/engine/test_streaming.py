"""Live answers through the engine: the real openai client streams from the fake server over HTTP, and a
surface that streams records what a person would see (the message's text after every update)."""

from __future__ import annotations

import asyncio

import pytest

from bot.engine.errors import NotAllowedToStop
from bot.engine.model import DecisionRequest
from bot.engine.streaming import THINKING, WAITING_FOR_APPROVAL, StreamRateLimited, running
from bot.llm import OpenAIChatGenerator
from bot.tools import tool
from tests.fakes.engine_kit import OTHER, PLATFORM, REQUESTER, bounded
from tests.fakes.openai_server import CutStreamResponse, FakeOpenAIServer
from tests.fakes.recording_surface import Rendering, StreamCall, StreamingRecordingSurface
from tests.fakes.streaming_kit import BlockingBackup

LONG_ANSWER = " ".join(f"word{i}" for i in range(30)) + "."


@pytest.fixture
async def llm():
    async with FakeOpenAIServer() as server:
        server.piece_delay = 0.02  # a model that writes for longer than the update interval: its text streams
        yield server


async def open_streaming(harnesses, llm, surface=None, interval=0.01, **kwargs):
    generator = OpenAIChatGenerator(model="fake", api_key="test", api_base_url=llm.base_url, max_retries=0)
    h = await harnesses.open(generator=generator, stream_update_seconds=interval, **kwargs)
    h.surface = surface or StreamingRecordingSurface()
    h.engine.register_surface(PLATFORM, h.surface)
    return h


def gaps(calls: list[StreamCall]) -> list[float]:
    """Seconds between successive updates of one message (appends and the finish)."""
    updates = [c.at for c in calls if c.kind in ("append", "finish")]
    return [b - a for a, b in zip(updates, updates[1:], strict=False)]


async def test_the_streamed_text_grows_into_exactly_the_final_answer(harnesses, llm):
    answer = "The disk is **42%** full; nothing to do."
    llm.enqueue_text(answer)
    h = await open_streaming(harnesses, llm)

    await h.say("how full is the disk?")

    surface = h.surface
    assert [c.kind for c in surface.streams][0] == "start"
    assert surface.final_texts() == [answer]
    assert all(answer.startswith(c.text) for c in surface.streams if c.kind == "append")
    assert surface.replies == []  # shown by the stream, never posted a second time
    assert (await h.history())[-1].text == answer
    assert surface.statuses == [THINKING, None]


async def test_text_before_a_paused_call_is_kept_the_approval_follows_and_the_resume_streams_anew(harnesses, llm):
    llm.enqueue_tool_calls([("delete_file", {"path": "a.txt"})], text="I'll delete a.txt now.")
    llm.enqueue_text("Deleted a.txt.")
    h = await open_streaming(harnesses, llm)

    approval = (await h.paused_approvals("delete a.txt"))[0]

    surface = h.surface
    finish_first = next(i for i, c in enumerate(surface.calls) if isinstance(c, StreamCall) and c.kind == "finish")
    render = next(i for i, c in enumerate(surface.calls) if isinstance(c, Rendering))
    assert surface.final_texts() == ["I'll delete a.txt now."]
    assert finish_first < render
    assert surface.statuses[-1] == WAITING_FOR_APPROVAL  # still waiting: the status stays
    paused_statuses = len(surface.statuses)

    await h.engine.decide(DecisionRequest(approval.approval_id, REQUESTER, "confirm", place=approval.thread.place))
    await h.engine.wait_idle()

    starts = [c for c in surface.streams if c.kind == "start"]
    assert len(starts) == 2 and surface.calls.index(starts[1]) > render
    assert surface.final_texts() == ["I'll delete a.txt now.", "Deleted a.txt."]
    assert surface.steps == []  # the approved call is shown by its approval, not as a tool step
    # The resume names the approved call at once (no "thinking…" it would replace), then thinks about its result.
    assert surface.statuses[paused_statuses:] == [running("delete_file"), THINKING, None]
    assert h.tools.executed == [("delete_file", {"path": "a.txt"})]


async def test_a_call_that_needs_no_approval_shows_one_masked_line_and_its_status(harnesses, llm):
    @tool(confirmation_default="never")
    def lookup_token(name: str, api_key: str) -> str:
        """Look up a token.

        :param name: Which service.
        :param api_key: The key to use.
        """
        return f"token for {name} (key {api_key}): ghp_{'a' * 36}\n" + "x" * 500

    llm.enqueue_tool_calls([("lookup_token", {"name": "db", "api_key": "k-12345678"})])
    llm.enqueue_text("Found it.")
    h = await open_streaming(harnesses, llm, extra_tools=[lookup_token])

    await h.say("get the db token")

    [step] = h.surface.steps
    assert step.line.startswith("lookup_token(name=db, api_key=••••••) → token for db (key ••••••): ••••••")
    assert "k-12345678" not in step.line and "ghp_" not in step.line
    assert len(step.line) <= 200 and "\n" not in step.line
    assert h.surface.statuses == [THINKING, running("lookup_token"), THINKING, None]
    assert h.surface.final_texts() == ["Found it."]


async def test_a_message_is_updated_at_most_once_per_interval(harnesses, llm):
    llm.enqueue_text(LONG_ANSWER)
    h = await open_streaming(harnesses, llm, interval=0.1)

    await h.say("write a lot")

    calls = h.surface.streams
    assert sum(c.kind == "append" for c in calls) >= 2
    assert min(gaps(calls)) >= 0.095
    assert h.surface.final_texts() == [LONG_ANSWER]


async def test_a_429_in_the_middle_of_a_stream_holds_the_next_update_for_its_retry_after(harnesses, llm):
    llm.enqueue_text(LONG_ANSWER)
    surface = StreamingRecordingSurface(fail_appends={2: StreamRateLimited(0.3)})
    h = await open_streaming(harnesses, llm, surface=surface, interval=0.02)

    await h.say("write a lot")

    calls = surface.streams
    refused = next(c for c in calls if c.kind == "refused")
    after = calls[calls.index(refused) + 1]
    assert after.kind in ("append", "finish") and after.at - refused.at >= 0.29
    assert surface.final_texts() == [LONG_ANSWER]
    assert surface.replies == []


async def test_a_stream_that_breaks_is_finished_with_the_whole_answer(harnesses, llm):
    llm.enqueue_text(LONG_ANSWER)
    surface = StreamingRecordingSurface(fail_appends={1: RuntimeError("message_not_in_streaming_state")})
    h = await open_streaming(harnesses, llm, surface=surface)

    await h.say("write a lot")

    assert [c.kind for c in surface.streams if c.kind != "start"][0] == "refused"
    assert sum(c.kind == "append" for c in surface.streams) == 0  # never touched again after it broke
    assert surface.final_texts() == [LONG_ANSWER]
    assert surface.replies == []


async def test_a_stream_that_cannot_be_finished_falls_back_to_one_message_with_the_whole_answer(harnesses, llm):
    llm.enqueue_text(LONG_ANSWER)
    surface = StreamingRecordingSurface(fail_finish=RuntimeError("channel_not_found"))
    h = await open_streaming(harnesses, llm, surface=surface)

    await h.say("write a lot")

    assert [r.text for r in surface.replies] == [LONG_ANSWER]


async def test_a_failure_in_the_middle_of_a_stream_ends_it_with_the_failure_notice(harnesses, llm):
    llm.enqueue(CutStreamResponse("Checking the disks of every server now", after=3))
    h = await open_streaming(harnesses, llm)

    await h.say("check the disks")

    [final] = h.surface.final_texts()
    assert final.startswith("Checking the disks\n\nSorry, the language model could not answer")
    assert h.surface.replies == []
    runs = await h.engine.storage.runs.list_by_status("failed")
    assert len(runs) == 1


async def test_stop_ends_the_run_after_the_running_tool_which_is_never_interrupted(harnesses, llm):
    job = BlockingBackup()

    llm.enqueue_tool_calls([("backup", {"target": "orders"})], text="Backing up orders first.")
    llm.enqueue_text("Now I will also back up everything else.")
    h = await open_streaming(harnesses, llm, extra_tools=[job.tool])
    working = asyncio.create_task(h.say("back up orders, then the rest"))
    await bounded(job.started.wait())
    run = await h.engine.storage.runs.active_for_thread(h.thread().key)

    with pytest.raises(NotAllowedToStop):
        await h.engine.stop_run(run.run_id, OTHER)
    assert await h.engine.stop_run(run.run_id, REQUESTER) == "Stopping after the current step."
    assert not working.done()
    job.release.set()
    await bounded(working)

    assert job.finished == ["orders"]  # the tool ran to its end
    assert len(llm.requests) == 1  # and the model was not called again
    assert (await h.run_of(run.run_id)).status == "stopped"
    [entry] = await h.audit("stopped")
    assert entry.actor == REQUESTER and entry.details["usage"]["total_tokens"] == 28
    assert h.surface.final_texts() == ["Backing up orders first."]
    assert [r.text for r in h.surface.replies] == ["(Stopped.)"]
    assert "There is nothing to stop" in await h.engine.stop_run(run.run_id, REQUESTER)


async def test_an_answer_that_comes_within_one_interval_is_posted_once_without_a_stream(harnesses, llm):
    llm.enqueue_text("Quick answer.")
    h = await open_streaming(harnesses, llm, interval=30)

    await h.say("quick?")

    assert h.surface.streams == []
    assert [r.text for r in h.surface.replies] == ["Quick answer."]


async def test_stop_asked_through_another_process_ends_the_run_after_its_running_tool(harnesses, llm):
    job = BlockingBackup()
    llm.enqueue_tool_calls([("backup", {"target": "orders"})])
    llm.enqueue_text("never asked")
    h = await open_streaming(harnesses, llm, extra_tools=[job.tool])
    working = asyncio.create_task(h.say("back up orders"))
    await bounded(job.started.wait())
    run = await h.engine.storage.runs.active_for_thread(h.thread().key)
    other = await harnesses.reopen(h)  # another replica on the same database

    assert await other.engine.stop_run(run.run_id, REQUESTER) == "Stopping after the current step."
    job.release.set()
    await bounded(working)

    assert job.finished == ["orders"] and len(llm.requests) == 1
    assert (await h.run_of(run.run_id)).status == "stopped"
    assert [e.actor for e in await h.audit("stopped")] == [REQUESTER]
